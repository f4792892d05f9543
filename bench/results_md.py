"""Write one block of bench/RESULTS.md: each layer has a `## <layer>` section, each benchmark figure set a
block between `<!-- <layer>:<name> -->` markers inside it; other sections and blocks stay as they are.

Generic over the layer, so every bench script can share it (actor_bench.py does; the verify and rollout
scripts carry their own copies of the same logic for their sections).
"""

from __future__ import annotations

import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def record(layer: str, name: str, title: str, body: list[str], results: Path = RESULTS) -> None:
    """Replace block `name` of section `## layer` with `### title` and `body` (appended if new)."""
    section, tag = f"## {layer}", f"{layer}:{name}"
    text = results.read_text() if results.exists() else "# Benchmark results\n"
    if section not in text.splitlines():
        text = text.rstrip("\n") + f"\n\n{section}\n"
    block = f"<!-- {tag} -->\n### {title}\n\n" + "\n".join(body) + f"\n<!-- /{tag} -->"
    pattern = re.compile(rf"<!-- {re.escape(tag)} -->.*?<!-- /{re.escape(tag)} -->", re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:  # at the end of the section
        lines = text.split("\n")
        start = lines.index(section)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        while end > start + 1 and not lines[end - 1].strip():
            end -= 1
        lines[end:end] = ["", block]
        text = "\n".join(lines)
    results.write_text(text.rstrip("\n") + "\n")
