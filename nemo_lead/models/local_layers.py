"""The local spec's MLP: megatron's `MLP` with a SwiGLU whose backward writes fc1's output gradient in place.

Why: megatron's unfused gated MLP (no Transformer Engine, `bias_activation_fusion` off) computes
`silu(a) * (b + glu_linear_offset)` on `a, b = torch.chunk(fc1_out, 2, -1)`. Autograd then pays for copies
that do no arithmetic: the `+ 0.0` offset copies half of fc1's output in the forward, and the backward of
`chunk` is a `cat` that copies the whole [tokens, 2 * ffn] gradient once more. `swiglu` reads the two halves
as views and writes both halves of the gradient into one buffer: fc1's own output, which is dead by then, so
the backward allocates no [tokens, 2 * ffn] tensor at all unless the graph is kept (less peak memory on any device; on the CPU
machines a fresh 32 MiB buffer also costs ~13 ms of page faults). Measured on one CPU thread, 4096 tokens,
hidden 256, ffn 1024, fc1 + activation + fc2 forward and backward: 185 ms with megatron's activation, 173 ms
with `swiglu` into a fresh buffer, 162 ms reusing fc1's output. In a 4-layer train step
(bench/actor_bench.py, profile of 3 steps) the `cat`s fell from 210 to 53 ms and the `+ 0.0` adds (93 ms)
went away.

Same numbers as megatron's: the forward is the same two torch ops, the backward is autograd's own
(`silu_backward`, two multiplies) without the copies. Tensor parallel: each rank's fc1 shard is
[gate shard; up shard] (megatron builds fc1 with stride 2 for that), so chunking the local output in two is
exactly what megatron does at any TP. Works in any dtype and on any device; activation recomputation
replays it like any other autograd function. Cases it does not cover (clamped or offset GLUs, other
activations, MoE's per-token scales) go to megatron's own forward unchanged.

Tested: tests/models/test_local_layers.py (against megatron's MLP, gradcheck), and through every parity
test against transformers (TP1, TP2, PP2, recomputation).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from megatron.core.transformer.mlp import MLP


def _graph_is_kept() -> bool:
    """True when the running backward keeps its graph (retain_graph / create_graph: saved tensors will be read
    again), or when this torch cannot tell."""
    probe = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
    return True if probe is None else bool(probe())


class _SwiGLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, y: torch.Tensor, reuse_input: bool) -> torch.Tensor:
        n = y.shape[-1] // 2
        silu_gate = F.silu(y[..., :n])
        ctx.save_for_backward(y, silu_gate)
        ctx.reuse_input = reuse_input
        return silu_gate * y[..., n:]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        y, silu_gate = ctx.saved_tensors
        n = y.shape[-1] // 2
        gate, up = y[..., :n], y[..., n:]
        grad_gate_out = grad * up  # read `up` before it may be overwritten below
        reuse = ctx.reuse_input and y.is_contiguous() and y.dtype == grad.dtype and not _graph_is_kept()
        grad_y = y if reuse else torch.empty_like(y, memory_format=torch.contiguous_format)
        torch.mul(grad, silu_gate, out=grad_y[..., n:])
        # element by element in place when grad_y is y: each gate value is read before its slot is written
        torch.ops.aten.silu_backward.grad_input(grad_gate_out, gate, grad_input=grad_y[..., :n])
        return grad_y, None


def swiglu(y: torch.Tensor, *, reuse_input: bool = False) -> torch.Tensor:
    """silu(y[..., :n]) * y[..., n:] for y [..., 2n]; its gradient is one contiguous [..., 2n] tensor (no cat).

    `reuse_input=True`: the backward writes y's gradient into y's own memory (y is dead by then) instead of
    a fresh buffer, when y is contiguous and the graph is not kept for another backward. Only for a y that
    nothing else reads after the forward (the MLP's fc1 output); torch's version counter turns any other
    later reader of y in the same graph into an error, not a wrong number."""
    if y.shape[-1] % 2:
        raise ValueError(f"swiglu needs an even last dimension, got {tuple(y.shape)}")
    return _SwiGLU.apply(y, reuse_input)


class SwiGLUMLP(MLP):
    """megatron's MLP (same submodules, parameters, sharded state dict) with `swiglu` as its activation when
    the config asks for plain SwiGLU; every other configuration runs megatron's forward."""

    def _plain_swiglu(self, per_token_scale) -> bool:
        c = self.config
        return (c.gated_linear_unit and c.activation_func is F.silu and per_token_scale is None
                and not c.use_te_activation_func and not c.bias_activation_fusion
                and getattr(c, "activation_func_clamp_value", None) is None
                and not getattr(c, "glu_linear_offset", 0.0))

    def forward(self, hidden_states, per_token_scale=None, **kwargs):
        if not self._plain_swiglu(per_token_scale):
            return super().forward(hidden_states, per_token_scale=per_token_scale, **kwargs)
        intermediate, bias = self.linear_fc1(hidden_states)
        if bias is not None:
            intermediate = intermediate + bias
        return self.linear_fc2(swiglu(intermediate, reuse_input=True))
