"""The local spec's MLP (`nemo_lead.models.local_layers`): its SwiGLU against megatron's chunked GLU (forward and
gradients, with and without writing the gradient into the input's memory, a kept graph, bf16, float64
gradcheck) and `SwiGLUMLP` against megatron's `MLP` with the same weights at TP1 and TP2 (each rank's fc1
shard is [gate shard; up shard]; both chunk it the same way), with and without activation recomputation. The
parity tests against transformers (tests/models/test_hf_parity, tests/training) run it at every layout."""


import pytest
import torch
import torch.nn.functional as F

from nemo_lead.models.local_layers import SwiGLUMLP, swiglu


def _megatron_glu(y):  # megatron's unfused gated activation (mlp.py), glu_linear_offset 0
    gate, up = torch.chunk(y, 2, dim=-1)
    return F.silu(gate) * (up + 0.0)


def _fc1_out(dtype=torch.float32, shape=(6, 3, 16)):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(*shape[:-1], 8, generator=g, dtype=dtype)
    w = torch.randn(8, shape[-1], generator=g, dtype=dtype)
    return x, w


@pytest.mark.parametrize("reuse", [False, True])
def test_swiglu_matches_megatron_glu(reuse):
    x, w = _fc1_out()
    grad = torch.randn(6, 3, 8, generator=torch.Generator().manual_seed(1))
    results = []
    for fn in (_megatron_glu, lambda y: swiglu(y, reuse_input=reuse)):
        xr = x.clone().requires_grad_(True)
        y = xr @ w  # a non-leaf, like fc1's output
        out = fn(y)
        out.backward(grad)
        results.append((out.detach(), xr.grad))
    (ref_out, ref_grad), (out, g) = results
    assert torch.equal(out, ref_out)  # the same two torch ops
    assert (g - ref_grad).abs().max() <= 1e-6


def test_swiglu_gradient_reuses_the_input_only_when_the_graph_is_dropped():
    x, w = _fc1_out()
    xr = x.clone().requires_grad_(True)
    y = xr @ w
    seen = {}
    y.register_hook(lambda grad: seen.update(same=grad.data_ptr() == y.data_ptr()))
    swiglu(y, reuse_input=True).sum().backward()
    assert seen["same"]  # the gradient was written into y's own memory (no fresh buffer)
    # retain_graph: y is read again by the second backward, so it must not be overwritten by the first
    xr = x.clone().requires_grad_(True)
    y = xr @ w
    out = swiglu(y, reuse_input=True).sum()
    first = torch.autograd.grad(out, xr, retain_graph=True)[0]
    second = torch.autograd.grad(out, xr)[0]
    assert torch.equal(first, second)
    xm = x.clone().requires_grad_(True)
    assert torch.allclose(first, torch.autograd.grad(_megatron_glu(xm @ w).sum(), xm)[0], atol=1e-6, rtol=0)


def test_swiglu_gradcheck_float64():
    y = torch.randn(3, 2, 10, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: swiglu(t * 1.0, reuse_input=True), (y,))


def test_swiglu_bf16_close_to_fp32():
    x, w = _fc1_out()
    outs, grads = [], []
    for dtype in (torch.float32, torch.bfloat16):
        xr = x.to(dtype).detach().requires_grad_(True)
        out = swiglu(xr @ w.to(dtype), reuse_input=True)
        out.float().pow(2).sum().backward()
        outs.append(out.float())
        grads.append(xr.grad.float())
    assert outs[1].dtype == torch.float32 and (outs[1] - outs[0]).abs().max() <= 0.05 * outs[0].abs().max()
    assert (grads[1] - grads[0]).abs().max() <= 0.05 * grads[0].abs().max()


def test_swiglu_rejects_an_odd_width():
    with pytest.raises(ValueError, match="even last dimension"):
        swiglu(torch.zeros(2, 5))


def _mlp_job():
    """On each rank: megatron's MLP and SwiGLUMLP with the same weights (this rank's shards), at TP1 then TP2;
    the full forward output and this rank's input / weight gradients of both, plus the clamped-GLU fallback."""
    from megatron.core import tensor_parallel
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.mlp import MLP, MLPSubmodules
    from megatron.core.transformer.transformer_config import TransformerConfig

    from nemo_lead.parallel import destroy_parallel, init_parallel

    sub = MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear)
    out = {}
    for tp in (1, 2):
        init_parallel(tp, 1)
        common = dict(num_layers=1, hidden_size=16, ffn_hidden_size=24, num_attention_heads=2, gated_linear_unit=True,
                      activation_func=F.silu, add_bias_linear=False, use_cpu_initialization=True,
                      tensor_model_parallel_size=tp)
        config = TransformerConfig(**common)
        theirs, ours = (cls(config, sub, ffn_hidden_size=24) for cls in (MLP, SwiGLUMLP))
        ours.load_state_dict(theirs.state_dict())
        x = torch.randn(5, 2, 16, generator=torch.Generator().manual_seed(2))
        for name, module in (("theirs", theirs), ("ours", ours)):
            xr = x.clone().requires_grad_(True)

            def fwd(t, m=module):
                return m(t)[0]

            for recompute in (False, True):  # megatron's activation checkpointing replays the forward in backward
                y = tensor_parallel.checkpoint(fwd, False, xr) if recompute else fwd(xr)
                y.pow(2).sum().backward()
            out[(tp, name)] = (y.detach(), xr.grad, [p.grad for p in module.parameters()])
        clamped = TransformerConfig(**common, activation_func_clamp_value=0.5)
        a, b = (cls(clamped, sub, ffn_hidden_size=24) for cls in (MLP, SwiGLUMLP))
        b.load_state_dict(a.state_dict())
        out[(tp, "clamped")] = (b._plain_swiglu(None), torch.equal(a(x)[0], b(x)[0]))
        destroy_parallel(keep_process_group=tp == 1)
    return out


def test_mlp_matches_megatron_mlp_at_tp1_and_tp2():
    from distributed import run_distributed

    per_rank = run_distributed(_mlp_job, 2)
    full = per_rank[0][(1, "theirs")][0]
    for res in per_rank:
        for tp in (1, 2):
            (ref, ref_gx, ref_gw), (y, gx, gw) = res[(tp, "theirs")], res[(tp, "ours")]
            assert y.shape == (5, 2, 16) and (y - ref).abs().max() <= 1e-6, tp
            assert (y - full).abs().max() <= 1e-5  # TP2's all-reduced output is TP1's
            assert (gx - ref_gx).abs().max() <= 1e-6, tp
            assert len(gw) == len(ref_gw) == 2 and all((a - b).abs().max() <= 1e-6 for a, b in zip(gw, ref_gw)), tp
            assert res[(tp, "clamped")] == (False, True)  # not plain SwiGLU: megatron's forward, the same output
