"""Input checks shared by the algorithm functions: wrong shapes or NaN/inf fail loudly, never silently."""

from __future__ import annotations

import torch

from nemo_lead.algorithms.outcome import check_outcomes


def check_same_length(**tensors: torch.Tensor) -> int:
    """All tensors are 1-D with the same length N; return N."""
    sizes = {}
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 1:
            raise ValueError(f"{name} must be 1-D (one value per response), got shape {tuple(t.shape)}")
        sizes[name] = t.shape[0]
    if len(set(sizes.values())) > 1:
        raise ValueError(f"per-response tensors differ in length: {sizes}")
    return next(iter(sizes.values()), 0)


def check_finite(**tensors: torch.Tensor) -> None:
    """Raise ValueError naming the first tensor that holds NaN or inf."""
    for name, t in tensors.items():
        if t is not None and t.is_floating_point() and not torch.isfinite(t).all():
            bad = (~torch.isfinite(t)).nonzero()[0].tolist()
            raise ValueError(f"{name} holds NaN/inf (first at index {bad}); refusing to compute on it")


def check_batch(outcome: torch.Tensor, group: torch.Tensor, **values: torch.Tensor) -> None:
    """The per-response inputs of one global batch: same length, finite `values`, valid outcomes."""
    check_same_length(outcome=outcome, group=group, **values)
    check_finite(**values)
    check_outcomes(outcome)
