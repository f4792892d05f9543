"""docs/sizing.md's table, regenerated from the plan: per model, GPUs and stage, the step time of the layout
shipped before 2026-12-01, of the layout shipped now, and of the fastest the plan finds (`nemo-lead plan`'s
ranking, `nemo_lead.plan.search`), with the memory per GPU and the pinned host memory per node.

    .venv/bin/python bench/sizing_table.py > /tmp/sizing.md        # no GPU, no weights: conf/model presets

"Before" is the current recipe with the overrides that restore the old settings (`BEFORE`); the 32B and 72B
shapes have no recipe of their own: they are lead-14b's settings with another model, on more GPUs.
"""

from __future__ import annotations

from typing import Any

from nemo_lead.pipeline.plan import PlanConfig, jobs_of
from nemo_lead.plan.check import hf_config_of
from nemo_lead.plan.job import GIB, JobPlan, job_shape, plan_job
from nemo_lead.plan.report import layout_name, overrides, step_text
from nemo_lead.plan.search import rank_layouts
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.plan.timing import gpu_named

# lead-14b before 2026-12-01: the RL stages' KV budget of 70 GB (65.2 GiB); ablation-7b-*: TP4, no recomputation,
# the engine on the actor's modules (engine.tp=actor, the default then)
LEAD_BEFORE = {"stage1": {"engine": {"kv_cache_gib": 65.2}}}
ABLATION_BEFORE = {"rl": {"actor": {"tp": 4, "recompute_granularity": None, "recompute_method": None,
                                    "recompute_num_layers": None, "optim": {"use_distributed_optimizer": False}},
                          "engine": {"kv_cache_gib": None, "tp": "actor", "pp": "actor"}}}
# (model label, conf/model preset, GPUs, GPU, stage, recipe now, recipe before, its overrides)
ROWS = [
    *[("14B", "r1-distill-qwen-14b", 8, gpu, stage, now, "lead-14b", LEAD_BEFORE)
      for gpu, now in (("h100", "lead-14b"), ("h200", "lead-14b-h200")) for stage in ("sft", "stage1")],
    *[("7B", "r1-distill-qwen-7b", 8, gpu, "rl", "ablation-7b-grpo", "ablation-7b-grpo", ABLATION_BEFORE)
      for gpu in ("h100", "h200")],
    *[(label, model, gpus, gpu, stage, "lead-14b", "lead-14b", LEAD_BEFORE)
      for label, model, gpus in (("32B", "r1-distill-qwen-32b", 16), ("72B", "qwen2.5-72b", 32))
      for gpu in ("h100", "h200") for stage in ("sft", "stage1")],
]


def _plans(recipe: str, model: str, gpus: int, gpu: str, stage: str, stages: dict[str, Any]):
    """(the plan as set, its ranking) of one stage of `recipe` on `gpus` x `gpu`."""
    cfg = PlanConfig(target=recipe, stage=stage, gpus=gpus, paths={"base_model": model}, stages=stages,
                     plan=PlanSettings(gpu=gpu))
    (job,) = jobs_of(cfg)
    hf_config, divisible = hf_config_of(job.config.actor.model)
    g = gpu_named(gpu)
    shape = job_shape(job.config, job.kind, hf_config, gpus=gpus, settings=job.config.plan.merged(cfg.plan),
                      vocab_divisible_by=divisible, gpu=g)
    return plan_job(shape, g, reserve_gib=3.0), rank_layouts(shape, g, memory_gib=None, reserve_gib=3.0, limit=1)


def _memory(plan: JobPlan) -> str:
    host = f"; host {plan.host_bytes_per_node / GIB:,.0f}" if plan.host_bytes_per_node else ""
    return " / ".join(f"{plan.total(p) / GIB:.1f}" for p in plan.phases) + host


def _cell(plan: JobPlan) -> str:
    return f"{layout_name(plan)}: {step_text(plan)}" if plan.fits else f"{layout_name(plan)}: does not fit"


def _ratio(before: JobPlan, after: JobPlan | None) -> str:
    return f"{before.time.total / after.time.total:.2f}" if after is not None and before.fits and after.fits else "-"


def main() -> None:
    print("| model | GPUs | stage | before: layout, step | now: recipe, layout, step (generation + update + "
          "refit) | before / now | the plan's fastest that fits | before / fastest | GiB per GPU update / "
          "generation; host GiB per node (now, else the fastest) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for label, model, gpus, gpu, stage, now, before, restore in ROWS:
        old, _ = _plans(before, model, gpus, gpu, stage, {stage: restore[stage]} if stage in restore else {})
        plan, ranking = _plans(now, model, gpus, gpu, stage, {})
        best = ranking.fastest[0] if ranking and ranking.fastest else None
        fastest = "none" if best is None else (
            "as shipped" if not best.changes else f"{_cell(best.plan)}; `{overrides(best.changes)}`")
        shown = plan if plan.fits or best is None else best.plan
        print(f"| {label} | {gpus} x {gpu.upper()} | {stage} | {_cell(old)} | {now}: {_cell(plan)} | "
              f"{_ratio(old, plan)} | {fastest} | {_ratio(old, best.plan if best else None)} | {_memory(shown)} |")


if __name__ == "__main__":
    main()
