"""Degenerate repetition, the stage-2 penalty: the GRPO-LEAD authors' rule, made fast.

The rule (their `deepscaler_reward_fn`): words are whitespace-separated tokens (`str.split()`, case and
punctuation kept); a response is repetitive when some chunk of n words (n = 1..30) occurs `min_run` = 10 or
more times in a row, or when one whitespace-free token is 120 characters or longer.

Where a run may start: the authors cut the word list into chunks at multiples of n only, so whether a run
of exactly 10 repeats is seen depends on where it starts (a run starting off the grid shows 9 aligned
chunks). By default a run counts wherever it starts, so this flags everything theirs flags, plus those
off-grid runs; `grid=True` keeps their chunk grid (the `reference_code` presets, which also check the
prompt's words with the response's, as their code decodes the two together).

Speed: each distinct word becomes one character, and one regular expression, `(.{1,30})\\1{9,}`, finds the
run in C. A 14k-token (~50k-character) response takes a few milliseconds.
"""

from __future__ import annotations

import re
from functools import lru_cache
from itertools import groupby

# Words are coded as characters, so one window may hold at most 0x110000 distinct words.
_WINDOW = 1_000_000


@lru_cache(maxsize=16)
def _run_pattern(min_run: int, max_n: int) -> re.Pattern[str]:
    return re.compile(rf"(.{{1,{max_n}}})\1{{{min_run - 1},}}", re.DOTALL)


def _primitive_period(chunk: str) -> int:
    for p in range(1, len(chunk)):
        if len(chunk) % p == 0 and chunk == chunk[:p] * (len(chunk) // p):
            return p
    return len(chunk)


def _shorten(s: str, limit: int = 80) -> str:
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _grid_run(words: list[str], min_run: int, max_n: int) -> tuple[int, int, int] | None:
    """(n, first word, repeats) of a run of >= `min_run` equal consecutive n-word chunks cut at multiples of
    n from word 0 (whole chunks only), for the smallest such n; None if there is none. A Python loop over
    every n, much slower than the regular expression: called only once that has found a run somewhere."""
    for n in range(1, max_n + 1):
        chunks = [tuple(words[i : i + n]) for i in range(0, len(words) - n + 1, n)]
        start = 0
        for _, same in groupby(chunks):
            repeats = sum(1 for _ in same)
            if repeats >= min_run:
                return n, start * n, repeats
            start += repeats
    return None


def find_repetition(text: str, min_run: int = 10, max_n: int = 30, max_token_chars: int = 120,
                    grid: bool = False) -> str | None:
    """Describe the first repetition found in `text` (see the module docstring), or None if there is none.

    min_run: how many identical consecutive chunks make a run (>= 2); max_n: the longest chunk, in words;
    max_token_chars: a whitespace-free token at least this long counts as repetition (0 disables);
    grid: chunks only at multiples of n from the first word (the authors' rule) instead of anywhere.
    """
    if min_run < 2 or max_n < 1 or max_token_chars < 0:
        raise ValueError(
            f"find_repetition needs min_run >= 2, max_n >= 1, max_token_chars >= 0; "
            f"got min_run={min_run}, max_n={max_n}, max_token_chars={max_token_chars}"
        )
    words = text.split()
    if max_token_chars and words:
        longest = max(words, key=len)
        if len(longest) >= max_token_chars:
            return f"a {len(longest)}-character token without whitespace: {_shorten(longest)!r}"
    if len(words) < min_run:
        return None
    pattern = _run_pattern(min_run, max_n)
    overlap = min_run * max_n  # a run is at most this long before it is certain; windows overlap by it
    for offset in range(0, len(words), _WINDOW):
        window = words[offset : offset + _WINDOW + overlap]
        code = {w: chr(i) for i, w in enumerate(dict.fromkeys(window))}
        m = pattern.search("".join(map(code.__getitem__, window)))
        if m is not None and grid:  # a grid run is also a run somewhere: look for it only now
            found = _grid_run(words, min_run, max_n)
            if found is None:
                return None
            n, start, repeats = found
            chunk = " ".join(words[start : start + n])
            return f"{repeats} consecutive repeats of the {n}-word chunk {_shorten(chunk)!r} from word {start} (on the grid)"
        if m is not None:
            n = _primitive_period(m.group(1))  # the greedy match may be k copies of a shorter chunk
            start = offset + m.start()
            chunk = " ".join(words[start : start + n])
            repeats = (m.end() - m.start()) // n
            return f"{repeats} consecutive repeats of the {n}-word chunk {_shorten(chunk)!r} from word {start}"
    return None
