"""The rollout engines' kinds: one registry entry each, all that the layers above an engine know of it.

    ENGINE_KINDS["vllm"].pool          # "whole": the plan counts its KV pool as allocated whole at start
    engine_kind(cfg.kind).build        # "module:function" that builds it (`nemo_lead.generation.build_engine`)

An engine is its module in `nemo_lead/generation/` (the `RolloutEngine` methods and a `build` function) and
its entry here: the module that builds it, its layout rule (`check_engine_layout`), what `nemo-lead plan`
counts for it (the memory parts of its copy, its KV pool and CUDA graphs, its weights on the host while it
sleeps), its timing figure and its refit model, whether `engine.kind=auto` may choose it, and what the
configs must refuse with it. Neither the plan nor the configs branch on an engine's name: they read these
fields. The entry lives with the plan because the plan (a lower layer than the engines, arithmetic only)
is the lowest layer that needs it; builders are "module:function" strings, imported only by
`nemo_lead.generation.engine_config.build_engine`.

Layout rules (`layout`):
- `actor_or_copies` (megatron): on the model's own modules at its TP x PP, or (rl) on copies of its own at
  engine.tp=b engine.pp=1, b dividing the model's TP (`has_own_layout`);
- `copies` (vllm): always replicas of its own at one stage and engine.tp dividing the model's TP
  (`replica_layout`);
- `fixed` (trtllm): a layout of its own that the configs do not set (`fixed_layout` says which):
  engine.tp / engine.pp stay `actor`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional, Union

AUTO_KIND = "auto"  # engine.kind: vLLM where it is importable on a GPU (the plan's faster that fits), megatron otherwise
AT_THE_MODELS_LAYOUT = "actor"  # engine.tp / engine.pp: the engine decodes on the model's own modules
# engine.tp / engine.pp: chosen when a job starts (`nemo_lead.plan.check.resolve_engine_auto`); a config that
# still holds it decodes at the model's own layout
AUTO = "auto"

LAYOUTS = ("actor_or_copies", "copies", "fixed")
COPY_WEIGHTS = ("tables_whole", "sharded")  # a copy at engine TP b: vocabulary tables whole | every table b ways
POOLS = ("grows", "whole")  # its KV cache: grows up to engine.kv_cache_gib | allocated whole at start
REFITS = ("none", "gather", "reload")  # its copy refreshed after an update: -, over NVLink, HF names via the host

# vLLM's decode figure: of the HBM bandwidth bound a decode step reaches. Assumed, not measured by this
# project. InferenceBench's concurrency sweep (its "concurrency-sweep" recipe page, run 2026-05-16):
# Llama-3.1-8B-Instruct, fp16, vLLM 0.21.0, one H100-80GB-HBM3, chatbot-short prompts, concurrency 1: TPOT p50
# 6.48 ms; the step reads the 8.03B parameters' 16.06 GB (its KV of a few hundred tokens, ~0.05 GB, left out)
# against 3.35 TB/s, a bound of 4.79 ms: 4.79 / 6.48 = 0.74. At the RL engine's batches the KV reads dominate and
# vLLM's paged attention may reach another fraction: bench/gpu_session.sh's rollout_bench step measures it on
# the same weights as the megatron engine (its vLLM row), and this figure is replaced then.
VLLM_DECODE_BANDWIDTH_FRACTION = 4.794 / 6.48
VLLM_DECODE_SOURCE = ("assumed, not measured by this project: InferenceBench concurrency sweep, Llama-3.1-8B fp16, "
                      "vLLM 0.21.0, 1 x H100 80GB, concurrency 1, TPOT 6.48 ms (2026-05-16)")
VLLM_GRAPH_GIB = 1.0  # vllm on a GPU: its CUDA graphs' memory pool, assumed (vLLM's log prints the real figure)


@dataclass(frozen=True)
class DecodeFigure:
    """An engine's decode speed where it is not the plan's measured one (`nemo_lead.plan.timing`)."""

    fraction: float  # of the HBM bandwidth bound a decode step reaches
    source: str  # where the figure comes from (printed beside the plan's times)
    cuda_graphs: bool = True  # it decodes with CUDA graphs (no host time per layer)


@dataclass(frozen=True)
class EngineKind:
    name: str
    # "module:function" (or the function: tests) (cfg: EngineConfig, actor, *, release_copy, weight_version) ->
    # RolloutEngine
    build: Union[str, Callable[..., Any]]
    about: str  # one line: what it is, where it runs
    layout: str  # one of LAYOUTS (module docstring)
    fixed_layout: str = ""  # a `fixed` layout's description, for the error that refuses engine.tp / engine.pp
    library: str = ""  # the library it runs, as its messages name it ("vLLM")
    # --- nemo-lead plan
    copy_weights: str = "tables_whole"  # one of COPY_WEIGHTS: its copy's weights on a GPU
    pool: str = "grows"  # one of POOLS; "whole": engine.kv_cache_gib is a cap the plan fits the pool under
    memory_fraction: Optional[str] = None  # its EngineConfig key of the GPU share it takes (a "whole" pool's)
    graphs_gib: float = 0.0  # its CUDA graphs' memory while it generates
    host_copy: str = ""  # what its weights on the host while it sleeps through the update are called ("": none)
    refit: str = "none"  # one of REFITS: the time its copy takes to refresh after an update
    timed: bool = True  # the plan gives it a step time (False: its memory only)
    decode: Optional[DecodeFigure] = None  # None: the megatron engine's measured figures (`timing`)
    label: str = "engine"  # how a layout of its copies is named ("vllm tp 2 x 4")
    plan_note: str = ""  # a line under an RL plan on it ({engine_tp} {graphs_gib} {fraction} {source} filled in)
    stage_note: str = ""  # a line under a generating stage's plan on it (the same fields)
    # --- engine.kind=auto
    auto: Optional[int] = None  # its rank among auto's candidates (the lower wins a tie; None: never chosen)
    # auto chooses it only on a GPU where its library is there: the module the plan looks for before a job
    # starts, and the "module:function" the job asks when it builds its engine (None: always there)
    auto_module: Optional[str] = None
    importable: Optional[str] = None
    # --- the configs
    untruncated_logprobs: bool = True  # reports the untruncated log-probs under top_p < 1 (rollout correction)
    generator_replicas: bool = False  # the split layout's generator ranks may be several replicas of it
    hf_folder: bool = False  # built from a HF folder: a checkpoint gets one written (`engine_config_for`)
    # its job's container image has Transformer Engine, so actor.layer_spec=auto builds TE layers there (the
    # plan counts TE's MLP term); the vLLM image (containers/Dockerfile, constraints-vllm-image.txt) has none
    image_has_te: bool = True

    def __post_init__(self) -> None:
        for value, allowed, what in ((self.layout, LAYOUTS, "layout"), (self.copy_weights, COPY_WEIGHTS, "copy_weights"),
                                     (self.pool, POOLS, "pool"), (self.refit, REFITS, "refit")):
            if value not in allowed:
                raise ValueError(f"engine kind {self.name}: {what} must be one of {allowed}, got {value!r}")


ENGINE_KINDS: dict[str, EngineKind] = {k.name: k for k in (
    EngineKind("megatron", "nemo_lead.generation.megatron_engine.engine:build",
               "nemo-lead's own engine on the actor's modules or copies of them (CPU and GPU, no extra dependency)",
               "actor_or_copies", refit="gather", auto=1, generator_replicas=True),
    EngineKind("vllm", "nemo_lead.generation.vllm_engine:build",
               "vLLM in every rank's process, refit in memory (the GPU image, the vllm extra, or its CPU build)",
               "copies", copy_weights="sharded", pool="whole", memory_fraction="vllm.gpu_memory_utilization",
               graphs_gib=VLLM_GRAPH_GIB, host_copy="vLLM's sleeping weights", refit="reload",
               decode=DecodeFigure(VLLM_DECODE_BANDWIDTH_FRACTION, VLLM_DECODE_SOURCE), label="vllm",
               plan_note=("(engine.kind=vllm: engine_copy is vLLM's weights at engine TP {engine_tp}, kv_cache its "
                          "whole pool, cuda_graphs assumed {graphs_gib:g} GiB; asleep during the update, its weights "
                          "on the host. Decode at {fraction:.0%} of the bandwidth bound: {source})"),
               stage_note=("(vllm: weights is the job's model, kept beside vLLM's copy (engine_copy); kv_cache its "
                           "whole pool; cuda_graphs assumed; decode speed: {source})"),
               library="vLLM", auto=0, auto_module="vllm", importable="nemo_lead.generation.vllm_engine:vllm_importable",
               untruncated_logprobs=False, image_has_te=False),
    EngineKind("trtllm", "nemo_lead.generation.trtllm_engine:build",
               "TensorRT-LLM, refit in memory (its container image)", "fixed",
               fixed_layout="one TP1 copy of the model per GPU", library="TensorRT-LLM", timed=False,
               plan_note=("(engine.kind=trtllm: the generation column counts the megatron engine's cache; "
                          "TensorRT-LLM keeps its own weights and takes engine.trtllm.kv_cache_fraction of the free "
                          "memory)"),
               untruncated_logprobs=False, hf_folder=True),
)}
# what engine.kind=auto chooses from, the preferred first (it wins a tie; the last is taken when none fits)
AUTO_CANDIDATES = tuple(sorted((k for k in ENGINE_KINDS.values() if k.auto is not None), key=lambda k: k.auto))
AUTO_NAMES = tuple(k.name for k in AUTO_CANDIDATES)


def engine_kind(name: str) -> EngineKind:
    """The entry of engine.kind `name` (ValueError naming the kinds for another)."""
    if name not in ENGINE_KINDS:
        raise ValueError(f"engine.kind must be one of {', '.join((*ENGINE_KINDS, AUTO_KIND))}, got {name!r}")
    return ENGINE_KINDS[name]


def plan_note(name: str, engine_tp: int = 1, stage: bool = False) -> str:
    """The line `nemo-lead plan` prints under an RL plan on engine `name` (`stage`: under a generating stage's
    plan); "" for none."""
    k = ENGINE_KINDS[name]
    return (k.stage_note if stage else k.plan_note).format(
        engine_tp=engine_tp, graphs_gib=k.graphs_gib, fraction=k.decode.fraction if k.decode else 0.0,
        source=k.decode.source if k.decode else "")


def memory_fraction(engine: Any) -> float:
    """The GPU share engine config `engine` gives its kind (`memory_fraction`), 0.0 for a kind without one."""
    key = engine_kind(engine.kind).memory_fraction
    if key is None:
        return 0.0
    value = engine
    for part in key.split("."):
        value = getattr(value, part)
    return float(value)


def pool_share(engine: Any) -> float:
    """The GPU share engine config `engine` gives an engine whose pool is allocated whole: its kind's
    `memory_fraction` key, or with engine.kind=auto that of the first candidate that has one (0.0: none)."""
    names = [k.name for k in AUTO_CANDIDATES] if engine.kind == AUTO_KIND else [engine.kind]
    for name in names:
        if ENGINE_KINDS[name].memory_fraction:
            return memory_fraction(dataclasses.replace(engine, kind=name))
    return 0.0


# ----------------------------------------------------------------------------- layout rules
def engine_value(value: Any, own: int) -> int:
    """engine.tp / engine.pp as a number (`actor`, or `auto` until chosen: the model's `own`)."""
    return own if str(value) in (AUTO, AT_THE_MODELS_LAYOUT) else int(value)


def engine_layout(cfg: Any, *, tp: int, pp: int) -> tuple[int, int]:
    """The engine's (TP, PP) over a model at `tp` x `pp` (`actor`, and `auto` not yet chosen, resolved to the
    model's value)."""
    return engine_value(cfg.tp, tp), engine_value(cfg.pp, pp)


def has_own_layout(cfg: Any, *, tp: int, pp: int) -> bool:
    """The engine decodes on copies of its own that engine.tp / engine.pp choose: an `actor_or_copies` kind at
    engine.tp=b engine.pp=1 (b | tp) over a larger layout. (A `copies` kind always decodes on replicas of its
    own, at one stage: `replica_layout`.)"""
    kind = ENGINE_KINDS.get(cfg.kind)
    return kind is not None and kind.layout == "actor_or_copies" and engine_layout(cfg, tp=tp, pp=pp) != (tp, pp)


def replica_layout(cfg: Any, *, tp: int, pp: int, prefix: str = "actor.") -> int:
    """A `copies` engine's TP over a model at `prefix`tp x `prefix`pp: engine.tp (auto and actor: the model's TP;
    a number b dividing it), one stage (engine.pp auto, 1, or actor over a one-stage model). A pipeline
    parallelism of its own is not used: replicas at one stage, as the megatron engine's copies. ValueError
    naming the key otherwise."""
    pp_value = str(cfg.pp)
    if not (pp_value in (AUTO, "1") or (pp_value == AT_THE_MODELS_LAYOUT and pp == 1)):
        raise ValueError(f"engine.pp={pp_value} with engine.kind={cfg.kind} over {prefix}pp={pp}: the "
                         f"{engine_kind(cfg.kind).library} engine runs as replicas at one stage (an engine PP of its "
                         "own is not supported): set engine.pp=1 (or auto)")
    value = str(cfg.tp)
    b = tp if value in (AUTO, AT_THE_MODELS_LAYOUT) else int(value)
    if tp % b:
        raise ValueError(f"engine.tp={value} with engine.kind={cfg.kind} over {prefix}tp={tp}: an engine replica's ranks "
                         f"must lie inside one actor replica's TP group, so engine.tp must divide {prefix}tp")
    return b


def auto_kinds_checked(cfg: Any) -> list[Any]:
    """engine.kind=auto's config as each engine it may become (in the registry's order)."""
    return [dataclasses.replace(cfg, kind=name) for name, k in ENGINE_KINDS.items() if k.auto is not None]


def auto_layouts(cfg: Any, *, tp: int, pp: int) -> list[tuple[int, int]]:
    """The (TP, PP) layouts `auto` may become over a model at `tp` x `pp`: `engine_layouts` (the model's own,
    then one stage at each TP b dividing `tp`) that agree with a key set explicitly (engine.tp=auto
    engine.pp=1 over TP4 / PP2: TP1, TP2 and TP4 at PP1)."""
    from nemo_lead.parallel.layout import engine_layouts  # (nemo_lead.parallel loads torch)

    return engine_layouts(tp, pp, cfg.tp, cfg.pp)


def check_engine_layout(cfg: Any, *, tp: int, pp: int, prefix: str = "actor.", own_layout: bool = True) -> None:
    """`cfg.tp` / `cfg.pp` against the layout of the model the engine decodes on (`prefix`tp / `prefix`pp):
    the model's own (`actor` or the same numbers) or, where `own_layout` (rl), TP1 x PP1 (a copy per rank);
    else a ValueError naming both values, by the kind's layout rule (module docstring): a `fixed` kind
    (trtllm) runs its own layout, so they must stay at `actor`; a `copies` kind (vllm) runs replicas at one
    stage (`replica_layout`), in eval / generate (not `own_layout`) at the model's TP, so that every rank holds
    the same rollouts. engine.kind=auto becomes one of its candidates when the job starts, so a layout set by
    number must suit each."""
    if cfg.kind == AUTO_KIND:  # a layout set by number must suit each engine auto may become
        for one in auto_kinds_checked(cfg) if any(str(v) not in (AUTO, AT_THE_MODELS_LAYOUT) for v in (cfg.tp, cfg.pp)) else ():
            try:
                check_engine_layout(one, tp=tp, pp=pp, prefix=prefix, own_layout=own_layout)
            except ValueError as e:
                raise ValueError(f"engine.kind=auto may run the {one.kind} engine: {e}") from None
        return
    kind = engine_kind(cfg.kind)
    if kind.layout == "copies":
        b = replica_layout(cfg, tp=tp, pp=pp, prefix=prefix)
        if not own_layout and b != tp * pp:
            raise ValueError(f"engine.tp={cfg.tp} engine.pp={cfg.pp} with engine.kind={cfg.kind} over {prefix}tp={tp} "
                             f"{prefix}pp={pp}: here the engine runs at the model's layout, one stage: set "
                             f"{prefix}pp=1 and engine.tp={AT_THE_MODELS_LAYOUT}")
        return
    for key in ("tp", "pp"):
        value = str(getattr(cfg, key))
        if value not in (AUTO, AT_THE_MODELS_LAYOUT) and kind.layout == "fixed":
            raise ValueError(f"engine.{key}={value} sets the engine's layout; engine.kind={cfg.kind} runs "
                             f"{kind.fixed_layout}: leave engine.{key}={AT_THE_MODELS_LAYOUT}")
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
