"""`nemo-lead eval` on 2 ranks: TP2 (one model split over both) and DP2 (two replicas generating different
chunks at once) write the same samples as the single-process reference run, from rank 0 only."""

from __future__ import annotations

import json
import os

from distributed import run_distributed
from eval_settings import MAX_TOKENS, PER_CALL, N, eval_args

from nemo_lead.cli import main, resolve_config


def _job(configs) -> None:
    import torch.distributed as dist

    from nemo_lead.eval.runner import eval_rank

    # our own process group, so that each eval's init/destroy_parallel reuses it (two layouts in one job)
    dist.init_process_group("gloo", init_method=f"tcp://{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    try:
        for cfg in configs:
            eval_rank(cfg)
    finally:
        dist.destroy_process_group()


def _lines(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]


def test_tp2_and_dp2_give_the_reference_samples(tiny, problems_file, reference_run, tmp_path):
    def config(out, tp):
        return resolve_config("eval", [], [
            f"model={tiny}", f"data={problems_file}", f"out={out}", f"sampling.n={N}", f"sampling.max_tokens={MAX_TOKENS}",
            f"problems_per_call={PER_CALL}", "verify.workers=1", "budgets=[4,8,12]", "report_budgets=[8]", f"tp={tp}"])

    tp2, dp2 = tmp_path / "tp2", tmp_path / "dp2"
    run_distributed(_job, 2, [config(tp2, 2), config(dp2, 1)], timeout=180)
    key = lambda r: (r["problem_id"], r["sample"])  # noqa: E731
    reference = sorted(_lines(reference_run), key=key)
    for out in (tp2, dp2):
        lines = _lines(out)
        assert len(lines) == len(reference)  # one writer: no sample twice
        assert sorted(lines, key=key) == reference
        assert json.loads((out / "summary.json").read_text())["datasets"] == \
            json.loads((reference_run / "summary.json").read_text())["datasets"]


def test_cli_relaunches_itself_on_tp_x_pp_local_ranks(tiny, problems_file, reference_run, tmp_path, capfd):
    out = tmp_path / "cli_tp2"
    assert main(eval_args(tiny, problems_file, out, "--tp", "2")) == 0
    assert "[eval] starting 2 local ranks" in capfd.readouterr().err
    assert _lines(out) == _lines(reference_run)  # same samples, same order (chunks are written in order)
