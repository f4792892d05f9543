"""The job's end (nemo_lead.runtime.deadline): when the next step and a checkpoint no longer fit."""

import pytest

from nemo_lead.runtime.deadline import DEFAULT_MARGIN_S, Deadline


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
