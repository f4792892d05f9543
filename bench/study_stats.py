"""Statistics of the real-model study (bench/real_model.py): per-problem figures from `nemo-lead eval` folders,
paired differences over problems with percentile-bootstrap 95% intervals, and length ratios.

    a, b = per_problem(EVAL_A), per_problem(EVAL_B)        # {problem id: Problem(correct=[...], tokens=[...])}
    paired(pass_rates(a), pass_rates(b))                    # Pass@1 a - b: estimate, 95% interval
    log_ratio(mean_lengths(a), mean_lengths(b))             # mean over problems of log(len a / len b), interval

Why these: Pass@1 is the mean over k samples per problem at the evaluation temperature, averaged over
problems; two models evaluated on the same problems differ problem by problem far less than their scores
spread, so the difference is taken per problem and its interval resamples problems (pairing keeps that
correlation). Lengths differ by problem by a factor, so their comparison is a per-problem log ratio
(exp of its mean: the typical ratio), not a difference of means that the longest problems would dominate.
The bootstrap is the percentile one over problems (10,000 resamples, a fixed seed: the same figures on a rerun).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

RESAMPLES = 10_000
SEED = 20261206


@dataclass
class Problem:
    correct: list[bool] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


@dataclass
class Interval:
    estimate: float
    low: float
    high: float

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def text(self, fmt: str = "+.3f") -> str:
        return f"{self.estimate:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"


def per_problem(eval_folder: str | Path) -> dict[str, Problem]:
    """Every sample of an eval folder's samples.jsonl, grouped by problem (dataset and id)."""
    out: dict[str, Problem] = {}
    for line in (Path(eval_folder) / "samples.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        p = out.setdefault(f"{r['dataset']}/{r['problem_id']}", Problem())
        p.correct.append(bool(r["correct"]))
        p.tokens.append(int(r["tokens"]))
    return out


def pass_rates(problems: dict[str, Problem]) -> dict[str, float]:
    """Per problem, the share of its k samples that are correct (Pass@1 is their mean)."""
    return {k: sum(p.correct) / len(p.correct) for k, p in problems.items()}


def mean_lengths(problems: dict[str, Problem]) -> dict[str, float]:
    """Per problem, the mean response length of its samples (tokens)."""
    return {k: sum(p.tokens) / len(p.tokens) for k, p in problems.items()}


def _common(a: dict[str, float], b: dict[str, float]) -> list[str]:
    if set(a) != set(b):
        raise ValueError(f"the two evaluations cover different problems ({len(set(a) ^ set(b))} not in both)")
    return sorted(a)


def bootstrap_mean(values: list[float], resamples: int = RESAMPLES, seed: int = SEED) -> Interval:
    """The mean of `values` and its percentile-bootstrap 95% interval (resampling the values)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size == 0:
        raise ValueError("no values to bootstrap")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return Interval(float(x.mean()), float(low), float(high))


def paired(a: dict[str, float], b: dict[str, float]) -> Interval:
    """Mean over problems of a - b (the same problems), with its 95% interval."""
    keys = _common(a, b)
    return bootstrap_mean([a[k] - b[k] for k in keys])


def log_ratio(a: dict[str, float], b: dict[str, float]) -> Interval:
    """Mean over problems of log(a / b) (lengths: a problem whose mean length is 0 on a side is left out)."""
    keys = [k for k in _common(a, b) if a[k] > 0 and b[k] > 0]
    return bootstrap_mean([math.log(a[k] / b[k]) for k in keys])


def as_percent_change(i: Interval) -> Interval:
    """A log-ratio interval as a relative change: exp(x) - 1 at each end."""
    return Interval(math.expm1(i.estimate), math.expm1(i.low), math.expm1(i.high))
