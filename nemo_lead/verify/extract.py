"""Where a response's final answer is, and how to read it out (pure string work, no math-verify).

What counts as *the* answer:
- the content of the **last** `\\boxed{...}` (or `\\fbox{...}`) in the chosen region. The last box decides:
  if its braces never close, or it is empty, the response has no answer; an earlier box is not used, because
  the model did not leave it as its final word. Escaped braces `\\{ \\}` inside the box do not count;
- `\\boxed 5` (no braces, as some models write) gives the next whitespace-free token, cut at `$`, at a
  think tag (`\\boxed 5</think>` reads "5" in region "all") and at trailing punctuation.

Several boxes (`final_answer`, the "paper" rule of `MathVerifier`): when the gold lists k >= 2 answers
(`notation.answer_parts`: top-level comma-separated parts, or a set's elements) and each of the last k
boxes of the region holds one answer, those k boxes joined with ", " are the answer, compared with the
gold as a tuple or set (`\\boxed{(2, 2)}` and `\\boxed{(6, 2)}` against `(2, 2), (6, 2)`). Otherwise
the last box alone, as above: the convention of single-answer (AIME-style) problems, and the authors' code
reads it too (the `reference_code` presets read only it, `reference_code.py`).

Where to look (`region`):
- "after_think": after the last `</think>`. A response with `<think>` but no `</think>` never finished
  thinking and has no answer; one with no think tags at all (a non-reasoning model) is read whole.
- "before_think": before the first `</think>` -- where the GRPO-LEAD authors' code reads (docs/design.md, "Paper vs the authors' code":
  likely a slip, kept in the `reference_code` presets). Without `</think>` there is no answer. How their code
  reads the box itself differs again: `nemo_lead.verify.reference_code`.
- "all": the whole text.

Multiple-choice decorations (`\\textbf{(C)}\\ 70`, `(D) 31`, `\\text{(B)}\\ 2`) are common in competition
solutions; `split_choice_label` separates the letter from the value so a grader can accept either.

Everything here is linear in the text length: the parent process extracts before handing work to graders.
"""

from __future__ import annotations

import re

from nemo_lead.verify.notation import answer_parts

REGIONS = ("after_think", "before_think", "all")
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
_BOX_MACROS = ("\\boxed", "\\fbox")
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
_BARE_TOKEN = re.compile(r"(?:(?!</?think>)[^\s$])+")  # stops at `$`, whitespace, think tags
_TRAILING_PUNCT = ".,;:"


def ends_inside_think(text: str) -> bool:
    """True when `text` (a rendered prompt) leaves a `<think>` block open, as R1-Distill's generation prompt
    does: the response then starts inside the thoughts, and graders must see the `<think>` in front of it."""
    return text.rfind(THINK_OPEN) > text.rfind(THINK_CLOSE)


def answer_region(text: str, region: str = "after_think") -> str:
    """The part of `text` where the final answer is read (see the module docstring)."""
    if region == "all":
        return text
    if region == "after_think":
        head, sep, tail = text.rpartition(THINK_CLOSE)
        if sep:
            return tail
        return "" if THINK_OPEN in text else text
    if region == "before_think":
        head, sep, _ = text.partition(THINK_CLOSE)
        return head if sep else ""
    raise ValueError(f"answer_region must be one of {REGIONS}, got {region!r}")


def _last_box_start(text: str, before: int | None = None) -> tuple[int, int] | None:
    """(start, end of macro name) of the last `\\boxed`/`\\fbox` starting before `before` (None: the end)
    that is not a longer macro name."""
    best = None
    for macro in _BOX_MACROS:
        end = len(text) if before is None else before
        while True:
            i = text.rfind(macro, 0, end)
            if i < 0:
                break
            j = i + len(macro)
            if j < len(text) and text[j].isalpha():  # e.g. \boxedanswer: some other macro
                end = i
                continue
            if best is None or i > best[0]:
                best = (i, j)
            break
    return best


def braced_group(text: str, open_at: int) -> str | None:
    """Content of the `{...}` group opening at `open_at`, or None when it never closes."""
    depth = 0
    for m in _BRACE_TOKEN.finditer(text, open_at):
        tok = m.group()
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                return text[open_at + 1 : m.start()]
    return None


def extract_answer(text: str, region: str = "after_think") -> str | None:
    """The content of the last `\\boxed{...}` / `\\fbox{...}` / `\\boxed X` in `region`, stripped; None if
    there is none, it is empty, or its braces do not close."""
    if not isinstance(text, str):
        raise TypeError(f"extract_answer expects a str, got {type(text).__name__}")
    part = answer_region(text, region)
    found = _last_box_start(part)
    return None if found is None else _box_content(part, found[1])[0]


def _box_content(part: str, j: int) -> tuple[str | None, int]:
    """(stripped content or None, where the box ends) of the box whose macro name ends at `j`."""
    k = j
    while k < len(part) and part[k].isspace():
        k += 1
    if k < len(part) and part[k] == "{":
        content = braced_group(part, k)
        stop = k + 2 + len(content) if content is not None else len(part)
    else:
        m = _BARE_TOKEN.match(part, k)
        content = m.group().rstrip(_TRAILING_PUNCT) if m else None
        stop = m.end() if m else k
    content = content.strip() if content is not None else None
    return content or None, stop


def _last_boxes(part: str, k: int) -> list[str]:
    """The contents of the last `k` boxes of `part` in order (fewer when the region holds fewer, or one of
    them is empty, does not close or lies inside the next)."""
    out: list[str] = []
    before = None
    while len(out) < k:
        found = _last_box_start(part, before)
        if found is None:
            break
        content, stop = _box_content(part, found[1])
        if content is None or (before is not None and stop > before):
            break
        out.append(content)
        before = found[0]
    return out[::-1]


def final_answer(text: str, gold: str, region: str = "after_think") -> str | None:
    """The answer `text` gives to a problem whose answer is `gold`: the last box, or the last k boxes
    joined when the gold lists k answers (the module docstring, "Several boxes")."""
    last = extract_answer(text, region)
    parts = answer_parts(gold)
    if last is None or parts < 2 or answer_parts(last) != 1:
        return last
    boxes = _last_boxes(answer_region(text, region), parts)
    if len(boxes) == parts and all(answer_parts(b) == 1 for b in boxes):
        return ", ".join(boxes)
    return last


# A choice label at the start of an answer: "(C)", "\textbf{(C)}", "\text{(B)}", "\mathrm{(A)}" ...
_WRAP = r"\\(?:textbf|text|mathrm|mathbf|textrm|mathsf|textsf)\s*"
_LABEL_ALONE = re.compile(rf"^(?:{_WRAP}\{{\s*\(([A-E])\)\s*\}}|\(([A-E])\))(.*)$", re.DOTALL)
_LABEL_IN_WRAP = re.compile(rf"^{_WRAP}\{{\s*\(([A-E])\)\s*([^{{}}]*)\}}$", re.DOTALL)
_SEPARATORS = re.compile(r"^(?:\s|\\ |~|\\quad|\\qquad|\\,|\\;|\\:|\\!|:|\$)+")


def split_choice_label(answer: str) -> tuple[str | None, str]:
    """Split a multiple-choice label off an answer: `\\textbf{(C)}\\ 70` -> ("C", "70"),
    `(D) 31` -> ("D", "31"), `\\text{(B)}` -> ("B", ""), `70` -> (None, "70")."""
    s = answer.strip()
    m = _LABEL_IN_WRAP.match(s)
    if m:
        return m.group(1), m.group(2).strip()
    m = _LABEL_ALONE.match(s)
    if m:
        label = m.group(1) or m.group(2)
        rest = _SEPARATORS.sub("", m.group(3)).strip()
        return label, rest
    return None, s
