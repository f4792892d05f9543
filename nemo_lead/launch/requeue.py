"""Requeue the current SLURM job (after a SIGUSR1 warning and a checkpoint), so it resumes from its run folder."""

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
    out = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        print(f"[nemo-lead] scontrol requeue {job} failed: {out.stderr.strip()}", file=sys.stderr, flush=True)
        return False
    print(f"[nemo-lead] job {job} requeued; it resumes from the run folder", file=sys.stderr, flush=True)
    return True
