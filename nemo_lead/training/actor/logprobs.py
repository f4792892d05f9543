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

Two entry points. `token_logprobs(logits, ...)` takes the output layer's logits of a whole micro-batch.
`output_token_logprobs(hidden, weight, ...)` (the actor's default, `actor.logprob_chunk_tokens`) applies the
output layer itself, chunk by chunk along the positions: forward computes each chunk's logits, keeps only
m, S and E_p[z - m] per position and drops the chunk; backward recomputes the chunk's logits from h and W,
forms dL/dz from those saved values, and accumulates dh = dz W and dW += dz^T h (fp32). So no
[positions, V_pad / tp] tensor exists at once: the price is one more output-layer GEMM per micro-batch.
Peak of these temporaries, per micro-batch of T positions, in bytes (measured: bench/logprob_memory.py):
unchunked about 5 x T x V_pad / tp x 4 with the entropy (3 without); chunked 2 x C x V_pad / tp x 4 with
the entropy (1 x without in fp32, 1.5 x in bf16), C = min(chunk, T), plus the fp32 dW accumulator
V_pad / tp x hidden x 4 (and, for bf16 weights, one bf16 product of that shape).

Tested (tests/training/test_actor.py): log-probs and entropies against transformers' log_softmax at TP1,
TP2, PP2 and TP2 x PP2; the gradients through the train step's parity with transformers (gradient norm and
updated weights, with the entropy bonus on) at the same layouts. tests/training/test_chunked_logprobs.py:
chunked = unchunked to 1e-6 (log-probs, entropies, loss, gradient norm, weights after a step) at TP1 (tied
and untied output weights), TP2 and PP2, and no vocabulary-wide tensor larger than a chunk.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.distributed as dist

from nemo_lead.models import mask_vocab_padding


def _tp_group():
    from megatron.core import parallel_state as ps

    if ps.get_tensor_model_parallel_world_size() == 1:
        return None, 0
    return ps.get_tensor_model_parallel_group(), ps.get_tensor_model_parallel_rank()


def _all_reduce(t: torch.Tensor, group, op=dist.ReduceOp.SUM) -> torch.Tensor:
    if group is not None:
        dist.all_reduce(t, op=op, group=group)
    return t


class _Stats(NamedTuple):
    """Per position (all reduced over TP): log p(target), entropy, and what the gradient needs."""

    logp: torch.Tensor
    entropy: torch.Tensor | None
    m: torch.Tensor  # max_v z
    norm: torch.Tensor  # S = sum_v exp(z - m)
    mean_z: torch.Tensor | None  # E_p[z - m]


def _target_columns(targets: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(column of each target in this rank's slice, clamped; whether this rank holds it)."""
    _, rank = _tp_group()
    start = rank * width
    local = (targets >= start) & (targets < start + width)
    return (targets - start).clamp(0, width - 1), local


def _softmax_stats(z: torch.Tensor, targets: torch.Tensor, want_entropy: bool, *, inplace: bool):
    """The forward of the module docstring on z [..., V_local] (fp32, padding masked): (_Stats, p, shifted),
    p = softmax(z) and shifted = z - m on this rank's columns (p is shifted's storage without entropy).
    `inplace`: z may be overwritten (it becomes `shifted`)."""
    group, _ = _tp_group()
    m = _all_reduce(z.max(dim=-1).values, group, dist.ReduceOp.MAX)
    shifted = z.sub_(m.unsqueeze(-1)) if inplace else z - m.unsqueeze(-1)
    cols, local = _target_columns(targets, z.shape[-1])
    target_z = _all_reduce(shifted.gather(-1, cols.unsqueeze(-1)).squeeze(-1) * local, group)
    p = shifted.exp() if want_entropy else torch.exp(shifted, out=shifted)  # reuse memory when we can
    norm = _all_reduce(p.sum(dim=-1), group)
    p.div_(norm.unsqueeze(-1))
    log_norm = norm.log()
    logp = target_z - log_norm
    entropy = mean_z = None
    if want_entropy:
        mean_z = _all_reduce(_row_dot(p, shifted), group)  # E_p[z - m]
        entropy = log_norm - mean_z
    return _Stats(logp, entropy, m, norm, mean_z), p, shifted


def _row_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """sum_v a[..., v] b[..., v] as batched dot products (no [..., V] temporary)."""
    width = a.shape[-1]
    return torch.matmul(a.reshape(-1, 1, width), b.reshape(-1, width, 1)).reshape(a.shape[:-1])


class _VocabParallelLogProbs(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z: torch.Tensor, targets: torch.Tensor, want_entropy: bool):
        stats, p, shifted = _softmax_stats(z, targets, want_entropy, inplace=False)
        cols, local = _target_columns(targets, z.shape[-1])
        if want_entropy:
            ctx.save_for_backward(p, cols, local, shifted, stats.mean_z)
        else:
            ctx.save_for_backward(p, cols, local)
        ctx.want_entropy = want_entropy
        return stats.logp, stats.entropy if want_entropy else torch.zeros_like(stats.logp)

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
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    z = logits.float() if temperature == 1.0 else logits.float() / temperature  # (x / 1 is x: no copy)
    z = mask_vocab_padding(z, vocab_size)  # mask after scaling: min / T is -inf
    logp, ent = _VocabParallelLogProbs.apply(z, targets, entropy)
    return logp, (ent if entropy else None)


# ----------------------------------------------------------------------------- the output layer, in chunks
def _padding_columns(width: int, vocab_size: int, device) -> torch.Tensor | None:
    """Mask [width] of this rank's columns that are vocabulary padding (None when it has none)."""
    _, rank = _tp_group()
    start = rank * width
    if start + width <= vocab_size:
        return None
    return torch.arange(start, start + width, device=device) >= vocab_size


def _chunk_logits(h: torch.Tensor, weight: torch.Tensor, temperature: float, pad: torch.Tensor | None) -> torch.Tensor:
    """z = (h W^T) / T in fp32 with the padding at the lowest float: `token_logprobs`' z for these positions
    (the product in the weights' dtype, as megatron's output layer computes it)."""
    z = torch.matmul(h, weight.t()).float()
    if temperature != 1.0:
        z.div_(temperature)
    if pad is not None:
        z.masked_fill_(pad, torch.finfo(z.dtype).min)
    return z


class _ChunkedOutputLogProbs(torch.autograd.Function):
    """(log p(targets), entropy) of softmax(h W^T / T) for h [N, H], this rank's output weights W [V_local, H],
    `chunk` positions at a time. Forward keeps per position only m, S and E_p[z - m]; backward recomputes each
    chunk's logits from them and accumulates dh and dW (in fp32). No [N, V_local] tensor is ever made."""

    @staticmethod
    def forward(ctx, h, weight, targets, vocab_size: int, temperature: float, want_entropy: bool, chunk: int):
        n = h.shape[0]
        pad = _padding_columns(weight.shape[0], vocab_size, h.device)
        out = {k: torch.zeros(n, dtype=torch.float32, device=h.device) for k in ("logp", "entropy", "m", "norm", "mean_z")}
        for a in range(0, n, chunk):
            stats = _softmax_stats(_chunk_logits(h[a:a + chunk], weight, temperature, pad), targets[a:a + chunk],
                                   want_entropy, inplace=True)[0]  # the chunk's [chunk, V_local] tensors die here
            for k in out:
                if getattr(stats, k) is not None:
                    out[k][a:a + chunk] = getattr(stats, k)
        ctx.save_for_backward(h, weight, targets, out["m"], out["norm"], out["mean_z"])
        ctx.options = (temperature, want_entropy, chunk, pad)
        return out["logp"], out["entropy"]

    @staticmethod
    def backward(ctx, grad_logp: torch.Tensor, grad_entropy: torch.Tensor):
        h, weight, targets, m, norm, mean_z = ctx.saved_tensors
        temperature, want_entropy, chunk, pad = ctx.options
        dh = torch.empty_like(h) if ctx.needs_input_grad[0] else None
        dw = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if ctx.needs_input_grad[1] else None
        product = torch.empty_like(weight) if dw is not None and weight.dtype != torch.float32 else None
        for a in range(0, h.shape[0], chunk):
            rows = slice(a, a + chunk)
            g = grad_logp[rows].unsqueeze(-1)
            shifted = _chunk_logits(h[rows], weight, temperature, pad).sub_(m[rows].unsqueeze(-1))
            if want_entropy:  # d/dz_j = g [j = t] - p_j (g + g_H (z_j - E_p z)), with p (z - E_p z) first (0 at padding)
                p = shifted.exp().div_(norm[rows].unsqueeze(-1))
                shifted.sub_(mean_z[rows].unsqueeze(-1)).mul_(p).mul_(grad_entropy[rows].unsqueeze(-1))
                grad = shifted.addcmul_(p, g).neg_()
                del p
            else:  # d/dz_j = g ([j = t] - p_j)
                grad = shifted.exp_().div_(norm[rows].unsqueeze(-1)).mul_(-g)
            cols, local = _target_columns(targets[rows], weight.shape[0])
            grad.scatter_add_(-1, cols.unsqueeze(-1), g * local.unsqueeze(-1))
            if temperature != 1.0:
                grad.div_(temperature)
            grad = grad.to(h.dtype)  # what reaches the output layer's matmuls, as on the unchunked path
            if dh is not None:
                torch.matmul(grad, weight, out=dh[rows])
            if product is not None:
                dw.add_(torch.matmul(grad.t(), h[rows], out=product))
            elif dw is not None:
                dw.addmm_(grad.t(), h[rows])
            del grad, shifted
        if dw is not None and product is not None:
            dw = product.copy_(dw)
        return dh, dw, None, None, None, None, None


def output_token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    vocab_size: int,
    *,
    chunk_tokens: int,
    temperature: float = 1.0,
    entropy: bool = False,
    sequence_parallel: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """`token_logprobs` of the logits hidden @ weight^T, computed `chunk_tokens` positions at a time (forward
    and backward), so that no [positions, V_pad / tp] tensor exists at once.

    hidden: the decoder's final hidden states [s, b, h] (megatron's layout; with sequence parallelism this
    rank's [s / tp, b, h] shard). weight: this TP rank's output-layer weights [V_pad / tp, h] (the embedding
    when they are tied). targets: [b, s]. Returns [b, s] tensors, as `token_logprobs` on the logits would.
    The TP semantics are the output layer's (megatron's ColumnParallelLinear): the hidden states enter the
    TP region by `copy_to_tensor_model_parallel_region` (their gradient is all-reduced over TP), or with
    sequence parallelism by `gather_from_sequence_parallel_region` (all-gathered; gradient reduce-scattered).
    Peak memory of the [chunk, V / tp] fp32 tensors: 2 with entropy, 1 without (forward and backward).
    Collective over the TP group; differentiable in `hidden` and `weight`.
    """
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel

    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    group = ps.get_tensor_model_parallel_group()
    if sequence_parallel:
        hidden = tensor_parallel.gather_from_sequence_parallel_region(hidden, group=group)
    else:
        hidden = tensor_parallel.copy_to_tensor_model_parallel_region(hidden, group=group)
    s, b, width = hidden.shape
    logp, ent = _ChunkedOutputLogProbs.apply(hidden.reshape(s * b, width), weight, targets.t().reshape(-1),
                                             vocab_size, temperature, entropy, chunk_tokens)
    logp = logp.view(s, b).t().contiguous()
    return logp, (ent.view(s, b).t().contiguous() if entropy else None)
