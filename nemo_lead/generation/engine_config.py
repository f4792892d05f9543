"""Choosing a rollout engine from configuration: `EngineConfig` (nest it in a job's config) -> `build_engine`.

    engine = build_engine(EngineConfig(kind="megatron", max_batch_size=256), actor)

The kinds, their builders and layout rules are the registry's (`nemo_lead.plan.engine_kinds`): `build_engine`
imports an engine's module only when asked for it, so `kind="trtllm"` and `kind="vllm"` import TensorRT-LLM /
vLLM only then, and fail with one clear error where they are not installed (`trtllm_engine.INSTALL_HINT`,
`vllm_params.INSTALL_HINT`). `kind="auto"` (`resolve_engine_kind`): vLLM on a GPU machine where it imports,
the megatron engine otherwise. An engine's own settings are the section named by its kind (`trtllm`, `vllm`).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from nemo_lead.generation.engine import RolloutEngine
from nemo_lead.generation.megatron_engine.engine import check_limits
from nemo_lead.models import tokenizer_files
from nemo_lead.plan.engine_kinds import (
    AT_THE_MODELS_LAYOUT,
    AUTO,
    AUTO_CANDIDATES,
    AUTO_KIND,
    ENGINE_KINDS,
    engine_kind,
)
from nemo_lead.runtime.processes import launch_rank


@dataclass
class TrtllmConfig:
    """Options of the `trtllm` engine (TensorRT-LLM >= 1.2.0, < 1.3, PyTorch backend; see
    `nemo_lead.generation.trtllm_params` for what it sets itself and what it refuses)."""

    hf_dir: Optional[str] = None  # HF folder (config.json + tokenizer) the engine is built from; weights come by refit
    dtype: str = "auto"  # auto (the actor's parameter dtype) | bfloat16 | float16 | float32
    max_batch_size: int = 256
    max_seq_len: Optional[int] = None  # None: TensorRT-LLM's default for the model
    kv_cache_fraction: float = 0.5  # of the GPU memory free after loading (the actor shares the GPU)
    refit_bucket_mb: float = 512  # weights staged on the GPU per update_weights call
    llm_kwargs: dict[str, Any] = field(default_factory=dict)  # more tensorrt_llm.LLM arguments (max_num_tokens, ...)

    def __post_init__(self) -> None:
        if self.dtype not in ("auto", "bfloat16", "float16", "float32"):
            raise ValueError(f"trtllm.dtype must be auto, bfloat16, float16 or float32, got {self.dtype!r}")
        if not 0 < self.kv_cache_fraction < 1:
            raise ValueError(f"trtllm.kv_cache_fraction must be in (0, 1), got {self.kv_cache_fraction}")
        if self.refit_bucket_mb <= 0 or self.max_batch_size < 1:
            raise ValueError("trtllm.refit_bucket_mb must be > 0 and trtllm.max_batch_size >= 1")


@dataclass
class VllmConfig:
    """Options of the `vllm` engine (vLLM 0.32; `nemo_lead.generation.vllm_params` says what it sets itself
    and what it refuses). Its batch is engine.max_batch_size (vLLM's max_num_seqs), its KV cache
    engine.kv_cache_gib, its TP engine.tp (replicas at one stage)."""

    # GPU: the share of the device's memory vLLM may take (weights, activations, CUDA graphs and the KV cache)
    # when engine.kv_cache_gib is unset; the actor's own memory must fit beside it (its optimizer state is
    # offloaded meanwhile with actor.offload_during_generation)
    gpu_memory_utilization: float = 0.5
    # GPU: what sleeping during the update frees. 1: the KV cache, the weights kept on the host; 2: the KV
    # cache and the weights (the refit that follows reloads them). None: 1 on a GPU. vLLM's CPU build has no
    # sleep mode: leave it None there
    sleep_level: Optional[int] = None
    enforce_eager: Optional[bool] = None  # None: eager on CPU (no compile at start), CUDA graphs on a GPU
    max_model_len: Optional[int] = None  # prompt + response tokens per sequence; None: the model's limit
    llm_kwargs: dict[str, Any] = field(default_factory=dict)  # more vllm.LLM arguments (enable_chunked_prefill, ...)

    def __post_init__(self) -> None:
        if not 0 < self.gpu_memory_utilization < 1:
            raise ValueError(f"engine.vllm.gpu_memory_utilization must be in (0, 1), got {self.gpu_memory_utilization!r}")
        if self.sleep_level not in (None, 1, 2):
            raise ValueError(f"engine.vllm.sleep_level must be 1, 2 or null, got {self.sleep_level!r}")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError(f"engine.vllm.max_model_len must be >= 2 (or null), got {self.max_model_len!r}")


@dataclass
class EngineConfig:
    # megatron: nemo-lead's own engine (CPU and GPU, no extra dependency); vllm: vLLM (the GPU image, the vllm
    # extra, or its CPU build); trtllm: TensorRT-LLM (its image); auto: vllm where it is importable on a GPU,
    # megatron otherwise, said in the job's log (docs/support.md, "Which engine")
    kind: str = field(default="megatron", metadata={"choices": (*ENGINE_KINDS, AUTO_KIND)})
    max_batch_size: int = 256  # megatron: sequences decoding at once (continuous batching)
    max_prefill_tokens: int = 16384  # megatron: padded prompt tokens prefilled together
    sync_every: Optional[int] = None  # megatron: decode steps between host syncs (None: 1 on CPU, 8 on GPU)
    cuda_graphs: Optional[bool] = None  # megatron: decode steps as CUDA graphs (None: on a GPU at TP = PP = 1)
    # megatron: allow CUDA graphs at engine TP > 1 with one stage too (on a TP > 1 actor's modules or the copy
    # at engine.tp=b > 1), the TP all-reduces captured in the graph. A key of its own rather than a value of
    # cuda_graphs: cuda_graphs says whether (None: on a GPU wherever allowed), this says where, and it stays
    # off until a GPU run has measured it (bench/gpu_session.sh, step rollout_tp2; docs/engine-layout.md).
    # PP > 1: never
    cuda_graphs_tp: bool = False
    # bytes of K and V cache this rank may hold, in GiB (2^30 bytes). megatron: None = no budget (the cache grows
    # on demand up to max_batch_size rows); sequences reserve longest prompt + max_tokens slots at admission
    # and wait for rows when the budget is full (nemo_lead.generation.megatron_engine.kv_budget); results do not change.
    # vllm: its KV cache (kv_cache_memory_bytes); None = engine.vllm.gpu_memory_utilization on a GPU, 1 GiB
    # on a CPU
    kv_cache_gib: Optional[float] = None
    # megatron: the engine's model-parallel layout. actor: the engine decodes on the model's own modules, so
    # at its TP / PP (actor.tp / actor.pp; eval and generate: tp / pp); a number equal to that layout means
    # the same. rl only: engine.tp=1 engine.pp=1 over a larger actor layout gives every rank a TP1 copy of
    # the weights, rebuilt in memory after every update, each rank an engine replica generating its share
    # of the prompts; engine.tp=b engine.pp=1 (b dividing actor.tp) makes each run of b ranks a replica
    # holding TP-b shards. auto (the default): rl on GPUs takes the fastest that fits, in the plan, of the
    # actor's layout and the engine TPs b dividing actor.tp at one stage, printed at start; without a GPU,
    # and in eval / generate, the actor's (docs/engine-layout.md). Other engine layouts are not implemented
    tp: str = AUTO
    pp: str = AUTO
    refit_bucket_mb: float = 512  # megatron, engine layout of its own: weights gathered per collective, in MB
    trtllm: TrtllmConfig = field(default_factory=TrtllmConfig)
    vllm: VllmConfig = field(default_factory=VllmConfig)

    def __post_init__(self) -> None:
        if self.kind != AUTO_KIND:
            engine_kind(self.kind)  # ValueError naming the kinds
        check_limits(self.max_batch_size, self.max_prefill_tokens, self.sync_every, self.kv_cache_gib,
                     self.refit_bucket_mb)
        for key in ("tp", "pp"):
            value = str(getattr(self, key))
            if value not in (AUTO, AT_THE_MODELS_LAYOUT) and not (value.isdigit() and int(value) >= 1):
                raise ValueError(f"engine.{key} must be {AUTO}, {AT_THE_MODELS_LAYOUT} or a number >= 1 (the "
                                 f"plan's choice, the model's {key.upper()}, or 1 for a TP1 x PP1 engine), got "
                                 f"{value!r}")


def resolve_engine_kind(cfg: EngineConfig) -> EngineConfig:
    """`cfg` with engine.kind=auto made concrete: on a machine with a GPU the first of auto's candidates whose
    library imports (vllm), else the last (megatron), said once (rank 0); and for a kind that runs replicas of
    its own (`copies`: vllm), engine.tp / engine.pp auto made the one layout it takes here (tp: the actor's,
    pp: 1; `replica_layout`). Other kinds pass unchanged."""
    if cfg.kind != AUTO_KIND and engine_kind(cfg.kind).layout == "copies":
        return dataclasses.replace(cfg, tp=AT_THE_MODELS_LAYOUT if str(cfg.tp) == AUTO else cfg.tp,
                                   pp="1" if str(cfg.pp) == AUTO else cfg.pp)
    if cfg.kind != AUTO_KIND:
        return cfg
    kind, why, missing = AUTO_CANDIDATES[-1].name, "no GPU here", []
    if torch.cuda.is_available():
        for k in AUTO_CANDIDATES:
            if k.importable is not None and not _attr(k.importable)():
                missing.append(k.library)
                continue
            kind = k.name
            why = f"{k.library} is installed" if k.importable is not None else f"{' / '.join(missing)} is not installed"
            break
    if launch_rank() == 0:
        print(f"[nemo-lead] engine.kind=auto: {kind} ({why})", flush=True)
    return resolve_engine_kind(dataclasses.replace(cfg, kind=kind))


def _attr(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


def engine_config_for(cfg: EngineConfig, source: Any) -> EngineConfig:
    """`cfg` ready for the model `source` (a `nemo_lead.models.source.ModelSource`): an engine built from a HF
    folder (`hf_folder`: trtllm) without an hf_dir in its section gets the model's HF folder, or for a
    checkpoint a temporary folder with its config.json and tokenizer files (the weights come by refit). Other
    engines need nothing. Used by eval and rl."""
    kind = ENGINE_KINDS.get(cfg.kind)  # None: auto, resolved when the engine is built (never trtllm)
    if kind is None or not kind.hf_folder or getattr(cfg, cfg.kind).hf_dir:
        return cfg
    hf_dir = source.path
    if source.kind == "checkpoint":
        hf_dir = tempfile.mkdtemp(prefix=f"nemo-lead-{cfg.kind}-")
        Path(hf_dir, "config.json").write_text(json.dumps(source.hf_config))
        for f in tokenizer_files(source.require_tokenizer()):
            shutil.copy2(f, hf_dir)
    return dataclasses.replace(cfg, **{cfg.kind: dataclasses.replace(getattr(cfg, cfg.kind), hf_dir=hf_dir)})


def build_engine(cfg: EngineConfig, actor: Any, *, release_copy: bool = False, weight_version: int = 0) -> RolloutEngine:
    """The engine `cfg.kind` over `actor` (a GPTModel, a list of one chunk, or an object with `.model`), built by
    its module's `build` (`nemo_lead.plan.engine_kinds`). megatron with a layout of its own (`has_own_layout`
    for the job's TP / PP): a copy per engine replica, freed between generations when `release_copy`
    (`actor.offload_during_generation`). vllm: built on every rank, filled from `actor`, whose weights are those
    of optimizer step `weight_version`."""
    cfg = resolve_engine_kind(cfg)
    build = engine_kind(cfg.kind).build
    build = _attr(build) if isinstance(build, str) else build
    return build(cfg, actor, release_copy=release_copy, weight_version=weight_version)

