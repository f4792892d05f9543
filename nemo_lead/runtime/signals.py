"""Stop requests: SIGUSR1 (SLURM's warning before the time limit or a preemption), SIGTERM, SIGINT and
SIGHUP (the terminal went away), and a lost output stream (`request("SIGPIPE")`: the reader of a pipe
such as `| head` exited, so the next progress line would fail).

    stop = install_stop_handlers()          # once, in every rank, before the loop
    for step in ...:
        ...one whole step...
        if stop.agreed():                    # collective: all ranks stop after the same step
            save a checkpoint; stop.after_checkpoint(); return 0

A handler only records the signal: the step in flight finishes (or, for a second SIGINT, the process
exits at once), the loop writes a checkpoint and leaves with status 0. Every rank must stop after the same
step, but SLURM may signal the ranks a moment apart, so `agreed()` takes the maximum of the flags over all
ranks (one tiny all-reduce per step). After the checkpoint, `after_checkpoint()` asks SLURM to requeue the
job when the signal was SIGUSR1 and the job runs under SLURM (`nemo_lead.runtime.requeue`); the requeued
job starts the same command, which resumes from the run folder.

Helper processes. SLURM delivers a step's signals to every process of the step, not only to the ranks
(measured with proctrack/linuxproc; proctrack/cgroup does the same by design), and SIGUSR1's default
action ends a process. Verifier workers, checkpoint writers and other children of a rank would die on the
warning and take the step down with them. So while the handlers are installed the main thread blocks
SIGUSR1: processes started from it (fork, spawn, forkserver, subprocess: the signal mask survives exec)
keep it blocked, and it never reaches them. The rank itself still hears it: a small idle thread started
before the mask changed leaves SIGUSR1 open, the kernel hands the process-wide signal to that thread, and
Python runs the handler in the main thread as usual. SIGTERM is not blocked (multiprocessing stops its
workers with it); on SIGTERM the rank checkpoints if the time before SIGKILL allows.

Before the handlers exist, `hold_stop_signals` (the first thing `nemo-lead` and each local rank do) holds a
stop signal until `install_stop_handlers` takes it over. The task wrapper of `nemo-lead submit` scripts
starts each rank with SIGUSR1 ignored (`trap '' USR1`), which stays so until the handlers exist: a warning
during the interpreter's start does not kill it (it is then lost: the job is not requeued, and the run
resumes from its last regular checkpoint when it is submitted again).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from dataclasses import dataclass, field

from nemo_lead.runtime.processes import launch_rank
from nemo_lead.runtime.requeue import requeue_current_job

STOP_SIGNALS = ("SIGUSR1", "SIGTERM", "SIGINT", "SIGHUP")
STOP_REASONS = (*STOP_SIGNALS, "SIGPIPE")  # SIGPIPE: asked for by the loop (Python ignores the signal itself)
KEPT_FROM_CHILDREN = (signal.SIGUSR1,)  # blocked in the main thread, so children inherit it blocked


@dataclass
class StopRequest:
    """The first stop signal this process received (None while none came)."""

    signal_name: str | None = None
    _previous: dict = field(default_factory=dict, repr=False)
    _previous_mask: set | None = field(default=None, repr=False)
    _listener: threading.Event | None = field(default=None, repr=False)

    @property
    def requested(self) -> bool:
        return self.signal_name is not None

    def _handle(self, signum, frame) -> None:  # noqa: ARG002 - signal handler signature
        name = signal.Signals(signum).name
        if self.signal_name == "SIGINT" and name == "SIGINT":
            raise KeyboardInterrupt  # a second Ctrl-C: stop now, without the checkpoint
        if self.signal_name is None:
            self.signal_name = name
            try:
                print(f"[nemo-lead] {name} received: finishing the current step, then checkpointing and exiting",
                      file=sys.stderr, flush=True)
            except (BrokenPipeError, OSError):  # the terminal or pipe is gone (SIGHUP): the stop still happens
                pass

    def request(self, name: str) -> None:
        """Ask for a stop without a signal (`name` from STOP_REASONS, e.g. "SIGPIPE"); the first reason wins."""
        if self.signal_name is None:
            self.signal_name = name

    def install(self) -> StopRequest:
        """Main thread only: handlers for STOP_SIGNALS; SIGUSR1 kept away from child processes (module doc)."""
        for name in STOP_SIGNALS:
            sig = getattr(signal, name)
            self._previous[sig] = signal.signal(sig, self._handle)
        # the listener thread inherits the current (open) mask; only then close SIGUSR1 in this thread
        self._listener = threading.Event()
        threading.Thread(target=self._listener.wait, name="nemo-lead-signals", daemon=True).start()
        self._previous_mask = signal.pthread_sigmask(signal.SIG_BLOCK, KEPT_FROM_CHILDREN)
        return self

    def uninstall(self) -> None:
        """Back to the signal mask and handlers found at install (a signal left pending meets our handler)."""
        if self._previous_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, self._previous_mask)
            self._previous_mask = None
        if self._listener is not None:
            self._listener.set()
            self._listener = None
        for sig, old in self._previous.items():
            signal.signal(sig, old)
        self._previous.clear()

    def agreed(self) -> bool:
        """Collective over all ranks (when torch.distributed is up): did any rank get a stop signal?
        The agreed signal name is kept (SIGUSR1 wins, so a preempted job requeues)."""
        import torch
        import torch.distributed as dist

        code = STOP_REASONS.index(self.signal_name) + 1 if self.requested else 0
        if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
            device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
            flags = torch.tensor([int(code == i + 1) for i in range(len(STOP_REASONS))], device=device)
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
            got = [STOP_REASONS[i] for i, f in enumerate(flags.tolist()) if f]
            if got and self.signal_name not in got[:1]:
                self.signal_name = got[0]
        return self.requested

    def after_checkpoint(self) -> bool:
        """Requeue the SLURM job after a SIGUSR1 (rank 0 only); True when a requeue was asked for."""
        if self.signal_name != "SIGUSR1" or "SLURM_JOB_ID" not in os.environ:
            return False
        if launch_rank() != 0:
            return False
        return requeue_current_job()


def install_stop_handlers() -> StopRequest:
    """Record SIGUSR1 / SIGTERM / SIGINT / SIGHUP in a `StopRequest` (main thread only; elsewhere a no-op
    one). A signal held since `hold_stop_signals` counts as received."""
    stop = StopRequest()
    if threading.current_thread() is threading.main_thread():
        stop.install()
        if _held:
            stop.request(_held.pop())
    return stop


_held: list[str] = []  # the stop signal received before the handlers existed (at most one)


def hold_stop_signals() -> dict:
    """Main thread, first thing a command does: a stop signal that comes before `install_stop_handlers`
    (seconds of imports, loading a model) is held, and the loop stops after its first step as if the signal had
    come then; a second SIGINT ends the start at once, exit 130, without a traceback. Signals set to be ignored
    (`nohup`, the submit scripts' `trap '' USR1`) stay ignored. Returns the handlers it replaced
    (`release_stop_signals`)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    previous = {}
    for name in STOP_SIGNALS:
        sig = getattr(signal, name)
        if signal.getsignal(sig) is not signal.SIG_IGN:
            previous[sig] = signal.signal(sig, _hold)
    return previous


def release_stop_signals(previous: dict) -> None:
    """Back to the handlers `hold_stop_signals` replaced (its return value); a held signal is dropped."""
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    _held.clear()


def held_stop_signal() -> str | None:
    """The stop signal held so far (None: none came)."""
    return _held[0] if _held else None


def _hold(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
    name = signal.Signals(signum).name
    if _held and name == "SIGINT" == _held[0]:
        raise SystemExit(128 + signum)
    if not _held:
        _held.append(name)
        try:
            print(f"[nemo-lead] {name} received while starting: stopping after the first step, with a checkpoint "
                  "(a second Ctrl-C stops at once)", file=sys.stderr, flush=True)
        except (BrokenPipeError, OSError):
            pass
