"""Group advantages and difficulty-aware reweighting (paper Sec. 3.3, plus GRPO's neighbours).

Step 1, a normalised advantage per response from the rewards of its group (`advantage_estimator`):

    grpo     A~_i = (R_i - mean_q) / (std_q + eps)       std: sample (n-1) by default
    dr_grpo  A~_i = R_i - mean_q                          (Dr. GRPO: no std division)
    dgpo     A~_i = (R_i - mean_q) / (MAD_q + eps),  MAD_q = mean_i |R_i - mean_q|
    rloo     A~_i = R_i - mean_{j != i} R_j = G/(G-1) (R_i - mean_q)

Step 2, difficulty reweighting (`reweighting`):

    lead          w(x) = A + (B - A) / (1 + exp(k (x - rho0)))
                  A'_i = A~_i w(rho_q) if A~_i > 0 else A~_i w(1 - rho_q)
    dgpo_softmax  lambda_q = B_valid softmax_q(-acc_q / T) over the B_valid groups with reward spread,
                  lambda_q = 1 for the others;  A'_i = lambda_q A~_i

rho_q (and DGPO's acc_q) is the share of the group's responses that are CORRECT (paper), or whose
reward is > 0 (`rho_source="positive_reward"`, the authors' code).

Decided edge cases: a group whose rewards are all equal (all correct with equal lengths, all wrong,
or a group of one response) has advantage 0 everywhere; an empty batch returns an empty tensor;
NaN/inf rewards raise ValueError.
"""

from __future__ import annotations

from typing import Protocol

import torch

from nemo_lead.algorithms.checks import check_batch
from nemo_lead.algorithms.groups import Groups
from nemo_lead.algorithms.outcome import Outcome
from nemo_lead.algorithms.registry import Registry


class AdvantageSettings(Protocol):
    """What this module reads of the `lead` settings (`LeadConfig` has them all), in the paper's symbols."""

    advantage_estimator: str  # a name of ESTIMATORS
    advantage_std: str  # std_q of grpo: "sample" (n - 1) or "population"
    advantage_eps: float  # eps
    reweighting: str  # a name of REWEIGHTINGS
    rho_source: str  # rho_q counts "correct" outcomes or "positive_reward"s
    A: float  # w's lower asymptote
    B: float  # w's upper asymptote
    rho0: float  # w's midpoint
    k: float  # w's steepness
    dgpo_temperature: float  # T


# `lead.advantage_estimator`: the one list of estimators (LeadConfig accepts exactly these names)
ESTIMATORS = Registry("lead.advantage_estimator")
# `lead.reweighting`: the one list of difficulty reweightings (LeadConfig accepts exactly these names)
REWEIGHTINGS = Registry("lead.reweighting")


def difficulty_weight(rho: torch.Tensor, cfg: AdvantageSettings) -> torch.Tensor:
    """Logistic w(rho) = A + (B - A) / (1 + exp(k (rho - rho0))): large for hard questions (small rho)."""
    rho = torch.as_tensor(rho, dtype=torch.float64) if not isinstance(rho, torch.Tensor) else rho
    return cfg.A + (cfg.B - cfg.A) / (1.0 + torch.exp(cfg.k * (rho - cfg.rho0)))


def success_rate(rewards: torch.Tensor, outcome: torch.Tensor, groups: Groups, cfg: AdvantageSettings) -> torch.Tensor:
    """rho_q per group -> [Q] (float64): share of CORRECT outcomes, or of rewards > 0."""
    hit = outcome == Outcome.CORRECT if cfg.rho_source == "correct" else rewards > 0
    return groups.count(hit) / groups.size


def _ratio_or_zero(num: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """num / den, and 0 where den is 0 (then num is 0 too: a group with no spread, eps = 0)."""
    return torch.where(den > 0, num / torch.where(den > 0, den, torch.ones_like(den)), torch.zeros_like(num))


@ESTIMATORS.register("grpo")
def grpo_advantage(R: torch.Tensor, groups: Groups, cfg: AdvantageSettings) -> torch.Tensor:
    """(R - mean) / (std + eps) within each group."""
    std = groups.std(R, unbiased=cfg.advantage_std == "sample")
    return _ratio_or_zero(R - groups.broadcast(groups.mean(R)), groups.broadcast(std) + cfg.advantage_eps)


@ESTIMATORS.register("dr_grpo")
def dr_grpo_advantage(R: torch.Tensor, groups: Groups, cfg: AdvantageSettings) -> torch.Tensor:
    """R - mean within each group (Dr. GRPO drops the std division, which favours easy/hard groups)."""
    return R - groups.broadcast(groups.mean(R))


@ESTIMATORS.register("dgpo")
def dgpo_advantage(R: torch.Tensor, groups: Groups, cfg: AdvantageSettings) -> torch.Tensor:
    """(R - mean) / (MAD + eps): every group with spread then has sum |A| = G."""
    centred = R - groups.broadcast(groups.mean(R))
    mad = groups.mean(centred.abs())
    return _ratio_or_zero(centred, groups.broadcast(mad) + cfg.advantage_eps)


@ESTIMATORS.register("rloo")
def rloo_advantage(R: torch.Tensor, groups: Groups, cfg: AdvantageSettings) -> torch.Tensor:
    """Leave-one-out baseline R_i - mean_{j != i} R_j; 0 for groups of one response."""
    G = groups.broadcast(groups.size)
    factor = torch.where(G > 1, G / (G - 1).clamp_min(1), torch.zeros_like(G))
    return factor * (R - groups.broadcast(groups.mean(R)))


def lead_reweight(adv: torch.Tensor, rho: torch.Tensor, cfg: AdvantageSettings) -> torch.Tensor:
    """A'_i = A~_i w(rho) if A~_i > 0 else A~_i w(1 - rho); `rho` is per response."""
    return torch.where(adv > 0, adv * difficulty_weight(rho, cfg), adv * difficulty_weight(1.0 - rho, cfg))


def dgpo_question_weights(R: torch.Tensor, rho_q: torch.Tensor, groups: Groups, cfg: AdvantageSettings) -> torch.Tensor:
    """lambda_q = B_valid softmax(-acc_q / T) over groups with reward spread; 1 for the others -> [Q]."""
    valid = groups.max(R) > groups.min(R)
    lam = torch.ones(groups.num, dtype=torch.float64, device=R.device)
    if valid.any():
        lam[valid] = valid.sum() * torch.softmax(-rho_q[valid] / cfg.dgpo_temperature, dim=0)
    return lam


@REWEIGHTINGS.register("none")
def no_reweighting(adv: torch.Tensor, R: torch.Tensor, outcome: torch.Tensor, groups: Groups, cfg: AdvantageSettings) -> torch.Tensor:  # noqa: ARG001
    """Plain group-normalised advantages."""
    return adv


@REWEIGHTINGS.register("lead")
def lead_reweighting(adv: torch.Tensor, R: torch.Tensor, outcome: torch.Tensor, groups: Groups, cfg: AdvantageSettings) -> torch.Tensor:
    """Sec. 3.3: the logistic difficulty weight w(rho) of each response's group."""
    return lead_reweight(adv, groups.broadcast(success_rate(R, outcome, groups, cfg)), cfg)


@REWEIGHTINGS.register("dgpo_softmax")
def dgpo_reweighting(adv: torch.Tensor, R: torch.Tensor, outcome: torch.Tensor, groups: Groups, cfg: AdvantageSettings) -> torch.Tensor:
    """DGPO: each group's advantages times its question weight lambda_q."""
    return adv * groups.broadcast(dgpo_question_weights(R, success_rate(R, outcome, groups, cfg), groups, cfg))


def compute_advantages(
    rewards: torch.Tensor, outcome: torch.Tensor, group: torch.Tensor, cfg: AdvantageSettings
) -> torch.Tensor:
    """Per-response advantage (FloatTensor[N], float32): normalised within groups, then reweighted."""
    check_batch(outcome, group, rewards=rewards)
    if rewards.numel() == 0:
        return torch.zeros(0, dtype=torch.float32, device=rewards.device)
    groups = Groups.of(group)
    R = rewards.to(torch.float64)
    adv = ESTIMATORS[cfg.advantage_estimator](R, groups, cfg)
    adv = REWEIGHTINGS[cfg.reweighting](adv, R, outcome, groups, cfg)
    return adv.to(torch.float32)
