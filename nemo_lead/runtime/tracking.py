"""Weights & Biases tracking (`wandb.*` keys of `nemo-lead sft`, `rl`, `eval` and the recipes' stages).

What goes to W&B, from global rank 0 only: the resolved config of the command (`wandb.config`), every scalar
of metrics.jsonl under the name TensorBoard gives it (x axis: the key `step`), the validation rows of an RL
run as a table (`validation`), and an evaluation's summary as a table (`eval/summary`, with
`<dataset>/<metric>` scalars). The W&B run's id is kept in the run folder
(`RUN/wandb.json`), so rerunning the same command into the same folder (resume) continues the same W&B
run. `wandb.dir` defaults to `RUN/wandb/`, where `mode=offline` leaves the run for `wandb sync`.

The client is an optional extra (`pip install 'nemo-lead[wandb]'`); `wandb.enabled=true` without it fails
before the run starts, naming the extra. Without `wandb.enabled` nothing here imports it.

Like `nemo_lead.runtime.progress`, any layer may use this module (the evaluation sits below training).
"""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Optional

from omegaconf import OmegaConf

from nemo_lead.config.fields import setting
from nemo_lead.runtime.files import write_json

ID_FILE = "wandb.json"  # in the run folder: {"id", "project", "entity"} of its W&B run
WANDB_MODES = ("online", "offline")
EXTRA_HINT = "pip install 'nemo-lead[wandb]' (or: pip install wandb)"


@dataclass
class WandbSettings:
    enabled: bool = False  # log to Weights & Biases (rank 0 only) besides metrics.jsonl and TensorBoard
    project: str = "nemo-lead"  # the W&B project
    entity: Optional[str] = None  # the W&B team or user; None: the account's default
    name: Optional[str] = None  # the run's display name; None: the run folder's name
    group: Optional[str] = None  # runs shown together; a recipe's stages: the recipe's run folder name
    # online (sync as it runs; needs `wandb login` or WANDB_API_KEY) | offline (files only, `wandb sync` later)
    mode: str = setting("online", choices=WANDB_MODES)
    dir: Optional[str] = None  # W&B writes its files to DIR/wandb/; None: the run folder (RUN/wandb/)
    tags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.mode not in WANDB_MODES:
            raise ValueError(f"wandb.mode must be one of {', '.join(WANDB_MODES)}, got {self.mode!r}")

    def merged(self, over: WandbSettings | None) -> WandbSettings:
        """These settings with the keys `over` sets to other than the defaults replaced (a recipe's run-level
        `wandb` section laid over each stage's)."""
        if over is None:
            return self
        default = WandbSettings()
        return replace(self, **{f.name: getattr(over, f.name) for f in fields(self)
                                if getattr(over, f.name) != getattr(default, f.name)})


class TrackingError(ValueError):
    """W&B was asked for and cannot start (the client is missing, or `wandb.init` failed): a ValueError, so
    the training loops share it with every rank and stop before the first step."""


def import_wandb():
    """The `wandb` module, or TrackingError naming the extra to install."""
    try:
        import wandb  # optional extra: loaded only when a run asks for it
    except ImportError as e:
        raise TrackingError(f"wandb.enabled=true needs the Weights & Biases client, which is not installed: "
                          f"{EXTRA_HINT}") from e
    return wandb


def _scalars(row: dict[str, Any]) -> dict[str, float]:
    """The numbers of a metrics row that TensorBoard gets (bools and text left out)."""
    return {k: v for k, v in row.items()
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)}


class Tracker:
    """One W&B run of a run folder (rank 0). `log` takes metrics.jsonl's rows, `table` a list of rows."""

    def __init__(self, settings: WandbSettings, folder: str | Path, config: dict[str, Any], job_type: str):
        wandb = import_wandb()
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        run_id = read_run_id(self.folder)
        if run_id is None:
            run_id = secrets.token_hex(6)  # W&B ids: letters and digits
            write_json(self.folder / ID_FILE, {"id": run_id, "project": settings.project, "entity": settings.entity})
        wandb_dir = Path(settings.dir) if settings.dir else self.folder  # W&B writes into DIR/wandb/
        wandb_dir.mkdir(parents=True, exist_ok=True)
        self.run = wandb.init(project=settings.project, entity=settings.entity,
                              name=settings.name or self.folder.name, group=settings.group, tags=settings.tags,
                              job_type=job_type, mode=settings.mode, dir=str(wandb_dir), id=run_id,
                              resume="allow", config=config, settings=wandb.Settings(console="off", silent=True))
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")
        self._wandb = wandb

    def log(self, row: dict[str, Any]) -> None:
        """A metrics.jsonl row: its scalars, under their own names, at its `step`."""
        self.run.log({**_scalars(row), "step": int(row["step"])})

    def summary(self, name: str, rows: dict[str, dict[str, Any]], step: int) -> None:
        """Named result rows (an evaluation's datasets) as the table `name` (a `row` column first) and their
        numbers as `<row>/<key>` scalars."""
        self.table(name, [{"row": k, **v} for k, v in rows.items()], step)
        self.run.log({**{f"{k}/{m}": v for k, r in rows.items() for m, v in _scalars(r).items()}, "step": step})

    def table(self, name: str, rows: list[dict[str, Any]], step: int) -> None:
        """`rows` (dicts, columns in the order their keys first appear) as the W&B table `name`."""
        if not rows:
            return
        columns = list(dict.fromkeys(k for r in rows for k in r))
        data = [[_cell(r.get(c)) for c in columns] for r in rows]
        self.run.log({name: self._wandb.Table(columns=columns, data=data), "step": step})

    def finish(self) -> None:
        """End the W&B run; its service writes asynchronously, and stopping it is what waits until the run's
        files are complete (before the process exits, or the next stage reads them)."""
        self.run.finish()
        self._wandb.teardown()


def _cell(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, float, str, bool)) else json.dumps(value, default=str)


def read_run_id(folder: str | Path) -> str | None:
    """The W&B run id a run folder continues (RUN/wandb.json), or None."""
    path = Path(folder) / ID_FILE
    return json.loads(path.read_text())["id"] if path.is_file() else None


def open_tracker(settings: WandbSettings | None, folder: str | Path, config: Any, job_type: str,
                 writer: bool = True) -> Tracker | None:
    """A Tracker on the writer rank when `settings.enabled`, else None. `config`: the command's resolved
    config (a dataclass or a mapping)."""
    if settings is None or not settings.enabled or not writer:
        return None
    if not isinstance(config, dict):
        config = OmegaConf.to_container(OmegaConf.structured(config), resolve=True)
    wandb = import_wandb()
    try:
        return Tracker(settings, folder, config, job_type)
    except wandb.Error as e:  # no login for online mode, a bad entity, ...: say so before any step runs
        raise TrackingError(f"wandb: {e} (wandb.mode=offline logs without an account)") from e
