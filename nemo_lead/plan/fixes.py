"""When a job does not fit: the smallest changes of its settings that make it fit, ranked.

Candidates vary, alone and together (memory savings are only switched on, never off): the layout (`actor.tp` within a node of 8 GPUs, `actor.pp` dividing
the layers; the rest of the GPUs data-parallel), `actor.sequence_parallel`, activation recomputation
(selective, or full with one layer per chunk), `actor.optim.use_distributed_optimizer` (DP > 1),
`actor.offload_during_generation` (RL), `actor.logprob_chunk_tokens` (when unchunked), `actor.micro_batch_tokens`
(down to the longest sequence: a longer one is a micro-batch of its own) and, when only generation does not
fit, an engine KV budget (`engine.kv_cache_gib`) as large as what is left allows. A candidate
fits when every phase does. Ranking: fewest changed settings, then the shortest estimated step; a fix that
only adds changes to a better-ranked one without a shorter step is left out.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from dataclasses import dataclass
from typing import Any

from nemo_lead.plan.activations import Recompute
from nemo_lead.plan.job import GPUS_PER_NODE, JobPlan, JobShape, fit_generation, plan_job
from nemo_lead.plan.timing import GPU

FULL = Recompute("full", "uniform", 1)
SELECTIVE = Recompute("selective")
CHUNK_TOKENS = 2048  # actor.logprob_chunk_tokens' default
_LEVELS = (None, "selective", "full")


@dataclass(frozen=True)
class Fix:
    changes: dict[str, Any]  # config key -> value (dotted keys of the job's config)
    plan: JobPlan

    @property
    def size(self) -> int:
        return len(self.changes)


def layouts_of(s: JobShape) -> list[tuple[int, int]]:
    """(tp, pp) of `s`'s GPUs: TP within a node dividing the heads, PP dividing the layers, the rest DP."""
    a = s.arch
    out = []
    for tp in (1, 2, 4, 8, 16):
        if tp > min(GPUS_PER_NODE, s.gpus) or a.num_heads % tp or a.num_kv_heads % tp:
            continue
        for pp in range(1, a.num_layers + 1):
            if a.num_layers % pp == 0 and s.gpus % (tp * pp) == 0:
                out.append((tp, pp))
    return out


def changes_of(base: JobShape, s: JobShape) -> dict[str, Any]:
    """The config keys (and values) where `s` differs from `base`."""
    out: dict[str, Any] = {}
    for field, key in (("tp", "actor.tp"), ("pp", "actor.pp"), ("sequence_parallel", "actor.sequence_parallel"),
                       ("distributed_optimizer", "actor.optim.use_distributed_optimizer"),
                       ("offload", "actor.offload_during_generation"),
                       ("logprob_chunk_tokens", "actor.logprob_chunk_tokens"),
                       ("micro_batch_tokens", "actor.micro_batch_tokens"), ("max_batch_size", "engine.max_batch_size"),
                       ("kv_cache_gib", "engine.kv_cache_gib")):
        if getattr(s, field) != getattr(base, field):
            out[key] = getattr(s, field)
    if (s.engine_tp1, s.engine_tp) != (base.engine_tp1, base.engine_tp):
        out.update({"engine.tp": s.engine_tp, "engine.pp": 1} if s.engine_tp1 else {"engine.tp": "actor", "engine.pp": "actor"})
    if s.recompute != base.recompute:
        r = s.recompute
        out["actor.recompute_granularity"] = r.granularity
        if r.granularity == "full":
            out.update({"actor.recompute_method": r.method, "actor.recompute_num_layers": r.num_layers})
    return out


def change_count(changes: dict[str, Any]) -> int:
    """Settings changed, counting a recomputation setting once (and the engine layout's two keys once)."""
    return len([k for k in changes if k not in ("actor.recompute_method", "actor.recompute_num_layers", "engine.pp")])


def find_fixes(base: JobShape, gpu: GPU, *, memory_gib: float | None, reserve_gib: float, limit: int = 5) -> list[Fix]:
    """The ranked changes that make `base` fit (empty when it fits as it is, or nothing found)."""
    evaluate = functools.lru_cache(maxsize=None)(
        lambda s: plan_job(s, gpu, memory_gib=memory_gib, reserve_gib=reserve_gib))
    if evaluate(base).fits:
        return []
    # memory savings are only added (a setting already on stays on); the layout may change either way
    budgets = sorted({b for b in (base.micro_batch_tokens, base.micro_batch_tokens // 2, base.longest)
                      if base.longest <= b <= base.micro_batch_tokens} or {base.micro_batch_tokens})
    recomputes = [base.recompute] + [r for r in (SELECTIVE, FULL)
                                     if _LEVELS.index(r.granularity) > _LEVELS.index(base.recompute.granularity)]
    chunks = {base.logprob_chunk_tokens} | ({CHUNK_TOKENS} if not base.logprob_chunk_tokens else set())
    found: dict[tuple, Fix] = {}
    for (tp, pp), sp, recompute, distributed, offload, chunk, budget in itertools.product(
            layouts_of(base), {base.sequence_parallel, True}, recomputes, {base.distributed_optimizer, True},
            {base.offload, base.kind == "rl"}, sorted(chunks), budgets):
        if (sp and tp == 1) or (distributed and base.gpus // (tp * pp) == 1 and not base.distributed_optimizer):
            continue
        s = dataclasses.replace(base, tp=tp, pp=pp, sequence_parallel=sp, recompute=recompute,
                                distributed_optimizer=distributed, offload=offload, logprob_chunk_tokens=chunk,
                                micro_batch_tokens=budget)
        plan = evaluate(s)
        if not plan.fits:
            plan = fit_generation(s, plan, evaluate)
            if plan is None:
                continue
        changes = changes_of(base, plan.shape)
        key = tuple(sorted(changes.items()))
        found.setdefault(key, Fix(changes=changes, plan=plan))
    ranked = sorted(found.values(), key=lambda f: (change_count(f.changes), _seconds(f.plan)))
    kept: list[Fix] = []
    for f in ranked:  # a fix that adds changes to a kept one without a shorter step is left out
        if not any(k.changes.items() <= f.changes.items() and _seconds(k.plan) <= _seconds(f.plan) for k in kept):
            kept.append(f)
    return kept[:limit]


def _seconds(plan: JobPlan) -> float:
    return plan.time.total if plan.time is not None else 0.0
