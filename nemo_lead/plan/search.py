"""The actor layouts that fit, ranked by their predicted step time: what `nemo-lead plan` shows below a plan.

    ranking = rank_layouts(shape, gpu_named("h200"), memory_gib=None, reserve_gib=3.0)
    ranking.fastest[0].changes, ranking.rank, ranking.slower     # {"actor.tp": 1, ...}, 12, 1.83

Searched: the layout (`actor.tp` within a node, `actor.pp` dividing the layers, the rest of the GPUs
data-parallel: `fixes.layouts_of`), `actor.sequence_parallel` (TP > 1), activation recomputation (none,
selective, full with one layer per chunk), `actor.optim.use_distributed_optimizer` (DP > 1) and, for RL,
`actor.offload_during_generation`, each on and off (engine.kind=vllm: its engine at each layout's TP, one
stage, a copy of its own); for the megatron and vllm engines each of these also with the
largest KV budget (`engine.kv_cache_gib`) that fits, at most what all of a replica's rows need at full length,
and over an actor at TP or PP > 1 the engine both at the actor's layout and with a copy of its own at every
TP b dividing the actor's, one stage (engine.tp=b engine.pp=1: b = 1 is a copy per GPU; `JobShape.engine_tp1`,
`engine_tp`). The configured settings are a candidate
of their own (whatever their recomputation method).

Ranked by the step time of `nemo_lead.plan.timing` (generation + update + offload copies), then by fewer
changed settings, then by more memory left. Settings that change no time and no layout (sequence
parallelism or the distributed optimizer where either is as fast) would list one layout many times: of the
candidates with the same TP / PP and the same step time (to 0.1 s) only the first in that order is kept.
A job whose step is not timed (engine.kind=trtllm) is not ranked.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Optional

from nemo_lead.plan.activations import Recompute
from nemo_lead.plan.engine_kinds import ENGINE_KINDS
from nemo_lead.plan.engine_memory import kv_slot_bytes
from nemo_lead.plan.fixes import FULL, SELECTIVE, change_count, changes_of, fit_generation, layouts_of
from nemo_lead.plan.job import KV_GIB, JobPlan, JobShape, plan_job
from nemo_lead.plan.parameters import DTYPE_BYTES
from nemo_lead.plan.timing import GPU

SAME_SECONDS = 0.1  # step times closer than this are one time (for the list, not the ranking order)


@dataclass(frozen=True)
class Candidate:
    changes: dict[str, Any]  # config key -> value, against the configured settings ({}: as configured)
    plan: JobPlan

    @property
    def seconds(self) -> float:
        return self.plan.time.total

    @property
    def least_left(self) -> int:
        return min(self.plan.left(p) for p in self.plan.phases)


@dataclass(frozen=True)
class Ranking:
    fastest: list[Candidate]  # the first `limit` of the ranked list
    fitting: int  # candidates in the ranked list (after merging equal ones)
    rank: Optional[int]  # the configured settings' place in it (1: the fastest); None when they do not fit
    configured: JobPlan

    @property
    def slower(self) -> Optional[float]:
        """The configured step time over the fastest's (None when either is missing)."""
        if self.rank is None or not self.fastest:
            return None
        return self.configured.time.total / self.fastest[0].seconds


def ranked(candidates: Iterable[Candidate]) -> list[Candidate]:
    """Candidates that fit, fastest first (ties: fewer changes, then more memory left), one per TP / PP and
    step time."""
    order = sorted((c for c in candidates if c.plan.fits and c.plan.time is not None),
                   key=lambda c: (c.seconds, change_count(c.changes), -c.least_left))
    kept: list[Candidate] = []
    seen: set[tuple[int, int, bool, int]] = set()
    for c in order:
        key = (c.plan.shape.tp, c.plan.shape.pp, c.plan.shape.engine_tp1, c.plan.shape.engine_tp,
               round(c.seconds / SAME_SECONDS))
        if key not in seen:
            seen.add(key)
            kept.append(c)
    return kept


def ranking_of(configured: JobPlan, candidates: Iterable[Candidate], limit: int = 5) -> Ranking:
    """The ranked candidates and where the configured settings (the candidate without changes) stand."""
    order = ranked(candidates)
    rank = next((i for i, c in enumerate(order, 1) if not c.changes), None) if configured.fits else None
    return Ranking(fastest=order[:max(limit, 1)], fitting=len(order), rank=rank, configured=configured)


def needed_budget_gib(s: JobShape) -> float:
    """The KV budget (GiB, rounded up to 0.1) that holds all of a replica's rows at full length: a larger one
    admits no more sequences."""
    tp, pp, replicas = s.engine_layout
    rows = min(s.max_batch_size, math.ceil(s.prompts / replicas) * s.n)
    slot = kv_slot_bytes(s.arch, tp=tp, pp=pp, e=DTYPE_BYTES[s.precision])
    return math.ceil(rows * (s.prompt_tokens + s.max_tokens) * slot / KV_GIB * 10) / 10


def shapes_searched(base: JobShape) -> list[JobShape]:
    """The configured shape and every combination of the settings searched (see the module docstring)."""
    recomputes: list[Recompute] = [Recompute(), SELECTIVE, FULL]
    out = [base]
    layout = ENGINE_KINDS[base.engine].layout  # copies of its own searched where the engine may take them
    copies = base.kind == "rl" and layout == "actor_or_copies"
    for (tp, pp), sp, recompute, distributed, offload, engine_tp1 in itertools.product(
            layouts_of(base), (False, True), recomputes, (False, True),
            (False, True) if base.kind == "rl" else (base.offload,), (False, True) if copies else (False,)):
        dp = base.gpus // (tp * pp)
        if (sp and tp == 1) or (distributed != base.distributed_optimizer and dp == 1) or (engine_tp1 and tp * pp == 1):
            continue
        # a copy of its own at every engine TP b dividing the actor's (b < tp x pp: not the actor's layout)
        engine_tps = [b for b in range(1, tp + 1) if tp % b == 0 and b < tp * pp] if engine_tp1 else [1]
        if layout == "copies":  # always its own copy, at the actor's TP and one stage (vllm: `replica_layout`)
            engine_tp1, engine_tps = True, [tp]
        for engine_tp in engine_tps:
            out.append(dataclasses.replace(base, tp=tp, pp=pp, sequence_parallel=sp, recompute=recompute,
                                           distributed_optimizer=distributed, offload=offload, engine_tp1=engine_tp1,
                                           engine_tp=engine_tp))
    return out


def _variants(s: JobShape, evaluate: Callable[[JobShape], JobPlan]) -> list[JobPlan]:
    """`s` as set, and (a timed engine) with the largest KV budget that fits, when that admits more rows."""
    plan = evaluate(s)
    out = [plan]
    if s.kind == "rl" and ENGINE_KINDS[s.engine].timed and not (s.kv_cache_gib is None and plan.fits):
        fitted = fit_generation(s, plan, evaluate, cap_gib=needed_budget_gib(s))
        if fitted is not None and fitted.shape != s:
            out.append(fitted)
    return out


def rank_layouts(base: JobShape, gpu: GPU, *, memory_gib: float | None, reserve_gib: float,
                 limit: int = 5) -> Ranking | None:
    """The layouts of `base`'s GPUs that fit, fastest first (None when the step is not timed)."""
    evaluate = functools.lru_cache(maxsize=None)(
        lambda s: plan_job(s, gpu, memory_gib=memory_gib, reserve_gib=reserve_gib))
    configured = evaluate(base)
    if configured.time is None:
        return None
    candidates = [Candidate(changes=changes_of(base, p.shape), plan=p)
                  for s in shapes_searched(base) for p in _variants(s, evaluate)]
    return ranking_of(configured, candidates, limit)
