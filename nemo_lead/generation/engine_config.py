"""Choosing a rollout engine from configuration: `EngineConfig` (nest it in a job's config) -> `build_engine`.

    engine = build_engine(EngineConfig(kind="megatron", max_batch_size=256), actor)

`kind="trtllm"` and `kind="vllm"` import TensorRT-LLM / vLLM only when asked for, and fail with one clear
error where they are not installed (`trtllm_engine.INSTALL_HINT`, `vllm_params.INSTALL_HINT`). `kind="auto"`
(`resolve_engine_kind`): vLLM on a GPU machine where it imports, the megatron engine otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import torch

from nemo_lead.generation.engine import RolloutEngine
from nemo_lead.generation.megatron_engine.engine import MegatronEngine, check_limits
from nemo_lead.generation.trtllm_engine import TrtllmEngine
from nemo_lead.models import tokenizer_files
from nemo_lead.parallel.layout import engine_layouts
from nemo_lead.runtime.processes import launch_rank

ENGINE_KINDS = ("megatron", "vllm", "trtllm")
AUTO_KIND = "auto"  # engine.kind: vLLM where it is importable on a GPU, megatron otherwise (`resolve_engine_kind`)
AT_THE_MODELS_LAYOUT = "actor"  # engine.tp / engine.pp: the engine decodes on the model's own modules
# engine.tp / engine.pp: chosen when a job starts (`nemo_lead.plan.check.resolve_engine_auto`); a config
# that still holds it decodes at the model's own layout
AUTO = "auto"


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
        if self.kind not in (*ENGINE_KINDS, AUTO_KIND):
            raise ValueError(f"engine.kind must be one of {', '.join((*ENGINE_KINDS, AUTO_KIND))}, got {self.kind!r}")
        check_limits(self.max_batch_size, self.max_prefill_tokens, self.sync_every, self.kv_cache_gib,
                     self.refit_bucket_mb)
        for key in ("tp", "pp"):
            value = str(getattr(self, key))
            if value not in (AUTO, AT_THE_MODELS_LAYOUT) and not (value.isdigit() and int(value) >= 1):
                raise ValueError(f"engine.{key} must be {AUTO}, {AT_THE_MODELS_LAYOUT} or a number >= 1 (the "
                                 f"plan's choice, the model's {key.upper()}, or 1 for a TP1 x PP1 engine), got "
                                 f"{value!r}")


def engine_layout(cfg: EngineConfig, *, tp: int, pp: int) -> tuple[int, int]:
    """The engine's (TP, PP) over a model at `tp` x `pp` (`actor`, and `auto` not yet chosen, resolved to the
    model's value)."""
    return tuple(own if str(v) in (AUTO, AT_THE_MODELS_LAYOUT) else int(v) for v, own in ((cfg.tp, tp), (cfg.pp, pp)))


def has_own_layout(cfg: EngineConfig, *, tp: int, pp: int) -> bool:
    """The engine decodes on a copy of its own (`engine.tp=b engine.pp=1`, b | tp, over a larger layout)."""
    return cfg.kind == "megatron" and engine_layout(cfg, tp=tp, pp=pp) != (tp, pp)


def auto_layouts(cfg: EngineConfig, *, tp: int, pp: int) -> list[tuple[int, int]]:
    """The (TP, PP) layouts `auto` may become over a model at `tp` x `pp`: `engine_layouts` (the model's own,
    then one stage at each TP b dividing `tp`) that agree with a key set explicitly (engine.tp=auto
    engine.pp=1 over TP4 / PP2: TP1, TP2 and TP4 at PP1)."""
    return engine_layouts(tp, pp, cfg.tp, cfg.pp)


def vllm_layout(cfg: EngineConfig, *, tp: int, pp: int, prefix: str = "actor.") -> int:
    """The vllm engine's TP over a model at `prefix`tp x `prefix`pp: engine.tp (auto and actor: the model's TP;
    a number b dividing it), one stage (engine.pp auto, 1, or actor over a one-stage model). vLLM's own
    pipeline parallelism is not used: replicas at one stage, as the megatron engine's copies. ValueError
    naming the key otherwise."""
    pp_value = str(cfg.pp)
    if not (pp_value in (AUTO, "1") or (pp_value == AT_THE_MODELS_LAYOUT and pp == 1)):
        raise ValueError(f"engine.pp={pp_value} with engine.kind=vllm over {prefix}pp={pp}: the vLLM engine runs as "
                         "replicas at one stage (an engine PP of its own is not supported): set engine.pp=1 (or auto)")
    value = str(cfg.tp)
    b = tp if value in (AUTO, AT_THE_MODELS_LAYOUT) else int(value)
    if tp % b:
        raise ValueError(f"engine.tp={value} with engine.kind=vllm over {prefix}tp={tp}: an engine replica's ranks "
                         f"must lie inside one actor replica's TP group, so engine.tp must divide {prefix}tp")
    return b


def check_engine_layout(cfg: EngineConfig, *, tp: int, pp: int, prefix: str = "actor.", own_layout: bool = True) -> None:
    """`cfg.tp` / `cfg.pp` against the layout of the model the engine decodes on (`prefix`tp / `prefix`pp):
    the model's own (`actor` or the same numbers) or, where `own_layout` (rl), TP1 x PP1 (a copy per rank);
    else a ValueError naming both values. TensorRT-LLM runs its own layout (one TP1 copy per GPU), so with
    engine.kind=trtllm they must stay at `actor`; vLLM runs replicas at one stage (`vllm_layout`); in eval /
    generate (not `own_layout`) at the model's TP, so that every rank holds the same rollouts. engine.kind=auto
    becomes vllm or megatron when the job starts, so a layout set by number must suit both."""
    if cfg.kind == AUTO_KIND and any(str(v) not in (AUTO, AT_THE_MODELS_LAYOUT) for v in (cfg.tp, cfg.pp)):
        for kind in ("megatron", "vllm"):
            try:
                check_engine_layout(dataclasses.replace(cfg, kind=kind), tp=tp, pp=pp, prefix=prefix,
                                    own_layout=own_layout)
            except ValueError as e:
                raise ValueError(f"engine.kind=auto may run the {kind} engine: {e}") from None
        return
    if cfg.kind == "vllm":
        b = vllm_layout(cfg, tp=tp, pp=pp, prefix=prefix)
        if not own_layout and b != tp * pp:
            raise ValueError(f"engine.tp={cfg.tp} engine.pp={cfg.pp} with engine.kind=vllm over {prefix}tp={tp} "
                             f"{prefix}pp={pp}: here the engine runs at the model's layout, one stage: set "
                             f"{prefix}pp=1 and engine.tp={AT_THE_MODELS_LAYOUT}")
        return
    for key in ("tp", "pp"):
        value = str(getattr(cfg, key))
        if value not in (AUTO, AT_THE_MODELS_LAYOUT) and cfg.kind != "megatron":
            raise ValueError(f"engine.{key}={value} sets the megatron engine's layout; engine.kind={cfg.kind} runs "
                             f"one TP1 copy of the model per GPU: leave engine.{key}={AT_THE_MODELS_LAYOUT}")
    if own_layout and AUTO in (str(cfg.tp), str(cfg.pp)):
        if not auto_layouts(cfg, tp=tp, pp=pp):
            raise ValueError(f"engine.tp={cfg.tp} engine.pp={cfg.pp} over {prefix}tp={tp} {prefix}pp={pp}: auto "
                             f"chooses the model's layout or one stage at a TP dividing {prefix}tp, and none agrees with the value set")
        return
    layout = engine_layout(cfg, tp=tp, pp=pp)
    if layout == (tp, pp) or (own_layout and layout[1] == 1 and tp % layout[0] == 0):
        return
    for key, own, mine in (("tp", tp, layout[0]), ("pp", pp, layout[1])):
        if mine != own:
            value = str(getattr(cfg, key))
            said = f"engine.{key}={value}" + (f" ({mine})" if value in (AUTO, AT_THE_MODELS_LAYOUT) else "")
            if not own_layout:
                raise ValueError(f"{said} differs from {prefix}{key}={own}: here the engine decodes on the "
                                 f"model's own modules at {prefix}{key} (an engine layout of its own is implemented "
                                 f"for rl only): set engine.{key}={AT_THE_MODELS_LAYOUT} or engine.{key}={own}")
            raise ValueError(f"engine.tp={cfg.tp} engine.pp={cfg.pp} over {prefix}tp={tp} {prefix}pp={pp}: the "
                             f"engine runs at the model's layout (engine.tp=engine.pp={AT_THE_MODELS_LAYOUT}) or as "
                             "replicas at one stage and a TP dividing the model's (engine.tp=b engine.pp=1, b | "
                             f"{prefix}tp); other engine layouts (a PP of its own, a TP not dividing {prefix}tp) "
                             "are not implemented yet")


def resolve_engine_kind(cfg: EngineConfig) -> EngineConfig:
    """`cfg` with engine.kind=auto made concrete: vllm on a machine with a GPU where vLLM imports, megatron
    otherwise, said once (rank 0); and for vllm, engine.tp / engine.pp auto made the one layout it takes here
    (tp: the actor's, pp: 1; `vllm_layout`). Other kinds pass unchanged."""
    if cfg.kind == "vllm":
        return dataclasses.replace(cfg, tp=AT_THE_MODELS_LAYOUT if str(cfg.tp) == AUTO else cfg.tp,
                                   pp="1" if str(cfg.pp) == AUTO else cfg.pp)
    if cfg.kind != AUTO_KIND:
        return cfg
    if not torch.cuda.is_available():
        kind, why = "megatron", "no GPU here"
    else:
        from nemo_lead.generation.vllm_engine import vllm_importable

        kind, why = ("vllm", "vLLM is installed") if vllm_importable() else ("megatron", "vLLM is not installed")
    if launch_rank() == 0:
        print(f"[nemo-lead] engine.kind=auto: {kind} ({why})", flush=True)
    return resolve_engine_kind(dataclasses.replace(cfg, kind=kind))


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


def build_engine(cfg: EngineConfig, actor: Any, *, release_copy: bool = False, weight_version: int = 0) -> RolloutEngine:
    """The engine `cfg.kind` over `actor` (a GPTModel, a list of one chunk, or an object with `.model`).
    megatron with a layout of its own (`has_own_layout` for the job's TP / PP): a copy per engine replica, freed
    between generations when `release_copy` (`actor.offload_during_generation`). vllm: built on every rank,
    filled from `actor`, whose weights are those of optimizer step `weight_version`."""
    cfg = resolve_engine_kind(cfg)
    if cfg.kind == "vllm":
        from megatron.core import parallel_state as ps

        from nemo_lead.generation.vllm_engine import VllmEngine

        tp = vllm_layout(cfg, tp=ps.get_tensor_model_parallel_world_size(), pp=ps.get_pipeline_model_parallel_world_size())
        return VllmEngine(actor, cfg, tp=tp, weight_version=weight_version)
    if cfg.kind == "megatron":
        from megatron.core import parallel_state as ps

        tp, pp = ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size()
        own = has_own_layout(cfg, tp=tp, pp=pp)
        return MegatronEngine(actor, max_batch_size=cfg.max_batch_size, max_prefill_tokens=cfg.max_prefill_tokens,
                              sync_every=cfg.sync_every, cuda_graphs=cfg.cuda_graphs, kv_cache_gib=cfg.kv_cache_gib,
                              own_copy=own, refit_bucket_mb=cfg.refit_bucket_mb, release_copy=release_copy,
                              engine_tp=engine_layout(cfg, tp=tp, pp=pp)[0] if own else 1,
                              cuda_graphs_tp=cfg.cuda_graphs_tp)
    return TrtllmEngine(actor, cfg.trtllm)
