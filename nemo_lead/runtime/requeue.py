"""Requeue the current SLURM job (after a SIGUSR1 warning and a checkpoint), so it resumes from its run folder.

`scontrol requeue` needs a job submitted with `--requeue` (the scripts of `nemo-lead submit` are). The job
keeps its id, is stopped (SIGTERM, then SIGKILL after KillWait), returns to the queue and runs its batch
script again from the top; SLURM makes it eligible again after a short delay (the credential lifetime,
120 s by default) and counts the restarts in SLURM_RESTART_COUNT.

The requeue ends the job's processes, and the `scontrol` that asked for it is one of them: SLURM's SIGTERM
often reaches it before SLURM's answer does, so it dies of the signal with nothing printed although the job
was requeued. Its exit status therefore does not decide alone. When it is not 0 (killed, refused, or no
answer within a minute) the job's own record does: `scontrol show job` counts the requeues in `Restarts`,
which SLURM raises as it accepts one, so a count above this attempt's SLURM_RESTART_COUNT means the job is
queued again, and saying otherwise would send its user to submit a second copy.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from typing import Optional

ASK_TIMEOUT_S = 60  # scontrol's own limit on waiting for slurmctld is MessageTimeout (10 s by default)


def _say(msg: str) -> None:
    print(f"[nemo-lead] {msg}", file=sys.stderr, flush=True)


def job_record(scontrol: str, job: str, tries: int = 3) -> Optional[dict[str, str]]:
    """`scontrol show job -o JOB` as {key: value} (JobState, Restarts, ...); None when SLURM gave no record.
    A query ended by a signal (the job's own SIGTERM may still be on its way) is tried again."""
    for _ in range(tries):
        try:
            out = subprocess.run([scontrol, "show", "job", "-o", job], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0:
            return dict(re.findall(r"(\w+)=(\S*)", out.stdout))
        if out.returncode > 0:
            return None
    return None


def requeued_since(record: Mapping[str, str], restarts_before: int) -> bool:
    """Whether the job's record shows a requeue after this attempt started (`restarts_before`: its
    SLURM_RESTART_COUNT)."""
    try:
        return int(record.get("Restarts", "")) > restarts_before
    except ValueError:
        return False


def _status(code: int, stderr: str) -> str:
    if code < 0:
        return f"ended by signal {-code} before it answered"
    return f"status {code}: {stderr}" if stderr else f"status {code}, no message"


def requeue_current_job(env: Mapping[str, str] = os.environ) -> bool:
    """`scontrol requeue $SLURM_JOB_ID`; True when SLURM requeued the job (scontrol said so, or the job's
    record shows it, module docstring). Says what happened on stderr either way."""
    job = env.get("SLURM_JOB_ID")
    scontrol = shutil.which("scontrol", path=env.get("PATH"))
    if not job or scontrol is None:
        _say("not requeued: no SLURM job id or no scontrol on PATH")
        return False
    restarts_before = int(env.get("SLURM_RESTART_COUNT") or 0)
    try:
        done = subprocess.run([scontrol, "requeue", job], capture_output=True, text=True, timeout=ASK_TIMEOUT_S)
        if done.returncode == 0:
            _say(f"job {job} requeued; it resumes from the run folder")
            return True
        asked = _status(done.returncode, done.stderr.strip())
    except subprocess.TimeoutExpired:
        asked = f"no answer within {ASK_TIMEOUT_S} s"
    except OSError as e:
        asked = str(e)
    record = job_record(scontrol, job)
    if record is not None and requeued_since(record, restarts_before):
        _say(f"job {job} requeued (scontrol requeue: {asked}; SLURM shows JobState={record.get('JobState')} "
             f"Restarts={record.get('Restarts')}); it resumes from the run folder")
        return True
    seen = ("no record of the job" if record is None else
            f"JobState={record.get('JobState')} Restarts={record.get('Restarts')}")
    _say(f"scontrol requeue {job} failed: {asked} (SLURM shows {seen})")
    return False
