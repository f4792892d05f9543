"""Distillation in rounds and a killed sampling job, on the megatron engine (CPU, the tiny model of conftest.py).

- keep: first in rounds (sample 0, then samples 1 .. n-1 only where sample 0 is wrong) keeps the traces of a
  run drawing all n samples at once with the same seed, byte for byte; its report agrees on what it must
  (problems, traces, the first try's solve rate) and counts only what it drew: every line it wrote is the
  one-round run's line for the same sample, and round 2 drew exactly the n - 1 samples of the problems
  sample 0 left unsolved. The random tiny model solves nothing, so a stand-in grade marks a response correct
  when the sum of its characters' codes is divisible by 3 (about a third of them), deterministically.
- `nemo-lead eval` killed with SIGKILL in its second round, then run again: the folder ends with the same
  bytes as an uninterrupted run with other call sizes, and the rerun drew at most one call more than the
  killed run had stored (the bounded loss of a kill).
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import time
from pathlib import Path

import cli_process
import pytest

from nemo_lead.cli import main
from nemo_lead.config.loading import load_config
from nemo_lead.eval.config import EvalConfig
from nemo_lead.eval.runner import Grader
from nemo_lead.pipeline.config import Stage
from nemo_lead.pipeline.recipe import StageSpec
from nemo_lead.pipeline.stages import run_distill

N, MAX_TOKENS, PROBLEMS = 4, 12, 10


@pytest.fixture(scope="module")
def ten_problems(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("rounds_data") / "ten.jsonl"
    path.write_text("".join(json.dumps({"id": f"p{i}", "problem": f"{i}+{i}", "answer": str(2 * i)}) + "\n"
                            for i in range(PROBLEMS)))
    return path


def third_correct(monkeypatch) -> None:
    """Grades whose `correct` is (sum of the response's character codes) % 3 == 0."""
    real = Grader._grade

    def grade(self, texts, golds, finished):
        return [dataclasses.replace(g, correct=sum(map(ord, t)) % 3 == 0) for g, t in zip(real(self, texts, golds, finished), texts)]

    monkeypatch.setattr(Grader, "_grade", grade)


def _settings(tiny, data, out: Path, *extra: str) -> list[str]:
    return [f"model={tiny}", f"data={data}", f"out={out}", f"sampling.n={N}", f"sampling.max_tokens={MAX_TOKENS}",
            "verify.workers=1", "progress=none", "plot=false", *extra]


def _distill(tiny, data, folder: Path, *extra: str) -> Path:
    cfg = load_config(EvalConfig, [], _settings(tiny, data, folder / "samples", *extra))
    stage = Stage(StageSpec("distill", "distill", {}), folder, cfg, {"keep": "first"})
    folder.mkdir(parents=True, exist_ok=True)
    run_distill(stage)
    return folder


def _lines(path: Path) -> dict:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    return {(r["problem_id"], r["sample"]): r for r in rows}


def test_rounds_keep_the_one_round_traces_and_draw_only_for_unsolved_problems(tiny, ten_problems, tmp_path,
                                                                             monkeypatch):
    third_correct(monkeypatch)
    one = _distill(tiny, ten_problems, tmp_path / "one", "rounds=[]", "call_sequences=64")
    rounds = _distill(tiny, ten_problems, tmp_path / "rounds", "rounds=[1]", "call_sequences=3")
    assert (one / "traces.jsonl").read_bytes() == (rounds / "traces.jsonl").read_bytes()
    all_n, drawn = _lines(one / "samples" / "samples.jsonl"), _lines(rounds / "samples" / "samples.jsonl")
    assert all(all_n[key] == row for key, row in drawn.items())  # the same sample, line for line
    solved_first = {pid for (pid, s), r in all_n.items() if s == 0 and r["correct"]}
    assert 0 < len(solved_first) < PROBLEMS  # the stand-in grade solves some problems at the first try
    assert set(drawn) == {(f"p{i}", 0) for i in range(PROBLEMS)} | {
        (f"p{i}", s) for i in range(PROBLEMS) if f"p{i}" not in solved_first for s in range(1, N)}
    a, b = (json.loads((d / "distill.json").read_text()) for d in (one, rounds))
    for key in ("problems", "traces", "solve_rate", "keep", "first_try_solved", "first_try_solve_rate"):
        assert a[key] == b[key], key
    assert a["first_try_solved"] == len(solved_first) and a["samples"] == PROBLEMS * N
    unsolved = PROBLEMS - len(solved_first)
    assert b["samples"] == PROBLEMS + unsolved * (N - 1) == len(drawn)
    assert b["tokens"] == sum(r["tokens"] for r in drawn.values()) < a["tokens"]
    assert [(r["samples"], r["problems"], r["drawn"], r["solved"]) for r in b["rounds"]] == [
        ([0, 0], PROBLEMS, PROBLEMS, len(solved_first)), ([1, N - 1], unsolved, unsolved * (N - 1), b["traces"] - len(solved_first))]
    assert [(r["samples"], r["drawn"]) for r in a["rounds"]] == [([0, N - 1], PROBLEMS * N)]
    summary = json.loads((rounds / "samples" / "summary.json").read_text())
    assert summary["rounds"] == [1, N - 1] and summary["datasets"]["ten"]["samples"] == PROBLEMS  # sample 0 scored


def test_a_killed_sampling_job_resumes_to_the_same_bytes(tiny, ten_problems, tmp_path, monkeypatch, capsys):
    """SIGKILL in round 2 (the calls are slowed by the test hook, so the kill lands between two of them or in
    one), then a rerun: the files of an uninterrupted run with other calls; the killed run had stored whole
    calls only, and the rerun drew exactly the samples it had not stored (so a kill loses the call in flight)."""
    from nemo_lead.generation.megatron_engine.engine import MegatronEngine

    reference = tmp_path / "reference"
    assert main(["eval", *_settings(tiny, ten_problems, reference, "rounds=[1]", "call_sequences=64")]) == 0
    killed = tmp_path / "killed"
    env = {**os.environ, "NEMO_LEAD_TEST_STEP_DELAY_S": "0.4", "OMP_NUM_THREADS": "1"}
    proc = cli_process.CLIProcess(["eval", *_settings(tiny, ten_problems, killed, "rounds=[1]", "call_sequences=3")],
                                  env=env)
    samples, deadline = killed / "samples.jsonl", time.monotonic() + 240
    try:
        while proc.poll() is None and time.monotonic() < deadline:  # round 1 (10 samples) and two calls of round 2
            if samples.is_file() and samples.read_text().count("\n") >= PROBLEMS + 2 * (N - 1):
                proc.kill_group()
                break
            time.sleep(0.01)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        proc.close()
    stored = samples.read_text().count("\n")
    total = PROBLEMS * N  # the random tiny model solves nothing: round 2 draws for every problem
    assert PROBLEMS + 2 * (N - 1) <= stored < total and (stored - PROBLEMS) % (N - 1) == 0  # whole calls only
    drawn: list[int] = []
    real = MegatronEngine.generate

    def counting(self, prompts, params, *args, **kwargs):
        drawn.append(len(prompts) * params.n)
        return real(self, prompts, params, *args, **kwargs)

    monkeypatch.setattr(MegatronEngine, "generate", counting)
    capsys.readouterr()
    assert main(["eval", *_settings(tiny, ten_problems, killed, "rounds=[1]", "call_sequences=3"), "progress=lines"]) == 0
    assert f"{stored} samples already in" in capsys.readouterr().err and sum(drawn) == total - stored
    for name in ("samples.jsonl", "summary.json", "run.json"):
        assert (killed / name).read_bytes() == (reference / name).read_bytes(), name
