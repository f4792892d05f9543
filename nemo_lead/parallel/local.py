"""Run a function on N local ranks (one process each), as torchrun would, and collect what they return.

Used by `nemo-lead convert --tp N --pp M` when it is started as a single process, and by the tests'
launcher (tests/distributed.py). Each rank gets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR /
MASTER_PORT (a free localhost port), so `init_parallel` inside `fn` sees a torchrun-style launch.

Clean-up is the point of this module: every rank runs in its own process group (so helpers it starts,
such as dist_checkpointing's writer processes, go with it); on the first failure, or at the deadline, all
ranks' groups are killed and joined; a failure re-raises with the failing rank's traceback.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import queue
import signal
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .state import free_port


class RankFailed(RuntimeError):
    """A rank raised; the message holds its traceback."""


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the parent dies, so a killed launcher leaves no rank behind."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _rank_main(fn, rank, world_size, port, args, kwargs, env, results) -> None:
    os.setpgrp()  # our own process group: the parent can kill us with everything we started
    _die_with_parent()
    os.environ.update(env)
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )
    try:
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        value = fn(*args, **kwargs)
        # plain pickle: tensors travel by value, independent of torch's shared-memory reductions
        results.put((rank, True, pickle.dumps(value)))
    except BaseException:  # noqa: BLE001 - report anything, including SystemExit, to the parent
        results.put((rank, False, traceback.format_exc()))


def _kill(procs: Sequence[mp.process.BaseProcess]) -> None:
    for p in procs:
        if p.pid is not None and p.exitcode is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        p.join(timeout=10)


def run_local(
    fn: Callable[..., Any],
    world_size: int,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    *,
    timeout: float | None = None,
    start_method: str = "spawn",
    env: Mapping[str, str] | None = None,
) -> list[Any]:
    """Run `fn(*args, **kwargs)` on ranks 0..world_size-1; return their results in rank order.

    `fn`, `args` and the results must be picklable (a module-level function). `start_method`: "spawn"
    (fresh interpreters; safe anywhere) or "forkserver" (forks a pre-started server; fast when the
    server preloads torch/megatron, see tests/distributed.py). Raises RankFailed or TimeoutError; either
    way no rank process is left running.
    """
    ctx = mp.get_context(start_method)
    results = ctx.Queue()
    port = free_port()
    env = {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), **(env or {})}
    procs = [
        ctx.Process(target=_rank_main, args=(fn, r, world_size, port, tuple(args), dict(kwargs or {}), env, results),
                    name=f"rank{r}")
        for r in range(world_size)
    ]
    deadline = None if timeout is None else time.monotonic() + timeout
    out: dict[int, Any] = {}
    try:
        for p in procs:
            p.start()
        while len(out) < world_size:
            wait = 1.0 if deadline is None else min(1.0, deadline - time.monotonic())
            if wait <= 0:
                missing = sorted(set(range(world_size)) - set(out))
                raise TimeoutError(f"ranks {missing} of {world_size} did not finish within {timeout:.0f} s")
            try:
                rank, ok, payload = results.get(timeout=wait)
            except queue.Empty:
                dead = [p for p in procs if p.exitcode not in (None, 0) and int(p.name[4:]) not in out]
                if dead:
                    raise RankFailed(f"{dead[0].name} died with exit code {dead[0].exitcode} and no report") from None
                continue
            if not ok:
                raise RankFailed(f"rank {rank} of {world_size} failed:\n{payload}")
            out[rank] = pickle.loads(payload)
        for p in procs:
            p.join(timeout=30)
    finally:
        _kill(procs)
        results.close()
    return [out[r] for r in range(world_size)]
