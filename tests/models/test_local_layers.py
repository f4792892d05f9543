"""The local spec's MLP (`nemo_lead.models.local_layers.SwiGLUMLP`, fc1 as two GEMMs on its gate and up rows)
against megatron's `MLP` with the same weights at TP1 and TP2 (each rank's fc1 shard is [gate shard; up
shard]), with and without fc1 biases and activation recomputation: the same output, input gradient and
weight gradients; configurations it does not cover fall back to megatron's forward. The parity tests
against transformers (tests/models/test_hf_parity, tests/training) run it at every layout."""


import torch
import torch.nn.functional as F

from nemo_lead.models.local_layers import SwiGLUMLP


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
    for tp, with_bias in ((1, False), (2, False), (1, True), (2, True)):
        init_parallel(tp, 1)
        common = dict(num_layers=1, hidden_size=16, ffn_hidden_size=24, num_attention_heads=2, gated_linear_unit=True,
                      activation_func=F.silu, add_bias_linear=with_bias, use_cpu_initialization=True,
                      tensor_model_parallel_size=tp)
        config = TransformerConfig(**common)
        theirs, ours = (cls(config, sub, ffn_hidden_size=24) for cls in (MLP, SwiGLUMLP))
        with torch.no_grad():  # megatron zero-initialises biases: random ones show a misplaced half
            for p in theirs.parameters():
                if p.dim() == 1:
                    p.normal_(generator=torch.Generator().manual_seed(3))
        ours.load_state_dict(theirs.state_dict())
        assert ours._two_gemms(None)
        x = torch.randn(5, 2, 16, generator=torch.Generator().manual_seed(2))
        for name, module in ((f"theirs{with_bias}", theirs), (f"ours{with_bias}", ours)):
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
        out[(tp, f"clamped{with_bias}")] = (b._two_gemms(None), torch.equal(a(x)[0], b(x)[0]))
        destroy_parallel(keep_process_group=True)
    destroy_parallel()
    return out


def test_mlp_matches_megatron_mlp_at_tp1_and_tp2():
    from distributed import run_distributed

    per_rank = run_distributed(_mlp_job, 2)
    for with_bias in (False, True):
        full = per_rank[0][(1, f"theirs{with_bias}")][0]
        for res in per_rank:
            for tp in (1, 2):
                (ref, ref_gx, ref_gw), (y, gx, gw) = res[(tp, f"theirs{with_bias}")], res[(tp, f"ours{with_bias}")]
                assert y.shape == (5, 2, 16) and (y - ref).abs().max() <= 1e-6, (tp, with_bias)
                if not with_bias:  # (the random biases are drawn per shard, so TP2's model differs from TP1's)
                    assert (y - full).abs().max() <= 1e-5  # TP2's all-reduced output is TP1's
                assert (gx - ref_gx).abs().max() <= 1e-6, (tp, with_bias)
                assert len(gw) == len(ref_gw) == 2 + 2 * with_bias, (tp, with_bias)
                # fc2's bias is returned, not added (megatron's skip_bias_add): no gradient on either side
                assert [a is None for a in gw] == [b is None for b in ref_gw] == [False, False, False, True][:len(gw)]
                assert all((a - b).abs().max() <= 1e-6 for a, b in zip(gw, ref_gw) if a is not None), (tp, with_bias)
                # not plain SwiGLU: megatron's forward, the same output
                assert res[(tp, f"clamped{with_bias}")] == (False, True)


def test_gated_fc1_gradients_and_a_second_backward_is_refused():
    import pytest

    from nemo_lead.models.local_layers import _GatedFc1

    g = torch.Generator().manual_seed(4)
    x = torch.randn(3, 2, 5, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(8, 5, dtype=torch.float64, generator=g, requires_grad=True)
    b = torch.randn(8, dtype=torch.float64, generator=g, requires_grad=True)
    up_grad = torch.randn(3, 2, 4, dtype=torch.float64, generator=g)
    for bias in (b, None):  # float64 gradients against autograd through the plain expression
        inputs = (x, w) if bias is None else (x, w, b)
        reference = F.silu(F.linear(x, w[:4], None if bias is None else b[:4])) * F.linear(
            x, w[4:], None if bias is None else b[4:])
        ours = _GatedFc1.apply(x, w, bias)
        assert torch.allclose(ours, reference, atol=1e-12, rtol=0)
        expected = torch.autograd.grad(reference, inputs, up_grad)
        got = torch.autograd.grad(ours, inputs, up_grad)
        assert all(torch.allclose(a, e, atol=1e-12, rtol=0) for a, e in zip(got, expected))
    out = _GatedFc1.apply(x, w, b).sum()
    out.backward(retain_graph=True)  # the backward writes over its saved gate / up buffer ...
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()  # ... so autograd refuses a second pass instead of using overwritten values
