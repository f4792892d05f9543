"""Helper processes die with the process that started them.

A rank killed with `kill -9` (an OOM killer, a preempted node, a user) cannot clean up, so every process a
command starts asks the kernel to kill it when its parent dies (Linux's parent-death signal,
`prctl(PR_SET_PDEATHSIG, SIGKILL)`), and checks once that the parent is still the one it expects (it may have
died before the request took effect). Used by the verifier's workers, the local launcher's ranks and the
checkpoint writer's result-queue server; and `forked_children_die_with_us()` makes every process forked
from a command (megatron's checkpoint writer processes among them) do the same. `launch_rank()`: the process's
global rank as its launcher set it, read in one place. Like `nemo_lead.config.loading`, any layer may import
this module.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import threading
from collections.abc import Mapping

_PR_SET_PDEATHSIG = 1


def launch_rank(env: Mapping[str, str] = os.environ) -> int:
    """The process's global rank as its launcher set it, before torch.distributed exists: RANK (torchrun, the
    local launcher, the SLURM task wrapper), else SLURM_PROCID (srun), else 0 (a plain process)."""
    return int(env.get("RANK", env.get("SLURM_PROCID", "0")))


def die_with_parent(parent_pid: int | None = None) -> None:
    """Call in a child: SIGKILL it when its parent dies. `parent_pid`: the expected parent; if the child's
    parent is already another process (the expected one died first), exit now."""
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):
            pass
    if parent_pid is not None and os.getppid() != parent_pid:
        os._exit(1)


_hooked = False
_forking_in_main_thread = True  # set just before each fork; the child sees the value of its own fork


def _before_fork() -> None:
    global _forking_in_main_thread
    _forking_in_main_thread = threading.current_thread() is threading.main_thread()


def _after_fork_in_child() -> None:
    # the signal fires when the parent *thread* ends: only a child of the main thread may ask for it
    if _forking_in_main_thread:
        die_with_parent()


def forked_children_die_with_us() -> None:
    """Every child forked from this process from now on (`os.fork`, multiprocessing's "fork" and
    "forkserver" workers) gets the parent-death signal: libraries that fork helpers of their own (megatron's
    checkpoint writers) leave nothing behind when this process is killed. Processes started by
    `subprocess` or multiprocessing's "spawn" exec without Python's fork hooks: give those their own
    `die_with_parent()`. Children forked from other threads are left alone (the kernel would kill them when
    that thread ends). Idempotent."""
    global _hooked
    if not _hooked and hasattr(os, "register_at_fork"):
        os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
        _hooked = True
