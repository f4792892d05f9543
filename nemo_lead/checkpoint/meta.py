"""What a checkpoint folder holds, read without building a model: its path in a run folder, the complete
checkpoints of a run (with their kind: a training checkpoint or the weights alone), and its meta.json (format
in `nemo_lead.models.weights_checkpoint`'s docstring); and what a killed save left in the run's checkpoints
folder, finished or removed before a run resumes (`recover_checkpoints`).

Cheap on purpose (json, pathlib and shutil only): `models/source.py` reads a checkpoint's meta to tell what
`--model` names, and the loops list checkpoints to resume, without loading torch or megatron-core.
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1
TRAINING_PARTS = ("optim", "rng")  # the parts a training checkpoint adds to the model (training/run/train_state.py)
_STEP_RE = re.compile(r"^step_(\d+)$")
# a save in progress is written as TMP_PREFIX + step_N, a re-saved step_N waits as OLD_PREFIX + step_N until the
# new one is in place (the atomic write: nemo_lead.models.weights_checkpoint.atomic_dir)
TMP_PREFIX, OLD_PREFIX = ".tmp-", ".old-"


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


def recover_checkpoints(run_dir: str | Path) -> list[str]:
    """Rank 0, before a run opens its folder: finish or undo what killed saves left in RUN/checkpoints. A
    `.old-step_N` without its `step_N` (killed between the two renames of a re-save) becomes `step_N` again;
    every other `.tmp-*` / `.old-*` goes. Returns what was done, one line each."""
    root = Path(run_dir) / "checkpoints"
    done = []
    for old in sorted(root.glob(f"{OLD_PREFIX}step_*")) if root.is_dir() else []:
        final = root / old.name[len(OLD_PREFIX):]
        if not final.exists():
            old.rename(final)
            done.append(f"{final.name}: restored from {old.name} (a re-save was killed before it finished)")
    for stale in sorted([*root.glob(f"{TMP_PREFIX}*"), *root.glob(f"{OLD_PREFIX}*")]) if root.is_dir() else []:
        shutil.rmtree(stale, ignore_errors=True)
        done.append(f"{stale.name}: removed (left by a save that was killed)")
    return done


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


@dataclass(frozen=True)
class SavedCheckpoint:
    """A complete checkpoint of a run: its step, folder, and whether it holds the training state
    (`error`: why its meta.json could not tell; raised only if someone asks)."""

    step: int
    path: Path
    training: bool = False
    error: Exception | None = None

    def is_training(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.training


def saved_checkpoints(run_dir: str | Path) -> list[SavedCheckpoint]:
    """`list_checkpoints` with each one's kind read from its meta.json, oldest first. A meta.json that cannot
    be read is not an error here: a resume checks the newest checkpoint's files first, and an older one's
    meta.json may never be needed."""
    found = []
    for step, path in list_checkpoints(run_dir):
        try:
            parts = read_checkpoint_meta(path)["parts"]
            found.append(SavedCheckpoint(step, path, training=set(TRAINING_PARTS) <= set(parts)))
        except Exception as e:  # a damaged meta.json: kept as the error
            found.append(SavedCheckpoint(step, path, error=e))
    return found
