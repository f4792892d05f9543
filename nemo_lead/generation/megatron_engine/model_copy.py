"""The megatron engine's own TP1 x PP1 copy of the actor (`engine.tp=1`, `engine.pp=1` over an actor at TP
or PP > 1): plain tensors in the shape of a one-rank GPTModel, which `StageRunner`'s direct path runs on.

    copy = EngineModel(actor_model, tensors)      # tensors: nemo_lead.generation.megatron_engine.reshard.gather_tp1_weights
    runner = StageRunner(copy, direct=True)

Why plain tensors and not a second megatron model: megatron's layers read the job's tensor-parallel
state when built and at every forward, so a TP1 GPTModel cannot live beside a TP2 actor in one process.
The direct path multiplies by the weights itself, so it needs only the attributes it reads: the layers'
linears (`weight`, `bias`, `skip_bias_add`, taken from the actor's own modules), the norms (torch's
`rms_norm` with the actor's epsilon, what the local spec's norms compute outside autograd), the embedding
lookup (megatron's at TP1: rows of the table, [s, b, h]) and the output layer (h W^T). The actor's config
is copied with TP = PP = 1, and the rotary embedding is the actor's own module (its inverse frequencies are
the same on every rank). So the copy computes what a TP1 model with these weights computes in the engine.
At an engine TP b > 1 (`tp`, `group`: the b ranks of one engine replica, `reshard.gather_tp1_weights` with
`engine_tp`): the QKV / fc1 tensors hold this rank's heads / rows and proj / fc2 its columns, their outputs
summed over `group` (`reduce_group`, read by the direct path) before the bias; the vocabulary tables are
whole on every rank (simpler than gathering vocabulary shards, and every rank then computes the same
logits, so the replica's ranks take the same sampling decisions), at V x h bytes more per rank.
Refused with a clear error: non-gated MLPs, norms other than RMSNorm (what the direct path and the local
spec support).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from nemo_lead.models import model_info, unwrap_model


@dataclass
class _Linear:
    weight: torch.Tensor
    bias: torch.Tensor | None
    skip_bias_add: bool
    reduce_group: Any = None  # row-parallel at engine TP > 1: the output summed over this group


@dataclass
class _Norm:
    weight: torch.Tensor
    eps: float

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


@dataclass
class _Attention:
    linear_qkv: _Linear
    linear_proj: _Linear
    q_layernorm: Any = None
    k_layernorm: Any = None


@dataclass
class _MLP:
    linear_fc1: _Linear
    linear_fc2: _Linear


@dataclass
class _Layer:
    input_layernorm: _Norm
    self_attention: _Attention
    pre_mlp_layernorm: _Norm
    mlp: _MLP


@dataclass
class _Decoder:
    layers: list[_Layer]
    final_layernorm: _Norm


def _skip_bias_add(model) -> dict[str, bool]:
    """Each linear's `skip_bias_add` as the actor's first layer on this rank has it."""
    layer = model.decoder.layers[0]
    att, mlp = layer.self_attention, layer.mlp
    return {"qkv": att.linear_qkv.skip_bias_add, "proj": att.linear_proj.skip_bias_add,
            "fc1": mlp.linear_fc1.skip_bias_add, "fc2": mlp.linear_fc2.skip_bias_add}


def check_copyable(model) -> None:
    """What the TP1 copy supports (module docstring); a ValueError naming what is not."""
    cfg = unwrap_model(model).config
    if not cfg.gated_linear_unit or cfg.normalization != "RMSNorm" or getattr(cfg, "qk_layernorm", False):
        raise ValueError("engine.tp=1 / engine.pp=1 over a larger actor layout needs a gated MLP and RMSNorm "
                         "without q/k norms (Qwen2 / Llama): use engine.tp=actor engine.pp=actor")


class EngineModel(torch.nn.Module):
    """A TP1 x PP1 GPTModel's attributes over plain tensors (module docstring). `parameters()` yields the
    tensors (the engine reads dtype and device from the first)."""

    def __init__(self, actor_model, tensors: dict[str, torch.Tensor], tp: int = 1, group: Any = None):
        super().__init__()
        actor_model = unwrap_model(actor_model)
        check_copyable(actor_model)
        self.nemo_lead_info = model_info(actor_model)
        arch = self.nemo_lead_info.arch
        cfg = copy.copy(actor_model.config)
        cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size, cfg.sequence_parallel = tp, 1, False
        self.config = cfg
        self.pre_process = self.post_process = True
        self.rotary_pos_emb = actor_model.rotary_pos_emb
        self.max_sequence_length = actor_model.max_sequence_length
        self.share_embeddings_and_output_weights = False
        self.tensors = tensors
        eps, skip = cfg.layernorm_epsilon, _skip_bias_add(actor_model)

        def linear(name: str, key: str) -> _Linear:
            row = key in ("proj", "fc2") and tp > 1
            return _Linear(tensors[name + ".weight"], tensors.get(name + ".bias"), skip[key], group if row else None)

        layers = []
        for i in range(arch.num_layers):
            p = f"decoder.layers.{i}."
            layers.append(_Layer(
                input_layernorm=_Norm(tensors[p + "input_layernorm.weight"], eps),
                self_attention=_Attention(linear(p + "self_attention.linear_qkv", "qkv"),
                                          linear(p + "self_attention.linear_proj", "proj")),
                pre_mlp_layernorm=_Norm(tensors[p + "pre_mlp_layernorm.weight"], eps),
                mlp=_MLP(linear(p + "mlp.linear_fc1", "fc1"), linear(p + "mlp.linear_fc2", "fc2"))))
        self.decoder = _Decoder(layers, _Norm(tensors["decoder.final_layernorm.weight"], eps))
        self.word_embeddings = tensors["embedding.word_embeddings.weight"]
        self.output_weight = tensors.get("output_layer.weight", self.word_embeddings)  # tied: the embedding

    def parameters(self, recurse: bool = True):
        return iter(self.tensors.values())

    @property
    def nbytes(self) -> int:
        """Bytes the copy holds."""
        return sum(t.numel() * t.element_size() for t in self.tensors.values())

    def embedding(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """Token ids [b, s] -> [s, b, h], as megatron's embedding at TP1 (RoPE models: no position table)."""
        return F.embedding(input_ids, self.word_embeddings).transpose(0, 1).contiguous()

    def output_layer(self, h: torch.Tensor, weight: torch.Tensor | None = None):
        """Logits over the padded vocabulary, as megatron's output layer at TP1: (h W^T, no bias)."""
        return torch.matmul(h, self.output_weight.t()), None
