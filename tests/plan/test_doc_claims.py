"""What the docs and the recipes say of layouts and step times is the plan's (nemo_lead.pipeline.sizing):
docs/sizing.md's generated table, docs/recipes.md's table of each recipe's whole time, each recipe's sentences
for its GPUs, the plan output the docs show
(`<!-- checked: nemo-lead plan ... -->` before a code block), and no step time anywhere else in them.

When the plan changes: `python bench/sizing_table.py --write` regenerates the table and prints the recipes'
sentences to paste."""

import re
import shlex
from pathlib import Path

import pytest

from nemo_lead.cli import main
from nemo_lead.pipeline.recipe import find_recipe
from nemo_lead.pipeline.sizing import (
    CALIBRATION_BEGIN,
    CALIBRATION_END,
    ROWS,
    TABLE_BEGIN,
    TABLE_END,
    TOTALS_BEGIN,
    TOTALS_END,
    WHOLES,
    claim,
    plan_row,
    plan_whole,
    sizing_table,
    totals_table,
    with_claims,
    with_generated,
    with_sizing_table,
    with_totals_table,
)

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "docs" / "sizing.md", ROOT / "docs" / "engine-layout.md", ROOT / "README.md"]
CHECKED = re.compile(r"<!-- checked: nemo-lead (plan [^>]*?) -->\n```[a-z]*\n(.*?)\n```", re.S)
STEP_TIME = re.compile(r"\b\d{1,3}(?:,\d{3})+ s\b|\b\d{3,} s\b")  # "2,754 s", "474 s": a step or stage time


@pytest.fixture(scope="module")
def planned():
    return [plan_row(r) for r in ROWS]


def _comment_text(path: Path) -> str:
    """A YAML file's comments as one line of text (wrapped sentences joined)."""
    lines = [m.group(1) for m in re.finditer(r"^\s*#\s?(.*)$", path.read_text(), re.M)]
    return " ".join(" ".join(lines).split())


def test_the_sizing_table_is_the_plans(planned):
    doc = (ROOT / "docs" / "sizing.md").read_text()
    table = sizing_table(planned)
    assert with_sizing_table(doc, table) == doc, "docs/sizing.md's table is stale: python bench/sizing_table.py --write"
    assert doc.count(TABLE_BEGIN) == doc.count(TABLE_END) == 1
    # the calibration check (the paper's own setup) and the efficiencies with their runs
    assert with_generated(doc, planned) == doc, "docs/sizing.md is stale: python bench/sizing_table.py --write"
    check = doc.split(CALIBRATION_BEGIN)[1].split(CALIBRATION_END)[0]
    assert "~864 s a step for stage 1 on 8 x H20" in check and "engine.kind=megatron" in check
    with pytest.raises(ValueError, match="markers are missing"):
        with_sizing_table("no table", table)


def test_the_recipes_totals_table_is_the_plans():
    """docs/recipes.md's table: every stage's hours and share, and the recipe's total, as `nemo-lead plan RECIPE`
    prints them; lead-14b on one node of 8 x H100 within 72 h at the stated lengths."""
    planned = [(w, plan_whole(w)) for w in WHOLES]
    doc = (ROOT / "docs" / "recipes.md").read_text()
    assert with_totals_table(doc, totals_table(planned)) == doc, (
        "docs/recipes.md's totals table is stale: python bench/sizing_table.py --write")
    assert doc.count(TOTALS_BEGIN) == doc.count(TOTALS_END) == 1
    for w, data in planned:
        assert data["untimed_stages"] == [] and data["total_seconds"] == pytest.approx(
            sum(s.get("stage_seconds") or s["host"]["stage_seconds"] for s in data["stages"]), abs=len(data["stages"]))
        for s in data["stages"]:
            assert s["kind"] == "sft" or s["engine"] == "vllm", (w.recipe, s["stage"])  # auto on GPUs: vLLM planned
    lead14 = dict(planned)[WHOLES[0]]
    assert WHOLES[0].recipe == "lead-14b" and lead14["total_seconds"] <= 72 * 3600
    with pytest.raises(ValueError, match="markers are missing"):
        with_totals_table("no table", "x")


def test_each_recipe_carries_the_plans_sentences_for_its_gpus(planned):
    for p in planned:
        if p.row.label == "72B":  # no recipe: lead-14b's settings on another model
            continue
        path = find_recipe(p.row.recipe)
        assert " ".join(claim(p).split()) in _comment_text(path), (
            f"{path.name} does not say what the plan says (python bench/sizing_table.py): {claim(p)}")


def test_no_step_time_and_no_fastest_outside_the_plans_sentences(planned):
    """A recipe's comments state step times and "the fastest" only in the plan's sentences (the paper's
    reported ~864 s a step is labelled as the paper's; memory and token counts are not step times)."""
    sentences = [" ".join(claim(p).split()) for p in planned if p.row.label != "72B"]
    for path in sorted((ROOT / "nemo_lead" / "recipes").glob("*.yaml")):
        rest = _comment_text(path)
        for sentence in sentences:
            rest = rest.replace(sentence, "")
        rest = rest.replace("~864 s a step", "")
        assert not STEP_TIME.search(rest), (path.name, STEP_TIME.search(rest))
        assert "fastest" not in rest, (path.name, rest[max(0, rest.find("fastest") - 80):rest.find("fastest") + 40])


def missing_lines(block: str, out: list[str]) -> list[str]:
    """The lines of a docs' excerpt that the command's output lacks ("..." skips lines; a line ending in
    " ..." is a line's beginning)."""
    missing = []
    for line in block.splitlines():
        if line.strip() == "...":
            continue
        found = (any(o.startswith(line[:-4]) for o in out) if line.endswith(" ...") else line.rstrip() in out)
        if not found:
            missing.append(line)
    return missing


def test_the_docs_show_the_plans_output_and_no_other_step_time(capsys):
    shown = 0
    for doc in DOCS:
        text = doc.read_text()
        for command, block in CHECKED.findall(text):
            assert main(shlex.split(command)) in (0, 1), command
            out = [line.rstrip() for line in capsys.readouterr().out.splitlines()]
            assert not missing_lines(block, out), (doc.name, command, missing_lines(block, out))
            shown += 1
        # outside the generated table and the checked blocks, no step or stage time
        free = CHECKED.sub("", text)
        for begin, end in ((TABLE_BEGIN, TABLE_END), (CALIBRATION_BEGIN, CALIBRATION_END)):
            if begin in free:
                free = free.split(begin)[0] + free.split(end)[1]
        free = free.replace("~864 s a step", "")
        assert not STEP_TIME.search(free), (doc.name, STEP_TIME.search(free))
    assert shown >= 2


def test_the_recipes_sentences_are_rewritten_in_place():
    text = "# head\n# - `nemo-lead plan` on 8 x H100, sft: 1 s\n#   more\n# - `nemo-lead plan` x\n# tail\nkey: 1\n"
    assert with_claims(text, ["`nemo-lead plan` on 8 x H100, sft: 2 s a step"]) == (
        "# head\n# - `nemo-lead plan` on 8 x H100, sft: 2 s a step\n# tail\nkey: 1\n")
    with pytest.raises(ValueError, match="no `# - `nemo-lead plan`"):
        with_claims("key: 1\n", ["x"])


def test_the_excerpt_check_catches_a_changed_line():
    out = ["a: 1,357 s (1,266 + 90 + 1); more", "  as configured: rank 9 of 117"]
    assert missing_lines("a: 1,357 s ...\n...\n  as configured: rank 9 of 117", out) == []
    assert missing_lines("a: 1,358 s ...\n  as configured: rank 9 of 118", out) == [
        "a: 1,358 s ...", "  as configured: rank 9 of 118"]
    assert STEP_TIME.search("takes 2,754 s") and STEP_TIME.search("474 s a step") and not STEP_TIME.search("0.1 s")


PLAN_COMMAND = re.compile(r"^(nemo-lead plan [^#\n]*?)\s*(?:#.*)?$", re.M)
BASH_BLOCK = re.compile(r"```bash\n(.*?)\n```", re.S)


def test_the_plan_commands_the_docs_print_run_as_printed(tmp_path, monkeypatch, capsys):
    """Every `nemo-lead plan ...` line of a bash block in README.md and docs/ runs (0: fits, 1: does not), from a
    folder holding the config file a command names for the reader's own (my-rl.yaml)."""
    commands = sorted({m.group(1).strip() for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
                       for block in BASH_BLOCK.findall(doc.read_text()) for m in PLAN_COMMAND.finditer(block)})
    assert "nemo-lead plan lead-32b" in commands and len(commands) >= 5
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my-rl.yaml").write_text("actor: {model: r1-distill-qwen-7b}\n")
    for command in commands:
        assert main(shlex.split(command)[1:]) in (0, 1), command
        capsys.readouterr()
