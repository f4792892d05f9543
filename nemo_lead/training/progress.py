"""What a training loop shows while it runs: a progress bar on a terminal, plain log lines otherwise.

    progress = LoopProgress("rl", total=cfg.steps, start=step, mode=cfg.progress, active=rank == 0)
    progress.step(step, {"reward": "+0.12", "acc": "0.50", "len": "123"})
    progress.say("validation: Pass@1 0.41")
    progress.close()

`mode`: "auto" (a bar when stderr is a terminal, log lines otherwise: CI logs and SLURM output files
stay readable), "bar", "lines", or "none". Log lines carry the seconds per step and the time left.
"""

from __future__ import annotations

import sys
import time


class LoopProgress:
    def __init__(self, name: str, total: int, start: int = 0, mode: str = "auto", active: bool = True):
        self.name, self.total, self.start = name, total, start
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

    def step(self, step: int, fields: dict[str, str]) -> None:
        """Step `step` (1-based count of steps done) finished; `fields` are shown as name value pairs."""
        if not self.active:
            return
        done = step - self.start
        per_step = (time.monotonic() - self.t0) / max(done, 1)
        info = " | ".join(f"{k} {v}" for k, v in fields.items()) + f" | {per_step:.1f} s/step"
        if self._bar is not None:
            self._bar.update(self._task, completed=step, info=info)
        else:
            left = per_step * (self.total - step) / 60
            print(f"[{self.name}] step {step}/{self.total} | {info} | left ~{left:.1f} min", file=sys.stderr, flush=True)

    def say(self, message: str) -> None:
        if not self.active:
            return
        if self._bar is not None:
            self._bar.console.print(f"[{self.name}] {message}", markup=False, highlight=False)
        else:
            print(f"[{self.name}] {message}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None
