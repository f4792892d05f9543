"""Train/inference mismatch: how far the engine's log-probs are from the actor's for the same tokens.

    m = logprob_mismatch(engine_logprobs, actor_logprobs, mask)   # {"mean", "max", "sum", "count"}

The one computation of it: the policy loss reports it (`mismatch/logprob_abs_mean`, `mismatch/logprob_abs_max`)
whenever it is given the engine's log-probs, and the RL loop logs it every step. Compare the actor's log softmax(logits / T) with the engine's
`Rollout.policy_logprobs` (same temperature, no truncation; see `nemo_lead.generation.engine`): then a correct
refit gives differences at the level of floating-point noise (about 1e-6 in fp32, 1e-2 in bf16), and a
refit bug (stale or misplaced weights) shows up as differences of order one. `sum` and `count` are returned
so data-parallel ranks can combine their figures exactly (all-reduce sum / count, and max).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _flat(values: torch.Tensor | Sequence[Sequence[float]]) -> torch.Tensor:
    if isinstance(values, torch.Tensor):
        return values.detach().double()
    return torch.tensor([v for seq in values for v in seq], dtype=torch.float64)


def logprob_mismatch(
    engine: torch.Tensor | Sequence[Sequence[float]],
    actor: torch.Tensor | Sequence[Sequence[float]],
    mask: torch.Tensor | None = None,
) -> dict[str, float | int]:
    """Mean and max of |engine - actor| over generated tokens.

    Give either two tensors of the same shape (e.g. [B, T] padded, with `mask` [B, T] true on generated
    tokens), or two lists of per-response log-prob lists (e.g. `[r.policy_logprobs for r in rollouts]`),
    which must have the same lengths. Returns floats: mean, max, sum, count (mean and max are 0.0 when
    there are no tokens).
    """
    if isinstance(engine, torch.Tensor) != isinstance(actor, torch.Tensor):
        raise TypeError("give engine and actor log-probs in the same form (both tensors or both lists)")
    if not isinstance(engine, torch.Tensor):
        lengths = [len(s) for s in engine], [len(s) for s in actor]
        if lengths[0] != lengths[1]:
            raise ValueError(f"per-response lengths differ: engine {lengths[0]}, actor {lengths[1]}")
        if mask is not None:
            raise ValueError("mask applies to tensors only; lists already hold generated tokens only")
    a, b = _flat(engine), _flat(actor)
    if a.shape != b.shape:
        raise ValueError(f"engine log-probs have shape {tuple(a.shape)}, actor log-probs {tuple(b.shape)}")
    diff = (a - b.to(a.device)).abs()
    if mask is not None:
        if mask.shape != diff.shape:
            raise ValueError(f"mask has shape {tuple(mask.shape)}, log-probs {tuple(diff.shape)}")
        diff = diff[mask.to(diff.device).bool()]
    diff = diff.reshape(-1)
    count = diff.numel()
    if count == 0:
        return {"mean": 0.0, "max": 0.0, "sum": 0.0, "count": 0}
    total = diff.sum().item()
    return {"mean": total / count, "max": diff.max().item(), "sum": total, "count": count}
