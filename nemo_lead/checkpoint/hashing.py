"""The CRC-32 of a checkpoint's shard files, computed while megatron writes them, so that the manifest
(`nemo_lead.checkpoint.manifest`) needs no second pass over hundreds of GB.

dist_checkpointing's torch_dist writer (megatron-core's `FileSystemWriterAsync.write_preloaded_data`: in
forked writer processes in 0.16, in threads in 0.19) opens every shard file itself with `open(name, "wb")`,
a name its module looks up in its globals at call time, and writes it front to back through torch's
`_write_item` (tell, write, flush, fileno for the fsync). `hash_writes_into(folder)` puts `hooked_open`
under that name for the length of one save: a "wb" open of a file under `folder` returns a `HashingWriter`,
which passes every call to the real file and adds each write's bytes to a CRC-32 and a byte count. At
close it records `{"size", "crc32"}` in a small JSON file in `folder/.streamed-crc32/` (`STREAMED_DIR`): a
file, so the record reaches the saving rank from a forked writer process as well as from a thread.
Everything else (other modes, other paths, multistorageclient's `msc.open`, which the writer calls
instead of `open`) goes to the real `open` unchanged.

The manifest step (`manifest.entries_of_rank`) uses a record when its size is the file's and
reads the file back otherwise, so a megatron release whose writer does not take the hook still gets a
correct manifest (and a warning that the bytes were read back).

Standard library only; megatron's module is imported when a save installs the hook.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import warnings
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any
from urllib.parse import quote

from nemo_lead.checkpoint.manifest import STREAMED_DIR
from nemo_lead.runtime.files import write_atomic


class HashingWriter:
    """A binary file open for writing that keeps the CRC-32 and length of what went through it; refuses
    seek (a writer that seeks would make the streamed hash differ from the file's bytes). `record_dir`:
    where close() writes `{"size", "crc32"}` as `<relpath, quoted>.json`."""

    def __init__(self, raw: io.BufferedIOBase, relpath: str, record_dir: str):
        self._raw, self._relpath, self._record_dir = raw, relpath, record_dir
        self.crc32, self.size = 0, 0
        self._failed = False

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        written = self._raw.write(view)
        written = view.nbytes if written is None else written
        self.crc32 = zlib.crc32(view[:written] if written < view.nbytes else view, self.crc32)
        self.size += written
        return written

    def seek(self, *_: Any) -> int:
        raise io.UnsupportedOperation(f"seek on {self._relpath}: its CRC-32 is computed as it is written, "
                                      "front to back")

    def seekable(self) -> bool:
        return False

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._raw.tell()

    def fileno(self) -> int:
        return self._raw.fileno()

    def flush(self) -> None:
        self._raw.flush()

    @property
    def closed(self) -> bool:
        return self._raw.closed

    @property
    def name(self) -> Any:
        return self._raw.name

    def close(self) -> None:
        """Close the file; record its size and CRC-32 unless a write failed or it was closed already."""
        if self._raw.closed:
            return
        self._raw.close()
        if not self._failed:
            entry = {"path": self._relpath, "size": self.size, "crc32": f"{self.crc32:08x}"}
            write_atomic(os.path.join(self._record_dir, quote(self._relpath, safe="") + ".json"), json.dumps(entry))

    def __enter__(self) -> HashingWriter:
        return self

    def __exit__(self, exc_type: Any, *_: Any) -> None:
        self._failed = self._failed or exc_type is not None
        self.close()


def hooked_open(folder: str, real_open: Any = builtins.open) -> Any:
    """An `open` that wraps "wb" opens of files under `folder` in a HashingWriter and passes every other
    call to `real_open`."""
    root = os.path.realpath(folder)
    record_dir = os.path.join(root, STREAMED_DIR)

    def open_(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        if mode == "wb" and isinstance(file, (str, os.PathLike)):
            path = os.path.realpath(file)
            if path.startswith(root + os.sep):
                relpath = os.path.relpath(path, root).replace(os.sep, "/")
                return HashingWriter(real_open(file, mode, *args, **kwargs), relpath, record_dir)
        return real_open(file, mode, *args, **kwargs)

    return open_


@contextmanager
def hash_writes_into(folder: str | os.PathLike, module: ModuleType | None = None) -> Iterator[None]:
    """While the block runs, `open` in the writer's module (`module`; default megatron's torch_dist writer)
    is `hooked_open(folder)`; afterwards (also when the block raises) the module is as it was."""
    if module is None:
        from megatron.core.dist_checkpointing.strategies import filesystem_async as module
    missing = object()
    before = module.__dict__.get("open", missing)
    module.open = hooked_open(os.fspath(folder), builtins.open if before is missing else before)
    try:
        yield
    finally:
        if before is missing:
            del module.open
        else:
            module.open = before


_warned = False


def warn_unless_streamed(folder: str | os.PathLike, counts: dict[str, int]) -> None:
    """Once per process: say so when a save's shard files were all read back for the manifest (`counts` from
    `manifest.entries_of_rank`), i.e. this megatron-core's writer did not take the hook."""
    global _warned
    if counts.get("distcp_read_back") and not counts.get("distcp_in_write") and not _warned:
        _warned = True
        warnings.warn(f"{folder}: no dist_checkpointing shard file was hashed while written (this megatron-core's "
                      "writer does not open its files through the `open` that nemo_lead.checkpoint.hashing "
                      "replaces); they were read back for the manifest, a second pass over their bytes",
                      stacklevel=2)
