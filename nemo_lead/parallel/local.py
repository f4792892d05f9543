"""Run a function on N local ranks (one process each), as torchrun would, and collect what they return.

Used by the commands that run an SPMD job (`nemo-lead convert | generate | eval`, through `run_command`)
when they are started as a single process, and by the tests' launcher (tests/distributed.py). Each rank gets RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR /
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
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from nemo_lead.parallel.state import detect_launch, free_port
from nemo_lead.runtime.processes import die_with_parent, forked_children_die_with_us
from nemo_lead.runtime.quiet import hide_import_noise
from nemo_lead.runtime.signals import held_stop_signal, hold_stop_signals


class RankFailed(RuntimeError):
    """A rank raised; the message holds its traceback (or a `JobError`'s message alone)."""


class JobError(RuntimeError):
    """A job stopped for a reason the user must see, not a bug (a NaN loss, for example): the command prints
    the message without a traceback and exits with status 1."""


def _rank_main(fn, rank, world_size, port, args, kwargs, env, results) -> None:
    hold_stop_signals()  # a forwarded stop before the loop's handlers exist is held, not fatal
    os.setpgrp()  # our own process group: the parent can kill us with everything we started
    die_with_parent()  # a killed launcher leaves no rank behind
    forked_children_die_with_us()  # nor anything the rank forks
    os.environ.update(env)
    os.environ.update(
        RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size), LOCAL_WORLD_SIZE=str(world_size),
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
    )
    try:
        hide_import_noise()
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        value = fn(*args, **kwargs)
        # plain pickle: tensors travel by value, independent of torch's shared-memory reductions
        results.put((rank, True, pickle.dumps(value)))
    except JobError as e:
        results.put((rank, False, str(e)))
    except BaseException:  # noqa: BLE001 - report anything, including SystemExit, to the parent
        results.put((rank, False, traceback.format_exc()))


def _kill(procs: Sequence[mp.process.BaseProcess]) -> None:
    for p in procs:
        if p.pid is not None and p.exitcode is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:  # died (or failed to start) before it made its own process group
                p.kill()
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
    forwarded = _forward_stop_signals(procs)
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
        for sig, handler in forwarded.items():
            signal.signal(sig, handler)
        _kill(procs)
        results.close()
    return [out[r] for r in range(world_size)]


# the stop signals of `nemo_lead.runtime.signals`: SIGHUP is a closed terminal (ssh dropped, tmux killed)
FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT, signal.SIGHUP)


def _forward_stop_signals(procs: Sequence[mp.process.BaseProcess]) -> dict:
    """SIGTERM / SIGUSR1 / SIGINT / SIGHUP sent to the launcher go on to every rank (each runs in its own process
    group, so a terminal's Ctrl-C or hang-up or a scheduler's signal would otherwise reach the launcher alone):
    the ranks' loops then finish their step and checkpoint (`nemo_lead.runtime.signals`). Returns the previous
    handlers."""
    if threading.current_thread() is not threading.main_thread():
        return {}

    def forward(signum, frame):  # noqa: ARG001
        for p in procs:
            if p.pid is not None and p.exitcode is None:
                try:
                    os.kill(p.pid, signum)
                except ProcessLookupError:
                    pass

    return {sig: signal.signal(sig, forward) for sig in FORWARDED_SIGNALS}


RANK_START_ENV = "NEMO_LEAD_TEST_RANK_START"  # tests only: how the local launcher starts its ranks


def rank_start_method() -> str:
    """How `run_command` starts local ranks: "spawn" (fresh interpreters), unless NEMO_LEAD_TEST_RANK_START
    says "fork". The tests' CLI processes (tests/cli_process.py) are forked from an interpreter that has
    imported torch and megatron-core already, so forking their ranks skips those imports in every rank (the
    ranks still run `_rank_main` from the top: their own process group, held stop signals, environment)."""
    method = os.environ.get(RANK_START_ENV, "spawn")
    if method not in ("spawn", "fork"):
        raise ValueError(f"{RANK_START_ENV} must be spawn or fork, got {method!r}")
    return method


def relaunches(ranks: int) -> bool:
    """`run_command` will start `ranks` local ranks from this process: a plain process (not under torchrun /
    srun) and more than one rank. A command whose preflight repeats what its job does first (loading the data)
    passes that preflight only then: otherwise the job runs here, or on the launcher's ranks, and checks it
    itself."""
    return ranks > 1 and detect_launch(os.environ).world_size == 1


def run_command(
    name: str,
    job: Callable[..., Any],
    args: Sequence[Any] = (),
    *,
    ranks: int,
    preflight: Callable[[], Any] | None = None,
    log: Callable[[str], None] | None = None,
) -> int:
    """How a `nemo-lead NAME` command runs its SPMD job `job(*args)` (every rank calls it); the exit status.

    Started under torchrun / srun, the job runs on the ranks the launcher gave. Started as one plain
    process, it runs here when `ranks` is 1, else re-launches itself on `ranks` local ranks (`run_local`,
    "spawn": fresh interpreters, so nothing of this process's state leaks into the ranks; the tests may ask
    for "fork", see `rank_start_method`).
    `preflight()` runs first, in this process only: checks that should fail before any rank starts.
    Exit status: 0 done; 1 a rank failed (its traceback is printed) or stopped with a `JobError`; 2 bad input -- a ValueError or OSError
    from the preflight or the job, printed as `nemo-lead NAME: message` (the messages name the file / key).
    `log` receives the "starting N local ranks" line (default: stderr).
    """
    try:
        if preflight is not None:
            preflight()
        if not relaunches(ranks):
            job(*args)
        elif held_stop_signal():
            print(f"nemo-lead {name}: stopped by {held_stop_signal()} before any rank started; nothing was written",
                  file=sys.stderr)
            return 128 + getattr(signal, held_stop_signal())
        else:
            (log or _to_stderr)(f"[{name}] starting {ranks} local ranks")
            run_local(job, ranks, args=args, start_method=rank_start_method())
    except (RankFailed, JobError) as e:
        print(f"nemo-lead {name}: {e}", file=sys.stderr)
        return 1
    except (ValueError, OSError) as e:
        print(f"nemo-lead {name}: {e}", file=sys.stderr)
        return 2
    return 0


def _to_stderr(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
