"""What a training loop shows while it runs: a progress bar on a terminal, plain log lines otherwise.

    progress = LoopProgress("rl", total=cfg.steps, start=step, mode=cfg.progress, active=rank == 0)
    progress.step(step, {"reward": "+0.12", "acc": "0.50", "len": "123"})
    progress.say("validation: Pass@1 0.41")
    progress.close()

`mode`: "auto" (a bar when stderr is a terminal, log lines otherwise: CI logs and SLURM output files
stay readable), "bar", "lines", or "none". Log lines carry the seconds per step and the time left.
When the output goes away (`2>&1 | head` exited: a write raises BrokenPipeError) the run must not die
mid-step without a checkpoint: the progress falls silent and calls `on_lost_output` (the loop asks for a
stop, so it checkpoints after the step and exits).
"""

from __future__ import annotations

import sys
import time


class LoopProgress:
    def __init__(self, name: str, total: int, start: int = 0, mode: str = "auto", active: bool = True,
                 on_lost_output=None):
        self.name, self.total, self.start = name, total, start
        self.on_lost_output = on_lost_output
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

    def begin_at(self, step: int) -> None:
        """The loop starts after `step` steps (a resumed run): time per step counts from here."""
        self.start, self.t0 = step, time.monotonic()
        if self._bar is not None:
            self._bar.update(self._task, completed=step)

    def _lost(self) -> None:
        self.active = False
        if self._bar is not None:
            self._bar = None  # its console is the lost stream: do not stop it (that writes)
        if self.on_lost_output is not None:
            self.on_lost_output()

    def _print(self, line: str) -> None:
        try:
            if self._bar is not None:
                self._bar.console.print(line, markup=False, highlight=False)
            else:
                print(line, file=sys.stderr, flush=True)
        except BrokenPipeError:
            self._lost()

    def step(self, step: int, fields: dict[str, str]) -> None:
        """Step `step` (1-based count of steps done) finished; `fields` are shown as name value pairs."""
        if not self.active:
            return
        done = step - self.start
        per_step = (time.monotonic() - self.t0) / max(done, 1)
        info = " | ".join(f"{k} {v}" for k, v in fields.items()) + f" | {per_step:.1f} s/step"
        if self._bar is not None:
            try:
                self._bar.update(self._task, completed=step, info=info)
            except BrokenPipeError:
                self._lost()
        else:
            left = per_step * (self.total - step) / 60
            self._print(f"[{self.name}] step {step}/{self.total} | {info} | left ~{left:.1f} min")

    def say(self, message: str) -> None:
        if self.active:
            self._print(f"[{self.name}] {message}")

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
