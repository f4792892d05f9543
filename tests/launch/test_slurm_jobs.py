"""`nemo-lead submit` against a real SLURM (conftest.py), one node per job: a 2-task SFT job of the tiny model
(gloo, data-parallel 2), the same job preempted with SIGUSR1 mid-run (checkpoint, `scontrol requeue`,
resume: every step exactly once, the same numbers as the uninterrupted run; its scontrol answers slowly every
time, so SLURM's requeue ends it before it prints the answer), and a recipe as a chain of stage jobs that
start one after the other and stop at the first failure (a stage that needs no GPU running as one task at the
start of the next job). Jobs across nodes: test_slurm_nodes.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
import time

import pytest
from slurm_common import STEPS, metrics, sft_args, submit


def test_two_task_sft_job(slurm, plain_run):
    out, job_id, job = plain_run
    log = (out / "slurm" / f"sft-{job_id}.log").read_text()
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", log
    assert "tp 1, pp 1, dp 2" in log  # the two SLURM tasks became one gloo job of two ranks
    assert [m["step"] for m in metrics(out)] == list(range(1, STEPS + 1))
    assert (out / "checkpoints" / f"step_{STEPS:06d}").is_dir() and (out / "done.json").is_file()
    assert job["NodeList"] in slurm.nodes  # one node
    assert f"job {job_id} (sft) attempt 1 on {job['NodeList']}" in log and "srun ended with status 0" in log
    assert (out / "slurm" / "sft.sbatch").is_file()
    assert json.loads((out / "slurm" / "submitted.jsonl").read_text())["job_id"] == job_id


# scontrol, but `requeue` answers slowly: SLURM's requeue ends the job's processes, this one among them, before
# it prints SLURM's answer (what a loaded machine did now and then, here every time)
SLOW_SCONTROL = """#!/bin/bash
if [ "$1" = requeue ]; then
    {real} "$@" || exit $?
    exec sleep 120
fi
exec {real} "$@"
"""


def test_preempted_job_checkpoints_requeues_and_resumes(slurm, tiny, plain_run, tmp_path):
    out = tmp_path / "preempted"
    slow = tmp_path / "bin" / "scontrol"
    slow.parent.mkdir()
    slow.write_text(SLOW_SCONTROL.format(real=shutil.which("scontrol", path=slurm.env["PATH"])))
    slow.chmod(0o755)
    (job_id, _), = submit(slurm, *sft_args(tiny, out), "signal_seconds=60",
                          env={"PATH": f"{slow.parent}:{slurm.env['PATH']}"})
    deadline = time.monotonic() + 180
    while len(metrics(out)) < 1:  # mid-run: the handlers are up, steps remain
        assert time.monotonic() < deadline, "the job logged no steps"
        assert slurm.job(job_id)["JobState"] in ("PENDING", "RUNNING"), (out / "slurm" / f"sft-{job_id}.log").read_text()
        time.sleep(0.2)
    slurm.run("scancel", "--signal=USR1", job_id)  # what --signal=USR1@60 sends 60 s before the time limit
    log_file = out / "slurm" / f"sft-{job_id}.log"
    job = slurm.wait(job_id, timeout=240, log=log_file)  # a requeued job passes through REQUEUED / PENDING, not COMPLETED
    log = log_file.read_text()
    assert job["JobState"] == "COMPLETED" and job["Restarts"] == "1", log
    stopped = int(re.search(r"stopped by SIGUSR1 after step (\d+)", log).group(1))
    assert 1 <= stopped < STEPS
    # the requeue the job asked for and got is reported as one: scontrol was ended by it, the job's record says so
    assert re.search(rf"job {job_id} requeued \(scontrol requeue: ended by signal 15 before it answered; SLURM "
                     r"shows JobState=\S+ Restarts=1\); it resumes from the run folder", log), log
    assert "could not be requeued" not in log and f"scontrol requeue {job_id} failed" not in log
    assert f"job {job_id} (sft): SLURM ends this attempt (SIGTERM)" in log and f"job {job_id} (sft) attempt 2" in log
    assert re.search(rf"resuming from \S+step_{stopped:06d} \(step {stopped} of {STEPS}\)", log)
    # each step ran once, in order, across the two attempts; the run folder holds them all
    assert [int(s) for s in re.findall(rf"\[sft\] step (\d+)/{STEPS}", log)] == list(range(1, STEPS + 1))
    got, want = metrics(out), metrics(plain_run[0])
    assert [m["step"] for m in got] == list(range(1, STEPS + 1))
    assert [m["loss"] for m in got] == pytest.approx([m["loss"] for m in want], rel=1e-6)
    assert (out / "done.json").is_file()


STAGE = """#!/bin/bash
# stands in for `nemo-lead` in the chain test: logs the stage it was asked for; stage "bad" fails
stage="${@: -1}"; stage="${stage#only=}"
[ "$RANK" = 0 ] && echo "$stage start $(date +%s.%N)" >> "$LOG"
sleep 1
[ "$stage" = bad ] && exit 3
[ "$RANK" = 0 ] && echo "$stage end $(date +%s.%N)" >> "$LOG"
exit 0
"""


def test_recipe_stages_run_as_a_chain(slurm, tmp_path):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(textwrap.dedent("""\
        stages:
          - {name: first, kind: sft, slurm: {tasks_per_node: 1, time: "00:05:00"},
             actor: {model: tiny-qwen2}, data: {path: traces.jsonl}}
          - {name: pick, kind: select, problems: [aime24]}
          - {name: second, kind: rl, actor: {model: "${stage:first.checkpoint}"}, data: {path: aime24}}
          - {name: bad, kind: eval, models: {x: "${stage:second.checkpoint}"}}
          - {name: never, kind: eval, models: {x: "${stage:second.checkpoint}"}}
        """))
    fake = tmp_path / "fake-nemo-lead"
    fake.write_text(STAGE)
    fake.chmod(0o755)
    log = tmp_path / "stages.log"
    # the command line's --tasks-per-node 2 wins over the recipe's; stage_slurm over both
    jobs = submit(slurm, str(recipe), "--out", str(tmp_path / "run"), f"executable={fake}", f"env.LOG={log}",
                  "stage_slurm.first.tasks_per_node=1")
    assert [name for _, name in jobs] == ["first", "second", "bad", "never"]  # pick: one task in second's job
    ids = dict((name, job_id) for job_id, name in jobs)
    assert slurm.wait(ids["second"], timeout=120)["JobState"] == "COMPLETED"
    assert slurm.wait(ids["bad"], timeout=120)["JobState"] == "FAILED"
    never = slurm.wait(ids["never"], timeout=60)  # its dependency can no longer be met: SLURM cancels it
    assert never["JobState"] == "CANCELLED"
    events = [line.split() for line in log.read_text().splitlines()]
    assert [(s, e) for s, e, _ in events] == [("first", "start"), ("first", "end"), ("pick", "start"),
                                              ("pick", "end"), ("second", "start"), ("second", "end"),
                                              ("bad", "start")]
    times = [float(t) for _, _, t in events]
    assert times == sorted(times)  # each stage started after the previous one ended
    assert slurm.job(ids["first"])["NumTasks"] == "1" and slurm.job(ids["second"])["NumTasks"] == "2"


PROBE = """
import os, socket, torch, torch.distributed as dist
from nemo_lead.parallel.state import detect_launch
launch = detect_launch(os.environ)
dist.init_process_group("gloo", init_method=f"tcp://{launch.master_addr}:{launch.master_port}",
                        rank=launch.rank, world_size=launch.world_size)
total = torch.tensor([launch.rank + 1.0])
dist.all_reduce(total)
print("RANK", launch.launcher, launch.rank, launch.world_size, launch.master_addr, socket.gethostname(),
      int(total.item()), flush=True)
dist.destroy_process_group()
"""


def test_plain_srun_without_the_wrapper(slurm):
    """The entry points read SLURM's own variables too: `srun -n 2 python ...` with no torchrun-style ones."""
    env = {k: v for k, v in slurm.env.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    done = subprocess.run(["srun", "-n", "2", "--time=5", sys.executable, "-c", PROBE], env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    ranks = sorted(line.split()[1:] for line in done.stdout.splitlines() if line.startswith("RANK"))
    # both tasks on one node (2 of its 4 CPUs), whose name is the rendezvous address
    assert [r[:4] for r in ranks] == [["slurm", "0", "2", ranks[0][4]], ["slurm", "1", "2", ranks[0][4]]]
    assert ranks[0][3] == ranks[0][4] == ranks[1][4] in slurm.nodes and [r[5] for r in ranks] == ["3", "3"]
