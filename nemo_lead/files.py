"""Writing files so that a crash never leaves half of one, and reading the JSON-lines logs a crash may cut.

- `write_atomic(path, text)`: the text goes to a temporary file next to `path`, then replaces it in one
  rename, so a reader (or a run resumed after `kill -9`) sees the old file or the new one, never a mix.
  `fsync=True` also flushes it to the disk first (evaluation samples: expensive to regenerate).
- `read_jsonl(path)`: the complete lines of a JSON-lines log. A write cut short by a crash can leave a torn
  last line; it is skipped (the writer appends whole lines, so only the last can be torn). A malformed line
  anywhere else is an error naming the file and line: the file was changed by something else.
- `append_jsonl(path, rows)`: whole lines in one write, flushed.

Like `nemo_lead.config`, any layer may import this module.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
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


def read_jsonl(path: str | os.PathLike, *, what: str = "a JSON line") -> list[Any]:
    """The complete lines of a JSON-lines file ([] when it does not exist); see the module docstring.
    `what`: how the error names an expected line."""
    path = Path(path)
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8", errors="replace").split("\n")
    rows = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError as e:
            if i == len(lines) - 1:  # no newline after it: a torn last line
                break
            raise TornFileError(f"{path}:{i + 1}: not {what} ({e.msg} at column {e.colno}); only a torn last "
                                "line is tolerated (was the file edited by hand?)") from None
    return rows


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
