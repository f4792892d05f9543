"""`nemo-lead eval` and the distill stage before the job's end (nemo_lead.runtime.deadline): a call whose
measured time would pass SLURM_JOB_END_TIME less the margin is not started; what was written is kept, the
job is requeued (a stand-in `scontrol` records the call), the command exits 0, and the rerun generates only
the missing samples and ends equal to an uninterrupted run. In-process, on the tiny model of conftest.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from eval_settings import N, eval_args

from nemo_lead.cli import main
from nemo_lead.config.loading import load_config
from nemo_lead.eval.config import EvalConfig
from nemo_lead.pipeline.config import Stage
from nemo_lead.pipeline.recipe import StageSpec
from nemo_lead.pipeline.stages import StageStopped, run_distill

DELAY_S = 3.0  # the test hook's seconds per call; the job "ends" two calls after the start


def samples(folder: Path) -> dict:
    rows = [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]
    return {(r["dataset"], r["problem_id"], r["sample"]): r for r in rows}


@pytest.fixture
def scontrol(tmp_path, monkeypatch) -> Path:
    """A stand-in `scontrol` on PATH that appends its arguments to a file (the requeue request)."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "scontrol.calls"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{Path('/usr/bin')}:{Path('/bin')}")
    return calls


def test_eval_stops_before_a_call_that_would_pass_the_jobs_end(tiny, problems_file, reference_run, tmp_path,
                                                                 scontrol, monkeypatch, capsys):
    out = tmp_path / "cut"
    # before call 1: 0 s measured, it starts (the start-up takes well under 2 x DELAY_S); after it: now is
    # at least start + DELAY_S and a call takes >= DELAY_S, so call 2 would end past start + 2 x DELAY_S
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(time.time() + 2 * DELAY_S))
    monkeypatch.setenv("NEMO_LEAD_DEADLINE_MARGIN_S", "0")
    monkeypatch.setenv("NEMO_LEAD_TEST_STEP_DELAY_S", str(DELAY_S))
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert main(eval_args(tiny, problems_file, out)) == 0
    err = capsys.readouterr().err
    assert "stopping before call 2: the job ends in" in err and "(1 of 3 pending calls of this round done)" in err
    assert f"{2 * N} samples are in {out}" in err
    assert scontrol.read_text() == "requeue 4242\n"
    kept = samples(out)
    assert sorted({k[1] for k in kept}) == ["a", "b"] and len(kept) == 2 * N  # call (a, b) only
    assert not (out / "summary.json").exists()

    # the distill stage on the same folder, at the job's end: only the first pending call runs (every attempt
    # makes progress, as in the training loops) and the stage is stopped (status 0, resumable) without writing
    # traces; in a job without an end it finishes the samples and goes on to pick the traces (the random tiny
    # model solves nothing, which the stage reports)
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(time.time()))
    monkeypatch.delenv("NEMO_LEAD_TEST_STEP_DELAY_S")
    stage = Stage(StageSpec("distill", "distill", {}), tmp_path / "stage",
                  load_config(EvalConfig, [out / "config.yaml"], []))
    stage.folder.mkdir()
    with pytest.raises(StageStopped, match=r"stopped with 3 samples to go") as stopped:
        run_distill(stage)
    assert stopped.value.status == 0 and not (stage.folder / "traces.jsonl").exists()
    assert scontrol.read_text() == "requeue 4242\n" * 2
    assert len(samples(out)) == 4 * N  # call (c, d) too

    for name in ("SLURM_JOB_END_TIME", "SLURM_JOB_ID"):
        monkeypatch.delenv(name)
    with pytest.raises(ValueError, match="the teacher solved none of the 5 problems"):
        run_distill(stage)
    for name in ("samples.jsonl", "summary.json"):  # the resumed run equals the uninterrupted one, byte for byte
        assert (out / name).read_bytes() == (reference_run / name).read_bytes(), name
