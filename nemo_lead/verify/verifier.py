"""`MathVerifier`: grade a batch of responses against gold answers -- right, fast, and never hanging.

Per response, in the calling process: its answer is read (see the rules below); an answer (short) goes to
a worker process (`match.grade_task`), which compares it with the gold under a soft time limit of
`timeout_s`. The parent kills a worker whose response passes `timeout_s + grace_s` (code stuck in C) and
starts a new one. With `check_repetition` the text to check goes to the worker too, and the repetition
check shares the response's time budget. Responses of one batch with the same answer, gold and text (the
n samples of a prompt often agree) are graded once: a worker round trip each is most of a short answer's
grading time.

Two outcome rules (`rule`, `nemo_lead.algorithms.Outcome`):

"paper" (the paper presets; the paper does not say which responses its -1.5 repetition penalty applies
to, so this is nemo-lead's reading): `finished=False` -> status "truncated" (not graded); no answer in the
region (`extract.final_answer`: the last box, or the last k boxes joined when the gold lists k answers)
-> "no_answer"; then
- CORRECT when the answer equals the gold (see `match.py` for what counts as equal);
- REPETITION when `check_repetition` is on, the response is not correct, and `find_repetition` fires:
  a wrong or an answerless response that repeats itself is penalised as repetition;
- TRUNCATED for "truncated" and "no_answer" (no final answer);
- WRONG otherwise, including "timeout" and "error" (a grader that gave up says nothing in the answer's
  favour, and a hostile answer must not earn the milder truncation reward).

"reference_code" (the `reference_code*` presets): the GRPO-LEAD authors' code, quirks included
(`reference_code.py`): the answer is read from prompt + response (`prompts` given to `grade`), the
finished flags are ignored, a format failure is "no_answer" -> TRUNCATED, or REPETITION when
`check_repetition` finds repetition (on their chunk grid, over prompt + response); an empty box is an
answer, graded WRONG; a wrong answer stays WRONG whatever its repetition.

Workers return plain values (status, correct, repetition found) and `Outcome` is imported only when grades
are built, so neither importing this package nor starting a worker imports torch.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from nemo_lead.verify.extract import REGIONS, final_answer
from nemo_lead.verify.pool import WorkerPool
from nemo_lead.verify.reference_code import read_like_authors

if TYPE_CHECKING:
    from nemo_lead.algorithms import Outcome

_log = logging.getLogger(__name__)
STATUSES = ("ok", "no_answer", "truncated", "timeout", "error")
RULES = ("paper", "reference_code")


def default_region(rule: str) -> str:
    """Where `rule` reads the answer unless the job sets `verify.answer_region`: before the first `</think>`
    under the reference_code rule (the authors' code), else after the last `</think>` (the final answer)."""
    return "before_think" if rule == "reference_code" else "after_think"


@dataclass(frozen=True)
class Grade:
    """The verdict on one response. `seconds`: wall time from handing it to a worker to the answer (0 when
    it needed no worker)."""

    correct: bool
    outcome: Outcome
    extracted: str | None
    status: str
    seconds: float


def _outcome_name(correct: bool, repetition: bool, status: str) -> str:
    """The precedence of the module docstring: correct, then repetition, then no answer, else wrong."""
    if correct:
        return "CORRECT"
    if repetition:
        return "REPETITION"
    return "TRUNCATED" if status in ("truncated", "no_answer") else "WRONG"


class MathVerifier:
    """Grades responses in `workers` processes with a `timeout_s` budget each (see the module docstring).

    answer_region: "after_think" (default), "before_think" (the GRPO-LEAD authors' code) or "all".
    grace_s: how long past `timeout_s` the parent waits before killing a worker.
    rule: "paper" (default) or "reference_code", the outcome rules of the module docstring.
    Use as a context manager, or call `close()`; workers also stop when the verifier is garbage collected
    or the interpreter exits.
    """

    def __init__(self, workers: int = 2, timeout_s: float = 5.0, answer_region: str = "after_think",
                 grace_s: float = 0.5, rule: str = "paper"):
        if answer_region not in REGIONS:
            raise ValueError(f"answer_region must be one of {REGIONS}, got {answer_region!r}")
        if rule not in RULES:
            raise ValueError(f"rule must be one of {RULES}, got {rule!r}")
        if not timeout_s > 0 or not grace_s >= 0:
            raise ValueError(f"timeout_s must be > 0 and grace_s >= 0, got {timeout_s}, {grace_s}")
        self.timeout_s, self.grace_s, self.answer_region = float(timeout_s), float(grace_s), answer_region
        self.rule = rule
        self._pool = WorkerPool("nemo_lead.verify.match:grade_task", workers, init="nemo_lead.verify.match:warm_up")

    def __enter__(self) -> MathVerifier:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        """Stop the worker processes (idempotent). Grading afterwards raises RuntimeError."""
        self._pool.close()

    def wait_ready(self) -> None:
        """Block until every worker has started (`grade` does not need this; benchmarks do)."""
        self._pool.wait_ready()

    def _read(self, text: str, prompt: str, gold: str, done: bool, check_repetition: bool):
        """(answer or None, status, text for the repetition check or None, on the authors' grid) of one
        response under `self.rule` (the module docstring)."""
        if self.rule == "reference_code":
            answer, full = read_like_authors(prompt, text, self.answer_region)
            if answer is None:
                return None, "no_answer", full if check_repetition else None, True
            return answer, "ok", None, True  # a wrong answer is never checked for repetition
        answer = final_answer(text, gold, self.answer_region) if done else None
        status = "ok" if answer is not None else "no_answer" if done else "truncated"
        return answer, status, text if check_repetition else None, False

    def grade(self, responses: Sequence[str], golds: Sequence[str], finished: Sequence[bool] | None = None,
              check_repetition: bool = False, prompts: Sequence[str] | None = None) -> list[Grade]:
        """One Grade per response, in input order. `finished[i]` False means response i was cut at the
        maximum length: under the "paper" rule it is TRUNCATED without grading (or REPETITION, with
        `check_repetition`). `prompts`: the rendered prompt of each response, read with it by the
        "reference_code" rule (None: empty prompts); the "paper" rule ignores them."""
        from nemo_lead.algorithms import Outcome

        n = len(responses)
        if (len(golds) != n or (finished is not None and len(finished) != n)
                or (prompts is not None and len(prompts) != n)):
            raise ValueError(
                f"grade needs as many golds, finished flags and prompts as responses: got {n} responses, "
                f"{len(golds)} golds, {'no' if finished is None else len(finished)} finished flags, "
                f"{'no' if prompts is None else len(prompts)} prompts"
            )
        extracted: list[str | None] = []
        status: list[str] = []
        jobs, job_of, job_index = [], {}, {}  # identical (answer, gold, text, grid) are graded once
        for i, (text, gold) in enumerate(zip(responses, golds)):
            prompt = "" if prompts is None else prompts[i]
            if not all(isinstance(x, str) for x in (text, gold, prompt)):
                raise TypeError(f"response {i}, its gold and its prompt must be str, got {type(text).__name__}, "
                                f"{type(gold).__name__}, {type(prompt).__name__}")
            done = finished is None or bool(finished[i])
            answer, state, rep_text, grid = self._read(text, prompt, gold, done, check_repetition)
            extracted.append(answer)
            status.append(state)
            graded = answer if answer is not None and answer.strip() else None  # an empty box is wrong
            if graded is not None or rep_text is not None:
                job = (graded, gold, rep_text, self.timeout_s, grid)
                if job not in job_index:
                    job_index[job] = len(jobs)
                    jobs.append(job)
                job_of[i] = job_index[job]
        results = self._pool.run(jobs, self.timeout_s + self.grace_s)

        grades = []
        for i in range(n):
            correct, repetition, seconds = False, False, 0.0
            if i in job_of:
                kind, value, seconds = results[job_of[i]]
                verdict = kind
                if kind == "done":
                    verdict, correct, found = value
                    repetition = found is not None
                elif kind in ("error", "crashed"):
                    _log.warning("grading response %d failed (%s): %s", i, kind, value)
                if status[i] == "ok" and verdict != "ok":  # an unanswered response stays TRUNCATED
                    status[i] = "timeout" if verdict in ("timeout", "killed") else "error"
            outcome = Outcome[_outcome_name(correct, repetition, status[i])]
            grades.append(Grade(correct, outcome, extracted[i], status[i], seconds))
        return grades
