"""The run folder of `nemo-lead sft` / `nemo-lead rl`: what a run writes, and how a rerun continues it.

    RUN/config.yaml            the resolved configuration (a rerun must match it; see "Changed settings")
    RUN/inputs.json            content hashes of the data files the run reads (a rerun must read the same)
    RUN/changes.jsonl          settings changed when the run was continued (`--allow-change`), with the step
    RUN/metrics.jsonl          one JSON object per step, key "step" first
    RUN/tb/                    TensorBoard event files (the same scalars, under the same names)
    RUN/checkpoints/step_N/    training checkpoints (`nemo_lead.training.run.train_state`); the last K are kept
    RUN/checkpoints/.damaged-step_N/  one that did not match its manifest, set aside by a resume
    RUN/.lock                  held by the process that writes the folder (`nemo_lead.training.run.lock`)
    RUN/done.json              {"step", "checkpoint"}: written when the run has done all its steps
    RUN/data.json              sft: what the data loader kept (traces dropped / truncated, held out)
    RUN/problem_stats.jsonl    rl: per problem per visit: samples, correct, mean length (stage-2 selection)
    RUN/val.jsonl              rl: one line per validation: pass@1, cons@k, mean_length, ... (Figure 2)
    RUN/rollouts/step_N.jsonl  rl: every sampled response of a step

This module is the folder's contract: the file names above and their readers (`read_done`,
`read_problem_stats`, `read_validation`) are used by every other layer that reads a run (the pipeline's
stage-2 selection, `nemo-lead plot`).

Resume rule: a rerun into the same folder loads the latest complete checkpoint (step S) and cuts every
per-step log back to step S: lines of later steps (written after that checkpoint by a run that then died)
are dropped, and so is a torn last line (a write cut by kill -9). The resumed run then writes those steps
again, so the logs of an interrupted run end up equal to an uninterrupted run's. TensorBoard gets the same
treatment through `purge_step`.

Changed settings: a rerun with other settings is refused, naming the keys, once the folder holds a step
(a checkpoint or a line of metrics.jsonl); before that, the folder's config.yaml is only what a start
that failed left behind, and the new settings replace it. Some keys may change anyway, as each field
declares (`nemo_lead.config.loading.key_rules`): `free` ones always (`steps`, `progress`, `out`, ...), `flag` ones
when named in `allow_change` (`--allow-change actor.optim.lr`: the learning rate, clipping, checkpoint and
validation cadence); those changes are appended to changes.jsonl. Data files are compared by content:
replaced under the same path, they are refused, naming the key and the file.

Only global rank 0 writes files; every method that writes is a no-op elsewhere, so loop code need not
branch on the rank.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf

from nemo_lead.checkpoint.meta import list_checkpoints
from nemo_lead.config.dotted import flatten
from nemo_lead.config.fields import key_rules
from nemo_lead.config.loading import to_yaml
from nemo_lead.runtime.files import (
    append_jsonl,
    cut_jsonl,
    json_safe,
    jsonl_text,
    read_jsonl,
    write_atomic,
    write_json,
)

if TYPE_CHECKING:  # (the settings' module loads torch; the pipeline reads run folders without it)
    from nemo_lead.training.run.config import TrainingSettings

CONFIG_FILE = "config.yaml"
INPUTS_FILE = "inputs.json"
CHANGES_FILE = "changes.jsonl"
METRICS_FILE = "metrics.jsonl"
DONE_FILE = "done.json"
DATA_REPORT_FILE = "data.json"
PROBLEM_STATS_FILE = "problem_stats.jsonl"
VALIDATION_FILE = "val.jsonl"
ROLLOUTS_DIR = "rollouts"


class RunFolderError(ValueError):
    """A run folder that cannot be continued with this configuration (the message says why and what to do)."""


def config_differences(saved: dict, current: dict, defaults: dict | None = None) -> list[tuple[str, Any, Any]]:
    """(dotted key, saved value, current value) for every key whose value differs between two resolved
    configurations.

    `defaults`: the configuration class's defaults. A key the saved configuration lacks (a setting added
    to nemo-lead after the run started) is then no difference while the current value is its default, so
    a newer nemo-lead continues an older run; set to anything else, it is one."""
    a, b, d = flatten(saved), flatten(current), flatten(defaults or {})
    keys = sorted(set(a) | set(b))
    return [(k, a.get(k), b.get(k)) for k in keys
            if a.get(k) != b.get(k) and not (k not in a and k in d and b.get(k) == d[k])]


def _known(rules: dict[str, dict], key: str) -> bool:
    """The key, or the section it is in, is a setting of this nemo-lead (a saved key renamed or removed since
    is not: its new spelling is what gets compared)."""
    parts = key.split(".")
    return any(".".join(parts[:i]) in rules for i in range(len(parts), 0, -1))


def _rule(rules: dict[str, dict], key: str) -> str:
    """The resume rule of a dotted key (a key inside an open mapping takes its section's)."""
    while key not in rules and "." in key:
        key = key.rsplit(".", 1)[0]
    return rules.get(key, {"resume": "fixed"})["resume"]


class RunFolder:
    """One run's folder (see the module docstring). `writer` is True on global rank 0."""

    def __init__(self, path: str | Path, writer: bool, tensorboard: bool = True):
        self.path = Path(path)
        self.writer = writer
        self.use_tb = tensorboard
        self._tb = None
        self.tracker = None  # a nemo_lead.runtime.tracking.Tracker when wandb.enabled (rank 0)

    # ------------------------------------------------------------------ opening
    def holds_steps(self, resumed_step: int | None) -> bool:
        """The run has done a step, so its settings bind: it resumes from a checkpoint (`resumed_step`, the
        resume choice's: listing the checkpoints again could disagree with it), or metrics.jsonl has a line."""
        metrics = self.path / METRICS_FILE
        return resumed_step is not None or (metrics.is_file() and metrics.stat().st_size > 0)

    def prepare(self, cfg: TrainingSettings, inputs: dict[str, str] | None = None, resumed_step: int | None = None) -> None:
        """Rank 0: create the folder, or check that `cfg` may continue the run already there (see "Changed
        settings" in the module docstring); write config.yaml and inputs.json. `inputs`: {key: content hash}
        of the data the run reads; `resumed_step`: the step of the checkpoint the run continues from (None: a
        fresh start). Raises RunFolderError naming the keys."""
        if not self.writer:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        current = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
        saved_file = self.path / CONFIG_FILE
        inputs = inputs or {}
        changes: list[tuple[str, Any, Any]] = []
        if saved_file.is_file() and self.holds_steps(resumed_step):
            saved = OmegaConf.to_container(OmegaConf.load(saved_file), resolve=True)
            defaults = OmegaConf.to_container(OmegaConf.structured(type(cfg)), resolve=True)
            rules = key_rules(type(cfg))
            flagged = sorted(k for k, r in rules.items() if r["resume"] == "flag")
            allowed = set(cfg.allow_change or [])
            unknown = sorted(allowed - set(flagged))
            if unknown:
                raise RunFolderError(f"allow_change: {', '.join(unknown)} may not change when a run continues; "
                                     f"the keys that may are: {', '.join(flagged)}")
            diff = [d for d in config_differences(saved, current, defaults) if _known(rules, d[0])]
            refused = [d for d in diff if _rule(rules, d[0]) == "fixed"
                       or (_rule(rules, d[0]) == "flag" and d[0] not in allowed)]
            lines = [f"{k}: {a!r} -> {b!r}" + ("  (allowed with --allow-change " + k + ")"
                                              if _rule(rules, k) == "flag" else "") for k, a, b in refused]
            lines += [f"{k}: the content changed since the run started (a file replaced at the same path)"
                      for k in self._changed_inputs(inputs)]
            if lines:
                raise RunFolderError(
                    f"{self.path} holds a run with other settings or data. Differences:\n  " + "\n  ".join(lines)
                    + f"\nUse another --out, or delete {self.path} to start over.")
            changes = [d for d in diff if _rule(rules, d[0]) == "flag"]
        write_atomic(saved_file, to_yaml(cfg))
        write_json(self.path / INPUTS_FILE, dict(sorted(inputs.items())), indent=1)
        if changes:
            self.append(CHANGES_FILE, [{"step": resumed_step or 0, "key": k, "from": a, "to": b}
                                       for k, a, b in changes])

    def _changed_inputs(self, inputs: dict[str, str]) -> list[str]:
        path = self.path / INPUTS_FILE
        saved = json.loads(path.read_text()) if path.is_file() else {}
        return [k for k in inputs if k in saved and saved[k] != inputs[k]]

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
        row = {"step": step, **{k: json_safe(v) for k, v in metrics.items() if k != "step"}}
        self.append(METRICS_FILE, [row])
        tb = self._tb_writer()
        if tb is not None:
            for k, v in row.items():
                if k != "step" and isinstance(v, (int, float)) and not isinstance(v, bool):
                    tb.add_scalar(k, v, step)
            tb.flush()
        if self.tracker is not None:
            self.tracker.log(row)

    def log_validation(self, row: dict[str, Any]) -> None:
        """One line of val.jsonl; when the run logs to W&B, the whole file as its "validation" table too
        (W&B replaces a table at each step, so it gets every line so far)."""
        if not self.writer:
            return
        self.append(VALIDATION_FILE, [row])
        if self.tracker is not None:
            self.tracker.table("validation", read_validation(self.path), int(row["step"]))

    def append(self, name: str, rows: list[dict[str, Any]]) -> None:
        """Append JSON lines to RUN/name (flushed: a killed process leaves at most a torn last line)."""
        if self.writer:
            append_jsonl(self.path / name, rows)

    def write_rollouts(self, step: int, rows: list[dict[str, Any]]) -> None:
        if not self.writer:
            return
        write_atomic(self.path / ROLLOUTS_DIR / f"step_{step:06d}.jsonl", jsonl_text(rows))

    def mark_done(self, step: int, checkpoint: Path) -> None:
        if not self.writer:
            return
        write_json(self.path / DONE_FILE, {"step": step, "checkpoint": str(Path(checkpoint).resolve())}, indent=None)

    def prune_checkpoints(self, keep_last: int) -> None:
        """Rank 0: delete all but the newest `keep_last` complete checkpoints (0 keeps all)."""
        if not self.writer or keep_last <= 0:
            return
        for _, folder in list_checkpoints(self.path)[:-keep_last]:
            shutil.rmtree(folder, ignore_errors=True)

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
            self._tb = None
        if self.tracker is not None:
            self.tracker.finish()
            self.tracker = None


def read_done(run_dir: str | os.PathLike) -> dict[str, Any] | None:
    """RUN/done.json of a finished run, or None."""
    path = Path(run_dir) / DONE_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def read_problem_stats(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """RUN/problem_stats.jsonl of an RL run: {"id", "step", "samples", "correct", "mean_length"} per problem
    per visit (a torn last line of a running job skipped)."""
    path = Path(run_dir) / PROBLEM_STATS_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no per-problem statistics (is {run_dir} an RL run folder of `nemo-lead rl`?)")
    return read_jsonl(path, what="a line of per-problem statistics")


def read_validation(run_dir: str | os.PathLike) -> list[dict[str, Any]]:
    """RUN/val.jsonl of an RL run, in step order ([] when the run has no validation yet)."""
    return sorted(read_jsonl(Path(run_dir) / VALIDATION_FILE, what="a validation line"), key=lambda r: r["step"])
