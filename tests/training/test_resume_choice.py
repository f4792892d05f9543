"""`choose_resume_checkpoint` on fake checkpoint folders (meta.json, a shard file per part and a manifest, written
as a save writes them; no model): the decision's cases one by one in one process (world size 1, no
torch.distributed), then two ranks on gloo reaching the same choice. The real folders of a tiny run are damaged
part by part in test_faults.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from distributed import run_distributed

from nemo_lead.checkpoint.manifest import MANIFEST_FILE, entries_of_rank, write_manifest
from nemo_lead.checkpoint.meta import FORMAT_VERSION, checkpoint_dir
from nemo_lead.parallel import destroy_parallel, init_parallel
from nemo_lead.training.run.resume import ResumeChoice, choose_resume_checkpoint

ONE_PROCESS = SimpleNamespace(rank=0, world_size=1)


def _checkpoint(run: Path, step: int, training: bool = True, meta: str | None = None) -> Path:
    """A sealed checkpoint folder: a training one (model, optim, rng parts) or a weights-only one. `meta`:
    meta.json's text instead of a valid one."""
    folder = checkpoint_dir(run, step)
    parts = ["model", "optim", "rng"] if training else ["model"]
    for part in parts:
        (folder / part).mkdir(parents=True)
        (folder / part / "__0_0.distcp").write_bytes(bytes(range(256)) * (step + 1))
    text = json.dumps({"format": FORMAT_VERSION, "step": step, "parts": parts})
    (folder / "meta.json").write_text(text if meta is None else meta)
    write_manifest(folder, entries_of_rank(folder, 0, 1))
    return folder


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _choose(run: Path, total_steps: int = 4) -> ResumeChoice:
    return choose_resume_checkpoint(ONE_PROCESS, str(run), total_steps)


def test_a_run_without_checkpoints_starts_afresh(tmp_path):
    assert _choose(tmp_path) == ResumeChoice(path=None, weights_only=False, step=0)


def test_the_newest_intact_checkpoint_is_chosen(tmp_path):
    _checkpoint(tmp_path, 2)
    newest = _checkpoint(tmp_path, 4)
    assert _choose(tmp_path) == ResumeChoice(path=newest, weights_only=False, step=4)


def test_a_damaged_newest_checkpoint_is_set_aside_and_the_older_one_chosen(tmp_path):
    older = _checkpoint(tmp_path, 2)
    newest = _checkpoint(tmp_path, 4)
    _flip(newest / "optim" / "__0_0.distcp")
    choice = _choose(tmp_path)
    assert (choice.path, choice.weights_only, choice.step) == (older, False, 2)
    [(path, aside, problems)] = choice.damaged
    assert path == newest and not newest.exists()
    assert aside == newest.parent / ".damaged-step_000004" and aside.is_dir()
    assert problems == ("optim/__0_0.distcp has other bytes than when it was saved (CRC-32 differs)",)
    assert "CRC-32 differs" in (aside / "DAMAGED.txt").read_text()
    assert _choose(tmp_path) == ResumeChoice(path=older, weights_only=False, step=2)  # the next start: nothing new


def test_a_finished_runs_weights_only_final_checkpoint_is_chosen_at_or_after_total_steps(tmp_path):
    _checkpoint(tmp_path, 2)
    final = _checkpoint(tmp_path, 4, training=False)
    for total_steps in (4, 3):
        assert _choose(tmp_path, total_steps) == ResumeChoice(path=final, weights_only=True, step=4)


def test_extending_past_a_weights_only_checkpoint_takes_the_training_one_before_it(tmp_path):
    _checkpoint(tmp_path, 2)
    training = _checkpoint(tmp_path, 4)
    _checkpoint(tmp_path, 6, training=False)
    assert _choose(tmp_path, 8) == ResumeChoice(path=training, weights_only=False, step=4)
    # that one damaged: set aside, and the next older training checkpoint taken
    _flip(training / "model" / "__0_0.distcp")
    choice = _choose(tmp_path, 8)
    assert (choice.path, choice.weights_only, choice.step) == (checkpoint_dir(tmp_path, 2), False, 2)
    assert [d.aside.name for d in choice.damaged] == [".damaged-step_000004"]


def test_extending_a_weights_only_checkpoint_without_a_training_one_is_refused(tmp_path):
    final = _checkpoint(tmp_path, 4, training=False)
    with pytest.raises(ValueError, match=f"{final} holds the weights only .* cannot be extended to 6 steps"):
        _choose(tmp_path, 6)
    assert final.is_dir()


def test_an_unreadable_meta_json_of_an_older_checkpoint_matters_only_when_it_is_read(tmp_path):
    _checkpoint(tmp_path, 2, meta="{not json")  # sealed as it is: the manifest cannot tell
    newest = _checkpoint(tmp_path, 4)
    assert _choose(tmp_path).path == newest
    _checkpoint(tmp_path, 6, training=False)
    with pytest.raises(ValueError, match="Expecting property name"):  # extending reads step 2's kind
        _choose(tmp_path, 8)


def test_none_intact_is_refused_and_again_at_the_next_start(tmp_path):
    for step in (2, 4):
        _flip(_checkpoint(tmp_path, step) / "model" / "__0_0.distcp")
    with pytest.raises(ValueError) as first:
        _choose(tmp_path)
    message = str(first.value)
    assert message.startswith(f"{tmp_path} has no intact checkpoint to resume from; set aside as damaged: "
                              ".damaged-step_000002, .damaged-step_000004")
    assert "\n  step_000004: model/__0_0.distcp has other bytes" in message
    assert "\n  step_000002: model/__0_0.distcp has other bytes" in message
    assert message.endswith("Delete the .damaged-* folders to train again from step 0 in this folder, or use "
                            "another --out.")
    with pytest.raises(ValueError, match="has no intact checkpoint to resume from; set aside as damaged: "
                                         r"\.damaged-step_000002, \.damaged-step_000004 \(in "):
        _choose(tmp_path)  # nothing is set aside now, the earlier ones still refuse a fresh start over them


def test_a_checkpoint_without_a_manifest_is_neither_loaded_nor_moved(tmp_path):
    _checkpoint(tmp_path, 2)
    newest = _checkpoint(tmp_path, 4)
    (newest / MANIFEST_FILE).unlink()
    with pytest.raises(ValueError, match="step_000004: no manifest.json .*; it was not loaded"):
        _choose(tmp_path)
    assert newest.is_dir()


def test_what_killed_saves_left_is_undone_first_and_noted(tmp_path):
    _checkpoint(tmp_path, 2)
    root = tmp_path / "checkpoints"
    _checkpoint(tmp_path, 4).rename(root / ".old-step_000004")  # killed between the two renames of a re-save
    (root / ".tmp-step_000006").mkdir()
    choice = _choose(tmp_path)
    assert (choice.path, choice.step) == (root / "step_000004", 4)
    assert choice.notes == ("step_000004: restored from .old-step_000004 (a re-save was killed before it finished)",
                            ".tmp-step_000006: removed (left by a save that was killed)")
    assert sorted(p.name for p in root.iterdir()) == ["step_000002", "step_000004"]


def _choose_on_a_rank(runs: list[str]) -> list:
    info = init_parallel(1, 1)
    out = []
    for run in runs:
        try:
            choice = choose_resume_checkpoint(info, run, 4)
            out.append((choice.path, choice.step, [(d.path, d.aside, d.problems) for d in choice.damaged]))
        except ValueError as e:
            out.append(str(e))
    destroy_parallel()
    return out


def test_two_ranks_reach_the_same_choice(tmp_path):
    """The ranks split the manifest check (each hashes every other file): a damage only rank 1 reads (the
    fourth file) is found by both, rank 0 sets it aside, and both return the same choice, or the same error."""
    one, none = tmp_path / "one", tmp_path / "none"
    _checkpoint(one, 2)
    _flip(_checkpoint(one, 4) / "rng" / "__0_0.distcp")
    for folder in (_checkpoint(none, 2), _checkpoint(none, 4)):
        _flip(folder / "optim" / "__0_0.distcp")
    first, second = run_distributed(_choose_on_a_rank, 2, [str(one), str(none)])
    assert first == second
    (path, step, [(damaged, aside, problems)]), refused = first
    assert (path, step) == (checkpoint_dir(one, 2), 2) and aside == one / "checkpoints" / ".damaged-step_000004"
    assert problems == ("rng/__0_0.distcp has other bytes than when it was saved (CRC-32 differs)",)
    assert refused.startswith(f"{none} has no intact checkpoint to resume from; set aside as damaged: "
                              ".damaged-step_000002, .damaged-step_000004")
