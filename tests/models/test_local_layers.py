"""The local spec's own layers (`nemo_lead.models.local_layers`) against megatron's.

- SwiGLUMLP (fc1 as two GEMMs on its gate and up rows) against megatron's `MLP` with the same weights at TP1
  and TP2 (each rank's fc1 shard is [gate shard; up shard]), with and without fc1 biases and activation
  recomputation: the same output, input gradient and weight gradients; configurations it does not cover
  fall back to megatron's forward.
- RoPESelfAttention against megatron's `SelfAttention` with the same weights at TP1 and TP2 (output, input
  and weight gradients), with a position tensor, and the fallback to megatron's forward for a tuple of them;
  `_RoPEFunction` against megatron's unfused RoPE in float64 (partial rotary dimension, a strided input).
- RMSNorm against torch's: the same forward, float64 gradients, torch's own path without autograd and for
  other dtypes, refused configurations.
The parity tests against transformers (tests/models/test_hf_parity, tests/training) run them at every layout."""


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
        assert ours.two_gemm_path(None)
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
        out[(tp, f"clamped{with_bias}")] = (b.two_gemm_path(None), torch.equal(a(x)[0], b(x)[0]))
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


def _attention_job():
    """On each rank, at TP1 then TP2: megatron's SelfAttention and RoPESelfAttention with the same weights,
    their outputs and gradients on the same input and RoPE position tensor."""
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.attention import SelfAttention, SelfAttentionSubmodules
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    from nemo_lead.models.attention import SDPAttention
    from nemo_lead.models.local_layers import RoPESelfAttention
    from nemo_lead.parallel import destroy_parallel, init_parallel

    sub = SelfAttentionSubmodules(linear_qkv=ColumnParallelLinear, core_attention=SDPAttention,
                                  linear_proj=RowParallelLinear)
    out = {}
    for tp in (1, 2):
        init_parallel(tp, 1)
        config = TransformerConfig(num_layers=1, hidden_size=32, num_attention_heads=4, num_query_groups=2,
                                   add_qkv_bias=True, attention_dropout=0.0, use_cpu_initialization=True,
                                   tensor_model_parallel_size=tp)
        theirs, ours = (cls(config, sub, layer_number=1, attn_mask_type=AttnMaskType.causal)
                        for cls in (SelfAttention, RoPESelfAttention))
        ours.load_state_dict(theirs.state_dict())
        emb = RotaryEmbedding(kv_channels=8, rotary_percent=0.5, rotary_base=100, use_cpu_initialization=True)(6)
        x = torch.randn(6, 2, 32, generator=torch.Generator().manual_seed(2))
        for name, module in (("theirs", theirs), ("ours", ours)):
            xr = x.clone().requires_grad_(True)
            y, _ = module(xr, None, rotary_pos_emb=emb)
            y.pow(2).sum().backward()
            out[(tp, name)] = (y.detach(), xr.grad, [None if p.grad is None else p.grad.clone() for p in module.parameters()])
            module.zero_grad()
        with torch.no_grad():  # a (q, k) tuple of position tensors: megatron's own forward
            out[(tp, "tuple")] = (ours(x, None, rotary_pos_emb=(emb, emb))[0], theirs(x, None, rotary_pos_emb=emb)[0])
        destroy_parallel(keep_process_group=True)
    destroy_parallel()
    return out


def test_rope_attention_matches_megatron_attention_at_tp1_and_tp2():
    from distributed import run_distributed

    per_rank = run_distributed(_attention_job, 2)
    for res in per_rank:
        for tp in (1, 2):
            (ref, ref_gx, ref_gw), (y, gx, gw) = res[(tp, "theirs")], res[(tp, "ours")]
            assert y.shape == (6, 2, 32) and (y - ref).abs().max() <= 1e-6, tp
            assert (gx - ref_gx).abs().max() <= 1e-6, tp
            # linear_proj's bias is returned, not added (megatron's skip_bias_add): no gradient on either side
            assert [a is None for a in gw] == [b is None for b in ref_gw] and sum(a is None for a in gw) == 1, tp
            assert all((a - b).abs().max() <= 1e-6 for a, b in zip(gw, ref_gw) if a is not None), tp
            assert torch.equal(*res[(tp, "tuple")])
    assert (per_rank[0][(2, "ours")][0] - per_rank[0][(1, "ours")][0]).abs().max() <= 1e-5  # TP2's output is TP1's


def test_rope_function_is_megatrons_rope_and_its_gradient():
    from megatron.core.models.common.embeddings.rope_utils import _apply_rotary_pos_emb_bshd

    from nemo_lead.models.local_layers import _RoPEFunction

    g = torch.Generator().manual_seed(5)
    half = torch.randn(4, 1, 1, 4, dtype=torch.float64, generator=g)
    freqs = torch.cat([half, half], dim=-1)  # rot 8 of each head's 12 dimensions: 4 pass through
    mixed = torch.randn(4, 3, 2, 30, dtype=torch.float64, generator=g, requires_grad=True)
    t = mixed[..., 6:18].unflatten(-1, (1, 12)).squeeze(-2)  # a strided view, as q / k leave the fused QKV
    upstream = torch.randn(4, 3, 2, 12, dtype=torch.float64, generator=g)
    reference = _apply_rotary_pos_emb_bshd(t, freqs)
    ours = _RoPEFunction.apply(t, torch.cos(freqs), torch.sin(freqs))
    assert torch.allclose(ours, reference, atol=1e-12, rtol=0)
    assert torch.equal(ours[..., 8:], t[..., 8:])
    expected, = torch.autograd.grad(reference, mixed, upstream)
    got, = torch.autograd.grad(ours, mixed, upstream)
    assert torch.allclose(got, expected, atol=1e-12, rtol=0)


def test_rmsnorm_matches_torch_and_its_gradient():
    from types import SimpleNamespace

    import pytest

    from nemo_lead.models.local_layers import RMSNorm, _RMSNormFunction

    config = SimpleNamespace(normalization="RMSNorm", sequence_parallel=False, layernorm_zero_centered_gamma=False)
    norm = RMSNorm(config, 6, eps=1e-5)
    ref = torch.nn.RMSNorm(6, eps=1e-5)
    g = torch.Generator().manual_seed(6)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(6, generator=g) + 0.5)
        ref.weight.copy_(norm.weight)
    x = torch.randn(4, 3, 6, generator=g)
    assert torch.equal(norm(x), ref(x))  # torch's arithmetic, in its order
    with torch.no_grad():
        assert torch.equal(norm(x), ref(x))
    assert torch.equal(norm.to(torch.bfloat16)(x.bfloat16()), ref.to(torch.bfloat16)(x.bfloat16()))  # torch's path

    x64 = torch.randn(4, 3, 6, dtype=torch.float64, generator=g, requires_grad=True)
    w64 = (torch.rand(6, dtype=torch.float64, generator=g) + 0.5).requires_grad_(True)
    upstream = torch.randn(4, 3, 6, dtype=torch.float64, generator=g)
    reference = F.rms_norm(x64, (6,), w64, 1e-5)
    ours = _RMSNormFunction.apply(x64, w64, 1e-5)
    assert torch.allclose(ours, reference, atol=1e-12, rtol=0)
    expected = torch.autograd.grad(reference, (x64, w64), upstream)
    got = torch.autograd.grad(ours, (x64, w64), upstream)
    assert all(torch.allclose(a, e, atol=1e-12, rtol=0) for a, e in zip(got, expected))
    # sequence parallelism: the weight is marked so that finalize_model_grads sums its gradient over TP
    sp = RMSNorm(SimpleNamespace(normalization="RMSNorm", sequence_parallel=True, layernorm_zero_centered_gamma=False), 6)
    assert sp.weight.sequence_parallel is True and norm.weight.sequence_parallel is False
    with pytest.raises(ValueError, match="plain RMSNorm"):
        RMSNorm(SimpleNamespace(normalization="RMSNorm", sequence_parallel=False, layernorm_zero_centered_gamma=True), 6)
