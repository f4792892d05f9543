"""From a `SubmitConfig` to the jobs to submit: which command each runs, on how many nodes and GPUs.

`nemo-lead submit` sits above the pipeline: it reads recipes with the pipeline's reader
(`nemo_lead.pipeline.recipe`) and stage kinds from its registry (`nemo_lead.pipeline.kinds`).

A recipe becomes one job per GPU stage, `nemo-lead run RECIPE --out OUT only=STAGE`, each sized by the
stage's `slurm:` mapping (distillation and evaluation rarely want the training's node count) unless the
command line says otherwise (`nemo_lead.launch.submit_config`: the order of the layers), in the recipe's
order, no `--time` beyond `max_time`; `nemo-lead submit` chains them with `afterok`. A stage that needs no
GPU (a problem selection: seconds) is no job on the GPU partition: it runs as one task at the start of the
next GPU job (`SlurmJob.before`), or with `host_stages=job` (or a `stage_slurm` entry) as a short job of its
own, one task without GPUs. Only what sizing needs is read from the
recipe here (stage names and `slurm:`, through `_base_` includes); `nemo-lead run` checks the rest when
the job starts.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

from nemo_lead.config.loading import ConfigError, as_overrides
from nemo_lead.launch.sbatch import SlurmJob
from nemo_lead.launch.submit_config import (
    DEFAULT_SIZE,
    SIZE_KEYS,
    WHERE_KEYS,
    SubmitConfig,
    check_size,
    time_seconds,
)
from nemo_lead.pipeline.kinds import KINDS
from nemo_lead.pipeline.recipe import find_recipe, read_recipe, recipes_dir


def find_recipe_file(spec: str) -> tuple[Path | None, str]:
    """A recipe given as a path, or by name in recipes/, and ""; else None and why (the nearest names)."""
    try:
        return find_recipe(spec), ""
    except ConfigError as e:
        return None, str(e)


# a stage of a kind that needs no GPU (problem selection, the demo's files) in a job of its own: one task
# without GPUs for a short while, unless the stage's `slurm:` or stage_slurm says otherwise
HOST_SIZE = {"nodes": 1, "gpus_per_node": 0, "tasks_per_node": 1, "time": "00:30:00"}


def recipe_stages(path: Path) -> dict[str, dict[str, Any]]:
    """Stage name -> its size: the `slurm:` mapping, in the recipe's order (read by the pipeline's recipe
    reader: `_base_` includes, stages refined by name, errors naming file and line); a stage of a kind that
    needs no GPU also has `host: True` (HOST_SIZE unless its `slurm:` says otherwise)."""
    stages = {}
    for spec in read_recipe(path).stages:
        try:
            check_size(spec.slurm, f"stages[{spec.name}].slurm.")
        except ValueError as e:
            raise ConfigError(f"{spec.location('slurm')}: {e}") from None
        kind = KINDS.get(spec.kind)
        stages[spec.name] = {**({"host": True} if kind is not None and not kind.needs_gpu else {}), **spec.slurm}
    return stages


def executable(cfg: SubmitConfig) -> list[str]:
    """How a task starts `nemo-lead`: `executable`, else `nemo-lead` (container) or this Python (bare)."""
    if cfg.executable:
        return shlex.split(cfg.executable)
    return ["nemo-lead"] if cfg.container_image else [sys.executable, "-m", "nemo_lead.cli"]


def _size(cfg: SubmitConfig, recipe: dict[str, Any] | None = None, stage: dict[str, Any] | None = None):
    """A job's size (SlurmJob keyword arguments) and where each value came from: DEFAULT_SIZE < the recipe
    stage's `slurm:` < the command line < `stage_slurm.NAME`."""
    size, source = dict(DEFAULT_SIZE), dict.fromkeys(DEFAULT_SIZE, "default")
    recipe = dict(recipe or {})
    where = {k: v for layer in (recipe, stage or {}) for k, v in layer.items() if k in WHERE_KEYS and v is not None}
    recipe = {k: v for k, v in recipe.items() if k not in WHERE_KEYS}
    stage = {k: v for k, v in (stage or {}).items() if k not in WHERE_KEYS}
    host = recipe.pop("host", False)  # needs no GPU: its size is HOST_SIZE, the recipe's and stage_slurm's only
    command_line = {} if host else {k: getattr(cfg, k) for k in SIZE_KEYS}
    layers = (({**HOST_SIZE, **recipe} if host else recipe, "recipe"), (command_line, "command line"),
              (stage, "stage_slurm"))
    for layer, name in layers:
        for k, v in (layer or {}).items():
            if v is not None:
                size[k], source[k] = v, name
    if size["tasks_per_node"] is None:
        size["tasks_per_node"], source["tasks_per_node"] = size["gpus_per_node"] or 1, "one per GPU"
    overridden = [f"{k} {v} (the recipe says {recipe[k]})" for k, v in size.items()
                  if recipe and recipe.get(k) is not None and source[k] != "recipe" and recipe[k] != v]
    capped = ""
    if cfg.max_time is not None and time_seconds(size["time"]) > time_seconds(cfg.max_time):
        capped = f" (capped from {size['time']} at max_time; the stage continues after a requeue)"
        size["time"] = cfg.max_time
    resources = (f"{size['nodes']} node(s) x {size['gpus_per_node']} GPU(s), {size['tasks_per_node']} task(s) per "
                 f"node, time {size['time']}{capped}")
    if where:
        resources += ", " + ", ".join(f"{k} {v}" for k, v in where.items())
    if overridden:
        resources += "; from the command line: " + ", ".join(overridden)
    return {**size, **where, "resources": resources}


def plan_jobs(cfg: SubmitConfig) -> tuple[list[SlurmJob], str, list[str]]:
    """The jobs in submission order, the absolute run folder, and the folders the container must see."""
    exe = executable(cfg)
    extra = as_overrides(cfg.job)
    if cfg.plan.check is not None and "plan" not in cfg.job:  # the jobs check the plan again when they start
        extra.append(f"plan.check={cfg.plan.check}")
    recipe, why = (None, "") if cfg.command not in (None, "run") else find_recipe_file(cfg.target or "")
    if cfg.command in (None, "run"):
        if recipe is None:
            raise ConfigError(f"target: {why} (in {recipes_dir()}); for a command's config file add "
                              "command=sft|rl|...")
        stages = recipe_stages(recipe)
        if cfg.command is None and not stages:
            raise ConfigError(f"{recipe} has no `stages:`; for a command's config file add command=sft|rl|...")
        out = os.path.abspath(cfg.out or os.path.join("runs", recipe.stem))
        # a file travels as its absolute path; a name is looked up in recipes/ of the job's own install
        recipe_arg = os.path.abspath(cfg.target) if Path(cfg.target).expanduser().is_file() else cfg.target
        needed = [out] + ([os.path.dirname(recipe_arg)] if os.path.isabs(recipe_arg) else [])
        unknown = [s for s in [*cfg.stages, *cfg.stage_slurm] if s not in stages]
        if unknown:
            raise ConfigError(f"{recipe} has no stage {unknown[0]!r}; stages: {', '.join(stages)}")
        base = [*exe, "run", recipe_arg, "--out", out]
        if cfg.command == "run" or not cfg.chain:
            return [SlurmJob(name="recipe", argv=tuple(base + extra), **_size(cfg))], out, needed
        chosen = [(n, s) for n, s in stages.items() if not cfg.stages or n in cfg.stages]
        plans: list[SlurmJob] = []
        waiting: list[tuple[str, tuple[str, ...]]] = []  # CPU-only stages that run at the start of the next GPU job
        for i, (name, slurm) in enumerate(chosen):
            argv = tuple([*base, f"only={name}", *extra])
            gpu_job_after = any(not s.get("host") for _, s in chosen[i + 1:])
            if slurm.get("host") and cfg.host_stages == "next" and name not in cfg.stage_slurm and gpu_job_after:
                waiting.append((name, argv))
                continue
            note = f"starts after job {plans[-1].name!r} succeeded (afterok)" if plans else ""
            if waiting:
                note += ("; " if note else "") + (f"runs {', '.join(n for n, _ in waiting)} first (no GPU: one task "
                                                  "each, seconds)")
            plans.append(SlurmJob(name=name, argv=argv, note=note, before=tuple(waiting),
                                 **_size(cfg, slurm, cfg.stage_slurm.get(name, {}))))
            waiting = []
        return plans, out, needed
    if cfg.stages or cfg.stage_slurm:
        raise ConfigError("stages / stage_slurm apply to recipes; this submits one command")
    if not cfg.out:
        raise ConfigError(f"out must name the run folder of `nemo-lead {cfg.command}` (--out DIR)")
    out = os.path.abspath(cfg.out)
    argv = [*exe, cfg.command]
    needed = [out]
    if cfg.target:
        if not Path(cfg.target).expanduser().is_file():
            raise ConfigError(f"target {cfg.target!r}: config file not found (the file given to "
                              f"`nemo-lead {cfg.command} --config`)")
        target = os.path.abspath(os.path.expanduser(cfg.target))
        argv += ["--config", target]
        needed.append(os.path.dirname(target))
    argv.append(f"out={out}")
    return [SlurmJob(name=cfg.command, argv=tuple(argv + extra), **_size(cfg))], out, needed
