"""`nemo-lead run` with the training and evaluation stages replaced by fakes (the real ones: test_micro.py):
stage order, outputs feeding later stages, skip finished / resume interrupted / rerun changed stages, `only=`,
the stage-2 selection from the stage-1 run folder, and summary.json / summary.md / the figures."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from nemo_lead.config.loading import load_config
from nemo_lead.pipeline.config import RunConfig
from nemo_lead.pipeline.kinds import KINDS
from nemo_lead.pipeline.runner import STATE_FILE, run_recipe
from nemo_lead.pipeline.stages import StageStopped

RECIPE = """
paths: {problems: PROBLEMS, heldout: HELDOUT}
stages:
  - name: data1
    kind: select
    problems: ["${paths.problems}"]
    difficulty: ">= 3"
  - name: sft
    kind: sft
    actor: {model: tiny-qwen2}
    data: {path: "${paths.problems}"}
    steps: 2
  - name: rl1
    kind: rl
    actor: {model: "${stage:sft.checkpoint}"}
    data: {path: "${stage:data1.data}"}
    steps: 3
  - name: data2
    kind: select
    problems: ["${stage:data1.data}"]
    from_run: ${stage:rl1.run}
    accuracy: "<= 0.75"
    extra: ["${paths.heldout}"]
  - name: rl2
    kind: rl
    actor: {model: "${stage:rl1.checkpoint}"}
    data: {path: "${stage:data2.data}"}
    steps: 2
  - name: eval
    kind: eval
    models: {SFT: "${stage:sft.checkpoint}", stage 1: "${stage:rl1.checkpoint}", stage 2: "${stage:rl2.checkpoint}"}
    data: "${paths.heldout}"
    sampling: {n: 4, temperature: 1.0, max_tokens: 64}
"""


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _replace_run(monkeypatch, kind: str, fn) -> None:
    monkeypatch.setitem(KINDS, kind, dataclasses.replace(KINDS[kind], run=fn))


@pytest.fixture
def setup(tmp_path, monkeypatch):
    problems = _write_jsonl(tmp_path / "problems.jsonl",
                            [{"id": f"p{i}", "problem": f"{i}+1", "answer": str(i + 1), "difficulty": i % 5 + 1}
                             for i in range(20)])
    heldout = _write_jsonl(tmp_path / "heldout.jsonl", [{"id": f"h{i}", "problem": f"{i}-1", "answer": str(i - 1)}
                                                       for i in range(4)])
    recipe = tmp_path / "micro.yaml"
    recipe.write_text(RECIPE.replace("PROBLEMS", str(problems)).replace("HELDOUT", str(heldout)))
    calls: list[tuple[str, object]] = []
    stop_once: set[str] = set()

    def fake_run(stage):
        calls.append((stage.name, stage.config))
        if stage.name in stop_once:
            stop_once.discard(stage.name)
            raise StageStopped(f"stage {stage.name!r} stopped before its last step", 0)
        run = Path(stage.config.out)
        run.mkdir(parents=True, exist_ok=True)
        ckpt = run / "checkpoints" / f"step_{stage.config.steps:06d}"
        ckpt.mkdir(parents=True, exist_ok=True)
        if stage.kind == "rl":  # two visits of p4: 2/4 then 4/4 -> 0.75; p3 2/8 -> 0.25; p2 8/8 -> 1.0
            rows = [("p4", 2, 4), ("p3", 2, 8), ("p2", 8, 8), ("p4", 4, 4)]
            _write_jsonl(run / "problem_stats.jsonl", [{"id": i, "step": 1, "samples": n, "correct": c,
                                                         "mean_length": 10.0} for i, c, n in rows])
            _write_jsonl(run / "val.jsonl", [{"step": s, "pass@1": 0.1 * s, "cons@k": 0.2, "mean_length": 50 - s,
                                              "truncated_frac": 0.0, "n": 2, "problems": 4}
                                             for s in range(stage.config.steps + 1)])
        return {"run": str(run.resolve()), "checkpoint": str(ckpt.resolve())}

    def fake_eval(stage):
        calls.append((stage.name, dict(stage.models)))
        from nemo_lead.pipeline.config import eval_row_config

        for i, row in enumerate(stage.models):
            cfg = eval_row_config(stage, row)
            Path(cfg.out).mkdir(parents=True, exist_ok=True)
            s = cfg.sampling
            Path(cfg.out, "summary.json").write_text(json.dumps({
                "model": cfg.model, "sampling": {"n": s.n, "temperature": s.temperature, "top_p": s.top_p,
                                                 "max_tokens": s.max_tokens, "seed": s.seed},
                "datasets": {"heldout": {"cons@k": 0.5 + 0.1 * i, "pass@1": 0.4 + 0.1 * i, "mean_length": 40.0 - i,
                                         "complete": True, "problems": 4,
                                         "accuracy_vs_budget": {"32": 0.2 + 0.1 * i, "64": 0.4 + 0.1 * i}}}}))
        return {"folder": str(stage.folder.resolve())}

    for kind, fake in (("sft", fake_run), ("rl", fake_run), ("eval", fake_eval)):
        _replace_run(monkeypatch, kind, fake)
    return recipe, tmp_path / "out", calls, stop_once


def run(recipe: Path, out: Path, *overrides: str) -> int:
    return run_recipe(load_config(RunConfig, [], [f"recipe={recipe}", f"out={out}", *overrides]))


def _state(out: Path) -> dict:
    return json.loads((out / STATE_FILE).read_text())["stages"]


def test_stages_run_in_order_and_feed_each_other(setup, capsys):
    recipe, out, calls, _ = setup
    assert run(recipe, out) == 0
    assert [name for name, _ in calls] == ["sft", "rl1", "rl2", "eval"]
    state = _state(out)
    assert all(rec["status"] == "done" for rec in state.values()) and list(state) == [
        "data1", "sft", "rl1", "data2", "rl2", "eval"]
    rl1 = dict(calls)["rl1"]
    assert rl1.actor.model == state["sft"]["outputs"]["checkpoint"] and rl1.out == str(out / "stages" / "rl1")
    assert rl1.data.path == state["data1"]["outputs"]["data"]
    # stage 1 data: difficulty >= 3 keeps p2, p3, p4, p7, ... ; stage 2: accuracy <= 0.75 over all visits keeps
    # p4 (6/8) and p3 (2/8), drops p2 (8/8) and every problem stage 1 never drew, then appends the held-out set
    stage2 = [json.loads(line) for line in Path(state["data2"]["outputs"]["data"]).read_text().splitlines()]
    assert [r["id"] for r in stage2] == ["p3", "p4", "h0", "h1", "h2", "h3"]
    assert stage2[1]["rollout_accuracy"] == 0.75
    assert json.loads((out / "stages" / "data2" / "selection.json").read_text())["seen_in_run"] == 3
    assert dict(calls)["rl2"].actor.model == state["rl1"]["outputs"]["checkpoint"]
    assert dict(calls)["eval"] == {"SFT": state["sft"]["outputs"]["checkpoint"],
                                   "stage 1": state["rl1"]["outputs"]["checkpoint"],
                                   "stage 2": state["rl2"]["outputs"]["checkpoint"]}
    # the summary: one row per evaluated checkpoint, with what reproduces it
    summary = json.loads((out / "summary.json").read_text())
    rows = summary["rows"]
    assert [r["name"] for r in rows] == ["SFT", "stage 1", "stage 2"]
    assert [r["checkpoint"] for r in rows] == list(dict(calls)["eval"].values())
    assert rows[2]["pass@1"] == pytest.approx(0.6) and rows[2]["cons@k"] == pytest.approx(0.7)
    assert rows[0]["mean_length"] == 40.0 and rows[0]["data"].endswith("heldout.jsonl")
    assert (rows[0]["n"], rows[0]["temperature"], rows[0]["top_p"], rows[0]["max_tokens"], rows[0]["seed"]) == (
        4, 1.0, 0.95, 64, 1234)
    assert rows[1]["command"].startswith(f"nemo-lead eval --model {rows[1]['checkpoint']} --data {rows[1]['data']} "
                                         "--samples 4 --temperature 1.0 --top-p 0.95 --max-tokens 64 --seed 1234")
    md = (out / "summary.md").read_text()
    assert "| stage 2 | 0.700          | 0.600          | 38.0                |" in md
    assert (out / "validation.png").stat().st_size > 0 and (out / "accuracy_vs_budget.png").stat().st_size > 0
    assert "stage 1" in capsys.readouterr().out  # the table is printed


def test_rerun_skips_finished_stages(setup, capsys):
    recipe, out, calls, _ = setup
    assert run(recipe, out) == 0
    first = (out / "summary.json").read_text()
    calls.clear()
    assert run(recipe, out) == 0
    assert calls == [] and "done, skipped" in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["rows"] == json.loads(first)["rows"]


def test_interrupted_stage_resumes_and_later_stages_wait(setup, capsys):
    recipe, out, calls, stop_once = setup
    stop_once.add("rl1")
    assert run(recipe, out) == 1
    state = _state(out)
    assert state["sft"]["status"] == "done" and state["rl1"]["status"] == "stopped" and "rl2" not in state
    assert "run the same command again to resume" in capsys.readouterr().err
    calls.clear()
    assert run(recipe, out) == 0
    assert [name for name, _ in calls] == ["rl1", "rl2", "eval"]  # sft skipped; rl1 again into the same folder
    assert "interrupted before; resuming" in capsys.readouterr().err
    assert dict(calls)["rl1"].out == str(out / "stages" / "rl1")


def test_changed_settings_run_a_finished_stage_again(setup):
    recipe, out, calls, _ = setup
    assert run(recipe, out) == 0
    calls.clear()
    assert run(recipe, out, "stages.rl2.steps=5") == 0  # a longer stage 2: the loop extends it
    assert [name for name, _ in calls] == ["rl2", "eval"]  # eval reads rl2's new checkpoint
    assert dict(calls)["eval"]["stage 2"].endswith("step_000005")
    calls.clear()
    assert run(recipe, out, "stages.rl2.steps=5", "stages.rl1.progress=none", "stages.eval.verify.workers=1") == 0
    assert calls == []  # how a stage reports or how many grading processes it uses changes no result


def test_only_runs_one_stage_whose_inputs_are_done(setup, capsys):
    recipe, out, calls, _ = setup
    assert run(recipe, out, "only=rl1") == 2
    assert "stage 'sft' has not finished" in capsys.readouterr().err and calls == []
    assert run(recipe, out, "only=data1") == 0 and run(recipe, out, "only=sft") == 0
    assert run(recipe, out, "only=rl1") == 0
    assert [name for name, _ in calls] == ["sft", "rl1"] and "rl2" not in _state(out)


def test_a_later_stages_missing_input_stops_the_first_stage(setup, tmp_path, capsys):
    """`only=data1` with the SFT model and the held-out set gone: refused now, naming the later stages' keys,
    not when their jobs start; inputs an earlier stage writes are not asked for."""
    recipe, out, calls, _ = setup
    gone = tmp_path / "models" / "base"
    recipe.write_text(recipe.read_text().replace("actor: {model: tiny-qwen2}", f"actor: {{model: {gone}}}"))
    (tmp_path / "heldout.jsonl").unlink()
    assert run(recipe, out, "only=data1") == 2
    err = capsys.readouterr().err
    assert f"stage sft: stages.sft.actor.model={gone}: no such file or folder (an input of a later stage)" in err
    assert "stage data2: stages.data2.extra[0]=" in err and "stage eval: stages.eval.data=" in err
    assert "rl1" not in err and calls == [] and not (out / STATE_FILE).exists()
    assert run(recipe, out, "only=data1", "dry_run=true") == 0  # the dry run: notes
    assert f"note: stage sft: stages.sft.actor.model={gone}: no such file" in capsys.readouterr().err
    gone.mkdir(parents=True)
    (gone / "config.json").write_text("{}")  # there, but not a model's config: its shape is checked too
    assert run(recipe, out, "only=data1", f"paths.heldout={tmp_path / 'problems.jsonl'}") == 2
    assert "stage sft: stages.sft.actor.model" in capsys.readouterr().err


def test_dry_run_lists_stages_and_runs_nothing(setup, capsys):
    recipe, out, calls, _ = setup
    assert run(recipe, out, "dry_run=true") == 0
    text = capsys.readouterr().out
    assert calls == [] and not out.exists()
    assert [line.split()[0] for line in text.splitlines()[1:]] == ["data1", "sft", "rl1", "data2", "rl2", "eval"]


def _planned(text: str) -> dict[str, str]:
    return {line.split()[0]: line.split()[2] for line in text.splitlines()[1:]}


def test_dry_run_says_what_a_run_would_do_with_the_same_overrides(setup, capsys):
    recipe, out, calls, _ = setup
    assert run(recipe, out) == 0
    capsys.readouterr()
    calls.clear()
    assert run(recipe, out, "dry_run=true") == 0
    assert set(_planned(capsys.readouterr().out).values()) == {"done"}
    assert run(recipe, out, "dry_run=true", "stages.rl2.steps=5", "stages.rl1.progress=none") == 0
    assert _planned(capsys.readouterr().out) == {"data1": "done", "sft": "done", "rl1": "done", "data2": "done",
                                                 "rl2": "rerun", "eval": "rerun"}
    assert calls == []


def test_a_failed_stage_is_recorded_and_not_called_resumable(setup, monkeypatch, capsys):
    recipe, out, calls, _ = setup
    real = KINDS["rl"].run

    def refused(stage):  # what a loop that refuses changed settings returns: exit status 2
        raise StageStopped(f"stage {stage.name!r} exited with status 2", 2)

    _replace_run(monkeypatch, "rl", refused)
    assert run(recipe, out) == 2
    err = capsys.readouterr().err
    assert "fails the same way when run again" in err and "run the same command again to resume" not in err
    assert _state(out)["rl1"]["status"] == "failed" and _state(out)["rl1"]["exit_status"] == 2
    assert run(recipe, out, "dry_run=true") == 0
    assert _planned(capsys.readouterr().out)["rl1"] == "failed"
    _replace_run(monkeypatch, "rl", real)
    assert run(recipe, out) == 0 and _state(out)["rl1"]["status"] == "done"


def test_eval_row_of_a_changed_checkpoint_is_not_mixed_with_the_old_one(tmp_path):
    from nemo_lead.pipeline.stages import _set_aside_other_model

    row = tmp_path / "stage-2"
    row.mkdir()
    (row / "config.yaml").write_text("model: /runs/rl2/checkpoints/step_000002\n")
    (row / "samples.jsonl").write_text("{}\n")
    _set_aside_other_model(row, "/runs/rl2/checkpoints/step_000002")  # the same model: resume in place
    assert (row / "samples.jsonl").is_file()
    _set_aside_other_model(row, "/runs/rl2/checkpoints/step_000005")
    assert not row.exists() and (tmp_path / "stage-2.replaced-1" / "samples.jsonl").is_file()


def test_rollout_accuracy_sums_visits_and_names_bad_lines(tmp_path):
    from nemo_lead.data import DataError
    from nemo_lead.pipeline.select import rollout_accuracy

    rows = [{"id": "a", "step": 1, "samples": 8, "correct": 2}, {"id": "b", "step": 1, "samples": 8, "correct": 8},
            {"id": "a", "step": 9, "samples": 8, "correct": 8}]
    path = tmp_path / "problem_stats.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"id": "c", "samp')  # torn by a kill
    assert rollout_accuracy(tmp_path) == {"a": 10 / 16, "b": 1.0}
    path.write_text('{"id": "a"}\n' + json.dumps(rows[0]) + "\n")
    with pytest.raises(DataError, match=r"problem_stats.jsonl:1: expected"):
        rollout_accuracy(tmp_path)


def test_a_finished_stage_whose_input_files_changed_runs_again(setup, capsys):
    recipe, out, calls, _ = setup
    assert run(recipe, out) == 0
    capsys.readouterr()
    calls.clear()
    problems = recipe.parent / "problems.jsonl"
    problems.write_text(problems.read_text().replace('"answer": "5"', '"answer": "five"'))  # same path, new content
    assert run(recipe, out, "dry_run=true") == 0
    plan = capsys.readouterr().out
    assert "sft            sft      rerun (inputs)" in plan and "data1          select   rerun (inputs)" in plan
    assert calls == []
    assert run(recipe, out) == 0
    err = capsys.readouterr().err
    assert "stage sft (sft): its inputs changed since it finished (data.path); running it again" in err
    assert "stage data1 (select): its inputs changed since it finished (problems[0])" in err
    assert [name for name, _ in calls][:2] == ["sft", "rl1"]  # rl1 reads data1's output, which changed with it
    calls.clear()
    assert run(recipe, out) == 0 and calls == []  # recorded: done again for the new content
    capsys.readouterr()
    assert run(recipe, out, "dry_run=true") == 0 and set(_planned(capsys.readouterr().out).values()) == {"done"}


def test_a_setting_added_since_a_stage_finished_does_not_run_it_again(setup, monkeypatch, capsys):
    from nemo_lead.pipeline import runner

    recipe, out, calls, _ = setup
    real = runner.fingerprint
    added = tuple(key for key, _ in runner.ADDED_KEYS)
    # the state file of a release that did not have the added keys: its fingerprints were taken without them
    monkeypatch.setattr(runner, "fingerprint", lambda stage, without=(): real(stage, (*without, *added)))
    assert run(recipe, out) == 0
    old = {name: rec["fingerprint"] for name, rec in _state(out).items()}
    monkeypatch.setattr(runner, "fingerprint", real)
    calls.clear()
    assert run(recipe, out) == 0
    assert calls == [] and "done, skipped" in capsys.readouterr().err  # the new keys are at their defaults
    assert {name: rec["fingerprint"] for name, rec in _state(out).items()} == old
    assert run(recipe, out, "stages.rl2.lead.cosine_r0_correct=3.0") == 0  # one of them set: rl2 runs again
    assert [name for name, _ in calls] == ["rl2"]  # (the fake writes the same checkpoint: eval stays done)


@pytest.mark.parametrize("kind", ["sft", "rl"])
def test_every_setting_added_since_2026_12_04_is_listed_as_added(kind):
    """A key that changes results, added to the SFT / RL settings after the run folders of 2026-12-04 (their
    config.yaml lists every key of that day), is in ADDED_KEYS, or every finished stage would run again."""
    import yaml

    from nemo_lead.config.dotted import flatten
    from nemo_lead.config.fields import key_rules
    from nemo_lead.pipeline.runner import ADDED_KEYS
    from nemo_lead.training.rl.config import RLConfig
    from nemo_lead.training.sft.config import SFTConfig

    schema = {"sft": SFTConfig, "rl": RLConfig}[kind]
    fixture = Path(__file__).parents[1] / "training" / "fixtures" / "runs-2026-12-04" / kind / "config.yaml"
    then = set(flatten(yaml.safe_load(fixture.read_text()), keep_empty=True))
    now = {k for k, rule in key_rules(schema).items() if rule["results"]}
    sections = {k for k in now if any(other.startswith(k + ".") for other in now)}
    added = {k for k in now - then - sections if not any(k.startswith(t + ".") for t in then)}
    assert added <= {k for k, _ in ADDED_KEYS}, f"add them to nemo_lead.pipeline.runner.ADDED_KEYS: {added}"
