"""Build a megatron-core `GPTModel` (this rank's pipeline stage) from a HF config of the Qwen2 / Llama families.

    info = init_parallel(tp, pp, model_config=hf_cfg)        # nemo_lead.parallel
    model = build_gpt(hf_cfg, info, "fp32")                  # one GPTModel: this rank's PP stage
    load_hf_weights(model, hf_dir)                           # nemo_lead.models.hf_weights

What a caller must know about the model returned:
- It is the stage of this rank only (`model.pre_process` = has the embedding, `model.post_process` = has
  the final norm and output layer). No virtual pipeline chunks; wrap it in a list for
  `get_forward_backward_func(model=[model])`.
- `model(input_ids [b, s], position_ids [b, s], attention_mask=None)` -> logits [b, s, V_pad / tp] on the last
  stage (vocab-parallel: each TP rank holds a contiguous slice of the padded vocabulary), or hidden states
  [s, b, h] on other stages. `attention_mask=None` means causal. Pass `labels=` to get megatron's
  per-token loss [b, s] instead (its softmax includes the padded columns; see `mask_vocab_padding`).
- Padded vocabulary: rows >= vocab_size of the embedding / output layer are padding (zero after
  `load_hf_weights`). Use `gather_vocab_logits` for full, unpadded logits [b, s, V] (sampling, tests) and
  `mask_vocab_padding` before a vocab-parallel softmax / cross-entropy so the padding gets no probability.

Layer spec: Transformer Engine's when it is importable (GPU containers; FP8 via precision "fp8"), megatron's
local spec otherwise, with torch's fused SDPA as its core attention (`nemo_lead.models.attention`) and
SwiGLU, RoPE and RMSNorm as autograd functions with written-out backwards (`nemo_lead.models.local_layers`). Tested (tests/models): local spec,
fp32, CPU/gloo, at TP1, TP2, PP2 against transformers' logits (<= 1e-5); bf16 builds are exercised on CPU in a smoke test only; TE and FP8 need a GPU
container and are not tested here.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import torch

from nemo_lead.mcore.compat import with_mlp_class
from nemo_lead.models.hf_config import Arch, ModelConfigError, arch_from_hf, padded_vocab_size, read_hf_config
from nemo_lead.models.source import PRECISIONS

_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}


def te_available() -> bool:
    """True when Transformer Engine imports (it fails without libcuda, so on CPU machines it is False)."""
    try:
        importlib.import_module("transformer_engine.pytorch")
    except Exception:  # ImportError, OSError (no libcuda), RuntimeError from its CUDA checks
        return False
    return True


def _layer_spec(spec: str, fp8: bool):
    from megatron.core.models.gpt import gpt_layer_specs as specs

    if spec not in ("auto", "te", "local"):
        raise ModelConfigError(f"layer spec {spec!r} is not one of auto, te, local")
    use_te = spec == "te" or (spec == "auto" and te_available())
    if spec == "te" and not te_available():
        raise ModelConfigError("layer spec 'te' needs Transformer Engine: pip install 'nemo-lead[te]' in a CUDA "
                               "container (it does not install on CPU-only machines)")
    if fp8 and not use_te:
        raise ModelConfigError(
            "precision 'fp8' needs Transformer Engine (FP8 GEMMs are TE kernels): run in a CUDA container with "
            "`pip install 'nemo-lead[te]'`, or use precision 'bf16' / 'fp32'"
        )
    if use_te:
        return specs.get_gpt_layer_with_transformer_engine_spec(), "te"
    return _with_local_layers(specs.get_gpt_layer_local_spec(normalization="RMSNorm")), "local"


def _with_local_layers(layer_spec):
    """The local spec with torch's fused SDPA as core attention (`nemo_lead.models.attention`: same result,
    a fraction of megatron's unfused attention's time and memory), RoPE, RMSNorm and SwiGLU as autograd
    functions with written-out backwards (`nemo_lead.models.local_layers`). A copy: megatron's spec
    is not changed."""
    from nemo_lead.models.attention import SDPAttention
    from nemo_lead.models.local_layers import RMSNorm, RoPESelfAttention, SwiGLUMLP

    attention = layer_spec.submodules.self_attention
    attention = replace(attention, module=RoPESelfAttention,
                        submodules=replace(attention.submodules, core_attention=SDPAttention))
    mlp = with_mlp_class(layer_spec.submodules.mlp, SwiGLUMLP)
    return replace(layer_spec, submodules=replace(layer_spec.submodules, self_attention=attention, mlp=mlp,
                                                  input_layernorm=RMSNorm, pre_mlp_layernorm=RMSNorm))


def _with_local_final_norm(layer_spec, config):
    """The decoder block of `layer_spec` layers with the local RMSNorm as its final norm: megatron's default
    for the local spec (`WrappedTorchNorm`) refuses sequence parallelism, ours supports it."""
    from megatron.core.transformer.transformer_block import (
        TransformerBlockSubmodules,
        get_num_layers_to_build,
    )

    from nemo_lead.models.local_layers import RMSNorm

    return TransformerBlockSubmodules(layer_specs=[layer_spec] * get_num_layers_to_build(config), layer_norm=RMSNorm)


@contextlib.contextmanager
def sequence_parallel_off(model: torch.nn.Module):
    """Run a model built with sequence parallelism as one without, for the duration (the rollout engine's
    decode steps: one token per row cannot be split over TP ranks). megatron's linears and embedding read
    their `sequence_parallel` / `reduce_scatter_embeddings` flags, and the embedding and norms the config's,
    at every forward; these are switched off and restored after. The weights and their sharding are the same
    either way, so the outputs are those of the model built without SP. A no-op for other models."""
    flags = [(m, a) for m in model.modules() for a in ("sequence_parallel", "reduce_scatter_embeddings")
             if getattr(m, a, None) is True]
    configs = {id(m.config): m.config for m in model.modules()
               if getattr(getattr(m, "config", None), "sequence_parallel", False)}
    for m, a in flags:
        setattr(m, a, False)
    for c in configs.values():
        c.sequence_parallel = False
    try:
        yield
    finally:
        for m, a in flags:
            setattr(m, a, True)
        for c in configs.values():
            c.sequence_parallel = True


def transformer_config(
    arch: Arch,
    *,
    tp: int,
    pp: int,
    precision: str = "fp32",
    init: bool = True,
    overrides: Mapping[str, Any] | None = None,
):
    """The megatron `TransformerConfig` equivalent of `arch` (HF numerics: RMSNorm, SwiGLU, RoPE, no dropout
    on hidden states). `overrides` go straight to TransformerConfig (e.g. recompute_granularity="full",
    recompute_method="uniform", recompute_num_layers=1)."""
    from megatron.core.transformer.transformer_config import TransformerConfig

    if precision not in PRECISIONS:
        raise ModelConfigError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    dtype = _DTYPES[precision]
    kwargs: dict[str, Any] = dict(
        num_layers=arch.num_layers,
        hidden_size=arch.hidden_size,
        ffn_hidden_size=arch.ffn_hidden_size,
        num_attention_heads=arch.num_heads,
        num_query_groups=arch.num_kv_heads,
        kv_channels=arch.head_dim,
        normalization="RMSNorm",
        layernorm_epsilon=arch.norm_eps,
        gated_linear_unit=True,
        activation_func=torch.nn.functional.silu,
        add_bias_linear=arch.linear_bias,
        add_qkv_bias=arch.qkv_bias,
        hidden_dropout=0.0,
        attention_dropout=arch.attention_dropout,
        init_method_std=arch.init_std,
        tensor_model_parallel_size=tp,
        pipeline_model_parallel_size=pp,
        params_dtype=dtype,
        pipeline_dtype=dtype,
        bf16=dtype == torch.bfloat16,
        fp16=dtype == torch.float16,
        use_cpu_initialization=not torch.cuda.is_available(),
        perform_initialization=init,
        attention_softmax_in_fp32=True,
    )
    if precision == "fp8":
        kwargs.update(fp8="hybrid", fp8_recipe="delayed")
    kwargs.update(overrides or {})
    return TransformerConfig(**kwargs)


def build_gpt(
    hf_config: Mapping[str, Any] | str,
    parallel: Any = None,
    precision: str = "fp32",
    *,
    spec: str = "auto",
    vocab_divisible_by: int = 128,
    init: bool = True,
    config_overrides: Mapping[str, Any] | None = None,
):
    """This rank's pipeline stage of a GPTModel for a HF config (dict, config.json, HF folder or preset name).

    parallel: what `nemo_lead.parallel.init_parallel` returned (anything with `.tp` / `.pp`), checked
        against megatron's initialised parallel state; None = use that state as it is.
    precision: "fp32" | "bf16" | "fp16" | "fp8" (bf16 params + TE FP8 GEMMs; needs TE).
    spec: "auto" (TE if importable, else local) | "te" | "local".
    init: random-initialise the weights (False saves time when weights are loaded right after).
    What nemo-lead knows of the model beyond megatron's config (its HF config, `Arch`, layer spec and
    vocabulary padding, for the weight mapping, checkpoints and engines) is one `ModelInfo`: read it with
    `model_info(model)` (works through DDP wrappers). `model.vocab_size` is megatron's padded size.
    """
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel

    cfg = read_hf_config(hf_config)
    arch = arch_from_hf(cfg)
    if precision not in PRECISIONS:
        raise ModelConfigError(f"precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    layer_spec, spec_name = _layer_spec(spec, fp8=precision == "fp8")  # FP8 without TE fails here, early
    if not ps.model_parallel_is_initialized():
        raise RuntimeError("megatron's parallel state is not initialised: call nemo_lead.parallel.init_parallel first")
    tp = ps.get_tensor_model_parallel_world_size()
    pp = ps.get_pipeline_model_parallel_world_size()
    if parallel is not None and (parallel.tp, parallel.pp) != (tp, pp):
        raise RuntimeError(f"parallel layout tp={parallel.tp} pp={parallel.pp} does not match megatron's "
                           f"initialised state tp={tp} pp={pp}")
    vocab = padded_vocab_size(arch.vocab_size, vocab_divisible_by)
    if vocab % tp:
        raise ModelConfigError(f"tp {tp} does not divide the padded vocabulary {vocab} "
                               f"(vocab_divisible_by={vocab_divisible_by})")
    config = transformer_config(arch, tp=tp, pp=pp, precision=precision, init=init, overrides=config_overrides)
    if config.sequence_parallel and spec_name == "local":
        layer_spec = _with_local_final_norm(layer_spec, config)
    with _megatron_knows_our_mlp():
        model = GPTModel(
            config=config,
            transformer_layer_spec=layer_spec,
            vocab_size=vocab,
            max_sequence_length=arch.max_position_embeddings,
            pre_process=ps.is_pipeline_first_stage(),
            post_process=ps.is_pipeline_last_stage(),
            share_embeddings_and_output_weights=arch.tied_embeddings,
            position_embedding_type="rope",
            rotary_base=arch.rope_theta,
            rope_scaling=arch.rope_scaling_factor is not None,
            rope_scaling_factor=arch.rope_scaling_factor or 8.0,
        )
    if not init:
        _mark_tensor_parallel_weights(model)
    _norms_to(model, _DTYPES[precision])
    if torch.cuda.is_available():
        model.cuda(torch.cuda.current_device())
    model.nemo_lead_info = ModelInfo(hf_config=cfg, arch=arch, layer_spec=spec_name,
                                     vocab_divisible_by=vocab_divisible_by)
    return model


@dataclass(frozen=True)
class ModelInfo:
    """What `build_gpt` knew when it built a GPTModel (megatron's own config aside)."""

    hf_config: dict[str, Any]  # the HF config.json values
    arch: Arch  # the architecture read from it (vocab_size: the real vocabulary)
    layer_spec: str  # "local" | "te"
    vocab_divisible_by: int  # the padding of the embedding / output layer rows


def model_info(model, required: bool = True) -> ModelInfo | None:
    """The `ModelInfo` of a model built by `build_gpt` (through DDP / Float16Module wrappers); for another
    model an error, or None with `required=False`."""
    info = getattr(unwrap_model(model), "nemo_lead_info", None)
    if info is None and required:
        raise TypeError(f"{type(unwrap_model(model)).__name__} was not built by nemo_lead.models.build_gpt "
                        "(it has no ModelInfo)")
    return info


def _norms_to(model, dtype: torch.dtype) -> None:
    """Put the local spec's norm weights in the parameter dtype.

    megatron's local spec builds its RMSNorms as plain `torch.nn.RMSNorm` in the default dtype (fp32), and
    only megatron's Float16Module (which we do not use) would cast them. A bf16 model then feeds bf16 hidden
    states to fp32 norm weights, which torch cannot run in its fused RMSNorm kernel (it warns and takes the
    unfused path on GPUs). HF checkpoints keep these weights in the model dtype too, and TE's norms are
    built in `params_dtype`, so this makes the local spec match both. No-op in fp32.
    """
    if dtype == torch.float32:
        return
    for module in model.modules():
        if isinstance(module, (torch.nn.RMSNorm, torch.nn.LayerNorm)):
            module.to(dtype)


class _UnknownMLPFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Unknown MLP type")


@contextlib.contextmanager
def _megatron_knows_our_mlp():
    """Silence megatron-core's "Unknown MLP type ... Using default kwargs" while a model is built.

    megatron (0.16) recognises its MLP by class identity when it builds a layer and warns once per layer
    about any other class, the local spec's `SwiGLUMLP` included. That subclass takes megatron's MLP
    arguments and the default TP group, so the warning says nothing a user can act on."""
    log = logging.getLogger("megatron.core.transformer.transformer_layer")
    quiet = _UnknownMLPFilter()
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


def _mark_tensor_parallel_weights(model) -> None:
    """Tag TP-sharded weights as megatron's initialisation would (`tensor_model_parallel`, `partition_dim`,
    `partition_stride`).

    megatron-core (0.16.1) sets these on the weights of its vocab-, column- and row-parallel layers only
    inside the initialisation it skips when `perform_initialization=False`. Untagged shards look like TP
    replicas to everything that asks (the gradient norm and hence clipping, the optimizers' master
    copies), which then count TP rank 0's shard only: at TP > 1 the gradient norm came out wrong.
    Strides as megatron's: 2 for a gated MLP's fused [gate; up] fc1, else 1.
    """
    from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding
    from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

    for name, module in model.named_modules():
        weight = getattr(module, "weight", None)
        if weight is None or hasattr(weight, "tensor_model_parallel"):
            continue
        if isinstance(module, (VocabParallelEmbedding, ColumnParallelLinear, RowParallelLinear)):
            dim = 1 if isinstance(module, RowParallelLinear) else 0
            stride = 2 if name.endswith("mlp.linear_fc1") and model.config.gated_linear_unit else 1
            set_tensor_model_parallel_attributes(weight, True, dim, stride)


def unwrap_model(model):
    """The GPTModel inside wrappers (megatron's DistributedDataParallel, Float16Module: `.module`)."""
    while hasattr(model, "module"):
        model = model.module
    return model


@contextlib.contextmanager
def eval_mode(model: torch.nn.Module):
    """model.eval() and no autograd for the duration; every module's own training flag is restored after
    (forward-only passes of the rollout engine and of the actor's log-probs must not leave dropout off)."""
    flags = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for m, training in flags:
            m.training = training


# ----------------------------------------------------------------------------- vocabulary-parallel logits
def _vocab_range(local_width: int) -> tuple[int, int]:
    from megatron.core import parallel_state as ps

    start = ps.get_tensor_model_parallel_rank() * local_width
    return start, start + local_width


def mask_vocab_padding(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """This TP rank's logits [..., V_pad / tp] with the padded columns (global index >= vocab_size) pushed to
    the dtype's lowest value.

    Apply before megatron's `tensor_parallel.vocab_parallel_cross_entropy` or any softmax over the padded
    vocabulary, so log-probs equal a softmax over the real vocabulary (HF's). The lowest finite value rather
    than -inf keeps p * log p (entropy) finite: the padding gets probability exactly 0 and a finite log-prob.
    Differentiable (the padding gets zero gradient).
    """
    start, end = _vocab_range(logits.shape[-1])
    if end <= vocab_size:
        return logits
    pad = torch.arange(start, end, device=logits.device) >= vocab_size
    return logits.masked_fill(pad, torch.finfo(logits.dtype).min)


def gather_vocab_logits(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Full logits [..., vocab_size]: all-gather the vocab-parallel shards over TP and drop the padding."""
    from megatron.core import tensor_parallel

    full = tensor_parallel.gather_from_tensor_model_parallel_region(logits)
    return full[..., :vocab_size]


@torch.no_grad()
def forward_logits(model, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor | None:
    """Full, unpadded logits [b, s, vocab_size] of one forward through all pipeline stages (collective).

    Runs megatron's own schedule (`get_forward_backward_func`, forward only, one micro-batch), so the
    hidden states travel between PP stages by its p2p code. Returns the logits on the last PP stage and
    None on the others. Every rank passes the same `input_ids` [b, s] (causal attention, no padding mask).
    `model` may be wrapped (DDP).
    """
    from megatron.core import parallel_state as ps
    from megatron.core.pipeline_parallel import get_forward_backward_func

    b, s = input_ids.shape
    vocab_size = model_info(model).arch.vocab_size
    device = next(model.parameters()).device
    input_ids = input_ids.to(device)
    if position_ids is None:
        position_ids = torch.arange(s, device=device).expand(b, s)

    def step(_data, stage):
        return stage(input_ids, position_ids.to(device), None), None  # no loss_func: the schedule keeps outputs

    out = get_forward_backward_func()(
        forward_step_func=step, data_iterator=iter([None]), model=[model], num_microbatches=1,
        seq_length=s, micro_batch_size=b, forward_only=True,
    )
    if not ps.is_pipeline_last_stage():
        return None
    return gather_vocab_logits(out[0], vocab_size)
