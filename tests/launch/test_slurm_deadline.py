"""A job's end on the local SLURM (conftest.py): an SFT job with a one-minute `--time` and steps slowed by
the test hook (NEMO_LEAD_TEST_STEP_DELAY_S) cannot finish in one attempt. Before a step that would pass
SLURM_JOB_END_TIME less the margin it checkpoints, requeues itself and exits 0; the requeued attempts
resume, and the run ends with every step once and the numbers of the same job run without the deadline,
which runs at the same time in a second job."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nemo_lead.models import write_tiny_model

STEPS = 16  # 16 x 3 s of delay alone pass the 60 s job's end less its 10 s margin: one attempt cannot do it
DELAY_S, MARGIN_S = 3, 10


def _submit(slurm, out: Path, folder: Path, *extra: str) -> str:
    args = ["--command", "sft", "--out", str(out), "--gpus-per-node", "0", "--tasks-per-node", "1",
            "exclusive=false", f"job.actor.model={folder / 'model'}", f"job.data.path={folder / 'traces.jsonl'}",
            f"job.steps={STEPS}", "job.global_batch=4", "job.data.max_seq_len=128", "job.tensorboard=false", *extra]
    done = subprocess.run([sys.executable, "-m", "nemo_lead.cli", "submit", *args], env=slurm.env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return re.search(r"^submitted job (\d+): sft", done.stdout, re.M).group(1)


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_a_job_stops_before_its_end_requeues_and_finishes_equal(slurm, tmp_path):
    write_tiny_model(tmp_path / "model", family="qwen2", seed=1)
    (tmp_path / "traces.jsonl").write_text("".join(
        json.dumps({"problem": f"{i % 5}+{i % 3}", "response": f"<think>add</think> \\boxed{{{i % 5 + i % 3}}}"})
        + "\n" for i in range(32)))
    plain = _submit(slurm, tmp_path / "plain", tmp_path, "--time", "10")
    cut = _submit(slurm, tmp_path / "cut", tmp_path, "--time", "1", "signal_seconds=0",
                  f"env.NEMO_LEAD_TEST_STEP_DELAY_S={DELAY_S}", f"env.NEMO_LEAD_DEADLINE_MARGIN_S={MARGIN_S}")
    assert slurm.wait(plain, timeout=300)["JobState"] == "COMPLETED"
    log_file = tmp_path / "cut" / "slurm" / f"sft-{cut}.log"
    job = slurm.wait(cut, timeout=420, log=log_file)
    log = log_file.read_text()
    assert job["JobState"] == "COMPLETED" and int(job["Restarts"]) >= 1, log
    stops = [int(s) for s in re.findall(r"stopping before step (\d+): the job ends in", log)]
    assert stops and all(1 < s <= STEPS for s in stops), log
    assert f"job {cut} requeued" in log and "srun ended with status 0" in log
    assert "TIMEOUT" not in job["JobState"] and f"job {cut} (sft) attempt {len(stops) + 1}" in log
    # each step once, in order, across the attempts; the same losses as the job that ran without a deadline
    got, want = _metrics(tmp_path / "cut"), _metrics(tmp_path / "plain")
    assert [m["step"] for m in got] == list(range(1, STEPS + 1))
    assert [m["loss"] for m in got] == pytest.approx([m["loss"] for m in want], rel=1e-6)
    assert (tmp_path / "cut" / "done.json").is_file()
