"""Shared by the verify benchmarks: the machine description line and writing into bench/RESULTS.md.

Each script owns one block of the "verify" section, between `<!-- verify:NAME -->` markers; other
sections of the file (other layers' benchmarks) are left as they are.
"""

from __future__ import annotations

import datetime
import os
import re
import threading
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"
HEADER = "# Benchmark results\n\nFigures recorded by the scripts in `bench/`, one section per layer.\n"
SECTION = "## verify"


def machine_line() -> str:
    load = os.getloadavg()
    return (f"{datetime.date.today().isoformat()}, nproc {os.cpu_count()}, "
            f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}, "
            f"threads in this process {threading.active_count()}, "
            f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1 / 5 / 15 min) at the end")


def record(name: str, title: str, body: list[str]) -> None:
    """Replace (or add) block `name` of the verify section of RESULTS.md with `### title` and `body`."""
    text = RESULTS.read_text() if RESULTS.exists() else HEADER
    if SECTION not in text.splitlines():
        text = text.rstrip("\n") + f"\n\n{SECTION}\n"
    block = f"<!-- verify:{name} -->\n### {title}\n\n" + "\n".join(body) + f"\n<!-- /verify:{name} -->"
    pattern = re.compile(rf"<!-- verify:{name} -->.*?<!-- /verify:{name} -->", re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:  # append at the end of the verify section
        lines = text.split("\n")
        start = lines.index(SECTION)
        end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        while end > start + 1 and not lines[end - 1].strip():
            end -= 1
        lines[end:end] = ["", block]
        text = "\n".join(lines)
    RESULTS.write_text(text.rstrip("\n") + "\n")
