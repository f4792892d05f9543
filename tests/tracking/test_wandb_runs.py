"""W&B on the commands themselves (offline, a tiny model): `nemo-lead sft` and `rl` log metrics.jsonl's
scalars, the config and (rl) the validation table; rerunning the same `rl` command with more steps continues
the same W&B run; `nemo-lead eval` logs its summary table."""

from __future__ import annotations

import json
import random

import pytest
from wandb_files import read_offline_runs

from nemo_lead.cli import main
from nemo_lead.models import write_tiny_model
from nemo_lead.runtime.tracking import read_run_id

pytestmark = pytest.mark.slow
WANDB = ["wandb.enabled=true", "wandb.mode=offline", "wandb.project=tests", "progress=none", "prompt.suffix=''"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    pytest.importorskip("wandb", reason="the optional extra nemo-lead[wandb] is not installed")
    root = tmp_path_factory.mktemp("wandb_runs")
    model = write_tiny_model(root / "model", family="qwen2", seed=0)
    pairs = [random.Random(i).choices(range(10), k=2) for i in range(24)]
    problems = [{"id": f"p{i}", "problem": f"{a}+{b}", "answer": str(a + b)} for i, (a, b) in enumerate(pairs)]
    answer = "{problem}={answer}\n</think>\n\n\\boxed{{{answer}}}"
    files = {"traces.jsonl": [{**p, "response": answer.format(**p)} for p in problems],
             "problems.jsonl": problems[:16], "val.jsonl": problems[16:]}
    for name, rows in files.items():
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root, model


def _numeric(row: dict) -> dict:
    return {k: v for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _logged(run) -> list[dict]:
    return [{k: v for k, v in h.items() if not k.startswith("_")} for h in run.history if "loss" in h]


def test_rl_logs_scalars_config_validation_and_resumes_the_same_run(files, tmp_path):
    root, model = files
    out = tmp_path / "rl"
    args = ["rl", "--model", str(model), "--data", str(root / "problems.jsonl"), "--val-data", str(root / "val.jsonl"),
            "--out", str(out), "--prompts-per-step", "2", "--n", "2", "--max-tokens", "8", "validation.every=2",
            "validation.n=1", "validation.max_tokens=8", "save_every=1", *WANDB]
    assert main([*args, "--steps", "2"]) == 0
    first_id = read_run_id(out)
    assert main([*args, "--steps", "3"]) == 0  # the same command, extended: a resumed run
    assert read_run_id(out) == first_id
    runs = read_offline_runs(out / "wandb")
    assert [r.run_id for r in runs] == [first_id, first_id]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [_logged(r) for r in runs] == [[_numeric(m) for m in metrics[:2]], [_numeric(metrics[2])]]
    assert runs[0].config["rollout"]["n"] == 2 and runs[0].config["wandb"]["mode"] == "offline"
    val = [json.loads(line) for line in (out / "val.jsonl").read_text().splitlines()]
    table = runs[1].table("validation")  # every validation so far: steps 0, 2 and the end
    assert [row[table["columns"].index("step")] for row in table["data"]] == [v["step"] for v in val] == [0, 2, 3]


def test_sft_and_eval_log_to_wandb(files, tmp_path):
    root, model = files
    sft = tmp_path / "sft"
    assert main(["sft", "--model", str(model), "--data", str(root / "traces.jsonl"), "--out", str(sft), "--steps", "2",
                 "global_batch=4", "data.max_seq_len=32", *WANDB]) == 0
    (run,) = read_offline_runs(sft / "wandb")
    metrics = [json.loads(line) for line in (sft / "metrics.jsonl").read_text().splitlines()]
    assert _logged(run) == [_numeric(m) for m in metrics] and run.config["global_batch"] == 4
    ev = tmp_path / "eval"
    assert main(["eval", "--model", str(model), "--data", str(root / "val.jsonl"), "--out", str(ev), "--n", "2",
                 "--max-tokens", "8", "plot=false", "verify.workers=1", *WANDB]) == 0
    (run,) = read_offline_runs(ev / "wandb")
    summary = json.loads((ev / "summary.json").read_text())["datasets"]
    (name, scores), = summary.items()
    table = run.table("eval/summary")
    row = dict(zip(table["columns"], table["data"][0]))
    assert row["row"] == name and row["pass@1"] == scores["pass@1"]
    assert next(h for h in run.history if f"{name}/pass@1" in h)[f"{name}/pass@1"] == scores["pass@1"]
