"""Arithmetic word problems in plain English with integer answers, and R1-style traces that solve them: the
task of the real-model study (bench/real_model.py).

    problems = word_problems(count, seed)     # [{"id", "problem", "answer", "response"}], answers >= 0

Each problem is one of a few templates (two or three steps of +, -, x, / with small numbers, names and
objects drawn from lists); its `response` is the R1-shaped trace a model is fine-tuned on:

    <think>
    Mia starts with 7 apples. Buying 5 more gives 7 + 5 = 12. Giving 3 away leaves 12 - 3 = 9.
    </think>

    Mia has \\boxed{9} apples now.
"""

from __future__ import annotations

import random

NAMES = ["Mia", "Leo", "Ava", "Sam", "Noah", "Zoe", "Omar", "Ella", "Ravi", "Lena", "Tom", "Ivy"]
ITEMS = ["apples", "marbles", "stickers", "pencils", "cookies", "cards", "shells", "stamps"]


def _trace(steps: str, answer: int, final: str) -> str:
    boxed = "\\boxed{" + str(answer) + "}"
    return f"<think>\n{steps}\n</think>\n\n" + final.replace("ANSWER", boxed)


def _buy_and_give(r: random.Random) -> tuple[str, str, int]:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    a, b = r.randint(3, 20), r.randint(2, 15)
    c = r.randint(1, a + b - 1)
    x = a + b - c
    return (f"{name} has {a} {item}. {name} buys {b} more and gives {c} to a friend. How many {item} does "
            f"{name} have now?",
            _trace(f"{name} starts with {a} {item}. Buying {b} more gives {a} + {b} = {a + b}. Giving {c} away "
                   f"leaves {a + b} - {c} = {x}.", x, f"{name} has ANSWER {item} now."), x)


def _boxes(r: random.Random) -> tuple[str, str, int]:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    a, b = r.randint(2, 9), r.randint(2, 6)
    c = r.randint(1, a * b - 1)
    x = a * b - c
    return (f"A box holds {a} {item}. {name} fills {b} boxes and then loses {c} of the {item}. How many {item} "
            "are left?",
            _trace(f"{b} boxes of {a} {item} make {b} x {a} = {a * b}. Losing {c} leaves {a * b} - {c} = {x}.",
                   x, f"There are ANSWER {item} left."), x)


def _pages(r: random.Random) -> tuple[str, str, int]:
    name = r.choice(NAMES)
    a, b, c = r.randint(3, 12), r.randint(2, 7), r.randint(1, 20)
    x = a * b + c
    return (f"{name} reads {a} pages every day for {b} days, then {c} more pages on the last evening. How many "
            f"pages does {name} read in all?",
            _trace(f"{a} pages a day for {b} days is {a} x {b} = {a * b}. Adding the {c} extra pages gives "
                   f"{a * b} + {c} = {x}.", x, f"{name} reads ANSWER pages in all."), x)


def _bus(r: random.Random) -> tuple[str, str, int]:
    a = r.randint(10, 40)
    b, c = r.randint(1, a - 1), r.randint(1, 15)
    x = a - b + c
    return (f"There are {a} children on a bus. At the first stop {b} get off and {c} get on. How many children "
            "are on the bus now?",
            _trace(f"After {b} get off, {a} - {b} = {a - b} remain. Then {c} get on: {a - b} + {c} = {x}.",
                   x, "There are ANSWER children on the bus now."), x)


def _money(r: random.Random) -> tuple[str, str, int]:
    name = r.choice(NAMES)
    a = r.randint(10, 50)
    b, c = r.randint(1, a - 1), r.randint(2, 20)
    x = a - b + c
    return (f"{name} had {a} dollars, spent {b} dollars on lunch and then earned {c} dollars washing cars. How "
            f"many dollars does {name} have now?",
            _trace(f"Spending {b} of {a} dollars leaves {a} - {b} = {a - b}. Earning {c} gives {a - b} + {c} = {x}.",
                   x, f"{name} has ANSWER dollars now."), x)


def _baker(r: random.Random) -> tuple[str, str, int]:
    item = r.choice(["loaves", "muffins", "pies", "rolls"])
    a = r.randint(4, 30)
    x = 3 * a
    return (f"A baker makes {a} {item} in the morning and twice as many in the afternoon. How many {item} does "
            "the baker make that day?",
            _trace(f"Twice {a} is 2 x {a} = {2 * a} in the afternoon. In all {a} + {2 * a} = {x}.",
                   x, f"The baker makes ANSWER {item} that day."), x)


def _share(r: random.Random) -> tuple[str, str, int]:
    name, item = r.choice(NAMES), r.choice(ITEMS)
    b, q = r.randint(2, 8), r.randint(2, 9)
    c = r.randint(1, q - 1) if q > 2 else 1
    a, x = b * q, q - c
    return (f"{name} shares {a} {item} equally among {b} friends. Each friend then gives {c} back. How many "
            "does each friend keep?",
            _trace(f"Sharing {a} among {b} gives {a} / {b} = {q} each. Giving {c} back leaves {q} - {c} = {x}.",
                   x, "Each friend keeps ANSWER."), x)


TEMPLATES = (_buy_and_give, _boxes, _pages, _bus, _money, _baker, _share)


def word_problems(count: int, seed: int, prefix: str = "wp") -> list[dict]:
    """`count` problems (templates in turn, numbers from `seed`), each with its trace as `response`."""
    r = random.Random(seed)
    out = []
    for i in range(count):
        problem, response, answer = TEMPLATES[i % len(TEMPLATES)](r)
        out.append({"id": f"{prefix}{i}", "problem": problem, "answer": str(answer), "response": response})
    return out
