"""The local spec's core attention (torch SDPA) against megatron's own DotProductAttention: the same outputs
and input gradients for causal GQA attention and for an explicit mask; unsupported inputs fail loudly.
In process (TP1 through a stand-in process-group collection), the CPU layer on for megatron's CUDA calls."""

from types import SimpleNamespace

import pytest
import torch

from nemo_lead.models.attention import CAUSAL_BLOCK, block_causal_attention
from nemo_lead.parallel import cpu

pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="compares on the CPU")


@pytest.fixture
def modules():
    from megatron.core import parallel_state as ps
    from megatron.core import tensor_parallel
    from megatron.core.transformer.dot_product_attention import DotProductAttention
    from megatron.core.transformer.enums import AttnMaskType
    from megatron.core.transformer.transformer_config import TransformerConfig

    from nemo_lead.models.attention import SDPAttention

    cpu.enable()
    ps._set_global_memory_buffer()  # megatron's attention takes its score buffer from there
    tensor_parallel.get_cuda_rng_tracker().add("model-parallel-rng", 1)  # and forks this stream for dropout
    try:
        config = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                                   kv_channels=16, attention_dropout=0.0, use_cpu_initialization=True)
        tp1 = SimpleNamespace(tp=SimpleNamespace(size=lambda: 1, rank=lambda: 0))
        args = (config, 1, AttnMaskType.causal, "self")
        yield DotProductAttention(*args, pg_collection=tp1), SDPAttention(*args, pg_collection=tp1)
    finally:
        ps.destroy_global_memory_buffer()
        cpu.disable()


def _qkv(s=12, b=3):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(s, b, 4, 16, generator=g, requires_grad=True)
    k = torch.randn(s, b, 2, 16, generator=g, requires_grad=True)
    v = torch.randn(s, b, 2, 16, generator=g, requires_grad=True)
    return q, k, v


@pytest.mark.parametrize("masked, s", [(False, 12), (True, 12), (False, 2 * CAUSAL_BLOCK + 37)])
def test_sdpa_matches_megatron_attention(modules, masked, s):
    """s = 2 * CAUSAL_BLOCK + 37: causal attention runs block by block on the CPU (three blocks, a short last one)."""
    theirs, ours = modules
    mask = None
    if masked:  # causal plus the last 4 keys hidden from every query (True = masked out, megatron's convention)
        mask = torch.ones(s, s).triu(1).bool() | (torch.arange(s) >= s - 4)
        mask = mask.expand(3, 1, s, s)
    outs, grads = [], []
    for module in (theirs, ours):
        q, k, v = _qkv(s)
        out = module(q, k, v, mask)
        out.pow(2).sum().backward()
        outs.append(out)
        grads.append([q.grad, k.grad, v.grad])
    assert outs[0].shape == outs[1].shape == (s, 3, 64)
    assert (outs[0] - outs[1]).abs().max() < 1e-5
    for a, b in zip(*grads):
        assert (a - b).abs().max() < 1e-4


@pytest.mark.parametrize("s", [CAUSAL_BLOCK, 2 * CAUSAL_BLOCK, 3 * CAUSAL_BLOCK - 1])
def test_block_causal_attention_equals_one_causal_sdpa(s):
    """Blocks of queries against their visible keys give causal SDPA's output and gradients (to rounding);
    the last block's query sees exactly keys 0..s-1 and the first block's last query keys 0..block-1."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, h, s, 16, generator=g, requires_grad=True) for h in (4, 2, 2))
    results = []
    for fn in ("sdpa", "blocks"):
        if fn == "sdpa":
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            out = out.permute(2, 0, 1, 3).reshape(s, 2, -1)
        else:
            out = block_causal_attention(q, k, v, CAUSAL_BLOCK, enable_gqa=True)
        grads = torch.autograd.grad(out.pow(2).sum(), (q, k, v))
        results.append((out, grads))
    (a, ga), (b, gb) = results
    assert a.shape == b.shape == (s, 2, 64)
    assert (a - b).abs().max() < 1e-5
    for x, y in zip(ga, gb):
        assert (x - y).abs().max() < 1e-4
    # a change to a future key must not reach an earlier query (the masks are causal, not just the result)
    k2 = k.detach().clone()
    k2[:, :, -1] += 10.0
    c = block_causal_attention(q.detach(), k2, v.detach(), CAUSAL_BLOCK, enable_gqa=True)
    assert torch.equal(c[:-1], b.detach()[:-1]) and not torch.equal(c[-1], b.detach()[-1])


def test_unsupported_inputs_fail_loudly(modules):
    _, ours = modules
    q, k, v = _qkv()
    with pytest.raises(NotImplementedError, match="packed sequences"):
        ours(q, k, v, None, packed_seq_params=object())
    with pytest.raises(ValueError, match="as many keys as queries"):
        ours(q, k[:5], v[:5], None)
