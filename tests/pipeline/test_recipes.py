"""Recipes: every file in recipes/ resolves (each stage's settings load through its kind's schema), `_base_`
rungs differ from their base only where they say, errors name the recipe line or the command line, and the
demo recipe is sized as the demo task recommends."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from nemo_lead.cli import main
from nemo_lead.config.loading import ConfigError, load_config
from nemo_lead.pipeline.config import RunConfig
from nemo_lead.pipeline.kinds import KINDS
from nemo_lead.pipeline.recipe import recipes_dir

RECIPES = sorted(p.stem for p in recipes_dir().glob("*.yaml"))


def resolve(recipe: str, *overrides: str) -> RunConfig:
    return load_config(RunConfig, [], [f"recipe={recipe}", *overrides])


def test_the_paper_recipes_and_the_demo_exist():
    assert {"demo", "lead-14b", "ablation-7b-grpo", "ablation-7b-grpo-length", "ablation-7b-grpo-length-reweight",
            "ablation-7b-lead", "lead-32b", "lead-32b-h200"} <= set(RECIPES)


@pytest.mark.parametrize("name", RECIPES)
def test_every_recipe_resolves(name, capsys):
    assert main(["run", name, "--print-config"]) == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["out"] == f"runs/{name}"
    for stage in printed["resolved"].values():
        assert stage["kind"] in KINDS and stage["settings"]


def test_ablation_rungs_differ_only_in_the_lead_preset():
    presets = {}
    base = resolve("ablation-7b-grpo").resolved
    for name in ("ablation-7b-grpo", "ablation-7b-grpo-length", "ablation-7b-grpo-length-reweight", "ablation-7b-lead"):
        stages = resolve(name).resolved
        presets[name] = stages["rl"]["settings"]["lead"]["preset"]
        # the run folder is named after the recipe; the plan's stated mean response is the rung's Len_avg
        rl = {**stages["rl"]["settings"], "lead": None, "out": None, "plan": None}
        assert rl == {**base["rl"]["settings"], "lead": None, "out": None, "plan": None}
        assert {**stages["eval"]["settings"], "plan": None} == {**base["eval"]["settings"], "plan": None}
        assert stages["rl"]["settings"]["plan"]["mean_response_tokens"] < 8192
        assert (rl["actor"]["optim"]["lr"], rl["prompts_per_step"], rl["rollout"]["n"], rl["rollout"]["max_tokens"]) \
            == (1e-6, 32, 8, 8192)
        lead = stages["rl"]["settings"]["lead"]
        assert (lead["kl_coeff"], lead["clip_eps_low"], lead["clip_eps_high"]) == (0.0, 0.2, 0.2)  # no KL, clip 0.2
    assert list(presets.values()) == ["grpo", "grpo_length", "grpo_length_reweight", "lead"]
    wrong = resolve("ablation-7b-grpo-length").resolved["rl"]["settings"]["lead"]
    assert wrong["length_reward"] and wrong["wrong_reward"] == 0.0  # the preset's values, not just its name


def test_lead_14b_pipeline_has_the_papers_stages_and_settings():
    stages = resolve("lead-14b").resolved
    assert list(stages) == ["sft_problems", "distill", "sft", "stage1_data", "stage1", "stage2_data", "stage2a",
                            "stage2b", "eval"]
    s = {k: v["settings"] for k, v in stages.items()}
    assert s["sft_problems"]["difficulty"] == "> 1" and s["stage1_data"]["difficulty"] == ">= 2.5"
    assert s["distill"]["model"] == "models/QwQ-32B" and s["distill"]["keep"] == "first"
    assert s["sft"]["data"]["path"] == "<stage distill: traces>"
    assert [s[n]["steps"] for n in ("stage1", "stage2a", "stage2b")] == [100, 100, 140]
    assert [s[n]["lead"]["preset"] for n in ("stage1", "stage2a", "stage2b")] == ["paper", "paper", "stage2"]
    assert not s["stage2b"]["lead"]["length_reward"] and s["stage2b"]["lead"]["check_repetition"]
    assert s["stage2b"]["actor"]["model"] == "<stage stage2a: checkpoint>" and s["stage2b"]["actor"]["tp"] == 8
    assert s["stage2_data"]["accuracy"] == "<= 0.75" and s["stage2_data"]["extra"] == ["lead_stage2"]
    assert s["stage2_data"]["from_run"] == "<stage stage1: run>"
    assert all(s[n]["rollout"]["max_tokens"] == 14336 and s[n]["actor"]["optim"]["lr"] == 1e-6
               for n in ("stage1", "stage2a", "stage2b"))
    ev = s["eval"]
    assert (ev["sampling"]["n"], ev["sampling"]["temperature"], ev["sampling"]["top_p"], ev["sampling"]["max_tokens"]) \
        == (32, 0.6, 0.95, 14336)
    assert list(ev["models"]) == ["DeepSeek-R1-Distill-14B", "SFT", "LEAD stage 1", "LEAD stage 2a", "LEAD stage 2"]
    # a path override reaches every stage that names it
    over = resolve("lead-14b", "paths.base_model=/m/r1-14b").resolved
    assert over["sft"]["settings"]["actor"]["model"] == "/m/r1-14b"
    assert over["eval"]["settings"]["models"]["DeepSeek-R1-Distill-14B"] == "/m/r1-14b"


def test_demo_stages_train_and_evaluate_with_their_prompts():
    from nemo_lead.data.demo_task import DEMO_PROMPT

    s = {k: v["settings"] for k, v in resolve("demo").resolved.items()}
    for stage in ("sft", "rl1", "rl2"):
        assert s[stage]["prompt"]["suffix"] == DEMO_PROMPT.suffix
    # evaluation takes each checkpoint's training prompt (so the bare eval command reproduces a row)
    assert s["eval"]["prompt"]["from_checkpoint"] and s["eval"]["prompt"]["suffix"] != DEMO_PROMPT.suffix


def test_demo_command_is_the_demo_recipe(capsys):
    assert main(["demo", "--print-config", "--out", "elsewhere"]) == 0
    cfg = yaml.safe_load(capsys.readouterr().out)
    assert cfg["recipe"] == "demo" and cfg["out"] == "elsewhere"
    assert cfg["resolved"]["sft"]["settings"]["out"] == "elsewhere/stages/sft"


def _bad_recipe(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(text)
    return path


def test_recipe_errors_name_the_file_line_and_key(tmp_path):
    path = _bad_recipe(tmp_path, "stages:\n  - name: a\n    kind: select\n    problems: [aime24]\n"
                                 "  - name: b\n    kind: rl\n    data: {path: aime24}\n    rollout:\n      nn: 3\n")
    with pytest.raises(ConfigError, match=rf"{path}:9: stage 'b' \(rl\): unknown key 'rollout.nn' \(did you mean 'rollout.n'\?\)"):
        resolve(str(path))
    with pytest.raises(ConfigError, match=r"command line: stage 'b' \(rl\): unknown key 'stages.b.stepz'"):
        resolve(str(_bad_recipe(tmp_path, "stages:\n  - name: b\n    kind: rl\n    data: {path: aime24}\n")),
                "stages.b.stepz=3")


@pytest.mark.parametrize("text, message", [
    ("stages:\n  - name: a\n    kind: rl\n    actor: {model: '${stage:b.checkpoint}'}\n    data: {path: x}\n"
     "  - name: b\n    kind: sft\n    data: {path: y}\n", r"r.yaml:4: stage 'a', key 'actor.model'.*no stage 'b' before stage 'a'"),
    ("stages:\n  - name: a\n    kind: select\n    problems: [aime24]\n  - name: b\n    kind: rl\n"
     "    data: {path: '${stage:a.checkpoint}'}\n", r"a select stage's outputs are data"),
    ("paths: {m: null}\nstages:\n  - name: a\n    kind: sft\n    actor: {model: '${paths.m}'}\n    data: {path: x}\n",
     r"paths.m is not set .*r.yaml:1\): give it on the command line"),
    ("stages:\n  - name: a\n    kind: sft\n    data: {path: x}\n    out: /tmp/x\n", r"r.yaml:5: stage 'a': 'out' is set by the pipeline"),
    ("stages:\n  - name: a\n    kind: trainer\n", r"r.yaml:3: stage 'a': unknown kind 'trainer'"),
    ("stages:\n  - name: a\n    kind: select\n    problems: [aime24]\n    difficulty: about 2\n",
     r"difficulty='about 2' must be a comparison"),
    ("stage:\n  - name: a\n", r"r.yaml:1: unknown recipe key 'stage' \(did you mean 'stages'\?\)"),
    ("stages:\n  - name: a\n    kind: select\n    problems: ['${path.x}']\n",
     r"r.yaml:4: stage 'a', key 'problems': unknown reference \$\{path.x\}: use"),
])
def test_recipe_mistakes_are_explained(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        resolve(str(_bad_recipe(tmp_path, text)))


def test_base_recipe_stages_merge_by_name(tmp_path):
    (tmp_path / "base.yaml").write_text("paths: {p: aime24}\nstages:\n  - name: a\n    kind: select\n"
                                        "    problems: ['${paths.p}']\n    difficulty: '>= 2'\n")
    top = _bad_recipe(tmp_path, "_base_: base.yaml\npaths: {p: aime25}\nstages:\n  - name: a\n    limit: 3\n"
                                "  - name: b\n    kind: select\n    problems: [math500]\n")
    stages = resolve(str(top)).resolved
    assert stages["a"]["settings"]["problems"] == ["aime25"] and stages["a"]["settings"]["difficulty"] == ">= 2"
    assert stages["a"]["settings"]["limit"] == 3 and list(stages) == ["a", "b"]
    bad = tmp_path / "bad.yaml"
    bad.write_text("_base_: base.yaml\nstages:\n  - name: a\n    kind: rl\n")
    with pytest.raises(ConfigError, match=r"bad.yaml:4: stage 'a' is a 'select' stage in the base"):
        resolve(str(bad))


def test_the_32b_recipes_are_lead_14b_on_the_32b_model_with_the_14b_row_left_out():
    for name, pp, distributed in (("lead-32b", 2, True), ("lead-32b-h200", 1, False)):
        stages = resolve(name).resolved
        s = {k: v["settings"] for k, v in stages.items()}
        base = resolve("lead-14b").resolved
        assert list(stages) == list(base)
        assert s["sft"]["actor"]["model"].endswith("DeepSeek-R1-Distill-Qwen-32B") and s["sft"]["actor"]["pp"] == pp
        assert s["stage1"]["actor"]["optim"]["use_distributed_optimizer"] is distributed
        assert s["stage2b"]["lead"]["preset"] == "stage2" and s["stage1"]["rollout"] == base["stage1"]["settings"]["rollout"]
        rows = s["eval"]["models"]  # the base model's row after the stages' (a `_base_` recipe's rows come first)
        assert rows["DeepSeek-R1-Distill-32B"] == s["sft"]["actor"]["model"] and len(rows) == 5
        assert "DeepSeek-R1-Distill-14B" not in rows
        assert s["eval"]["tp"] == 8


def test_the_docs_kinds_table_is_the_registry():
    """docs/recipes.md's table of stage kinds is generated from `KINDS`; regenerate it with
    `python -c "from pathlib import Path; from nemo_lead.pipeline.kinds import with_kinds_table as w; p = Path('docs/recipes.md'); p.write_text(w(p.read_text()))"`."""
    from nemo_lead.pipeline.kinds import with_kinds_table

    doc = Path(__file__).resolve().parents[2] / "docs" / "recipes.md"
    text = doc.read_text()
    assert with_kinds_table(text) == text, "docs/recipes.md's kinds table is stale (see this test's docstring)"
    assert all(f"| `{name}` |" in text for name in KINDS)
    with pytest.raises(ValueError, match="markers are missing"):
        with_kinds_table("no table here")
