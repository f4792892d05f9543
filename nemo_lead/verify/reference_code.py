"""How the GRPO-LEAD authors' code reads a response: the `reference_code` outcome rule of `MathVerifier`.

Rebuilt from reading their code (aeroplanepaper/GRPO-LEAD at commit 9344bef: deepscaler's `RewardMathFn`,
`deepscaler_reward_fn` and `extract_answer`, verl's `RewardManager`), not copied from it. Their pipeline:

1. The text graded is the prompt and the response decoded together (the stop token included).
2. The answer is read in that text before its first `</think>`; without `</think>` the response is a
   *format failure*.
3. The box is the last `\\boxed` there; it counts only when `{` follows at once, and its braces are counted
   without regard to escapes (`authors_answer`). So `\\boxed 5`, `\\boxed {5}`, `\\fbox{5}` and a box whose
   braces never close are format failures, while an empty `\\boxed{}` is an answer -- the empty one, wrong.
4. The prompt is part of that text: a response with `</think>` but no box before it is read as the prompt's
   own box (the instruction "... within \\boxed{}" gives the empty answer: wrong, -1). With a prompt that
   holds no box it stays a format failure (0).
5. Only format failures are checked for repetition (their n-gram rule on their chunk grid, or a 120+
   character token, over prompt + response: `find_repetition(..., grid=True)`): -2 when found, else 0. A
   wrong answer gets -1 whatever its repetition; a correct one +1 (then the length reward).
6. Whether the response ended or was cut at the length limit plays no part: a cut response with a box
   before `</think>` is graded like any other.

The one intended difference: equality with the gold is math-verify's (`match.py`); theirs is a mathd
normalisation and a sympy comparison. Outcomes: a format failure is TRUNCATED (reward 0 in the presets) or
REPETITION (-2), a wrong answer WRONG, a right one CORRECT.
"""

from __future__ import annotations

import re

from nemo_lead.verify.extract import answer_region

_BOX = "\\boxed"
_BRACE = re.compile(r"[{}]")


def authors_answer(text: str) -> str | None:
    """The content of the last `\\boxed{...}` in `text` as the authors' code reads it (point 3 of the module
    docstring), unstripped; None when there is no `\\boxed`, `{` does not follow it at once, or its braces
    never close. An empty box gives ""."""
    i = text.rfind(_BOX)
    open_at = i + len(_BOX)
    if i < 0 or not text.startswith("{", open_at):
        return None
    depth = 0
    for m in _BRACE.finditer(text, open_at):
        depth += 1 if m.group() == "{" else -1
        if depth == 0:
            return text[open_at + 1 : m.start()]
    return None


def read_like_authors(prompt: str, response: str, region: str = "before_think") -> tuple[str | None, str]:
    """(answer or None for a format failure, the text their repetition check sees) for one response.

    `region` is where in prompt + response the answer is read; their code reads "before_think"."""
    text = prompt + response
    return authors_answer(answer_region(text, region)), text
