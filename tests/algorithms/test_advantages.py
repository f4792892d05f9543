"""Advantages and difficulty reweighting against hand computation (paper Sec. 3.3, docs/design.md)."""

import math
import statistics

import pytest
import torch

from nemo_lead.algorithms import LeadConfig, Outcome, compute_advantages, difficulty_weight, group_keep_mask

C, W, T = int(Outcome.CORRECT), int(Outcome.WRONG), int(Outcome.TRUNCATED)


def w(x, A=0.4, B=1.5, rho0=0.75, k=10.0):
    return A + (B - A) / (1 + math.exp(k * (x - rho0)))


def adv(rewards, outcome, group, cfg):
    return compute_advantages(
        torch.tensor(rewards, dtype=torch.float32), torch.tensor(outcome), torch.tensor(group), cfg
    ).tolist()


def test_difficulty_weight_values_from_design():
    got = difficulty_weight(torch.tensor([0.0, 0.5, 0.75, 1.0]), LeadConfig.paper())
    assert got.tolist() == pytest.approx([1.499, 1.417, 0.95, 0.483], abs=6e-4)
    flipped = difficulty_weight(1 - torch.tensor([0.0, 0.5, 0.75, 1.0]), LeadConfig.paper())
    assert flipped.tolist() == pytest.approx([0.483, 1.417, 1.493, 1.499], abs=6e-4)


def test_lead_advantage_sign_rule_by_hand():
    # one group, 3 of 4 correct: rho = 0.75. Rewards after length shaping (any values will do).
    r = [1.06, 1.0, 0.94, -1.0]
    mu, sd = statistics.mean(r), statistics.stdev(r)  # sample std, as in the paper preset
    base = [(x - mu) / (sd + 1e-6) for x in r]
    expected = [b * (w(0.75) if b > 0 else w(0.25)) for b in base]
    got = adv(r, [C, C, C, W], [0] * 4, LeadConfig.paper())
    assert got == pytest.approx(expected, rel=1e-5)
    # easy question (rho 0.75): correct answers scaled by w(0.75) = 0.95, the wrong one by w(0.25) = 1.4926
    assert got[3] / base[3] == pytest.approx(1.4926, abs=1e-4)
    assert got[0] / base[0] == pytest.approx(0.95, abs=1e-6)


def test_hard_question_pushes_rare_correct_answer_hardest():
    # 1 of 4 correct: rho = 0.25 -> correct scaled by w(0.25) = 1.4926, wrong ones by w(0.75) = 0.95
    r = [1.0, -1.0, -1.0, -1.0]
    mu, sd = statistics.mean(r), statistics.stdev(r)
    got = adv(r, [C, W, W, W], [0] * 4, LeadConfig.paper())
    assert got[0] == pytest.approx((1 - mu) / sd * w(0.25), rel=1e-5)
    assert got[1] == pytest.approx((-1 - mu) / sd * w(0.75), rel=1e-5)


def test_rho_from_positive_rewards_in_reference_code():
    # truncated responses get 0 in the code: rho counts rewards > 0, so 1 of 4 here (paper would too)
    cfg = LeadConfig.reference_code()
    r = [1.0, 0.0, 0.0, -1.0]
    mu, sd = statistics.mean(r), statistics.stdev(r)
    got = adv(r, [C, T, T, W], [0] * 4, cfg)
    base = [(x - mu) / (sd + 1e-6) for x in r]
    assert got == pytest.approx([b * (w(0.25) if b > 0 else w(0.75)) for b in base], rel=1e-5)


def test_estimators_by_hand():
    r, o, g = [2.0, 0.0, 1.0, 5.0], [C, W, C, C], [0, 0, 0, 0]
    mu = 2.0
    none = dict(reweighting="none")
    assert adv(r, o, g, LeadConfig.paper().replace(advantage_estimator="dr_grpo", **none)) == pytest.approx(
        [0.0, -2.0, -1.0, 3.0]
    )
    assert adv(r, o, g, LeadConfig.paper().replace(advantage_estimator="rloo", **none)) == pytest.approx(
        [4 / 3 * (x - mu) for x in r]
    )
    mad = (0 + 2 + 1 + 3) / 4
    assert adv(r, o, g, LeadConfig.paper().replace(advantage_estimator="dgpo", **none)) == pytest.approx(
        [(x - mu) / (mad + 1e-6) for x in r], rel=1e-6
    )
    pop = LeadConfig.paper().replace(advantage_std="population", **none)
    assert adv(r, o, g, pop) == pytest.approx([(x - mu) / (statistics.pstdev(r) + 1e-6) for x in r], rel=1e-6)


def test_dgpo_question_weights_by_hand():
    cfg = LeadConfig.dgpo()
    # group 0: 1/2 correct, group 1: 2/2 correct (no spread -> weight 1, advantage 0 anyway),
    # group 2: 1/4 correct. Valid groups 0 and 2: lambda = 2 * softmax(-[0.5, 0.25] / 2)
    r = [1, 0, 1, 1, 1, 0, 0, 0]
    o = [C, W, C, C, C, W, W, W]
    g = [0, 0, 1, 1, 2, 2, 2, 2]
    e0, e2 = math.exp(-0.5 / 2), math.exp(-0.25 / 2)
    lam0, lam2 = 2 * e0 / (e0 + e2), 2 * e2 / (e0 + e2)
    got = adv(r, o, g, cfg)
    # group 0: MAD 0.5 -> base +-1; group 2: mean 0.25, MAD 0.375 -> base 2, -2/3
    assert got[:2] == pytest.approx([lam0, -lam0], rel=1e-5)
    assert got[2:4] == [0.0, 0.0]
    assert got[4:] == pytest.approx([lam2 * 0.75 / 0.375] + [lam2 * -0.25 / 0.375] * 3, rel=1e-5)


def test_no_signal_groups_get_zero_advantage():
    cfg = LeadConfig.paper()
    assert adv([-1.0, -1.0, -1.0], [W, W, W], [0, 0, 0], cfg) == [0.0, 0.0, 0.0]  # all wrong
    assert adv([1.0, 1.0], [C, C], [0, 0], cfg) == [0.0, 0.0]  # all correct, equal lengths
    assert adv([1.0], [C], [4], cfg) == [0.0]  # a group of one
    assert adv([1.0], [C], [4], cfg.replace(advantage_estimator="rloo")) == [0.0]
    # eps = 0 must not turn 0/0 into NaN
    assert adv([1.0, 1.0], [C, C], [0, 0], cfg.replace(advantage_eps=0.0)) == [0.0, 0.0]


def test_empty_and_invalid():
    cfg = LeadConfig.paper()
    e = torch.zeros(0)
    assert compute_advantages(e, e.long(), e.long(), cfg).shape == (0,)
    with pytest.raises(ValueError, match="NaN/inf"):
        compute_advantages(torch.tensor([1.0, float("inf")]), torch.tensor([C, W]), torch.tensor([0, 0]), cfg)


def test_group_keep_mask_reference_code_rule():
    cfg = LeadConfig.reference_code()
    r = torch.tensor([-1.0, 0.0, 1.0, 1.0, 1.05, 0.95, 1.0, -1.0])
    o = torch.tensor([W, T, C, C, C, C, C, W])
    g = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])
    # group 0 all <= 0: drop; group 1 all exactly 1: drop; group 2 length-shaped correct: keep; 3 mixed: keep
    assert group_keep_mask(r, o, g, cfg).tolist() == [False, False, False, False, True, True, True, True]
    assert group_keep_mask(r, o, g, LeadConfig.paper()).all()


def test_group_keep_mask_dynamic_sampling():
    cfg = LeadConfig.dapo()
    o = torch.tensor([C, C, W, W, C, W, C])
    g = torch.tensor([0, 0, 1, 1, 2, 2, 3])
    assert group_keep_mask(torch.zeros(7), o, g, cfg).tolist() == [False, False, False, False, True, True, False]
