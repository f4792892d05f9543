"""`nemo-lead submit` against a real one-node SLURM (conftest.py): a 2-task SFT job of the tiny model
(gloo, data-parallel 2), the same job preempted with SIGUSR1 mid-run (checkpoint, `scontrol requeue`,
resume: every step exactly once, the same numbers as the uninterrupted run), and a recipe as a chain of
stage jobs that start one after the other and stop at the first failure (a stage that needs no GPU running as
one task at the start of the next job)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

STEPS = 16  # steps take 0.1-2 s here: enough left after the first for the signal to land mid-run
SUBMITTED = re.compile(r"^submitted job (\d+): (\S+)", re.M)


def submit(slurm, *args: str) -> list[tuple[str, str]]:
    """`nemo-lead submit ...` on the test cluster (CPU partition: 2 tasks, no GPUs); [(job id, name)]."""
    done = subprocess.run([sys.executable, "-m", "nemo_lead.cli", "submit", "--gpus-per-node", "0",
                           "--tasks-per-node", "2", "--time", "00:10:00", "exclusive=false", *args],
                          env=slurm.env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [(m.group(1), m.group(2)) for m in SUBMITTED.finditer(done.stdout)]


def metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


@pytest.fixture(scope="module")
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


def sft_args(tiny: Path, out: Path) -> list[str]:
    return ["--command", "sft", "--out", str(out), f"job.actor.model={tiny / 'model'}",
            f"job.data.path={tiny / 'traces.jsonl'}", f"job.steps={STEPS}", "job.global_batch=4",
            "job.data.max_seq_len=128", "job.tensorboard=false"]


@pytest.fixture(scope="module")
def plain_run(slurm, tiny, tmp_path_factory):
    """The SFT job run start to end: (run folder, job id, its final state)."""
    out = tmp_path_factory.mktemp("runs") / "plain"
    (job_id, name), = submit(slurm, *sft_args(tiny, out))
    assert name == "sft"
    return out, job_id, slurm.wait(job_id, timeout=240)


def test_two_task_sft_job(plain_run):
    out, job_id, job = plain_run
    log = (out / "slurm" / f"sft-{job_id}.log").read_text()
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0", log
    assert "tp 1, pp 1, dp 2" in log  # the two SLURM tasks became one gloo job of two ranks
    assert [m["step"] for m in metrics(out)] == list(range(1, STEPS + 1))
    assert (out / "checkpoints" / f"step_{STEPS:06d}").is_dir() and (out / "done.json").is_file()
    assert f"job {job_id} (sft) attempt 1 on localhost" in log and "srun ended with status 0" in log
    assert (out / "slurm" / "sft.sbatch").is_file()
    assert json.loads((out / "slurm" / "submitted.jsonl").read_text())["job_id"] == job_id


def test_preempted_job_checkpoints_requeues_and_resumes(slurm, tiny, plain_run, tmp_path):
    out = tmp_path / "preempted"
    (job_id, _), = submit(slurm, *sft_args(tiny, out), "signal_seconds=60")
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
    assert f"job {job_id} requeued" in log and f"job {job_id} (sft) attempt 2" in log
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
import os, torch, torch.distributed as dist
from nemo_lead.parallel.state import detect_launch
launch = detect_launch(os.environ)
dist.init_process_group("gloo", init_method=f"tcp://{launch.master_addr}:{launch.master_port}",
                        rank=launch.rank, world_size=launch.world_size)
total = torch.tensor([launch.rank + 1.0])
dist.all_reduce(total)
print("RANK", launch.launcher, launch.rank, launch.world_size, launch.master_addr, int(total.item()), flush=True)
dist.destroy_process_group()
"""


def test_plain_srun_without_the_wrapper(slurm):
    """The entry points read SLURM's own variables too: `srun -n 2 python ...` with no torchrun-style ones."""
    env = {k: v for k, v in slurm.env.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    done = subprocess.run(["srun", "-n", "2", "--time=5", sys.executable, "-c", PROBE], env=env,
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    ranks = sorted(line.split()[1:] for line in done.stdout.splitlines() if line.startswith("RANK"))
    assert ranks == [["slurm", "0", "2", "localhost", "3"], ["slurm", "1", "2", "localhost", "3"]]
