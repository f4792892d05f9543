"""The run folder of `nemo-lead sft` / `nemo-lead rl`: what a run writes, and how a rerun continues it.

    RUN/config.yaml            the resolved configuration (a rerun must match it, but for `steps`)
    RUN/metrics.jsonl          one JSON object per step, key "step" first
    RUN/tb/                    TensorBoard event files (the same scalars, under the same names)
    RUN/checkpoints/step_N/    training checkpoints (`nemo_lead.training.checkpoint`); the last K are kept
    RUN/done.json              {"step", "checkpoint"}: written when the run has done all its steps
    RUN/*.jsonl                per-step logs of the loop (rl: problem_stats.jsonl, val.jsonl), and
    RUN/rollouts/step_N.jsonl  every sampled response of a step (rl)

Resume rule: a rerun into the same folder loads the latest complete checkpoint (step S) and cuts every
per-step log back to step S: lines of later steps (written after that checkpoint by a run that then died)
are dropped, and so is a torn last line (a write cut by kill -9). The resumed run then writes those steps
again, so the logs of an interrupted run end up equal to an uninterrupted run's. TensorBoard gets the same
treatment through `purge_step`.

Only global rank 0 writes files; every method that writes is a no-op elsewhere, so loop code need not
branch on the rank.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
DONE_FILE = "done.json"
ROLLOUTS_DIR = "rollouts"
# settings a rerun may change: they decide how far, how visibly or where the run goes, not what it computes
RESUMABLE_CHANGES = ("steps", "progress", "out", "final_checkpoint")  # out: a run folder may be moved


class RunFolderError(ValueError):
    """A run folder that cannot be continued with this configuration (the message says why and what to do)."""


def _flat(obj: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: obj}


def config_differences(saved: dict, current: dict, defaults: dict | None = None) -> list[str]:
    """Dotted keys whose values differ between two resolved configurations (RESUMABLE_CHANGES aside).

    `defaults`: the configuration class's defaults. A key the saved configuration lacks (a setting added
    to nemo-lead after the run started) is then no difference while the current value is its default, so
    a newer nemo-lead continues an older run; set to anything else, it is one."""
    a, b, d = _flat(saved), _flat(current), _flat(defaults or {})
    keys = sorted(set(a) | set(b))
    return [f"{k}: {a.get(k)!r} -> {b.get(k)!r}" for k in keys
            if a.get(k) != b.get(k) and k not in RESUMABLE_CHANGES
            and not (k not in a and k in d and b.get(k) == d[k])]


def read_jsonl(path: Path) -> list[dict]:
    """The complete lines of a JSONL log (a torn last line, from a write cut short, is skipped)."""
    if not path.is_file():
        return []
    rows = []
    lines = path.read_text().splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                break
            raise RunFolderError(f"{path}:{i + 1}: not a JSON line (the file was edited by hand?)") from None
    return rows


def cut_jsonl(path: Path, last_step: int) -> None:
    """Keep the lines of steps <= last_step (and drop a torn last line); atomic rewrite."""
    if not path.is_file():
        return
    rows = [r for r in read_jsonl(path) if r.get("step", 0) <= last_step]
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
    tmp.replace(path)


def _json_value(v: Any) -> Any:
    """NaN / inf as null in JSON lines (strict JSON readers refuse them)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


class RunFolder:
    """One run's folder (see the module docstring). `writer` is True on global rank 0."""

    def __init__(self, path: str | Path, writer: bool, tensorboard: bool = True):
        self.path = Path(path)
        self.writer = writer
        self.use_tb = tensorboard
        self._tb = None

    # ------------------------------------------------------------------ opening
    def prepare(self, cfg: Any) -> None:
        """Rank 0: create the folder, or check that `cfg` may continue the run already there; write config.yaml.
        Raises RunFolderError listing the keys that differ."""
        if not self.writer:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        current = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
        saved_file = self.path / CONFIG_FILE
        if saved_file.is_file():
            saved = OmegaConf.to_container(OmegaConf.load(saved_file), resolve=True)
            defaults = OmegaConf.to_container(OmegaConf.structured(type(cfg)), resolve=True)
            diff = config_differences(saved, current, defaults)
            if diff:
                raise RunFolderError(
                    f"{self.path} holds a run with other settings; only {', '.join(RESUMABLE_CHANGES)} may change "
                    "when continuing it. Differences:\n  " + "\n  ".join(diff)
                    + f"\nUse another --out, or delete {self.path} to start over.")
        from nemo_lead.config import save_config

        save_config(cfg, saved_file)

    def rewind(self, step: int, logs: tuple[str, ...] = ()) -> None:
        """Rank 0: cut metrics.jsonl and the named per-step logs back to `step` (-1: a fresh start) and drop
        later rollout files (see the module docstring). done.json goes too: the run is running again."""
        if not self.writer:
            return
        for name in (METRICS_FILE, *logs):
            cut_jsonl(self.path / name, step)
        rollouts = self.path / ROLLOUTS_DIR
        for f in rollouts.glob("step_*.jsonl") if rollouts.is_dir() else []:
            if int(f.stem.split("_")[1]) > step:
                f.unlink()
        (self.path / DONE_FILE).unlink(missing_ok=True)
        if self.use_tb:
            self._tb_writer(purge_step=step + 1)

    # ------------------------------------------------------------------ writing
    def _tb_writer(self, purge_step: int | None = None):
        if self._tb is None and self.use_tb and self.writer:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(self.path / "tb"), purge_step=purge_step)
        return self._tb

    def log_metrics(self, metrics: dict[str, Any]) -> None:
        """One line of metrics.jsonl (key "step" first) and the scalars to TensorBoard."""
        if not self.writer:
            return
        step = int(metrics["step"])
        row = {"step": step, **{k: _json_value(v) for k, v in metrics.items() if k != "step"}}
        self.append(METRICS_FILE, [row])
        tb = self._tb_writer()
        if tb is not None:
            for k, v in row.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    tb.add_scalar(k, v, step)
            tb.flush()

    def append(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Append JSON lines to RUN/name (flushed: a killed process leaves at most a torn last line)."""
        if not self.writer or not rows:
            return
        path = self.path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write("".join(json.dumps({k: _json_value(v) for k, v in r.items()}) + "\n" for r in rows))
            f.flush()

    def write_rollouts(self, step: int, rows: list[dict[str, Any]]) -> None:
        if not self.writer:
            return
        folder = self.path / ROLLOUTS_DIR
        folder.mkdir(exist_ok=True)
        tmp = folder / f".step_{step:06d}.jsonl.tmp"
        tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
        tmp.replace(folder / f"step_{step:06d}.jsonl")

    def mark_done(self, step: int, checkpoint: Path) -> None:
        if not self.writer:
            return
        tmp = self.path / (DONE_FILE + ".tmp")
        tmp.write_text(json.dumps({"step": step, "checkpoint": str(Path(checkpoint).resolve())}) + "\n")
        tmp.replace(self.path / DONE_FILE)

    def prune_checkpoints(self, keep_last: int) -> None:
        """Rank 0: delete all but the newest `keep_last` complete checkpoints (0 keeps all)."""
        if not self.writer or keep_last <= 0:
            return
        from nemo_lead.models.checkpoint import list_checkpoints

        for _, folder in list_checkpoints(self.path)[:-keep_last]:
            shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def read_done(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """RUN/done.json of a finished run, or None."""
    path = Path(run_dir) / DONE_FILE
    return json.loads(path.read_text()) if path.is_file() else None
