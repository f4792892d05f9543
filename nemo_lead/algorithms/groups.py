"""Segment statistics over groups of responses (one group = the G samples of one prompt).

Inputs are flat per-response tensors; `group` holds any integer id per response and the responses of
one group need not be adjacent. Every function here maps ids to dense indices 0..Q-1 with
`torch.unique(..., return_inverse=True)` and reduces with `index_add`, so a whole global batch is
processed without Python loops over groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Groups:
    """Dense view of a `group` id tensor: `index[i]` in 0..num-1 is the group of response i."""

    index: torch.Tensor  # LongTensor[N]
    num: int
    size: torch.Tensor  # FloatTensor[Q]: responses per group

    @classmethod
    def of(cls, group: torch.Tensor) -> Groups:
        if group.dim() != 1:
            raise ValueError(f"group must be a 1-D tensor of ids, got shape {tuple(group.shape)}")
        if group.dtype.is_floating_point:
            raise ValueError(f"group must hold integer ids, got dtype {group.dtype}")
        _, index = torch.unique(group, return_inverse=True)
        num = int(index.max()) + 1 if index.numel() else 0
        size = torch.zeros(num, dtype=torch.float64, device=group.device).index_add_(
            0, index, torch.ones_like(index, dtype=torch.float64)
        )
        return cls(index=index, num=num, size=size)

    def sum(self, x: torch.Tensor) -> torch.Tensor:
        """Per-group sum of a per-response tensor -> [Q]."""
        return torch.zeros(self.num, dtype=x.dtype, device=x.device).index_add_(0, self.index, x)

    def count(self, where: torch.Tensor) -> torch.Tensor:
        """Per-group number of responses where `where` is True -> [Q] (float64)."""
        return self.sum(where.to(torch.float64))

    def mean(self, x: torch.Tensor, where: torch.Tensor | None = None) -> torch.Tensor:
        """Per-group mean of `x` over responses where `where` (all if None); 0 for empty selections."""
        w = torch.ones_like(x) if where is None else where.to(x.dtype)
        n = self.sum(w)
        return self.sum(x * w) / n.clamp_min(1)

    def std(self, x: torch.Tensor, where: torch.Tensor | None = None, unbiased: bool = False) -> torch.Tensor:
        """Per-group standard deviation over responses where `where`.

        unbiased=True divides by n - 1 (the sample std); a selection of one response then has std 0
        (not NaN): a lone value carries no spread, and callers treat std 0 as "no signal".
        """
        w = torch.ones_like(x) if where is None else where.to(x.dtype)
        n = self.sum(w)
        mu = self.sum(x * w) / n.clamp_min(1)
        dev2 = self.sum(((x - mu[self.index]) ** 2) * w)
        denom = (n - 1) if unbiased else n
        return torch.sqrt(dev2 / denom.clamp_min(1))

    def max(self, x: torch.Tensor) -> torch.Tensor:
        """Per-group maximum -> [Q]."""
        out = torch.full((self.num,), float("-inf"), dtype=x.dtype, device=x.device)
        return out.scatter_reduce(0, self.index, x, reduce="amax")

    def min(self, x: torch.Tensor) -> torch.Tensor:
        """Per-group minimum -> [Q]."""
        out = torch.full((self.num,), float("inf"), dtype=x.dtype, device=x.device)
        return out.scatter_reduce(0, self.index, x, reduce="amin")

    def broadcast(self, per_group: torch.Tensor) -> torch.Tensor:
        """[Q] -> [N]: the value of each response's group."""
        return per_group[self.index]
