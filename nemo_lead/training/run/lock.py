"""One writer per run folder: `lock_folder(RUN)` holds RUN/.lock for the rest of the process's life, and a
second process that tries refuses at once, naming the holder (host, pid, command, since when).

The lock is an OS record lock (`fcntl.lockf`, POSIX): the kernel drops it when the process dies, kill -9
included, so a stale lock cannot exist. A POSIX lock belongs to the process, not to a file descriptor
that forked children share (as `flock` locks do): verifier workers and checkpoint writers forked from
the rank do not keep it. It works on local file systems and on NFS (through the lock manager); on a file
system that refuses record locks (a Lustre mount without `flock`, some FUSE ones) the lock falls back to
a heartbeat claim: the file names its holder and a thread touches it every `HEARTBEAT_S` seconds; a claim older than
`CLAIM_S` (its holder died) is taken over.

Taken by the writer (global rank 0) of `nemo-lead sft | rl` (`nemo_lead.training.run.lifecycle.start_run`) and by
`nemo-lead run` for its OUT (each stage's SFT / RL folder is then locked by the stage's own run); the local
launcher of a multi-rank run checks it first (`refuse_if_in_use`), so a folder in use is refused before
any rank starts.
Standard library only: `nemo-lead run` takes it before torch is loaded.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path

LOCK_FILE = ".lock"
HEARTBEAT_S = 30.0
CLAIM_S = 120.0
_UNSUPPORTED = (errno.ENOLCK, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP)

_held: dict[Path, int] = {}  # folder -> the open lock file (never closed: closing any descriptor drops a POSIX lock)


class FolderInUse(ValueError):
    """Another process writes this folder (the message names it and what to do; a command exits with 2)."""


def _me() -> dict:
    return {"host": socket.gethostname(), "pid": os.getpid(), "since": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "command": " ".join(["nemo-lead", *sys.argv[1:3]])}


def _describe(text: str) -> str:
    try:
        h = json.loads(text)
        return f"pid {h['pid']} on {h['host']} ({h.get('command', 'nemo-lead')}, since {h.get('since', '?')})"
    except (ValueError, KeyError, TypeError):
        return "a process that left no name"


def _refuse(folder: Path, holder: str) -> FolderInUse:
    return FolderInUse(f"{folder} is in use by {holder}: one process writes a run folder at a time. Wait for it "
                       "to finish or stop it, or use another --out")


def lock_folder(folder: str | Path) -> None:
    """Hold `folder`'s lock until this process ends (created if needed; again for a folder held: no-op).
    Raises FolderInUse naming the holder."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key = folder.resolve()
    if key in _held:
        return
    path = folder / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            holder = _describe(os.pread(fd, 4096, 0).decode(errors="replace"))
            os.close(fd)  # we hold no lock on it, so closing drops nothing
            raise _refuse(folder, holder) from None
        if e.errno not in _UNSUPPORTED:
            os.close(fd)
            raise
        _take_claim(folder, fd)
    _held[key] = fd
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(_me()).encode(), 0)
    except OSError:  # a full disk: the lock holds, only the holder's name is missing
        pass


def refuse_if_in_use(folder: str | Path) -> None:
    """Raise FolderInUse, naming the holder, when another process holds `folder`'s lock; take nothing.

    For a launcher that starts the ranks which then lock the folder (`nemo-lead sft --tp 2` as one process):
    the refusal comes before any rank starts. Creates nothing; a folder this process holds is free to it."""
    folder = Path(folder)
    path = folder / LOCK_FILE
    if folder.resolve() in _held or not path.is_file():
        return
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released below, by closing the only descriptor
    except OSError as e:
        if e.errno in (errno.EAGAIN, errno.EACCES):
            raise _refuse(folder, _describe(os.pread(fd, 4096, 0).decode(errors="replace"))) from None
        if e.errno not in _UNSUPPORTED:
            raise
        holder = _live_claim(folder, os.pread(fd, 4096, 0).decode(errors="replace"))
        if holder:
            raise _refuse(folder, holder) from None
    finally:
        os.close(fd)


def _live_claim(folder: Path, text: str) -> str | None:
    """The holder's description when `folder`'s claim is another process's and fresh, else None."""
    try:
        holder = json.loads(text)
    except ValueError:
        holder = None
    fresh = time.time() - (folder / LOCK_FILE).stat().st_mtime < CLAIM_S
    if holder and fresh and (holder.get("host"), holder.get("pid")) != (socket.gethostname(), os.getpid()):
        return _describe(text) + f"; a heartbeat claim, as {folder} has no file locks"
    return None


def _take_claim(folder: Path, fd: int) -> None:
    """No record locks on this file system: a heartbeat claim (see the module docstring)."""
    path = folder / LOCK_FILE
    holder = _live_claim(folder, os.pread(fd, 4096, 0).decode(errors="replace"))
    if holder:
        os.close(fd)
        raise _refuse(folder, holder)

    def heartbeat() -> None:
        while True:
            time.sleep(HEARTBEAT_S)
            try:
                os.utime(path)
            except OSError:
                return

    threading.Thread(target=heartbeat, name="nemo-lead-claim", daemon=True).start()
