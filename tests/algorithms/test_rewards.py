"""Reward shaping against numbers computed by hand from the paper's formulas (Sec. 3.1-3.2)."""

import math

import pytest
import torch

from nemo_lead.algorithms import LeadConfig, Outcome, shape_rewards
from nemo_lead.cli import main
from nemo_lead.config.reference import reference
from nemo_lead.training.rl.config import RLConfig

C, W, T, R = int(Outcome.CORRECT), int(Outcome.WRONG), int(Outcome.TRUNCATED), int(Outcome.REPETITION)


def rewards(outcome, lengths, group, cfg):
    return shape_rewards(torch.tensor(outcome), torch.tensor(lengths), torch.tensor(group), cfg).tolist()


def test_length_reward_paper_population_std():
    # correct lengths 100, 200, 300: mu = 200, sigma = sqrt((100^2 + 0 + 100^2) / 3) = 81.6497
    sigma = math.sqrt(20000 / 3)
    z = [-100 / (sigma + 1e-6), 0.0, 100 / (sigma + 1e-6)]
    expected = [math.exp(-0.05 * zi) for zi in z] + [-1.0, -1.0]
    got = rewards([C, C, C, W, T], [100, 200, 300, 50, 900], [0] * 5, LeadConfig.paper())
    assert got == pytest.approx(expected, rel=1e-6)
    assert got[0] == pytest.approx(1.0631507, rel=1e-6)  # exp(0.05 * 1.2247449)


def test_length_reward_reference_code_sample_std_and_gate():
    cfg = LeadConfig.reference_code()
    # sample std of 4100, 4200, 4300 is 100: z = -1, 0, 1. The 3 shortest (4000, 4100, 4200) average
    # 4100 > 4000 tokens, so the gate is open.
    got = rewards([C, C, C, W], [4100, 4200, 4300, 4000], [0] * 4, cfg)
    assert got == pytest.approx([math.exp(0.05), 1.0, math.exp(-0.05), -1.0], rel=1e-6)
    # same spreads but short responses: mean of 3 shortest = 200 <= 4000, gate closed -> plain 1
    got = rewards([C, C, C, W], [100, 200, 300, 100], [0] * 4, cfg)
    assert got == [1.0, 1.0, 1.0, -1.0]


def test_gate_is_open_for_groups_smaller_than_k():
    # the authors average 3 running minima that start at infinity: with 2 responses the mean stays infinite
    cfg = LeadConfig.reference_code()
    z = 100 / (math.sqrt(20000) + 1e-6)  # lengths 100, 300: mean 200, sample std sqrt(2 * 100^2 / 1)
    got = rewards([C, C, C, C, W], [100, 300, 100, 300, 100], [0, 0, 1, 1, 1], cfg)
    assert got[:2] == pytest.approx([math.exp(0.05 * z), math.exp(-0.05 * z)], rel=1e-6)
    assert got[2:] == [1.0, 1.0, -1.0]  # 3 responses averaging 166.7 tokens: closed
    assert rewards([C], [10], [0], cfg) == [1.0]


def test_gate_uses_shortest_of_all_outcomes_per_group():
    cfg = LeadConfig.reference_code()
    # group 7: a wrong 10-token answer drags the 3-shortest mean to (10 + 5000 + 6000) / 3 = 3670 -> closed
    # group 3 (interleaved): 4500, 5000, 5500 -> open
    out = rewards([C, C, W, C, C, C, C], [5000, 4500, 10, 6000, 5000, 5500, 7000], [7, 3, 7, 7, 3, 3, 7], cfg)
    assert out[0] == 1.0 and out[3] == 1.0 and out[6] == 1.0 and out[2] == -1.0
    assert out[1] == pytest.approx(math.exp(0.05 * 1.0), rel=1e-6)  # z = (4500 - 5000) / 500
    assert out[5] == pytest.approx(math.exp(-0.05 * 1.0), rel=1e-6)


def test_explicit_penalty_truncation_and_repetition_values():
    assert rewards([W, T, R], [10, 10, 10], [0, 0, 0], LeadConfig.paper()) == [-1.0, -1.0, -1.5]
    assert rewards([W, T, R], [10, 10, 10], [0, 0, 0], LeadConfig.reference_code()) == [-1.0, 0.0, -2.0]
    assert rewards([C, W, T], [10, 20, 30], [0, 0, 0], LeadConfig.grpo()) == [1.0, 0.0, 0.0]


def test_stage2_turns_length_reward_off():
    cfg = LeadConfig.stage2()
    assert rewards([C, C, R, W], [10, 1000, 50, 5], [0] * 4, cfg) == [1.0, 1.0, -1.5, -1.0]
    assert cfg.check_repetition


def test_single_correct_and_equal_lengths_give_one():
    for cfg in (LeadConfig.paper(), LeadConfig.reference_code().replace(length_gate_tokens=0)):
        assert rewards([C, W, W], [123, 5, 7], [0, 0, 0], cfg)[0] == 1.0
        assert rewards([C, C, C], [50, 50, 50], [0, 0, 0], cfg) == [1.0, 1.0, 1.0]


def test_groups_are_independent_and_need_not_be_adjacent():
    cfg = LeadConfig.paper()
    a = rewards([C, C, C, C], [100, 300, 10, 30], [5, 5, 9, 9], cfg)
    b = rewards([C, C, C, C], [100, 10, 300, 30], [5, 9, 5, 9], cfg)
    assert b == pytest.approx([a[0], a[2], a[1], a[3]])
    # z is scale-free: (10, 30) and (100, 300) give the same rewards
    assert a[0] == pytest.approx(a[2]) and a[1] == pytest.approx(a[3])


def test_overlong_shaping_dapo():
    cfg = LeadConfig.dapo().replace(max_response_len=100, overlong_buffer_len=20)
    # 0 up to 80 tokens, then -(len - 80) / 20, reaching -1 at 100
    got = rewards([C, C, W, T], [80, 90, 95, 100], [0] * 4, cfg)
    assert got == pytest.approx([1.0, 0.5, -1.75, -2.0])


def test_empty_batch_and_bad_inputs():
    cfg = LeadConfig.paper()
    empty = torch.zeros(0, dtype=torch.long)
    assert shape_rewards(empty, empty, empty, cfg).shape == (0,)
    with pytest.raises(ValueError, match="differ in length"):
        shape_rewards(torch.tensor([1, 0]), torch.tensor([1]), torch.tensor([0, 0]), cfg)
    with pytest.raises(ValueError, match="not Outcome members"):
        shape_rewards(torch.tensor([3]), torch.tensor([1]), torch.tensor([0]), cfg)
    with pytest.raises(ValueError, match="NaN/inf"):
        shape_rewards(torch.tensor([1]), torch.tensor([float("nan")]), torch.tensor([0]), cfg)
    with pytest.raises(ValueError, match=">= 0"):
        shape_rewards(torch.tensor([1]), torch.tensor([-4]), torch.tensor([0]), cfg)
    with pytest.raises(ValueError, match="integer ids"):
        shape_rewards(torch.tensor([1]), torch.tensor([4]), torch.tensor([0.5]), cfg)


def test_length_shaping_none_is_length_reward_off_and_length_reward_off_wins():
    out, lengths, group = [C, C, C, W, T], [100, 200, 300, 50, 900], [0] * 5
    off = rewards(out, lengths, group, LeadConfig.paper().replace(length_reward=False))
    assert off == [1.0, 1.0, 1.0, -1.0, -1.0]
    assert rewards(out, lengths, group, LeadConfig.paper().replace(length_shaping="none")) == off
    assert rewards(out, lengths, group, LeadConfig.stage2().replace(length_shaping="exp_z")) == off[:3] + [-1.0, -1.0]
    assert rewards(out, lengths, group, LeadConfig.paper()) != off  # exp_z, the default


def test_cosine_length_reward_of_yeo_et_al_by_hand():
    # Yeo et al. 2025, Eq. 1: R = r_L + (r_0 - r_L) (1 + cos(pi L / L_max)) / 2, the paper's r_0^c = 2,
    # r_L^c = 1, r_0^w = -10, r_L^w = 0; L_max = 1000. cos(pi / 4) = 0.70710678, cos(pi / 2) = 0, cos(pi) = -1
    cfg = LeadConfig.paper().replace(length_shaping="cosine", max_response_len=1000, truncated_reward=-10.0)
    got = rewards([C, C, C, C, W, W, W, W, T, R, C], [0, 250, 500, 1000, 0, 250, 500, 1000, 1000, 300, 1200],
                  [0] * 5 + [1] * 6, cfg)
    correct = [2.0, 1 + 0.5 * 1.70710678, 1.5, 1.0]  # 2, 1.85355339, 1.5, 1
    wrong = [-10.0, -5 * 1.70710678, -5.0, 0.0]  # -10, -8.5355339, -5, 0
    # truncated: r_e = truncated_reward; repetition keeps its penalty; past L_max the curve stays at r_L^c
    assert got == pytest.approx(correct + wrong + [-10.0, -1.5, 1.0], rel=1e-6, abs=1e-6)


def test_cosine_is_selectable_from_the_config(capsys):
    cfg = LeadConfig(length_shaping="cosine", max_response_len=4096)
    assert cfg.length_shaping == "cosine" and (cfg.cosine_r0_correct, cfg.cosine_rL_wrong) == (2.0, 0.0)
    with pytest.raises(ValueError, match="cosine needs lead.max_response_len > 0"):
        LeadConfig(length_shaping="cosine")
    assert LeadConfig(length_shaping="cosine", length_reward=False).length_shaping == "cosine"  # off: no L_max
    by_key = {e.key: e for e in reference(RLConfig)}
    assert "cosine" in by_key["lead.length_shaping"].choices and "lead.cosine_r0_correct" in by_key
    assert main(["config", "rl"]) == 0
    assert "lead.length_shaping = exp_z  [str]\n    one of: exp_z | none | cosine" in capsys.readouterr().out
