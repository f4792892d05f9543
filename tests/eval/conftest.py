"""Fixtures of the eval command tests: a tiny random HF model, a 5-problem set, one finished reference run.

The reference run is made once per session and copied by the tests that change a run folder."""

from __future__ import annotations

import shutil

import pytest
from eval_settings import PROBLEMS, eval_args

from nemo_lead.cli import main
from nemo_lead.models import write_tiny_model


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
