"""`nemo-lead prepare deepscaler SRC --out DIR`: the recipes' `paths.deepscaler` file from the public
DeepScaleR release, read the way the GRPO-LEAD authors read it.

What their code reads (aeroplanepaper/GRPO-LEAD at commit 9344bef, deepscaler/data/preprocess/
data_preprocess.ipynb, lines of the .ipynb file):
- line 24: the training files `amc`, `omni_math`, `aime`, `still`, `math` (olympiad.json is left out, "too
  large, too long to train"), line 28: each `../train/NAME.json`, a JSON list of records with `problem`,
  `answer` and, for most, `difficulty` (line 11: 41,912 records in all);
- line 60: `difficulty = entry.get('difficulty', 0)`: a record without one counts as 0;
- line 62: `if not (3.5<=difficulty): continue`: their stage-1 set keeps difficulty >= 3.5;
- line 66: `should_allow_eval(_normalize(answer))`: and answers sympy can evaluate (`answer_allows_eval`);
  line 42: 7,721 records pass both (their `stage1_data.json`).
The paper states difficulty >= 2.5 for stage 1 (the recipe's `stage1_data`), and > 1 for the distillation
problems (`sft_problems`).

Written: DIR/deepscaler.jsonl, one row per record with a numeric difficulty, with `id` (FILE/INDEX),
`problem`, `answer`, `difficulty` and `source` (the file); records without a difficulty, or without a problem
or an answer, are dropped and counted (the recipe's select stages filter on the difficulty; for data without
ratings, set `stages.<select stage>.difficulty=null` instead). DIR/counts.json holds the counts printed at
each step, and how many rows pass each bound: > 1, >= 2.5, >= 3.5, and >= 3.5 with an evaluable answer.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from nemo_lead.data.filters import answer_allows_eval
from nemo_lead.data.readers import DataError
from nemo_lead.runtime.files import jsonl_text, write_atomic, write_json

AUTHORS_FILES = ("amc", "omni_math", "aime", "still", "math")  # data_preprocess.ipynb line 24
BOUNDS = {"difficulty > 1 (sft_problems)": lambda d: d > 1,
          "difficulty >= 2.5 (stage1_data, the paper)": lambda d: d >= 2.5,
          "difficulty >= 3.5 (the authors' code)": lambda d: d >= 3.5}


@dataclass
class PrepareDataConfig:
    """`nemo-lead prepare DATASET SOURCE --out DIR`."""

    dataset: Optional[str] = None  # deepscaler
    source: Optional[str] = None  # the release's training folder (amc.json, omni_math.json, ...)
    out: Optional[str] = None  # the folder written
    files: list[str] = field(default_factory=lambda: list(AUTHORS_FILES))  # file stems read, in order

    def __post_init__(self) -> None:
        if self.dataset != "deepscaler":
            raise ValueError(f"dataset must be deepscaler (nemo-lead prepare deepscaler SRC --out DIR), got "
                             f"{self.dataset!r}")
        if not self.source or not self.out:
            raise ValueError("give the release's training folder and --out DIR: nemo-lead prepare deepscaler SRC "
                             "--out DIR")


def _records(path: Path) -> list[Any]:
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
    return data


def prepare_deepscaler(source: Path, files: list[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows to write and the counts (per file: read, without difficulty, without problem or answer)."""
    rows: list[dict[str, Any]] = []
    counts: dict[str, Any] = {"files": {}}
    missing = [n for n in files if not (source / f"{n}.json").is_file()]
    if missing:
        raise DataError(f"{source}: no {', '.join(n + '.json' for n in missing)} (the DeepScaleR release's "
                        "deepscaler/data/train folder holds them)")
    for name in files:
        records = _records(source / f"{name}.json")
        c = {"read": len(records), "no_difficulty": 0, "no_problem_or_answer": 0}
        for i, r in enumerate(records):
            if not isinstance(r, dict) or not r.get("problem") or r.get("answer") in (None, ""):
                c["no_problem_or_answer"] += 1
                continue
            d = r.get("difficulty")
            if isinstance(d, bool) or not isinstance(d, (int, float)):
                c["no_difficulty"] += 1
                continue
            rows.append({"id": f"{name}/{i}", "problem": r["problem"], "answer": str(r["answer"]),
                         "difficulty": float(d), "source": name})
        c["kept"] = c["read"] - c["no_difficulty"] - c["no_problem_or_answer"]
        counts["files"][name] = c
    counts["read"] = sum(c["read"] for c in counts["files"].values())
    counts["written"] = len(rows)
    counts["bounds"] = {k: sum(keep(r["difficulty"]) for r in rows) for k, keep in BOUNDS.items()}
    counts["bounds"]["difficulty >= 3.5 and an evaluable answer (the authors' stage1_data)"] = sum(
        r["difficulty"] >= 3.5 and answer_allows_eval(r["answer"]) for r in rows)
    return rows, counts


def run_prepare_deepscaler(cfg: PrepareDataConfig) -> int:
    """CLI runner of `nemo-lead prepare deepscaler`; 0 written, 2 bad input."""
    try:
        rows, counts = prepare_deepscaler(Path(cfg.source).expanduser(), list(cfg.files))
    except (DataError, OSError) as e:
        print(f"nemo-lead prepare: {e}", file=sys.stderr)
        return 2
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "deepscaler.jsonl", jsonl_text(rows))
    write_json(out / "counts.json", counts)
    for name, c in counts["files"].items():
        print(f"{name}.json: {c['read']} read, {c['no_difficulty']} without a difficulty, "
              f"{c['no_problem_or_answer']} without a problem or answer, {c['kept']} kept")
    print(f"{counts['written']} of {counts['read']} written to {out / 'deepscaler.jsonl'} (paths.deepscaler)")
    for bound, n in counts["bounds"].items():
        print(f"  {bound}: {n}")
    return 0
