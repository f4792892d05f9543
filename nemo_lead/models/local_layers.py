"""The local spec's own layers: megatron's MLP, SelfAttention and torch RMSNorm with their elementwise work
(SwiGLU, RoPE, the norm) as autograd functions with written-out backwards. Parameters, their names,
sharding and checkpoints stay megatron's; what a layer does not cover runs megatron's own forward.

MLP (`SwiGLUMLP`): megatron's unfused gated MLP (no Transformer Engine, `bias_activation_fusion` off) runs
one GEMM into a [tokens, 2 * ffn] tensor, then `silu(a) * (b + glu_linear_offset)` on
`a, b = torch.chunk(y, 2, -1)`. Everything after the GEMM works on strided halves: SiLU reads the gate half
through a view (slower than a contiguous tensor on the CPU), the `+ 0.0` offset copies the up half,
and the backward of `chunk` is a `cat` that copies the whole [tokens, 2 * ffn] gradient again into a freshly
allocated tensor (on the CPU machines a fresh 32 MiB tensor also costs page faults: glibc maps allocations
that large afresh). fc1's weight is laid out as [gate rows; up rows] (each TP rank's shard too: megatron
builds it with stride 2), so `_GatedFc1` multiplies by the two row blocks into contiguous gate and up
tensors, and its backward writes the gate and up gradients over them (they are dead by then) before the
weight and input GEMMs: no copies, no per-step gradient buffers. Tensor parallelism is megatron's
ColumnParallelLinear's, done here explicitly: the input enters the TP region through
`copy_to_tensor_model_parallel_region` (identity forward, all-reduce of the input gradient in backward),
each rank multiplies by its own shard, and fc2 (megatron's RowParallelLinear) reduces. Under sequence
parallelism the input is each rank's slice of the tokens: `_GatedFc1` all-gathers it along the sequence,
saves only the slice for backward (and gathers it again there, as megatron's linears do) and
reduce-scatters the input gradient; fc2 reduce-scatters its output itself. Not covered (megatron's
forward): other activations or GLU variants (clamped, offset), MoE per-token scales, gathered outputs,
expert layers, CPU activation offloading, an fc1 that is not a plain ColumnParallelLinear.

RoPE (`RoPESelfAttention`): megatron's unfused RoPE computes t cos + rotate_half(t) sin with `rotate_half` a
`cat` of negated halves, then `cat`s the pass-through part back, and autograd differentiates each of those.
`_RoPEFunction` (`nemo_lead.models.rope`, shared with the rollout engine) writes t cos into one output and adds each half's rotated term with a multiply-add
(t1 cos1 - t2 sin1, t2 cos2 + t1 sin2: megatron's formula, one rounding fewer per element); its backward is
the transposed rotation, written the same way. It applies where megatron would take that unfused path in
training and scoring (a position tensor, no inference context, no packed sequences, no fusion, not
interleaved, no multi-latent attention, no YaRN scale, RoPE on every layer).

RMSNorm (`RMSNorm`, in place of megatron's `WrappedTorchNorm` -> `torch.nn.RMSNorm`): torch's CPU `rms_norm`
is a composition of elementwise ops, and autograd differentiates it op by op (about sixteen passes over the
activations). `_RMSNormFunction` saves x_hat = x / rms(x) and 1 / rms(x) and computes
dx = (g w - x_hat mean(g w x_hat)) / rms(x) and dw = sum(g x_hat) in five. The forward is torch's
arithmetic in the same order (the same numbers). fp32 / fp64 under autograd only: other dtypes run torch's
(which computes in fp32 internally), and without autograd torch's single call is cheaper. Under sequence
parallelism each TP rank normalises its own tokens; the weight is marked `sequence_parallel`, so megatron's
`finalize_model_grads` sums its gradient over the TP ranks (megatron's torch-norm wrapper refuses SP). The
model's final norm is this class too when SP is on (`nemo_lead.models.gpt`).

Speed: bench/actor_bench.py and bench/vs_trl.py (bench/RESULTS.md). Tested: tests/models/test_local_layers.py
(each layer against megatron's or torch's at TP1 and TP2 where it shards, float64 gradients, the
fallbacks, a second backward through `_GatedFc1` refused), and through every parity test against
transformers (TP1, TP2, PP2, recomputation).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from megatron.core.tensor_parallel import ColumnParallelLinear, copy_to_tensor_model_parallel_region
from megatron.core.transformer.attention import SelfAttention
from megatron.core.transformer.mlp import MLP

from nemo_lead.models.rope import rope


def gate_and_up(x2: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """x2 [tokens, hidden] times fc1's two row blocks W = [W_g; W_u] (plus bias): contiguous gate and up."""
    f = weight.shape[0] // 2
    if bias is None:
        return torch.mm(x2, weight[:f].t()), torch.mm(x2, weight[f:].t())
    return torch.addmm(bias[:f], x2, weight[:f].t()), torch.addmm(bias[f:], x2, weight[f:].t())


def swiglu(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`_GatedFc1`'s forward without autograd (inference: the rollout engine's decode steps), same numbers."""
    gate, up = gate_and_up(x.reshape(-1, x.shape[-1]), weight, bias)
    return (F.silu(gate) * up).view(*x.shape[:-1], up.shape[-1])


class _GatedFc1(torch.autograd.Function):
    """silu(x W_g^T + b_g) * (x W_u^T + b_u) for fc1's weight W = [W_g; W_u] (and bias), with a backward
    that writes the gradients of gate and up into their own (dead) buffer and multiplies once per half.

    Forward: two GEMMs into contiguous gate and up tensors (two [tokens, ffn] tensors rather than one
    [tokens, 2 * ffn]: on the CPU machines glibc maps allocations of 32 MiB and more afresh each time, and
    the page faults cost time per such tensor). Backward: d_up = g * silu(gate) and
    d_gate = silu'(gate) * g * up are written over up and gate (each slot is read before it is written), so no
    [tokens, ffn] gradient is allocated per half; then dW's two halves and dx = d_gate W_g + d_up W_u (one
    GEMM accumulating into the other). gate and up are saved for backward, so a second backward through the
    same graph (retain_graph) is refused by autograd's version check rather than computed from overwritten
    values."""

    @staticmethod
    def forward(ctx, x, weight, bias, sp_group=None):
        full = _gather_tokens(x, sp_group) if sp_group is not None else x
        x2 = full.reshape(-1, full.shape[-1])
        gate, up = gate_and_up(x2, weight, bias)
        silu_gate = F.silu(gate)
        ctx.save_for_backward(x if sp_group is not None else x2, weight, gate, up, silu_gate)
        ctx.x_shape, ctx.has_bias, ctx.sp_group = full.shape, bias is not None, sp_group
        return (silu_gate * up).view(*full.shape[:-1], up.shape[-1])

    @staticmethod
    def backward(ctx, grad):
        x2, weight, gate, up, silu_gate = ctx.saved_tensors
        if ctx.sp_group is not None:  # the slice was saved: gather the tokens again
            x2 = _gather_tokens(x2, ctx.sp_group).reshape(-1, x2.shape[-1])
        f = weight.shape[0] // 2
        g = grad.reshape(-1, f)
        grad_silu = g * up
        torch.mul(g, silu_gate, out=up)  # d up, over up
        torch.ops.aten.silu_backward.grad_input(grad_silu, gate, grad_input=gate)  # d gate, over gate
        grad_w = torch.empty_like(weight)
        torch.mm(gate.t(), x2, out=grad_w[:f])
        torch.mm(up.t(), x2, out=grad_w[f:])
        grad_x = torch.mm(gate, weight[:f]).addmm_(up, weight[f:])
        grad_b = torch.cat([gate.sum(0), up.sum(0)]) if ctx.has_bias else None
        grad_x = grad_x.view(ctx.x_shape)
        if ctx.sp_group is not None:  # every rank's partial gradient of all tokens -> the sum for its slice
            grad_x = _scatter_token_sum(grad_x, ctx.sp_group)
        return grad_x, grad_w, grad_b, None


def _gather_tokens(x: torch.Tensor, group) -> torch.Tensor:
    """[s / tp, ...] slices of the TP ranks -> [s, ...] (sequence parallelism's all-gather along dim 0)."""
    out = torch.empty((x.shape[0] * group.size(), *x.shape[1:]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, x.contiguous(), group=group)
    return out


def _scatter_token_sum(x: torch.Tensor, group) -> torch.Tensor:
    """[s, ...] partial sums on every TP rank -> this rank's [s / tp, ...] slice of their sum."""
    out = torch.empty((x.shape[0] // group.size(), *x.shape[1:]), dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(out, x.contiguous(), group=group)
    return out


class SwiGLUMLP(MLP):
    """megatron's MLP (same submodules, parameters, sharded state dict) computing plain SwiGLU through
    `_GatedFc1`; every other configuration runs megatron's forward."""

    def two_gemm_path(self, per_token_scale) -> bool:
        c, fc1 = self.config, self.linear_fc1
        return (c.gated_linear_unit and c.activation_func is F.silu and per_token_scale is None
                and not c.use_te_activation_func and not c.bias_activation_fusion
                and getattr(c, "activation_func_clamp_value", None) is None
                and not getattr(c, "glu_linear_offset", 0.0)
                and getattr(c, "_cpu_offloading_context", None) is None
                and type(fc1) is ColumnParallelLinear and not fc1.gather_output
                and not fc1.explicit_expert_comm and not fc1.disable_grad_reduce)

    def forward(self, hidden_states, per_token_scale=None, **kwargs):
        if not self.two_gemm_path(per_token_scale):
            return super().forward(hidden_states, per_token_scale=per_token_scale, **kwargs)
        fc1 = self.linear_fc1
        x = hidden_states
        if fc1.tp_group.size() > 1 and fc1.sequence_parallel:
            return self.linear_fc2(_GatedFc1.apply(x, fc1.weight, fc1.bias, fc1.tp_group))
        if fc1.tp_group.size() > 1:
            x = copy_to_tensor_model_parallel_region(x, group=fc1.tp_group)
        return self.linear_fc2(_GatedFc1.apply(x, fc1.weight, fc1.bias))


class _RMSNormFunction(torch.autograd.Function):
    """y = x / sqrt(mean(x^2) + eps) * w over the last dimension, with the backward written out."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        x2 = x.reshape(-1, x.shape[-1])
        rstd = torch.rsqrt(torch.mean(x2 * x2, dim=-1, keepdim=True).add_(eps))
        x_hat = x2 * rstd
        ctx.save_for_backward(x_hat, rstd, weight)
        return (x_hat * weight).view(x.shape)

    @staticmethod
    def backward(ctx, grad):
        x_hat, rstd, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.shape[-1])
        grad_w = torch.sum(g * x_hat, dim=0)
        gw = g * weight
        mean = torch.mean(gw * x_hat, dim=-1, keepdim=True)
        grad_x = gw.sub_(x_hat * mean).mul_(rstd)
        return grad_x.view(grad.shape), grad_w, None


class RMSNorm(torch.nn.RMSNorm):
    """megatron's torch-norm RMSNorm (`WrappedTorchNorm`: same constructor, same `weight`) whose fp32 / fp64
    forward and backward run `_RMSNormFunction`."""

    def __init__(self, config, hidden_size: int, eps: float = 1e-5, **kwargs):
        if config.normalization != "RMSNorm" or config.layernorm_zero_centered_gamma:
            raise ValueError("the local RMSNorm is plain RMSNorm: no zero-centred gamma")
        super().__init__(hidden_size, eps=eps)
        # each TP rank sees its own tokens under SP: finalize_model_grads sums this gradient over TP
        self.weight.sequence_parallel = bool(config.sequence_parallel)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not torch.is_grad_enabled() or x.dtype not in (torch.float32, torch.float64) or x.dtype != self.weight.dtype:
            return super().forward(x)  # no backward to save (scoring, decode steps): torch's one call
        return _RMSNormFunction.apply(x, self.weight, self.eps)


class _RoPEFunction(torch.autograd.Function):
    """Non-interleaved RoPE of t [s, b, heads, d] with cos, sin [s, b | 1, 1, rot] (rot <= d; the rest of each
    head passes through): out = t cos + rotate_half(t) sin, and its backward g cos + rotate_half^T(g sin)."""

    @staticmethod
    def forward(ctx, t, cos, sin):
        ctx.save_for_backward(cos, sin)
        return rope(t, cos, sin)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return rope(grad, cos, sin, sign=-1.0), None, None


class RoPESelfAttention(SelfAttention):
    """megatron's SelfAttention whose unfused RoPE runs as `_RoPEFunction` (see the module docstring): the
    position embedding is held back from megatron's forward and applied to q and k as they leave
    `get_query_key_value_tensors`."""

    _rope: tuple[torch.Tensor, torch.Tensor] | None = None

    def _own_rope(self, kwargs) -> bool:
        c = self.config
        emb = kwargs.get("rotary_pos_emb")
        return (emb is not None and not isinstance(emb, tuple) and emb.shape[-1] % 2 == 0
                and kwargs.get("inference_context") is None and kwargs.get("inference_params") is None
                and kwargs.get("packed_seq_params") is None and not c.apply_rope_fusion
                and not c.rotary_interleaved and not c.multi_latent_attention and not c.no_rope_freq
                and not c.fused_single_qkv_rope and not c.flash_decode and not c.test_mode
                and not c.attention_output_gate and not hasattr(c, "yarn_rotary_scaling_factor"))

    def forward(self, hidden_states, attention_mask, **kwargs):
        if not self._own_rope(kwargs):
            return super().forward(hidden_states, attention_mask, **kwargs)
        emb = kwargs.pop("rotary_pos_emb")
        self._rope = (torch.cos(emb).to(hidden_states.dtype), torch.sin(emb).to(hidden_states.dtype))
        try:
            return super().forward(hidden_states, attention_mask, rotary_pos_emb=None, **kwargs)
        finally:
            self._rope = None

    def get_query_key_value_tensors(self, hidden_states, *args, **kwargs):
        qkv = super().get_query_key_value_tensors(hidden_states, *args, **kwargs)
        if self._rope is None:
            return qkv
        q, k, v = qkv
        cos, sin = self._rope
        return _RoPEFunction.apply(q, cos, sin), _RoPEFunction.apply(k, cos, sin), v
