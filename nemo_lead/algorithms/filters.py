"""Which responses take part in the policy update.

`group_keep_mask` drops whole groups that carry no learning signal (`group_filter`):

    none              keep everything (the paper does not filter)
    reference_code    the authors' code: drop a group when all its rewards are <= 0 (nothing right), or
                      all are exactly 1 (all right with no length shaping); length-shaped all-correct
                      groups (rewards != 1) are kept, since their advantages still rank lengths
    dynamic_sampling  DAPO: keep groups with 0 < #correct < G (the caller resamples to refill the batch)

`overlong_keep_mask` is DAPO's overlong filtering: truncated responses are masked out of the loss so
that a cut-off chain of thought is not punished for being cut (`overlong_filter=True`).
"""

from __future__ import annotations

import torch

from .checks import check_batch
from .config import LeadConfig
from .groups import Groups
from .outcome import Outcome, check_outcomes


def group_keep_mask(
    rewards: torch.Tensor, outcome: torch.Tensor, group: torch.Tensor, cfg: LeadConfig
) -> torch.Tensor:
    """BoolTensor[N]: False for every response of a dropped group."""
    check_batch(outcome, group, rewards=rewards)
    if cfg.group_filter == "none" or rewards.numel() == 0:
        return torch.ones(rewards.shape, dtype=torch.bool, device=rewards.device)
    groups = Groups.of(group)
    if cfg.group_filter == "reference_code":
        R = rewards.to(torch.float64)
        all_nonpositive = groups.max(R) <= 0
        all_one = (groups.count(R == 1.0) == groups.size)
        keep_q = ~(all_nonpositive | all_one)
    else:  # dynamic_sampling
        n_correct = groups.count(outcome == Outcome.CORRECT)
        keep_q = (n_correct > 0) & (n_correct < groups.size)
    return groups.broadcast(keep_q)


def overlong_keep_mask(outcome: torch.Tensor, cfg: LeadConfig) -> torch.Tensor:
    """BoolTensor[N]: False for TRUNCATED responses when `overlong_filter` is on, True otherwise."""
    check_outcomes(outcome)
    if not cfg.overlong_filter:
        return torch.ones(outcome.shape, dtype=torch.bool, device=outcome.device)
    return outcome != Outcome.TRUNCATED
