"""Stage kinds: everything kind-specific hangs on the kind's entry (`nemo_lead.pipeline.kinds.KINDS`); no code
outside that module branches on a kind's name, and a kind added to the registry is read by the recipe
checks and the preflight without an edit anywhere else."""

import ast
import dataclasses
import json
import textwrap
from pathlib import Path

import pytest

from nemo_lead.config.loading import load_config
from nemo_lead.pipeline import kinds
from nemo_lead.pipeline.config import RunConfig, SelectConfig, load_recipe, resolve_stage
from nemo_lead.pipeline.preflight import recipe_conflicts

PACKAGE = Path(__file__).resolve().parents[2] / "nemo_lead"


def _compares_a_kind_to_a_name(node: ast.AST) -> bool:
    """`x.kind == "rl"`, `kind in ("sft", "rl")`, `spec.kind not in (..., "eval")`: a stage kind's name
    compared with something called `kind` (a stage's, a spec's, a job's)."""
    if not isinstance(node, ast.Compare):
        return False
    sides = [node.left, *node.comparators]
    named = any((isinstance(x, ast.Attribute) and x.attr == "kind" and isinstance(x.value, ast.Name)
                 and x.value.id in ("spec", "stage", "job", "s")) or (isinstance(x, ast.Name) and x.id == "kind")
                for x in sides)
    literals = {c.value for x in sides for c in ast.walk(x) if isinstance(c, ast.Constant)}
    return named and bool(literals & set(kinds.KINDS))


def test_no_code_outside_the_registry_branches_on_a_kind_name():
    found = []
    for folder in ("pipeline", "launch"):
        for path in sorted((PACKAGE / folder).glob("*.py")):
            if path.name == "kinds.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if _compares_a_kind_to_a_name(node):
                    found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert not found, "branches on a stage kind's name (put the behaviour on its KINDS entry):\n" + "\n".join(found)


def test_the_check_finds_such_a_branch():
    tree = ast.parse("if stage.kind in ('sft', 'rl'):\n    pass\nif spec.kind == 'out':\n    pass\n")
    assert [_compares_a_kind_to_a_name(n) for n in ast.walk(tree) if isinstance(n, ast.Compare)] == [True, False]


def test_a_new_kind_is_read_from_its_entry(tmp_path, monkeypatch):
    """A kind registered with a check and its models: the recipe loads it, the preflight runs its check (with
    the ranks of its job) and reads its models; it takes no `engine.*` of `nemo-lead run` unless it says so."""
    seen = []

    def check(findings, stage, ranks):
        seen.append((stage.name, stage.config.problems, ranks))
        findings.warnings.append(f"stage {stage.name}: checked")

    entry = kinds.StageKind("pick", "nemo_lead.pipeline.config:SelectConfig", ("data",), False, lambda stage: {},
                            "a select with a check of its own", check=check)
    monkeypatch.setitem(kinds.KINDS, "pick", entry)
    problems = tmp_path / "p.jsonl"
    problems.write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(textwrap.dedent(f"""\
        stages:
          - name: first
            kind: pick
            problems: ["{problems}"]
        """))
    run = load_config(RunConfig, [], [f"recipe={recipe}", "engine.kind=vllm"])
    errors, warnings = recipe_conflicts(run, world={"first": 3})
    assert errors == [] and warnings == ["stage first: checked"] and seen == [("first", [str(problems)], 3)]
    stage = resolve_stage(load_recipe(run).stages[0], load_recipe(run), run, None)
    assert isinstance(stage.config, SelectConfig) and kinds.models_of("pick", stage.config, stage.extras) == {}
    assert "| `pick` | a select with a check of its own | `SelectConfig` | `data` | no |" in kinds.kinds_table()
    monkeypatch.setitem(kinds.KINDS, "pick", dataclasses.replace(entry, engine_keys=True))
    with pytest.raises(Exception, match="engine"):  # now `engine.kind=vllm` reaches its schema, which has none
        resolve_stage(load_recipe(run).stages[0], load_recipe(run), run, None)


@pytest.mark.parametrize("kind, expected", [("sft", {"actor.model": "m"}), ("distill", {"model": "t"}),
                                            ("eval", {"models.base": "a", "models.final": "b"})])
def test_the_models_a_stage_reads_come_from_its_model_key(kind, expected):
    config = type("C", (), {"actor": type("A", (), {"model": "m"}), "model": "t"})
    extras = {"models": {"base": "a", "final": "b"}} if kind == "eval" else {}
    assert kinds.models_of(kind, config, extras) == expected
