"""docs/sizing.md's table of the recipes' layouts and docs/recipes.md's table of each recipe's whole time,
regenerated from the plan (`nemo_lead.pipeline.sizing`). The layouts: per
model, GPUs and stage, the recipe's layout and step time at the stated mean response and with every response
at max_tokens, its rank among the layouts that fit, and the fastest the plan finds (`nemo-lead plan`'s
ranking), with the memory per GPU and the pinned host memory per node; and the sentence each recipe's
comment carries for its GPUs (`claim`).

    .venv/bin/python bench/sizing_table.py            # print the table and the recipes' sentences
    .venv/bin/python bench/sizing_table.py --write    # replace the tables in docs/sizing.md and docs/recipes.md

No GPU and no weights (conf/model presets). tests/plan/test_doc_claims.py fails when docs/sizing.md or a
recipe's sentence differs from what this prints.
"""

from __future__ import annotations

import sys
from pathlib import Path

from nemo_lead.pipeline.sizing import (
    ROWS,
    claim,
    plan_row,
    sizing_table,
    totals_table,
    with_sizing_table,
    with_totals_table,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "sizing.md"
RECIPES_DOC = Path(__file__).resolve().parents[1] / "docs" / "recipes.md"


def main() -> None:
    planned = [plan_row(r) for r in ROWS]
    table = sizing_table(planned)
    totals = totals_table()
    if "--write" in sys.argv[1:]:
        DOC.write_text(with_sizing_table(DOC.read_text(), table))
        RECIPES_DOC.write_text(with_totals_table(RECIPES_DOC.read_text(), totals))
        print(f"wrote {DOC} and {RECIPES_DOC}")
    else:
        print(table)
        print(totals)
    for p in planned:
        if p.row.label != "72B":
            print(f"{p.row.recipe}: {claim(p)}")


if __name__ == "__main__":
    main()
