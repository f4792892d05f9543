"""What a checkpoint folder holds, read without building a model: its path in a run folder, the complete
checkpoints of a run, and its meta.json (format in `nemo_lead.models.weights_checkpoint`'s docstring).

Cheap on purpose (json and pathlib only): `models/source.py` reads a checkpoint's meta to tell what
`--model` names, and the loops list checkpoints to resume, without loading torch or megatron-core.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
_STEP_RE = re.compile(r"^step_(\d+)$")


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    """run_dir/checkpoints/step_{step:06d}"""
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, oldest first, as (step, folder)."""
    root = Path(run_dir) / "checkpoints"
    found = []
    for p in root.glob("step_*") if root.is_dir() else []:
        m = _STEP_RE.match(p.name)
        if m and (p / "meta.json").is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


def read_checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """meta.json of a checkpoint folder (raises FileNotFoundError naming the folder if incomplete)."""
    meta_file = Path(path) / "meta.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{path}: not a complete checkpoint (no meta.json)")
    meta = json.loads(meta_file.read_text())
    if meta.get("format") != FORMAT_VERSION:
        raise ValueError(f"{meta_file}: checkpoint format {meta.get('format')} is not {FORMAT_VERSION}")
    return meta
