"""Stop requests: SIGUSR1 (SLURM's warning before the time limit or a preemption), SIGTERM and SIGINT.

    stop = install_stop_handlers()          # once, in every rank, before the loop
    for step in ...:
        ...one whole step...
        if stop.agreed():                    # collective: all ranks stop after the same step
            save a checkpoint; stop.after_checkpoint(); return 0

A handler only records the signal: the step in flight finishes (or, for a second SIGINT, the process
exits at once), the loop writes a checkpoint and leaves with status 0. Every rank must stop after the same
step, but SLURM may signal the ranks a moment apart, so `agreed()` takes the maximum of the flags over all
ranks (one tiny all-reduce per step). After the checkpoint, `after_checkpoint()` asks SLURM to requeue the
job when the signal was SIGUSR1 and the job runs under SLURM (`nemo_lead.launch.requeue`); the requeued
job starts the same command, which resumes from the run folder.
"""

from __future__ import annotations

import os
import signal
import sys
from dataclasses import dataclass, field

STOP_SIGNALS = ("SIGUSR1", "SIGTERM", "SIGINT")


@dataclass
class StopRequest:
    """The first stop signal this process received (None while none came)."""

    signal_name: str | None = None
    _previous: dict = field(default_factory=dict, repr=False)

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        name = signal.Signals(signum).name
        if self.signal_name == "SIGINT" and name == "SIGINT":
            raise KeyboardInterrupt  # a second Ctrl-C: stop now, without the checkpoint
        if self.signal_name is None:
            self.signal_name = name
            print(f"[nemo-lead] {name} received: finishing the current step, then checkpointing and exiting",
                  file=sys.stderr, flush=True)

    def install(self) -> StopRequest:
        for name in STOP_SIGNALS:
            sig = getattr(signal, name)
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def uninstall(self) -> None:
        for sig, old in self._previous.items():
            signal.signal(sig, old)
        self._previous.clear()

    def agreed(self) -> bool:
        """Collective over all ranks (when torch.distributed is up): did any rank get a stop signal?
        The agreed signal name is kept (SIGUSR1 wins, so a preempted job requeues)."""
        import torch
        import torch.distributed as dist

        code = STOP_SIGNALS.index(self.signal_name) + 1 if self.requested else 0
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
            flags = torch.tensor([int(code == i + 1) for i in range(len(STOP_SIGNALS))], device=device)
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            got = [STOP_SIGNALS[i] for i, f in enumerate(flags.tolist()) if f]
            if got and self.signal_name not in got[:1]:
                self.signal_name = got[0]
        return self.requested

    def after_checkpoint(self) -> bool:
        """Requeue the SLURM job after a SIGUSR1 (rank 0 only); True when a requeue was asked for."""
        if self.signal_name != "SIGUSR1" or "SLURM_JOB_ID" not in os.environ:
            return False
        if int(os.environ.get("RANK", os.environ.get("SLURM_PROCID", "0"))) != 0:
            return False
        from .requeue import requeue_current_job

        return requeue_current_job()


def install_stop_handlers() -> StopRequest:
    """Record SIGUSR1 / SIGTERM / SIGINT in a `StopRequest` (main thread only; elsewhere a no-op one)."""
    import threading

    stop = StopRequest()
    if threading.current_thread() is threading.main_thread():
        stop.install()
    return stop
