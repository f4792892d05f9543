"""A job's plan as text (what `nemo-lead plan` prints and the start-up check reports) and as JSON (`--json`)."""

from __future__ import annotations

from typing import Any

from nemo_lead.plan.engine_kinds import ENGINE_KINDS, plan_note
from nemo_lead.plan.fixes import Fix
from nemo_lead.plan.job import GIB, GPUS_PER_NODE, JobPlan
from nemo_lead.plan.parameters import parameter_count
from nemo_lead.plan.search import Ranking
from nemo_lead.plan.timing import (
    DECODE_BANDWIDTH_FRACTION,
    EAGER_HOST_S_PER_LAYER,
    HOST_LINK_FRACTION,
    SOURCES,
    cited,
    tail_share,
    update_fraction,
)

COMPONENTS = ("weights", "grads", "optimizer", "activations", "logits", "kv_cache", "engine_copy", "refit_buckets",
              "cuda_graphs")


def _gib(n: int) -> str:
    return f"{n / GIB:.2f}"


def over_budget(plan: JobPlan) -> list[str]:
    """"update: 5.8 GiB over (activations 45.3 GiB, ...)" per phase that does not fit, largest parts first."""
    out = []
    for phase, parts in plan.phases.items():
        if plan.left(phase) < 0:
            top = sorted(((v, k) for k, v in parts.items() if v), reverse=True)[:3]
            out.append(f"{phase}: {-plan.left(phase) / GIB:.1f} GiB over "
                       f"({', '.join(f'{k} {v / GIB:.1f} GiB' for v, k in top)})")
    return out


def overrides(changes: dict[str, Any], prefix: str = "") -> str:
    def value(v: Any) -> str:
        return "null" if v is None else str(v).lower() if isinstance(v, bool) else str(v)

    return " ".join(f"{prefix}{k}={value(v)}" for k, v in changes.items())


def layout_name(plan: JobPlan) -> str:
    s = plan.shape
    engine = ENGINE_KINDS[s.engine].label
    return f"tp {s.tp} pp {s.pp} dp {s.dp}" + (f", {engine} tp {s.engine_tp} x {s.gpus // s.engine_tp}" if s.engine_tp1 else "")


def step_text(plan: JobPlan) -> str:
    """"2,100 s (1,892 + 207 + 1)": the step, and for RL its generation, update and refit / offload."""
    t = plan.time
    if plan.shape.kind == "sft":
        return f"{t.total:,.0f} s"
    return f"{t.total:,.0f} s ({t.generation:,.0f} + {t.update:,.0f} + {t.refit:,.0f})"


def responses_text(mean: float | None, max_tokens: int, source: str | None = None) -> str:
    """The response-length assumption a time rests on: "responses of mean 9,081 of 14,336 tokens (source; 17%
    over 90% of max_tokens)", or all at max_tokens."""
    if mean is None:
        return f"every response at max_tokens {max_tokens:,} (no mean stated: plan.mean_response_tokens)"
    return (f"responses of mean {mean:,.0f} of {max_tokens:,} tokens ({source or 'plan.mean_response_tokens'}; "
            f"{100 * tail_share(mean, max_tokens):.0f}% over 90% of max_tokens, the longest near it)")


def verdict(ranking: Ranking) -> str:
    """Where the configured settings stand: the fastest, "fits but N x slower than ...", or do not fit."""
    if ranking.rank is None:
        return "as configured it does not fit" + ("; the fastest that fits is #1" if ranking.fastest else "")
    if ranking.rank == 1:
        return f"as configured: the fastest of {ranking.fitting} that fit"
    best = ranking.fastest[0]
    slower = (f"{ranking.slower:.2f} x slower" if ranking.slower >= 1.01
              else f"{100 * (ranking.slower - 1):.1f}% slower")  # "1.00 x slower" would say nothing
    return (f"as configured: rank {ranking.rank} of {ranking.fitting}; fits but {slower} "
            f"than {layout_name(best.plan)} ({ranking.configured.time.total:,.0f} s vs {best.seconds:,.0f} s)")


def describe_ranking(ranking: Ranking, prefix: str = "") -> list[str]:
    """The fastest layouts that fit, each with its step time, memory and changes; and the verdict."""
    kind = ranking.configured.shape.kind
    head = "step s" if kind == "sft" else "step s (generation + update + refit/offload)"
    lines = [f"  fastest layouts that fit ({head}; GiB per GPU update / generation):"]
    for i, c in enumerate(ranking.fastest, 1):
        p = c.plan
        memory = " / ".join(f"{p.total(ph) / GIB:.1f}" for ph in p.phases)
        host = f", host {p.host_bytes_per_node / GIB:,.0f} GiB per node" if p.host_bytes_per_node else ""
        lines.append(f"    {i}. {layout_name(p)}: {step_text(p)}; {memory} GiB{host}; "
                     + (overrides(c.changes, prefix) or "as configured"))
    lines.append(f"  {verdict(ranking)}")
    return lines


def describe(name: str, plan: JobPlan, fixes: list[Fix], prefix: str = "", ranking: Ranking | None = None,
             source: str | None = None) -> str:
    """The plan's table, whether it fits, the step time (with the response lengths it assumes, `source`: where
    their mean comes from, and the worst case), the ranked fixes and (`ranking`) the fastest layouts that fit
    (`prefix`: for override keys, e.g. "stages.stage1."). A layout that does not fit gets no step time."""
    s = plan.shape
    a = s.arch
    lines = [f"{name} ({s.kind}): {a.family} {a.num_layers} layers, hidden {a.hidden_size}, "
             f"{parameter_count(a, s.vocab_divisible_by) / 1e9:.1f}B parameters, {s.precision}; {s.gpus} x {plan.gpu.name} "
             f"({plan.memory_bytes / GIB:.1f} GiB, {(plan.memory_bytes - plan.usable_bytes) / GIB:.1f} reserved); "
             f"{layout_name(plan)}",
             f"  micro-batches: {plan.microbatches} per DP rank of <= {plan.tokens_per_microbatch:,} tokens"
             + (f"; engine: {plan.engine_rows} sequences at once of {s.prompt_tokens:,} + {s.max_tokens:,} tokens"
                if s.kind == "rl" else "")]
    phases = list(plan.phases)
    lines.append("  GiB per GPU".ljust(26) + "".join(p.rjust(12) for p in phases))
    for c in COMPONENTS:
        if any(c in plan.phases[p] for p in phases):
            lines.append(f"    {c}".ljust(26) + "".join(
                (_gib(plan.phases[p][c]) if c in plan.phases[p] else "-").rjust(12) for p in phases))
    lines.append("    total".ljust(26) + "".join(_gib(plan.total(p)).rjust(12) for p in phases))
    lines.append("    left".ljust(26) + "".join(_gib(plan.left(p)).rjust(12) for p in phases))
    lines.append("    pipeline stage".ljust(26) + "".join(str(plan.stages[p]).rjust(12) for p in phases))
    if s.kind == "rl" and plan_note(s.engine, s.engine_tp):  # what the plan counts for this engine, and its figures
        lines.append(f"  {plan_note(s.engine, s.engine_tp)}")
    lines.append("  fits: yes" if plan.fits else "  fits: NO - " + "; ".join(over_budget(plan)))
    if plan.time is not None and not plan.fits:
        lines.append("  step: no time for a layout that does not fit"
                     + ("; the fastest that fits is listed below" if ranking is not None and ranking.fastest else ""))
    elif plan.time is not None and s.kind == "sft":
        lines.append(f"  step (estimate): update {plan.time.update:,.0f} s")
    elif plan.time is not None:
        t, w = plan.time, plan.worst_time
        lines.append(f"  step (estimate, {responses_text(s.mean_response_tokens, s.max_tokens, source)}): "
                     f"generation {t.generation:,.0f} s + update {t.update:,.0f} s + refit/offload {t.refit:,.0f} s "
                     f"= {t.total:,.0f} s; every response at max_tokens (the worst case): {w.total:,.0f} s")
    if plan.time is not None and plan.fits:
        lines.append(f"  efficiencies: {cited(s.engine)}")
    if plan.host_bytes_per_node:
        sleeping = ENGINE_KINDS[s.engine].host_copy  # an engine that sleeps with its weights on the host
        what = ("pinned optimizer copies" if not sleeping else
                sleeping + (" and pinned optimizer copies" if s.offload else ""))
        lines.append(f"  host memory per node while generating: {plan.host_bytes_per_node / GIB:,.1f} GiB "
                     f"({what} of {min(s.gpus, GPUS_PER_NODE)} ranks)")
    if not plan.fits:
        if not fixes:
            lines.append("  no change of the settings searched makes it fit: more GPUs, or GPUs with more memory")
        else:
            lines.append("  to fit (ranked: fewest changes, then the shortest step):")
            for i, f in enumerate(fixes, 1):
                p = f.plan
                step = f", step {p.time.total:,.0f} s" if p.time is not None else ""
                lines.append(f"    {i}. {overrides(f.changes, prefix)}  ->  "
                             + ", ".join(f"{ph} {p.total(ph) / GIB:.1f}" for ph in p.phases) + f" GiB{step}")
    if ranking is not None:
        lines += describe_ranking(ranking, prefix)
    return "\n".join(lines)


def _phases(plan: JobPlan) -> dict[str, Any]:
    return {
        "layout": {"tp": plan.shape.tp, "pp": plan.shape.pp, "dp": plan.shape.dp},
        "engine_layout": dict(zip(("tp", "pp", "replicas"), plan.shape.engine_layout)),
        "fits": plan.fits,
        "per_gpu_bytes": {p: {**parts, "total": plan.total(p)} for p, parts in plan.phases.items()},
        "left_bytes": {p: plan.left(p) for p in plan.phases},
        "host_bytes_per_node": plan.host_bytes_per_node,
        "step_seconds": _seconds(plan.time if plan.fits else None),
        "step_seconds_all_at_max": _seconds(plan.worst_time if plan.fits else None),
    }


def _seconds(t) -> dict[str, float] | None:
    return None if t is None else {"generation": t.generation, "update": t.update, "refit": t.refit, "total": t.total}


def ranking_json(ranking: Ranking | None) -> dict[str, Any] | None:
    if ranking is None:
        return None
    return {"configured_rank": ranking.rank, "fitting": ranking.fitting, "slower_than_fastest": ranking.slower,
            "verdict": verdict(ranking),
            "fastest": [{"changes": c.changes, **_phases(c.plan)} for c in ranking.fastest]}


def as_json(name: str, plan: JobPlan, fixes: list[Fix], ranking: Ranking | None = None,
            source: str | None = None) -> dict[str, Any]:
    """The same numbers as `describe`, with the assumptions and efficiencies named (no step time where the
    layout does not fit: `step_seconds` null)."""
    s = plan.shape
    best = fixes[0] if fixes else None
    figure = ENGINE_KINDS[s.engine].decode  # its own decode figure, else the megatron engine's measured one
    return {
        "stage": name, "kind": s.kind, "gpus": s.gpus, "gpu": plan.gpu.name,
        "engine": s.engine if s.kind == "rl" else None,
        **_phases(plan),
        "gpu_memory_bytes": plan.memory_bytes, "usable_bytes": plan.usable_bytes,
        "pipeline_stage": dict(plan.stages), "microbatches": plan.microbatches,
        "tokens_per_microbatch": plan.tokens_per_microbatch, "engine_rows": plan.engine_rows,
        "parameters": parameter_count(s.arch, s.vocab_divisible_by),
        "assumptions": {"prompt_tokens": s.prompt_tokens, "max_tokens": s.max_tokens,
                        "mean_response_tokens": s.mean_response_tokens, "mean_response_source": source,
                        "share_over_90pct_of_max_tokens": (tail_share(s.mean_response_tokens, s.max_tokens)
                                                           if s.kind == "rl" else None),
                        "longest_sequence": s.longest},
        "efficiencies": {"update_fraction_of_peak": update_fraction(plan.tokens_per_microbatch),
                         "decode_fraction_of_bandwidth": figure.fraction if figure else DECODE_BANDWIDTH_FRACTION,
                         "decode_source": figure.source if figure else SOURCES["decode_fraction_of_bandwidth"],
                         "eager_decode_host_seconds_per_layer": EAGER_HOST_S_PER_LAYER,
                         "host_link_fraction": HOST_LINK_FRACTION, "sources": dict(SOURCES)},
        "fixes": [{"changes": f.changes, **_phases(f.plan)} for f in fixes],
        "ranking": ranking_json(ranking),
        "recommended": {"changes": {}, **_phases(plan)} if plan.fits or best is None
        else {"changes": best.changes, **_phases(best.plan)},
    }
