"""The local spec's MLP: megatron's `MLP` with its fused fc1 applied as two GEMMs, gate rows and up rows.

Why: megatron's unfused gated MLP (no Transformer Engine, `bias_activation_fusion` off) runs one GEMM into
a [tokens, 2 * ffn] tensor, then `silu(a) * (b + glu_linear_offset)` on `a, b = torch.chunk(y, 2, -1)`.
Everything after the GEMM works on strided halves: SiLU reads the gate half through a view (about 2x slower
than a contiguous tensor on the CPU), the `+ 0.0` offset copies the up half, and the backward of `chunk` is
a `cat` that copies the whole [tokens, 2 * ffn] gradient again. fc1's weight is already laid out as
[gate rows; up rows] (each TP rank's shard too: megatron builds it with stride 2), so two GEMMs on the two
row blocks give contiguous `gate` and `up` directly - what transformers' Qwen2/Llama MLP computes - with no
copies in either direction; autograd adds the two input gradients and fills the weight gradient's two
halves. The parameters, their names, sharding and checkpoints stay megatron's.

Tensor parallelism is megatron's ColumnParallelLinear's, done here explicitly: the input enters the TP
region through `copy_to_tensor_model_parallel_region` (identity forward, all-reduce of the input gradient
in backward), each rank multiplies by its own shard, and fc2 (megatron's RowParallelLinear) reduces.
Anything this does not cover runs megatron's own forward unchanged: other activations or GLU variants
(clamped, offset), MoE per-token scales, sequence parallelism, gathered outputs, expert layers, CPU
activation offloading, or an fc1 that is not megatron's plain ColumnParallelLinear.

Measured (bench/actor_bench.py; RESULTS.md "actor:cpu-gap"): see the benchmark for the step-level figures.
Tested: tests/models/test_local_layers.py (outputs and every gradient against megatron's MLP at TP1 and TP2,
with activation recomputation, with fc1 biases, and the fallbacks), and through every parity test against
transformers (TP1, TP2, PP2, recomputation).
"""

from __future__ import annotations

import torch.nn.functional as F
from megatron.core.transformer.mlp import MLP


class SwiGLUMLP(MLP):
    """megatron's MLP (same submodules, parameters, sharded state dict) computing plain SwiGLU as
    silu(x W_gate^T) * (x W_up^T) with two GEMMs; every other configuration runs megatron's forward."""

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
        n = fc1.weight.shape[0] // 2
        bias = fc1.bias
        gate = F.linear(x, fc1.weight[:n], None if bias is None else bias[:n])
        up = F.linear(x, fc1.weight[n:], None if bias is None else bias[n:])
        return self.linear_fc2(F.silu(gate) * up)
