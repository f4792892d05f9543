"""Requeue the current SLURM job (after a SIGUSR1 warning and a checkpoint), so it resumes from its run folder.

`scontrol requeue` needs a job submitted with `--requeue` (the scripts of `nemo-lead submit` are). The job
keeps its id, is stopped (SIGTERM, then SIGKILL after KillWait), returns to the queue and runs its batch
script again from the top; SLURM makes it eligible again after a short delay (the credential lifetime,
120 s by default) and counts the restarts in SLURM_RESTART_COUNT.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys


def requeue_current_job() -> bool:
    """`scontrol requeue $SLURM_JOB_ID`; True when SLURM accepted it. Prints why when it did not."""
    job = os.environ.get("SLURM_JOB_ID")
    if not job or shutil.which("scontrol") is None:
        print("[nemo-lead] not requeued: no SLURM job id or no scontrol on PATH", file=sys.stderr, flush=True)
        return False
    try:
        out = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as e:
        print(f"[nemo-lead] scontrol requeue {job} failed: {e}", file=sys.stderr, flush=True)
        return False
    if out.returncode != 0:
        print(f"[nemo-lead] scontrol requeue {job} failed: {out.stderr.strip()}", file=sys.stderr, flush=True)
        return False
    print(f"[nemo-lead] job {job} requeued; it resumes from the run folder", file=sys.stderr, flush=True)
    return True
