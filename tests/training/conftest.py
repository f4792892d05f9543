"""Fixtures of the end-to-end loop tests (test_loops.py, test_rl_loop.py, test_rl_tp2.py): a tiny model and
task, the reference SFT run whose checkpoint the RL runs start from, and the reference RL run, also used by
test_engine_layout_runs.py. Session-scoped: computed once per pytest process (once per xdist worker), shared
by the files; the tests write their own runs beside them (distinct folder names) and never into them."""

from __future__ import annotations

import json
import random

import pytest
from loops_common import problem_row, rl_args, run_cli, sft_args

from nemo_lead.models import write_tiny_model


@pytest.fixture(scope="session")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("loops")
    model = write_tiny_model(root / "model", family="qwen2", seed=0)
    rng = random.Random(0)
    problems = [problem_row(rng, i) for i in range(240)]
    traces = [{**p, "response": f"{p['problem']}={p['answer']}\n</think>\n\n\\boxed{{{p['answer']}}}"} for p in problems[:200]]
    for name, rows in (("traces.jsonl", traces), ("problems.jsonl", problems[:200]), ("val.jsonl", problems[200:])):
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root, model


@pytest.fixture(scope="session")
def sft_run(data):
    """The reference SFT run (TP1, uninterrupted); its final checkpoint is the RL runs' starting point."""
    root, model = data
    out = root / "sft_a"
    res = run_cli(sft_args(root, model, out, steps=80, extra=["--save-every", "40"]))
    assert res.returncode == 0, res.stderr
    return out


@pytest.fixture(scope="session")
def rl_run(data, sft_run):
    root, _ = data
    out = root / "rl_a"
    res = run_cli(rl_args(root, sft_run / "checkpoints" / "step_000080", out))
    assert res.returncode == 0, res.stderr
    return out
