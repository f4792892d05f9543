"""The run folder's samples: `samples.jsonl` (one graded sample per line) and `run.json` (the settings).

Resume rules (why this module exists):
- A sample is keyed by (dataset, problem_id, sample). A rerun into the same folder generates only the
  samples that miss a key (calls.py), and appends them; finished samples are never regenerated (only
  rewritten when regraded, below). Each call's lines are appended as the call finishes, in the order calls
  finish; a finished run puts the file in the canonical order (datasets, their problems in file order,
  samples; `put_in_order`), so the folder's bytes do not depend on the calls or a resume.
- The settings that shape a sample (the model's content fingerprint and tokenizer folder, precision,
  sampling parameters incl. n and seed, stop tokens, prompt format, the seeding rule) are stored in
  run.json, and a short hash of them (`run`) is written on every line. Opening the folder with other
  settings fails with SettingsMismatch, saying in words what differs, rather than mixing samples of two
  models or temperatures in one score. Settings bind once the folder holds a sample: a run that failed
  before its first call was written (a wrong model folder, an engine that is not installed) leaves
  run.json behind, and the next run replaces it.
- Problems: run.json also keeps a hash of every problem that has samples (its text and gold answer), per
  dataset. Dataset choice and `limit` are free (a rerun may add datasets or problems), but a problem whose
  text or answer changed under the same dataset name and id (a data file replaced at the same path) is
  refused, naming the dataset and the problems.
- Grading is not part of the settings: each line records its `grading` (the answer region). Lines graded
  another way are regraded from their stored response on the next run (no generation), and the file is
  rewritten atomically.
- Crash safety: each call's lines are appended in one write, then flushed and fsynced. A crash can leave
  a torn last line (no newline at the end): reading ignores it, and opening for writing cuts it off, so its
  sample is generated again. A malformed line anywhere else is an error naming the file and line.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nemo_lead.config.dotted import flatten
from nemo_lead.runtime.files import append_jsonl, jsonl_text, write_atomic

SAMPLES_FILE = "samples.jsonl"
RUN_FILE = "run.json"
RECORD_KEYS = ("dataset", "problem_id", "sample", "run")

Key = tuple[str, str, int]


class SettingsMismatch(ValueError):
    """The run folder holds samples made with other settings (the message lists the differences)."""


def settings_tag(settings: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]


def describe_differences(old: dict[str, Any], new: dict[str, Any], limit: int = 6) -> str:
    """What differs between two settings, in words: the model's files by name (changed / only there / only
    now), every other key with both values."""
    a, b = flatten(old), flatten(new)
    files = "model.files."
    diffs = []
    changed = sorted(k[len(files):] for k in set(a) & set(b) if k.startswith(files) and a[k] != b[k])
    gone = sorted(k[len(files):] for k in set(a) - set(b) if k.startswith(files))
    added = sorted(k[len(files):] for k in set(b) - set(a) if k.startswith(files))
    for what, names in (("the model's file content changed", changed), ("model files no longer there", gone),
                        ("new model files", added)):
        if names:
            diffs.append(f"{what}: {', '.join(names[:4])}{' ...' if len(names) > 4 else ''}")
    diffs += [f"{k}: {a.get(k, '(unset)')!r} there, {b.get(k, '(unset)')!r} now"
              for k in sorted(set(a) | set(b)) if not k.startswith(files) and a.get(k) != b.get(k)]
    more = f"; and {len(diffs) - limit} more" if len(diffs) > limit else ""
    return "; ".join(diffs[:limit]) + more


def problem_hash(problem: str, answer: str) -> str:
    return hashlib.sha256(json.dumps([problem, answer]).encode()).hexdigest()[:16]


def record_key(rec: dict[str, Any]) -> Key:
    return rec["dataset"], rec["problem_id"], rec["sample"]


class SampleStore:
    """The samples of one run folder (use `open`)."""

    def __init__(self, folder: Path, settings: dict[str, Any]):
        self.folder = folder
        self.settings = settings
        self.tag = settings_tag(settings)
        self.records: dict[Key, dict[str, Any]] = {}
        self.problems: dict[str, dict[str, str]] = {}  # dataset -> problem id -> problem_hash (run.json)
        self.torn_bytes = 0  # length of a torn last line (ignored)

    @property
    def samples_path(self) -> Path:
        return self.folder / SAMPLES_FILE

    @classmethod
    def open(cls, folder: str | os.PathLike, settings: dict[str, Any], *, write: bool,
             problems: dict[str, list] | None = None) -> SampleStore:
        """Read and check the folder. `write`: also create it, record the settings, and cut a torn last line
        (the writer rank does this; everyone else, and the checks before starting ranks, only read).
        `problems`: {dataset: [Problem]} of this run, checked against the hashes in run.json."""
        store = cls(Path(folder), settings)
        if store._holds_samples():
            store._check_run_file()
            store._read()
        store.check_problems(problems or {})
        if write:
            store.folder.mkdir(parents=True, exist_ok=True)
            store._write_run_file()
            if store.torn_bytes:
                with open(store.samples_path, "r+b") as f:
                    f.truncate(store.samples_path.stat().st_size - store.torn_bytes)
                store.torn_bytes = 0
        return store

    def _holds_samples(self) -> bool:
        """At least one complete line in samples.jsonl: only then do the folder's settings bind."""
        path = self.samples_path
        return path.is_file() and b"\n" in path.read_bytes()

    def _write_run_file(self) -> None:
        run_file = self.folder / RUN_FILE
        write_atomic(run_file, json.dumps({"run": self.tag, "settings": self.settings, "problems": self.problems},
                                          indent=2, sort_keys=True))

    def _check_run_file(self) -> None:
        run_file = self.folder / RUN_FILE
        if not run_file.is_file():
            return
        try:
            saved = json.loads(run_file.read_text())
            stored = saved["settings"]
        except (json.JSONDecodeError, KeyError, TypeError):
            raise ValueError(f"{run_file}: not a run file of nemo-lead eval (remove it to start over)") from None
        self.problems = saved.get("problems", {})
        if settings_tag(stored) != self.tag:
            raise SettingsMismatch(
                f"{self.folder} holds samples made with other settings ({describe_differences(stored, self.settings)}). "
                "Use another --out folder, or delete that folder to start over.")

    def check_problems(self, problems: dict[str, list]) -> None:
        """Refuse problems whose text or answer changed since their samples were made; record this run's
        hashes (a problem without samples may change freely)."""
        sampled = {(str(d), str(pid)) for d, pid, _ in self.records}
        for name, items in problems.items():
            known = self.problems.setdefault(name, {})
            changed = []
            for p in items:
                pid, h = str(p.id), problem_hash(p.problem, p.answer)
                if known.get(pid, h) != h and (name, pid) in sampled:
                    changed.append(pid)
                known[pid] = h
            if changed:
                raise SettingsMismatch(
                    f"{self.folder} holds samples of dataset {name!r} whose problem text or answer has changed since "
                    f"(problems {', '.join(changed[:5])}{' ...' if len(changed) > 5 else ''}): the data file was "
                    "replaced. Use another --out folder, or delete that folder to start over.")

    def _read(self) -> None:
        path = self.samples_path
        if not path.is_file():
            return
        data = path.read_bytes()
        body, _, torn = data.rpartition(b"\n")  # torn: what follows the last newline (b"" when none)
        self.torn_bytes = len(torn)
        for n, line in enumerate(body.decode("utf-8", errors="replace").split("\n") if body else [], 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: malformed line ({e.msg}); only a torn last line is tolerated") from None
            if not isinstance(rec, dict) or any(k not in rec for k in RECORD_KEYS):
                raise ValueError(f"{path}:{n}: a sample line needs the keys {', '.join(RECORD_KEYS)}")
            if rec["run"] != self.tag:
                raise SettingsMismatch(f"{path}:{n}: sample made with other settings (run {rec['run']}, now "
                                       f"{self.tag}). Use another --out folder, or delete that folder to start over.")
            self.records.setdefault(record_key(rec), rec)  # a sample written twice: the first one counts

    def has(self, key: Key) -> bool:
        return key in self.records

    def append(self, records: Iterable[dict[str, Any]]) -> None:
        """Add records (new keys only), one write + fsync."""
        new = [r for r in records if record_key(r) not in self.records]
        if not new:
            return
        append_jsonl(self.samples_path, new, fsync=True)
        for r in new:
            self.records[record_key(r)] = r

    def put_in_order(self, problems: dict[tuple[str, str], int]) -> None:
        """Rewrite samples.jsonl (atomically) with its lines in the canonical order, problems as `problems`
        ranks them (dataset, problem id) and then by sample, when they are not in it already: a finished run
        folder is then the same bytes whatever the calls, replicas or resumes that wrote it."""
        def rank(key: Key) -> tuple[int, int]:
            return problems.get((key[0], key[1]), len(problems)), key[2]

        keys = list(self.records)
        ordered = sorted(keys, key=rank)
        if ordered != keys:
            self.records = {k: self.records[k] for k in ordered}
            write_atomic(self.samples_path, jsonl_text(self.records.values()), fsync=True)

    def rewrite(self, records: Iterable[dict[str, Any]]) -> None:
        """Replace records with the same keys (regrading), writing the whole file atomically."""
        for r in records:
            self.records[record_key(r)] = r
        write_atomic(self.samples_path, jsonl_text(self.records.values()), fsync=True)
