"""Choosing a rollout engine from configuration: `EngineConfig` (nest it in a job's config) -> `build_engine`.

    engine = build_engine(EngineConfig(kind="megatron", max_batch_size=256), actor)

`kind="trtllm"` imports TensorRT-LLM only here, when asked for, and fails with one clear error where it
is not installed (see `nemo_lead.generation.trtllm_engine.INSTALL_HINT`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from nemo_lead.models import tokenizer_files

from .megatron_engine import MegatronEngine
from .params import RolloutEngine
from .trtllm_engine import TrtllmEngine

ENGINE_KINDS = ("megatron", "trtllm")
AT_THE_MODELS_LAYOUT = "actor"  # engine.tp / engine.pp: the engine decodes on the model's own modules


@dataclass
class TrtllmConfig:
    """Options of the `trtllm` engine (TensorRT-LLM >= 1.2.0, < 1.3, PyTorch backend; see
    `nemo_lead.generation.trtllm_plan` for what it sets itself and what it refuses)."""

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
class EngineConfig:
    kind: str = field(default="megatron", metadata={"choices": ENGINE_KINDS})  # megatron | trtllm
    max_batch_size: int = 256  # megatron: sequences decoding at once (continuous batching)
    max_prefill_tokens: int = 16384  # megatron: padded prompt tokens prefilled together
    sync_every: Optional[int] = None  # megatron: decode steps between host syncs (None: 1 on CPU, 8 on GPU)
    cuda_graphs: Optional[bool] = None  # megatron: decode steps as CUDA graphs (None: on a GPU at TP = PP = 1)
    # megatron: bytes of K and V cache this rank may hold, in GB (1e9 bytes); None = no budget (the cache grows
    # on demand up to max_batch_size rows). Sequences reserve longest prompt + max_tokens slots at admission
    # and wait for rows when the budget is full (nemo_lead.generation.kv_budget); results do not change
    kv_cache_gb: Optional[float] = None
    # megatron: the engine's model-parallel layout. actor (the default): the engine decodes on the model's own
    # modules, so at its TP / PP (actor.tp / actor.pp; eval and generate: tp / pp); a number must equal that
    # layout. An engine layout of its own (a copy of the weights resharded each step) is not implemented yet
    tp: str = AT_THE_MODELS_LAYOUT
    pp: str = AT_THE_MODELS_LAYOUT
    trtllm: TrtllmConfig = field(default_factory=TrtllmConfig)

    def __post_init__(self) -> None:
        if self.kind not in ENGINE_KINDS:
            raise ValueError(f"kind must be one of {', '.join(ENGINE_KINDS)}, got {self.kind!r}")
        if self.max_batch_size < 1 or self.max_prefill_tokens < 1:
            raise ValueError("max_batch_size and max_prefill_tokens must be >= 1")
        if self.sync_every is not None and self.sync_every < 1:
            raise ValueError(f"sync_every must be >= 1, got {self.sync_every}")
        if self.kv_cache_gb is not None and not self.kv_cache_gb > 0:
            raise ValueError(f"engine.kv_cache_gb must be > 0 (or None for no budget), got {self.kv_cache_gb!r}")
        for key in ("tp", "pp"):
            value = str(getattr(self, key))
            if value != AT_THE_MODELS_LAYOUT and not (value.isdigit() and int(value) >= 1):
                raise ValueError(f"engine.{key} must be {AT_THE_MODELS_LAYOUT} or the model's {key.upper()} (a "
                                 f"number >= 1), got {value!r}: an engine layout of its own (what the plan finds "
                                 "fastest) is not implemented yet")


def check_engine_layout(cfg: EngineConfig, *, tp: int, pp: int, prefix: str = "actor.") -> None:
    """`cfg.tp` / `cfg.pp` against the layout of the model the engine decodes on (`prefix`tp / `prefix`pp):
    `actor` or the same numbers, else a ValueError naming both values. TensorRT-LLM runs its own layout
    (one TP1 copy per GPU), so with engine.kind=trtllm they must stay at `actor`."""
    for key, own in (("tp", tp), ("pp", pp)):
        value = str(getattr(cfg, key))
        if value == AT_THE_MODELS_LAYOUT:
            continue
        if cfg.kind != "megatron":
            raise ValueError(f"engine.{key}={value} sets the megatron engine's layout; engine.kind={cfg.kind} runs "
                             f"one TP1 copy of the model per GPU: leave engine.{key}={AT_THE_MODELS_LAYOUT}")
        if int(value) != own:
            raise ValueError(f"engine.{key}={value} differs from {prefix}{key}={own}: the engine decodes on the "
                             f"model's own modules at {prefix}{key}; an engine layout of its own (its copy of the "
                             f"weights resharded every step) is not implemented yet: set engine.{key}="
                             f"{AT_THE_MODELS_LAYOUT} or engine.{key}={own}")


def engine_config_for(cfg: EngineConfig, source: Any) -> EngineConfig:
    """`cfg` ready for the model `source` (a `nemo_lead.models.source.ModelSource`): the `trtllm` engine without
    an hf_dir gets the model's HF folder, or for a checkpoint a temporary folder with its config.json and
    tokenizer files (the weights come by refit). Other engines need nothing. Used by eval and rl."""
    if cfg.kind != "trtllm" or cfg.trtllm.hf_dir:
        return cfg
    hf_dir = source.path
    if source.kind == "checkpoint":
        hf_dir = tempfile.mkdtemp(prefix="nemo-lead-trtllm-")
        Path(hf_dir, "config.json").write_text(json.dumps(source.hf_config))
        for f in tokenizer_files(source.require_tokenizer()):
            shutil.copy2(f, hf_dir)
    return dataclasses.replace(cfg, trtllm=dataclasses.replace(cfg.trtllm, hf_dir=hf_dir))


def build_engine(cfg: EngineConfig, actor: Any) -> RolloutEngine:
    """The engine `cfg.kind` over `actor` (a GPTModel, a list of one chunk, or an object with `.model`)."""
    if cfg.kind == "megatron":
        return MegatronEngine(actor, max_batch_size=cfg.max_batch_size, max_prefill_tokens=cfg.max_prefill_tokens,
                              sync_every=cfg.sync_every, cuda_graphs=cfg.cuda_graphs, kv_cache_gb=cfg.kv_cache_gb)
    return TrtllmEngine(actor, cfg.trtllm)
