"""The authors' reading (`reference_code` presets) against the paper presets' reading, response by response.

Expected rewards come from reading the authors' code (aeroplanepaper/GRPO-LEAD at commit 9344bef): the reward
function sees prompt + response, reads the last `\\boxed{` before the first `</think>`, scores a format
failure 0 (or -2 with repetition), a wrong answer -1 whatever its repetition, a right one 1. Each response
is its own group here, so a correct one earns exactly 1 under every preset (z = 0). Repetitive responses
start with a word ("Hmm.") because the paper rule's grader sees `<think>` glued to the first one.
"""

import pytest
import torch

from nemo_lead.algorithms import LeadConfig, Outcome, shape_rewards
from nemo_lead.data.prompts import LEAD_INSTRUCTION
from nemo_lead.verify import MathVerifier, default_region
from nemo_lead.verify.extract import THINK_OPEN
from nemo_lead.verify.reference_code import authors_answer, read_like_authors

R1_USER, R1_ASSISTANT = "<｜begin▁of▁sentence｜><｜User｜>", "<｜Assistant｜><think>\n"
P = R1_USER + "What is 3 + 4?" + LEAD_INSTRUCTION + R1_ASSISTANT  # the authors' prompt: holds `\boxed{}`
P0 = R1_USER + "What is 3 + 4? Put the answer in a box." + R1_ASSISTANT  # no box in the prompt
PLONG = R1_USER + "Simplify " + "1+" * 70 + "1." + LEAD_INSTRUCTION + R1_ASSISTANT  # a 140-character token

# off the authors' chunk grid or on it: 10 repeats of a 2-word chunk starting at an odd / even word
_odd = 1 if len(P.split()) % 2 == 0 else 2
OFF_GRID = "a " * _odd + "ok again " * 10
ON_GRID = "a " * (_odd + 1) + "ok again " * 10

# (case, prompt, response, finished, reward under paper, stage2, reference_code)
TABLE = [
    ("R1 style: box after </think>", P, "3 + 4 = 7.\n</think>\n\nThe answer is $\\boxed{7}$.", True, 1, 1, -1),
    ("the same, prompt without a box", P0, "3 + 4 = 7.\n</think>\n\nThe answer is $\\boxed{7}$.", True, 1, 1, 0),
    ("box in the thoughts only", P, "3 + 4 = \\boxed{7}\n</think>\n\nSo it is seven.", True, -1, -1, 1),
    ("box on both sides", P, "\\boxed{7}</think> \\boxed{7}", True, 1, 1, 1),
    ("the last box before </think> decides", P, "\\boxed{7}, no: \\boxed{8}</think> \\boxed{7}", True, 1, 1, -1),
    ("wrong", P, "\\boxed{8}</think> \\boxed{8}", True, -1, -1, -1),
    ("wrong with repetition (issue 25's case)", P, "Hmm. " + "ok again " * 10 + "\\boxed{8}</think>", True,
     -1, -1.5, -1),
    ("wrong on both sides with repetition", P, "Hmm. " + "ok again " * 10 + "\\boxed{8}</think> \\boxed{8}", True,
     -1, -1.5, -1),
    ("correct with repetition", P, "so " * 12 + "\\boxed{7}</think> \\boxed{7}", True, 1, 1, 1),
    ("cut while looping, no </think>", P, "Hmm. " + "wait " * 10, False, -1, -1.5, -2),
    ("cut while thinking", P, "let me think about 3 + 4", False, -1, -1, 0),
    ("cut after </think>, box before it", P, "\\boxed{7}</think> The answer", False, -1, -1, 1),
    ("finished without </think>", P, "the answer is \\boxed{7}", True, -1, -1, 0),
    ("empty box before </think>", P0, "\\boxed{}</think> \\boxed{7}", True, 1, 1, -1),
    ("blank box", P0, "\\boxed{ }</think>", True, -1, -1, -1),
    ("bare \\boxed 7: not read by the authors", P, "\\boxed 7</think>", True, -1, -1, 0),
    ("space before the brace", P, "\\boxed {7}</think>", True, -1, -1, 0),
    ("unclosed box before </think>", P, "\\boxed{7</think> \\boxed{7}", True, 1, 1, 0),
    ("\\fbox", P0, "\\fbox{7}</think>", True, -1, -1, 0),
    ("a 120+ character token, cut", P, "x" * 130, False, -1, -1.5, -2),
    ("a 120+ character token in the prompt", PLONG, "let me think", False, -1, -1, -2),
    ("10 repeats off the authors' grid", P, OFF_GRID, False, -1, -1.5, 0),
    ("10 repeats on the authors' grid", P, ON_GRID, False, -1, -1.5, -2),
]


@pytest.fixture(scope="module")
def paper_verifier():
    with MathVerifier(workers=1, answer_region=default_region(LeadConfig.paper().outcome_rule)) as v:
        yield v


@pytest.fixture(scope="module")
def authors_verifier():
    cfg = LeadConfig.reference_code()
    with MathVerifier(workers=1, answer_region=default_region(cfg.outcome_rule), rule=cfg.outcome_rule) as v:
        yield v


def rewards_under(preset: str, verifier: MathVerifier) -> list[float]:
    """Grade TABLE as the RL loop does (`training.rollouts.grade_groups`) and shape the rewards."""
    cfg = LeadConfig.from_preset(preset)
    golds, finished = ["7"] * len(TABLE), [row[3] for row in TABLE]
    if cfg.outcome_rule == "reference_code":
        grades = verifier.grade([row[2] for row in TABLE], golds, finished, check_repetition=cfg.check_repetition,
                                prompts=[row[1] for row in TABLE])
    else:  # the prompts end inside <think>: the grader sees it in front of the response
        grades = verifier.grade([THINK_OPEN + row[2] for row in TABLE], golds, finished,
                                check_repetition=cfg.check_repetition)
    outcome = torch.tensor([int(g.outcome) for g in grades])
    n = len(TABLE)
    return shape_rewards(outcome, torch.full((n,), 100), torch.arange(n), cfg).tolist()


@pytest.mark.parametrize("preset, column", [("paper", 4), ("stage2", 5), ("reference_code", 6)])
def test_reward_table(preset, column, paper_verifier, authors_verifier):
    verifier = authors_verifier if preset.startswith("reference_code") else paper_verifier
    got = rewards_under(preset, verifier)
    wrong = [(row[0], got[i], row[column]) for i, row in enumerate(TABLE) if got[i] != row[column]]
    assert not wrong, f"{preset}: (case, got, expected) {wrong}"


def test_reference_code_stage2_reads_the_same(authors_verifier):
    # one response per group: without the length term every outcome maps to the same reward
    assert rewards_under("reference_code_stage2", authors_verifier) == [row[6] for row in TABLE]


def test_multi_box_rule_is_the_paper_rules_only(paper_verifier, authors_verifier):
    """Two boxes against a gold that lists two answers: joined under the paper rule, the last box alone
    under the authors' (their code reads one box)."""
    text, gold = "\\boxed{(2, 2)} and \\boxed{(6, 2)}", "(2, 2), (6, 2)"
    (g,) = paper_verifier.grade([text], [gold])
    assert (g.outcome, g.extracted) == (Outcome.CORRECT, "(2, 2), (6, 2)")
    (g,) = authors_verifier.grade([text + "</think>"], [gold], prompts=[P0])
    assert (g.outcome, g.extracted) == (Outcome.WRONG, "(6, 2)")


def test_prompt_box_is_read_as_the_empty_answer(authors_verifier):
    (g,) = authors_verifier.grade(["no box here</think> \\boxed{7}"], ["7"], prompts=[P])
    assert (g.outcome, g.extracted, g.status) == (Outcome.WRONG, "", "ok")
    (g,) = authors_verifier.grade(["no box here</think> \\boxed{7}"], ["7"], prompts=[P0])
    assert (g.outcome, g.extracted, g.status) == (Outcome.TRUNCATED, None, "no_answer")


@pytest.mark.parametrize(
    "text, expected",
    [
        ("\\boxed{7}", "7"),
        ("\\boxed{ 7 }", " 7 "),  # not stripped
        ("\\boxed{}", ""),
        ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{1} then \\boxed{2}", "2"),
        ("\\boxed{\\{1\\}} x", "\\{1\\}"),  # escaped braces are counted like any: here they balance
        ("\\boxed{\\{1} x}", "\\{1} x"),
        ("\\boxed 7", None),
        ("\\boxed {7}", None),
        ("\\fbox{7}", None),
        ("\\boxed{7", None),
        ("\\boxed{2} then \\boxed{3", None),  # the last box decides
        ("\\boxedanswer{3}", None),
        ("no box", None),
    ],
)
def test_authors_answer(text, expected):
    assert authors_answer(text) == expected


def test_read_like_authors_joins_prompt_and_response():
    assert read_like_authors(P, "thinking \\boxed{7}</think> done") == ("7", P + "thinking \\boxed{7}</think> done")
    assert read_like_authors(P, "still thinking")[0] is None  # no </think>: format failure
    assert read_like_authors("", "\\boxed{5}</think>")[0] == "5"  # no prompt given: the response alone


def test_bad_rule_and_prompt_count():
    with pytest.raises(ValueError, match="rule"):
        MathVerifier(rule="authors")
    v = MathVerifier(workers=1, rule="reference_code")
    try:
        with pytest.raises(ValueError, match="prompts"):
            v.grade(["a", "b"], ["1", "1"], prompts=["p"])
        with pytest.raises(TypeError, match="prompt"):
            v.grade(["a"], ["1"], prompts=[None])
    finally:
        v.close()
