"""The real-model study's statistics (bench/study_stats.py) on numbers worked out by hand: per-problem pass rates
and lengths from an eval folder, the paired difference and its percentile-bootstrap interval, the per-problem log
ratio of lengths; and the study's trace styles (bench/word_problems.py): the same answer, short and long."""

import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import study_stats as st  # noqa: E402
from word_problems import STYLES, word_problems  # noqa: E402


def _eval_folder(tmp_path, name, rows):
    folder = tmp_path / name
    folder.mkdir()
    lines = [{"dataset": "d", "problem_id": pid, "sample": s, "correct": c, "tokens": t}
             for pid, samples in rows.items() for s, (c, t) in enumerate(samples)]
    (folder / "samples.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return folder


def test_pass_rates_and_lengths_per_problem(tmp_path):
    folder = _eval_folder(tmp_path, "a", {"p1": [(True, 10), (False, 30)], "p2": [(True, 4), (True, 8)]})
    probs = st.per_problem(folder)
    assert st.pass_rates(probs) == {"d/p1": 0.5, "d/p2": 1.0}
    assert st.mean_lengths(probs) == {"d/p1": 20.0, "d/p2": 6.0}


def test_paired_difference_and_its_interval():
    a = {"x": 1.0, "y": 0.5, "z": 0.25, "w": 0.0}
    b = {"x": 0.5, "y": 0.5, "z": 0.0, "w": 0.0}
    d = st.paired(a, b)
    assert d.estimate == pytest.approx((0.5 + 0 + 0.25 + 0) / 4)
    # every resample's mean lies between the smallest and the largest difference, and the interval holds the mean
    assert 0.0 <= d.low <= d.estimate <= d.high <= 0.5 and d.excludes_zero() is False
    same = st.paired(b, b)
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)
    shifted = st.paired({k: v + 0.1 for k, v in b.items()}, b)  # every problem better by 0.1: no spread
    assert shifted.low == pytest.approx(0.1) and shifted.high == pytest.approx(0.1) and shifted.excludes_zero()
    with pytest.raises(ValueError, match="different problems"):
        st.paired(a, {"x": 1.0})


def test_bootstrap_interval_is_the_normal_one_for_many_values():
    values = [float(i % 7) for i in range(700)]  # mean 3, population sd 2
    i = st.bootstrap_mean(values)
    half = 1.96 * 2.0 / math.sqrt(700)
    assert i.estimate == pytest.approx(3.0)
    assert i.low == pytest.approx(3.0 - half, abs=0.02) and i.high == pytest.approx(3.0 + half, abs=0.02)
    assert st.bootstrap_mean(values) == i  # a fixed seed: the same interval on a rerun


def test_lengths_compare_as_a_per_problem_log_ratio():
    short = {"p": 50.0, "q": 200.0}
    long_ = {"p": 100.0, "q": 250.0}
    r = st.log_ratio(short, long_)
    assert r.estimate == pytest.approx((math.log(0.5) + math.log(0.8)) / 2)
    change = st.as_percent_change(r)
    assert change.estimate == pytest.approx(math.sqrt(0.5 * 0.8) - 1)  # the geometric mean ratio, minus 1
    assert st.log_ratio({"p": 0.0, "q": 10.0}, {"p": 5.0, "q": 10.0}).estimate == 0.0  # an empty side is left out


def test_traces_reach_the_same_answer_in_three_lengths():
    for p in word_problems(14, 5):
        boxed = "\\boxed{" + p["answer"] + "}"
        texts = [p["responses"][s] for s in STYLES]
        assert all(t.startswith("<think>\n") and "\n</think>\n\n" in t and t.endswith(".") and boxed in t for t in texts)
        assert len(texts[0]) < len(texts[1]) < len(texts[2]) and p["response"] == texts[0]
        assert texts[1].startswith(texts[0].split("\n</think>")[0])  # checked = short + a check
