"""Fixtures of the eval command tests: a tiny random HF model, a 5-problem set, one finished reference run.

The reference run is made once per session and copied by the tests that change a run folder."""

from __future__ import annotations

import shutil

import pytest

from nemo_lead.cli import main
from nemo_lead.models import write_tiny_model

PROBLEMS = [("a", "1+1", "2"), ("b", "2+3", "5"), ("c", "7-4", "3"), ("d", "2*4", "8"), ("e", "9-9", "0")]
N, MAX_TOKENS, PER_CALL = 3, 12, 2  # 5 problems x 3 samples, in chunks (a, b), (c, d), (e)


def eval_args(model, data, out, *extra: str) -> list[str]:
    """`nemo-lead eval` arguments of the reference run (fp32 tiny model, small budget)."""
    return ["eval", "--model", str(model), "--data", str(data), "--out", str(out), "--n", str(N),
            "--max-tokens", str(MAX_TOKENS), f"problems_per_call={PER_CALL}", "verify_workers=1",
            "budgets=[4,8,12]", "report_budgets=[8]", *extra]


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("eval_model") / "tiny", "qwen2", seed=3)


@pytest.fixture(scope="session")
def problems_file(tmp_path_factory):
    import json

    path = tmp_path_factory.mktemp("eval_data") / "five.jsonl"
    path.write_text("".join(json.dumps({"id": i, "problem": p, "answer": a}) + "\n" for i, p, a in PROBLEMS))
    return path


@pytest.fixture(scope="session")
def reference_run(tiny, problems_file, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval_runs") / "reference"
    assert main(eval_args(tiny, problems_file, out)) == 0
    return out


@pytest.fixture
def run_copy(reference_run, tmp_path):
    """A copy of the reference run folder to modify."""
    return shutil.copytree(reference_run, tmp_path / "run")
