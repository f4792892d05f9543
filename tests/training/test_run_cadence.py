"""When a training run checkpoints: every `save_every` steps, and once `save_every_minutes` have passed since
the last checkpoint (so what a crash loses is bounded whatever a step costs)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from nemo_lead.training.run.lifecycle import _save_due


def _run(step: int, every: int, minutes: float, saved_ago_s: float):
    cfg = SimpleNamespace(save_every=every, save_every_minutes=minutes)
    info = SimpleNamespace(rank=0, world_size=1)
    return SimpleNamespace(cfg=cfg, info=info, step=step, last_saved_at=time.monotonic() - saved_ago_s)


def test_checkpoints_by_steps_and_by_minutes():
    assert _save_due(_run(step=20, every=10, minutes=0, saved_ago_s=0))
    assert not _save_due(_run(step=21, every=10, minutes=0, saved_ago_s=10_000))  # no time bound
    assert _save_due(_run(step=21, every=10, minutes=30, saved_ago_s=31 * 60))
    assert not _save_due(_run(step=21, every=10, minutes=30, saved_ago_s=29 * 60))
    assert _save_due(_run(step=3, every=0, minutes=0.5, saved_ago_s=31))  # sft's default: by time only
    assert not _save_due(_run(step=3, every=0, minutes=0, saved_ago_s=10_000))
