"""Raw records from the file formats problem sets come in, each with a location for error messages.

Every reader returns `(where, record)` pairs: `where` says where the record sits so that a bad row can
be named precisely ("train.jsonl:17" for the 17th line of a JSONL file, "train.parquet (row 16)" for a
tabular row, counted from 0 as `datasets` does). Formats:

    *.jsonl                  one JSON object per line (blank lines skipped)
    *.json                   one JSON list of objects (the authors' `deepscaler/data/*.json` files)
    *.parquet                a Parquet file (pyarrow)
    *.arrow                  an Arrow IPC stream or file (what `datasets` writes)
    folder                   a `datasets` `save_to_disk` folder (`state.json` + `*.arrow`), a `DatasetDict`
                             folder (`dataset_dict.json` + one sub-folder per split), or a folder of
                             Parquet files (a hub snapshot such as `data/train-00000-of-00001.parquet`)

Folders with several splits need `split=`; a single split is taken without asking.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

from nemo_lead.runtime.files import iter_jsonl

Located = tuple[str, dict]  # (where, record)


class DataError(ValueError):
    """A dataset problem, with a message that names the file and the line or row."""


def read_records(path: Path, split: str | None = None) -> list[Located]:
    """All records of a file or folder, in order (see the module docstring for the formats)."""
    if path.is_dir():
        return _read_folder(path, split)
    if split is not None:
        raise DataError(f"{path}: split={split!r} applies to dataset folders, not to a single file")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return list(_iter_jsonl(path))
    if suffix == ".json":
        return _read_json_list(path)
    if suffix == ".parquet":
        return _tabular(path, _parquet_table(path))
    if suffix == ".arrow":
        return _tabular(path, _arrow_table(path))
    raise DataError(f"{path}: unknown file type {suffix!r} (expected .jsonl, .json, .parquet or .arrow)")


# ----------------------------------------------------------------------------- text formats
def _iter_jsonl(path: Path) -> Iterator[Located]:
    for lineno, record in iter_jsonl(path, objects=True, error=DataError):
        yield f"{path}:{lineno}", record


def _read_json_list(path: Path) -> list[Located]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        hint = ("; one JSON object per line is JSON Lines: name the file .jsonl"
                if e.msg == "Extra data" and e.colno == 1 else "")
        raise DataError(f"{path}:{e.lineno}: invalid JSON ({e.msg} at column {e.colno}){hint}") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of objects, got {type(data).__name__}")
    out = []
    for i, record in enumerate(data):
        if not isinstance(record, dict):
            raise DataError(f"{path} (row {i}): expected a JSON object, got {type(record).__name__}")
        out.append((f"{path} (row {i})", record))
    return out


# ----------------------------------------------------------------------------- Arrow / Parquet
def _parquet_table(path: Path):
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except Exception as e:  # pyarrow raises several types for corrupt or non-Parquet files
        raise DataError(f"{path}: cannot read as Parquet ({e})") from None


def _arrow_table(path: Path):
    import pyarrow as pa

    # `datasets` writes the IPC *stream* format; accept the random-access file format too.
    for opener in (pa.ipc.open_stream, pa.ipc.open_file):
        try:
            with pa.memory_map(str(path)) as source:
                return opener(source).read_all()
        except pa.ArrowInvalid:
            continue
    raise DataError(f"{path}: cannot read as an Arrow IPC stream or file")


def _tabular(path: Path, table, first_row: int = 0) -> list[Located]:
    return [(f"{path} (row {first_row + i})", record) for i, record in enumerate(table.to_pylist())]


def _concat_tables(files: list[Path], read) -> list[Located]:
    out: list[Located] = []
    for f in files:
        out.extend(_tabular(f, read(f)))
    return out


# ----------------------------------------------------------------------------- folders
_SPLIT_PREFIX = re.compile(r"^([A-Za-z]+)[-_.]")
_SPLIT_NAMES = {"train", "test", "validation", "valid", "val", "dev", "eval"}


def _split_of(file: Path, root: Path) -> str:
    """Hub layouts: `data/<split>-00000-of-00001.parquet`, `<split>.parquet` or `<split>/<any>.parquet`."""
    m = _SPLIT_PREFIX.match(file.name)
    if m and m.group(1).lower() in _SPLIT_NAMES:
        return m.group(1)
    if file.parent != root and file.parent.name.lower() in _SPLIT_NAMES:
        return file.parent.name
    return ""  # not named after a split: all such files form one unnamed split


def _read_folder(path: Path, split: str | None) -> list[Located]:
    if (path / "dataset_dict.json").exists():
        splits = json.loads((path / "dataset_dict.json").read_text())["splits"]
        return _read_folder(path / _choose_split(path, splits, split), None)
    if (path / "state.json").exists():
        if split is not None:
            raise DataError(f"{path}: a single-split datasets folder; split={split!r} does not apply")
        state = json.loads((path / "state.json").read_text())
        files = [path / entry["filename"] for entry in state.get("_data_files", [])]
        return _concat_tables(files or sorted(path.glob("*.arrow")), _arrow_table)
    files = sorted(path.rglob("*.parquet"))
    if not files:
        raise DataError(f"{path}: no dataset here (expected dataset_dict.json, state.json or *.parquet files)")
    by_split: dict[str, list[Path]] = {}
    for f in files:
        by_split.setdefault(_split_of(f, path), []).append(f)
    if len(by_split) == 1 and split is None:
        return _concat_tables(files, _parquet_table)
    return _concat_tables(by_split[_choose_split(path, sorted(by_split), split)], _parquet_table)


def _choose_split(path: Path, splits: list[str], split: str | None) -> str:
    names = ", ".join(s or "(files not named after a split)" for s in splits)
    if split is None:
        if len(splits) == 1:
            return splits[0]
        raise DataError(f"{path}: holds several splits ({names}); choose one with split=")
    if split not in splits:
        raise DataError(f"{path}: no split {split!r} (splits: {names})")
    return split
