"""What an evaluation generates: the datasets' problems, cut into chunks, each with its own seed.

A chunk is `problems_per_call` consecutive problems of one dataset (file order) -- one engine call with
all n samples of each. It is the unit of seeding: its seed is derived from the base seed, the dataset name
and the ids of its problems (`chunk_seed`), never from its position in a run. So the samples of a chunk
are the same whether it runs first, after a resume, or on another data-parallel replica: the engines are
deterministic for a given seed, prompts and parameters (the megatron engine also for the same batch limits
and layout; TP > 1 matches TP = 1 up to the float rounding of logits).

What the engines do not allow: one random stream per (problem, sample). The megatron engine draws every
token of a call from one generator shared by its rows, so a sample depends on which problems share its
call. Changing `problems_per_call` therefore changes the samples (not their distribution); with
`problems_per_call=1` each problem's samples depend on that problem alone. Chunks are cut from each
dataset's full problem list, so a resumed run cuts them exactly as the interrupted one did.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from nemo_lead.data import BUILTIN_DATASETS, DataError, Problem, load_problems


@dataclass(frozen=True)
class Chunk:
    dataset: str
    index: int  # within its dataset
    problems: tuple[Problem, ...]
    seed: int


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


def chunk_seed(seed: int, dataset: str, problem_ids: list[str]) -> int:
    """A 63-bit seed for the chunk of `problem_ids` of `dataset` (sha256: stable across processes)."""
    text = "\x1f".join([str(seed), dataset, *problem_ids])
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def plan_chunks(datasets: dict[str, list[Problem]], problems_per_call: int, seed: int) -> list[Chunk]:
    """Every chunk of every dataset, datasets in order, each cut from its dataset's start."""
    chunks = []
    for name, problems in datasets.items():
        for index, start in enumerate(range(0, len(problems), problems_per_call)):
            part = tuple(problems[start:start + problems_per_call])
            chunks.append(Chunk(name, index, part, chunk_seed(seed, name, [p.id for p in part])))
    return chunks
