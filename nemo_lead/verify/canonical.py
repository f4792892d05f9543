"""One string per answer for majority voting (Cons@k): equal strings mean "the same answer".

Voting runs in the evaluation process over thousands of answers, so this is plain string and exact
rational arithmetic (`fractions.Fraction`), never sympy: it cannot hang and needs no timeout.

What it makes agree:
- numbers by exact value: "025" = "25" = "25.0", "\\frac{1}{2}" = "\\dfrac12" = "0.5" = "1/2" (-> "1/2"),
  thousands separators in well-formed groups ("1,000", "10,\\!080", "1 000"), mixed numbers
  ("4 4/9" = "4\\frac{4}{9}" = "40/9"), a leading "+" (`notation.py`: digits are never joined across a
  space, so "1 2" and "32, 349" stay lists);
- spacing and LaTeX decoration: `$`, `\\left`/`\\right`, spaces (except between two digits), thin
  spaces, `\\text{}`/`\\mathrm{}` wrappers, degree marks, `\\%`, `\\$` and other currency signs, a
  trailing period, an enclosing `\\boxed{}`;
- "x = 2" and "2" (a single-letter assignment), a multiple-choice label and its value
  ("\\textbf{(C)}\\ 70" -> "70"; a bare label "(C)" -> "C");
- unicode minus, pi, infinity, ... and their LaTeX;
- sets written in any order: "\\{3,2,1\\}" = "\\{1,2,3\\}".

What it does not attempt: symbolic equality (`2\\sqrt{2}` vs `\\sqrt{8}` stay different strings). For
AIME-style integer answers use `kind="integer"`, which returns the integer or None.
"""

from __future__ import annotations

import re
from fractions import Fraction

from nemo_lead.verify.extract import braced_group, split_choice_label
from nemo_lead.verify.notation import join_digit_groups, mixed_number, spaces_as_blanks, split_top_level

KINDS = ("auto", "integer")

_DROP = re.compile(r"\\left|\\right|\\displaystyle|\^\{\\circ\}|\^\\circ|\\circ|\\degree|\\%|%|\\\$|€|£|¥")
_BLANKS = re.compile(r"\s+")
_TEXT_MACRO = re.compile(r"\\(?:text|textbf|textrm|mathrm|mathbf|mbox|operatorname)\s*\{([^{}]*)\}")
_ASSIGN = re.compile(r"^[A-Za-z]\s*=(?!=)\s*(.+)$", re.DOTALL)
_DECIMAL = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)$")
_FRAC = re.compile(r"^([+-]?)\\frac(?:\{([^{}]+)\}|(\d))(?:\{([^{}]+)\}|(\d))$")
_SLASH = re.compile(r"^([+-]?[\d.]+)/([+-]?[\d.]+)$")
_MAX_DIGITS = 4000  # Python refuses int() of longer digit strings by default

# Unicode math that models write in place of LaTeX.
_UNICODE = {"\u2212": "-", "\u2013": "-", "\u00d7": "\\times ", "\u00f7": "\\div ", "\u03c0": "\\pi ",
            "\u221e": "\\infty ", "\u221a": "\\sqrt ", "\u2264": "\\le ", "\u2265": "\\ge ",
            "\u00b7": "\\cdot ", "\u00b0": "^\\circ ", "\u00bd": "\\frac{1}{2}"}
_UNICODE_RE = re.compile("|".join(_UNICODE))


def latex_from_unicode(s: str) -> str:
    """Replace the unicode math symbols models commonly write (minus sign, pi, infinity, ...) by LaTeX."""
    return _UNICODE_RE.sub(lambda m: _UNICODE[m.group()], s)


def _unwrap_box(s: str) -> str:
    for macro in ("\\boxed", "\\fbox"):
        if s.startswith(macro + "{"):
            inner = braced_group(s, len(macro))
            if inner is not None and len(inner) == len(s) - len(macro) - 2:
                return inner
    return s


def _normalise(ans: str) -> str:
    s = latex_from_unicode(ans).strip().strip("$").strip()
    s = _unwrap_box(s)
    label, rest = split_choice_label(s)
    if label is not None:
        s = rest or label
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _TEXT_MACRO.sub(r"\1", s)
    s = _DROP.sub("", spaces_as_blanks(s)).strip().rstrip(".").strip()
    m = _ASSIGN.match(s)
    if m:
        s = m.group(1)
    return _close_up(join_digit_groups(s))


def _close_up(s: str) -> str:
    """`s` without spaces, except one between two digits (which stay two numbers)."""
    def _one(m: re.Match) -> str:
        i, j = m.start(), m.end()
        return " " if 0 < i and j < len(s) and s[i - 1].isdigit() and s[j].isdigit() else ""
    return _BLANKS.sub(_one, s.strip())


def _plain_number(s: str) -> Fraction | None:
    if len(s) > _MAX_DIGITS or not _DECIMAL.match(s):
        return None
    return Fraction(s)


def _as_number(s: str) -> Fraction | None:
    """Exact value of an integer, decimal, `a/b` or `\\frac{a}{b}` written with plain numbers."""
    value = _plain_number(s)
    if value is None:
        value = mixed_number(s)
    if value is not None:
        return value
    m = _FRAC.match(s)
    if m:
        num, den = _plain_number(m.group(2) or m.group(3)), _plain_number(m.group(4) or m.group(5))
        sign = -1 if m.group(1) == "-" else 1
    else:
        m = _SLASH.match(s)
        if not m:
            return None
        num, den, sign = _plain_number(m.group(1)), _plain_number(m.group(2)), 1
    if num is None or den is None or den == 0:
        return None
    return sign * num / den


def _format(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def canonical_answer(ans: str | None, kind: str = "auto") -> str | None:
    """Canonical voting key of an extracted answer, or None when it cannot vote (empty, or not an integer
    under `kind="integer"`). See the module docstring for what is made equal."""
    if kind not in KINDS:
        raise ValueError(f"canonical_answer kind must be one of {KINDS}, got {kind!r}")
    if ans is None:
        return None
    s = _normalise(ans)
    if not s:
        return None
    value = _as_number(s)
    if kind == "integer":
        return str(value.numerator) if value is not None and value.denominator == 1 else None
    if value is not None:
        return _format(value)
    if s.startswith("\\{") and s.endswith("\\}") and len(s) > 4:
        items = [canonical_answer(x) for x in split_top_level(s[2:-2])]
        if all(items):
            return "\\{" + ",".join(sorted(set(items))) + "\\}"
    return s
