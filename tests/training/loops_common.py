"""What the end-to-end tests of `nemo-lead sft` and `nemo-lead rl` share: the tiny task's settings, running the
command as a user does (a subprocess), interrupting it at a moment of a step, and reading its logs.
The fixtures built on these (the data, the reference SFT and RL runs) are in this folder's conftest.py."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import cli_process

CLI = [sys.executable, "-m", "nemo_lead.cli"]


PROMPT = ["prompt.suffix=''"]  # the tiny chat template alone: <|user|>3+4<|assistant|><think>\n


SFT_ARGS = ["global_batch=16", "data.max_seq_len=64", "actor.optim.lr=1e-2", "actor.optim.lr_warmup_steps=2",
            "actor.optim.min_lr=1e-3", "data.val_fraction=0.1", "val_every=4", "progress=lines", *PROMPT]


RL_ARGS = ["--prompts-per-step", "4", "--n", "4", "--max-tokens", "32", "actor.optim.lr=2e-4",
           "validation.every=3", "validation.n=2", "validation.limit=6", "rollout.temperature=1.0", "progress=lines",
           *PROMPT]


def problem_row(rng: random.Random, i: int) -> dict:
    a, b = rng.randint(0, 9), rng.randint(0, 9)
    return {"id": f"p{i}", "problem": f"{a}+{b}", "answer": str(a + b)}


def cli_env():
    return {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def run_cli(args, timeout=240, env=None, fresh=False) -> subprocess.CompletedProcess:
    """`nemo-lead ARGS` run to its end in a process of its own (forked from a warm interpreter: cli_process.py)."""
    return cli_process.run(list(args), env=env or cli_env(), timeout=timeout, fresh=fresh)


def read_lines(run: Path, name="metrics.jsonl") -> list[dict]:
    return [json.loads(line) for line in (run / name).read_text().splitlines()]


def strip_timing(rows: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if not k.startswith("time/") and k not in ("tokens_per_s", "seconds")}
            for r in rows]


def interrupt(args, run: Path, after_lines: int, sig=signal.SIGKILL, timeout=240) -> int:
    """Start the command, send `sig` once metrics.jsonl has `after_lines` lines (at some moment of the next
    step), wait for it to end; its exit status."""
    proc = cli_process.CLIProcess(list(args), env=cli_env())
    deadline = time.monotonic() + timeout
    try:
        metrics = run / "metrics.jsonl"
        while time.monotonic() < deadline and proc.poll() is None:
            lines = metrics.read_text().splitlines() if metrics.is_file() else []
            if len(lines) >= after_lines:
                # a random moment of the next step: a fraction of the last step's own time (a tiny model's
                # SFT step takes ~15 ms; a fixed delay would let the run finish first)
                try:
                    step_s = json.loads(lines[-1]).get("time/step", 0.0)
                except json.JSONDecodeError:  # the line is being written
                    step_s = 0.0
                time.sleep(random.Random(after_lines).uniform(0.0, 1.0) * step_s)
                if sig == signal.SIGKILL:
                    proc.kill_group()
                else:
                    proc.send_signal(sig)
                break
            time.sleep(0.005)
        return proc.wait(timeout=max(deadline - time.monotonic(), 1))
    finally:
        proc.close()  # also kills the rank processes a killed launcher may leave


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose environment holds `marker` (every helper inherits its parent's)."""
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if marker.encode() in (d / "environ").read_bytes():
                    found.append(int(d.name))
            except OSError:  # gone, or not ours to read
                pass
    return found


def sft_args(root, model, out, steps=12, extra=()):
    return ["sft", "--model", str(model), "--data", str(root / "traces.jsonl"), "--out", str(out), "--steps", str(steps),
            "--save-every", "4", *SFT_ARGS, *extra]


def rl_args(root, ckpt, out, steps=6, extra=()):
    return ["rl", "--model", str(ckpt), "--data", str(root / "problems.jsonl"), "--val-data", str(root / "val.jsonl"),
            "--out", str(out), "--steps", str(steps), "--save-every", "2", *RL_ARGS, *extra]


def close_to(a: dict, b: dict, tol: float) -> bool:
    return set(a) == set(b) and all(
        abs(a[k] - b[k]) <= tol * max(1.0, abs(b[k])) if isinstance(b[k], float) else a[k] == b[k] for k in b)


def folder_size(folder: Path) -> int:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())


def assert_same_logs(run: Path, ref: Path) -> None:
    """An RL run's per-step logs (timing keys aside) equal a reference run's: metrics, validation, per-problem stats."""
    for name in ("metrics.jsonl", "val.jsonl", "problem_stats.jsonl"):
        assert strip_timing(read_lines(run, name)) == strip_timing(read_lines(ref, name)), name
