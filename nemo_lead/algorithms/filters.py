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

from typing import Protocol

import torch

from nemo_lead.algorithms.checks import check_batch
from nemo_lead.algorithms.groups import Groups
from nemo_lead.algorithms.outcome import Outcome, check_outcomes
from nemo_lead.algorithms.registry import Registry


class FilterSettings(Protocol):
    """What this module reads of the `lead` settings (`LeadConfig` has them all)."""

    group_filter: str  # a name of GROUP_FILTERS
    overlong_filter: bool  # DAPO's overlong filtering on


# `lead.group_filter`: the one list of group filters (LeadConfig accepts exactly these names); each maps
# (rewards float64[N], outcomes[N], groups) to the groups kept, BoolTensor[Q]
GROUP_FILTERS = Registry("lead.group_filter")


@GROUP_FILTERS.register("none")
def keep_every_group(R: torch.Tensor, outcome: torch.Tensor, groups: Groups) -> torch.Tensor:  # noqa: ARG001
    """`none`: BoolTensor[Q] of True."""
    return torch.ones(groups.num, dtype=torch.bool, device=R.device)


@GROUP_FILTERS.register("reference_code")
def reference_code_filter(R: torch.Tensor, outcome: torch.Tensor, groups: Groups) -> torch.Tensor:  # noqa: ARG001
    """`reference_code`: drop a group whose rewards are all <= 0, or all exactly 1."""
    all_nonpositive = groups.max(R) <= 0
    all_one = groups.count(R == 1.0) == groups.size
    return ~(all_nonpositive | all_one)


@GROUP_FILTERS.register("dynamic_sampling")
def dynamic_sampling_filter(R: torch.Tensor, outcome: torch.Tensor, groups: Groups) -> torch.Tensor:  # noqa: ARG001
    """`dynamic_sampling`: keep groups with 0 < #correct < G, decided on raw outcomes, never on rewards."""
    n_correct = groups.count(outcome == Outcome.CORRECT)
    return (n_correct > 0) & (n_correct < groups.size)


def group_keep_mask(
    rewards: torch.Tensor, outcome: torch.Tensor, group: torch.Tensor, cfg: FilterSettings
) -> torch.Tensor:
    """BoolTensor[N]: False for every response of a dropped group."""
    check_batch(outcome, group, rewards=rewards)
    if cfg.group_filter == "none" or rewards.numel() == 0:
        return torch.ones(rewards.shape, dtype=torch.bool, device=rewards.device)
    groups = Groups.of(group)
    return groups.broadcast(GROUP_FILTERS[cfg.group_filter](rewards.to(torch.float64), outcome, groups))


def overlong_keep_mask(outcome: torch.Tensor, cfg: FilterSettings) -> torch.Tensor:
    """BoolTensor[N]: False for TRUNCATED responses when `overlong_filter` is on, True otherwise."""
    check_outcomes(outcome)
    if not cfg.overlong_filter:
        return torch.ones(outcome.shape, dtype=torch.bool, device=outcome.device)
    return outcome != Outcome.TRUNCATED
