"""Arithmetic word problems in plain English with integer answers, and R1-style traces that solve them in
ways of different lengths: the task of the real-model study (bench/real_model.py).

    problems = word_problems(count, seed)     # [{"id", "problem", "answer", "response", "responses"}], answers >= 0

Each problem is one of a few templates (two or three steps of +, -, x, / with small numbers, names and
objects drawn from lists). `responses` holds a trace of it in each of `STYLES`, the same answer reached by a
short way and by longer ones, so that a model fine-tuned on all of them has room to answer shorter or longer
(what a length reward acts on); `response` is the short one. The short trace:

    <think>
    Mia starts with 7 apples. Buying 5 more gives 7 + 5 = 12. Giving 3 away leaves 12 - 3 = 9.
    </think>

    Mia has \\boxed{9} apples now.

`checked` adds a check of the result worked backwards ("Check: 9 + 3 = 12, and 12 - 5 = 7."); `roundabout`
restates the question first, then the steps, then the check, then says the answer once more: about twice the
short trace's tokens.
"""

from __future__ import annotations

import random

NAMES = ["Mia", "Leo", "Ava", "Sam", "Noah", "Zoe", "Omar", "Ella", "Ravi", "Lena", "Tom", "Ivy"]
ITEMS = ["apples", "marbles", "stickers", "pencils", "cookies", "cards", "shells", "stamps"]
STYLES = ("short", "checked", "roundabout")


def _solution(problem: str, steps: str, check: str, answer: int, final: str) -> dict:
    return {"problem": problem, "steps": steps, "check": check, "answer": answer, "final": final}


def _buy_and_give(r: random.Random) -> dict:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    a, b = r.randint(3, 20), r.randint(2, 15)
    c = r.randint(1, a + b - 1)
    x = a + b - c
    return _solution(
        f"{name} has {a} {item}. {name} buys {b} more and gives {c} to a friend. How many {item} does {name} have now?",
        f"{name} starts with {a} {item}. Buying {b} more gives {a} + {b} = {a + b}. Giving {c} away leaves "
        f"{a + b} - {c} = {x}.",
        f"{x} + {c} = {a + b}, and {a + b} - {b} = {a}, the {a} {item} {name} started with.",
        x, f"{name} has ANSWER {item} now.")


def _boxes(r: random.Random) -> dict:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    a, b = r.randint(2, 9), r.randint(2, 6)
    c = r.randint(1, a * b - 1)
    x = a * b - c
    return _solution(
        f"A box holds {a} {item}. {name} fills {b} boxes and then loses {c} of the {item}. How many {item} are left?",
        f"{b} boxes of {a} {item} make {b} x {a} = {a * b}. Losing {c} leaves {a * b} - {c} = {x}.",
        f"{x} + {c} = {a * b}, and {a * b} / {b} = {a}, the {a} {item} in each box.",
        x, f"There are ANSWER {item} left.")


def _pages(r: random.Random) -> dict:
    name = r.choice(NAMES)
    a, b, c = r.randint(3, 12), r.randint(2, 7), r.randint(1, 20)
    x = a * b + c
    return _solution(
        f"{name} reads {a} pages every day for {b} days, then {c} more pages on the last evening. How many pages "
        f"does {name} read in all?",
        f"{a} pages a day for {b} days is {a} x {b} = {a * b}. Adding the {c} extra pages gives {a * b} + {c} = {x}.",
        f"{x} - {c} = {a * b}, and {a * b} / {b} = {a}, the {a} pages a day.",
        x, f"{name} reads ANSWER pages in all.")


def _bus(r: random.Random) -> dict:
    a = r.randint(10, 40)
    b, c = r.randint(1, a - 1), r.randint(1, 15)
    x = a - b + c
    return _solution(
        f"There are {a} children on a bus. At the first stop {b} get off and {c} get on. How many children are on "
        "the bus now?",
        f"After {b} get off, {a} - {b} = {a - b} remain. Then {c} get on: {a - b} + {c} = {x}.",
        f"{x} - {c} = {a - b}, and {a - b} + {b} = {a}, the {a} children at the start.",
        x, "There are ANSWER children on the bus now.")


def _money(r: random.Random) -> dict:
    name = r.choice(NAMES)
    a = r.randint(10, 50)
    b, c = r.randint(1, a - 1), r.randint(2, 20)
    x = a - b + c
    return _solution(
        f"{name} had {a} dollars, spent {b} dollars on lunch and then earned {c} dollars washing cars. How many "
        f"dollars does {name} have now?",
        f"Spending {b} of {a} dollars leaves {a} - {b} = {a - b}. Earning {c} gives {a - b} + {c} = {x}.",
        f"{x} - {c} = {a - b}, and {a - b} + {b} = {a}, the {a} dollars {name} had.",
        x, f"{name} has ANSWER dollars now.")


def _baker(r: random.Random) -> dict:
    item = r.choice(["loaves", "muffins", "pies", "rolls"])
    a = r.randint(4, 30)
    x = 3 * a
    return _solution(
        f"A baker makes {a} {item} in the morning and twice as many in the afternoon. How many {item} does the baker "
        "make that day?",
        f"Twice {a} is 2 x {a} = {2 * a} in the afternoon. In all {a} + {2 * a} = {x}.",
        f"{x} - {2 * a} = {a}, the morning's {item}, and {2 * a} is twice {a}.",
        x, f"The baker makes ANSWER {item} that day.")


def _share(r: random.Random) -> dict:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    b, q = r.randint(2, 8), r.randint(2, 9)
    c = r.randint(1, q - 1) if q > 2 else 1
    a, x = b * q, q - c
    return _solution(
        f"{name} shares {a} {item} equally among {b} friends. Each friend then gives {c} back. How many does each "
        "friend keep?",
        f"Sharing {a} among {b} gives {a} / {b} = {q} each. Giving {c} back leaves {q} - {c} = {x}.",
        f"{x} + {c} = {q}, and {q} x {b} = {a}, all the {item}.",
        x, "Each friend keeps ANSWER.")


TEMPLATES = (_buy_and_give, _boxes, _pages, _bus, _money, _baker, _share)


def trace(s: dict, style: str) -> str:
    """The R1-shaped trace of solution `s` in `style` (one of STYLES)."""
    boxed = "\\boxed{" + str(s["answer"]) + "}"
    if style == "short":
        think = s["steps"]
    elif style == "checked":
        think = f"{s['steps']} Check: {s['check']}"
    elif style == "roundabout":
        question = s["problem"].rsplit(". ", 1)[-1]
        think = (f"The question is: {question} I will work it out one step at a time. {s['steps']} Let me check "
                 f"this by going backwards: {s['check']} Everything agrees, so the answer is {s['answer']}.")
    else:
        raise ValueError(f"style {style!r} is not one of {STYLES}")
    return f"<think>\n{think}\n</think>\n\n" + s["final"].replace("ANSWER", boxed)


def word_problems(count: int, seed: int, prefix: str = "wp") -> list[dict]:
    """`count` problems (templates in turn, numbers from `seed`), each with its traces (module docstring)."""
    r = random.Random(seed)
    out = []
    for i in range(count):
        s = TEMPLATES[i % len(TEMPLATES)](r)
        responses = {style: trace(s, style) for style in STYLES}
        out.append({"id": f"{prefix}{i}", "problem": s["problem"], "answer": str(s["answer"]),
                    "response": responses["short"], "responses": responses})
    return out
