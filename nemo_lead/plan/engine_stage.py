"""The plan of a stage that only generates (a recipe's `distill` and `eval` stages, `nemo-lead eval`): the
engine's memory per GPU, the sequences it holds at once, the size and time of its calls, and the stage's
time, from the same engine model as an RL step's generation (`timing.generation_seconds`).

    p = plan_engine_stage(arch, gpu_named("h100"), engine="vllm", gpus=8, tp=2, pp=1, precision="bf16",
                          problems=(30, 30), n=32, prompt_tokens=1024, max_tokens=14336, mean_tokens=9054, models=5)
    p.fits, p.rows, p.call_sequences, p.seconds, p.worst_seconds

How the stage runs (`nemo_lead/eval/runner.py`): gpus / (tp x pp) data-parallel replicas, each taking one
engine call at a time, in step. A call holds `call_sequences` sequences (default CALL_WAVES x `rows`, the
sequences the engine holds at once: `call_sequences`), whole problems' samples of one round; the engine's
continuous batching admits a waiting sequence whenever one finishes, and the call ends with its last one. A
round's calls are ceil(its sequences / call_sequences); the replicas take them dp at a time, the last batch
counted whole. An eval stage runs its models one after the other.

Rounds (`rounds`, a distill stage's keep: first): round 1 draws `rounds[0]` samples of every problem; the
next draws the rest for the problems round 1 did not solve, `1 - first_round_solve_rate` of them (a stated
figure: `plan.first_round_solve_rate`; None: every problem, the one-round cost). Rounds after the second are
counted for the problems left after round 1 (an upper bound). The responses of every round are spread
around the one stated mean (`timing.response_lengths`); harder problems answer longer, so the stated mean
is optimistic for round 2, and the all-at-max worst case bounds it.

Memory per GPU and in flight, per engine (by its kind's entry, `nemo_lead.plan.engine_kinds`):
- megatron (a pool that grows): the weights of one pipeline stage and the engine's cache and temporaries (`engine_memory`:
  every row reserved at prompt + max_tokens; `engine.kv_cache_gib` bounds the rows, else max_batch_size);
- vllm (a pool allocated whole; one stage: replicas at TP tp): the job's model, loaded to fill vLLM by refit and kept beside it
  (`weights`), vLLM's own copy at TP tp (`engine_copy`), its KV pool (`engine.kv_cache_gib`, or
  engine.vllm.gpu_memory_utilization of the GPU less its weights, graphs and temporaries), its CUDA graphs
  (its `graphs_gib`, assumed) and the temporaries of its rows. In flight: the pool's tokens over prompt +
  max_tokens, at most engine.max_batch_size (vLLM's max_num_seqs): every admitted sequence can finish
  without a preemption (what `VllmEngine.concurrency` reports at run time). vLLM's paged cache gives a
  sequence blocks as it grows, so it runs more at once while responses are shorter; that is not counted.
  Decode at its `decode` figure (a published one, assumed).
A layout that does not fit gets no time. `engine="auto"` (`plan_auto_engine`): the faster that fits of auto's
candidates, vllm on a tie; megatron when none fits (the plan then says what does not).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Optional

from nemo_lead.models.hf_config import Arch
from nemo_lead.plan.engine_kinds import AUTO_KIND, AUTO_NAMES, ENGINE_KINDS, pool_share
from nemo_lead.plan.engine_memory import engine_memory, kv_slot_bytes
from nemo_lead.plan.parameters import DTYPE_BYTES, static_bytes
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.plan.timing import GPU, decode_graphs, generation_seconds

GIB = 1 << 30
CALL_WAVES = 4  # an engine call of evaluation / distillation: this many times the sequences the engine holds at once


def call_sequences(explicit: Optional[int], problems_per_call: Optional[int], n: int, rows: int) -> int:
    """Sequences per engine call: `call_sequences` when set, else problems_per_call x n (the older key), else
    CALL_WAVES x the engine's rows (the sequences it holds at once)."""
    if explicit is not None:
        return explicit
    if problems_per_call is not None:
        return problems_per_call * n
    return CALL_WAVES * rows


@dataclass(frozen=True)
class RoundPlan:
    samples: int  # per problem drawn in this round
    problems: int  # per model, all replicas (expected, for a round after the first)
    calls: int  # per replica and model (the replicas take them in step)
    call_seconds: float  # one call at the stated mean
    worst_call_seconds: float  # one call with every response at max_tokens

    @property
    def sequences(self) -> int:
        return self.problems * self.samples


@dataclass(frozen=True)
class EngineStagePlan:
    engine: str  # an engine kind (`nemo_lead.plan.engine_kinds`)
    gpu: GPU
    replicas: int
    rows: int  # sequences a replica decodes at once
    call_sequences: int  # sequences per engine call
    models: int
    rounds: tuple[RoundPlan, ...]
    per_gpu: dict[str, int]  # the worst pipeline stage's bytes by component
    usable_bytes: int
    mean_tokens: Optional[float]
    max_tokens: int
    first_round_solve_rate: Optional[float] = None
    why_not: str = ""  # an engine that cannot run this layout at all (replicas at one stage over pp > 1)

    @property
    def total_bytes(self) -> int:
        return sum(self.per_gpu.values())

    @property
    def fits(self) -> bool:
        return not self.why_not and self.total_bytes <= self.usable_bytes

    @property
    def calls(self) -> int:
        """Engine calls per replica and model, all rounds."""
        return sum(r.calls for r in self.rounds)

    @property
    def call_seconds(self) -> float:
        """The longest call at the stated mean: what a killed stage may have to redo, per replica."""
        return max(r.call_seconds for r in self.rounds)

    @property
    def worst_call_seconds(self) -> float:
        return max(r.worst_call_seconds for r in self.rounds)

    @property
    def seconds(self) -> Optional[float]:
        """The stage at the stated mean response (None: it does not fit)."""
        return self.models * sum(r.calls * r.call_seconds for r in self.rounds) if self.fits else None

    @property
    def worst_seconds(self) -> Optional[float]:
        return self.models * sum(r.calls * r.worst_call_seconds for r in self.rounds) if self.fits else None


@dataclass(frozen=True)
class StageShape:
    """What the plan reads of a distill / eval stage (`plan_engine_stage`'s keywords, less the engine)."""

    gpus: int
    tp: int
    pp: int
    precision: str
    problems: tuple[int, ...]
    n: int
    prompt_tokens: int
    max_tokens: int
    mean_tokens: Optional[float]
    models: int = 1
    rounds: tuple[int, ...] = ()  # the sizes of the first rounds (`EvalConfig.rounds`); () = one round of n
    first_round_solve_rate: Optional[float] = None
    call_sequences: Optional[int] = None
    problems_per_call: Optional[int] = None
    max_batch_size: int = 256
    max_prefill_tokens: int = 16384
    sync_every: int = 8
    kv_cache_gib: Optional[float] = None
    memory_fraction: float = 0.5  # a pool allocated whole: its share of the GPU (engine.vllm.gpu_memory_utilization)
    cuda_graphs: Optional[bool] = None
    cuda_graphs_tp: bool = False
    top_p: float = 1.0
    memory_gib: Optional[float] = None
    reserve_gib: float = 3.0
    vocab_divisible_by: int = 128


def stage_shape(c: Any, settings: PlanSettings, *, gpus: int, problems: tuple[int, ...], models: int,
                divisible: int) -> StageShape:
    """The plan's view of a distill / eval stage's config `c` (an EvalConfig, read by attribute)."""
    e = c.engine
    return StageShape(
        gpus=gpus, tp=c.tp, pp=c.pp, precision="bf16" if c.precision == "auto" else c.precision,  # auto: bf16 on a GPU
        problems=problems, n=c.sampling.n, prompt_tokens=settings.value("prompt_tokens"),
        max_tokens=c.sampling.max_tokens, mean_tokens=settings.mean_response_tokens, models=models,
        rounds=tuple(c.rounds), first_round_solve_rate=settings.first_round_solve_rate if c.rounds else None,
        call_sequences=c.call_sequences, problems_per_call=c.problems_per_call, max_batch_size=e.max_batch_size,
        max_prefill_tokens=e.max_prefill_tokens, sync_every=e.sync_every or 8, kv_cache_gib=e.kv_cache_gib,
        memory_fraction=pool_share(e), cuda_graphs=e.cuda_graphs, cuda_graphs_tp=e.cuda_graphs_tp,
        top_p=c.sampling.top_p, memory_gib=settings.gpu_memory_gib, reserve_gib=settings.value("reserve_gib"),
        vocab_divisible_by=divisible)


def round_sizes(n: int, rounds: tuple[int, ...]) -> list[int]:
    """Samples per problem in each round (`nemo_lead.eval.calls.round_ranges`'s rule)."""
    sizes = [*rounds, n - sum(rounds)]
    return [s for s in sizes if s > 0]


def _weights(s: StageShape, arch: Arch, tp: int, pp: int, stage: int) -> int:
    return static_bytes(arch, tp=tp, pp=pp, dp=1, stage=stage, precision=s.precision, distributed_optimizer=False,
                        dp_rank=0, vocab_divisible_by=s.vocab_divisible_by).weights


def _memory(s: StageShape, arch: Arch, engine: str, gpu: GPU, pool: Optional[int],
            sequences: int) -> tuple[dict[str, int], int]:
    """(bytes per GPU of the worst stage, rows) for `engine` with calls of `sequences`; an engine whose pool is
    allocated whole (vllm: replicas at one stage) with `pool` bytes of KV cache (None: the memory fraction's)."""
    e = DTYPE_BYTES[s.precision]
    full = s.prompt_tokens + s.max_tokens
    n = max(round_sizes(s.n, s.rounds))
    k = ENGINE_KINDS[engine]
    if k.pool == "whole":
        weights = _weights(s, arch, s.tp, 1, 0)  # the job's model at TP tp; the engine's copy has the same shards
        slot = kv_slot_bytes(arch, tp=s.tp, pp=1, e=e)
        graphs = int(k.graphs_gib * GIB)
        if pool is None:  # what gpu_memory_utilization leaves after vLLM's weights, graphs and temporaries
            memory = int((s.memory_gib if s.memory_gib is not None else gpu.memory_gib) * GIB)
            rough = engine_memory(arch, tp=s.tp, pp=1, stage=0, e=e, sequences=s.max_batch_size, n=n,
                                  prompt_tokens=s.prompt_tokens, max_tokens=s.max_tokens,
                                  max_batch_size=s.max_batch_size, max_prefill_tokens=s.max_prefill_tokens,
                                  sync_every=s.sync_every, kv_budget_bytes=full * slot, top_p=s.top_p)
            pool = max(0, int(s.memory_fraction * memory) - weights - graphs - rough.activations - rough.logits)
        rows = max(1, min(s.max_batch_size, sequences, pool // (full * slot)))
        g = engine_memory(arch, tp=s.tp, pp=1, stage=0, e=e, sequences=rows, n=n, prompt_tokens=s.prompt_tokens,
                          max_tokens=s.max_tokens, max_batch_size=s.max_batch_size,
                          max_prefill_tokens=s.max_prefill_tokens, sync_every=s.sync_every,
                          kv_budget_bytes=rows * full * slot, top_p=s.top_p)
        return ({"weights": weights, "engine_copy": weights, "kv_cache": pool, "cuda_graphs": graphs,
                 "activations": g.activations, "logits": g.logits}, rows)
    budget = int(s.kv_cache_gib * GIB) if s.kv_cache_gib is not None else None
    worst: dict[str, int] = {}
    rows = 0
    for stage in range(s.pp):
        g = engine_memory(arch, tp=s.tp, pp=s.pp, stage=stage, e=e, sequences=sequences, n=n,
                          prompt_tokens=s.prompt_tokens, max_tokens=s.max_tokens, max_batch_size=s.max_batch_size,
                          max_prefill_tokens=s.max_prefill_tokens, sync_every=s.sync_every, kv_budget_bytes=budget,
                          top_p=s.top_p)
        parts = {"weights": _weights(s, arch, s.tp, s.pp, stage), "kv_cache": g.kv_cache, "activations": g.activations,
                 "logits": g.logits}
        rows = g.rows
        if sum(parts.values()) > sum(worst.values()):
            worst = parts
    return worst, rows


def _rounds(s: StageShape, arch: Arch, engine: str, gpu: GPU, per_gpu: dict[str, int], rows: int,
            size: int, replicas: int) -> tuple[RoundPlan, ...]:
    e = DTYPE_BYTES[s.precision]
    pp = 1 if ENGINE_KINDS[engine].layout == "copies" else s.pp
    slot = kv_slot_bytes(arch, tp=s.tp, pp=pp, e=e)
    graphs = decode_graphs(s.cuda_graphs, cuda_graphs_tp=s.cuda_graphs_tp, tp=s.tp, pp=pp)
    weight_bytes = per_gpu.get("engine_copy", per_gpu["weights"])  # what a decode step reads
    total = sum(s.problems)
    unsolved = 1.0 if s.first_round_solve_rate is None else 1 - s.first_round_solve_rate
    plans = []
    for r, samples in enumerate(round_sizes(s.n, s.rounds)):
        problems = total if r == 0 else math.ceil(total * unsolved)
        count = min(samples, size)  # samples per problem in a call (spans of one problem when it has more)
        per_call = count * max(1, size // count) if samples <= size else size
        calls = math.ceil(math.ceil(problems * samples / per_call) / replicas) if problems else 0

        def one(mean: Optional[float], per_call=per_call, count=count) -> float:
            return generation_seconds(arch, gpu, tp=s.tp, pp=pp, weight_bytes=weight_bytes, slot_bytes=slot,
                                      rows=rows, prompts=per_call // count, n=count, prompt_tokens=s.prompt_tokens,
                                      max_tokens=s.max_tokens, mean_tokens=mean, cuda_graphs=graphs, engine=engine)

        plans.append(RoundPlan(samples=samples, problems=problems, calls=calls, call_seconds=one(s.mean_tokens),
                               worst_call_seconds=one(None)))
    return tuple(plans)


def plan_stage(arch: Arch, gpu: GPU, s: StageShape, engine: str) -> EngineStagePlan:
    """`s` on `engine` (an engine kind); see the module docstring."""
    if s.gpus % (s.tp * s.pp):
        raise ValueError(f"{s.gpus} GPUs are not a multiple of tp x pp = {s.tp * s.pp}")
    if s.mean_tokens is not None and s.mean_tokens > s.max_tokens:
        raise ValueError(f"plan.mean_response_tokens ({s.mean_tokens:,}) exceeds sampling.max_tokens ({s.max_tokens:,})")
    if s.first_round_solve_rate is not None and not 0 <= s.first_round_solve_rate <= 1:
        raise ValueError(f"plan.first_round_solve_rate must be in [0, 1], got {s.first_round_solve_rate}")
    memory = int((s.memory_gib if s.memory_gib is not None else gpu.memory_gib) * GIB)
    usable = memory - int(s.reserve_gib * GIB)
    replicas = s.gpus // (s.tp * s.pp)
    k = ENGINE_KINDS[engine]
    why_not = f"{k.library} runs as replicas at one stage: pp must be 1" if k.layout == "copies" and s.pp > 1 else ""
    pool = int(s.kv_cache_gib * GIB) if k.pool == "whole" and s.kv_cache_gib is not None else None
    per_gpu, rows = _memory(s, arch, engine, gpu, pool, s.max_batch_size)
    if k.pool == "whole" and pool is not None and sum(per_gpu.values()) > usable:
        # a pool allocated whole (vLLM's): engine.kv_cache_gib is then a cap, the largest pool under it that fits
        # is taken (the job's start says so: `resolve_engine_kind_stage`)
        room = usable - (sum(per_gpu.values()) - per_gpu["kv_cache"])
        for step in range(50):
            fitted = max(0, room - step * (GIB // 2))
            per_gpu, rows = _memory(s, arch, engine, gpu, fitted, s.max_batch_size)
            if sum(per_gpu.values()) <= usable or not fitted:
                break
        pool = per_gpu["kv_cache"]
    size = call_sequences(s.call_sequences, s.problems_per_call, s.n, rows)
    if size < rows:  # a call smaller than what the engine holds: only its sequences are in flight
        per_gpu, rows = _memory(s, arch, engine, gpu, pool, size)
    return EngineStagePlan(engine=engine, gpu=gpu, replicas=replicas, rows=rows, call_sequences=size, models=s.models,
                           rounds=_rounds(s, arch, engine, gpu, per_gpu, rows, size, replicas), per_gpu=per_gpu,
                           usable_bytes=usable, mean_tokens=s.mean_tokens, max_tokens=s.max_tokens,
                           first_round_solve_rate=s.first_round_solve_rate, why_not=why_not)


def plan_auto_engine(arch: Arch, gpu: GPU, s: StageShape, kind: str) -> tuple[EngineStagePlan, dict[str, EngineStagePlan]]:
    """(the plan of the engine `kind` names, every engine's plan): `kind` auto takes the faster that fits of its
    candidates (`engine_kinds.AUTO_CANDIDATES`: vllm, then megatron; the first on a tie), the last when none fits."""
    kinds = AUTO_NAMES if kind == AUTO_KIND else (kind,)
    plans = {k: plan_stage(arch, gpu, s, k) for k in kinds}
    fitting = [p for p in plans.values() if p.fits]
    chosen = min(fitting, key=lambda p: p.seconds) if fitting else plans[kinds[-1]]
    return chosen, plans


def plan_engine_stage(arch: Arch, gpu: GPU, *, engine: str = "megatron", **shape) -> EngineStagePlan:
    """The stage of `shape` (`StageShape`'s fields) on `engine` (an engine kind, or auto)."""
    return plan_auto_engine(arch, gpu, StageShape(**shape), engine)[0]


def with_pool(s: StageShape, plan: EngineStagePlan) -> StageShape:
    """`s` with engine.kv_cache_gib the pool `plan` (a pool allocated whole: vllm's) fitted under its cap."""
    return dataclasses.replace(s, kv_cache_gib=plan.per_gpu["kv_cache"] / GIB)
