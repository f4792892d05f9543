"""The core attention of the local layer spec: torch's `scaled_dot_product_attention` in place of megatron's
`DotProductAttention`.

Why: without Transformer Engine (every CPU machine, and GPU boxes without TE) megatron's local spec
computes attention unfused: it materialises the [b, heads, s, s] scores, masks them in place (which makes
autograd copy the whole gradient of the scores again), softmaxes in fp32 and multiplies. torch's SDPA runs
a fused, memory-efficient kernel instead (flash attention on CPU and on recent GPUs), with the same
result. Measured on a 4-layer hidden-256 Qwen2 at 8 x 512 tokens, one CPU thread: a train step took 2.18 s
with megatron's attention and 1.72 s with this one (bench/actor_bench.py). q, k and v are copied to
contiguous [b, heads, s, hn] first on the CPU: torch's CPU flash kernel reads megatron's [s, b, ...] layout through a
permuted view more slowly than it copies it (fwd + bwd of one layer's attention at 8 x 512 tokens: 106 ms
from the view, 99 ms with the copies). GPU kernels take the views as they are; copies there would only add
launches (the H200 runs in bench/RESULTS.md are partly host-bound).

Same contract as `DotProductAttention` (megatron-core 0.16-0.19): query [sq, b, np, hn], key / value
[sk, b, ng, hn] (GQA: ng query groups, shared by np / ng heads each), `attention_mask` None for causal
attention or a boolean mask with True = masked out; returns [sq, b, np * hn]. Attention dropout forks
megatron's model-parallel RNG tracker, as megatron does, so activation recomputation replays the same
masks. Not supported (they fail loudly): packed sequences, attention bias, sliding windows, softmax
variants other than "vanilla", context parallelism - Transformer Engine's attention covers those.

Tested: through every logits / log-prob / training parity test against transformers (tests/models,
tests/training), including dropout with activation recomputation (tests/parallel/test_cpu_compat.py).
"""

from __future__ import annotations

import math

import torch
from megatron.core.transformer.module import MegatronModule

_GQA_KWARG = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


class SDPAttention(MegatronModule):
    def __init__(self, config, layer_number: int, attn_mask_type, attention_type: str,
                 attention_dropout: float | None = None, softmax_scale: float | None = None, cp_comm_type=None,
                 pg_collection=None):
        super().__init__(config=config)
        from megatron.core import parallel_state as ps

        if config.context_parallel_size != 1:
            raise NotImplementedError("context parallelism needs Transformer Engine's attention (layer spec 'te')")
        if getattr(config, "window_size", None) is not None:
            raise NotImplementedError("sliding-window attention needs Transformer Engine's attention (layer spec 'te')")
        if getattr(config, "softmax_type", "vanilla") != "vanilla":
            raise NotImplementedError(f"softmax_type {config.softmax_type!r} is not supported by the local attention")
        tp = pg_collection.tp.size() if pg_collection is not None else ps.get_tensor_model_parallel_world_size()
        self.heads = config.num_attention_heads // tp
        self.groups = config.num_query_groups // tp
        # megatron's query-key layer scaling divides the scale by the layer number and multiplies the
        # scores back inside its softmax: the same probabilities, so it is left out here
        self.scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(config.kv_channels)
        self.dropout = config.attention_dropout if attention_dropout is None else attention_dropout

    def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                packed_seq_params=None):
        from megatron.core import tensor_parallel

        if packed_seq_params is not None or attention_bias is not None:
            raise NotImplementedError("packed sequences / attention bias need Transformer Engine's attention")
        sq, b = query.shape[:2]
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads | groups, s, hn]
        if q.device.type == "cpu":  # the CPU flash kernel reads the permuted views more slowly than it copies
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        kwargs = {"scale": self.scale}
        if self.heads != self.groups:
            if _GQA_KWARG:
                kwargs["enable_gqa"] = True
            else:
                k, v = (t.repeat_interleave(self.heads // self.groups, dim=1) for t in (k, v))
        if attention_mask is None:
            if key.shape[0] != sq:
                raise ValueError(f"causal attention without a mask needs as many keys as queries ({key.shape[0]} vs {sq})")
            kwargs["is_causal"] = True
        else:
            kwargs["attn_mask"] = ~attention_mask  # megatron: True = masked out; SDPA: True = attend
        p = self.dropout if self.training else 0.0
        if p > 0:
            with tensor_parallel.get_cuda_rng_tracker().fork():
                context = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=p, **kwargs)
        else:
            context = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
        return context.permute(2, 0, 1, 3).reshape(sq, b, -1)
