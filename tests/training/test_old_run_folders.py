"""Run folders written by an earlier nemo-lead continue: an SFT run (4 of 6 steps) and an RL run (2 of 3 steps,
`rollout.lag=1`, so its checkpoint holds the lag queue) written at commit d7dea6a (2026-12-04) by
`make_old_run_folders.py`, before the package's modules moved, resume with today's code and train their
remaining steps; the RL run's resumed step visits the problems a run of 3 steps straight visits at step 3
(the data order came back from the checkpoint).

The fixture's paths are relative to its folder (the commands run there), so any copy of it resumes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from loops_common import read_lines, rl_args, sft_args

FIXTURE = Path(__file__).parent / "fixtures" / "runs-2026-12-04"
RL_EXTRA = ["--save-every", "2", "rollout.lag=1", "lead.rollout_correction.mode=tis"]


def _cli(root: Path, args: list) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nemo_lead.cli", *map(str, args)], cwd=root, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _problems_at(run: Path, step: int) -> list[str]:
    return [r["id"] for r in read_lines(run, "problem_stats.jsonl") if r["step"] == step]


def test_run_folders_of_2026_12_04_resume_and_finish(tmp_path):
    root = tmp_path / "old"
    shutil.copytree(FIXTURE, root)
    old_rl_rows = read_lines(root / "rl")

    res = _cli(root, sft_args(Path("."), "model", "sft", steps=6, extra=["--save-every", "4"]))
    assert res.returncode == 0, res.stderr
    assert "resuming from" in res.stderr and "step 4 of 6" in res.stderr, res.stderr
    assert [r["step"] for r in read_lines(root / "sft") if "loss" in r][-2:] == [5, 6]
    assert (root / "sft" / "checkpoints" / "step_000006" / "meta.json").is_file()

    res = _cli(root, rl_args(Path("."), "model", "rl", steps=3, extra=RL_EXTRA))
    assert res.returncode == 0, res.stderr
    assert "resuming from" in res.stderr and "step 2 of 3" in res.stderr, res.stderr
    rows = read_lines(root / "rl")
    assert rows[:len(old_rl_rows)] == old_rl_rows and rows[-1]["step"] == 3
    assert json.loads((root / "rl" / "done.json").read_text())["step"] == 3

    shutil.copytree(FIXTURE / "model", tmp_path / "straight" / "model")
    for name in ("problems.jsonl", "val.jsonl"):
        shutil.copy(FIXTURE / name, tmp_path / "straight" / name)
    res = _cli(tmp_path / "straight", rl_args(Path("."), "model", "rl", steps=3, extra=RL_EXTRA))
    assert res.returncode == 0, res.stderr
    assert _problems_at(root / "rl", 3) == _problems_at(tmp_path / "straight" / "rl", 3) != []
    assert _problems_at(root / "rl", 2) == _problems_at(tmp_path / "straight" / "rl", 2)
