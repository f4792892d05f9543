"""checkpoint/meta.py: a run's complete checkpoints and their kinds, read from meta.json without torch."""

from __future__ import annotations

import json

import pytest

from nemo_lead.checkpoint.meta import FORMAT_VERSION, checkpoint_dir, saved_checkpoints


def _checkpoint(run, step, parts=None, meta_text=None):
    folder = checkpoint_dir(run, step)
    folder.mkdir(parents=True)
    text = meta_text if meta_text is not None else json.dumps({"format": FORMAT_VERSION, "step": step, "parts": parts})
    (folder / "meta.json").write_text(text)
    return folder


def test_saved_checkpoints_tell_training_from_weights_only_and_keep_an_unreadable_meta_as_its_error(tmp_path):
    full = _checkpoint(tmp_path, 2, ["model", "optim", "rng", "lag"])
    weights = _checkpoint(tmp_path, 10, ["model"])
    broken = _checkpoint(tmp_path, 4, meta_text='{"format": ')  # a torn meta.json
    (tmp_path / "checkpoints" / ".tmp-step_000012").mkdir()  # a save in progress: not listed
    (tmp_path / "checkpoints" / "step_000014").mkdir()  # no meta.json: not complete, not listed

    found = saved_checkpoints(tmp_path)

    assert [(c.step, c.path) for c in found] == [(2, full), (4, broken), (10, weights)]  # oldest first
    assert found[0].is_training() and not found[2].is_training()
    with pytest.raises(json.JSONDecodeError):
        found[1].is_training()  # only when someone needs to know
    assert saved_checkpoints(tmp_path / "no-such-run") == []
