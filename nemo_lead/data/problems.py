"""Problem sets: a problem text, a gold answer and a stable id per row, from any of the usual formats.

`load_problems(spec)` takes a built-in name (`aime24`, `aime25`, `math500`, `lead_stage2`, shipped in
`nemo_lead/data/files/`, sources in `files/SOURCES.md`), a JSONL / JSON / Parquet / Arrow file, or a
`datasets` folder (see `readers.py`).

Field names differ between sources, so each role has a list of names tried in order, and `fields=`
names the column explicitly (dotted keys reach into nested records, e.g. verl's
`reward_model.ground_truth`):

    problem   problem, question, prompt    (a string, or a chat message list: the last user turn is used)
    answer    answer, final_answer, reward_model.ground_truth
    solution  solution                     (when a row has no answer, the last \\boxed{} of its solution is)
    id        id, unique_id                (else "<name>/<row index>": stable while the file is unchanged)

Every other column is kept in `Problem.meta` (difficulty, pass_rate, subject, level, solution, ...).
Ids must be unique within a set: resumable evaluation and per-problem statistics are keyed by them.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nemo_lead.config.dotted import MISSING, lookup
from nemo_lead.data.readers import DataError, read_records
from nemo_lead.verify import extract_answer

FILES_DIR = Path(__file__).resolve().parent / "files"

BUILTIN_DATASETS: dict[str, str] = {
    "aime24": "aime24.jsonl",
    "aime25": "aime25.jsonl",
    "math500": "math500.jsonl",
    "lead_stage2": "lead_stage2_train.jsonl",
}

DEFAULT_FIELDS: dict[str, tuple[str, ...]] = {
    "problem": ("problem", "question", "prompt"),
    "answer": ("answer", "final_answer", "reward_model.ground_truth"),
    "solution": ("solution",),
    "id": ("id", "unique_id"),
}




@dataclasses.dataclass(frozen=True)
class Problem:
    id: str
    problem: str
    answer: str
    meta: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False)


def builtin_path(name: str) -> Path:
    """The shipped file of a built-in dataset."""
    return FILES_DIR / BUILTIN_DATASETS[name]


def load_problems(
    spec: str | os.PathLike,
    *,
    split: str | None = None,
    fields: Mapping[str, str] | None = None,
    name: str | None = None,
    limit: int | None = None,
) -> list[Problem]:
    """Problems of `spec` in file order; `limit` keeps the first N (after checking every row)."""
    roles = field_roles(fields)
    path = resolve_data_path(spec)
    if name is None:
        name = str(spec) if str(spec) in BUILTIN_DATASETS else path.stem if path.is_file() else path.name
        if split is not None:
            name = f"{name}-{split}"
    problems: list[Problem] = []
    first_seen: dict[str, str] = {}
    for index, (where, record) in enumerate(read_records(path, split)):
        p = _to_problem(record, where, f"{name}/{index}", roles)
        if p.id in first_seen:
            raise DataError(f"{where}: duplicate id {p.id!r} (first at {first_seen[p.id]})")
        first_seen[p.id] = where
        problems.append(p)
    if not problems:
        raise DataError(f"{path}: no problems")
    if limit is not None:
        if limit < 1:
            raise ValueError(f"limit must be >= 1, got {limit}")
        problems = problems[:limit]
    return problems


# ----------------------------------------------------------------------------- resolving the spec
def resolve_data_path(spec: str | os.PathLike) -> Path:
    if isinstance(spec, str) and spec in BUILTIN_DATASETS:
        return builtin_path(spec)
    path = Path(spec).expanduser()
    if path.exists():
        return path
    hint = difflib.get_close_matches(str(spec), list(BUILTIN_DATASETS), n=1)
    raise DataError(
        f"unknown dataset {str(spec)!r}: neither a built-in name ({', '.join(BUILTIN_DATASETS)}) "
        "nor an existing file or folder" + (f" (did you mean {hint[0]!r}?)" if hint else "")
    )


def field_roles(fields: Mapping[str, str] | None, defaults: Mapping[str, tuple[str, ...]] = DEFAULT_FIELDS
                ) -> dict[str, tuple[str, ...]]:
    """Role -> the columns tried for it, in order: `defaults` with each role `fields` names set to its one
    column (`data.fields`: {role: column}); an unknown role or an empty column is a ValueError naming it."""
    roles = dict(defaults)
    for role, key in (fields or {}).items():
        if role not in defaults:
            raise ValueError(f"unknown field role {role!r} in fields= (roles: {', '.join(defaults)})")
        if not isinstance(key, str) or not key:
            raise ValueError(f"fields[{role!r}] must be a column name, got {key!r}")
        roles[role] = (key,)
    return roles


# ----------------------------------------------------------------------------- one record
def first_field(record: dict, keys: tuple[str, ...]) -> tuple[str | None, Any]:
    for key in keys:
        value = lookup(record, key)
        if value is not MISSING and value is not None and value != "":
            return key, value
    return None, MISSING


def tried_names(keys: tuple[str, ...]) -> str:
    return " or ".join(repr(k) for k in keys)


def _problem_text(value: Any, where: str, key: str) -> str:
    if isinstance(value, list):  # chat format: [{"role": "user", "content": ...}, ...]
        users = [m.get("content") for m in value if isinstance(m, dict) and m.get("role") == "user"]
        value = users[-1] if users else None
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: field {key!r} is not a non-empty problem text")
    return value


def _answer_text(value: Any, where: str, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DataError(f"{where}: field {key!r} must be a string or a number, got {type(value).__name__}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    text = str(value).strip()
    if not text:
        raise DataError(f"{where}: field {key!r} is empty")
    return text


def _answer_from_solution(record: dict, where: str, roles: dict[str, tuple[str, ...]]) -> tuple[str, str]:
    key, solution = first_field(record, roles["solution"])
    if key is None:
        raise DataError(f"{where}: missing field {tried_names(roles['answer'])}")
    answer = extract_answer(str(solution), region="all")
    if answer is None or not answer.strip():
        raise DataError(
            f"{where}: missing field {tried_names(roles['answer'])}, and no \\boxed{{}} answer in field {key!r}"
        )
    return key, answer.strip()


def _to_problem(record: dict, where: str, default_id: str, roles: dict[str, tuple[str, ...]]) -> Problem:
    p_key, text = first_field(record, roles["problem"])
    if p_key is None:
        raise DataError(f"{where}: missing field {tried_names(roles['problem'])}")
    text = _problem_text(text, where, p_key)
    a_key, answer = first_field(record, roles["answer"])
    if a_key is None:
        _, answer = _answer_from_solution(record, where, roles)
    else:
        answer = _answer_text(answer, where, a_key)
    id_key, pid = first_field(record, roles["id"])
    if id_key is None:
        pid = default_id
    elif isinstance(pid, bool) or not isinstance(pid, (str, int)):
        raise DataError(f"{where}: field {id_key!r} must be a string or an integer, got {type(pid).__name__}")
    used = {k.split(".")[0] for k in (p_key, a_key, id_key) if k is not None}
    meta = {k: v for k, v in record.items() if k not in used}
    return Problem(id=str(pid), problem=text, answer=answer, meta=meta)
