"""One pipeline stage of a megatron-core `GPTModel`, run incrementally with our own KV cache.

The choice (walk the model's submodules, do attention ourselves): megatron-core's inference contexts
changed shape across 0.16-0.19 (static vs dynamic engines, flash-attn requirements for dynamic batching,
more CUDA assumptions on CPU; docs/design.md, "Facts measured on the CPU machines"), while the submodules a decoder layer is made of
have kept their call signatures. So this module calls, per layer:

    input_layernorm -> self_attention.get_query_key_value_tensors -> [RoPE, KV cache, attention: ours]
      -> self_attention.linear_proj -> + residual -> pre_mlp_layernorm -> mlp -> + residual

The linears are megatron's own (column / row parallel), so tensor parallelism comes for free: each TP rank
computes its own heads and the row-parallel projections all-reduce. On one TP rank with megatron's plain
linears and the local spec's SwiGLU MLP (`direct`), the decode and prefill steps multiply by those modules'
weights themselves (the products megatron's forward computes, in the same order, so the same numbers):
megatron's per-call machinery (autograd functions, process-group lookups, async-communication wrappers)
costs more than the products of a small model's decode step. With Transformer Engine specs the input norm is
fused into `linear_qkv` (`input_layernorm` is an IdentityOp) and the pre-MLP norm into `linear_fc1`; the
same calls work. Attention is `scaled_dot_product_attention` with an explicit mask (on the CPU, the same
softmax written as two matmuls and an additive mask: faster there for a decode step's few queries), grouped-
query heads folded into the query length so the cache is never expanded to all heads. RoPE is computed from
the model's own `rotary_pos_emb.inv_freq` (Llama-3 scaling included), per sequence position,
non-interleaved, with the actor's arithmetic (`nemo_lead.models.rope`).

Refused with a clear error (not silently wrong): context parallelism, interleaved RoPE, multi-latent
attention, gated attention output, layers without RoPE, virtual pipeline chunks. A model built with sequence
parallelism runs with it switched off (`MegatronEngine.generate`, `nemo_lead.models.sequence_parallel_off`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from nemo_lead.generation.megatron_engine.kv_budget import kv_bytes_per_position
from nemo_lead.models.rope import rope


class UnsupportedModel(ValueError):
    """A model feature the megatron engine cannot run faithfully."""


def check_supported(model) -> None:
    cfg = model.config
    problems = []
    if getattr(cfg, "context_parallel_size", 1) > 1:
        problems.append("context parallelism")
    if getattr(cfg, "rotary_interleaved", False):
        problems.append("interleaved RoPE")
    if getattr(cfg, "multi_latent_attention", False):
        problems.append("multi-latent attention")
    if getattr(cfg, "attention_output_gate", False):
        problems.append("gated attention output")
    if getattr(cfg, "no_rope_freq", None):
        problems.append("layers without RoPE (no_rope_freq)")
    if getattr(model, "position_embedding_type", "rope") != "rope":
        problems.append(f"position embedding {model.position_embedding_type!r} (only 'rope')")
    if cfg.num_query_groups is not None and cfg.num_query_groups < cfg.tensor_model_parallel_size:
        problems.append("fewer KV heads than TP ranks")
    if problems:
        raise UnsupportedModel("the megatron rollout engine does not support " + "; ".join(problems))


def direct_path_types() -> dict[str, tuple[type, ...]]:
    """The layer types `StageRunner`'s direct path computes itself, from their weights: the one place that
    says which modules it supports. A layer qualifies when its attention, its MLP and their linears are of
    these exact types (and the MLP takes its two-GEMM SwiGLU path); everything else runs the modules.
    Norms are called as modules on either path, and core attention never is (the engine attends over its
    own KV cache), so neither needs to be listed (tests/generation/test_megatron_engine.py checks every
    layer type of nemo_lead.models against this)."""
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear
    from megatron.core.transformer.attention import SelfAttention

    from nemo_lead.models.local_layers import RoPESelfAttention, SwiGLUMLP

    return {"self_attention": (SelfAttention, RoPESelfAttention), "mlp": (SwiGLUMLP,),
            "linear_qkv": (ColumnParallelLinear,), "linear_proj": (RowParallelLinear,),
            "linear_fc2": (RowParallelLinear,)}


def _plain_layer(layer) -> bool:
    """A decoder layer the direct path can compute (`direct_path_types`)."""
    types = direct_path_types()
    att, mlp = layer.self_attention, layer.mlp
    return (type(att) in types["self_attention"] and type(att.linear_qkv) in types["linear_qkv"]
            and type(att.linear_proj) in types["linear_proj"] and type(mlp) in types["mlp"]
            and mlp.two_gemm_path(None) and type(mlp.linear_fc2) in types["linear_fc2"])


class StageRunner:
    """Prefill and decode through this rank's stage of `model` (a GPTModel), with a `KVCache`."""

    def __init__(self, model, direct: bool | None = None):
        """`direct`: None = the direct path where every layer qualifies (one TP rank, plain layers); True =
        the direct path regardless (the engine's TP1 copy, `nemo_lead.generation.megatron_engine.model_copy`)."""
        check_supported(model)
        cfg = model.config
        tp = cfg.tensor_model_parallel_size
        self.model = model
        self.layers = list(model.decoder.layers)
        self.pre_process = model.pre_process
        self.post_process = model.post_process
        self.heads = cfg.num_attention_heads // tp
        self.groups = (cfg.num_query_groups or cfg.num_attention_heads) // tp
        self.head_dim = cfg.kv_channels
        self.scale = cfg.softmax_scale if cfg.softmax_scale is not None else 1.0 / math.sqrt(self.head_dim)
        self.hidden_size = cfg.hidden_size
        param = next(model.parameters())
        self.dtype, self.device = param.dtype, param.device
        rope = model.rotary_pos_emb
        self.inv_freq = rope.inv_freq.to(self.device, torch.float32)
        self.position_scale = 1.0 / (rope.seq_len_interpolation_factor or 1.0)
        self.direct = direct or (tp == 1 and not cfg.test_mode and all(_plain_layer(layer) for layer in self.layers))

    def kv_bytes_per_position(self) -> int:
        """Bytes of K and V one sequence position costs in this stage's KV cache (`kv_budget`)."""
        return kv_bytes_per_position(len(self.layers), self.groups, self.head_dim, self.dtype.itemsize)

    # ----------------------------------------------------------------------------- direct linears (one TP rank)
    @staticmethod
    def _linear(module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """megatron's Column/RowParallelLinear forward on one TP rank: (x W^T [+ b], bias left to add)."""
        out = torch.matmul(x, module.weight.t())
        group = getattr(module, "reduce_group", None)  # the engine copy's row-parallel linears at TP > 1
        if group is not None:
            torch.distributed.all_reduce(out, group=group)
        if module.skip_bias_add:
            return out, module.bias
        return (out if module.bias is None else out + module.bias), None

    def _mixed_qkv(self, attention, x: torch.Tensor) -> torch.Tensor:
        """The fused QKV projection on one TP rank as [s, b, groups, per_group + 2, d]: per KV group, its query
        heads, then k, then v (megatron's layout, as `get_query_key_value_tensors` splits it)."""
        mixed, bias = self._linear(attention.linear_qkv, x)
        if bias is not None:
            mixed = mixed + bias
        return mixed.view(mixed.shape[0], mixed.shape[1], self.groups, self.heads // self.groups + 2, self.head_dim)

    def _rotated_qkv(self, attention, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """q [s, b, heads, d] and k [s, b, groups, d] after RoPE, and v. Direct path without q / k norms: q and
        k rotated as one tensor (adjacent in each group's slice of the fused output), half the ops."""
        if not self.direct:
            q, k, v = attention.get_query_key_value_tensors(x)
            return rope(q, cos, sin), rope(k, cos, sin), v
        mixed = self._mixed_qkv(attention, x)
        s, b, per_group = mixed.shape[0], mixed.shape[1], self.heads // self.groups
        v = mixed[..., per_group + 1, :]
        if attention.q_layernorm is None and attention.k_layernorm is None:
            qk = rope(mixed[..., : per_group + 1, :], cos[..., None, :], sin[..., None, :])
            return qk[..., :per_group, :].reshape(s, b, self.heads, self.head_dim), qk[..., per_group, :], v
        q, k = mixed[..., :per_group, :].reshape(s, b, self.heads, self.head_dim), mixed[..., per_group, :]
        if attention.q_layernorm is not None:
            q = attention.q_layernorm(q)
        if attention.k_layernorm is not None:
            k = attention.k_layernorm(k)
        return rope(q, cos, sin), rope(k, cos, sin), v

    def _projection(self, module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        return self._linear(module, x) if self.direct else module(x)

    def _mlp(self, mlp, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        if not self.direct:
            return mlp(x)
        from nemo_lead.models.local_layers import swiglu

        return self._linear(mlp.linear_fc2, swiglu(x, mlp.linear_fc1.weight, mlp.linear_fc1.bias))

    # ----------------------------------------------------------------------------- pieces
    def rope_tables(self, max_positions: int) -> tuple[torch.Tensor, torch.Tensor]:
        """cos, sin [max_positions, rot_dim] in the model dtype (computed in fp32, as megatron does)."""
        pos = torch.arange(max_positions, device=self.device, dtype=torch.float32) * self.position_scale
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos().to(self.dtype), emb.sin().to(self.dtype)

    def _attention_mask(self, mask: torch.Tensor) -> torch.Tensor:
        """mask [b, s, L] (True = attend) -> [b, 1, per_group * s, L] for `_attend` (once per step): boolean for
        SDPA on accelerators; on the CPU an additive 0 / -inf bias for `_attend`'s own softmax, which beats
        SDPA's CPU kernel on the few query rows of a decode step over the cache's strided keys."""
        b, s, length = mask.shape
        per_group = self.heads // self.groups
        mask = mask[:, None, None].expand(b, 1, per_group, s, length).reshape(b, 1, per_group * s, length)
        if mask.device.type != "cpu":
            return mask
        return torch.zeros(mask.shape, dtype=self.dtype, device=mask.device).masked_fill_(~mask, float("-inf"))

    def _attend(self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """q [s, b, heads, d], keys / values [b, groups, L, d], mask from `_attention_mask` -> [s, b, heads*d]."""
        s, b = q.shape[0], q.shape[1]
        per_group = self.heads // self.groups
        # heads are group-major (g * per_group + i); fold the group's heads into the query length
        qg = q.reshape(s, b, self.groups, per_group, self.head_dim).permute(1, 2, 3, 0, 4)
        qg = qg.reshape(b, self.groups, per_group * s, self.head_dim)
        if mask.dtype == torch.bool:
            ctx = F.scaled_dot_product_attention(qg, keys, values, attn_mask=mask, scale=self.scale)
        else:  # CPU: softmax(q k^T * scale + bias) v (every row attends to at least its own position)
            scores = torch.matmul(qg, keys.transpose(-1, -2)).mul_(self.scale).add_(mask)
            ctx = torch.matmul(torch.softmax(scores, dim=-1, dtype=torch.float32).to(values.dtype), values)
        ctx = ctx.reshape(b, self.groups, per_group, s, self.head_dim).permute(3, 0, 1, 2, 4)
        return ctx.reshape(s, b, self.heads * self.head_dim)

    def _layer(self, i: int, layer, h, cos, sin, cache, mask, length: int, slots):
        residual = h
        x = layer.input_layernorm(h)
        q, k, v = self._rotated_qkv(layer.self_attention, x, cos, sin)  # [s, b, heads|groups, d]
        k, v = k.permute(1, 2, 0, 3), v.permute(1, 2, 0, 3)  # [b, groups, s, d]
        if slots is None:
            cache.write_block(i, k, v)
        else:
            cache.write_at(i, k[:, :, 0], v[:, :, 0], slots)
        keys, values = cache.view(i, length)
        out, bias = self._projection(layer.self_attention.linear_proj, self._attend(q, keys, values, mask))
        h = residual + (out if bias is None else out + bias)
        residual = h
        out, bias = self._mlp(layer.mlp, layer.pre_mlp_layernorm(h))
        return residual + (out if bias is None else out + bias)

    def _body(self, inputs, pos, cache, mask, length, write_positions, rope):
        """Embedding (first stage) or received hidden states, then this stage's layers."""
        if self.pre_process:
            h = self.model.embedding(input_ids=inputs, position_ids=pos)  # [s, b, h]
        else:
            h = inputs
        cos, sin = (t[pos.t()][:, :, None] for t in rope)  # [s, b, 1, rot]
        mask = self._attention_mask(mask)
        slots = None if write_positions is None else cache.slots(write_positions)
        for i, layer in enumerate(self.layers):
            h = self._layer(i, layer, h, cos, sin, cache, mask, length, slots)
        return h

    def logits(self, h_last: torch.Tensor) -> torch.Tensor:
        """Vocab-parallel logits [b, V_pad / tp] of hidden states [b, hidden] (last stage only)."""
        h = h_last[None]
        norm = getattr(self.model.decoder, "final_layernorm", None)
        if norm is not None:
            h = norm(h)
        weight = self.model.shared_embedding_or_output_weight() if self.model.share_embeddings_and_output_weights else None
        out, _ = self.model.output_layer(h, weight=weight)
        return out[0]

    # ----------------------------------------------------------------------------- prefill / decode
    def prefill(self, inputs: torch.Tensor, lengths: torch.Tensor, cache, rope) -> torch.Tensor:
        """Prompts right-padded to s tokens. inputs: token ids [b, s] (first stage) or hidden [s, b, h].

        Fills positions 0 .. s-1 of `cache` (a fresh one with b rows). Returns this stage's output: hidden
        states [s, b, h], or on the last stage the hidden state at each prompt's last token [b, h]."""
        s = inputs.shape[1] if self.pre_process else inputs.shape[0]
        b = lengths.shape[0]
        pos = torch.arange(s, device=self.device).expand(b, s)
        key = torch.arange(s, device=self.device)
        mask = (key[None, None, :] <= key[None, :, None]) & (key[None, None, :] < lengths[:, None, None])  # [b, s, s]
        h = self._body(inputs, pos, cache, mask, s, None, rope)
        if not self.post_process:
            return h
        return h[lengths - 1, torch.arange(b, device=self.device)]

    def decode(self, inputs: torch.Tensor, lengths: torch.Tensor, cache, rope, max_length: int) -> torch.Tensor:
        """One new token per row at position lengths[b]. inputs: token ids [b, 1] or hidden [1, b, h].

        `max_length` >= max(lengths) + 1 (known on the host). Returns hidden [1, b, h] or, on the last stage,
        [b, h]."""
        key = torch.arange(max_length, device=self.device)
        mask = (key[None, :] <= lengths[:, None])[:, None, :]  # [b, 1, L]
        h = self._body(inputs, lengths[:, None], cache, mask, max_length, lengths, rope)
        return h[0] if self.post_process else h
