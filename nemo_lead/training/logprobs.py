"""Per-token log-probs (and entropy) straight from vocab-parallel logits, differentiable, without gathering
the vocabulary.

The last pipeline stage holds logits [b, s, V_pad / tp]: each TP rank a contiguous slice of the padded
vocabulary. For the policy loss we need, per position, log p(target) and optionally the entropy
H = -sum_v p_v log p_v of softmax(logits / T) over the *real* vocabulary. Gathering [b, s, V] (V = 152k for
Qwen2) on every rank would cost a full copy of the logits; instead each rank works on its slice and three
small all-reduces over the TP group give the global max, the partition function and E_p[z]:

    z = logits / T, padded columns -> lowest float (`nemo_lead.models.mask_vocab_padding`)
    m = max_v z (all-reduce MAX)     S = sum_v exp(z - m) (all-reduce SUM)     p = exp(z - m) / S
    log p(t) = (z_t - m) - log S     (z_t from the rank that holds column t: all-reduce SUM)
    H = log S - sum_v p_v (z_v - m)  (all-reduce SUM)

Backward needs no communication: every TP rank computes the same loss from the same reduced values, so
the gradient for its own columns is local:  d log p(t)/dz_j = [j = t] - p_j  and  dH/dz_j = -p_j (z_j - E_p z).
Padded columns get p = 0 exactly, hence zero gradient; the lowest finite value (not -inf) keeps
p * z = 0 rather than NaN. Megatron's `vocab_parallel_cross_entropy` gives the same log-probs but
overwrites its input in place and has no entropy, which the entropy bonus needs from the same logits.

Tested (tests/training/test_actor.py): log-probs and entropies against transformers' log_softmax at TP1,
TP2, PP2 and TP2 x PP2; the gradients through the train step's parity with transformers (gradient norm and
updated weights, with the entropy bonus on) at the same layouts.
"""

from __future__ import annotations

import torch
import torch.distributed as dist


def _tp_group():
    from megatron.core import parallel_state as ps

    if ps.get_tensor_model_parallel_world_size() == 1:
        return None, 0
    return ps.get_tensor_model_parallel_group(), ps.get_tensor_model_parallel_rank()


def _all_reduce(t: torch.Tensor, group, op=dist.ReduceOp.SUM) -> torch.Tensor:
    if group is not None:
        dist.all_reduce(t, op=op, group=group)
    return t


class _VocabParallelLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor, targets: torch.Tensor, want_entropy: bool):
        group, rank = _tp_group()
        width = z.shape[-1]
        start = rank * width
        m = _all_reduce(z.max(dim=-1).values, group, dist.ReduceOp.MAX)
        shifted = z - m.unsqueeze(-1)
        local = (targets >= start) & (targets < start + width)
        cols = (targets - start).clamp(0, width - 1)
        target_z = _all_reduce(shifted.gather(-1, cols.unsqueeze(-1)).squeeze(-1) * local, group)
        p = shifted.exp() if want_entropy else torch.exp(shifted, out=shifted)  # reuse memory when we can
        norm = _all_reduce(p.sum(dim=-1), group)
        p.div_(norm.unsqueeze(-1))
        log_norm = norm.log()
        logp = target_z - log_norm
        if want_entropy:
            mean_z = _all_reduce((p * shifted).sum(dim=-1), group)  # E_p[z - m]
            entropy = log_norm - mean_z
            ctx.save_for_backward(p, cols, local, shifted, mean_z)
        else:
            entropy = torch.zeros_like(logp)
            ctx.save_for_backward(p, cols, local)
        ctx.want_entropy = want_entropy
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: torch.Tensor, grad_entropy: torch.Tensor):
        p, cols, local = ctx.saved_tensors[:3]
        grad = p * -grad_logp.unsqueeze(-1)
        grad.scatter_add_(-1, cols.unsqueeze(-1), (grad_logp * local).unsqueeze(-1))
        if ctx.want_entropy and grad_entropy is not None:
            shifted, mean_z = ctx.saved_tensors[3:]
            grad -= p * (shifted - mean_z.unsqueeze(-1)) * grad_entropy.unsqueeze(-1)
        return grad, None, None


def token_logprobs(
    logits: torch.Tensor,
    targets: torch.Tensor,
    vocab_size: int,
    *,
    temperature: float = 1.0,
    entropy: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(log p(targets), entropy or None) of softmax(logits / temperature) over the real vocabulary.

    logits: this TP rank's vocab-parallel slice [..., V_pad / tp] (any float dtype; computed in fp32).
    targets: global token ids [...]. Collective over the TP group; every TP rank gets the same result.
    Differentiable in `logits` (both outputs).
    """
    from nemo_lead.models import mask_vocab_padding

    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    z = logits.float() if temperature == 1.0 else logits.float() / temperature  # (x / 1 is x: no copy)
    z = mask_vocab_padding(z, vocab_size)  # mask after scaling: min / T is -inf
    logp, ent = _VocabParallelLogProbs.apply(z, targets, entropy)
    return logp, (ent if entropy else None)
