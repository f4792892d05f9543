"""`nemo-lead plan`: the memory and time plan of a recipe's SFT / RL stages, or of one command's config, on
GPUs that need not be there; and the same plan checked before `nemo-lead run` starts its stages.

    nemo-lead plan lead-32b                  # on the hardware the recipe names (hardware:, each stage's slurm:)
    nemo-lead plan lead-14b --stage stage1 --gpus 8 --gpu h100 paths.base_model=r1-distill-qwen-14b
    nemo-lead plan my-rl.yaml --command rl --gpus 16 --gpu-memory-gib 80 job.actor.tp=4 --json plan.json
    nemo-lead plan --command rl --gpus 8 --gpu h200 job.actor.model=r1-distill-qwen-14b job.rollout.max_tokens=14336

Without `--gpus` / `--gpu` a recipe is planned on what it names (`on_hardware`: `hardware.gpu`, each stage's
`slurm:` nodes x GPUs per node, `presets:` for model folders not readable here), said in the output's first
line; each flag overrides its part. A recipe is read the way `nemo-lead run` reads it (`RunConfig`, `resolve_stage`: `paths.*` and `stages.*`
overrides, the kinds' defaults), so its stages are planned with exactly their settings. A stage whose model
is an earlier stage's checkpoint gets that stage's model (the shape does not change in training); the model
itself may be a HF folder (only its config.json is read), a checkpoint or a conf/model preset. The numbers:
`nemo_lead.plan` (per GPU and phase, what is left, the ranked fixes, the step time at the stated mean response
and with every response at max_tokens, and the layouts that fit ranked by step time: `nemo_lead.plan.search`,
`--fastest N` of them, 0 for none). A recipe's distill and eval stages get their memory and time from the same
engine model (`nemo_lead.plan.engine_stage`); a stage that does not fit gets no time of its own (the fastest
layout that fits stands in, named), and the recipe's total names the stages without one. `--json FILE` writes
them: one job's plan as an object with `layout`, `fits`, `gpu_memory_bytes`, `per_gpu_bytes` per phase,
`ranking`, ...; several stages as {"stages": [...], "fits": all of them}.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from nemo_lead.config.loading import ConfigError, as_overrides, load_config
from nemo_lead.data import DataError, load_problems
from nemo_lead.pipeline.config import RunConfig, load_recipe, resolve_stage
from nemo_lead.pipeline.hardware import preset_paths, stage_gpus
from nemo_lead.pipeline.kinds import GENERATING_KINDS, KINDS, PLANNED_KINDS, models_of, schema
from nemo_lead.pipeline.preflight import recipe_conflicts, report
from nemo_lead.pipeline.recipe import find_recipe, read_recipe
from nemo_lead.plan.engine_kinds import ENGINE_KINDS, plan_note
from nemo_lead.plan.settings import PlanSettings

RL_ONLY_KEYS = {"rollout", "engine", "lead", "prompts_per_step", "validation", "max_rounds", "ppo_epochs",
                "minibatches", "old_logprobs", "answer_region", "verify_workers", "verify_timeout_s", "log_rollouts"}
SFT_ONLY_KEYS = {"global_batch", "epochs", "val_every"}


@dataclass
class PlanConfig:
    """`nemo-lead plan TARGET [--gpus N] [--gpu NAME | --gpu-memory-gib G] [--stage NAME] [--json FILE] ...`."""

    target: Optional[str] = None  # a recipe (file or name in recipes/), or a config file of `command`
    command: Optional[str] = None  # sft | rl: what a config-file target configures (None: from its keys)
    stage: Optional[str] = None  # a recipe's SFT / RL stage (None: all of them)
    # GPUs the job runs on (tp x pp x dp); None: a recipe's, each stage's `slurm:` nodes x GPUs per node
    gpus: Optional[int] = None
    gpus_per_node: int = 8  # for the host side: ranks (one per GPU) on one node
    json: Optional[str] = None  # also write the plan to this JSON file
    fixes: int = 5  # ranked changes listed when a job does not fit
    fastest: int = 5  # the fastest layouts that fit, listed with their step times (nemo_lead.plan.search)
    plan: PlanSettings = field(default_factory=PlanSettings)  # gpu, gpu_memory_gib, reserve_gib, prompt_tokens, ...
    paths: dict[str, Any] = field(default_factory=dict)  # a recipe's paths (paths.base_model=DIR)
    stages: dict[str, Any] = field(default_factory=dict)  # a recipe's stage settings (stages.NAME.KEY=VALUE)
    engine: dict[str, Any] = field(default_factory=dict)  # a recipe's generating stages' engine (engine.kind=vllm)
    job: dict[str, Any] = field(default_factory=dict)  # a command config's settings (job.actor.tp=4)

    def __post_init__(self) -> None:
        if self.gpus is not None and self.gpus < 1:
            raise ValueError(f"gpus must be >= 1, got {self.gpus}")
        if self.command not in (None, *PLANNED_KINDS):
            raise ValueError(f"command must be sft or rl, got {self.command!r}")
        if self.target is None and self.command is None:
            raise ValueError("give a recipe or a config file (TARGET), or --command sft|rl for the defaults")
        if self.fixes < 0:
            raise ValueError(f"fixes must be >= 0, got {self.fixes}")
        if self.fastest < 0:
            raise ValueError(f"fastest must be >= 0, got {self.fastest}")


# ----------------------------------------------------------------------------- what to plan
@dataclass
class Job:
    name: str  # the stage, or the command
    kind: str  # sft | rl
    config: Any  # SFTConfig | RLConfig
    prefix: str = ""  # how its keys are overridden ("stages.NAME." in a recipe, "job." for a config file)
    extras: dict[str, Any] = field(default_factory=dict)  # the kind's own keys (an eval stage's `models`)


def recipe_jobs(run: RunConfig, names: list[str] | None = None, done: dict[str, dict] | None = None,
                kinds: tuple[str, ...] = PLANNED_KINDS) -> list[Job]:
    """The recipe's stages of `kinds` (SFT / RL by default; `names`: only these), resolved. An earlier stage's
    outputs are the finished ones in `done`; an unfinished SFT / RL stage's checkpoint stands for its model
    (same shape)."""
    recipe = load_recipe(run)
    outputs: dict[str, dict[str, Any]] = {}
    jobs = []
    for spec in recipe.stages:
        wanted = spec.kind in PLANNED_KINDS or (spec.kind in kinds and (names is None or spec.name in names))
        if done and spec.name in done:
            outputs[spec.name] = done[spec.name]
            stage = resolve_stage(spec, recipe, run, outputs) if wanted else None
        else:
            outputs[spec.name] = {o: f"<stage {spec.name}: {o}>" for o in KINDS[spec.kind].outputs}
            stage = resolve_stage(spec, recipe, run, outputs) if wanted else None
            if stage is not None and spec.kind in PLANNED_KINDS:  # its checkpoint: the shape of the model it trains
                (outputs[spec.name]["checkpoint"],) = models_of(spec.kind, stage.config, stage.extras).values()
        if stage is not None and spec.kind in kinds and (names is None or spec.name in names):
            jobs.append(Job(spec.name, spec.kind, stage.config, f"stages.{spec.name}.", dict(stage.extras)))
    return jobs


def _command_of(target: Path) -> str:
    data = yaml.safe_load(target.read_text()) or {}
    keys = set(data) if isinstance(data, dict) else set()
    rl, sft = bool(keys & RL_ONLY_KEYS), bool(keys & SFT_ONLY_KEYS) or "max_seq_len" in (data.get("data") or {})
    if rl == sft:
        raise ConfigError(f"{target}: cannot tell whether this configures sft or rl: add --command sft|rl")
    return "rl" if rl else "sft"


def command_job(cfg: PlanConfig) -> Job:
    """A command's config: its conf/ defaults, the target file, the job.* overrides."""
    target = Path(cfg.target).expanduser() if cfg.target else None
    if target is not None and not target.is_file():
        try:
            find_recipe(cfg.target)
            why = "a recipe without `stages:`"
        except ConfigError as e:
            why = str(e)
        raise ConfigError(f"target {cfg.target!r} is not a config file, and {why}")
    kind = cfg.command or _command_of(target)
    with tempfile.TemporaryDirectory() as tmp:  # what a plan needs no value of, unless the file gives one
        stub = Path(tmp) / "plan-stub.yaml"
        stub.write_text("out: <plan>\ndata: {path: <plan>}\n")
        files = [stub] + ([target] if target is not None else [])
        config = load_config(schema(kind), files, as_overrides(cfg.job))
    return Job(kind, kind, config, "job.")


def _recipe_file(target: str | None) -> Path | None:
    """`target` as a recipe (a file with `stages:`, or a name in recipes/), else None."""
    if not target:
        return None
    try:
        path = find_recipe(target)
    except ConfigError:
        return None
    data = yaml.safe_load(path.read_text())
    return path if isinstance(data, dict) and "stages" in data else None


def jobs_of(cfg: PlanConfig, kinds: tuple[str, ...] = PLANNED_KINDS) -> list[Job]:
    """The jobs `cfg` plans: a recipe's stages of `kinds`, or one command's config."""
    recipe = _recipe_file(cfg.target) if cfg.command is None else None
    if recipe is not None:
        if cfg.job:
            raise ConfigError("job.* overrides apply to a command's config file; a recipe takes paths.* and stages.*")
        run = RunConfig(recipe=str(recipe), paths=dict(cfg.paths), stages=dict(cfg.stages), engine=dict(cfg.engine))
        jobs = recipe_jobs(run, [cfg.stage] if cfg.stage else None, kinds=kinds)
        if cfg.stage and not jobs:
            raise ConfigError(f"{recipe.name} has no {' / '.join(k.upper() if k in PLANNED_KINDS else k for k in kinds)}"
                              f" stage {cfg.stage!r}")
        return jobs
    if cfg.paths or cfg.stages or cfg.stage:
        raise ConfigError("paths.*, stages.* and --stage apply to recipes; a config file takes job.* overrides")
    return [command_job(cfg)]


# ----------------------------------------------------------------------------- the command
# The paper's own figures for a recipe's stage on its hardware, printed beside the plan's estimate:
# (recipes, stage, GPU, GPUs) -> (seconds per step, where it comes from)
REPORTED_STEPS = {
    (("lead-14b", "lead-14b-h200"), "stage1", "h20", 8): (
        864.0, "the paper's 'about 24 h on 8 H20 GPUs' for stage 1's 100 steps (arXiv 2504.09696, training "
        "recipe) = 86,400 s / 100; a mean over the stage, reported, not measured here"),
}


def reported_step(recipe: str | None, stage: str, gpu: str, gpus: int) -> tuple[float, str] | None:
    """The paper's step time for this recipe's stage on these GPUs (`REPORTED_STEPS`), or None."""
    for (recipes, name, kind, count), found in REPORTED_STEPS.items():
        if recipe in recipes and (stage, gpu, gpus) == (name, kind, count):
            return found
    return None


def _dataset_rows(config: Any, settings: PlanSettings) -> tuple[int, ...] | None:
    """Problems per dataset of a distill / eval stage: `plan.data_rows` (in all) when set, else counted from
    its files (None when one is not there yet: an earlier stage writes it)."""
    from nemo_lead.eval.config import dataset_specs

    if settings.data_rows is not None:
        return (settings.data_rows,)
    rows = []
    for spec in dataset_specs(config.data):
        try:
            count = len(load_problems(spec, split=config.split, fields=dict(config.fields), limit=config.limit))
        except (DataError, OSError, ValueError):
            return None
        rows.append(count)
    return tuple(rows)


@dataclass
class EngineJobResult:
    """One job's plan as `nemo-lead plan` prints it, its JSON, and its time at the stated mean and all at max."""

    text: str
    json: dict[str, Any]
    seconds: Optional[float]
    worst: Optional[float]


def _engine_text(p: Any, plans: dict[str, Any], kind: str) -> str:
    """Which engine the stage is planned on, and why (engine.kind=auto: both engines' times)."""
    if kind != "auto":
        return f"engine {p.engine} (engine.kind={kind})"
    times = ", ".join(f"{k} {'does not fit' if q.seconds is None else f'{q.seconds / 3600:,.1f} h'}"
                      for k, q in plans.items())
    return f"engine {p.engine} (engine.kind=auto: the faster that fits where vLLM is installed on GPUs; {times})"


def _rounds_text(p: Any, c: Any, settings: PlanSettings) -> str:
    parts = []
    for i, r in enumerate(p.rounds):
        parts.append(f"round {i + 1}: {r.problems:,} problems x {r.samples} = {r.sequences:,} sequences in "
                     f"{r.calls} calls per replica and model")
    text = "; ".join(parts)
    if len(p.rounds) > 1:
        rate = p.first_round_solve_rate
        source = settings.first_round_solve_source or "plan.first_round_solve_rate"
        text += (f" (round 2 for the problems round 1 leaves unsolved: {1 - rate:.0%}, at a first-round solve rate "
                 f"of {rate:.0%}: {source})" if rate is not None else
                 " (no plan.first_round_solve_rate: round 2 counted for every problem)")
    return text


def plan_engine_job(job: Job, cfg: PlanConfig, gpu: Any, gpus: int, recipe: Path | None = None) -> EngineJobResult:
    """A distill / eval stage: memory per GPU and time on the engine it runs on (engine.kind=auto: the faster
    that fits of auto's candidates), from the same engine model as RL's generation. (`recipe`: as for
    `plan_training_job`; no reported time stands beside these stages.)"""
    from nemo_lead.models.hf_config import arch_from_hf
    from nemo_lead.plan.check import hf_config_of
    from nemo_lead.plan.engine_stage import plan_auto_engine, stage_shape

    c = job.config
    settings = c.plan.merged(cfg.plan)
    models = list(models_of(job.kind, c, job.extras).values())
    if gpus % (c.tp * c.pp):
        raise ConfigError(f"{job.prefix}tp, {job.prefix}pp: tp x pp = {c.tp * c.pp} does not divide the job's "
                          f"{gpus} GPUs")
    problems = _dataset_rows(c, settings)
    head = (f"{job.name} ({job.kind}): {len(models)} model{'s' if len(models) > 1 else ''} x "
            f"{c.sampling.n} samples per problem{f' in rounds of {list(c.rounds)} then the rest' if c.rounds else ''}, "
            f"tp {c.tp} pp {c.pp} dp {gpus // (c.tp * c.pp)} on {gpus} x {gpu.name}")
    base = {"stage": job.name, "kind": job.kind, "gpus": gpus, "gpu": gpu.name, "models": len(models),
            "samples": c.sampling.n, "max_tokens": c.sampling.max_tokens, "rounds": list(c.rounds),
            "mean_response_tokens": settings.mean_response_tokens,
            "mean_response_source": settings.mean_response_source,
            "first_round_solve_rate": settings.first_round_solve_rate if c.rounds else None,
            "first_round_solve_source": settings.first_round_solve_source if c.rounds else None}
    try:
        hf_config, divisible = hf_config_of(models[0])
    except (ConfigError, ValueError, OSError) as e:
        hf_config, why = None, f"{e}; the stage's model is not readable here"
    if problems is None:
        why = (f"its problems are written by an earlier stage ({c.data}): give their number, "
               f"{job.prefix}plan.data_rows=N")
    if problems is None or hf_config is None:
        return EngineJobResult(f"{head}\n  stage time: none ({why})",
                               {**base, "fits": None, "problems": None if problems is None else list(problems),
                                "stage_seconds": None, "stage_seconds_all_at_max": None, "no_time": why}, None, None)
    shape = stage_shape(c, settings, gpus=gpus, problems=problems, models=len(models), divisible=divisible)
    p, plans = plan_auto_engine(arch_from_hf(hf_config), gpu, shape, c.engine.kind)
    return EngineJobResult("\n".join([head, *_engine_job_lines(job, p, plans, problems, settings)]),
                           _engine_job_json(base, c, p, plans, problems, settings), p.seconds, p.worst_seconds)


def _engine_job_lines(job: Job, p: Any, plans: dict[str, Any], problems: tuple[int, ...],
                      settings: PlanSettings) -> list[str]:
    """The lines of a generating stage's plan `p` under its head: the engine, the rounds, what is in flight,
    the memory, what the plan counts for the engine, the stage's time."""
    from nemo_lead.plan.report import responses_text

    c, gib = job.config, 1 << 30
    memory = ", ".join(f"{k} {v / gib:.1f}" for k, v in p.per_gpu.items())
    full = settings.value("prompt_tokens") + c.sampling.max_tokens
    held = ("the KV pool at full length, every admitted sequence finishing without a preemption"
            if ENGINE_KINDS[p.engine].pool == "whole" else "each reserving its full length"
            if c.engine.kv_cache_gib is not None else "engine.max_batch_size")
    lines = [f"  {_engine_text(p, plans, c.engine.kind)}",
             f"  {sum(problems):,} problems; {_rounds_text(p, c, settings)}",
             f"  in flight: {p.rows} sequences of {full:,} tokens per replica ({held}); calls of {p.call_sequences} "
             f"sequences; a stopped or killed stage redoes at most one call per replica: "
             + (f"~{p.call_seconds / 60:,.0f} min at the stated lengths ({p.worst_call_seconds / 60:,.0f} min all at "
                f"max_tokens)" if p.fits else "no time"),
             f"  GiB per GPU: {memory}; total {p.total_bytes / gib:.1f} of {p.usable_bytes / gib:.1f} usable: "
             + ("fits" if p.fits else f"does NOT fit{f' ({p.why_not})' if p.why_not else ''}")]
    if plan_note(p.engine, stage=True):  # what the plan counts for this engine, and its decode figure
        lines.append(f"  {plan_note(p.engine, stage=True)}")
    if p.fits:
        worst = (f" (every response at max_tokens: {p.worst_seconds / 3600:,.1f} h)"
                 if round(p.worst_seconds) != round(p.seconds) else "")
        lines.append(f"  stage time ({responses_text(settings.mean_response_tokens, c.sampling.max_tokens, settings.mean_response_source)}): "
                     f"{p.seconds / 3600:,.1f} h{worst}")
    else:
        lines.append(f"  stage time: none for a layout that does not fit (change {job.prefix}tp / pp, "
                     f"or {job.prefix}engine.kv_cache_gib)")
    return lines


def _engine_job_json(base: dict[str, Any], c: Any, p: Any, plans: dict[str, Any], problems: tuple[int, ...],
                     settings: PlanSettings) -> dict[str, Any]:
    """A generating stage's plan `p` as `--json` writes it."""
    from nemo_lead.plan.timing import tail_share

    return {**base, "fits": p.fits, "problems": list(problems), "engine": p.engine, "engine_kind": c.engine.kind,
            "engine_seconds": {k: None if q.seconds is None else round(q.seconds) for k, q in plans.items()},
            "replicas": p.replicas, "engine_rows": p.rows, "call_sequences": p.call_sequences,
            "calls_per_replica": p.calls,
            "rounds_planned": [{"samples": r.samples, "problems": r.problems, "sequences": r.sequences,
                                "calls_per_replica": r.calls, "call_seconds": round(r.call_seconds),
                                "call_seconds_all_at_max": round(r.worst_call_seconds)} for r in p.rounds],
            "per_gpu_bytes": {**p.per_gpu, "total": p.total_bytes}, "usable_bytes": p.usable_bytes,
            "share_over_90pct_of_max_tokens": tail_share(settings.mean_response_tokens, c.sampling.max_tokens),
            "redo_seconds": round(p.call_seconds) if p.fits else None,
            "stage_seconds": None if p.seconds is None else round(p.seconds),
            "stage_seconds_all_at_max": None if p.worst_seconds is None else round(p.worst_seconds)}


def on_hardware(cfg: PlanConfig, recipe: Path | None) -> tuple[PlanConfig, dict[str, int], list[str]]:
    """`cfg` with what a recipe names where the command line names nothing: the GPU kind (`hardware.gpu`,
    unless --gpu / plan.gpu_memory_gib), each stage's GPUs (its `slurm:` nodes x GPUs per node, unless --gpus)
    and conf/model presets for model folders not readable here (`presets:`); the GPUs per stage; and the
    lines that say so, the plan's first. A config file names no hardware: --gpus is needed."""
    if recipe is None:
        if cfg.gpus is None:
            raise ConfigError("gpus must be given: the GPUs the job runs on (--gpus N); a recipe names them in its "
                              "`hardware:` and its stages' `slurm:`")
        return cfg, {}, []
    r = read_recipe(recipe)
    gpus = dict.fromkeys((s.name for s in r.stages), cfg.gpus) if cfg.gpus else stage_gpus(r)
    paths, notes = preset_paths(r, cfg.paths)
    named = []
    gpu = r.hardware.get("gpu")
    plan = cfg.plan
    if gpu and plan.gpu is None and plan.gpu_memory_gib is None:
        plan = dataclasses.replace(plan, gpu=gpu)
        named.append(f"{gpu.upper()} GPUs (hardware.gpu)")
    if cfg.gpus is None:
        shown = [s.name for s in r.stages if s.kind in PLANNED_KINDS + GENERATING_KINDS and (not cfg.stage or s.name == cfg.stage)]
        named.append("each stage on its slurm: nodes x GPUs per node (" + ", ".join(f"{n}: {gpus[n]}" for n in shown)
                     + " GPUs)")
    lines = []
    if named:
        flags = " / ".join(f for f, taken in (("--gpus N", cfg.gpus is None), ("--gpu NAME", plan is not cfg.plan))
                           if taken)
        lines.append(f"planned on the hardware {r.path.name} names: {', '.join(named)}; {flags} plan on others")
    lines += notes
    return dataclasses.replace(cfg, plan=plan, paths=paths), gpus, lines


def run_plan(cfg: PlanConfig) -> int:
    """`nemo-lead plan`: print each job's plan (and write --json); exit 0 when all fit, 1 when one does not."""
    try:
        recipe = _recipe_file(cfg.target) if cfg.command is None else None
        cfg, stage_gpus_, head = on_hardware(cfg, recipe)
        jobs = jobs_of(cfg, kinds=PLANNED_KINDS + GENERATING_KINDS if recipe is not None else PLANNED_KINDS)
        gpus_of = {j.name: stage_gpus_.get(j.name, cfg.gpus) for j in jobs}
        if recipe is not None:
            run = RunConfig(recipe=str(recipe), paths=dict(cfg.paths), stages=dict(cfg.stages), engine=dict(cfg.engine))
            planned = [j for j in jobs if j.kind in PLANNED_KINDS]
            found = recipe_conflicts(run, world={j.name: gpus_of[j.name] for j in planned},
                                     names=[cfg.stage] if cfg.stage else None, missing_ok=True)
            if report("plan", *found, sys.stderr):
                return 2
        gpu = cfg.plan.planned_gpu()
        results, texts, times = [], [], []
        for job in jobs:
            plan_one = plan_engine_job if job.kind in GENERATING_KINDS else plan_training_job
            r = plan_one(job, cfg, gpu, gpus_of[job.name], recipe)
            texts.append(r.text)
            results.append(r.json)
            times.append((job.name, r.seconds, r.worst))
    except (ConfigError, ValueError, OSError) as e:
        print(f"nemo-lead plan: {e}", file=sys.stderr)
        return 2
    if not cfg.plan.gpu:
        texts.insert(0, "(no --gpu given: the step times use the H100's figures)")
    if head:
        texts.insert(0, "\n".join(head))
    if len(results) > 1:
        texts.append(total_text(times, results))
    print("\n\n".join(texts))
    if cfg.json:
        data = results[0] if len(results) == 1 else {
            "stages": results, "fits": all(r["fits"] is not False for r in results), "gpus": cfg.gpus,
            "gpus_per_stage": gpus_of,
            "total_seconds": _sum([t for _, t, _ in times]), "total_seconds_all_at_max": _sum([w for _, _, w in times]),
            "untimed_stages": [name for name, t, _ in times if t is None]}
        Path(cfg.json).write_text(json.dumps(data, indent=2) + "\n")
    return 0 if all(r["fits"] is not False for r in results) else 1  # None: a stage that could not be planned


def plan_training_job(job: Job, cfg: PlanConfig, gpu: Any, gpus: int, recipe: Path | None = None) -> EngineJobResult:
    """An SFT / RL job: its plan on `gpus` GPUs of `gpu`'s kind, the fixes when it does not fit, the fastest
    layouts (`--fastest`), what it needs of the host, and the paper's step beside it where the recipe's stage
    has one (`REPORTED_STEPS`)."""
    from nemo_lead.plan.check import hf_config_of
    from nemo_lead.plan.fixes import find_fixes
    from nemo_lead.plan.host import describe_host, host_needs
    from nemo_lead.plan.job import job_shape, plan_job
    from nemo_lead.plan.report import as_json, describe, layout_name, overrides, step_text
    from nemo_lead.plan.search import rank_layouts

    settings = job.config.plan.merged(cfg.plan)
    hf_config, divisible = hf_config_of(job.config.actor.model)
    memory, reserve = settings.gpu_memory_gib, settings.value("reserve_gib")
    shape = job_shape(job.config, job.kind, hf_config, gpus=gpus, settings=settings,
                      vocab_divisible_by=divisible, gpu=gpu, memory_gib=memory)
    plan = plan_job(shape, gpu, memory_gib=memory, reserve_gib=reserve)
    fixes = find_fixes(shape, gpu, memory_gib=memory, reserve_gib=reserve, limit=cfg.fixes)
    ranking = (rank_layouts(shape, gpu, memory_gib=memory, reserve_gib=reserve, limit=max(cfg.fastest, 1))
               if cfg.fastest or not plan.fits else None)
    first = ranking.fastest[0] if ranking is not None and ranking.fastest else None
    best = None if first is None else first.plan
    host = host_needs(plan, job.config, min(gpus, cfg.gpus_per_node), fastest=best,
                      fastest_name=None if first is None else f"{layout_name(best)} ({overrides(first.changes, job.prefix)})")
    lines = [describe(job.name, plan, fixes, job.prefix, ranking if cfg.fastest else None,
                      source=settings.mean_response_source), *describe_host(host)]
    paper = reported_step(recipe.stem if recipe is not None else None, job.name, gpu.name, gpus)
    if paper is not None:
        ours = plan if plan.fits else best
        estimate = f"{step_text(ours)} ({layout_name(ours)})" if ours is not None else "none (nothing fits)"
        lines.append(f"  the paper's step on {gpus} x {gpu.name.upper()}: ~{paper[0]:,.0f} s ({paper[1]}); "
                     f"this plan's estimate: {estimate}")
    data = {**as_json(job.name, plan, fixes, ranking if cfg.fastest else None, source=settings.mean_response_source),
            "host": host.as_json(),
            **({"reported_step_seconds": {"seconds": paper[0], "source": paper[1]}} if paper else {})}
    return EngineJobResult("\n".join(lines), data, host.stage_seconds, host.stage_seconds_all_at_max)


def _sum(values: list[Optional[float]]) -> Optional[float]:
    known = [v for v in values if v is not None]
    return round(sum(known)) if known else None


def total_text(times: list[tuple[str, Optional[float], Optional[float]]], results: list[dict[str, Any]]) -> str:
    """The recipe's time over its planned stages, at the stated means and with every response at max_tokens,
    naming the stages without a time; and the disk a stage folder needs."""
    timed = [(n, t, w) for n, t, w in times if t is not None]
    missing = [n for n, t, _ in times if t is None]
    disk = max((r.get("host", {}).get("disk_bytes") or 0) for r in results)
    text = (f"total: {sum(t for _, t, _ in timed) / 3600:,.1f} h of GPU-job time over {len(timed)} of {len(times)} "
            f"planned stages at the stated mean response lengths (every response at max_tokens: "
            f"{sum(w for _, _, w in timed) / 3600:,.1f} h)")
    if missing:
        text += f"; no time for {', '.join(missing)} (see each)"
    text += f"; disk for checkpoints: up to {disk / 2**30:,.0f} GiB per stage folder"
    return text + "\n" + stage_shares(timed)


def stage_shares(timed: list[tuple[str, float, float]]) -> str:
    """Each timed stage's hours and share of the total, at the stated lengths and with every response at
    max_tokens: "  by stage: distill 7.4 h (20%; 16.0 h all at max), ..." """
    total = sum(t for _, t, _ in timed) or 1.0
    return "  by stage: " + ", ".join(f"{n} {t / 3600:,.1f} h ({100 * t / total:.0f}%; {w / 3600:,.1f} h all at max)"
                                      for n, t, w in timed)


# ----------------------------------------------------------------------------- before `nemo-lead run` starts
def check_recipe(run: RunConfig, names: list[str], done: dict[str, dict]) -> int:
    """The plan of the stages about to run (on this machine's GPUs); 2 when one cannot fit (see
    `nemo_lead.plan.check`). Each stage's `plan` section applies, with the run's `plan.*` over it."""
    import torch

    from nemo_lead.plan.check import check_job, device_gpu, gpus_of_job, report_failures

    if not torch.cuda.is_available() or run.plan.check == "off":
        return 0
    failures, stop = [], False
    for job in recipe_jobs(run, names, done):
        settings = job.config.plan
        if settings.check == "off":
            continue
        gpu, memory = device_gpu(settings)
        failure = check_job(job.name, job.config, job.kind, gpus=gpus_of_job(job.config), gpu=gpu, memory_gib=memory,
                            settings=settings, prefix=job.prefix)
        if failure:
            failures.append(failure)
            stop = stop or settings.check != "warn"
    return report_failures("run", failures, "error" if stop else "warn")
