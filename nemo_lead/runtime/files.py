"""Writing files so that a crash never leaves half of one, and reading the JSON-lines logs a crash may cut.

- `write_atomic(path, text)`: the text goes to a temporary file next to `path`, then replaces it in one
  rename, so a reader (or a run resumed after `kill -9`) sees the old file or the new one, never a mix.
  `fsync=True` also flushes it to the disk first (evaluation samples: expensive to regenerate).
- `iter_jsonl(path)`: the records of a JSON-lines file with their line numbers; every reader of JSON lines
  (data files, prompt files, logs) goes through it, so a bad line is reported the same way everywhere:
  file, line, what is wrong. `torn_last_line=True` (logs) skips a torn last line.
- `read_jsonl(path)`: the complete lines of a JSON-lines log. A write cut short by a crash can leave a torn
  last line; it is skipped (the writer appends whole lines, so only the last can be torn). A malformed line
  anywhere else is an error naming the file and line: the file was changed by something else.
- `append_jsonl(path, rows)`: whole lines in one write, flushed.
- `cut_jsonl(path, last_step)`: a per-step log cut back to a step (a resumed run writes the later steps again).

Like `nemo_lead.config.loading`, any layer may import this module.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any


class TornFileError(ValueError):
    """A JSON-lines file with a malformed line that is not its last (the message names file and line)."""


def write_atomic(path: str | os.PathLike, text: str, *, fsync: bool = False) -> None:
    """Replace `path` with `text` in one rename (see the module docstring); creates the parent folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        tmp.replace(path)
    except OSError as e:  # no space, quota, ...: leave the old file and no temporary one; name the file
        tmp.unlink(missing_ok=True)
        raise OSError(e.errno, f"writing {path} failed: {e.strerror or e}") from None


def write_json(path: str | os.PathLike, data: Any, *, indent: int | None = 2) -> None:
    """`data` as JSON (NaN / inf as null), atomically."""
    write_atomic(path, json.dumps(json_safe(data), indent=indent) + "\n")


def json_safe(value: Any) -> Any:
    """NaN / inf as None, recursively (strict JSON readers refuse them)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def jsonl_text(rows: Iterable[dict[str, Any]]) -> str:
    return "".join(json.dumps(json_safe(r), ensure_ascii=False) + "\n" for r in rows)


def iter_jsonl(path: str | os.PathLike, *, torn_last_line: bool = False, objects: bool = False,
               what: str = "", error: type[Exception] = ValueError) -> Iterator[tuple[int, Any]]:
    """(line number, record) of each non-blank line of a JSON-lines file.

    A line that is not JSON raises `error` naming the file, the line and the column ("invalid JSON ..."),
    unless `torn_last_line` and it is the last line with no newline after it (a write cut by a crash): then
    it is skipped. `objects`: every record must be a JSON object. `what`: the expected line, for the error."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8", errors="replace" if torn_last_line else "strict").split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            if torn_last_line and i == len(lines) - 1:  # no newline after it: a torn last line
                return
            expected = f" (expected {what})" if what else ""
            hint = "; only a torn last line is tolerated (was the file edited by hand?)" if torn_last_line else ""
            raise error(f"{path}:{i + 1}: invalid JSON{expected} ({e.msg} at column {e.colno}){hint}") from None
        if objects and not isinstance(record, dict):
            raise error(f"{path}:{i + 1}: expected a JSON object, got {type(record).__name__}")
        yield i + 1, record


def read_jsonl(path: str | os.PathLike, *, what: str = "a JSON line") -> list[Any]:
    """The complete lines of a JSON-lines log ([] when it does not exist); see the module docstring.
    `what`: how the error names an expected line."""
    if not Path(path).is_file():
        return []
    return [record for _, record in iter_jsonl(path, torn_last_line=True, what=what, error=TornFileError)]


def append_jsonl(path: str | os.PathLike, rows: list[dict[str, Any]], *, fsync: bool = False) -> None:
    """Append whole lines in one write, flushed (`fsync`: also to the disk)."""
    if not rows:
        return
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(jsonl_text(rows))
        f.flush()
        if fsync:
            os.fsync(f.fileno())


def cut_jsonl(path: str | os.PathLike, last_step: int) -> None:
    """Keep the lines of a per-step log whose "step" is <= `last_step` (and drop a torn last line), in one
    atomic rewrite; nothing when the file does not exist."""
    path = Path(path)
    if not path.is_file():
        return
    write_atomic(path, jsonl_text(r for r in read_jsonl(path) if r.get("step", 0) <= last_step))
