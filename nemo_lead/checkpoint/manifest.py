"""A checkpoint's manifest: every file of the folder with its size and a CRC-32 of its bytes, so that a
checkpoint damaged after it was written (flipped bytes, a truncated file, a part gone) is never loaded.

    step_000100/manifest.json   {"format": 1, "hash": "crc32", "files": {"model/__0_0.distcp":
                                 {"size": 123, "crc32": "9f3c01aa"}, "meta.json": {...}, ...}}

Writing (`nemo_lead.models.weights_checkpoint.save_checkpoint`): dist_checkpointing's shard files are hashed while
megatron's writer writes them (`nemo_lead.checkpoint.hashing` records each one's size and CRC-32 in
`STREAMED_DIR`); each rank takes those records for the files it wrote and reads back the others (the small
files nemo-lead writes itself, and every file when a megatron release's writer does not take the hook),
rank 0 gathers the entries, removes the records and writes manifest.json last, atomically, before the
folder gets its final name. A checkpoint without a manifest is never complete. Ownership follows the
writers' own file names: dist_checkpointing's `__R_N.distcp` and the RNG part's `rank_R.pt` are rank R's; the rest (metadata,
common state, meta.json, the tokenizer) rank 0's.

Checking (`check_files`): sizes of every file, hashes of a share of them (a rank checks every world-th file,
so a job's ranks split the reading). The hash is zlib's CRC-32 (the standard library; bench/RESULTS.md has
its speed and what it means for a 14B checkpoint): it is there to catch damage, not tampering.

Cheap on purpose (standard library only): `nemo-lead check` and the loops' resume use it before torch.
"""

from __future__ import annotations

import json
import logging
import re
import shutil
import time
import zlib
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from nemo_lead.runtime.files import write_atomic

MANIFEST_FILE = "manifest.json"
STREAMED_DIR = ".streamed-crc32"  # the records of files hashed as they were written, removed before sealing
MANIFEST_FORMAT = 1
DAMAGED_PREFIX = ".damaged-"
NO_MANIFEST = (f"no {MANIFEST_FILE} (written by a nemo-lead from before manifests, or the file was deleted; "
               "`nemo-lead check RUN --seal` writes one for the files as they are)")
_CHUNK = 8 << 20
_OWNED = (re.compile(r"^__(\d+)_\d+\.distcp$"), re.compile(r"^rank_(\d+)\.pt$"))
_log = logging.getLogger(__name__)


class CheckpointDamaged(ValueError):
    """A checkpoint whose files do not match its manifest (the message names the folder and the files)."""

    def __init__(self, path: str | Path, problems: list[str]):
        self.path, self.problems = Path(path), problems
        super().__init__(f"{path} is damaged and was not loaded: {'; '.join(problems)}")


def file_entry(path: str | Path) -> dict[str, Any]:
    """{"size", "crc32"} of one file, read in chunks."""
    crc, size = 0, 0
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
            size += len(chunk)
    return {"size": size, "crc32": f"{crc:08x}"}


def owner(relpath: str, world_size: int) -> int:
    """The rank that wrote a checkpoint file (see the module docstring)."""
    name = relpath.rsplit("/", 1)[-1]
    for pattern in _OWNED:
        m = pattern.match(name)
        if m and int(m.group(1)) < world_size:
            return int(m.group(1))
    return 0


def _files(folder: Path) -> list[str]:
    rels = (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() and p.name != MANIFEST_FILE)
    return sorted(rel for rel in rels if not rel.startswith(STREAMED_DIR + "/"))


def streamed_entries(folder: str | Path, rank: int, world_size: int) -> dict[str, dict[str, Any]]:
    """relpath -> {"size", "crc32"} recorded while `rank`'s files were written (`nemo_lead.checkpoint.hashing`);
    only this rank's records are opened. An unreadable record counts as none (the file is read back)."""
    records = Path(folder) / STREAMED_DIR
    out = {}
    for record in sorted(records.glob("*.json")) if records.is_dir() else []:
        rel = unquote(record.name[:-len(".json")])
        if owner(rel, world_size) != rank:
            continue
        try:
            entry = json.loads(record.read_text())
            out[rel] = {"size": int(entry["size"]), "crc32": str(entry["crc32"])}
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return out


def entries_of_rank(folder: str | Path, rank: int, world_size: int,
                    counts: dict[str, int] | None = None) -> dict[str, dict[str, Any]]:
    """Manifest entries of the files `rank` wrote into `folder`: a file's streamed record when there is one
    of the file's size, else the file read back. `counts` (when given) gets the bytes hashed each way:
    "in_write" and "read_back", and of these the dist_checkpointing shards' ("distcp_in_write",
    "distcp_read_back")."""
    folder = Path(folder)
    streamed = streamed_entries(folder, rank, world_size)
    counts = {} if counts is None else counts
    for key in ("in_write", "read_back", "distcp_in_write", "distcp_read_back"):
        counts.setdefault(key, 0)
    entries = {}
    for rel in _files(folder):
        if owner(rel, world_size) != rank:
            continue
        path, record = folder / rel, streamed.get(rel)
        how = "in_write" if record is not None and record["size"] == path.stat().st_size else "read_back"
        entries[rel] = record if how == "in_write" else file_entry(path)
        counts[how] += entries[rel]["size"]
        if rel.endswith(".distcp"):
            counts[f"distcp_{how}"] += entries[rel]["size"]
    _log.debug("%s, rank %d: %d bytes hashed while written, %d read back", folder, rank, counts["in_write"],
               counts["read_back"])
    return entries


def remove_streamed(folder: str | Path) -> None:
    """Remove the records of files hashed while written (after every rank has read its own)."""
    shutil.rmtree(Path(folder) / STREAMED_DIR, ignore_errors=True)


def write_manifest(folder: str | Path, entries: dict[str, dict[str, Any]]) -> None:
    """manifest.json of `folder` (atomically); `entries`: every rank's, merged."""
    data = {"format": MANIFEST_FORMAT, "hash": "crc32", "files": dict(sorted(entries.items()))}
    write_atomic(Path(folder) / MANIFEST_FILE, json.dumps(data, indent=1) + "\n")


def read_manifest(folder: str | Path) -> dict[str, dict[str, Any]]:
    """The files a manifest lists; raises CheckpointDamaged when it is missing or unreadable."""
    path = Path(folder) / MANIFEST_FILE
    try:
        data = json.loads(path.read_text())
        files = data["files"]
        if data.get("format") != MANIFEST_FORMAT or not isinstance(files, dict):
            raise ValueError(f"format {data.get('format')}")
    except FileNotFoundError:
        raise CheckpointDamaged(folder, [NO_MANIFEST]) from None
    except (OSError, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise CheckpointDamaged(folder, [f"{MANIFEST_FILE} is unreadable ({e})"]) from None
    return files


def check_files(folder: str | Path, rank: int = 0, world_size: int = 1) -> list[str]:
    """What is wrong with a checkpoint folder ([] = intact): a missing or unreadable manifest, a listed file
    missing, of another size, or (for this rank's share of the files) with other bytes."""
    folder = Path(folder)
    try:
        files = read_manifest(folder)
    except CheckpointDamaged as e:
        return e.problems if rank == 0 else []
    problems = []
    for i, (rel, want) in enumerate(sorted(files.items())):
        path = folder / rel
        try:
            size = path.stat().st_size
        except OSError:
            problems.append(f"{rel} is missing")
            continue
        if size != want["size"]:
            problems.append(f"{rel} has {size} bytes, the manifest {want['size']}")
        elif i % world_size == rank and file_entry(path)["crc32"] != want["crc32"]:
            problems.append(f"{rel} has other bytes than when it was saved (CRC-32 differs)")
    return problems


def set_aside(folder: str | Path, problems: list[str]) -> Path:
    """Move a damaged checkpoint to `.damaged-<name>` beside it (kept for inspection, never loaded or listed),
    with a DAMAGED.txt saying what was wrong; returns the new path."""
    folder = Path(folder)
    target = folder.parent / f"{DAMAGED_PREFIX}{folder.name}"
    n = 1
    while target.exists():
        n += 1
        target = folder.parent / f"{DAMAGED_PREFIX}{folder.name}.{n}"
    folder.rename(target)
    (target / "DAMAGED.txt").write_text(f"set aside {time.strftime('%Y-%m-%dT%H:%M:%S')}:\n"
                                        + "".join(f"  {p}\n" for p in problems))
    return target


def damaged_checkpoints(run_dir: str | Path) -> list[Path]:
    """Checkpoints of a run set aside as damaged."""
    root = Path(run_dir) / "checkpoints"
    return sorted(root.glob(f"{DAMAGED_PREFIX}*")) if root.is_dir() else []
