"""Follow a job's config through the package: which files a tiny `nemo-lead rl` job's RLConfig visits, how often
it enters each, and how often its trip climbs back from a lower layer to a higher one (docs/design.md, Layers).

    python bench/call_trace.py [--steps 2] [--json OUT.json]

1. Setup (not traced, a process of its own): the tiny model and data of tests/training (loops_common.py),
   `nemo-lead rl` for `--steps - 1` steps with a checkpoint at each step, so the traced run resumes from it.
2. The same command for `--steps` steps, in this process under `sys.setprofile`: every call of a function of
   the imported `nemo_lead` package that receives the job's config (an RLConfig, or one of its sub-configs:
   the dataclasses it holds, by identity) among its arguments is recorded, in order. That is the trip.
3. The table, per file: calls on the trip, entries (a call whose file differs from the previous recorded
   call's file), its layer. A generator's resumption (the exit of a `with` block over a context manager
   function, the next line an iterator reads) is not a call in the source, so it is not counted; its first
   run is. Then the largest number of entries, and the climbs back: a recorded call into a
   file of a higher layer than the previous recorded call's file (the trip went down and comes back up).
   Also counted, for comparison: direct calls from a lower-layer function into a higher-layer one (callbacks).

`--with-run-folder` follows the run folder too: a call given a path of the run folder or of anything in it
(`cfg.out`, a checkpoint's folder) is on the trip as well, so the trip includes the resume decision and the
checkpoint's reading, which take the folder rather than the config.

The package measured is the one `import nemo_lead` finds (PYTHONPATH=OTHER_CHECKOUT measures another
checkout); the layers come from that checkout's docs/design.md, read by its tests/test_imports.py.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import nemo_lead

ROOT = Path(nemo_lead.__file__).resolve().parents[1]
PACKAGE = ROOT / "nemo_lead"
sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "tests" / "training")]
from loops_common import cli_env, problem_row, rl_args  # noqa: E402
from test_imports import _layers, _level_of  # noqa: E402

from nemo_lead.cli import main  # noqa: E402
from nemo_lead.models import write_tiny_model  # noqa: E402

try:
    from nemo_lead.training.rl.config import RLConfig  # noqa: E402
except ImportError:  # a checkout of the layout before 2026-12-04 (PYTHONPATH=OTHER_CHECKOUT)
    from nemo_lead.training.rl_config import RLConfig  # noqa: E402


def _setup(root: Path, steps: int) -> list[str]:
    """The tiny task, a run of `steps - 1` steps (checkpointed) and the arguments that resume it to `steps`."""
    write_tiny_model(root / "model", family="qwen2", seed=0)
    rng = random.Random(0)
    problems = [problem_row(rng, i) for i in range(120)]
    for name, rows in (("problems.jsonl", problems[:100]), ("val.jsonl", problems[100:])):
        (root / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    first = rl_args(root, root / "model", root / "run", steps=steps - 1, extra=["--save-every", "1"])
    done = subprocess.run([sys.executable, "-m", "nemo_lead.cli", *first], env=cli_env(), capture_output=True,
                          text=True)
    if done.returncode:
        raise SystemExit(f"the setup run failed:\n{done.stderr}")
    return rl_args(root, root / "model", root / "run", steps=steps, extra=["--save-every", "1"])


class Trip:
    """The profile function: records (file, function, caller's file) of each package call given the config."""

    def __init__(self, run_folder: str | None = None):
        self.run_folder = run_folder
        self.calls: list[tuple[str, str, str | None]] = []
        self.held: list[object] = []  # the tracked configs, kept alive so that their ids are not reused
        self.ids: set[int] = set()
        self._files: dict[str, str | None] = {}
        self._started: dict[int, object] = {}  # recorded generators' frames (held, so their ids stay unique)

    def _rel(self, filename: str) -> str | None:
        if filename not in self._files:
            path = Path(filename)
            self._files[filename] = (path.resolve().relative_to(ROOT).as_posix()
                                     if path.is_absolute() and path.resolve().is_relative_to(PACKAGE) else None)
        return self._files[filename]

    def _track(self, cfg) -> None:
        todo = [cfg]
        while todo:
            obj = todo.pop()
            if id(obj) in self.ids:
                continue
            self.ids.add(id(obj))
            self.held.append(obj)
            todo += [v for f in dataclasses.fields(obj) if dataclasses.is_dataclass(v := getattr(obj, f.name))
                     and not isinstance(v, type)]

    def _given_config(self, value) -> bool:
        if self.run_folder is not None and isinstance(value, (str, os.PathLike)):
            text = os.fspath(value)
            if isinstance(text, str) and (text == self.run_folder or text.startswith(self.run_folder + os.sep)):
                return True
        if isinstance(value, RLConfig) and id(value) not in self.ids:
            self._track(value)  # the job's config, or a copy of it with a setting resolved (dataclasses.replace)
        return id(value) in self.ids

    def __call__(self, frame, event, arg):
        if event != "call":
            return
        code = frame.f_code
        rel = self._rel(code.co_filename)
        if rel is None:
            return
        if id(frame) in self._started:  # a recorded generator resumed: not a call
            return
        n = code.co_argcount + code.co_kwonlyargcount
        names = list(code.co_varnames[:n])
        if code.co_flags & 0x04:  # *args
            names.append(code.co_varnames[n])
        if code.co_flags & 0x08:  # **kwargs
            names.append(code.co_varnames[n + bool(code.co_flags & 0x04)])
        local = frame.f_locals
        values = []
        for name in names:
            v = local.get(name)
            values += list(v) if isinstance(v, tuple) else list(v.values()) if isinstance(v, dict) else [v]
        if any(self._given_config(v) for v in values):
            if code.co_flags & 0x20:  # a generator: its first run is the call
                self._started[id(frame)] = frame
            caller = self._rel(frame.f_back.f_code.co_filename) if frame.f_back is not None else None
            self.calls.append((rel, code.co_qualname, caller))


def _module(rel: str) -> str:
    return rel.removesuffix(".py").removesuffix("/__init__").replace("/", ".")


def summarize(calls: list[tuple[str, str, str | None]]) -> dict:
    levels = _layers(ROOT / "docs" / "design.md")
    level = {rel: _level_of(_module(rel), levels)[1] for rel in {c[0] for c in calls} | {c[2] for c in calls if c[2]}}
    entries, on_trip, climbs, direct = Counter(), Counter(), [], []
    previous = None
    for rel, name, caller in calls:
        on_trip[rel] += 1
        if rel != previous:
            entries[rel] += 1
            if previous is not None and level[rel] > level[previous]:
                climbs.append(f"{previous} -> {rel}:{name}")
        if caller is not None and level[rel] > level[caller]:
            direct.append(f"{caller} -> {rel}:{name}")
        previous = rel
    return {"calls": len(calls), "files": {rel: {"entries": entries[rel], "calls": on_trip[rel], "level": level[rel]}
                                           for rel in sorted(entries, key=lambda r: (-entries[r], r))},
            "max_entries": max(entries.values(), default=0), "climbs_back": len(climbs), "climbs": climbs,
            "direct_upward_calls": len(direct), "direct": direct,
            "trip": [f"{rel}:{name}" + (f" (from {caller})" if caller else "") for rel, name, caller in calls]}


def report(result: dict) -> str:
    lines = [f"{'file':<52} {'level':>5} {'calls':>6} {'entries':>7}"]
    for rel, row in result["files"].items():
        lines.append(f"{rel:<52} {row['level']:>5} {row['calls']:>6} {row['entries']:>7}")
    worst = [rel for rel, row in result["files"].items() if row["entries"] == result["max_entries"]]
    lines += ["",
              f"calls on the trip: {result['calls']} in {len(result['files'])} files",
              f"most entries into one file: {result['max_entries']} ({', '.join(worst)}; target <= 5)",
              f"climbs back to a higher layer: {result['climbs_back']} (target <= 15)",
              f"direct calls from a lower layer into a higher one: {result['direct_upward_calls']}"]
    lines += ["", "climbs back (previous call's file -> file:function):", *(f"  {c}" for c in result["climbs"])]
    lines += ["", "direct upward calls (caller's file -> file:function):", *(f"  {c}" for c in result["direct"])]
    return "\n".join(lines)


def run(steps: int, with_run_folder: bool = False) -> dict:
    with tempfile.TemporaryDirectory(prefix="call-trace-") as tmp:
        args = _setup(Path(tmp), steps)
        trip = Trip(str(Path(tmp) / "run") if with_run_folder else None)
        os.environ.update(OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"), TOKENIZERS_PARALLELISM="false")
        sys.setprofile(trip)
        try:
            status = main(args)
        finally:
            sys.setprofile(None)
        if status:
            raise SystemExit(f"the traced run exited {status}")
    return summarize(trip.calls)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2, help="steps of the traced run (it resumes from steps - 1)")
    parser.add_argument("--with-run-folder", action="store_true",
                        help="also follow the run folder's paths (the resume decision, the checkpoint's reading)")
    parser.add_argument("--json", type=Path, help="also write the result here")
    a = parser.parse_args()
    result = run(a.steps, a.with_run_folder)
    print(f"package: {PACKAGE}\n")
    print(report(result))
    if a.json:
        a.json.write_text(json.dumps(result, indent=1) + "\n")
