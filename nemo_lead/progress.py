"""What a long command shows while it runs: a progress bar on a terminal, plain log lines otherwise.

    progress = LoopProgress("rl", total=cfg.steps, start=step, mode=cfg.progress, active=rank == 0)
    progress.step(step, {"reward": "+0.12", "acc": "0.50", "len": "123"})
    progress.say("validation: Pass@1 0.41")
    progress.warn("step 3: no learning signal ...")    # shown even with mode "none"
    progress.close()

`mode` (the `progress` key of `nemo-lead sft`, `rl`, `eval` and `generate`): "auto" (a bar when stderr is a
terminal, log lines otherwise: CI logs and SLURM output files stay readable), "bar", "lines", or "none"
(nothing but warnings). Log lines carry the seconds per unit of work (`unit`: a training step, an
evaluation chunk) and the time left.

When the output goes away (`2>&1 | head` exited: a write raises BrokenPipeError) a run must not die mid-step
without a checkpoint: the progress falls silent and calls `on_lost_output` (the training loops ask for a
stop, so they checkpoint after the step and exit).

Like `nemo_lead.config` and `nemo_lead.quiet`, any layer may use this module: the training loops and the
evaluation (a lower layer than training) show their progress the same way.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

PROGRESS_MODES = ("auto", "bar", "lines", "none")


def check_progress_mode(mode: str) -> None:
    if mode not in PROGRESS_MODES:
        raise ValueError(f"progress must be auto, bar, lines or none, got {mode!r}")


class LoopProgress:
    def __init__(self, name: str, total: int, start: int = 0, mode: str = "auto", active: bool = True,
                 unit: str = "step", on_lost_output: Callable[[], None] | None = None):
        check_progress_mode(mode)
        self.name, self.total, self.start, self.unit = name, total, start, unit
        self.on_lost_output = on_lost_output
        self.writer = active  # warnings are shown on this rank whatever the mode
        self.active = active and mode != "none"
        self.mode = ("bar" if sys.stderr.isatty() else "lines") if mode == "auto" else mode
        self.t0 = time.monotonic()
        self._bar = self._task = None
        if self.active and self.mode == "bar":
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self._bar = Progress(TextColumn(f"[bold]{name}[/bold]"), BarColumn(), MofNCompleteColumn(),
                                 TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
                                 console=Console(stderr=True), transient=False)
            self._bar.start()
            self._task = self._bar.add_task(name, total=total, completed=start, info="")

    def restart_at(self, start: int) -> None:
        """Count from `start` units already done (a resumed run): the bar and the time estimate."""
        self.start, self.t0 = start, time.monotonic()
        if self._bar is not None:
            self._bar.update(self._task, completed=start)

    def step(self, step: int, fields: dict[str, str]) -> None:
        """Unit `step` (1-based count of units done) finished; `fields` are shown as name value pairs."""
        if not self.active:
            return
        done = step - self.start
        per_step = (time.monotonic() - self.t0) / max(done, 1)
        info = " | ".join(f"{k} {v}" for k, v in fields.items()) + f" | {per_step:.1f} s/{self.unit}"
        if self._bar is not None:
            try:
                self._bar.update(self._task, completed=step, info=info)
            except BrokenPipeError:
                self._lost()
        else:
            left = per_step * (self.total - step) / 60
            self._print(f"{self.unit} {step}/{self.total} | {info} | left ~{left:.1f} min")

    def say(self, message: str) -> None:
        if self.active:
            self._print(message)

    def warn(self, message: str) -> None:
        """A message the user must see (on the writer rank), even with mode "none"."""
        if self.writer:
            self._print(f"warning: {message}")

    def _print(self, message: str) -> None:
        if not self.writer:
            return
        try:
            if self._bar is not None:
                self._bar.console.print(f"[{self.name}] {message}", markup=False, highlight=False)
            else:
                print(f"[{self.name}] {message}", file=sys.stderr, flush=True)
        except BrokenPipeError:
            self._lost()

    def _lost(self) -> None:
        self.active = self.writer = False
        self._bar = None  # its console is the lost stream: do not stop it (that writes)
        if self.on_lost_output is not None:
            self.on_lost_output()

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
