"""Curriculum filters of the GRPO-LEAD recipes, as plain functions over `Problem` lists.

    stage 1 (paper)           DeepScaleR difficulty >= 2.5 (about 9,000 problems)
    stage 1 (authors' code)   difficulty >= 3.5 and an answer "sympy can evaluate"
                              (`deepscaler/data/preprocess/data_preprocess.ipynb`)
    stage 2                   pass_rate <= 0.75 (the stage-1 model's 16-sample accuracy; the shipped
                              `lead_stage2` set holds the unfiltered rates, up to 1.0), or a stage-1 run's
                              rollout accuracy <= 0.75 (`nemo_lead.pipeline.select`)

The recipes' `select` stages apply them (`difficulty: ">= 2.5"`, `accuracy: "<= 0.75"`).

A problem without the field a filter reads is an error, not a silent drop: filtering a set that has no
difficulty ratings is a configuration mistake.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence

from nemo_lead.data.problems import Problem
from nemo_lead.data.readers import DataError

STAGE1_DIFFICULTY = ">= 2.5"  # the paper's stage-1 set (a `select` stage's `difficulty:`)
STAGE1_REFERENCE_DIFFICULTY = ">= 3.5"  # the authors' preprocessing notebook
STAGE2_PASS_RATE = "<= 0.75"  # the paper's stage-2 set (`accuracy:` over a stage-1 run, or `pass_rate`)
BOUND_RE = re.compile(r"^\s*(<=|>=|<|>|==)\s*(-?[0-9.]+(?:[eE][-+]?[0-9]+)?)\s*$")


def parse_bound(text: str, key: str = "bound") -> Callable[[float], bool]:
    """">= 2.5" -> a predicate (<, <=, >, >=, ==); a ValueError naming `key` for anything else."""
    m = BOUND_RE.match(str(text))
    if not m:
        raise ValueError(f"{key}={text!r} must be a comparison like '>= 2.5' or '<= 0.75'")
    op, value = m.group(1), float(m.group(2))
    return {"<": lambda x: x < value, "<=": lambda x: x <= value, ">": lambda x: x > value,
            ">=": lambda x: x >= value, "==": lambda x: x == value}[op]


def _number(p: Problem, key: str) -> float:
    value = p.meta.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        found = "missing" if value is None else f"not a number ({value!r})"
        raise DataError(f"problem {p.id!r}: field {key!r} is {found}")
    return float(value)


def problem_key(text: str) -> str:
    """A problem's text for finding the same problem under another id: NFKC, lower case, no whitespace
    (the authors' stage-2 file writes one problem as `$ABC$` in one row and `$A B C$` in another)."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text)).lower()


def filter_by_bound(problems: Sequence[Problem], key: str, bound: str) -> list[Problem]:
    """Problems whose meta[key] satisfies `bound` (">= 2.5", "<= 0.75", ...): the `select` stage's
    `difficulty:` filter, and the paper's curricula (`STAGE1_DIFFICULTY` on `difficulty`, `STAGE2_PASS_RATE`
    on `pass_rate`)."""
    keep = parse_bound(bound, key)
    return [p for p in problems if keep(_number(p, key))]


# ----------------------------------------------------------------------------- "sympy can evaluate"
# The authors keep a problem when DeepScaleR's `should_allow_eval(_normalize(answer))` holds: after
# normalisation the answer has at most two distinct letters (not counting "sqrt" and "frac") and no
# exponent that could make sympy hang ("^{", "^(", "^12", "2^3^4"). Their normaliser turns LaTeX into
# text with pylatexenc; this is a dependency-free rendition of the same rule with a small LaTeX table.
# Rare macros may count differently from pylatexenc; the common answer forms agree (see the tests).
_UNITS = ("degree", "cm", "centimeter", "meter", "mile", "second", "minute", "hour", "day", "week",
          "month", "year", "foot", "feet", "inch", "yard")
_GREEK = ("alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta",
          "iota", "kappa", "lambda", "mu", "nu", "xi", "rho", "sigma", "tau", "upsilon", "phi", "varphi",
          "chi", "psi", "omega", "Gamma", "Delta", "Theta", "Lambda", "Xi", "Sigma", "Phi", "Psi", "Omega")
_MACRO_TEXT = {"pi": "pi", "infty": "inf", "cup": "U", "sqrt": "sqrt"}
_TEXT_WRAPPERS = re.compile(r"\\(?:text|textbf|textit|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_ENVIRONMENT = re.compile(r"\\(?:begin|end)\s*\{[^{}]*\}")
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_FRAC_DIGITS = re.compile(r"\\[dt]?frac\s*(\d)(\d)")
_SQRT = re.compile(r"\\sqrt\s*\{([^{}]*)\}")
_MACRO = re.compile(r"\\([A-Za-z]+)")
_BAD_SUBSTRINGS = ("^{", "^(")
_BAD_REGEXES = (re.compile(r"\^[0-9]+\^"), re.compile(r"\^[0-9][0-9]+"))


def _normalize_for_eval(answer: str) -> str:
    expr = answer.strip()
    m = re.fullmatch(r"\\text\{(.+?)\}", expr)
    if m:
        expr = m.group(1)
    expr = expr.replace("\\%", "").replace("\\$", "").replace("$", "").replace("%", "")
    expr = expr.replace(" or ", " , ").replace(" and ", " , ")
    for word, power in (("million", "6"), ("billion", "9"), ("trillion", "12")):
        expr = expr.replace(word, f"*10^{power}")
    for unit in _UNITS:
        expr = re.sub(rf"{unit}(es)?(s)? *(\^[0-9]+)?", "", expr)
    expr = re.sub(r"\^ *\\circ", "", expr)
    if "\\" in expr:  # LaTeX to text, innermost groups first, as pylatexenc renders it
        expr = _ENVIRONMENT.sub(" ", expr)
        previous = None
        while previous != expr:
            previous = expr
            expr = _TEXT_WRAPPERS.sub(r"\1", expr)
            expr = _FRAC.sub(r"(\1)/(\2)", expr)
            expr = _FRAC_DIGITS.sub(r"\1/\2", expr)
            expr = _SQRT.sub(r"sqrt(\1)", expr)

        def macro(m: re.Match) -> str:
            name = m.group(1)
            if name in _MACRO_TEXT:
                return _MACRO_TEXT[name]
            if name in _GREEK:  # one letter each, as pylatexenc renders them (alpha -> α)
                return chr(0x3B1 + _GREEK.index(name))
            return " "  # \frac, \left, \cdot, \le ...: structure or symbols, no letters

        expr = _MACRO.sub(macro, expr)
    return expr.replace(" ", "").replace("{", "").replace("}", "").lower()


def answer_allows_eval(answer: str) -> bool:
    """The authors' "sympy can evaluate this answer" test (see the comment above)."""
    expr = _normalize_for_eval(answer)
    letters = {c for c in expr.replace("sqrt", "").replace("frac", "") if c.isalpha()}
    if len(letters) > 2:
        return False
    if any(s in expr for s in _BAD_SUBSTRINGS):
        return False
    return not any(r.search(expr) for r in _BAD_REGEXES)


def filter_evaluable_answers(problems: Sequence[Problem]) -> list[Problem]:
    """Problems whose answer passes `answer_allows_eval` (the authors' stage-1 answer filter)."""
    return [p for p in problems if answer_allows_eval(p.answer)]
