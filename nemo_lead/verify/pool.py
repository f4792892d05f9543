"""A small pool of worker processes with a hard deadline per task, that survives its workers dying.

Why processes, and why not `multiprocessing.Pool` or `concurrent.futures`:
- math-verify's timeouts (and ours, `match.time_limit`) use SIGALRM, which works only in a process's main
  thread; each worker is a process whose main thread runs the task.
- Code stuck in C (a huge exact integer power inside sympy/gmpy) never returns to Python, so no signal
  handler runs. Only killing the process stops it, and the standard pools cannot kill one stuck task and go
  on (a killed `multiprocessing.Pool` worker can take the shared queue's lock with it; a
  `ProcessPoolExecutor` becomes "broken"). Here each worker has its own pair of pipes and runs one task at a
  time, so the parent knows which task each worker holds, kills exactly that worker when its task passes
  the deadline, starts a replacement, and nothing shared is left corrupted.

Why fresh interpreters (`subprocess` with `sys.executable -c ...`), not fork, forkserver or spawn:
- fork copies a parent that may hold torch/CUDA/NCCL threads and their locks (unsafe; Python 3.12+ warns);
- spawn and forkserver re-import the parent's `__main__` module in every worker (a training script that
  imports torch and megatron at the top costs seconds and hundreds of MB per worker);
- a fresh `python -c` imports only this package and math-verify, paid once per worker, in the background
  while the caller keeps working (workers report "ready"; deadlines count only from then). The start-up
  times of the three are in bench/RESULTS.md, "Design measurements".

No worker outlives the pool: `close()` (also called by a `weakref.finalize`, which runs at garbage
collection or interpreter exit) stops them; a worker whose parent dies gets EOF on its task pipe, and on
Linux also SIGKILL via PR_SET_PDEATHSIG for the case where it is stuck in C when that happens. (Linux sends
that signal when the *thread* that started the worker ends: a pool driven from a short-lived thread sees
its replacement workers die with that thread and starts new ones, at a cost of a start-up each.)
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from pathlib import Path
from typing import Any, NamedTuple

from nemo_lead.runtime.processes import die_with_parent

_PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
_START_FAILURES = 3  # consecutive workers dying before they are ready: give up with an error
_ERROR_CHARS = 500


class TaskResult(NamedTuple):
    """kind: "done" (value = the function's return), "error" (value = the exception's text, the worker
    lives on), "killed" (passed its deadline), "crashed" (value = the worker's exit code)."""

    kind: str
    value: Any
    seconds: float


@dataclass
class _Worker:
    proc: subprocess.Popen
    tasks: Connection
    results: Connection
    ready: bool = False
    task: int | None = None
    started: float = 0.0


def _resolve(ref: str) -> Callable:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def _spawn(target: str, init: str) -> _Worker:
    task_r, task_w = os.pipe()
    result_r, result_w = os.pipe()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "-c", "from nemo_lead.verify.pool import serve; serve()",
           str(task_r), str(result_w), str(os.getpid()), target, init]
    try:
        proc = subprocess.Popen(cmd, pass_fds=(task_r, result_w), env=env, stdin=subprocess.DEVNULL)
    finally:
        os.close(task_r)
        os.close(result_w)
    return _Worker(proc, Connection(task_w, readable=False), Connection(result_r, writable=False))


def _stop(workers: list[_Worker], grace_s: float = 0.5) -> None:
    """Ask every worker to exit, kill those that have not within `grace_s`, reap them all."""
    for w in workers:
        try:
            w.tasks.send(None)
        except OSError:
            pass
    end = time.monotonic() + grace_s
    for w in workers:
        try:
            w.proc.wait(timeout=max(0.0, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            w.proc.kill()
            w.proc.wait()
        w.tasks.close()
        w.results.close()
    workers.clear()


def _finalize(workers: list[_Worker], owner_pid: int) -> None:
    if os.getpid() == owner_pid:  # a forked copy of the parent must not stop the parent's workers
        _stop(workers)


class WorkerPool:
    """`workers` processes, each running `target(task)` ("module:function") one task at a time after
    `init()` ("module:function" or ""). `run(tasks, deadline_s)` returns one TaskResult per task, in order."""

    def __init__(self, target: str, workers: int, init: str = "", start_timeout_s: float = 120.0):
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self._target, self._init = target, init
        self._start_timeout_s = start_timeout_s
        self._workers: list[_Worker] = [_spawn(target, init) for _ in range(workers)]
        self._lock = threading.Lock()
        self._start_failures = 0
        self._idle_since: float | None = None  # when the pool last had no task running and none ready
        self._finalizer = weakref.finalize(self, _finalize, self._workers, os.getpid())

    @property
    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._workers]

    def close(self) -> None:
        """Stop all workers (idempotent)."""
        self._finalizer()

    def wait_ready(self) -> None:
        """Block until every worker has started (or raise if they cannot)."""
        with self._lock:
            self._check_open()
            while not all(w.ready for w in self._workers):
                self._pump(None, float("inf"))

    def run(self, tasks: Sequence, deadline_s: float) -> list[TaskResult]:
        """Run every task; a task still running `deadline_s` after it started is killed with its worker.
        If this raises (workers cannot start, or KeyboardInterrupt), the pool is closed: workers may hold
        tasks of the abandoned run."""
        with self._lock:
            self._check_open()
            results: list[TaskResult | None] = [None] * len(tasks)
            queue = deque(range(len(tasks)))
            try:
                while queue or any(w.task is not None for w in self._workers):
                    for w in self._workers:
                        if w.ready and w.task is None and queue:
                            self._dispatch(w, queue, tasks)
                    self._pump(results, deadline_s)
            except BaseException:
                self.close()
                raise
            return results  # type: ignore[return-value]

    # -- internals -------------------------------------------------------------------------------------

    def _check_open(self) -> None:
        if not self._finalizer.alive:
            raise RuntimeError("this WorkerPool is closed")

    def _dispatch(self, w: _Worker, queue: deque, tasks: Sequence) -> None:
        idx = queue.popleft()
        try:
            w.tasks.send((idx, tasks[idx]))
        except OSError:  # died while idle: the task never started, give it to another worker
            queue.appendleft(idx)
            self._replace(w)
            return
        w.task, w.started = idx, time.monotonic()

    def _replace(self, w: _Worker) -> None:
        if w.proc.poll() is None:
            w.proc.kill()
        w.proc.wait()
        w.tasks.close()
        w.results.close()
        self._workers[self._workers.index(w)] = _spawn(self._target, self._init)

    def _pump(self, results, deadline_s: float) -> None:
        """Wait for one round of messages (results, ready, deaths) or the nearest deadline."""
        now = time.monotonic()
        busy = [w for w in self._workers if w.task is not None]
        if busy:
            self._idle_since = None
            timeout = max(0.0, min(w.started + deadline_s for w in busy) - now)
        else:  # waiting for workers to start
            self._idle_since = self._idle_since or now
            timeout = self._idle_since + self._start_timeout_s - now
            if timeout < 0:
                raise RuntimeError(f"no grading worker became ready within {self._start_timeout_s:.0f} s")
        by_conn = {w.results: w for w in self._workers}
        for conn in wait(list(by_conn), timeout=timeout):
            w = by_conn[conn]
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                self._lost(w, results)
                continue
            if msg[0] == "ready":
                w.ready, self._start_failures, self._idle_since = True, 0, None
            elif msg[0] == "failed":
                raise RuntimeError(f"grading worker failed to start:\n{msg[1]}")
            else:
                idx, (kind, value) = msg
                results[idx] = TaskResult(kind, value, time.monotonic() - w.started)
                w.task = None
        now = time.monotonic()
        for w in list(self._workers):
            if w.task is not None and now - w.started > deadline_s and not w.results.poll():
                results[w.task] = TaskResult("killed", None, now - w.started)
                self._replace(w)

    def _lost(self, w: _Worker, results) -> None:
        """A worker's pipe closed: it died. Record its task as crashed and start a replacement."""
        code = w.proc.wait()
        if w.task is not None:
            results[w.task] = TaskResult("crashed", code, time.monotonic() - w.started)
        elif not w.ready:
            self._start_failures += 1
            if self._start_failures >= _START_FAILURES:
                raise RuntimeError(f"grading workers keep dying before they start (exit code {code})")
        self._replace(w)


# -- worker side -------------------------------------------------------------------------------------------


def serve() -> None:
    """Worker main loop (argv: task fd, result fd, parent pid, target, init)."""
    task_fd, result_fd, parent_pid, target, init = sys.argv[1:6]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    die_with_parent(int(parent_pid))
    tasks = Connection(int(task_fd), writable=False)
    results = Connection(int(result_fd), readable=False)
    try:
        fn = _resolve(target)
        if init:
            _resolve(init)()
    except BaseException:
        results.send(("failed", traceback.format_exc()))
        return
    results.send(("ready", os.getpid()))
    while True:
        try:
            msg = tasks.recv()
        except EOFError:
            return
        if msg is None:
            return
        idx, task = msg
        try:
            out = ("done", fn(task))
        except Exception as e:  # the task's fault, not the worker's: report it and go on
            out = ("error", f"{type(e).__name__}: {e}"[:_ERROR_CHARS])
        results.send((idx, out))
