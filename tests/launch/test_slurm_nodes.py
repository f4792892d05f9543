"""Jobs across nodes on the test cluster (conftest.py: node1..node3, each a network namespace with its own host
name and address; one shared file system), through `nemo-lead submit` as on a real cluster: srun starts one
task per node, every rank meets rank 0 at the first node of the allocation by its name, and rank 0 alone
writes the run folder.

- The SFT job of the tiny model with its 2 ranks on 2 nodes, data-parallel and then pipeline-parallel (stage 0
  on the first node, stage 1 on the second), equals the same job with the same ranks on one node, exactly:
  the ranks compute the same thing in the same order and gloo's all-reduce of two ranks adds two numbers,
  whichever the addresses.
- A node lost mid-run (`slurm_local.sh node-kill`: its link cut, then every process on it killed, as a power
  cut would): the ranks left on the other node wait on the lost one's, SLURM declares the node DOWN once it has
  not answered for SlurmdTimeout (10 s here), ends the job's processes (SIGTERM, SIGKILL KillWait = 10 s
  later) and requeues the job, which runs again on two healthy nodes, resumes from the last complete
  checkpoint (a save the loss cut short is removed, never loaded) and ends with the numbers of the job that
  ran without a loss. The log names the lost node. The same job then loses its first node, where rank 0 and
  the batch script run: the next attempt names it, meets at another first node and writes the folder from
  there.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from slurm_common import STEPS, metrics, sft_args, submit, unavailable, without_timing

# From the loss to the job requeued with no process left: SLURM declares a node that stopped answering DOWN
# within about 3 x SlurmdTimeout (its pings go every SlurmdTimeout / 3 and wait up to MessageTimeout = 10 s),
# ends the job's processes on the other node (SIGTERM, then SIGKILL KillWait = 10 s later: the ranks wait on the
# lost one's inside a collective) and, when the lost node ran the batch script, waits out its messages to that
# node. Measured here: 40 s for a node other than the first, 63 s for the first (2026-12-06, load 10 on 2
# cores). The bound leaves room for a loaded machine; a job that waited on its lost rank until the distributed
# timeout (30 minutes) would pass it by far.
LOSS_ENDS_JOB_WITHIN_S = 120


@pytest.fixture(scope="module")
def nodes(slurm) -> list[str]:
    if len(slurm.nodes) < 3:
        unavailable(slurm.one_node_why)
    return slurm.nodes


@pytest.fixture(scope="module")
def layouts(slurm, nodes, tiny, tmp_path_factory):
    """Three SFT jobs at once: data-parallel on 2 nodes, pipeline-parallel on 2 nodes and on 1 node;
    {name: (run folder, job id, final state)}."""
    root = tmp_path_factory.mktemp("layouts")
    jobs = {
        "dp_2_nodes": submit(slurm, *sft_args(tiny, root / "dp_2_nodes"), nodes=2, tasks_per_node=1),
        "pp_2_nodes": submit(slurm, *sft_args(tiny, root / "pp_2_nodes", "job.actor.pp=2"), nodes=2, tasks_per_node=1),
        "pp_1_node": submit(slurm, *sft_args(tiny, root / "pp_1_node", "job.actor.pp=2"), nodes=1, tasks_per_node=2),
    }
    return {name: (root / name, job_id, slurm.wait(job_id, timeout=300, log=root / name / "slurm" / f"sft-{job_id}.log"))
            for name, [(job_id, _)] in jobs.items()}


def check_two_node_job(slurm, out: Path, job_id: str, job: dict, layout: str) -> str:
    """What every job across two nodes shows: its log (returned) says where each rank ran, rank 0's node (the
    first) held the run folder's lock, and every step ran once."""
    log = (out / "slurm" / f"sft-{job_id}.log").read_text()
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", log
    first, second = slurm.hostnames(job["NodeList"])
    assert job["BatchHost"] == first
    assert f"job {job_id} (sft) attempt 1 on {job['NodeList']}" in log and "srun ended with status 0" in log
    assert layout in log and f"2 ranks on 2 nodes: {first} (rank 0), {second} (rank 1)" in log
    assert json.loads((out / ".lock").read_text())["host"] == first  # the single writer, on the first node
    assert [m["step"] for m in metrics(out)] == list(range(1, STEPS + 1)) and (out / "done.json").is_file()
    return log


def test_data_parallel_across_two_nodes_equals_one_node(slurm, plain_run, layouts):
    out, job_id, job = layouts["dp_2_nodes"]
    check_two_node_job(slurm, out, job_id, job, "tp 1, pp 1, dp 2")
    assert without_timing(metrics(out)) == without_timing(metrics(plain_run[0]))  # 2 ranks on one node


def test_pipeline_parallel_across_two_nodes_equals_one_node(slurm, layouts):
    out, job_id, job = layouts["pp_2_nodes"]
    check_two_node_job(slurm, out, job_id, job, "tp 1, pp 2, dp 1")  # stage 0 on the first node, 1 on the second
    one_node, one_id, one_job = layouts["pp_1_node"]
    assert one_job["JobState"] == "COMPLETED", (one_node / "slurm" / f"sft-{one_id}.log").read_text()
    assert without_timing(metrics(out)) == without_timing(metrics(one_node))


def checkpoints(out: Path) -> tuple[list[int], list[str]]:
    """The complete checkpoints' steps and the names of saves in progress (.tmp-step_N) in a run folder."""
    folder = out / "checkpoints"
    done = sorted(int(p.name[5:]) for p in folder.glob("step_*") if (p / "meta.json").is_file())
    return done, sorted(p.name for p in folder.glob(".tmp-step_*"))


def wait_for_step(slurm, job_id: str, log_file: Path, attempt: int, step: int) -> list[str]:
    """Wait until attempt `attempt` of the job has logged step `step`; the attempt's nodes."""
    deadline = time.monotonic() + 240
    while True:
        log = log_file.read_text() if log_file.is_file() else ""
        at = re.search(rf"job {job_id} \(sft\) attempt {attempt} on (\S+)", log)
        steps = [int(s) for s in re.findall(rf"\[sft\] step (\d+)/{STEPS}", log[at.end():])] if at else []
        if steps and steps[-1] >= step:
            return slurm.hostnames(at.group(1))
        job = slurm.job(job_id)
        assert time.monotonic() < deadline and job["JobState"] in ("PENDING", "RUNNING"), (job, log)
        time.sleep(0.2)


def lose_node(slurm, job_id: str, out: Path, log_file: Path, node: str) -> tuple[float, list[int], list[str]]:
    """Lose `node` while a checkpoint is being written when the test sees one start (each step saves), else
    at once; wait until SLURM has requeued the job and its processes on the other node are gone. Returns the
    seconds that took and what the attempt left: the complete checkpoints' steps and the torn saves."""
    saving = time.monotonic() + 20
    while not checkpoints(out)[1] and time.monotonic() < saving:
        time.sleep(0.01)
    restarts = int(slurm.job(job_id)["Restarts"])
    lost_at = time.monotonic()
    slurm.script("node-kill", node)
    job = slurm.wait(job_id, timeout=LOSS_ENDS_JOB_WITHIN_S, log=log_file,  # requeued, no longer COMPLETING
                     until=lambda j: j["JobState"] == "PENDING" or j["JobState"] in ("COMPLETED", "FAILED"))
    ended_in = time.monotonic() - lost_at
    assert job["JobState"] == "PENDING" and job["Restarts"] == str(restarts + 1), (job, log_file.read_text())
    # not answering (sinfo's "*": down*, or mix* while the job's share of it is still being released)
    assert slurm.run("sinfo", "-h", "-N", "-n", node, "-t", "no_respond", "-o", "%N").split() == [node], slurm.logs()
    complete, torn = checkpoints(out)  # the next attempt starts after the requeue's delay (cred_expire + 1 s)
    print(f"node {node} lost {'during a save' if torn else 'between saves'}; the job was requeued with its "
          f"processes gone {ended_in:.1f} s later; checkpoints left: {complete}, torn saves: {torn}")
    assert complete and ended_in < LOSS_ENDS_JOB_WITHIN_S
    return ended_in, complete, torn


def test_lost_nodes_end_the_job_which_is_requeued_and_resumes_exactly(slurm, nodes, tiny, plain_run, tmp_path):
    """Two losses in one job: a node other than the first (the batch script there says which), then the first
    node itself, with the batch script and rank 0 (the next attempt says which; the rendezvous and the run
    folder's writer move to another node)."""
    out = tmp_path / "lost"
    # each step saves; a test hook sleeps 0.3 s per step (no effect on the numbers) so that steps remain when
    # the test acts
    (job_id, _), = submit(slurm, *sft_args(tiny, out, "job.save_every=1", "env.NEMO_LEAD_TEST_STEP_DELAY_S=0.3"),
                          nodes=2, tasks_per_node=1)
    log_file = out / "slurm" / f"sft-{job_id}.log"
    lost = []
    try:
        first, second = wait_for_step(slurm, job_id, log_file, attempt=1, step=3)
        lost.append(second)
        _, complete1, torn1 = lose_node(slurm, job_id, out, log_file, second)
        third = wait_for_step(slurm, job_id, log_file, attempt=2, step=complete1[-1] + 3)
        assert second not in third and third[0] == first  # two healthy nodes; the first is the same
        slurm.script("node-start", second)  # back in service (ReturnToService=2): the next attempt may use it
        lost.remove(second)
        lost.append(first)
        _, complete2, torn2 = lose_node(slurm, job_id, out, log_file, first)
        job = slurm.wait(job_id, timeout=300, log=log_file)
    finally:
        for node in lost:
            slurm.script("node-start", node)  # the nodes back, for the tests after this one
    log = log_file.read_text()
    assert job["JobState"] == "COMPLETED" and job["Restarts"] == "2", log
    # the first loss: the batch script on the first node heard SLURM's SIGTERM and names the lost node
    assert re.search(rf"job {job_id} \(sft\): SLURM ends this attempt \(SIGTERM\) at \S+: JobState=\S+ "
                     r"Reason=\S+ Restarts=1", log), log
    assert re.search(rf"job {job_id} \(sft\): nodes of this attempt that SLURM reports down: {second} \S+\* "
                     r"\(Not responding\)", log), log
    # the second: the first node went with its batch script; the attempt after it names it
    again = re.search(rf"job {job_id} \(sft\) attempt 3 on (\S+)", log).group(1)
    assert first not in slurm.hostnames(again) and again == job["NodeList"]
    previous = slurm.run("scontrol", "show", "hostlist", ",".join(third)).strip()  # node[1,3]
    assert re.search(rf"job {job_id} \(sft\): of the previous attempt's nodes \({re.escape(previous)}\), SLURM "
                     rf"reports down: {first} \S+\* \(Not responding\)", log), log
    # rank 0 and the run folder's writer moved to attempt 3's first node
    new_first, new_second = slurm.hostnames(again)
    assert f"2 ranks on 2 nodes: {new_first} (rank 0), {new_second} (rank 1)" in log
    assert json.loads((out / ".lock").read_text())["host"] == new_first
    # each attempt resumed from the last complete checkpoint; a save a loss cut short was removed, not loaded
    resumed = [int(s) for s in re.findall(rf"resuming from \S+step_\d+ \(step (\d+) of {STEPS}\)", log)]
    assert resumed == [complete1[-1], complete2[-1]], log
    for name in torn1 + torn2:
        assert f"{name}: removed (left by a save that was killed)" in log
    # the logs were cut back to those steps and the steps after them ran again: the uninterrupted run's numbers
    got = metrics(out)
    assert [m["step"] for m in got] == list(range(1, STEPS + 1)) and (out / "done.json").is_file()
    assert without_timing(got) == without_timing(metrics(plain_run[0]))
