"""docs/sizing.md's generated parts and docs/recipes.md's table of each recipe's whole time, regenerated from
the plan (`nemo_lead.pipeline.sizing`): the table of the recipes' layouts (per model, GPUs and stage, the
recipe's layout and step time at the stated mean response and with every response at max_tokens, its rank
among the layouts that fit, and the fastest the plan finds, with the memory per GPU and the pinned host
memory per node), the calibration check against the paper's reported step on 8 x H20, the efficiencies with
the runs they come from; the recipes' totals stage by stage; and the sentence each recipe's comment carries
for its GPUs (`claim`).

    .venv/bin/python bench/sizing_table.py                          # print the tables and the recipes' sentences
    .venv/bin/python bench/sizing_table.py --write                  # docs/sizing.md, docs/recipes.md, the recipes' sentences
    .venv/bin/python bench/sizing_table.py --record-replan REF      # bench/RESULTS.md: the table at git REF vs now

No GPU and no weights (conf/model presets). tests/plan/test_doc_claims.py fails when docs/sizing.md or a
recipe's sentence differs from what this prints.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from results_md import machine_line
from results_md import record as record_md

from nemo_lead.pipeline.recipe import find_recipe
from nemo_lead.pipeline.sizing import (
    ROWS,
    TABLE_BEGIN,
    TABLE_END,
    calibration,
    claim,
    plan_row,
    recipe_claims,
    sizing_table,
    totals_table,
    with_claims,
    with_generated,
    with_totals_table,
)

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "sizing.md"
RECIPES_DOC = ROOT / "docs" / "recipes.md"


def table_rows(text: str) -> list[list[str]]:
    """The generated table's rows, as cells."""
    body = text.split(TABLE_BEGIN, 1)[1].split(TABLE_END, 1)[0]
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in body.splitlines()[3:] if line.strip()]


def replan_record(ref: str, now: str) -> None:
    """bench/RESULTS.md `plan:replan`: each row's layout and step as shipped, and the plan's fastest, at git `ref`
    (its docs/sizing.md) and now."""
    old = subprocess.run(["git", "show", f"{ref}:docs/sizing.md"], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    before = {tuple(r[:5]): r for r in table_rows(old)}
    lines = ["| model | GPUs | stage | recipe | engine.kind | as shipped before | as shipped now | the fastest before | "
             "the fastest now |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in table_rows(now):
        b = before.get(tuple(r[:5]))
        lines.append(f"| {' | '.join(r[:5])} | {b[5] if b else '-'} | {r[5]} | {b[8] if b else '-'} | {r[8]} |")
    commit = subprocess.run(["git", "rev-parse", "--short", ref], cwd=ROOT, capture_output=True, text=True,
                            check=True).stdout.strip()
    record_md("plan", "replan", "The recipes' layouts and step times, planned again",
              [f"Command: `.venv/bin/python bench/sizing_table.py --record-replan {ref}`; {machine_line()} (no GPU: "
               "the plan's estimates, not measurements).", "",
               f"Before: docs/sizing.md at commit {commit}; now: the plan with the activation formula measured on the "
               "CPU and the efficiencies of the 2026-12-04 H200 runs. Steps at the stated mean response (generation "
               "+ update + refit).", "", *lines])


def main() -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    planned = [plan_row(r) for r in ROWS]
    args = sys.argv[1:]
    totals = totals_table()
    if "--write" in args:
        DOC.write_text(with_generated(DOC.read_text(), planned))
        RECIPES_DOC.write_text(with_totals_table(RECIPES_DOC.read_text(), totals))
        print(f"wrote {DOC} and {RECIPES_DOC}")
        for recipe, sentences in recipe_claims(planned).items():
            path = find_recipe(recipe)
            path.write_text(with_claims(path.read_text(), sentences))
            print(f"wrote {path}")
    else:
        print(sizing_table(planned))
        print(calibration(planned))
        print(totals)
    if "--record-replan" in args:
        replan_record(args[args.index("--record-replan") + 1], sizing_table(planned))
    for p in planned:
        if p.row.label != "72B":
            print(f"{p.row.recipe}: {claim(p)}")


if __name__ == "__main__":
    main()
