"""Shared by every bench script: the machine description, writing one block of bench/RESULTS.md, and the
plumbing of the GPU modes (`--gpu`, `--dry-run`, `--out`).

Each layer has a `## <layer>` section; each benchmark figure set is a block between `<!-- <layer>:<name> -->`
markers inside it; other sections and blocks stay as they are, so scripts can be rerun one at a time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"


def machine_line(threads: int | None = None, load_start: tuple[float, ...] | None = None) -> str:
    """Date, commit, cores, threads and load (start and end of the run): what a figure on a shared machine
    needs to be found again and compared."""
    load = os.getloadavg()
    parts = [datetime.date.today().isoformat(), *_commit(), f"nproc {os.cpu_count()}"]
    if threads is not None:
        parts.append(f"torch threads {threads} (both sides)")
    parts.append(f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    start = (f"{load_start[0]:.2f} / {load_start[1]:.2f} / {load_start[2]:.2f} at the start, "
             if load_start is not None else "")
    parts.append(f"load average {start}{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} at the end (1 / 5 / 15 min)")
    return ", ".join(parts)


def _commit() -> list[str]:
    """["commit <short hash>"] (marked "+ local changes" when tracked files other than Markdown differ), or []
    outside git."""
    import subprocess

    root = RESULTS.parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        outputs = [":!*.md", ":!bench/ablation"]  # prose, and what the bench scripts themselves write
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", *outputs],
                               cwd=root, capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return []
    return [f"commit {head}" + (" + local changes" if dirty else "")]


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


# ----------------------------------------------------------------------------- GPU modes
def add_gpu_mode_args(ap: argparse.ArgumentParser, gpu_help: str) -> None:
    """--gpu (what the GPU mode measures), --dry-run (its code path on the CPU, small shape) and --out."""
    ap.add_argument("--gpu", action="store_true", help=gpu_help)
    ap.add_argument("--dry-run", action="store_true", help="GPU: run its code path on the CPU with a small shape")
    ap.add_argument("--out", default=None, help="GPU: write the figures as JSON here")


def parse_gpu_args(doc: str, gpu_help: str, block: str, what: str) -> argparse.Namespace:
    """The arguments of a GPU-only bench script (--gpu, --dry-run, --out, --record into RESULTS.md `block`);
    exits unless --gpu is given and a GPU is there (or --dry-run). `what` names what it measures."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_gpu_mode_args(ap, gpu_help)
    ap.add_argument("--record", action="store_true", help=f"write the figures to bench/RESULTS.md ({block})")
    args = ap.parse_args()
    if not args.gpu:
        raise SystemExit(f"this benchmark measures {what}: run it with --gpu (or --gpu --dry-run on a CPU)")
    require_gpu(args)
    return args


def require_gpu(args: argparse.Namespace) -> None:
    import torch

    if not torch.cuda.is_available() and not args.dry_run:
        raise SystemExit("--gpu needs a CUDA device (or --dry-run to check the code path on the CPU)")


def cuda_sync() -> None:
    """Wait for the GPU (no-op on the CPU dry run), around timed regions."""
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def emit_json(out: dict, path: str | None) -> None:
    """Print the figures, and write them to `path` when given."""
    text = json.dumps(out, indent=2)
    print(text)
    if path:
        Path(path).write_text(text)
