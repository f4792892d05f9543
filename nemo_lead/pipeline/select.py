"""Problem sets a recipe builds from others: curriculum filters, and the stage-2 set from a stage-1 run.

The paper's stage 2 trains on the problems whose stage-1 rollout accuracy was <= 75%, plus an extra set of
hard numeric-answer problems. The stage-1 RL run records every visit of a problem in
RUN/problem_stats.jsonl ({"id", "step", "samples", "correct", "mean_length"}); a problem's accuracy is its
correct samples over its samples, summed over all its visits (a problem seen in two epochs counts both).
Problems the run never drew have no accuracy and are not selected.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nemo_lead.data import (
    DataError,
    Problem,
    filter_by_bound,
    filter_evaluable_answers,
    load_problems,
    parse_bound,
    problem_key,
)
from nemo_lead.pipeline.config import SelectConfig
from nemo_lead.runtime.files import jsonl_text, write_atomic
from nemo_lead.training.run.folder import PROBLEM_STATS_FILE, read_problem_stats


def rollout_accuracy(run: str | Path) -> dict[str, float]:
    """{problem id: correct / samples over every visit} from an RL run folder's problem_stats.jsonl."""
    samples: dict[str, int] = {}
    correct: dict[str, float] = {}
    for n, row in enumerate(read_problem_stats(run), 1):
        try:
            pid, s, c = str(row["id"]), int(row["samples"]), float(row["correct"])
        except (KeyError, TypeError, ValueError):
            raise DataError(f"{Path(run) / PROBLEM_STATS_FILE}:{n}: expected {{'id', 'samples', 'correct', ...}}, "
                            f"got {str(row)[:120]}") from None
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


def new_extra(extra: Sequence[Problem], pool: Sequence[Problem]) -> tuple[list[Problem], dict[str, int]]:
    """The `extra` problems that are new, by normalised text (`problem_key`), and what was dropped: those in
    the `pool` the selection read (in stage 2, the user's stage-1 problems: their own stage-1 accuracy already
    selected or rejected them; the selected problems are among them), and repeats of an earlier extra row."""
    in_pool = {problem_key(p.problem) for p in pool}
    seen: set[str] = set()
    kept, counts = [], {"extra_in_pool": 0, "extra_repeated": 0}
    for p in extra:
        key = problem_key(p.problem)
        if key in in_pool:
            counts["extra_in_pool"] += 1
        elif key in seen:
            counts["extra_repeated"] += 1
        else:
            seen.add(key)
            kept.append(p)
    return kept, counts


def select_problems(cfg: SelectConfig) -> tuple[list[Problem], dict[str, Any]]:
    """The selected problems (filtered `problems`, then the new ones of `extra`) and counts of what each
    step kept."""
    problems = pool = _load(cfg.problems, cfg)
    report: dict[str, Any] = {"candidates": len(problems)}
    if cfg.difficulty is not None:
        try:
            problems = filter_by_bound(problems, cfg.difficulty_key, cfg.difficulty)
        except DataError as e:
            raise DataError(f"{e} (difficulty: {cfg.difficulty!r} needs it on every problem)") from None
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
    if extra:
        extra, dropped = new_extra(extra, pool)
        report.update(dropped, extra_kept=len(extra))
    report["total"] = len(problems) + len(extra)
    return problems + extra, report


def write_problems(problems: Sequence[Problem], path: Path) -> Path:
    """JSONL with id, problem, answer and every meta field (readable by `load_problems`), written atomically."""
    write_atomic(path, jsonl_text({**p.meta, "id": p.id, "problem": p.problem, "answer": p.answer} for p in problems))
    return path
