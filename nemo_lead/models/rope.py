"""RoPE as two multiply-adds per half: the arithmetic the actor's local spec (`local_layers._RoPEFunction`)
and the rollout engine's decode steps (`nemo_lead.generation.megatron_engine.stage`) share. Plain torch, so the engine imports
it without megatron's layer modules."""

from __future__ import annotations

import torch


def rope(t: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float = 1.0) -> torch.Tensor:
    """Non-interleaved RoPE of t [..., d] with cos / sin [..., rot] broadcasting against it (rot <= d; the rest
    of each head passes through). sign +1: [t1 c1 - t2 s1, t2 c2 + t1 s2] (the rotation); -1:
    [t1 c1 + t2 s2, t2 c2 - t1 s1] (its transpose, for the backward): t cos into a fresh output, then one
    in-place multiply-add per half; no cat, no temporaries. The actor's `_RoPEFunction` and the rollout
    engine's decode steps both use it, so their arithmetic is the same."""
    rot = cos.shape[-1]
    half = rot // 2
    t1, t2 = t[..., :half], t[..., half:rot]
    s1, s2 = sin[..., :half], sin[..., half:]
    out = torch.empty(t.shape, dtype=t.dtype, device=t.device)
    o1, o2 = out[..., :half], out[..., half:rot]
    torch.mul(t[..., :rot], cos, out=out[..., :rot])
    if sign > 0:
        o1.addcmul_(t2, s1, value=-1.0)
        o2.addcmul_(t1, s2)
    else:
        o1.addcmul_(t2, s2)
        o2.addcmul_(t1, s1, value=-1.0)
    if rot < t.shape[-1]:
        out[..., rot:] = t[..., rot:]
    return out
