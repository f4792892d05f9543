"""The authors' repetition rule: runs of >= 10 identical n-word chunks (n <= 30), or 120+ char tokens."""

import random
import time

import pytest

from nemo_lead.verify import find_repetition


def _prose(n_words: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    vocab = ["the", "so", "we", "get", "=", "+", "then", "x", "y", "Let", "check:", "wait,", r"\frac{1}{2}", "2", "3"]
    vocab += [f"term{i}" for i in range(400)]
    return " ".join(rng.choice(vocab) for _ in range(n_words))


def test_wait_wait_wait_is_repetition():
    found = find_repetition("Hmm, " + "wait, " * 50 + "so x = 3.")
    assert found is not None and "'wait,'" in found and "1-word" in found


def test_nine_repeats_are_not_ten():
    assert find_repetition("a b " + "so we get " * 9 + "done") is None
    assert find_repetition("a b " + "so we get " * 10 + "done") is not None


def test_chunk_up_to_max_n_words():
    chunk30 = " ".join(f"w{i}" for i in range(30)) + " "
    chunk31 = " ".join(f"w{i}" for i in range(31)) + " "
    assert "30-word" in find_repetition(chunk30 * 10)
    assert find_repetition(chunk31 * 10) is None  # longer than max_n: out of the rule
    assert find_repetition(chunk31 * 10, max_n=31) is not None


def test_run_counts_wherever_it_starts():
    # 10 repeats of a 7-word chunk starting at word 3: the authors' grid (chunks at multiples of 7) sees 9
    text = "a b c " + "one two three four five six seven " * 10 + "end"
    assert find_repetition(text) is not None


def test_grid_keeps_the_authors_chunk_grid():
    run = "one two three four five six seven " * 10
    assert find_repetition("a b c " + run + "end", grid=True) is None  # starts at word 3: 9 grid chunks
    found = find_repetition("a b c d e f g " + run + "end", grid=True)  # starts at word 7 = 1 x 7
    assert found is not None and "7-word" in found and "from word 7" in found
    assert find_repetition("x " + "wait, " * 10, grid=True) is not None  # n = 1: every start is on the grid
    assert "130-character" in find_repetition("ok " + "ab" * 65, grid=True)


def test_grid_flags_a_subset_of_the_default_rule():
    rng = random.Random(3)
    for _ in range(300):
        chunk = " ".join(rng.choice("abc") for _ in range(rng.randint(1, 4)))
        text = " ".join(rng.choice("abcd") for _ in range(rng.randint(0, 8))) + " " + (chunk + " ") * rng.randint(8, 12)
        if find_repetition(text, grid=True) is not None:
            assert find_repetition(text) is not None, text


def test_words_are_whitespace_separated_and_case_sensitive():
    assert find_repetition("Wait wait " * 5 + "x") is None  # "Wait wait" repeats 5 times only
    assert find_repetition("Wait  wait\n" * 10) is not None  # any whitespace separates words


def test_long_token():
    assert "130-character" in find_repetition("ok " + "ab" * 65 + " end")
    assert find_repetition("ok " + "a" * 119 + " end") is None
    assert find_repetition("ok " + "a" * 200, max_token_chars=0) is None


def test_table_of_numbers_is_not_repetition():
    rows = [" | ".join(str(i * j) for j in range(1, 13)) for i in range(1, 200)]
    table = "\n".join(rows)
    assert len(table) > 10_000
    assert find_repetition(table) is None
    assert find_repetition(" ".join(str(n) for n in range(5000))) is None


def test_normal_long_response_is_not_repetition_and_is_fast():
    text = _prose(10_000)
    assert len(text) > 45_000
    assert find_repetition(text) is None
    t = time.perf_counter()
    for _ in range(5):
        find_repetition(text)
    assert (time.perf_counter() - t) / 5 < 0.1  # ~5 ms on these machines; generous bound for load


def test_repetition_at_the_end_of_a_long_response():
    text = _prose(10_000) + " " + "I think the answer is 5. " * 12
    found = find_repetition(text)
    assert found is not None and "6-word" in found


def test_empty_and_bad_arguments():
    assert find_repetition("") is None
    assert find_repetition("one") is None
    with pytest.raises(ValueError, match="min_run"):
        find_repetition("x", min_run=1)
