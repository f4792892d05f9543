"""What `nemo-lead submit` asks SLURM for besides GPUs, from the plan: host memory (`--mem`), cores
(`--cpus-per-task`), the warning before the time limit (`--signal`) and the deadline margin, and how many
runs of each job a stage takes under the time cap; and the plan's memory check before anything is queued.

The GPUs: `plan.gpu` / `plan.gpu_memory_gib` when given, else the recipe's `hardware.gpu` (a recipe names
what its layouts were chosen for), else the H100's figures for the times (host memory does not depend on the
GPU). The models: a login node often does not mount them, so a `paths` key the recipe maps to a conf/model
preset (`presets:`) that is not readable here is planned as that preset, and the dry run says so. A job whose
model cannot be read at all gets `--mem=0` (the whole node) with a note.

Per job kind:
- SFT / RL: the plan of the stage (`nemo_lead.plan`): host memory and cores (`nemo_lead.plan.host`), one
  step, one checkpoint and the margin for the warning (`nemo_lead.plan.stop_times`), and the steps one job
  of `--time` holds, so the runs (first start plus requeues) a stage takes;
- eval / distill: one engine call (`call_sequences`, by default CALL_WAVES x the sequences the engine holds
  at once) at `max_tokens` each (the unit the evaluation stops after: `nemo_lead.eval.runner`), its time from
  the plan's decode model
  (`nemo_lead.plan.timing.generation_seconds`) with the sequences the GPU's memory left after the weights
  holds at once (or `engine.kv_cache_gib`), and host memory at the plan's allowance per rank and grader;
- no GPU (select, prepare): SLURM's defaults.
"""

from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any

from nemo_lead.config.loading import ConfigError
from nemo_lead.launch.submit_config import SubmitConfig, time_seconds
from nemo_lead.pipeline.config import RunConfig, load_recipe, resolve_stage
from nemo_lead.pipeline.hardware import preset_paths
from nemo_lead.pipeline.kinds import KINDS, PLANNED_KINDS, models_of
from nemo_lead.pipeline.preflight import recipe_conflicts, report
from nemo_lead.pipeline.recipe import find_recipe, read_recipe
from nemo_lead.pipeline.recipe_plan import PlanConfig, command_job, recipe_jobs
from nemo_lead.plan.engine_kinds import AUTO_KIND, AUTO_NAMES
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.plan.stop_times import stop_times

GIB = 2**30


# ----------------------------------------------------------------------------- the GPUs and models planned on
def planned_config(cfg: SubmitConfig) -> tuple[SubmitConfig, list[str]]:
    """`cfg` as the plan reads it, and notes saying what was assumed: `plan.gpu` from the recipe's
    `hardware.gpu` when the command line names no GPU; each `paths` key of the recipe's `presets` whose value
    is not readable here replaced by its preset (in `job.paths`, for the plan only: the jobs run `cfg`)."""
    if cfg.command not in (None, "run") or not cfg.target:
        return cfg, []
    try:
        recipe = read_recipe(find_recipe(cfg.target))
    except ConfigError:
        return cfg, []  # plan_jobs names what is wrong with the target
    notes, plan, job = [], cfg.plan, dict(cfg.job)
    gpu = recipe.hardware.get("gpu")
    if gpu and plan.gpu is None and plan.gpu_memory_gib is None:
        plan = dataclasses.replace(plan, gpu=gpu)
        notes.append(f"planned on the recipe's hardware, {recipe.hardware.get('gpus_per_node', '?')} x {gpu} per node "
                     f"(hardware.gpu in {recipe.path.name}; plan.gpu=NAME plans on other GPUs)")
    paths, found = preset_paths(recipe, dict(job.get("paths") or {}))
    notes += found
    if paths:
        job["paths"] = paths
    return dataclasses.replace(cfg, plan=plan, job=job), notes


def _run_of(cfg: SubmitConfig) -> RunConfig:
    job = dict(cfg.job)
    return RunConfig(recipe=str(find_recipe(cfg.target)), paths=dict(job.get("paths") or {}),
                     stages=dict(job.get("stages") or {}), plan=PlanSettings(**(job.get("plan") or {})))


def _hf_config(model: str):
    from nemo_lead.plan.check import hf_config_of  # (torch)

    return hf_config_of(model)


# ----------------------------------------------------------------------------- per job
def _rl_sft(p: Any, job: Any, cfg: SubmitConfig) -> Any:
    """`p` with the host memory, cores, warning, margin and runs of an SFT / RL stage's plan."""
    from nemo_lead.plan.host import host_needs
    from nemo_lead.plan.job import job_shape, plan_job

    settings = job.config.plan.merged(cfg.plan)
    hf_config, divisible = _hf_config(job.config.actor.model)
    gpu = settings.planned_gpu()
    configs = [job.config]
    if KINDS[job.kind].engine_keys and job.config.engine.kind == AUTO_KIND:
        # the job picks its engine on the node (vllm where installed and it fits, else megatron): its host
        # memory, warning and runs are sized for the slowest of auto's candidates, so none outruns the sbatch file
        configs = [dataclasses.replace(job.config, engine=dataclasses.replace(job.config.engine, kind=k))
                   for k in AUTO_NAMES]
    plans = []
    for config in configs:
        shape = job_shape(config, job.kind, hf_config, gpus=p.nodes * p.tasks_per_node, settings=settings,
                          vocab_divisible_by=divisible, gpu=gpu, memory_gib=settings.gpu_memory_gib)
        plans.append(plan_job(shape, gpu, memory_gib=settings.gpu_memory_gib, reserve_gib=settings.value("reserve_gib")))
    timed = [pl for pl in plans if pl.time is not None]
    plan = max(timed, key=lambda pl: pl.worst_time.total) if timed else plans[-1]
    h = host_needs(plan, job.config, p.tasks_per_node)
    if len(plans) > 1:  # host memory: the larger of the two (vLLM's weights stay on the host while it sleeps)
        h = max((host_needs(pl, job.config, p.tasks_per_node) for pl in plans), key=lambda x: x.memory_gib_per_node)
    p = dataclasses.replace(p, mem_gib=math.ceil(h.memory_gib_per_node), cpus_per_task=h.cpus_per_task)
    if plan.time is None:
        return p
    # the warning and the margin from the longest step (every response at max_tokens: a step may take that long)
    # and the checkpoint's time; the runs a stage takes from the step at the stated mean response length
    stops = stop_times(plan.worst_time.total, h.checkpoint_bytes, p.nodes)
    runs = job_runs(h.steps, plan.time.total, stops.save_s, stops.margin_s, time_seconds(p.time))
    return dataclasses.replace(p, signal_seconds=stops.signal_s, margin_s=stops.margin_s,
                               stops="; ".join(x for x in (stops.describe(), runs) if x))


def job_runs(steps: int | None, step_s: float, save_s: float, margin_s: int, limit_s: int) -> str:
    """How many runs of a job of `limit_s` seconds a stage of `steps` steps takes: a job goes on while the
    longest step and a checkpoint still fit the time left less the margin (`nemo_lead.runtime.deadline`),
    so it holds floor((limit - margin - save) / step) steps (the start-up and the saves between left out)."""
    if steps is None or step_s <= 0:
        return ""
    per_job = math.floor((limit_s - margin_s - save_s) / step_s)
    if per_job < 1:
        return ""  # render_sbatch refuses such a limit, naming the stage
    runs = math.ceil(steps / per_job)
    again = f"{runs - 1} requeue{'s' if runs > 2 else ''}" if runs > 1 else "no requeue"
    return (f"{steps} steps x {step_s:,.0f} s = {steps * step_s / 3600:,.1f} h: {runs} run{'s' if runs > 1 else ''} "
            f"of this job at {per_job} steps each ({again})")


def call_seconds(cfg: Any, hf_config: dict, divisible: int, settings: PlanSettings) -> float:
    """One engine call of an eval / distill stage (`cfg`: its EvalConfig) on one replica of tp x pp GPUs, every
    response at max_tokens, on the engine the plan gives it (`nemo_lead.plan.engine_stage`: engine.kind=auto the
    slower of the two, in case a node has no vLLM, as for RL), with as many sequences at once as its KV budget
    holds at full length."""
    from nemo_lead.models.hf_config import arch_from_hf
    from nemo_lead.plan.engine_stage import plan_auto_engine, stage_shape

    shape = stage_shape(cfg, settings, gpus=cfg.tp * cfg.pp, problems=(1000,), models=1, divisible=divisible)
    _, plans = plan_auto_engine(arch_from_hf(hf_config), settings.planned_gpu(), shape, cfg.engine.kind)
    return max(p.worst_call_seconds for p in plans.values())  # auto: the slower engine's, as for RL


def _generation_job(p: Any, cfg: Any, models: list[str], submit: SubmitConfig) -> Any:
    """`p` (an eval / distill job) with the warning and margin of its slowest call and the plan's host
    allowance (per rank, and per grader process on rank 0)."""
    from nemo_lead.plan.host import HOST_GIB_PER_RANK, VERIFIER_GIB

    workers = cfg.verify.workers
    p = dataclasses.replace(p, mem_gib=math.ceil(p.tasks_per_node * HOST_GIB_PER_RANK + workers * VERIFIER_GIB),
                            cpus_per_task=2 + math.ceil(workers / p.tasks_per_node))
    settings = submit.plan
    seconds = max(call_seconds(cfg, *_hf_config(m), settings) for m in models)
    stops = stop_times(seconds, 0, p.nodes)
    what = (f"signal USR1@{stops.signal_s}, deadline margin {stops.margin_s} s (plan: an engine call at "
            f"{cfg.sampling.max_tokens:,} tokens a response {seconds:,.0f} s on {settings.planned_gpu().name})")
    return dataclasses.replace(p, signal_seconds=stops.signal_s, margin_s=stops.margin_s, stops=what)


def _stage_configs(run: RunConfig) -> dict[str, tuple[Any, list[str]]]:
    """A stage that generates (eval, distill: `StageKind.generates`) -> (its config, the models it generates
    with), an earlier training stage's checkpoint standing for the model it trains (the same shape)."""
    recipe = load_recipe(run)
    outputs: dict[str, dict[str, Any]] = {}
    out: dict[str, tuple[Any, list[str]]] = {}
    for spec in recipe.stages:
        kind = KINDS[spec.kind]
        outputs[spec.name] = {o: f"<stage {spec.name}: {o}>" for o in kind.outputs}
        if not (kind.planned or kind.generates):
            continue
        stage = resolve_stage(spec, recipe, run, outputs)
        models = list(models_of(spec.kind, stage.config, stage.extras).values())
        if kind.planned:  # its checkpoint: the shape of the model it trains
            (outputs[spec.name]["checkpoint"],) = models
        else:
            out[spec.name] = (stage.config, [m for m in models if "<stage " not in str(m)])
    return out


def _unplanned(p: Any, why: str) -> Any:
    """A GPU job without a plan of its host memory: the whole node's (`--mem=0`), saying why."""
    return dataclasses.replace(p, mem_gib=0, stops=f"--mem=0 (the whole node): {why}")


def host_sizes(cfg: SubmitConfig, plans: list[Any]) -> list[Any]:
    """`plans` (`nemo-lead submit`'s JobPlans) with what each job's plan asks of SLURM (module docstring).
    `cfg`: as `planned_config` returns it."""
    if all(p.gpus_per_node == 0 for p in plans):
        return plans  # jobs without GPUs (a CPU partition): SLURM's defaults; the plan is of GPU jobs
    if cfg.command in PLANNED_KINDS:
        try:
            job = command_job(PlanConfig(target=cfg.target, command=cfg.command, gpus=1, job=dict(cfg.job)))
            return [_rl_sft(p, job, cfg) for p in plans]
        except (ConfigError, ValueError, OSError, KeyError) as e:
            return [_unplanned(p, f"no plan here ({e})") for p in plans]
    if cfg.command not in (None, "run") or not cfg.target:
        return [_unplanned(p, f"no plan of `nemo-lead {cfg.command}` jobs") if p.gpus_per_node else p for p in plans]
    try:
        run = _run_of(cfg)
        jobs = {j.name: j for j in recipe_jobs(run)}
        generating = _stage_configs(run)
    except (ConfigError, ValueError, OSError):
        return plans  # the preflight names what is wrong
    out = []
    for p in plans:
        if p.gpus_per_node == 0:
            out.append(p)
            continue
        names = list(jobs) + list(generating) if p.name == "recipe" else [p.name]  # chain=false: the largest
        sized = []
        for name in names:
            try:
                if name in jobs:
                    sized.append(_rl_sft(p, jobs[name], cfg))
                elif name in generating and generating[name][1]:
                    sized.append(_generation_job(p, *generating[name], cfg))
            except (ValueError, OSError, KeyError) as e:
                sized.append(_unplanned(p, f"stage {name}: no plan here ({str(e).splitlines()[0]})"))
        if not sized:
            out.append(_unplanned(p, "no model of this stage is readable here"))
            continue
        unplanned = [q for q in sized if q.mem_gib == 0]
        if unplanned:
            out.append(unplanned[0])
            continue
        longest = max(sized, key=lambda q: q.signal_seconds or 0)  # chain=false: the largest of the stages'
        out.append(dataclasses.replace(longest, mem_gib=max(q.mem_gib for q in sized),
                                       cpus_per_task=max(q.cpus_per_task or 1 for q in sized)))
    return out


# ----------------------------------------------------------------------------- before anything is queued
def check_submit(original: SubmitConfig, cfg: SubmitConfig, plans: list[Any], notes: list[str]) -> int:
    """The preflight of `original` (what the jobs run: missing paths are notes) and the memory plan of every
    GPU job of `cfg` (`planned_config`'s: the recipe's GPUs and presets) on the GPUs it names; 2 when one
    cannot fit or the recipe cannot run. A model that cannot be read here is a note: its job checks it."""
    from nemo_lead.plan.check import check_job, report_failures

    if original.command in (None, "run"):
        ranks = {p.name: p.nodes * p.tasks_per_node for p in plans}
        found = recipe_conflicts(_run_of(original), world=ranks.get("recipe", ranks), prefix="job.stages.",
                                 missing_ok=True)
        if report("submit", found[0], found[1] + notes, sys.stderr):
            return 2
    else:
        report("submit", [], notes, sys.stderr)
    settings = cfg.plan
    sized = [p for p in plans if p.gpus_per_node > 0]
    if settings.check == "off" or not sized:
        return 0
    if settings.gpu is None and settings.gpu_memory_gib is None:
        print("nemo-lead submit: the memory plan is not checked here (name the GPUs: plan.gpu=h100 or "
              "plan.gpu_memory_gib=80, or `hardware:` in the recipe); each job checks it when it starts",
              file=sys.stderr)
        return 0
    gpu = settings.planned_gpu()
    if cfg.command in (None, "run"):
        jobs = {j.name: j for j in recipe_jobs(_run_of(cfg))}
        pairs = [(jobs[p.name], p) for p in sized if p.name in jobs]
        pairs += [(j, p) for p in sized if p.name == "recipe" for j in jobs.values()]  # chain=false: one job
    elif cfg.command in PLANNED_KINDS:
        pairs = [(command_job(PlanConfig(target=cfg.target, command=cfg.command, gpus=1, job=dict(cfg.job))), sized[0])]
    else:
        return 0
    failures, stop = [], False
    for job, size in pairs:
        stage_settings = job.config.plan.merged(settings)
        try:
            failure = check_job(job.name, job.config, job.kind, gpus=size.nodes * size.tasks_per_node, gpu=gpu,
                                memory_gib=stage_settings.gpu_memory_gib, settings=stage_settings,
                                prefix=f"job.{job.prefix}" if job.prefix.startswith("stages.") else job.prefix)
        except (ValueError, OSError, KeyError) as e:
            print(f"nemo-lead submit: note: {job.name}: the memory plan is not checked here ({str(e).splitlines()[0]}); "
                  "the job checks it when it starts", file=sys.stderr)
            continue
        if failure:
            failures.append(failure)
            stop = stop or stage_settings.check != "warn"
    return report_failures("submit", failures, "error" if stop else "warn")
