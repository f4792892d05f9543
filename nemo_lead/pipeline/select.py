"""Problem sets a recipe builds from others: curriculum filters, and the stage-2 set from a stage-1 run.

The paper's stage 2 trains on the problems whose stage-1 rollout accuracy was <= 75%, plus an extra set of
hard numeric-answer problems. The stage-1 RL run records every visit of a problem in
RUN/problem_stats.jsonl ({"id", "step", "samples", "correct", "mean_length"}); a problem's accuracy is its
correct samples over its samples, summed over all its visits (a problem seen in two epochs counts both).
Problems the run never drew have no accuracy and are not selected.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nemo_lead.data import DataError, Problem, filter_evaluable_answers, load_problems

from .config import SelectConfig, parse_bound

PROBLEM_STATS = "problem_stats.jsonl"


def rollout_accuracy(run: str | Path) -> dict[str, float]:
    """{problem id: correct / samples over every visit} from an RL run folder's problem_stats.jsonl."""
    path = Path(run) / PROBLEM_STATS
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no per-problem statistics (is {run} an RL run folder of `nemo-lead rl`?)")
    samples: dict[str, int] = {}
    correct: dict[str, float] = {}
    lines = path.read_text().splitlines()
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            pid, s, c = str(row["id"]), int(row["samples"]), float(row["correct"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            if n == len(lines):  # a torn last line of an interrupted run
                break
            raise DataError(f"{path}:{n}: expected {{'id', 'samples', 'correct', ...}}, got {line[:120]!r}") from None
        samples[pid] = samples.get(pid, 0) + s
        correct[pid] = correct.get(pid, 0.0) + c
    return {pid: correct[pid] / samples[pid] for pid in samples if samples[pid] > 0}


def _load(specs: Sequence[str], cfg: SelectConfig) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[str] = set()
    for spec in specs:
        for p in load_problems(spec, split=cfg.split, fields=dict(cfg.fields) or None):
            if p.id in seen:
                raise DataError(f"{spec}: problem id {p.id!r} is also in an earlier set of this selection")
            seen.add(p.id)
            problems.append(p)
    return problems


def select_problems(cfg: SelectConfig) -> tuple[list[Problem], dict[str, Any]]:
    """The selected problems (filtered `problems`, then `extra`) and counts of what each step kept."""
    problems = _load(cfg.problems, cfg)
    report: dict[str, Any] = {"candidates": len(problems)}
    if cfg.difficulty is not None:
        keep = parse_bound(cfg.difficulty, "difficulty")
        missing = [p.id for p in problems if not isinstance(p.meta.get(cfg.difficulty_key), (int, float))]
        if missing:
            raise DataError(f"problem {missing[0]!r} has no numeric {cfg.difficulty_key!r} "
                            f"(difficulty: {cfg.difficulty!r} needs it on every problem)")
        problems = [p for p in problems if keep(float(p.meta[cfg.difficulty_key]))]
        report["after_difficulty"] = len(problems)
    if cfg.from_run is not None:
        keep = parse_bound(cfg.accuracy, "accuracy")
        accuracy = rollout_accuracy(cfg.from_run)
        report["seen_in_run"] = sum(p.id in accuracy for p in problems)
        problems = [p for p in problems if p.id in accuracy and keep(accuracy[p.id])]
        report["after_accuracy"] = len(problems)
        problems = [Problem(p.id, p.problem, p.answer, {**p.meta, "rollout_accuracy": accuracy[p.id]})
                    for p in problems]
    if cfg.evaluable_answers:
        problems = filter_evaluable_answers(problems)
        report["after_evaluable_answers"] = len(problems)
    if cfg.limit is not None:
        problems = problems[: cfg.limit]
    report["selected"] = len(problems)
    taken = {p.id for p in problems}
    extra = _load(cfg.extra, cfg) if cfg.extra else []
    clash = next((p.id for p in extra if p.id in taken), None)
    if clash is not None:
        raise DataError(f"extra problem id {clash!r} is also among the selected problems")
    report["extra"] = len(extra)
    report["total"] = len(problems) + len(extra)
    return problems + extra, report


def write_problems(problems: Sequence[Problem], path: Path) -> Path:
    """JSONL with id, problem, answer and every meta field (readable by `load_problems`), written atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w") as f:
        for p in problems:
            f.write(json.dumps({**p.meta, "id": p.id, "problem": p.problem, "answer": p.answer}) + "\n")
    tmp.replace(path)
    return path
