"""`nemo-lead plan`: the memory and time plan of a recipe's SFT / RL stages, or of one command's config, on
GPUs that need not be there; and the same plan checked before `nemo-lead run` starts its stages.

    nemo-lead plan lead-14b --stage stage1 --gpus 8 --gpu h100 paths.base_model=r1-distill-qwen-14b
    nemo-lead plan my-rl.yaml --command rl --gpus 16 --gpu-memory-gib 80 job.actor.tp=4 --json plan.json
    nemo-lead plan --command rl --gpus 8 --gpu h200 job.actor.model=r1-distill-qwen-14b job.rollout.max_tokens=14336

A recipe is read the way `nemo-lead run` reads it (`RunConfig`, `resolve_stage`: `paths.*` and `stages.*`
overrides, the kinds' defaults), so its stages are planned with exactly their settings. A stage whose model
is an earlier stage's checkpoint gets that stage's model (the shape does not change in training); the model
itself may be a HF folder (only its config.json is read), a checkpoint or a conf/model preset. The numbers:
`nemo_lead.plan` (per GPU and phase, what is left, the ranked fixes, the step time, and the layouts that fit
ranked by step time: `nemo_lead.plan.search`, `--fastest N` of them, 0 for none). `--json FILE` writes
them: one job's plan as an object with `layout`, `fits`, `gpu_memory_bytes`, `per_gpu_bytes` per phase,
`ranking`, ...; several stages as {"stages": [...], "fits": all of them}.
"""

from __future__ import annotations

import json
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from nemo_lead.config import ConfigError, load_config
from nemo_lead.plan.settings import PlanSettings

from .config import RunConfig, load_recipe, resolve_stage
from .kinds import KINDS, PLANNED_KINDS, schema
from .preflight import recipe_conflicts, report
from .recipe import find_recipe

RL_ONLY_KEYS = {"rollout", "engine", "lead", "prompts_per_step", "validation", "max_rounds", "ppo_epochs",
                "minibatches", "old_logprobs", "answer_region", "verify_workers", "verify_timeout_s", "log_rollouts"}
SFT_ONLY_KEYS = {"global_batch", "epochs", "val_every"}


@dataclass
class PlanConfig:
    """`nemo-lead plan TARGET --gpus N [--gpu NAME | --gpu-memory-gib G] [--stage NAME] [--json FILE] ...`."""

    target: Optional[str] = None  # a recipe (file or name in recipes/), or a config file of `command`
    command: Optional[str] = None  # sft | rl: what a config-file target configures (None: from its keys)
    stage: Optional[str] = None  # a recipe's SFT / RL stage (None: all of them)
    gpus: Optional[int] = None  # GPUs the job runs on (tp x pp x dp)
    gpus_per_node: int = 8  # for the host side: ranks (one per GPU) on one node
    json: Optional[str] = None  # also write the plan to this JSON file
    fixes: int = 5  # ranked changes listed when a job does not fit
    fastest: int = 5  # the fastest layouts that fit, listed with their step times (nemo_lead.plan.search)
    plan: PlanSettings = field(default_factory=PlanSettings)  # gpu, gpu_memory_gib, reserve_gib, prompt_tokens, ...
    paths: dict[str, Any] = field(default_factory=dict)  # a recipe's paths (paths.base_model=DIR)
    stages: dict[str, Any] = field(default_factory=dict)  # a recipe's stage settings (stages.NAME.KEY=VALUE)
    job: dict[str, Any] = field(default_factory=dict)  # a command config's settings (job.actor.tp=4)

    def __post_init__(self) -> None:
        if self.gpus is None or self.gpus < 1:
            raise ValueError("gpus must be given: the GPUs the job runs on (--gpus N)")
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


def recipe_jobs(run: RunConfig, names: list[str] | None = None, done: dict[str, dict] | None = None) -> list[Job]:
    """The recipe's SFT / RL stages (`names`: only these), resolved. An earlier stage's outputs are the
    finished ones in `done`; an unfinished SFT / RL stage's checkpoint stands for its model (same shape)."""
    recipe = load_recipe(run)
    outputs: dict[str, dict[str, Any]] = {}
    jobs = []
    for spec in recipe.stages:
        if done and spec.name in done:
            outputs[spec.name] = done[spec.name]
            stage = resolve_stage(spec, recipe, run, outputs) if spec.kind in PLANNED_KINDS else None
        else:
            outputs[spec.name] = {o: f"<stage {spec.name}: {o}>" for o in KINDS[spec.kind].outputs}
            stage = resolve_stage(spec, recipe, run, outputs) if spec.kind in PLANNED_KINDS else None
            if stage is not None:
                outputs[spec.name]["checkpoint"] = stage.config.actor.model
        if stage is not None and (names is None or spec.name in names):
            jobs.append(Job(spec.name, spec.kind, stage.config, f"stages.{spec.name}."))
    return jobs


def job_overrides(job: dict[str, Any], prefix: str = "") -> list[str]:
    """{"actor": {"tp": 4}} -> ["actor.tp=4"]: key=value lines the config loader reads back as the same values
    (JSON is YAML)."""
    out: list[str] = []
    for key, value in job.items():
        out += (job_overrides(value, f"{prefix}{key}.") if isinstance(value, dict) and value
                else [f"{prefix}{key}={json.dumps(value)}"])
    return out


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
        config = load_config(schema(kind), files, job_overrides(cfg.job))
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


def jobs_of(cfg: PlanConfig) -> list[Job]:
    recipe = _recipe_file(cfg.target) if cfg.command is None else None
    if recipe is not None:
        if cfg.job:
            raise ConfigError("job.* overrides apply to a command's config file; a recipe takes paths.* and stages.*")
        run = RunConfig(recipe=str(recipe), paths=dict(cfg.paths), stages=dict(cfg.stages))
        jobs = recipe_jobs(run, [cfg.stage] if cfg.stage else None)
        if cfg.stage and not jobs:
            raise ConfigError(f"{recipe.name} has no SFT / RL stage {cfg.stage!r}")
        return jobs
    if cfg.paths or cfg.stages or cfg.stage:
        raise ConfigError("paths.*, stages.* and --stage apply to recipes; a config file takes job.* overrides")
    return [command_job(cfg)]


# ----------------------------------------------------------------------------- the command
def _gpu(settings: PlanSettings):
    from nemo_lead.plan.timing import gpu_named

    return gpu_named(settings.gpu or "h100")


def run_plan(cfg: PlanConfig) -> int:
    """`nemo-lead plan`: print each job's plan (and write --json); exit 0 when all fit, 1 when one does not."""
    from nemo_lead.plan.check import hf_config_of
    from nemo_lead.plan.fixes import find_fixes
    from nemo_lead.plan.host import describe_host, host_needs
    from nemo_lead.plan.job import job_shape, plan_job
    from nemo_lead.plan.report import as_json, describe
    from nemo_lead.plan.search import rank_layouts

    try:
        jobs = jobs_of(cfg)
        recipe = _recipe_file(cfg.target) if cfg.command is None else None
        if recipe is not None:
            run = RunConfig(recipe=str(recipe), paths=dict(cfg.paths), stages=dict(cfg.stages))
            found = recipe_conflicts(run, world={j.name: cfg.gpus for j in jobs}, names=[cfg.stage] if cfg.stage else None,
                                     missing_ok=True)
            if report("plan", *found, sys.stderr):
                return 2
        gpu = _gpu(cfg.plan)
        results, texts = [], []
        for job in jobs:
            settings = job.config.plan.merged(cfg.plan)
            hf_config, divisible = hf_config_of(job.config.actor.model)
            memory, reserve = settings.gpu_memory_gib, settings.value("reserve_gib")
            shape = job_shape(job.config, job.kind, hf_config, gpus=cfg.gpus, settings=settings,
                              vocab_divisible_by=divisible, gpu=gpu, memory_gib=memory)
            plan = plan_job(shape, gpu, memory_gib=memory, reserve_gib=reserve)
            fixes = find_fixes(shape, gpu, memory_gib=memory, reserve_gib=reserve, limit=cfg.fixes)
            ranking = (rank_layouts(shape, gpu, memory_gib=memory, reserve_gib=reserve, limit=cfg.fastest)
                       if cfg.fastest else None)
            host = host_needs(plan, job.config, min(cfg.gpus, cfg.gpus_per_node))
            texts.append("\n".join([describe(job.name, plan, fixes, job.prefix, ranking), *describe_host(host)]))
            results.append({**as_json(job.name, plan, fixes, ranking), "host": host.as_json()})
    except (ConfigError, ValueError, OSError) as e:
        print(f"nemo-lead plan: {e}", file=sys.stderr)
        return 2
    if not cfg.plan.gpu:
        texts.insert(0, "(no --gpu given: the step times use the H100's figures)")
    timed = [r["host"]["stage_seconds"] for r in results if r["host"]["stage_seconds"] is not None]
    if len(results) > 1:
        texts.append(f"total: {sum(timed) / 3600:,.1f} h of GPU-job time over {len(timed)} of {len(results)} "
                     "planned stages (the others' steps are set by their data)"
                     + f"; disk for checkpoints: up to {max(r['host']['disk_bytes'] or 0 for r in results) / 2**30:,.0f}"
                     " GiB per stage folder")
    print("\n\n".join(texts))
    if cfg.json:
        data = results[0] if len(results) == 1 else {"stages": results, "fits": all(r["fits"] for r in results),
                                                     "gpus": cfg.gpus}
        Path(cfg.json).write_text(json.dumps(data, indent=2) + "\n")
    return 0 if all(r["fits"] for r in results) else 1


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
