"""The job's end (nemo_lead.runtime.deadline): when the next step and a checkpoint no longer fit."""

import pytest

from nemo_lead.runtime.deadline import DEFAULT_MARGIN_S, Deadline, requeue_or_advise


def test_from_the_environment():
    assert Deadline.from_env({}) is None
    assert Deadline.from_env({"SLURM_JOB_END_TIME": "0"}) is None  # no time limit
    d = Deadline.from_env({"SLURM_JOB_END_TIME": "1000"})
    assert (d.end, d.margin) == (1000.0, DEFAULT_MARGIN_S)
    assert Deadline.from_env({"SLURM_JOB_END_TIME": "1000", "NEMO_LEAD_DEADLINE_MARGIN_S": "30"}).margin == 30
    with pytest.raises(ValueError, match="SLURM_JOB_END_TIME='soon'"):
        Deadline.from_env({"SLURM_JOB_END_TIME": "soon"})


def test_the_longest_step_and_the_last_save_must_fit_before_the_end_less_the_margin():
    d = Deadline(end=10_000.0, margin=300.0)
    d.step_done(4400.0)
    d.step_done(4000.0)  # the longest step counts
    d.saved(200.0)
    # 5,000 + 4,400 + 200 = 9,600 > 9,700? no: it fits; at 5,101 it no longer does (9,701 > 9,700)
    assert not d.next_would_pass(5000.0) and not d.next_would_pass(5100.0)
    assert d.next_would_pass(5101.0)
    assert d.why(5101.0, 7).startswith("stopping before step 8: the job ends in 4,899 s and a step takes up to "
                                       "4,400 s, a checkpoint 200 s, with a margin of 300 s")


def test_an_eval_chunk_and_the_stores_flush_are_named_as_such():
    d = Deadline(end=1_000.0, margin=0.0)
    d.step_done(300.0)
    d.saved(2.0)
    assert not d.next_would_pass(698.0) and d.next_would_pass(698.5)  # 698.5 + 300 + 2 > 1,000
    assert d.why(700.0, 2, unit="chunk", save="the store's flush") == (
        "stopping before chunk 3: the job ends in 300 s and a chunk takes up to 300 s, the store's flush 2 s, "
        "with a margin of 0 s (SLURM_JOB_END_TIME)")


def test_requeue_or_advise(tmp_path, monkeypatch):
    said: list[str] = []
    assert requeue_or_advise(said.append, {}) is True  # outside SLURM: say how to resume
    assert said == ["run the same command again (in a job with more time) to resume"]
    calls = tmp_path / "calls"
    for name, body in (("ok", f'echo "$@" >> {calls}'), ("refuses", "echo 'Job is not requeueable' >&2; exit 1")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "scontrol").write_text(f"#!/bin/sh\n{body}\n")
        (tmp_path / name / "scontrol").chmod(0o755)
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("PATH", str(tmp_path / "ok"))
    assert requeue_or_advise(said.append, {"SLURM_JOB_ID": "77"}) is True and calls.read_text() == "requeue 77\n"
    monkeypatch.setenv("PATH", str(tmp_path / "refuses"))
    assert requeue_or_advise(said.append, {"SLURM_JOB_ID": "77"}) is False  # the command must then exit 1
    assert len(said) == 1
