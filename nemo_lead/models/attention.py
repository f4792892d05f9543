"""The core attention of the local layer spec: torch's `scaled_dot_product_attention` in place of megatron's
`DotProductAttention`.

Why: without Transformer Engine (every CPU machine, and GPU boxes without TE) megatron's local spec
computes attention unfused: it materialises the [b, heads, s, s] scores, masks them in place (which makes
autograd copy the whole gradient of the scores again), softmaxes in fp32 and multiplies. torch's SDPA runs
a fused, memory-efficient kernel instead (flash attention on CPU and on recent GPUs), with the same
result, in a fraction of the time (bench/RESULTS.md, "Design measurements"). q, k and v are copied to
contiguous [b, heads, s, hn] first on the CPU: torch's CPU flash kernel reads megatron's [s, b, ...] layout
through a permuted view more slowly than it copies it. GPU kernels take the views as they are; copies there
would only add launches (the H200 runs in bench/RESULTS.md are partly host-bound).

Causal attention without dropout over 2 * CAUSAL_BLOCK to CAUSAL_BLOCK_MAX tokens runs block by block on
the CPU (`block_causal_attention`): torch's CPU flash kernel does not skip the masked half of a causal
problem at these lengths, the blocks do (bench/RESULTS.md, "Design measurements"). GPU kernels skip it
themselves.

Same contract as `DotProductAttention` (megatron-core 0.16-0.19): query [sq, b, np, hn], key / value
[sk, b, ng, hn] (GQA: ng query groups, shared by np / ng heads each), `attention_mask` None for causal
attention or a boolean mask with True = masked out; returns [sq, b, np * hn]. Attention dropout forks
megatron's model-parallel RNG tracker, as megatron does, so activation recomputation replays the same
masks. Not supported (they fail loudly): packed sequences, attention bias, sliding windows, softmax
variants other than "vanilla", context parallelism - Transformer Engine's attention covers those.

Tested: tests/models/test_attention.py (against megatron's attention, causal and masked, and the blocks
against one causal SDPA), and through every logits / log-prob / training parity test against transformers
(tests/models, tests/training), including dropout with activation recomputation (tests/parallel/test_cpu_compat.py).
"""

from __future__ import annotations

import functools
import math

import torch
from megatron.core import parallel_state as ps
from megatron.core import tensor_parallel
from megatron.core.transformer.module import MegatronModule

_GQA_KWARG = tuple(int(x) for x in torch.__version__.split("+")[0].split(".")[:2]) >= (2, 5)


CAUSAL_BLOCK = 128  # query rows per block of `block_causal_attention` (on CPU)
# longest sequence run in blocks: from 768 queries on torch's kernel takes 256-row query blocks and skips
# key blocks a causal row cannot see, enough that the blocks stop paying (bench/RESULTS.md, "Design
# measurements")
CAUSAL_BLOCK_MAX = 1024


@functools.lru_cache(maxsize=64)
def _lower_right_causal_mask(rows: int, cols: int, device: torch.device) -> torch.Tensor:
    """[rows, cols] boolean mask (True = attend) of the last `rows` queries of a `cols`-token causal sequence."""
    return torch.ones(rows, cols, dtype=torch.bool, device=device).tril(cols - rows)


def block_causal_attention(q, k, v, block: int, **kwargs) -> torch.Tensor:
    """Causal SDPA computed `block` query rows at a time, each block against only the keys it can see;
    returns [s, b, heads * hn] (megatron's layout) for q [b, heads, s, hn], k / v [b, groups, s, hn].

    Why: torch's CPU flash kernel (torch 2.13) takes key blocks of up to 512 and does not skip the masked
    half of a causal problem: at 512 tokens a causal attention costs what a full one does. Blocks of queries
    against their visible prefix of keys skip it (3/8 of the work at 4 blocks). The first block is
    plain causal; block i sees keys [0, end_i) with a lower-right causal mask on its last `block` keys. The
    blocks' outputs are concatenated straight into [s, b, heads, hn], the copy megatron's layout needs anyway.
    Same result as one causal SDPA up to float rounding (tests/models/test_attention.py)."""
    sq = q.shape[2]
    outs = []
    for start in range(0, sq, block):
        end = min(start + block, sq)
        qi, ki, vi = q[:, :, start:end], k[:, :, :end], v[:, :, :end]
        if start == 0:
            o = torch.nn.functional.scaled_dot_product_attention(qi, ki, vi, is_causal=True, **kwargs)
        else:
            mask = _lower_right_causal_mask(end - start, end, q.device)
            o = torch.nn.functional.scaled_dot_product_attention(qi, ki, vi, attn_mask=mask, **kwargs)
        outs.append(o.permute(2, 0, 1, 3))  # [rows, b, heads, hn]
    out = torch.cat(outs, dim=0)
    return out.view(sq, out.shape[1], -1)


class SDPAttention(MegatronModule):
    # True: on a CPU too, SDPA takes megatron's views as it does on a GPU (no copies, no blocks), so that the
    # tensors a GPU keeps for backward can be measured on a CPU (tests/plan/saved_activations.py)
    views_on_cpu = False

    def __init__(self, config, layer_number: int, attn_mask_type, attention_type: str,
                 attention_dropout: float | None = None, softmax_scale: float | None = None, cp_comm_type=None,
                 pg_collection=None):
        super().__init__(config=config)
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
        if packed_seq_params is not None or attention_bias is not None:
            raise NotImplementedError("packed sequences / attention bias need Transformer Engine's attention")
        sq, b = query.shape[:2]
        q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, heads | groups, s, hn]
        cpu = q.device.type == "cpu" and not self.views_on_cpu
        if cpu:  # the CPU flash kernel reads the permuted views more slowly than it copies
            q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        kwargs = {"scale": self.scale}
        if self.heads != self.groups:
            if _GQA_KWARG:
                kwargs["enable_gqa"] = True
            else:
                k, v = (t.repeat_interleave(self.heads // self.groups, dim=1) for t in (k, v))
        p = self.dropout if self.training else 0.0
        if attention_mask is None:
            if key.shape[0] != sq:
                raise ValueError(f"causal attention without a mask needs as many keys as queries ({key.shape[0]} vs {sq})")
            if p == 0 and cpu and 2 * CAUSAL_BLOCK <= sq <= CAUSAL_BLOCK_MAX:
                return block_causal_attention(q, k, v, CAUSAL_BLOCK, **kwargs)
            kwargs["is_causal"] = True
        else:
            kwargs["attn_mask"] = ~attention_mask  # megatron: True = masked out; SDPA: True = attend
        if p > 0:
            with tensor_parallel.get_cuda_rng_tracker().fork():
                context = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=p, **kwargs)
        else:
            context = torch.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
        return context.permute(2, 0, 1, 3).reshape(sq, b, -1)
