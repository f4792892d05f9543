"""The `torchrun` agent killed with kill -9 (docs/faults.md): it cannot signal its ranks, so they must stop
themselves. They asked for the parent-death signal (`nemo_lead.runtime.processes.die_with_parent`, called by
`nemo_lead.training.run.lifecycle.start_run` under torchrun), so they die with the agent, nothing they started stays,
and the run folder's lock is free for a rerun started at once.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest
from loops_common import cli_env, processes_with, sft_args

from nemo_lead.training.run.lock import FolderInUse, refuse_if_in_use

pytestmark = pytest.mark.slow


def _in_use(folder) -> bool:
    try:
        refuse_if_in_use(folder)
    except FolderInUse:
        return True
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")
def test_ranks_of_a_killed_torchrun_agent_stop_and_free_the_folder(data, tmp_path):
    """`torchrun --nproc-per-node 2 -m nemo_lead.cli sft --tp 2`, its agent killed with SIGKILL mid-run (it
    cannot signal its ranks): the ranks and everything they started are gone within seconds, and the run
    folder's lock is free, so a rerun started at once is not a second writer."""
    root, model = data
    out = tmp_path / "torchrun"
    marker = f"NEMO_LEAD_TEST_MARKER={os.getpid()}-{time.monotonic_ns()}"
    name, value = marker.split("=")
    env = {**cli_env(), name: value, "NEMO_LEAD_TEST_STEP_DELAY_S": "1"}  # slow steps: the run is still going
    args = sft_args(root, model, out, steps=400, extra=["--save-every", "0", "--tp", "2"])[1:]
    log = tmp_path / "torchrun.log"
    with open(log, "w") as f:
        agent = subprocess.Popen([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                                  "2", "-m", "nemo_lead.cli", "sft", *args], stdout=f, stderr=f, env=env)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and agent.poll() is None and not (out / "metrics.jsonl").is_file():
            time.sleep(0.05)
        ranks = [p for p in processes_with(marker) if p != agent.pid]
        assert agent.poll() is None and len(ranks) >= 2, (ranks, log.read_text()[-3000:])
        with pytest.raises(FolderInUse, match="is in use by pid"):
            refuse_if_in_use(out)  # rank 0 holds it
        agent.kill()
        agent.wait()
        deadline = time.monotonic() + 20  # a process's environment goes before its files: wait for both
        while (processes_with(marker) or _in_use(out)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert processes_with(marker) == [], log.read_text()[-3000:]
        refuse_if_in_use(out)  # free: the kernel dropped rank 0's lock with it
        assert not (out / "done.json").exists()
    finally:
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)
        if agent.poll() is None:
            agent.kill()
            agent.wait()
