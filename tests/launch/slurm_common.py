"""What the SLURM job tests share: `nemo-lead submit` on the test cluster (conftest.py) and the runs' metrics."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

STEPS = 16  # steps take 0.1-2 s here: enough left after the first for a signal or a lost node to land mid-run
SUBMITTED = re.compile(r"^submitted job (\d+): (\S+)", re.M)


def submit(slurm, *args: str, nodes: int = 1, tasks_per_node: int = 2,
           env: dict[str, str] | None = None) -> list[tuple[str, str]]:
    """`nemo-lead submit ...` on the test cluster (CPU partition: no GPUs); [(job id, name)]."""
    done = subprocess.run([sys.executable, "-m", "nemo_lead.cli", "submit", "--gpus-per-node", "0", "--nodes",
                           str(nodes), "--tasks-per-node", str(tasks_per_node), "--time", "00:10:00",
                           "exclusive=false", *args],
                          env={**slurm.env, **(env or {})}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return [(m.group(1), m.group(2)) for m in SUBMITTED.finditer(done.stdout)]


def metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def sft_args(tiny: Path, out: Path, *extra: str) -> list[str]:
    return ["--command", "sft", "--out", str(out), f"job.actor.model={tiny / 'model'}",
            f"job.data.path={tiny / 'traces.jsonl'}", f"job.steps={STEPS}", "job.global_batch=4",
            "job.data.max_seq_len=128", "job.tensorboard=false", *extra]


def unavailable(reason: str):
    """Skip with the reason, or fail under CI (CI=true), where the SLURM tests must run."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"SLURM is required under CI: {reason}")
    pytest.skip(reason)


def without_timing(rows: list[dict]) -> list[dict]:
    """Metrics rows less what depends on the clock (step time, throughput)."""
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k not in ("tokens_per_s", "seconds")}
            for r in rows]
