"""What an evaluation generates: every sample has its own seed; the samples still missing are cut into calls.

Seeding (the unit is the sample): each problem gets a seed from the base seed, its dataset's name and its
id (`problem_seed`), and sample s of it draws from the engine's stream (problem seed, s)
(`nemo_lead.generation.streams.sample_key`, the same rule in every engine). So a sample's tokens depend on
the model, the prompt and (seed, dataset, problem id, s) alone: not on which problems share its engine call,
how many sequences a call holds, the data-parallel split, a resume, or the rounds below. Engines give the
same tokens for the same stream where their logits do not depend on the batch; where an engine's kernels round
differently at another batch size (vLLM on a GPU, the megatron engine across TP layouts) a near tie can
flip a token (docs/evaluation.md, "Seeds and calls").

Rounds (`EvalConfig.rounds`, the distill stage's `keep: first`): the samples of a problem are drawn in
rounds, e.g. [1] = sample 0 first, then samples 1 .. n-1 only for problems whose earlier samples hold no
correct one. Round r of a problem is pending when it misses a sample of the round and (r > 0) none of its
samples of earlier rounds is correct.

Calls (`plan_calls`): a round's pending work is a list of `Item`s (one problem, samples first .. first +
count - 1: the lowest missing sample of the round to its end; samples already stored are drawn again
identically and dropped). Consecutive items with the same samples go into one engine call of at most
`sequences` sequences, in the order of the datasets and their problems (a problem with more samples than
that is cut into spans of `sequences` samples).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from nemo_lead.data import BUILTIN_DATASETS, DataError, Problem, load_problems

Key = tuple[str, str, int]  # (dataset, problem id, sample): a sample's identity in the run folder


@dataclass(frozen=True)
class Item:
    """One problem's samples first .. first + count - 1, in one call."""

    dataset: str
    problem: Problem
    seed: int  # the problem's seed (`problem_seed`)
    first: int
    count: int


@dataclass(frozen=True)
class Call:
    """One engine call: problems that all draw the same samples (first .. first + count - 1)."""

    items: tuple[Item, ...]

    @property
    def first(self) -> int:
        return self.items[0].first

    @property
    def count(self) -> int:
        return self.items[0].count

    @property
    def sequences(self) -> int:
        return len(self.items) * self.count


def dataset_name(spec: str) -> str:
    """The name a dataset goes by in outputs: a built-in name, else the file / folder name without suffix."""
    if spec in BUILTIN_DATASETS:
        return spec
    path = Path(spec)
    return path.stem if path.suffix else path.name


def load_datasets(specs: list[str], *, limit: int | None = None, split: str | None = None,
                  fields: dict[str, str] | None = None) -> dict[str, list[Problem]]:
    """{name: problems} in the order given. Errors name the file / line, or the nearest built-in name."""
    out: dict[str, list[Problem]] = {}
    for spec in specs:
        name = dataset_name(spec)
        if name in out:
            raise DataError(f"data: two datasets named {name!r} ({spec!r} and an earlier entry); "
                            "rename one of the files")
        out[name] = load_problems(spec, split=split, fields=fields or None, name=name, limit=limit)
    return out


def problem_seed(seed: int, dataset: str, problem_id: str) -> int:
    """A 63-bit seed for one problem of `dataset` (sha256 of the base seed, the name and the id: stable across
    processes and independent of the problem's place in its file)."""
    text = "\x1f".join([str(seed), dataset, str(problem_id)])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def round_ranges(n: int, rounds: list[int]) -> list[range]:
    """The sample indices of each round: `rounds` (the sizes of the first rounds, summing to at most n), then
    the rest of the n samples when any is left."""
    if any(r < 1 for r in rounds) or sum(rounds) > n:
        raise ValueError(f"rounds {rounds}: sizes >= 1 of the first rounds, summing to at most n = {n} "
                         "(the last round takes the rest)")
    ranges, start = [], 0
    for size in [*rounds, n - sum(rounds)]:
        if size:
            ranges.append(range(start, start + size))
        start += size
    return ranges


def pending_items(datasets: dict[str, list[Problem]], seed: int, samples: range, earlier: range,
                  have: Callable[[Key], bool], correct: Callable[[Key], bool]) -> list[Item]:
    """A round's work (module docstring): for every problem, in order, that misses a sample of `samples` and
    has no correct sample among `earlier` (the previous rounds' samples), its missing span."""
    items = []
    for name, problems in datasets.items():
        for p in problems:
            if any(correct((name, p.id, s)) for s in earlier):
                continue
            missing = [s for s in samples if not have((name, p.id, s))]
            if missing:
                items.append(Item(name, p, problem_seed(seed, name, p.id), missing[0], samples.stop - missing[0]))
    return items


def plan_calls(items: list[Item], sequences: int) -> list[Call]:
    """Consecutive items with the same samples, at most `sequences` sequences a call; an item of more samples
    than that is cut into spans of `sequences` samples first."""
    if sequences < 1:
        raise ValueError(f"a call holds at least one sequence, got {sequences}")
    spans = [dataclasses.replace(i, first=start, count=min(sequences, i.first + i.count - start))
             for i in items for start in range(i.first, i.first + i.count, sequences)]
    calls: list[list[Item]] = []
    for item in spans:
        last = calls[-1] if calls else None
        if (last and (last[0].first, last[0].count) == (item.first, item.count)
                and (len(last) + 1) * item.count <= sequences):
            last.append(item)
        else:
            calls.append([item])
    return [Call(tuple(c)) for c in calls]
