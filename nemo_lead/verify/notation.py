"""How an answer's notation is read before it is compared: which spellings are one number, which letters
are constants, what is a unit. Shared by the voting keys (`canonical.py`) and by what math-verify is given
to parse (`match.py`). Plain string and exact rational work: no sympy.

The rules, each because the other reading would grade a wrong answer right:
- digits are never joined across a space: `1 2` is not 12 and `32, 349` is not 32349. A thousands
  separator counts only in well-formed groups of three, one separator throughout: `1,000`, `1,000,000`,
  `1{,}000`, `10,\\!080`, `1 000`, `1\\,000`, optionally with decimals (`1,000.99`);
- a mixed number is read as its value: `4 4/9` and `4\\frac{4}{9}` are 40/9 (a proper positive fraction
  after a whole number), never 44/9 or a product;
- `\\mathrm{e}`, `\\mathrm{i}`, `\\mathrm{\\pi}` (and `\\text`, `\\rm`, `\\operatorname` spellings) are the
  constants e, i and pi, never units to strip;
- units are stripped from the end of an answer that keeps a number in front of them: a wrapped word
  (`\\text{ cm}`, `\\mathrm{cm}`, `\\mbox{ cm}^2`, `\\textnormal{ miles}`), a currency sign (`\\$`, `€`, `£`,
  `¥`), then trailing punctuation; a bare unit (`m^2`, `cm`, `km`) only where the gold is a plain number
  (against any other gold `2m` may be 2 times m).
"""

from __future__ import annotations

import re
from fractions import Fraction

# Spacing commands: `\\!` (a negative thin space) joins, the others separate like a space. `\\\\` (a
# line break, as in matrices) is matched first so that its second backslash is not read as `\\ `.
_SPACING = re.compile(r"\\\\|\\!\s*|\\quad|\\qquad|\\[,;: ]|~|\{,\}")
_GROUPS = re.compile(r"^([+-]?)([1-9]\d{0,2})((?P<sep>,| )\d{3}(?:(?P=sep)\d{3})*)(\.\d+)?$")
_MIXED = re.compile(
    r"^([+-]?)(\d+)(?:\s+(\d+)/(\d+)|\s*\\[dt]?frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d)))$")
_CONSTANT = re.compile(
    r"\{\s*\\rm\s+(e|i|\\pi|π)\s*\}|\\rm\s+(e|i)\b"
    r"|\\(?:mathrm|text|textrm|textnormal|operatorname|mathit)\s*\{\s*(e|i|\\pi|π)\s*\}")
_WRAPPED_UNIT = re.compile(
    r"\s*\\(?:text|textnormal|textrm|textbf|mathrm|mbox|mathbf|operatorname)\s*\{\s*[A-Za-z][A-Za-z. ]*\}"
    r"(?:\s*\^\s*(?:\{\s*[23]\s*\}|[23]))?\s*$")
_CURRENCY = re.compile(r"\\\$|\$|€|£|¥|\\euro\b|\\pounds\b|\\yen\b")
_BARE_UNIT = re.compile(
    r"(?<=[\d}.)\s])\s*(?:mm|cm|km|m|kg|mg|g|ml|mL|l|L|s|sec|min|h|hr|hrs|ft|in|mi|yd|lb|lbs|oz|m/s|km/h|mph)"
    r"(?:\s*\^\s*(?:\{\s*[23]\s*\}|[23])|²|³)?\s*$")
_DIGIT_GAP = re.compile(r"(?<=\d)\s+(?=\d)")
_PUNCT = ".,;:!"


def spaces_as_blanks(s: str) -> str:
    """`\\!` (with the spaces after it: `32,\\! 349` is 32349) and `{,}` closed up (`{,}` becomes `,`), the
    other spacing commands as one space each."""
    def _one(m: re.Match) -> str:
        tok = m.group()
        return tok if tok == "\\\\" else "," if tok == "{,}" else "" if tok.startswith("\\!") else " "
    return _SPACING.sub(_one, s)


def join_digit_groups(s: str) -> str:
    """`s` without its thousands separators when the whole of `s` is one number in well-formed groups
    (`1,000` -> `1000`, `1 000 000` -> `1000000`); anything else unchanged (`32, 349`, `1,00`, `1 2`)."""
    m = _GROUPS.match(s.strip())
    if not m:
        return s
    return m.group(1) + m.group(2) + m.group(3).replace(m.group("sep"), "") + (m.group(5) or "")


def mixed_number(s: str) -> Fraction | None:
    """The value of a mixed number (`4 4/9`, `-2\\frac{1}{3}`: whole number, then a proper positive
    fraction), or None when `s` is not one."""
    m = _MIXED.match(s.strip())
    if not m:
        return None
    whole = int(m.group(2))
    num = int(m.group(3) or m.group(5) or m.group(6))
    den = int(m.group(4) or m.group(7) or m.group(8))
    if not 0 < num < den:
        return None
    value = whole + Fraction(num, den)
    return -value if m.group(1) == "-" else value


def has_digit_gap(s: str) -> bool:
    """True when two digits stand apart with only a space between them (`1 2`, `4 4/9`)."""
    return _DIGIT_GAP.search(s) is not None


def read_constants(s: str) -> str:
    """`\\mathrm{e}` -> `{e}`, `\\mathrm{i}` -> `{i}`, `\\mathrm{\\pi}` -> `{\\pi}` (and the other spellings of
    the module docstring), so that a parser reads the constant and no unit rule strips it."""
    def _one(m: re.Match) -> str:
        name = next(g for g in m.groups() if g)
        return "{\\pi}" if name in ("\\pi", "π") else "{" + name + "}"
    return _CONSTANT.sub(_one, s)


def strip_units(s: str, bare: bool = False) -> str:
    """`s` without trailing units, currency signs and punctuation (the module docstring), as long as
    something that holds a digit is left; `bare`: bare units (`m^2`, `cm`) too."""
    out = s.strip()
    while True:
        before = out
        out = out.rstrip(_PUNCT).rstrip()
        cut = _CURRENCY.sub("", out).strip()
        for pattern in (_WRAPPED_UNIT, _BARE_UNIT) if bare else (_WRAPPED_UNIT,):
            cut = pattern.sub("", cut).rstrip()
        if any(ch.isdigit() for ch in cut):
            out = cut
        if out == before:
            return out


_NUMBER = re.compile(r"^[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:/\d+)?$")


def is_plain_number(s: str) -> bool:
    """True for an integer, decimal or `a/b` once units, separators and spacing are read."""
    t = join_digit_groups(strip_units(spaces_as_blanks(s).strip().strip("$").strip()))
    return bool(_NUMBER.match(t.strip())) or mixed_number(t) is not None


def split_top_level(s: str) -> list[str]:
    """`s` split at the commas outside any brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(s):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(s[start:i])
            start = i + 1
    parts.append(s[start:])
    return parts


def answer_parts(s: str) -> int:
    """How many answers `s` lists: its top-level comma-separated parts (of a set's elements, for
    `\\{1,2,3\\}` or `{1,2,3}`), once units and thousands separators are read (`\\$1,000` is one)."""
    t = join_digit_groups(strip_units(spaces_as_blanks(s).strip().strip("$").strip()))
    if t.startswith("\\{") and t.endswith("\\}"):
        t = t[2:-2]
    elif t.startswith("{") and braced_whole(t):
        t = t[1:-1]
    return len([p for p in split_top_level(t) if p.strip()])


def braced_whole(t: str) -> bool:
    """True when `t` is one `{...}` group (its first brace closes at its end)."""
    depth = 0
    for i, ch in enumerate(t):
        depth += ch == "{"
        depth -= ch == "}"
        if depth == 0:
            return i == len(t) - 1
    return False
