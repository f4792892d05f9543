"""Reward shaping: the paper's length-dependent accuracy reward and explicit penalties (Sec. 3.1-3.2).

For a correct response o_i of a group, with mu and sigma the mean and standard deviation of the token
lengths of the group's *correct* responses:

    z_i = (|o_i| - mu) / (sigma + eps)            (length_z)
    R_i = exp(-alpha z_i)                          (length_reward)

Incorrect responses get `wrong_reward` (the explicit penalty, -1 in the paper), responses with no
final answer or cut at the maximum length get `truncated_reward`, and repetitive ones (stage 2)
get `repetition_reward` with no length term.

Decided edge cases (each has a test):
- one correct response in a group: sigma = 0 so z = 0 and R = 1 (also with the sample std, whose
  n - 1 = 0 would otherwise give NaN; the authors' code sets z = 0 there as well);
- all correct responses of a group equally long: sigma = 0, z = 0, R = 1 for all;
- groups of size 1 and non-adjacent group members are handled like any other group;
- an empty batch returns an empty tensor; NaN/inf or negative lengths raise ValueError.
"""

from __future__ import annotations

import torch

from nemo_lead.algorithms.checks import check_batch
from nemo_lead.algorithms.config import LeadConfig
from nemo_lead.algorithms.groups import Groups
from nemo_lead.algorithms.outcome import Outcome


def length_z(lengths: torch.Tensor, correct: torch.Tensor, groups: Groups, cfg: LeadConfig) -> torch.Tensor:
    """z_i = (|o_i| - mu_q) / (sigma_q + eps) over the correct responses of each group (0 elsewhere)."""
    L = lengths.to(torch.float64)
    unbiased = cfg.length_std == "sample"
    mu = groups.mean(L, where=correct)
    sigma = groups.std(L, where=correct, unbiased=unbiased)
    z = (L - groups.broadcast(mu)) / (groups.broadcast(sigma) + cfg.length_eps)
    return torch.where(correct, z, torch.zeros_like(z))


def length_reward(z: torch.Tensor, alpha: float) -> torch.Tensor:
    """R = exp(-alpha z): shorter-than-usual correct answers earn more than 1, longer ones less."""
    return torch.exp(-alpha * z)


def length_gate(lengths: torch.Tensor, groups: Groups, cfg: LeadConfig) -> torch.Tensor:
    """Authors' code: the length term applies only where the mean of the group's `length_gate_k`
    shortest responses (any outcome) exceeds `length_gate_tokens`. A group of fewer than `length_gate_k`
    responses is always open (their code averages k running minima that start at infinity, so a missing
    one keeps the mean infinite). Returns a per-response bool."""
    if cfg.length_gate_tokens <= 0 or cfg.length_gate_k == 0:
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
    shortest = rank < cfg.length_gate_k
    too_few = groups.size < cfg.length_gate_k
    return groups.broadcast(too_few | (groups.mean(L, where=shortest) > cfg.length_gate_tokens))


def overlong_penalty(lengths: torch.Tensor, cfg: LeadConfig) -> torch.Tensor:
    """DAPO soft overlong punishment: 0 up to L_max - L_c, then linear down to -factor at L_max."""
    if cfg.overlong_buffer_len <= 0:
        return torch.zeros_like(lengths, dtype=torch.float64)
    start = cfg.max_response_len - cfg.overlong_buffer_len
    excess = (lengths.to(torch.float64) - start).clamp(min=0, max=cfg.overlong_buffer_len)
    return -cfg.overlong_penalty_factor * excess / cfg.overlong_buffer_len


def shape_rewards(
    outcome: torch.Tensor, lengths: torch.Tensor, group: torch.Tensor, cfg: LeadConfig
) -> torch.Tensor:
    """Scalar reward per response (FloatTensor[N], float32) from its outcome and token length."""
    check_batch(outcome, group, lengths=lengths)
    if outcome.numel() == 0:
        return torch.zeros(0, dtype=torch.float32, device=outcome.device)
    if (lengths < 0).any():
        raise ValueError(f"lengths must be >= 0, got min {lengths.min().item()}")
    groups = Groups.of(group)
    correct = outcome == Outcome.CORRECT

    R = torch.full(outcome.shape, cfg.wrong_reward, dtype=torch.float64, device=outcome.device)
    R[outcome == Outcome.TRUNCATED] = cfg.truncated_reward
    R[outcome == Outcome.REPETITION] = cfg.repetition_reward
    if cfg.length_reward:
        shaped = length_reward(length_z(lengths, correct, groups, cfg), cfg.alpha)
        gated = length_gate(lengths, groups, cfg)
        R = torch.where(correct, torch.where(gated, shaped, torch.full_like(R, cfg.correct_reward)), R)
    else:
        R[correct] = cfg.correct_reward
    R = R + overlong_penalty(lengths, cfg)
    return R.to(torch.float32)
