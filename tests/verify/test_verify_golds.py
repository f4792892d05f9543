"""The shipped problem sets' golds graded against themselves, as a model would box them: every one correct.

All 4,013 golds (aime24, aime25, math500 and the stage-2 training set), read in this process the way a
grading worker reads them (`final_answer` of the response, `answers_match` under `time_limit`)."""

import pytest

from nemo_lead.data.problems import BUILTIN_DATASETS, load_problems
from nemo_lead.verify.extract import final_answer
from nemo_lead.verify.match import answers_match, time_limit, warm_up
from nemo_lead.verify.notation import answer_parts, split_top_level


@pytest.fixture(scope="module")
def golds():
    warm_up()
    return {name: [p.answer for p in load_problems(name)] for name in BUILTIN_DATASETS}


def _correct(response: str, gold: str) -> bool:
    answer = final_answer(response, gold)
    with time_limit(30.0):  # a guard against a hang, not a speed check (CI machines may be loaded)
        return answer is not None and answers_match(answer, gold)


def test_every_gold_is_its_own_answer(golds):
    assert {k: len(v) for k, v in golds.items()} == {"aime24": 30, "aime25": 30, "math500": 500, "lead_stage2": 3453}
    wrong = [(name, gold) for name, answers in golds.items() for gold in answers
             if not _correct(f"<think>so</think> The answer is $\\boxed{{{gold}}}$.", gold)]
    assert wrong == []


def test_golds_that_list_answers_accept_one_box_each(golds):
    """The multi-box rule on real golds: `1, -2` answered as `\\boxed{1} and \\boxed{-2}` is right."""
    listed = [g for answers in golds.values() for g in answers if answer_parts(g) > 1]
    assert len(listed) == 19
    for gold in listed:
        inner = gold[2:-2] if gold.startswith("\\{") else gold
        response = " and ".join(f"\\boxed{{{p.strip()}}}" for p in split_top_level(inner))
        assert _correct(response, gold), gold
