"""What a long command shows while it runs: a progress bar on a terminal, plain log lines otherwise.

    progress = LoopProgress("rl", total=cfg.steps, start=step, mode=cfg.progress, active=rank == 0)
    progress.step(step, {"reward": "+0.12", "acc": "0.50", "len": "123"})
    progress.say("validation: Pass@1 0.41")
    progress.warn("step 3: no learning signal ...")    # shown even with mode "none"
    progress.close()

`mode` (the `progress` key of `nemo-lead sft`, `rl`, `eval` and `generate`): "auto" (a bar when stderr is a
terminal, log lines otherwise: CI logs and SLURM output files stay readable), "bar", "lines", or "none"
(nothing but warnings). Log lines carry the same fields as the bar, the seconds per unit of work (`unit`:
a training step, an evaluation chunk) and the time left. They come at a cadence, not for every unit: the
first and the last unit always, then whenever `line_every` units (default: a twentieth of the run) or
`line_seconds` (30 s) have passed since the last line, whichever comes first; so the demo's 1,200 SFT steps
print about 20 lines, and a run of slow steps still prints one line per step.

When the output goes away (`2>&1 | head` exited: a write raises BrokenPipeError) a run must not die mid-step
without a checkpoint: the progress falls silent and calls `on_lost_output` (the training loops ask for a
stop, so they checkpoint after the step and exit).

Like `nemo_lead.config.loading` and `nemo_lead.runtime.quiet`, any layer may use this module: the training loops and the
evaluation (a lower layer than training) show their progress the same way.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

PROGRESS_MODES = ("auto", "bar", "lines", "none")
LINE_SECONDS = 30.0  # a log line at least this often (when a unit finishes), whatever `line_every` says
LINES_PER_RUN = 20  # `line_every` by default: a line every total / 20 units


def check_progress_mode(mode: str) -> None:
    if mode not in PROGRESS_MODES:
        raise ValueError(f"progress must be auto, bar, lines or none, got {mode!r}")


class LoopProgress:
    def __init__(self, name: str, total: int, start: int = 0, mode: str = "auto", active: bool = True,
                 unit: str = "step", on_lost_output: Callable[[], None] | None = None,
                 line_every: int | None = None, line_seconds: float = LINE_SECONDS,
                 clock: Callable[[], float] = time.monotonic):
        check_progress_mode(mode)
        self.name, self.total, self.start, self.unit = name, total, start, unit
        self.on_lost_output = on_lost_output
        self.clock = clock
        self.line_every = line_every if line_every is not None else max(1, total // LINES_PER_RUN)
        self.line_seconds = line_seconds
        self._last_line: tuple[int, float] | None = None  # (unit, clock) of the last log line
        self.writer = active  # warnings are shown on this rank whatever the mode
        self.active = active and mode != "none"
        self.mode = ("bar" if sys.stderr.isatty() else "lines") if mode == "auto" else mode
        self.t0 = clock()
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
        self.start, self.t0, self._last_line = start, self.clock(), None
        if self._bar is not None:
            self._bar.update(self._task, completed=start)

    def step(self, step: int, fields: dict[str, str]) -> None:
        """Unit `step` (1-based count of units done) finished; `fields` are shown as name value pairs."""
        if not self.active:
            return
        now = self.clock()
        done = step - self.start
        per_step = (now - self.t0) / max(done, 1)
        info = " | ".join(f"{k} {v}" for k, v in fields.items()) + f" | {per_step:.1f} s/{self.unit}"
        if self._bar is not None:
            try:
                self._bar.update(self._task, completed=step, info=info)
            except BrokenPipeError:
                self._lost()
        elif self._line_due(step, now):
            self._last_line = (step, now)
            left = per_step * (self.total - step) / 60
            self._print(f"{self.unit} {step}/{self.total} | {info} | left ~{left:.1f} min")

    def _line_due(self, step: int, now: float) -> bool:
        """Log lines: the first unit, the last, and then every `line_every` units or `line_seconds`."""
        if self._last_line is None or step >= self.total:
            return True
        last_step, last_time = self._last_line
        return step - last_step >= self.line_every or now - last_time >= self.line_seconds

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
