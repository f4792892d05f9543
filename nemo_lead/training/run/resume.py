"""Which checkpoint a run resumes from, decided in one place: `choose_resume_checkpoint`.

Why one function: the decision has several parts (undo what killed saves left, take the newest checkpoint,
check it against its manifest, set a damaged one aside and try the next, a training checkpoint or a
finished run's weights-only one, refuse when none is intact) and every rank must reach the same answer.
Spread over the run's start as separate rank-0-then-broadcast steps, the rule could only be read by
following the round trips between modules; here it reads top to bottom, and `start_run` (so SFT and RL
alike) only acts on the `ResumeChoice` it returns.

How the ranks agree: rank 0 does the file-system work and shares what it found in one broadcast (the
notes of the undone saves, the complete checkpoints with their kind, those set aside by earlier starts);
every rank then walks the same candidates, newest first, taking part in each collective manifest check
(`checkpoint_problems`: the ranks share the reading), so each reaches the same choice without another
round trip. Only when a damaged checkpoint was set aside (rank 0 moves it) is the outcome broadcast once
more: the names it was set aside under.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

from nemo_lead.checkpoint.manifest import NO_MANIFEST, damaged_checkpoints, set_aside
from nemo_lead.checkpoint.meta import SavedCheckpoint, recover_checkpoints, saved_checkpoints
from nemo_lead.models.weights_checkpoint import checkpoint_problems
from nemo_lead.parallel import ParallelInfo
from nemo_lead.parallel.ranks import on_writer_then_share

T = TypeVar("T")


class SetAside(NamedTuple):
    """A damaged checkpoint moved out of the way by this start: where it was, where it is, what is wrong."""

    path: Path
    aside: Path
    problems: tuple[str, ...]


@dataclass(frozen=True)
class ResumeChoice:
    """What `choose_resume_checkpoint` decided; the same on every rank."""

    path: Path | None  # the checkpoint to load (None: a fresh start)
    weights_only: bool  # a finished run's weights-only final checkpoint (final_checkpoint=weights)
    step: int  # the step it holds (0 for a fresh start)
    notes: tuple[str, ...] = ()  # what undoing killed saves did, one line each (RUN/checkpoints/ relative)
    damaged: tuple[SetAside, ...] = ()  # damaged checkpoints set aside on the way, newest first

    def saved_step(self, final_checkpoint: str, total_steps: int) -> int:
        """`Run.last_saved` at the start: the resumed step is saved already, so a finished run is not saved
        again (a re-save replaces the only complete checkpoint by a rename), unless a full final checkpoint is
        to become a weights-only one (`final_checkpoint` changed on the rerun)."""
        if self.path is None:
            return -1
        converts = not self.weights_only and self.step >= total_steps and final_checkpoint == "weights"
        return -1 if converts else self.step


def _survey(run_dir: str | Path) -> tuple[list[str], list[SavedCheckpoint], list[Path]]:
    """Rank 0: undo what killed saves left, then (the notes, the complete checkpoints oldest first, those
    set aside by earlier starts)."""
    notes = recover_checkpoints(run_dir)
    return notes, saved_checkpoints(run_dir), damaged_checkpoints(run_dir)


def resume_point(found: Sequence[SavedCheckpoint], total_steps: int) -> tuple[Path | None, bool]:
    """(the checkpoint a rerun continues from among `found` (oldest first), whether it holds the weights only).

    The newest checkpoint, when it is a training one. A weights-only checkpoint (a finished run's final one,
    `final_checkpoint=weights`) is taken when it is at or past `total_steps`: the run is done and a rerun only
    finishes it again. A rerun that extends the run continues from the newest training checkpoint before it
    (the steps after it are trained again); without one it cannot continue, and says so."""
    if not found:
        return None, False
    newest = found[-1]
    if newest.is_training():
        return newest.path, False
    if newest.step >= total_steps:
        return newest.path, True
    full = [c.path for c in found if c.is_training()]
    if full:
        return full[-1], False
    raise ValueError(f"{newest.path} holds the weights only (final_checkpoint=weights) and the run has no earlier "
                     f"training checkpoint, so it cannot be extended to {total_steps} steps: start a new run from "
                     f"it (actor.model={newest.path}), or keep full checkpoints (final_checkpoint=full, keep_last >= 2)")


def choose_resume_checkpoint(info: ParallelInfo, run_dir: str | Path, total_steps: int) -> ResumeChoice:
    """Collective: the checkpoint a run in `run_dir` resumes from (`resume_point` among the intact ones; the
    module docstring says how the ranks agree). A damaged checkpoint is set aside
    (`checkpoints/.damaged-step_N`) and the next older one tried. Raises ValueError when a checkpoint has no
    manifest (not loaded, not moved), when only a weights-only one is left for a run to extend, and when the
    run has checkpoints but none is intact."""
    notes, found, aside_before = on_writer_then_share(info, lambda: _survey(run_dir))
    problems = functools.cache(checkpoint_problems)  # each checkpoint read once (every rank asks for the same)

    damaged: list[tuple[Path, list[str]]] = []
    asides: list[Path] = []
    while True:
        newest = found[-1].path if found else None
        bad = problems(newest) if newest is not None else []
        if not bad:
            latest, weights_only = resume_point(found, total_steps)
            bad = problems(latest) if latest not in (None, newest) else []
            if not bad:
                break
            newest = latest
        if bad == [NO_MANIFEST]:  # not damaged, unverifiable: not loaded, not moved either
            raise ValueError(f"{newest}: {NO_MANIFEST}; it was not loaded")
        if info.rank == 0:
            asides.append(set_aside(newest, bad))
        damaged.append((newest, bad))
        found = [c for c in found if c.path != newest]
    all_aside = aside_before
    if damaged:  # only rank 0 knows the names they were set aside under
        asides, all_aside = on_writer_then_share(
            info, lambda: (asides, damaged_checkpoints(run_dir) if latest is None else []))
    if latest is None and all_aside:
        reasons = "".join(f"\n  {p.name}: {'; '.join(b)}" for p, b in damaged)
        raise ValueError(f"{run_dir} has no intact checkpoint to resume from; set aside as damaged: "
                         f"{', '.join(p.name for p in all_aside)} (in {Path(run_dir) / 'checkpoints'}){reasons}\n"
                         "Nothing was loaded or changed. Delete the .damaged-* folders to train again from "
                         "step 0 in this folder, or use another --out.")
    step = next(c.step for c in found if c.path == latest) if latest is not None else 0
    return ResumeChoice(path=latest, weights_only=weights_only, step=step, notes=tuple(notes),
                        damaged=tuple(SetAside(p, a, tuple(b)) for (p, b), a in zip(damaged, asides)))
