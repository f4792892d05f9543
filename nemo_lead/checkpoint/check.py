"""`nemo-lead check PATH`: verify the checkpoints of a run folder (or of one checkpoint, or of every stage of a
`nemo-lead run` folder) against their manifests, without torch: every file's size and CRC-32
(`nemo_lead.checkpoint.manifest`). Prints one line per checkpoint; exit status 0 when all are intact, 1 when
one is damaged, 2 when PATH holds no checkpoint.

`seal=true` writes a manifest for checkpoints that have none (saved by a nemo-lead from before manifests):
it records the files as they are now, so check them some other way first (a load, an evaluation).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from nemo_lead.checkpoint.manifest import (
    MANIFEST_FILE,
    check_files,
    damaged_checkpoints,
    entries_of_rank,
    write_manifest,
)
from nemo_lead.checkpoint.meta import list_checkpoints


@dataclass
class CheckConfig:
    """`nemo-lead check PATH [seal=true]`."""

    path: Optional[str] = None  # a run folder, a checkpoint folder, or a `nemo-lead run` folder (its stages)
    seal: bool = False  # write a manifest for checkpoints without one (older nemo-lead), then check them

    def __post_init__(self) -> None:
        if not self.path:
            raise ValueError("path must name a run folder or a checkpoint (nemo-lead check RUN)")


def checkpoints_under(path: Path) -> list[Path]:
    """The checkpoints PATH holds: itself, its run's, or those of the runs in its stages/ folders."""
    if (path / "meta.json").is_file():
        return [path]
    runs = [path] if (path / "checkpoints").is_dir() else sorted(p for p in (path / "stages").glob("*") if p.is_dir())
    return [c for run in runs for _, c in list_checkpoints(run)]


def _size(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6


def run_check(cfg: CheckConfig) -> int:
    path = Path(cfg.path)
    found = checkpoints_under(path)
    runs = sorted({c.parent.parent for c in found} | ({path} if (path / "checkpoints").is_dir() else set()))
    aside = [d for run in runs for d in damaged_checkpoints(run)]
    if not found and not aside:
        print(f"nemo-lead check: {path} holds no checkpoint (give a run folder, a checkpoint or a `nemo-lead run` "
              "folder)", file=sys.stderr)
        return 2
    bad = 0
    for ckpt in found:
        if cfg.seal and not (ckpt / MANIFEST_FILE).is_file():
            write_manifest(ckpt, entries_of_rank(ckpt, 0, 1))
            print(f"{ckpt}: sealed (a manifest of its files as they are now)")
        problems = check_files(ckpt)
        bad += bool(problems)
        print(f"{ckpt}: " + (f"DAMAGED: {'; '.join(problems)}" if problems else f"intact ({_size(ckpt):.1f} MB)"))
    for d in aside:
        print(f"{d}: set aside as damaged by an earlier resume (see its DAMAGED.txt)")
    if bad:
        print(f"nemo-lead check: {bad} of {len(found)} checkpoints damaged; a resume sets them aside and continues "
              "from the newest intact one", file=sys.stderr)
    return 1 if bad else 0
