"""`nemo-lead eval`: the paper's evaluation of a HF folder or a nemo-lead checkpoint, resumable.

    nemo-lead eval --model DIR --data aime24,aime25 --samples 32 --temperature 0.6 --top-p 0.95 --max-tokens 14336
    nemo-lead eval --model RUN/checkpoints/step_000100 --max-tokens 8192 --out evals/lead-7b --tp 2
    nemo-lead eval --compare evals/base evals/lead-7b [--out table.md]

Everything that can be wrong (model folder, tokenizer, dataset names and files, prompt lengths, layout,
a run folder made with other settings) is checked here, in the starting process, before any rank starts
or any weights load. Then the job (runner.py) runs here, on tp x pp local ranks (a single process with
tp x pp > 1 re-launches itself, as `generate` and `convert` do), or on the ranks torchrun / srun gave.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from nemo_lead.eval.config import EvalConfig
from nemo_lead.eval.report import compare_markdown
from nemo_lead.eval.runner import check_prompt_lengths, eval_rank, prepare
from nemo_lead.eval.store import SampleStore
from nemo_lead.parallel import check_layout, detect_launch, model_shape
from nemo_lead.parallel.local import run_command
from nemo_lead.plan.check import resolve_stage_engine_kind
from nemo_lead.runtime.tracking import import_wandb


def _preflight(cfg: EvalConfig) -> None:
    prep = prepare(cfg)
    launch = detect_launch(os.environ)
    check_layout(max(launch.world_size, cfg.tp * cfg.pp), cfg.tp, cfg.pp, **model_shape(prep.source.hf_config))
    check_prompt_lengths(cfg, prep)
    if launch.rank == 0:
        SampleStore.open(prep.out, prep.settings, write=False, problems=prep.datasets)
        if cfg.wandb.enabled:
            import_wandb()  # a missing client fails here, before the model loads


def run_compare(runs: list[str], out: str | None) -> int:
    try:
        text = compare_markdown(runs)
    except (ValueError, OSError) as e:
        print(f"nemo-lead eval: {e}", file=sys.stderr)
        return 2
    print(text, end="")
    if out:
        Path(out).write_text(text)
    return 0


def run_eval(cfg: EvalConfig) -> int:
    """CLI runner: `--compare` prints the table of finished runs; otherwise evaluate (see the module doc)."""
    if cfg.compare:
        return run_compare(list(cfg.compare), cfg.out)
    cfg = resolve_stage_engine_kind(cfg, lambda: tuple(len(v) for v in prepare(cfg).datasets.values()))
    return run_command("eval", eval_rank, (cfg,), ranks=cfg.tp * cfg.pp, preflight=lambda: _preflight(cfg))
