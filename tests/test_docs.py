"""The documentation's links hold: every relative link in README.md, docs/*.md and bench/README.md points at a
file of the repository, every `#anchor` at a heading of the file it names (GitHub's anchor rules), and every
repository path the pages name in backticks exists, and every table row has its header's number of cells.
Also the words: no "reference implementation"."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted([ROOT / "README.md", ROOT / "bench" / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"(?<!!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# paths the pages name in backticks, under these top-level folders of the repository
REPO_DIRS = ("nemo_lead/", "bench/", "recipes/", "scripts/", "conf/", "containers/", "tests/", "docs/")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append((n, line))
    return out


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: markup dropped, lower case, punctuation other than - and _ removed,
    each space a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link: its text
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every anchor a Markdown file offers (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in prose_lines(path.read_text()):
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = github_anchor(m.group(2))
        count = seen.get(base, 0)
        out.add(base if count == 0 else f"{base}-{count}")
        seen[base] = count + 1
    return out


def links(path: Path) -> list[tuple[int, str]]:
    out = []
    for n, line in prose_lines(path.read_text()):
        for m in LINK.finditer(CODE_SPAN.sub("", line)):
            out.append((n, m.group(1)))
    return out


def table_cells(line: str) -> int:
    """The cells of a Markdown table row as GitHub splits it: at every `|` not escaped as `\\|` (a `|` inside
    a code span splits too), the outer pipes dropped."""
    parts = re.split(r"(?<!\\)\|", line.strip())
    return len(parts) - (parts[0] == "") - (parts[-1] == "")


def table_mismatches(path: Path) -> list[str]:
    """'file:line: N cells, the header has M' for each table row whose cells differ from its header's: GitHub
    drops the cells beyond the header's and leaves missing ones empty, so such a row shows other text than
    was written, and a row with its first cell lost reads as a link without its subject."""
    out, header = [], None
    for n, line in prose_lines(path.read_text()):
        if not line.lstrip().startswith("|"):
            header = None
            continue
        if header is None:
            header = table_cells(line)
        elif (cells := table_cells(line)) != header:
            out.append(f"{path.name}:{n}: {cells} cells, the header has {header}")
    return out


def test_table_checker_counts_cells(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("| a | b |\n| --- | --- |\n| `x \\| y` | z |\n| one | two | three |\n\ntext\n\n| c |\n| --- |\n"
                    "| d |\n| [e](e.md) |\n")
    assert table_cells("| a | b |") == 2 and table_cells("a | b") == 2 and table_cells(r"| a \| b |") == 1
    assert table_mismatches(page) == ["page.md:4: 3 cells, the header has 2"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_row_has_the_headers_cells(page):
    assert not table_mismatches(page), "\n".join(table_mismatches(page))


def test_anchor_rules_match_githubs():
    assert github_anchor("Sizing: `nemo-lead plan`") == "sizing-nemo-lead-plan"
    assert github_anchor("Weights & Biases") == "weights--biases"
    assert github_anchor("The paper's numbers") == "the-papers-numbers"
    assert github_anchor("1. The image") == "1-the-image"
    assert github_anchor("The TensorRT-LLM rollout engine (`engine.kind=trtllm`)") == \
        "the-tensorrt-llm-rollout-engine-enginekindtrtllm"
    assert github_anchor("Off-policy RL (`rollout.lag`, `rollout.generator_ranks`)") == \
        "off-policy-rl-rolloutlag-rolloutgenerator_ranks"


def test_checker_finds_broken_links(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Part two\n\n[ok](#part-two) [bad](#part-three) [gone](missing.md)\n"
                    "```\n[in code](nowhere.md)\n# not a heading\n```\n`[in a span](nowhere.md)`\n")
    assert anchors(page) == {"title", "part-two"}
    assert [t for _, t in links(page)] == ["#part-two", "#part-three", "missing.md"]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_points_at_a_file_and_heading(page):
    broken = []
    for n, target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not checked here
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        where = f"{page.relative_to(ROOT)}:{n}: {target}"
        if ROOT not in dest.parents and dest != ROOT:
            broken.append(f"{where}: outside the repository")
        elif not dest.exists():
            broken.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{where}: no heading with anchor #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_repository_paths_exist_and_the_words_hold(page):
    text = page.read_text()
    assert "reference implementation" not in text.lower(), f"{page}: 'reference implementation'"
    missing = []
    for n, line in enumerate(text.splitlines(), 1):
        for m in CODE_SPAN.finditer(line):
            for token in m.group(2).split():
                path = token.split(":")[0].rstrip(",.;)")
                if path.startswith(REPO_DIRS) and not any(ROOT.glob(path.rstrip("/"))):
                    missing.append(f"{page.relative_to(ROOT)}:{n}: {path}")
    assert not missing, "paths that are not in the repository:\n" + "\n".join(missing)
