"""The static memory of one actor rank, exactly: parameters, megatron DDP's gradient buffer, optimizer state.

What a rank holds is fixed by the model's shape and the layout, so it is computed here from the HF config
alone (no weights, no megatron import), the way megatron-core lays it out:

- parameters: this pipeline stage's tensors of the `GPTModel` (`stage_parameters`, in `named_parameters()`
  order), each tensor-parallel one sharded over TP (embedding and output rows, q/k/v and fc1 rows, proj and
  fc2 columns; norms and row-parallel biases replicated), in the parameter dtype. With the distributed
  optimizer, DDP moves them into one padded buffer (`param_data`), whose size is what they then occupy.
- gradient buffer (`grad_data`): one per (param dtype, grad dtype), the parameters back to front; fp32 when
  the parameters are half precision (`grad_reduce_in_fp32`), else the parameter dtype. With the distributed
  optimizer each parameter starts at a multiple of 64 elements and each bucket ends at a multiple of
  lcm(DP, 128); the tied embedding of a pipelined model gets a bucket of its own. Buckets are not split
  otherwise (megatron uses one bucket per buffer without `overlap_grad_reduce`, the actor's setting).
- optimizer state (megatron's Adam on torch's AdamW): `exp_avg` and `exp_avg_sq` in fp32 per parameter
  element, a 4-byte `step` per parameter tensor, and for half-precision parameters an fp32 master copy. The
  distributed optimizer keeps these for this DP rank's slice of each bucket only (the elements of
  parameters inside it; padding gets none); fp32 parameters then need no master copy (megatron uses views
  of the model's own).

Tested against the byte sums of a real built actor's tensors (parameters, DDP buffers, optimizer state after
a step) at TP1, TP2, PP2 and DP2 with the distributed optimizer, fp32 and bf16: tests/plan/test_static_memory.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nemo_lead.models.hf_config import Arch, padded_vocab_size

DTYPE_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8": 2}  # fp8: bf16 parameters, TE's FP8 GEMMs


@dataclass(frozen=True)
class Param:
    name: str
    numel: int
    shared_embedding: bool = False  # the tied embedding / output weight of a pipelined model


def stage_parameters(arch: Arch, tp: int, pp: int, stage: int, vocab_divisible_by: int = 128) -> list[Param]:
    """The parameters of pipeline stage `stage` on one TP rank, in `GPTModel.named_parameters()` order."""
    h, hd = arch.hidden_size, arch.head_dim
    vocab = padded_vocab_size(arch.vocab_size, vocab_divisible_by) // tp
    qkv = (arch.num_heads + 2 * arch.num_kv_heads) * hd // tp
    proj_in, ffn = arch.num_heads * hd // tp, arch.ffn_hidden_size // tp
    first, last = stage == 0, stage == pp - 1
    tied_pp = arch.tied_embeddings and pp > 1
    out: list[Param] = []
    if first:
        out.append(Param("embedding.word_embeddings.weight", vocab * h, shared_embedding=tied_pp))
    per_stage = arch.num_layers // pp
    for i in range(per_stage):
        p = f"decoder.layers.{i}."
        out.append(Param(p + "input_layernorm.weight", h))
        out.append(Param(p + "self_attention.linear_proj.weight", h * proj_in))
        if arch.linear_bias:
            out.append(Param(p + "self_attention.linear_proj.bias", h))
        out.append(Param(p + "self_attention.linear_qkv.weight", qkv * h))
        if arch.qkv_bias:
            out.append(Param(p + "self_attention.linear_qkv.bias", qkv))
        out.append(Param(p + "pre_mlp_layernorm.weight", h))
        out.append(Param(p + "mlp.linear_fc1.weight", 2 * ffn * h))
        if arch.linear_bias:
            out.append(Param(p + "mlp.linear_fc1.bias", 2 * ffn))
        out.append(Param(p + "mlp.linear_fc2.weight", h * ffn))
        if arch.linear_bias:
            out.append(Param(p + "mlp.linear_fc2.bias", h))
    if last:
        out.append(Param("decoder.final_layernorm.weight", h))
        if not arch.tied_embeddings or pp > 1:
            out.append(Param("output_layer.weight", vocab * h, shared_embedding=tied_pp))
    return out


def _pad(n: int, divisor: int) -> int:
    return int(math.ceil(n / divisor) * divisor)


@dataclass(frozen=True)
class GradBuffer:
    """megatron's `_ParamAndGradBuffer` layout: total elements and each parameter's (start, end, bucket)."""

    numel: int
    buckets: list[tuple[int, int]]  # (start, end) element ranges
    index: dict[str, tuple[int, int, int]]  # name -> (start, end, bucket id)


def grad_buffer(params: list[Param], dp: int, distributed_optimizer: bool) -> GradBuffer:
    """The buffer DDP builds for `params` (one dtype group), as megatron-core 0.16-0.19 pads it."""
    start = bucket_start = 0
    buckets: list[tuple[int, int]] = []
    index: dict[str, tuple[int, int, int]] = {}
    members = 0
    divisor = math.lcm(dp, 128)

    def close(end: int) -> int:
        nonlocal bucket_start, members
        end = _pad(end, divisor) if distributed_optimizer else end
        buckets.append((bucket_start, end))
        bucket_start, members = end, 0
        return end

    end = 0
    for p in reversed(params):
        if distributed_optimizer:
            start = _pad(start, 64)
        alone = p.shared_embedding and distributed_optimizer
        if alone and members:
            start = close(start)
        end = start + p.numel
        index[p.name] = (start, end, len(buckets))
        members += 1
        if alone:
            start = close(end)
        else:
            start = end
    if members:
        close(end)
    return GradBuffer(numel=buckets[-1][1] if buckets else 0, buckets=buckets, index=index)


def shard_numels(buffer: GradBuffer, params: list[Param], dp: int, dp_rank: int) -> list[int]:
    """The elements of each parameter in DP rank `dp_rank`'s slice of the buckets (distributed optimizer):
    one entry per parameter that has any."""
    out = []
    for p in params:
        start, end, bucket = buffer.index[p.name]
        b0, b1 = buffer.buckets[bucket]
        size = (b1 - b0) // dp
        lo, hi = b0 + dp_rank * size, b0 + (dp_rank + 1) * size
        n = min(end, hi) - max(start, lo)
        if n > 0:
            out.append(n)
    return out


@dataclass(frozen=True)
class StaticBytes:
    weights: int
    grads: int
    optimizer: int


def static_bytes(arch: Arch, *, tp: int, pp: int, dp: int, stage: int, precision: str,
                 distributed_optimizer: bool, dp_rank: int = 0, vocab_divisible_by: int = 128) -> StaticBytes:
    """Parameters, gradient buffer and optimizer state of one rank (see the module docstring)."""
    params = stage_parameters(arch, tp, pp, stage, vocab_divisible_by)
    e = DTYPE_BYTES[precision]
    half = e == 2
    buffer = grad_buffer(params, dp, distributed_optimizer)
    weights = (buffer.numel if distributed_optimizer else sum(p.numel for p in params)) * e
    grads = buffer.numel * (4 if half else e)
    if distributed_optimizer:
        shards = shard_numels(buffer, params, dp, dp_rank)
        n, tensors = sum(shards), len(shards)
    else:
        n, tensors = sum(p.numel for p in params), len(params)
    optimizer = 8 * n + 4 * tensors + (4 * n if half else 0)
    return StaticBytes(weights=weights, grads=grads, optimizer=optimizer)


def parameter_count(arch: Arch, vocab_divisible_by: int = 128) -> int:
    """Parameters of the whole model (padded vocabulary rows included; a tied output layer counted once)."""
    return sum(p.numel for p in stage_parameters(arch, 1, 1, 0, vocab_divisible_by))
