"""One SFT or RL job's plan: per GPU and phase, the bytes of each component, whether they fit, the step time.

    shape = job_shape(rl_cfg, "rl", hf_config, gpus=8, settings=PlanSettings())
    plan = plan_job(shape, gpu_named("h100"), memory_gib=80)
    plan.fits, plan.phases["generation"]["kv_cache"], plan.time.total

Phases: `update` (the train step: weights, gradient buffer, optimizer state, activations, logits) and, for
RL, `generation` (weights, gradient buffer and optimizer state unless `actor.offload_during_generation`
moves them to the host, the engine's KV cache, its prefill / decode temporaries as activations and its
sampling temporaries as logits). With the engine at TP1 x PP1 over a larger actor layout (`engine_tp1`)
the generation phase adds the engine's copy of the whole model (`engine_copy`) and the refit's bucket
buffers (`refit_buckets`: (TP + 1) x engine.refit_bucket_mb), and the engine's KV cache, temporaries and
rows are those of one TP1 replica per GPU; without offload the copy lives through the update too. Each phase reports the pipeline stage whose rank needs most (every TP rank
of a stage needs the same, but for the sampler: TP rank 0 of the last stage) and the worst DP rank's slice of
the distributed optimizer. What is left is the GPU's memory less `plan.reserve_gib` less the phase's total.

The job's configuration is read by attribute (an `SFTConfig` / `RLConfig`, or anything with the same
sections), so this layer imports no training code.
Worst cases taken: every response at max_tokens after a prompt of `plan.prompt_tokens`; a micro-batch of
max(actor.micro_batch_tokens, the longest sequence) padded tokens; SFT rows at data.max_seq_len.
Activation estimates follow the local layer spec as a GPU runs it (`nemo_lead.plan.activations`: measured on
the CPU tensor by tensor, checked against an H200's peaks); actor.layer_spec=te adds Transformer Engine's one
difference, its MLP's fifth [T, ffn] tensor (from TE's and megatron's code, not measured), and so does `auto`
where the job's image has TE (`planned_layer_spec`).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Optional

from nemo_lead.models.hf_config import Arch, arch_from_hf, padded_vocab_size
from nemo_lead.parallel.layout import check_layout, engine_layouts, model_shape
from nemo_lead.plan.activations import Recompute, update_memory
from nemo_lead.plan.engine_kinds import (
    AUTO_KIND,
    AUTO_NAMES,
    ENGINE_KINDS,
    EngineKind,
    engine_kind,
    engine_value,
    memory_fraction,
)
from nemo_lead.plan.engine_memory import engine_memory, kv_slot_bytes
from nemo_lead.plan.parameters import DTYPE_BYTES, stage_parameters, static_bytes
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.plan.timing import (
    GPU,
    StepTime,
    decode_graphs,
    generation_seconds,
    offload_seconds,
    refit_seconds,
    reload_refit_seconds,
    update_seconds,
)

GIB = 1 << 30
KV_GIB = 2**30  # engine.kv_cache_gib's unit (`nemo_lead.generation.megatron_engine.kv_budget.GIB`)
# the actor's token budget per micro-batch on a GPU when actor.micro_batch_tokens is None
# (`nemo_lead.training.actor.config.GPU_MICRO_BATCH_TOKENS`; the plans are for GPUs)
GPU_MICRO_BATCH_TOKENS = 16384
GPUS_PER_NODE = 8  # a node's GPUs: TP stays within one; the host memory of offload is counted per node


@dataclass(frozen=True)
class JobShape:
    """What the plan reads from a job's configuration (`job_shape`); the fixes vary it (`dataclasses.replace`)."""

    kind: str  # sft | rl
    arch: Arch
    gpus: int
    tp: int
    pp: int
    precision: str
    distributed_optimizer: bool
    sequence_parallel: bool
    recompute: Recompute
    micro_batch_tokens: int
    logprob_chunk_tokens: int
    offload: bool
    longest: int  # tokens of the longest sequence (prompt + response, or an SFT row)
    sequences: int  # per optimizer step, all DP ranks
    minibatches: int = 1
    passes: int = 1  # training passes over the step's sequences (ppo_epochs)
    old_logprob_pass: bool = False  # a forward pass of its own for the old log-probs
    entropy: bool = False
    temperature: float = 1.0
    # RL generation
    prompts: int = 0
    n: int = 1
    prompt_tokens: int = 0
    max_tokens: int = 0
    engine: str = "megatron"  # engine.kind (`nemo_lead.plan.engine_kinds`: what the plan counts for it)
    max_batch_size: int = 256
    max_prefill_tokens: int = 16384
    sync_every: int = 8
    cuda_graphs: Optional[bool] = None
    cuda_graphs_tp: bool = False  # engine.cuda_graphs_tp (`timing.decode_graphs`)
    kv_cache_gib: Optional[float] = None  # engine.kv_cache_gib: GiB (2^30 bytes) of KV cache per rank
    top_p: float = 1.0
    mean_response_tokens: Optional[float] = None  # the step time's mean response (None: all at max_tokens)
    vocab_divisible_by: int = 128
    # megatron engine at TP1 x PP1 over a larger actor layout (engine.tp=1 engine.pp=1): a copy of the whole
    # model per GPU, rebuilt after every update in buckets of refit_bucket_mb MB
    engine_tp1: bool = False
    refit_bucket_mb: float = 512
    # with engine_tp1: the copy's TP (engine.tp=b engine.pp=1, b | tp), one replica per b GPUs; 1 = TP1 x PP1
    engine_tp: int = 1
    memory_fraction: float = 0.0  # the GPU share an engine with a pool allocated whole takes (engine.vllm.gpu_memory_utilization)
    # the actor's layer spec as the job builds it (`planned_layer_spec`): te plans Transformer Engine's MLP term
    # (`activations.mlp_saved_widths`)
    layer_spec: str = "local"

    @property
    def dp(self) -> int:
        return self.gpus // (self.tp * self.pp)

    @property
    def engine_layout(self) -> tuple[int, int, int]:
        """The engine's (TP, PP, replicas): the actor's layout, or TP1 x PP1 on every GPU."""
        return (self.engine_tp, 1, self.gpus // self.engine_tp) if self.engine_tp1 else (self.tp, self.pp, self.dp)


def planned_layer_spec(cfg: Any, kind: str) -> str:
    """actor.layer_spec as a GPU job of `cfg` builds it, "te" or "local". `auto` takes Transformer Engine where
    the job's container has it: the product's image does, except where packed SFT traces need the local spec
    (`SFTConfig.packing_layer_spec`) and an RL job on an engine whose image has none (vLLM's,
    `EngineKind.image_has_te`). Planned as TE, a job that ends up local is over-planned by one [T, ffn] tensor
    per layer, never under."""
    spec = cfg.packing_layer_spec()[0] if kind == "sft" else cfg.actor.layer_spec
    if spec != "auto":
        return spec
    if kind == "rl" and cfg.engine.kind != AUTO_KIND and not engine_kind(cfg.engine.kind).image_has_te:
        return "local"
    return "te"


def job_shape(cfg: Any, kind: str, hf_config: dict, *, gpus: int, settings: PlanSettings,
              vocab_divisible_by: int = 128, gpu: GPU | None = None, memory_gib: float | None = None) -> JobShape:
    """The plan's view of an `SFTConfig` (kind "sft") or `RLConfig` ("rl") on `gpus` GPUs. engine.tp /
    engine.pp `auto` become `auto_engine_layout`'s choice on `gpu` (with `memory_gib` each), or without a
    `gpu` the first layout they allow (the actor's, where they allow it)."""
    a = cfg.actor
    check_layout(gpus, a.tp, a.pp, **model_shape(hf_config))
    common = dict(
        kind=kind, arch=arch_from_hf(hf_config), gpus=gpus, tp=a.tp, pp=a.pp,
        precision="bf16" if a.precision == "auto" else a.precision,
        distributed_optimizer=a.optim.use_distributed_optimizer,
        sequence_parallel=a.sequence_parallel,
        recompute=Recompute(a.recompute_granularity, a.recompute_method, a.recompute_num_layers),
        micro_batch_tokens=a.micro_batch_tokens or GPU_MICRO_BATCH_TOKENS, logprob_chunk_tokens=a.logprob_chunk_tokens,
        offload=a.offload_during_generation, vocab_divisible_by=vocab_divisible_by,
        layer_spec=planned_layer_spec(cfg, kind),
    )
    if kind == "sft":
        return JobShape(**common, longest=cfg.data.max_seq_len, sequences=cfg.global_batch)
    if cfg.engine.kind == AUTO_KIND:  # on `gpu`: the faster that fits of its candidates; else the last (megatron)
        return auto_engine_kind(cfg, hf_config, gpus=gpus, settings=settings, vocab_divisible_by=vocab_divisible_by,
                                gpu=gpu, memory_gib=memory_gib)
    r, e = cfg.rollout, cfg.engine
    prompt_tokens = settings.value("prompt_tokens")
    # a `copies` engine (vllm) always decodes on a copy of its own (replicas of engine.tp ranks at one stage); an
    # `actor_or_copies` one (megatron) only over a larger actor layout with engine.tp=b engine.pp=1
    layout = engine_kind(e.kind).layout
    own = layout == "copies" or (layout == "actor_or_copies" and engine_value(e.pp, a.pp) == 1
                                 and engine_value(e.tp, a.tp) < a.tp * a.pp)
    on_policy = cfg.old_logprobs == "auto" and cfg.ppo_epochs == 1 and cfg.minibatches == 1
    shape = JobShape(
        **common, longest=prompt_tokens + r.max_tokens, sequences=cfg.prompts_per_step * r.n,
        minibatches=cfg.minibatches, passes=cfg.ppo_epochs, old_logprob_pass=not on_policy,
        entropy=on_policy or cfg.lead.entropy_coeff > 0, temperature=r.temperature, prompts=cfg.prompts_per_step,
        n=r.n, prompt_tokens=prompt_tokens, max_tokens=r.max_tokens, engine=e.kind, max_batch_size=e.max_batch_size,
        max_prefill_tokens=e.max_prefill_tokens, sync_every=e.sync_every or 8, cuda_graphs=e.cuda_graphs,
        cuda_graphs_tp=e.cuda_graphs_tp, kv_cache_gib=e.kv_cache_gib, top_p=r.top_p,
        mean_response_tokens=mean_response(settings, r.max_tokens),
        engine_tp1=own, refit_bucket_mb=e.refit_bucket_mb, engine_tp=engine_value(e.tp, a.tp) if own else 1,
        memory_fraction=memory_fraction(e),
    )
    options = engine_options(e, tp=a.tp, pp=a.pp, generator_ranks=r.generator_ranks)
    if len(options) > 1 and gpu:
        options = [auto_engine_layout(shape, options, gpu, memory_gib=memory_gib, reserve_gib=settings.value("reserve_gib"))]
    if options:  # auto: the plan's choice on a GPU, else the first allowed (the actor's layout where it is)
        shape = dataclasses.replace(shape, engine_tp1=options[0][0], engine_tp=options[0][1])
    return shape


def auto_engine_kind(cfg: Any, hf_config: dict, *, gpus: int, settings: PlanSettings, vocab_divisible_by: int,
                     gpu: GPU | None, memory_gib: float | None, kinds: tuple[str, ...] = AUTO_NAMES) -> JobShape:
    """engine.kind=auto planned: of `kinds` (auto's candidates, the preferred first: vllm, the GPU default where
    it is installed), the shape whose plan on `gpu` fits with the shortest step, the first on a tie; the last
    (megatron) without a `gpu` or when none fits (the check before start then says what to change). An engine
    whose pool is allocated whole (vllm) takes engine.kv_cache_gib as a cap: its largest pool under it that
    fits beside its weights."""
    shapes = []
    for kind in kinds:
        one = dataclasses.replace(cfg, engine=dataclasses.replace(cfg.engine, kind=kind))
        shapes.append(job_shape(one, "rl", hf_config, gpus=gpus, settings=settings,
                                vocab_divisible_by=vocab_divisible_by, gpu=gpu, memory_gib=memory_gib))
    if gpu is None:
        return shapes[-1]
    def evaluate(sh: JobShape) -> JobPlan:
        return plan_job(sh, gpu, memory_gib=memory_gib, reserve_gib=settings.value("reserve_gib"))

    plans = []
    for sh in shapes:
        plan = evaluate(sh)
        if ENGINE_KINDS[sh.engine].pool == "whole" and not plan.fits and sh.kv_cache_gib is not None:
            # vLLM allocates its pool whole beside its own weights: engine.kv_cache_gib is then a cap, and the
            # largest pool under it that fits is taken (the job's start says so)
            plan = fit_generation(sh, plan, evaluate, cap_gib=sh.kv_cache_gib) or plan
        plans.append(plan)
    best = faster_plan(plans)
    return best.shape if best is not None else shapes[-1]


def mean_response(settings: PlanSettings, max_tokens: int) -> Optional[float]:
    """`plan.mean_response_tokens`, checked against the responses' budget (None: all at max_tokens)."""
    mean = settings.mean_response_tokens
    if mean is not None and mean > max_tokens:
        raise ValueError(f"plan.mean_response_tokens ({mean:,}) exceeds the response budget max_tokens "
                         f"({max_tokens:,}): a mean cannot be longer than the longest response")
    return mean


def engine_options(engine: Any, *, tp: int, pp: int, generator_ranks: int = 0) -> list[tuple[bool, int]]:
    """The engine layouts engine.tp / engine.pp `auto` may take over an actor at `tp` x `pp`, as
    (`engine_tp1`, `engine_tp`) pairs: (False, 1) the actor's layout, (True, b) replicas at TP b and one stage
    (`nemo_lead.parallel.layout.engine_layouts`, the actor's first). All of those where the megatron engine
    runs colocated over an actor at TP or PP > 1, less those a key set explicitly rules out; only the actor's
    for the split layout, a `fixed` engine (trtllm) or a TP1 x PP1 actor ([]: no `auto` key). A `copies` engine
    (vllm): the actor's TP at one stage (`nemo_lead.generation.engine_config.resolve_engine_kind`)."""
    if "auto" not in (str(engine.tp), str(engine.pp)):
        return []
    rule = engine_kind(engine.kind).layout
    if rule == "copies":
        return [(True, engine_value(engine.tp, tp))]
    if rule != "actor_or_copies" or (tp, pp) == (1, 1) or generator_ranks:
        return [(False, 1)]
    return [(False, 1) if layout == (tp, pp) else (True, layout[0]) for layout in engine_layouts(tp, pp, engine.tp, engine.pp)]


def faster_plan(plans: list[JobPlan]) -> JobPlan | None:
    """The plan with the shortest step among those that fit, the first on a tie (None when none fits)."""
    fitting = [p for p in plans if p.fits and p.time is not None]
    return min(fitting, key=lambda p: p.time.total) if fitting else None


def auto_engine_layout(s: JobShape, options: list[tuple[bool, int]], gpu: GPU, *, memory_gib: float | None,
                       reserve_gib: float) -> tuple[bool, int]:
    """engine.tp / engine.pp `auto` on `gpu`: of the (`engine_tp1`, `engine_tp`) `options`
    (`engine_options`), the one whose plan fits with the shortest step, the first on a tie; the first when
    none fits (the check before start then says what to change)."""
    plans = [plan_job(dataclasses.replace(s, engine_tp1=own, engine_tp=b), gpu, memory_gib=memory_gib,
                      reserve_gib=reserve_gib) for own, b in options]
    best = faster_plan(plans)
    return (best.shape.engine_tp1, best.shape.engine_tp) if best is not None else options[0]


@dataclass(frozen=True)
class JobPlan:
    shape: JobShape
    gpu: GPU
    memory_bytes: int  # per GPU
    usable_bytes: int  # less the reserve
    phases: dict[str, dict[str, int]]  # phase -> component -> bytes (the worst rank of that phase)
    stages: dict[str, int]  # phase -> the pipeline stage of that rank
    tokens_per_microbatch: int
    microbatches: int  # per DP rank and optimizer step
    engine_rows: int  # RL: sequences the engine decodes at once
    time: Optional[StepTime]  # at the stated mean response (`JobShape.mean_response_tokens`)
    # RL with actor.offload_during_generation: the pinned host copies of the optimizer state that one node's
    # ranks hold while the engine generates (min(gpus, GPUS_PER_NODE) ranks, each counted as the stage and DP
    # rank with the most optimizer bytes: an upper bound within the slices' padding); 0 without offload
    host_bytes_per_node: int = 0
    worst: Optional[StepTime] = None  # RL: every response at max_tokens (None where that is `time` already)

    @property
    def worst_time(self) -> Optional[StepTime]:
        """The step with every response at max_tokens: the worst case beside `time`."""
        return self.worst if self.worst is not None else self.time

    def total(self, phase: str) -> int:
        return sum(self.phases[phase].values())

    def left(self, phase: str) -> int:
        return self.usable_bytes - self.total(phase)

    @property
    def fits(self) -> bool:
        return all(self.left(p) >= 0 for p in self.phases)


def microbatch_shape(s: JobShape) -> tuple[int, int]:
    """(padded tokens of the largest micro-batch, micro-batches per DP rank and optimizer step)."""
    per_rank = math.ceil(s.sequences / s.minibatches / s.dp)
    rows = max(1, s.micro_batch_tokens // s.longest)
    tokens = min(max(s.micro_batch_tokens, s.longest), per_rank * s.longest)
    return tokens, math.ceil(per_rank / rows)


@functools.lru_cache(maxsize=4096)
def _static(arch: Arch, tp: int, pp: int, dp: int, stage: int, precision: str, distributed: bool, divisible: int):
    """A stage's static bytes on its worst DP rank (the distributed optimizer's slices differ a little), and
    its largest parameter (elements)."""
    ranks = range(dp) if distributed else [0]
    worst = max((static_bytes(arch, tp=tp, pp=pp, dp=dp, stage=stage, precision=precision,
                              distributed_optimizer=distributed, dp_rank=r, vocab_divisible_by=divisible)
                 for r in ranks), key=lambda b: b.optimizer)
    return worst, max(p.numel for p in stage_parameters(arch, tp, pp, stage, divisible))


def plan_job(s: JobShape, gpu: GPU, *, memory_gib: float | None = None, reserve_gib: float = 3.0) -> JobPlan:
    """The plan of `s` on GPUs of `gpu`'s kind with `memory_gib` each (default: the GPU's)."""
    e = DTYPE_BYTES[s.precision]
    memory = int((memory_gib if memory_gib is not None else gpu.memory_gib) * GIB)
    tokens, mbs = microbatch_shape(s)
    vocab_local = padded_vocab_size(s.arch.vocab_size, s.vocab_divisible_by) // s.tp
    phases: dict[str, dict[str, int]] = {}
    stages: dict[str, int] = {}
    rows = 0
    optimizer = 0  # the most optimizer bytes of one rank over the stages
    k = ENGINE_KINDS[s.engine]
    copy = _copy_bytes(s, k) if s.engine_tp1 else 0
    for stage in range(s.pp):
        st, largest = _static(s.arch, s.tp, s.pp, s.dp, stage, s.precision, s.distributed_optimizer,
                              s.vocab_divisible_by)
        static = {"weights": st.weights, "grads": st.grads, "optimizer": st.optimizer}
        optimizer = max(optimizer, st.optimizer)
        u = update_memory(s.arch, tp=s.tp, pp=s.pp, stage=stage, tokens=tokens, longest=s.longest, microbatches=mbs,
                          e=e, sequence_parallel=s.sequence_parallel, recompute=s.recompute, vocab_local=vocab_local,
                          padded=s.arch.vocab_size % (vocab_local * s.tp) != 0, temperature=s.temperature,
                          entropy=s.entropy, logprob_chunk_tokens=s.logprob_chunk_tokens, largest_weight=largest,
                          layer_spec=s.layer_spec)
        found = {"update": {**static, "activations": u.activations, "logits": u.logits}}
        if s.kind == "rl":
            found["generation"], rows = _generation_phase(s, k, stage, e, memory, copy, static)
            if s.engine_tp1 and not k.host_copy and not s.offload:  # kept from refit to the next generation
                found["update"]["engine_copy"] = copy
        for phase, parts in found.items():
            if phase not in phases or sum(parts.values()) > sum(phases[phase].values()):
                phases[phase], stages[phase] = parts, stage
    usable = memory - int(reserve_gib * GIB)
    timed = k.timed or s.kind == "sft"
    time = _time(s, gpu, tokens, mbs, rows, phases, s.mean_response_tokens) if timed else None
    worst = (_time(s, gpu, tokens, mbs, rows, phases, None)
             if timed and s.kind == "rl" and s.mean_response_tokens is not None else None)
    host = min(s.gpus, GPUS_PER_NODE) * optimizer if s.kind == "rl" and s.offload else 0
    if s.kind == "rl" and k.host_copy:  # vllm's sleep level 1 keeps the engine's weights on the host meanwhile
        host += min(s.gpus, GPUS_PER_NODE) * copy
    return JobPlan(shape=s, gpu=gpu, memory_bytes=memory, usable_bytes=usable, phases=phases, stages=stages,
                   tokens_per_microbatch=tokens, microbatches=mbs, engine_rows=rows, time=time,
                   host_bytes_per_node=host, worst=worst)


def _copy_bytes(s: JobShape, k: EngineKind) -> int:
    """The engine's copy at engine TP b on one GPU (`copy_weights`): every table and layer sharded b ways
    (vllm), or its shards of the layers and the vocabulary tables whole (the megatron engine's
    `nemo_lead.generation.megatron_engine.model_copy` keeps them whole at any b: the TP-b shards' count plus
    the rest)."""
    b = s.engine_tp
    sharded = _static(s.arch, b, 1, 1, 0, s.precision, False, s.vocab_divisible_by)[0].weights
    if k.copy_weights == "sharded":
        return sharded
    tables = 1 if s.arch.tied_embeddings else 2
    rows = padded_vocab_size(s.arch.vocab_size, s.vocab_divisible_by * b)
    return sharded + tables * rows * s.arch.hidden_size * DTYPE_BYTES[s.precision] * (b - 1) // b


def _whole_pool_bytes(s: JobShape, k: EngineKind, memory: int, weights: int, g) -> int:
    """A pool allocated whole at start (vllm): engine.kv_cache_gib, or what the engine's share of the GPU
    (`memory_fraction`: engine.vllm.gpu_memory_utilization) leaves after its weights, graphs and the decode
    temporaries."""
    if s.kv_cache_gib is not None:
        return int(s.kv_cache_gib * KV_GIB)
    return max(0, int(s.memory_fraction * memory) - weights - int(k.graphs_gib * GIB) - g.activations - g.logits)


def _generation_phase(s: JobShape, k: EngineKind, stage: int, e: int, memory: int, copy: int,
                      static: dict[str, int]) -> tuple[dict[str, int], int]:
    """(the generation phase's bytes at `stage`, the rows the engine decodes at once): the actor's static
    memory (only its weights with offload), the engine's KV cache and temporaries; a pool allocated whole
    decides the rows (`pool`); the engine's copy, its CUDA graphs, and while a copy is gathered a bucket's
    buffers (local and [tp, n]: `refit` gather)."""
    g = _generation(s, stage, e)
    pool = 0
    if k.pool == "whole":  # the pool it allocates decides the sequences decoding at once
        pool = _whole_pool_bytes(s, k, memory, copy, g)
        g = _generation(s, stage, e, budget=pool)
        pool = min(pool, _whole_pool_bytes(s, k, memory, copy, g))  # the temporaries of the rows it holds
    kept = {name: (0 if s.offload and name != "weights" else v) for name, v in static.items()}
    parts = {**kept, "kv_cache": g.kv_cache, "activations": g.activations, "logits": g.logits}
    if k.pool == "whole" or s.engine_tp1:
        parts["engine_copy"] = copy
        if k.pool == "whole":
            parts["kv_cache"] = pool
        if k.graphs_gib:
            parts["cuda_graphs"] = int(k.graphs_gib * GIB)
        if k.refit == "gather":
            parts["refit_buckets"] = int((s.tp + 1) * s.refit_bucket_mb * 1e6)
    return parts, g.rows


def _generation(s: JobShape, stage: int, e: int, budget: int | None = None):
    """The engine's memory at `stage` (`budget`: its KV bytes, default engine.kv_cache_gib's)."""
    tp, pp, replicas = s.engine_layout
    prompts_per_replica = math.ceil(s.prompts / replicas)
    if budget is None and s.kv_cache_gib is not None:
        budget = int(s.kv_cache_gib * KV_GIB)
    return engine_memory(s.arch, tp=tp, pp=pp, stage=min(stage, pp - 1), e=e, sequences=prompts_per_replica * s.n, n=s.n,
                         prompt_tokens=s.prompt_tokens, max_tokens=s.max_tokens, max_batch_size=s.max_batch_size,
                         max_prefill_tokens=s.max_prefill_tokens, sync_every=s.sync_every, kv_budget_bytes=budget,
                         top_p=s.top_p)


def _time(s: JobShape, gpu: GPU, tokens: int, mbs: int, rows: int, phases, mean: Optional[float]) -> StepTime:
    """The step with responses of mean `mean` (None: all at max_tokens); SFT rows at their longest."""
    if s.kind == "sft":
        seq = s.longest
        total = s.sequences * s.longest
    else:
        seq = s.prompt_tokens + (s.max_tokens if mean is None else mean)
        total = int(s.sequences * seq)
    forwards = s.passes * (3 + (s.recompute.granularity == "full")) + s.old_logprob_pass
    update = update_seconds(s.arch, gpu, gpus=s.gpus, pp=s.pp, tokens=total, seq=seq, tokens_per_microbatch=tokens,
                            microbatches=mbs, forwards=forwards)
    if s.kind == "sft":
        return StepTime(generation=0.0, update=update, refit=0.0)
    tp, pp, replicas = s.engine_layout
    graphs = decode_graphs(s.cuda_graphs, cuda_graphs_tp=s.cuda_graphs_tp, tp=tp, pp=pp)
    slot = kv_slot_bytes(s.arch, tp=tp, pp=pp, e=DTYPE_BYTES[s.precision])
    weights = phases["generation"].get("engine_copy") or phases["update"]["weights"]
    gen = generation_seconds(s.arch, gpu, tp=tp, pp=pp, weight_bytes=weights, slot_bytes=slot,
                             rows=rows, prompts=math.ceil(s.prompts / replicas), n=s.n, prompt_tokens=s.prompt_tokens,
                             max_tokens=s.max_tokens, mean_tokens=mean, cuda_graphs=graphs, engine=s.engine)
    refit = offload_seconds(gpu, phases["update"]["optimizer"]) if s.offload else 0.0
    k = ENGINE_KINDS[s.engine]
    if k.refit == "reload":
        model = _static(s.arch, 1, 1, 1, 0, s.precision, False, s.vocab_divisible_by)[0].weights
        refit += reload_refit_seconds(gpu, model, weights, s.tp * s.pp)
    elif k.refit == "gather" and s.engine_tp1:
        refit += refit_seconds(gpu, weights, s.tp * s.pp)
    return StepTime(generation=gen, update=update, refit=refit)


def with_changes(s: JobShape, **changes: Any) -> JobShape:
    return dataclasses.replace(s, **changes)


def fit_generation(s: JobShape, plan: JobPlan, evaluate, cap_gib: float | None = None) -> JobPlan | None:
    """`plan` with the largest engine KV budget (`engine.kv_cache_gib`, GiB per rank, at most `cap_gib`) that
    fits what the generation phase leaves (None when nothing fits, or the update does not)."""
    if s.kind != "rl" or plan.left("update") < 0:
        return None
    g = plan.phases["generation"]
    budget = math.floor((plan.usable_bytes - (plan.total("generation") - g["kv_cache"])) / KV_GIB * 10) / 10
    if cap_gib is not None:
        budget = min(budget, cap_gib)
    while budget > 0:
        fitted = evaluate(dataclasses.replace(s, kv_cache_gib=budget))
        if fitted.fits:
            return fitted
        budget = round(budget - 0.5, 1)  # the temporaries grow with the rows the budget admits
    return None
