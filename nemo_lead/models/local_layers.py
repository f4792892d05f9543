"""The local spec's MLP: megatron's `MLP` whose fc1 + SwiGLU run as one autograd function, two GEMMs.

Why: megatron's unfused gated MLP (no Transformer Engine, `bias_activation_fusion` off) runs one GEMM into
a [tokens, 2 * ffn] tensor, then `silu(a) * (b + glu_linear_offset)` on `a, b = torch.chunk(y, 2, -1)`.
Everything after the GEMM works on strided halves: SiLU reads the gate half through a view (about 2x slower
than a contiguous tensor on the CPU), the `+ 0.0` offset copies the up half, and the backward of `chunk` is
a `cat` that copies the whole [tokens, 2 * ffn] gradient again into a freshly allocated tensor (on the CPU
machines a fresh 32 MiB tensor also costs ~13 ms of page faults: glibc maps allocations that large afresh).
fc1's weight is laid out as [gate rows; up rows] (each TP rank's shard too: megatron builds it with stride
2), so `_GatedFc1` multiplies by the two row blocks into contiguous gate and up tensors, and its backward
writes the gate and up gradients over them (they are dead by then) before the weight and input GEMMs. No copies, no per-step gradient buffers; the parameters, their names, sharding and
checkpoints stay megatron's.

Tensor parallelism is megatron's ColumnParallelLinear's, done here explicitly: the input enters the TP
region through `copy_to_tensor_model_parallel_region` (identity forward, all-reduce of the input gradient
in backward), each rank multiplies by its own shard, and fc2 (megatron's RowParallelLinear) reduces.
Anything this does not cover runs megatron's own forward unchanged: other activations or GLU variants
(clamped, offset), MoE per-token scales, sequence parallelism, gathered outputs, expert layers, CPU
activation offloading, or an fc1 that is not megatron's plain ColumnParallelLinear.

Measured (one CPU thread, 4096 tokens, hidden 256, ffn 1024, MLP forward + backward, same process):
megatron's MLP 266-300 ms, this one 241-248 ms; whole train steps: bench/actor_bench.py (bench/RESULTS.md).
Tested: tests/models/test_local_layers.py (outputs and every gradient against megatron's MLP at TP1 and TP2,
with activation recomputation and fc1 biases; float64 gradients; a second backward is refused; the
fallbacks), and through every parity test against transformers (TP1, TP2, PP2, recomputation).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from megatron.core.transformer.mlp import MLP


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
    the page faults cost ~13 ms per such tensor). Backward: d_up = g * silu(gate) and
    d_gate = silu'(gate) * g * up are written over up and gate (each slot is read before it is written), so no
    [tokens, ffn] gradient is allocated per half; then dW's two halves and dx = d_gate W_g + d_up W_u (one
    GEMM accumulating into the other). gate and up are saved for backward, so a second backward through the
    same graph (retain_graph) is refused by autograd's version check rather than computed from overwritten
    values."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        x2 = x.reshape(-1, x.shape[-1])
        gate, up = gate_and_up(x2, weight, bias)
        silu_gate = F.silu(gate)
        ctx.save_for_backward(x2, weight, gate, up, silu_gate)
        ctx.x_shape, ctx.has_bias = x.shape, bias is not None
        return (silu_gate * up).view(*x.shape[:-1], up.shape[-1])

    @staticmethod
    def backward(ctx, grad):
        x2, weight, gate, up, silu_gate = ctx.saved_tensors
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
        return grad_x.view(ctx.x_shape), grad_w, grad_b


class SwiGLUMLP(MLP):
    """megatron's MLP (same submodules, parameters, sharded state dict) computing plain SwiGLU through
    `_GatedFc1`; every other configuration runs megatron's forward."""

    def _two_gemms(self, per_token_scale) -> bool:
        from megatron.core.tensor_parallel import ColumnParallelLinear

        c, fc1 = self.config, self.linear_fc1
        return (c.gated_linear_unit and c.activation_func is F.silu and per_token_scale is None
                and not c.use_te_activation_func and not c.bias_activation_fusion
                and getattr(c, "activation_func_clamp_value", None) is None
                and not getattr(c, "glu_linear_offset", 0.0)
                and getattr(c, "_cpu_offloading_context", None) is None
                and type(fc1) is ColumnParallelLinear and not fc1.sequence_parallel and not fc1.gather_output
                and not fc1.explicit_expert_comm and not fc1.disable_grad_reduce)

    def forward(self, hidden_states, per_token_scale=None, **kwargs):
        if not self._two_gemms(per_token_scale):
            return super().forward(hidden_states, per_token_scale=per_token_scale, **kwargs)
        fc1 = self.linear_fc1
        x = hidden_states
        if fc1.tp_group.size() > 1:
            from megatron.core.tensor_parallel import copy_to_tensor_model_parallel_region

            x = copy_to_tensor_model_parallel_region(x, group=fc1.tp_group)
        return self.linear_fc2(_GatedFc1.apply(x, fc1.weight, fc1.bias))
