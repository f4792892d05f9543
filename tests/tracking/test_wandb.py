"""Weights & Biases tracking: an offline run's files read back (scalars under metrics.jsonl's names, the
config, tables), a resumed run keeps its W&B id, rank 0 only, and the error naming the extra without the client."""

from __future__ import annotations

import json
import sys

import pytest
from wandb_files import read_offline_runs

from nemo_lead.runtime.tracking import ID_FILE, TrackingError, WandbSettings, open_tracker, read_run_id
from nemo_lead.training.run.folder import RunFolder

OFFLINE = WandbSettings(enabled=True, mode="offline", project="tests")


@pytest.fixture
def wandb_client():
    return pytest.importorskip("wandb", reason="the optional extra nemo-lead[wandb] is not installed")


def _run_folder(path, settings=OFFLINE, config=None):
    folder = RunFolder(path, writer=True, tensorboard=False)
    folder.tracker = open_tracker(settings, path, config or {"lead": {"alpha": 0.05}, "steps": 3}, job_type="rl")
    return folder


def test_offline_run_holds_the_scalars_config_and_tables(wandb_client, tmp_path):
    folder = _run_folder(tmp_path)
    rows = [{"step": 1, "loss": 0.5, "accuracy": 0.25, "skipped": False, "time/generate": 1.5},
            {"step": 2, "loss": 0.25, "accuracy": 0.5, "skipped": True, "time/generate": 1.25}]
    for row in rows:
        folder.log_metrics(row)
    val = [{"step": 0, "pass@1": 0.125, "n": 2}, {"step": 2, "pass@1": 0.375, "n": 2}]
    for row in val:
        folder.log_validation(row)
    folder.close()

    assert folder.tracker is None
    (run,) = read_offline_runs(tmp_path / "wandb")  # wandb.dir defaults inside the run folder
    assert run.run_id == read_run_id(tmp_path) and run.project == "tests"
    assert run.config["lead"] == {"alpha": 0.05} and run.config["steps"] == 3
    logged = [{k: v for k, v in h.items() if not k.startswith("_")} for h in run.history if "loss" in h]
    # the names metrics.jsonl and TensorBoard use; bools are no scalars there either
    assert logged == [{k: v for k, v in r.items() if k != "skipped"} for r in rows]
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 2
    assert [json.loads(line) for line in (tmp_path / "val.jsonl").read_text().splitlines()] == val
    table = run.table("validation")
    assert table["columns"] == ["step", "pass@1", "n"] and table["data"] == [[0, 0.125, 2], [2, 0.375, 2]]
    # a table per validation, each with every line so far
    assert [h["step"] for h in run.history if "validation/path" in h] == [0, 2]


def test_a_resumed_run_continues_the_same_wandb_run(wandb_client, tmp_path):
    folder = _run_folder(tmp_path)
    folder.log_metrics({"step": 1, "loss": 1.0})
    folder.close()
    first_id = read_run_id(tmp_path)
    saved = json.loads((tmp_path / ID_FILE).read_text())
    folder = _run_folder(tmp_path)  # the same command again into the same folder
    folder.log_metrics({"step": 2, "loss": 0.5})
    folder.close()
    assert json.loads((tmp_path / ID_FILE).read_text()) == saved
    runs = read_offline_runs(tmp_path / "wandb")
    assert [r.run_id for r in runs] == [first_id, first_id]
    assert [[h["loss"] for h in r.history if "loss" in h] for r in runs] == [[1.0], [0.5]]
    other = tmp_path / "other"
    _run_folder(other).close()
    assert read_run_id(other) != first_id


def test_only_rank_0_and_only_when_enabled(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # importing it would fail: neither case may try
    assert open_tracker(OFFLINE, tmp_path, {}, "sft", writer=False) is None
    assert open_tracker(WandbSettings(), tmp_path, {}, "sft") is None
    assert not (tmp_path / ID_FILE).exists()


def test_missing_client_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
    with pytest.raises(TrackingError, match=r"wandb.enabled=true needs .* pip install 'nemo-lead\[wandb\]'"):
        open_tracker(OFFLINE, tmp_path, {}, "rl")
    assert isinstance(TrackingError("x"), ValueError)  # shared with every rank by the training loops


def test_settings_checks_and_the_recipe_overlay():
    with pytest.raises(ValueError, match="wandb.mode must be one of online, offline, got 'sometimes'"):
        WandbSettings(mode="sometimes")
    stage = WandbSettings(project="mine", tags=["a"])
    over = WandbSettings(enabled=True, mode="offline")
    merged = stage.merged(over)
    assert (merged.enabled, merged.mode, merged.project, merged.tags) == (True, "offline", "mine", ["a"])
    assert stage.merged(None) is stage


def test_a_recipe_run_reaches_every_training_and_eval_stage():
    from nemo_lead.config.loading import load_config
    from nemo_lead.pipeline.config import RunConfig

    cfg = load_config(RunConfig, [], ["recipe=demo", "out=runs/demo-wb", "wandb.enabled=true", "wandb.mode=offline",
                                      "stages.rl1.wandb.project=mine"])
    logged = {name: s["settings"]["wandb"] for name, s in cfg.resolved.items() if "wandb" in s["settings"]}
    assert sorted(logged) == ["eval", "rl1", "rl2", "sft"]  # prepare and select stages run no model
    assert all(w["enabled"] and w["mode"] == "offline" and w["group"] == "demo-wb" for w in logged.values())
    assert logged["rl1"]["project"] == "mine" and logged["rl2"]["project"] == "nemo-lead"
