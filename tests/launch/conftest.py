"""A real one-node SLURM cluster for the launch tests (scripts/slurm_local.sh), started once per test session.

The script installs Debian's slurm-wlm and munge with apt-get when they are missing (root only), starts
munged, slurmctld and slurmd with a private configuration under a temporary folder, and stops them, with
any job still running, when the module's tests are done. Where SLURM cannot start (not root, no apt-get, no
package access) the tests that need it are skipped with the reason; under CI (CI=true) that is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm_local.sh"


@dataclass
class Cluster:
    state: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 60) -> str:
        for _ in range(3):  # a client killed by a signal (once seen: SIGPIPE on a busy machine) is tried again
            done = subprocess.run(list(args), env=self.env, capture_output=True, text=True, timeout=timeout)
            if done.returncode >= 0:
                break
            time.sleep(1)
        assert done.returncode == 0, f"{' '.join(args)}: status {done.returncode}: {done.stderr}\n{self.logs()}"
        return done.stdout

    def logs(self) -> str:
        """The last lines of the daemons' logs (for failure messages)."""
        parts = []
        for log in [*sorted((self.state / "log").glob("*.log")), self.state / "munge" / "munged.log"]:
            if log.is_file():
                parts.append(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-15:]))
        return "\n".join(parts)

    def job(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict (JobState, Restarts, ExitCode, ...)."""
        text = self.run("scontrol", "show", "job", job_id)
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait(self, job_id: str, timeout: float, until=None, log: Path | None = None) -> dict[str, str]:
        """Poll until `until(job)` (default: the job has ended); the job's last state. Cancels it on timeout,
        failing with the job's state, the last lines of its `log` (a job's output file) and the daemons'."""
        done = until or (lambda j: j["JobState"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL",
                                                     "OUT_OF_MEMORY", "PREEMPTED"))
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if done(job):
                return job
            if time.monotonic() > deadline:
                subprocess.run(["scancel", job_id], env=self.env, timeout=30)
                tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log and log.is_file() else ""
                pytest.fail(f"job {job_id} still {job['JobState']} after {timeout:.0f} s: {job}\n{tail}\n{self.logs()}")
            time.sleep(0.5)


def _unavailable(reason: str):
    if os.environ.get("CI") == "true":
        pytest.fail(f"SLURM is required under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")  # test_slurm_jobs.py and test_slurm_deadline.py share one cluster
def slurm() -> Cluster:
    if os.geteuid() != 0:
        _unavailable("the local SLURM cluster needs root (slurmd runs jobs as their users)")
    # munged runs as the munge user: the state folder must not sit below a private folder (pytest's tmp is 0700)
    state = Path(tempfile.mkdtemp(prefix="nemo-lead-slurm-"))
    state.chmod(0o755)
    try:
        started = subprocess.run(["bash", str(SCRIPT), "start", str(state)], capture_output=True, text=True,
                                 timeout=900)
    except subprocess.TimeoutExpired:
        started = None
    if started is None or started.returncode != 0:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], capture_output=True, timeout=120)
        shutil.rmtree(state, ignore_errors=True)
        why = "timed out" if started is None else (started.stderr.strip().splitlines() or ["?"])[-1]
        _unavailable(f"could not start a local SLURM cluster: {why}")
    env = {**os.environ, "SLURM_CONF": str(state / "slurm.conf"), "OMP_NUM_THREADS": "1"}
    for key in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
        env.pop(key)  # a test run inside a SLURM job must not leak that job's variables into ours
    try:
        yield Cluster(state=state, env=env)
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], capture_output=True, timeout=120)
        shutil.rmtree(state, ignore_errors=True)
