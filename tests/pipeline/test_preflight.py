"""Preflight: each conflict a recipe can have that is known before a job starts is found by `run` (its dry run
too), `submit --dry-run` and `plan`, naming the stage and the keys, before anything starts. No training."""

import json
import textwrap

import pytest

from nemo_lead.cli import main
from nemo_lead.config.loading import load_config
from nemo_lead.pipeline.config import RunConfig
from nemo_lead.pipeline.preflight import recipe_conflicts


@pytest.fixture
def files(tmp_path):
    """A small recipe on the tiny preset (4 attention heads, 2 KV heads) and its problem file."""
    problems = tmp_path / "problems.jsonl"
    problems.write_text("".join(json.dumps({"problem": f"{i}+1?", "answer": str(i + 1), "difficulty": i})
                                + "\n" for i in range(4)))
    traces = tmp_path / "traces.jsonl"
    traces.write_text('{"problem": "1+1?", "response": "2"}\n')
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(textwrap.dedent("""\
        paths: {model: tiny-qwen2, teacher: tiny-qwen2, problems: PROBLEMS, traces: TRACES}
        stages:
          - name: pick
            kind: select
            problems: ["${paths.problems}"]
            difficulty: ">= 2"
          - name: distill
            kind: distill
            model: ${paths.teacher}
            data: ${stage:pick.data}
          - name: sft
            kind: sft
            actor: {model: "${paths.model}"}
            data: {path: "${paths.traces}"}
          - name: rl
            kind: rl
            actor: {model: "${stage:sft.checkpoint}"}
            data: {path: "${stage:pick.data}"}
        """).replace("PROBLEMS", str(problems)).replace("TRACES", str(traces)))
    return {"recipe": recipe, "problems": problems, "tmp": tmp_path}


def conflicts(files, *overrides, world=None, missing_ok=False):
    run = load_config(RunConfig, [], [f"recipe={files['recipe']}", *overrides])  # as `nemo-lead run` reads them
    return recipe_conflicts(run, world=world, missing_ok=missing_ok)


def test_the_recipe_as_written_has_none(files):
    errors, warnings = conflicts(files, world=2)
    assert errors == []
    assert warnings == ["stage sft: actor.layer_spec=auto with data.pack=true: the local layer spec (packed traces "
                        "need it; data.pack=false lets auto pick Transformer Engine)"]


def every_command_names(files, overrides, *expected):
    """`run`, `run --dry-run`, `submit --dry-run` and `plan` all refuse, naming `expected`."""
    out = files["tmp"] / "out"
    recipe = str(files["recipe"])
    for argv, prefix in ((["run", recipe, "--out", str(out)], "stages."),
                         (["run", recipe, "--out", str(out), "--dry-run"], "stages."),
                         (["submit", recipe, "--out", str(out), "--dry-run", "--nodes", "1"], "job.stages."),
                         (["plan", recipe, "--gpus", "2"], "stages.")):
        over = [f"job.{o}" if prefix == "job.stages." else o for o in overrides]
        code = main([*argv, *over])
        assert code == 2, argv
        yield prefix
    assert not (out / "stages").exists()


def _check_all(files, capsys, overrides, *needles):
    for prefix in every_command_names(files, overrides):
        err = capsys.readouterr().err
        for needle in needles:
            assert needle.replace("{p}", prefix) in err, (prefix, err)


def test_te_with_packed_sft(files, capsys):
    _check_all(files, capsys, ["stages.sft.actor.layer_spec=te"],
               "stage 'sft'", "actor.layer_spec=te with data.pack=true")
    errors, _ = conflicts(files, "stages.sft.actor.layer_spec=te", "stages.sft.data.pack=false")
    assert errors == []


def test_tp_not_dividing_the_attention_heads(files, capsys):
    _check_all(files, capsys, ["stages.sft.actor.tp=3"],
               "stage sft: {p}sft.actor.tp, {p}sft.actor.model: actor.tp=3 does not divide the model's 4 attention heads")


def test_tp_not_dividing_the_kv_heads(files):
    errors, _ = conflicts(files, "stages.sft.actor.tp=4", world=4)
    assert errors == ["stage sft: stages.sft.actor.tp, stages.sft.actor.model: actor.tp=4 does not divide the "
                      "model's 2 KV heads; use a tp that divides 4 attention and 2 KV heads"]
    # the RL stage trains the SFT checkpoint (not written yet): checked with the SFT stage's model
    errors, _ = conflicts(files, "stages.rl.actor.tp=4", world=4)
    assert errors == ["stage rl: stages.rl.actor.tp, stages.rl.actor.model: actor.tp=4 does not divide the "
                      "model's 2 KV heads; use a tp that divides 4 attention and 2 KV heads"]
    errors, _ = conflicts(files, "stages.distill.tp=4", world=4)
    assert errors == ["stage distill: stages.distill.tp, stages.distill.model: tp=4 does not divide the model's 2 KV "
                      "heads; use a tp that divides 4 attention and 2 KV heads"]


def test_generator_ranks_against_the_job(files):
    split = ["stages.rl.actor.tp=2", "stages.rl.rollout.generator_ranks=2"]
    assert conflicts(files, *split, world=6)[0] == []  # 4 trainers (2 replicas) + 2 generators
    errors, _ = conflicts(files, *split, world=5)
    assert errors == ["stage rl: stages.rl.actor.tp, stages.rl.actor.pp, stages.rl.rollout.generator_ranks: the "
                      "job's 5 ranks less 2 generator ranks leave 3 trainer ranks, not a multiple of tp x pp = 2 "
                      "(the job needs 2 x k + 2 ranks)"]
    assert conflicts(files, "stages.rl.actor.tp=2", world=3)[0] == [
        "stage rl: stages.rl.actor.tp, stages.rl.actor.pp: tp x pp = 2 does not divide the job's 3 ranks"]


def test_submit_sizes_the_layout_check_from_the_job(files, capsys):
    out = files["tmp"] / "out"
    assert main(["submit", str(files["recipe"]), "--out", str(out), "--dry-run", "--nodes", "1",
                 "--gpus-per-node", "3", "job.stages.rl.actor.tp=2"]) == 2
    assert "stage rl: job.stages.rl.actor.tp, job.stages.rl.actor.pp: tp x pp = 2 does not divide the job's 3 ranks" \
        in capsys.readouterr().err


def test_missing_data_file_and_fields(files, capsys):
    gone = files["tmp"] / "gone.jsonl"
    errors, _ = conflicts(files, f"paths.problems={gone}")
    assert errors == [f"stage pick: stages.pick.problems[0]={gone}: no such file or folder"]
    errors, warnings = conflicts(files, f"paths.problems={gone}", missing_ok=True)  # submit, plan: a note
    assert errors == [] and warnings[0].startswith(f"stage pick: stages.pick.problems[0]={gone}: no such file")
    no_answer = files["tmp"] / "no_answer.jsonl"
    no_answer.write_text('{"problem": "1+1?", "difficulty": 3}\n')
    errors, _ = conflicts(files, f"paths.problems={no_answer}")
    assert len(errors) == 1 and errors[0].startswith("stage pick: stages.pick.problems[0]: ") and \
        f"{no_answer}:1" in errors[0] and "answer" in errors[0]
    unrated = files["tmp"] / "unrated.jsonl"
    unrated.write_text('{"problem": "1+1?", "answer": "2"}\n')
    _check_all(files, capsys, [f"paths.problems={unrated}"],
               "stage pick: {p}pick.difficulty, {p}pick.difficulty_key, {p}pick.problems[0]",
               "field 'difficulty' is missing", "difficulty=null")
    assert conflicts(files, f"paths.problems={unrated}", "stages.pick.difficulty=null")[0] == []


def test_model_folder_without_config_json(files, capsys):
    empty = files["tmp"] / "empty_model"
    empty.mkdir()
    _check_all(files, capsys, [f"paths.model={empty}"],
               f"stage sft: {{p}}sft.actor.model: {empty} is a folder without config.json")


def test_teacher_without_config_json(files, capsys):
    teacher = files["tmp"] / "teacher"
    teacher.mkdir()
    (teacher / "model.safetensors").write_text("")
    _check_all(files, capsys, [f"paths.teacher={teacher}"],
               f"stage distill: {{p}}distill.model: {teacher} is a folder without config.json")
