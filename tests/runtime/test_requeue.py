"""`requeue_current_job` against a stand-in `scontrol` whose answers the test sets: SLURM's requeue ends the
job's processes, scontrol included, often before scontrol prints SLURM's answer. A requeue that SLURM
accepted is reported as one whatever happened to scontrol; one that it did not is a failure naming why.
(The same race on a real SLURM: tests/launch/test_slurm_jobs.py's preempted job, whose scontrol answers
slowly every time.)"""

from __future__ import annotations

import pytest

from nemo_lead.runtime import requeue
from nemo_lead.runtime.requeue import requeue_current_job, requeued_since

# `requeue` raises the job's restart count in STATE (as slurmctld does when it accepts one) unless told to
# refuse, then ends as told; `show job -o` prints the record
FAKE = """#!/bin/bash
state={state}
if [ "$1" = requeue ]; then
    [ "{accept}" = yes ] && echo $(( $(cat "$state") + 1 )) > "$state"
    {then}
fi
if [ "$1 $2 $3" = "show job -o" ]; then
    echo "JobId=$4 JobName=sft JobState=$([ "{accept}" = yes ] && echo COMPLETING || echo RUNNING) Requeue=1 Restarts=$(cat "$state") BatchFlag=1"
    exit 0
fi
exit 9
"""


def fake_scontrol(tmp_path, monkeypatch, accept: bool, then: str, restarts: int = 0):
    state = tmp_path / "restarts"
    state.write_text(f"{restarts}\n")
    path = tmp_path / "bin" / "scontrol"
    path.parent.mkdir(exist_ok=True)
    path.write_text(FAKE.format(state=state, accept="yes" if accept else "no", then=then))
    path.chmod(0o755)
    monkeypatch.setenv("PATH", f"{path.parent}:/usr/bin:/bin")
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.delenv("SLURM_RESTART_COUNT", raising=False)
    return state


@pytest.mark.parametrize("then, how", [
    ("kill -TERM $$", "scontrol requeue: ended by signal 15 before it answered"),  # the race seen in CI
    ("exit 1", "scontrol requeue: status 1, no message"),
    ("exec sleep 30", "scontrol requeue: no answer within 1 s"),  # slower than the caller waits
])
def test_a_requeue_slurm_accepted_is_reported_as_one(tmp_path, monkeypatch, capsys, then, how):
    monkeypatch.setattr(requeue, "ASK_TIMEOUT_S", 1)
    fake_scontrol(tmp_path, monkeypatch, accept=True, then=then)
    assert requeue_current_job() is True
    err = capsys.readouterr().err
    assert err == (f"[nemo-lead] job 77 requeued ({how}; SLURM shows JobState=COMPLETING Restarts=1); "
                   "it resumes from the run folder\n")


def test_a_plain_answer_is_taken_as_it_is(tmp_path, monkeypatch, capsys):
    fake_scontrol(tmp_path, monkeypatch, accept=True, then="exit 0")
    assert requeue_current_job() is True
    assert capsys.readouterr().err == "[nemo-lead] job 77 requeued; it resumes from the run folder\n"


def test_a_refused_or_lost_requeue_is_a_failure_naming_why(tmp_path, monkeypatch, capsys):
    fake_scontrol(tmp_path, monkeypatch, accept=False, then="echo 'Requested operation is presently disabled' >&2; exit 1")
    assert requeue_current_job() is False
    assert capsys.readouterr().err == ("[nemo-lead] scontrol requeue 77 failed: status 1: Requested operation is "
                                       "presently disabled (SLURM shows JobState=RUNNING Restarts=0)\n")
    # killed, but by something else (the job's end): the record shows no new requeue
    fake_scontrol(tmp_path, monkeypatch, accept=False, then="kill -TERM $$")
    assert requeue_current_job() is False
    assert "ended by signal 15 before it answered (SLURM shows JobState=RUNNING Restarts=0)" in capsys.readouterr().err


def test_restarts_are_counted_from_this_attempt(tmp_path, monkeypatch, capsys):
    # the third attempt (SLURM_RESTART_COUNT=2): Restarts=2 are the earlier requeues, not this one
    fake_scontrol(tmp_path, monkeypatch, accept=False, then="kill -TERM $$", restarts=2)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert requeue_current_job() is False
    fake_scontrol(tmp_path, monkeypatch, accept=True, then="kill -TERM $$", restarts=2)
    monkeypatch.setenv("SLURM_RESTART_COUNT", "2")
    assert requeue_current_job() is True
    assert "Restarts=3" in capsys.readouterr().err
    assert requeued_since({"Restarts": "3"}, 2) and not requeued_since({"Restarts": "2"}, 2)
    assert not requeued_since({}, 0) and not requeued_since({"Restarts": "x"}, 0)


def test_no_record_of_the_job(tmp_path, monkeypatch, capsys):
    path = tmp_path / "scontrol"
    path.write_text("#!/bin/sh\necho 'Invalid job id specified' >&2\nexit 1\n")
    path.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    assert requeue_current_job() is False
    assert capsys.readouterr().err == ("[nemo-lead] scontrol requeue 77 failed: status 1: Invalid job id specified "
                                       "(SLURM shows no record of the job)\n")
