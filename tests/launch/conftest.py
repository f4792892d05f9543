"""A real SLURM cluster of three nodes for the launch tests (scripts/slurm_local.sh), started once per test
session, and the fixtures the SLURM job tests share: the tiny model and its traces, and the 2-rank SFT job run
start to end on one node, which the preempted, multi-node and node-loss runs are compared with (helpers to
submit and read runs: slurm_common.py).

The script installs Debian's slurm-wlm and munge with apt-get when they are missing (root only), starts
munged, slurmctld and one slurmd per node with a private configuration under a temporary folder, each node
a network namespace of its own on a bridge the script makes (node1..node3: own host name and address, one
shared file system), and stops them, with any job still running, and removes the namespaces and the bridge
when the tests are done. A watcher process does the same if the test process dies without its clean-up (a
kill -9, an interrupted CI leg). Three nodes: a two-node job that loses one still has two to be requeued on.
Where namespaces cannot be made the cluster is one node on localhost and the multi-node tests are skipped
with the reason; where SLURM cannot start at all every SLURM test is skipped. Under CI (CI=true) either is a
failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from slurm_common import sft_args, submit, unavailable

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm_local.sh"
NODES = 3
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED")


@dataclass
class Cluster:
    state: Path
    env: dict[str, str]
    nodes: list[str]  # node1..node3, or ["localhost"] where namespaces could not be made
    one_node_why: str = ""  # why the cluster has one node only

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
        """`scontrol show job` as a dict (JobState, Restarts, ExitCode, NodeList, ...)."""
        text = self.run("scontrol", "show", "job", job_id)
        return dict(re.findall(r"(\w+)=(\S*)", text))

    def wait(self, job_id: str, timeout: float, until=None, log: Path | None = None) -> dict[str, str]:
        """Poll until `until(job)` (default: the job has ended); the job's last state. Cancels it on timeout,
        failing with the job's state, the last lines of its `log` (a job's output file) and the daemons'."""
        done = until or (lambda j: j["JobState"] in ENDED)
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

    def hostnames(self, nodelist: str) -> list[str]:
        return self.run("scontrol", "show", "hostnames", nodelist).split()

    def node_state(self, node: str) -> str:
        """sinfo's short state of `node` (idle, mix, down*, ...)."""
        return self.run("sinfo", "-h", "-n", node, "-o", "%t").strip()

    def script(self, *args: str) -> str:
        """scripts/slurm_local.sh ACTION STATE ARGS... (node-kill, node-start); its output."""
        done = subprocess.run(["bash", str(SCRIPT), args[0], str(self.state), *args[1:]], env=self.env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, f"slurm_local.sh {' '.join(args)}: {done.stderr}\n{self.logs()}"
        return done.stdout


def _start(nodes: int) -> tuple[Path | None, str]:
    """A started cluster's state folder, or None and why not (what the failed start left is removed)."""
    # munged runs as the munge user: the state folder must not sit below a private folder (pytest's tmp is 0700)
    state = Path(tempfile.mkdtemp(prefix="nemo-lead-slurm-"))
    state.chmod(0o755)
    try:
        started = subprocess.run(["bash", str(SCRIPT), "start", str(state), str(nodes)], capture_output=True,
                                 text=True, timeout=900)
    except subprocess.TimeoutExpired:
        started = None
    if started is not None and started.returncode == 0:
        return state, ""
    subprocess.run(["bash", str(SCRIPT), "stop", str(state)], capture_output=True, timeout=120)
    shutil.rmtree(state, ignore_errors=True)
    return None, "timed out" if started is None else (started.stderr.strip().splitlines() or ["?"])[-1]


@pytest.fixture(scope="session")  # the SLURM test files share one cluster
def slurm() -> Cluster:
    if os.geteuid() != 0:
        unavailable("the local SLURM cluster needs root (slurmd runs jobs as their users)")
    state, why = _start(NODES)
    one_node_why = ""
    # the nodes' namespaces, bridge or slurmd in them failed (SLURM's own failures fail one node alike)
    if state is None and re.search(r"namespace|bridge|iproute2|unshare|reach node2|slurmd of node|node\d+ did not", why):
        one_node_why = f"no cluster of several nodes on this machine: {why}"
        state, why = _start(1)
    if state is None:
        unavailable(f"could not start a local SLURM cluster: {why}")
    # stops the cluster if this process dies without the clean-up below (its own session: a Ctrl-C to the
    # test run's process group does not end it first)
    watcher = subprocess.Popen(["bash", str(SCRIPT), "watch", str(state), str(os.getpid())],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    env = {**os.environ, "SLURM_CONF": str(state / "slurm.conf"), "OMP_NUM_THREADS": "1"}
    for key in [k for k in env if k.startswith("SLURM_") and k != "SLURM_CONF"]:
        env.pop(key)  # a test run inside a SLURM job must not leak that job's variables into ours
    nodes = ["localhost"] if one_node_why else [f"node{i}" for i in range(1, NODES + 1)]
    try:
        yield Cluster(state=state, env=env, nodes=nodes, one_node_why=one_node_why)
    finally:
        subprocess.run(["bash", str(SCRIPT), "stop", str(state)], capture_output=True, timeout=300)
        shutil.rmtree(state, ignore_errors=True)
        watcher.terminate()
        watcher.wait(timeout=30)


@pytest.fixture(scope="session")
def tiny(tmp_path_factory):
    from nemo_lead.models import write_tiny_model

    folder = tmp_path_factory.mktemp("tiny")
    write_tiny_model(folder / "model", family="qwen2", seed=0)
    with (folder / "traces.jsonl").open("w") as f:
        for i in range(64):
            a, b = i % 7, (i * 3) % 5
            f.write(json.dumps({"problem": f"{a}+{b}", "response": f"<think>{a} plus {b}</think> \\boxed{{{a + b}}}"})
                    + "\n")
    return folder


@pytest.fixture(scope="session")
def plain_run(slurm, tiny, tmp_path_factory):
    """The SFT job run start to end on one node, 2 ranks (data-parallel): (run folder, job id, final state)."""
    out = tmp_path_factory.mktemp("runs") / "plain"
    (job_id, name), = submit(slurm, *sft_args(tiny, out))
    assert name == "sft"
    return out, job_id, slurm.wait(job_id, timeout=240)
