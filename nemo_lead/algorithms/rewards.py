"""Reward shaping: the paper's length-dependent accuracy reward and explicit penalties (Sec. 3.1-3.2).

Every response first gets the reward of its outcome: `correct_reward`, `wrong_reward` (the explicit penalty,
-1 in the paper), `truncated_reward` (no final answer, or cut at the maximum length) or `repetition_reward`
(stage 2). A length shaping (`lead.length_shaping`, one of `SHAPINGS`) then makes some of them depend on the
token length |o_i|:

    exp_z  the paper's, for a correct response o_i of a group, with mu and sigma the mean and standard
           deviation of the token lengths of the group's *correct* responses:

               z_i = (|o_i| - mu) / (sigma + eps)            (length_z)
               R_i = exp(-alpha z_i)                          (length_reward)

    none   no length term
    cosine Yeo et al. 2025 (arXiv 2502.03373), correct and wrong responses, L = |o_i| <= L_max:

               R_i = r_L + (r_0 - r_L) (1 + cos(pi L / L_max)) / 2    (cosine_length_reward)

`lead.length_reward` stays the switch of the length term that presets and existing configs set: false means
`none` whatever `length_shaping` says (`length_shaping_of`), so `length_reward: false` keeps its meaning and
`length_shaping` only chooses which term is on. DAPO's overlong penalty (`overlong_penalty`) is added on top
of any shaping when `overlong_buffer_len` > 0.

A new shaping is one function `(R, outcome, lengths, groups, s) -> R` registered here with
`@SHAPINGS.register(name)`, and its test; `LeadConfig` accepts the name from then on (its parameters, if any,
are fields of `LeadConfig`).

Decided edge cases (each has a test):
- one correct response in a group: sigma = 0 so z = 0 and R = 1 (also with the sample std, whose
  n - 1 = 0 would otherwise give NaN; the authors' code sets z = 0 there as well);
- all correct responses of a group equally long: sigma = 0, z = 0, R = 1 for all;
- groups of size 1 and non-adjacent group members are handled like any other group;
- an empty batch returns an empty tensor; NaN/inf or negative lengths raise ValueError.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch

from nemo_lead.algorithms.checks import check_batch
from nemo_lead.algorithms.groups import Groups
from nemo_lead.algorithms.outcome import Outcome
from nemo_lead.algorithms.registry import Registry


class RewardSettings(Protocol):
    """What this module reads of the `lead` settings (`LeadConfig` has them all), in the paper's symbols."""

    correct_reward: float
    wrong_reward: float
    truncated_reward: float
    repetition_reward: float
    length_reward: bool  # the length term on (false: `none` whatever `length_shaping` says)
    length_shaping: str  # a name of SHAPINGS
    alpha: float  # alpha of exp_z
    length_eps: float  # eps of z
    length_std: str  # sigma: "population" (paper) or "sample" (n - 1, the authors' code)
    length_gate_tokens: float  # the authors' gate of exp_z (0: always on)
    length_gate_k: int
    overlong_buffer_len: int  # L_c of DAPO's overlong penalty (0: off)
    max_response_len: int  # L_max
    overlong_penalty_factor: float
    cosine_r0_correct: float  # r_0^c of cosine
    cosine_rL_correct: float  # r_L^c
    cosine_r0_wrong: float  # r_0^w
    cosine_rL_wrong: float  # r_L^w


# `lead.length_shaping`: the one list of length shapings (LeadConfig accepts exactly these names)
SHAPINGS = Registry("lead.length_shaping")


def length_z(lengths: torch.Tensor, correct: torch.Tensor, groups: Groups, *, eps: float, sample_std: bool) -> torch.Tensor:
    """z_i = (|o_i| - mu_q) / (sigma_q + eps) over the correct responses of each group (0 elsewhere)."""
    L = lengths.to(torch.float64)
    mu = groups.mean(L, where=correct)
    sigma = groups.std(L, where=correct, unbiased=sample_std)
    z = (L - groups.broadcast(mu)) / (groups.broadcast(sigma) + eps)
    return torch.where(correct, z, torch.zeros_like(z))


def length_reward(z: torch.Tensor, alpha: float) -> torch.Tensor:
    """R = exp(-alpha z): shorter-than-usual correct answers earn more than 1, longer ones less."""
    return torch.exp(-alpha * z)


def length_gate(lengths: torch.Tensor, groups: Groups, *, k: int, tokens: float) -> torch.Tensor:
    """Authors' code: the length term applies only where the mean of the group's `k` shortest responses
    (any outcome) exceeds `tokens`. A group of fewer than `k` responses is always open (their code averages k
    running minima that start at infinity, so a missing one keeps the mean infinite). Returns a per-response
    bool."""
    if tokens <= 0 or k == 0:
        return torch.ones_like(lengths, dtype=torch.bool)
    L = lengths.to(torch.float64)
    # rank of each response by length within its group: sort by length, then stably by group
    by_len = torch.argsort(L, stable=True)
    order = by_len[torch.argsort(groups.index[by_len], stable=True)]
    first = torch.zeros(groups.num, dtype=torch.long, device=L.device)
    sizes = groups.size.to(torch.long)
    first[1:] = torch.cumsum(sizes, 0)[:-1]
    rank = torch.empty_like(order)
    rank[order] = torch.arange(order.numel(), device=L.device) - first[groups.index[order]]
    shortest = rank < k
    too_few = groups.size < k
    return groups.broadcast(too_few | (groups.mean(L, where=shortest) > tokens))


def overlong_penalty(lengths: torch.Tensor, *, L_max: int, L_c: int, factor: float) -> torch.Tensor:
    """DAPO soft overlong punishment: 0 up to L_max - L_c, then linear down to -factor at L_max."""
    if L_c <= 0:
        return torch.zeros_like(lengths, dtype=torch.float64)
    excess = (lengths.to(torch.float64) - (L_max - L_c)).clamp(min=0, max=L_c)
    return -factor * excess / L_c


def outcome_rewards(outcome: torch.Tensor, s: RewardSettings) -> torch.Tensor:
    """The reward of each response's outcome alone (float64): correct, wrong (explicit penalty), truncated,
    repetition."""
    R = torch.full(outcome.shape, s.wrong_reward, dtype=torch.float64, device=outcome.device)
    R[outcome == Outcome.CORRECT] = s.correct_reward
    R[outcome == Outcome.TRUNCATED] = s.truncated_reward
    R[outcome == Outcome.REPETITION] = s.repetition_reward
    return R


@SHAPINGS.register("exp_z")
def exp_z_length_term(R: torch.Tensor, outcome: torch.Tensor, lengths: torch.Tensor, groups: Groups, s: RewardSettings) -> torch.Tensor:
    """Sec. 3.1: a correct response earns exp(-alpha z) instead of `correct_reward` (where the authors' gate,
    `length_gate_tokens` > 0, is open); the others keep their outcome's reward."""
    correct = outcome == Outcome.CORRECT
    z = length_z(lengths, correct, groups, eps=s.length_eps, sample_std=s.length_std == "sample")
    gated = length_gate(lengths, groups, k=s.length_gate_k, tokens=s.length_gate_tokens)
    return torch.where(correct & gated, length_reward(z, s.alpha), R)


@SHAPINGS.register("none")
def no_length_term(R: torch.Tensor, outcome: torch.Tensor, lengths: torch.Tensor, groups: Groups, s: RewardSettings) -> torch.Tensor:  # noqa: ARG001
    """The outcome rewards as they are (plain GRPO, the paper's stage 2)."""
    return R


def cosine_length_reward(lengths: torch.Tensor, L_max: int, r_0: float, r_L: float) -> torch.Tensor:
    """CosFn of Yeo et al. 2025: r_L + (r_0 - r_L) (1 + cos(pi L / L_max)) / 2, r_0 at L = 0 falling (or
    rising) along half a cosine to r_L at L = L_max; L is clamped to L_max (beyond it the curve would turn
    back)."""
    L = lengths.to(torch.float64).clamp(max=L_max)
    return r_L + 0.5 * (r_0 - r_L) * (1.0 + torch.cos(math.pi * L / L_max))


@SHAPINGS.register("cosine")
def cosine_length_term(R: torch.Tensor, outcome: torch.Tensor, lengths: torch.Tensor, groups: Groups, s: RewardSettings) -> torch.Tensor:  # noqa: ARG001
    """The cosine length-scaling reward of Yeo et al., "Demystifying Long Chain-of-Thought Reasoning in LLMs"
    (arXiv 2502.03373, 2025), Sec. 4.2, Eq. 1, as read here: a correct answer earns r_0^c at length 0 down to
    r_L^c at L_max (short correct answers earn most), a wrong one r_0^w at length 0 up to r_L^w at L_max (a
    long wrong attempt is punished least), both along `cosine_length_reward`. L_max is `max_response_len`;
    the paper's r_e for a response that reaches L_max is `truncated_reward` (TRUNCATED responses, as
    REPETITION ones, keep their outcome's reward). The defaults of the `cosine_*` fields are the paper's
    (its run scripts: r_0^c = 2, r_L^c = 1, r_0^w = -10, r_L^w = 0; their r_e = -10 is
    `truncated_reward=-10`, not set by this shaping)."""
    L_max = s.max_response_len
    correct = cosine_length_reward(lengths, L_max, s.cosine_r0_correct, s.cosine_rL_correct)
    wrong = cosine_length_reward(lengths, L_max, s.cosine_r0_wrong, s.cosine_rL_wrong)
    return torch.where(outcome == Outcome.CORRECT, correct, torch.where(outcome == Outcome.WRONG, wrong, R))


def length_shaping_of(s: RewardSettings) -> str:
    """The shaping in force: `length_shaping`, or `none` when `length_reward` is off."""
    return s.length_shaping if s.length_reward else "none"


def shape_rewards(
    outcome: torch.Tensor, lengths: torch.Tensor, group: torch.Tensor, cfg: RewardSettings
) -> torch.Tensor:
    """Scalar reward per response (FloatTensor[N], float32) from its outcome and token length."""
    check_batch(outcome, group, lengths=lengths)
    if outcome.numel() == 0:
        return torch.zeros(0, dtype=torch.float32, device=outcome.device)
    if (lengths < 0).any():
        raise ValueError(f"lengths must be >= 0, got min {lengths.min().item()}")
    groups = Groups.of(group)
    R = SHAPINGS[length_shaping_of(cfg)](outcome_rewards(outcome, cfg), outcome, lengths, groups, cfg)
    R = R + overlong_penalty(lengths, L_max=cfg.max_response_len, L_c=cfg.overlong_buffer_len,
                             factor=cfg.overlong_penalty_factor)
    return R.to(torch.float32)
