"""`nemo-lead ...` as a process of its own, forked from a warm interpreter instead of started from nothing.

The end-to-end tests run the CLI as a user does: a process with its own pid, exit status, stdout / stderr,
signals, environment and working directory. Started from nothing, each such process spends most of a tiny
run importing torch, megatron-core and transformers. Here the processes are forked from multiprocessing's
fork server, which imported those once (`PRELOAD`); each child is otherwise a fresh CLI process: a session of
its own (so `os.killpg` reaches it and its helpers), the environment and working directory it is given, the
platform's default multiprocessing start method, stdout and stderr in files read back when it ends, and
Python's exit handlers run at its end. The local launcher's ranks are forked from the warm child too
(NEMO_LEAD_TEST_RANK_START=fork, `nemo_lead.parallel.local.rank_start_method`; each still runs the rank's
start-up from the top); verifier workers and SLURM tasks it starts are fresh interpreters as in a real run.

What a warm child does not see is its own import of those packages: tests about start-up (the first line
before the heavy imports, the import-warning filter) start a fresh interpreter (`fresh=True`, or
NEMO_LEAD_TEST_FRESH_CLI=1 for every call).
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nemo_lead.parallel.local import RANK_START_ENV

CLI = [sys.executable, "-m", "nemo_lead.cli"]
PRELOAD = ["nemo_lead", "torch", "megatron.core", "transformers", "nemo_lead.cli", "nemo_lead.training.sft.loop",
           "nemo_lead.training.rl.loop", "nemo_lead.eval.runner", "nemo_lead.pipeline.runner"]

_ctx: mp.context.ForkServerContext | None = None


def _context() -> mp.context.ForkServerContext:
    global _ctx
    if _ctx is None:
        _ctx = mp.get_context("forkserver")
        _ctx.set_forkserver_preload(PRELOAD)
    return _ctx


def _child(argv: list[str], env: dict[str, str], cwd: str | None, out: str, err: str) -> None:
    """The CLI process: what `python -m nemo_lead.cli ARGV` does, in a child of the warm fork server."""
    os.setsid()
    for fd, path in ((1, out), (2, err)):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    os.environ.clear()
    os.environ.update(env)
    if cwd is not None:
        os.chdir(cwd)
    mp.set_start_method(None, force=True)  # the platform's default again, as in a process started from nothing
    sys.argv = [CLI[-1], *argv]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGPIPE):
        signal.signal(sig, signal.default_int_handler if sig == signal.SIGINT else
                      signal.SIG_IGN if sig == signal.SIGPIPE else signal.SIG_DFL)  # Python's start-up handlers
    from nemo_lead.cli import main

    try:
        code = main(argv)
    finally:
        atexit._run_exitfuncs()
    sys.exit(code)


class CLIProcess:
    """A started `nemo-lead` process: `pid`, `poll()`, `wait()`, `send_signal()`, and its output once ended."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None, cwd: str | Path | None = None,
                 fresh: bool = False):
        self.args = [*CLI, *argv]
        self._folder = tempfile.TemporaryDirectory(prefix="cli-")
        self._out, self._err = (os.path.join(self._folder.name, n) for n in ("stdout", "stderr"))
        env = dict(os.environ if env is None else env)
        self._popen: subprocess.Popen | None = None
        self._proc = None
        if fresh or os.environ.get("NEMO_LEAD_TEST_FRESH_CLI") == "1":
            with open(self._out, "wb") as o, open(self._err, "wb") as e:
                self._popen = subprocess.Popen(self.args, stdout=o, stderr=e, stdin=subprocess.DEVNULL, env=env,
                                               cwd=cwd, start_new_session=True)
            self.pid = self._popen.pid
        else:
            env.setdefault(RANK_START_ENV, "fork")
            self._proc = _context().Process(target=_child, args=(list(argv), env, None if cwd is None else str(cwd),
                                                                 self._out, self._err), name="nemo-lead")
            self._proc.start()
            self.pid = self._proc.pid

    def poll(self) -> int | None:
        if self._popen is not None:
            return self._popen.poll()
        return self._proc.exitcode

    def wait(self, timeout: float | None = None) -> int:
        if self._popen is not None:
            return self._popen.wait(timeout)
        self._proc.join(timeout)
        if self._proc.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self._proc.exitcode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill_group(self) -> None:
        """SIGKILL to the process and everything in its session (helpers, local ranks)."""
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def output(self) -> tuple[str, str]:
        return tuple(Path(p).read_text(errors="replace") for p in (self._out, self._err))  # type: ignore[return-value]

    def close(self) -> None:
        """Kill what is left of its session (the process if it still runs; ranks or helpers a killed process
        left behind, in process groups of their own) and wait until none of it is left, then remove its output
        files. Waiting matters: a killed rank holds the run folder's lock until the kernel has torn it down,
        so a rerun started at once could find the folder still in use."""
        self.kill_group()
        if self.poll() is None:
            self.wait(30)
        deadline = time.monotonic() + 30
        while (left := session_members(self.pid)) and time.monotonic() < deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.02)
        self._folder.cleanup()


def session_members(sid: int) -> list[int]:
    """Pids of the live (not zombie) processes in session `sid`, from /proc."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:  # state, ppid, pgrp, session
            found.append(int(entry))
    return found


def run(argv: list[str], env: dict[str, str] | None = None, cwd: str | Path | None = None, timeout: float = 240,
        fresh: bool = False) -> subprocess.CompletedProcess:
    """Run `nemo-lead ARGV` to its end, like `subprocess.run(..., capture_output=True, text=True)`; on timeout
    its whole session is killed and `subprocess.TimeoutExpired` raised."""
    proc = CLIProcess(argv, env=env, cwd=cwd, fresh=fresh)
    try:
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill_group()
            raise
        stdout, stderr = proc.output()
        return subprocess.CompletedProcess(proc.args, code, stdout, stderr)
    finally:
        proc.close()
