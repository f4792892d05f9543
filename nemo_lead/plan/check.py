"""The plan checked before a job starts on GPUs (`nemo-lead sft / rl`, and per stage `nemo-lead run / submit`).

    status = check_before_start(cfg, "rl")        # 0: go on; 2: the layout cannot fit (printed why)

A layout that cannot fit fails at once, before any rank builds anything, with the components over the
GPU's memory and the ranked settings that would make it fit (`plan.check=warn` prints the same and goes
on; `plan.check=off` skips it). Jobs on CPUs are not checked: their memory is the host's.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from nemo_lead.models.hf_config import arch_from_hf, read_hf_config
from nemo_lead.parallel import detect_launch
from nemo_lead.plan.engine_kinds import AUTO_CANDIDATES, AUTO_KIND, ENGINE_KINDS
from nemo_lead.plan.engine_stage import plan_auto_engine, stage_shape, with_pool
from nemo_lead.plan.fixes import find_fixes
from nemo_lead.plan.job import GIB, engine_options, job_shape, plan_job
from nemo_lead.plan.report import describe
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.plan.timing import GPU, gpu_named


class PlanError(ValueError):
    """A job that does not fit its GPUs (the message is the plan, with what to change)."""


def hf_config_of(model: str) -> tuple[dict[str, Any], int]:
    """(HF config, vocab_divisible_by) of `actor.model`: a nemo-lead checkpoint (its meta.json), a HF folder
    or a conf/model preset (no weights are read)."""
    meta = Path(model) / "meta.json"
    if meta.is_file():
        data = json.loads(meta.read_text())
        return data["hf_config"], int(data.get("vocab_divisible_by", 128))
    return read_hf_config(model), 128


def gpus_of_job(cfg: Any) -> int:
    """GPUs the job will run on: the launcher's world size, or tp x pp ranks started here."""
    world = detect_launch(os.environ).world_size
    return world if world > 1 else cfg.actor.tp * cfg.actor.pp


def device_gpu(settings: PlanSettings) -> tuple[GPU, float]:
    """The GPU kind (`plan.gpu`, else this machine's) and its GiB (`plan.gpu_memory_gib`, else this machine's)."""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    try:
        gpu = gpu_named(settings.gpu or props.name)
    except ValueError:
        gpu = gpu_named("h100")  # unknown kinds are timed as an H100; the memory is this device's
    memory = settings.gpu_memory_gib if settings.gpu_memory_gib is not None else props.total_memory / GIB
    return gpu, memory


def check_job(name: str, cfg: Any, kind: str, *, gpus: int, gpu: GPU, memory_gib: float | None,
              settings: PlanSettings, prefix: str = "") -> str | None:
    """None when `cfg` fits; else the plan's text naming what does not fit and the ranked fixes."""
    hf_config, divisible = hf_config_of(cfg.actor.model)
    shape = job_shape(cfg, kind, hf_config, gpus=gpus, settings=settings, vocab_divisible_by=divisible, gpu=gpu,
                      memory_gib=memory_gib)
    reserve = settings.value("reserve_gib")
    plan = plan_job(shape, gpu, memory_gib=memory_gib, reserve_gib=reserve)
    if plan.fits:
        return None
    return describe(name, plan, find_fixes(shape, gpu, memory_gib=memory_gib, reserve_gib=reserve), prefix)


def report_failures(command: str, failures: list[str], mode: str) -> int:
    """Print the plans that do not fit; 2 when they stop the job (`plan.check=error`), else 0."""
    if not failures:
        return 0
    stop = mode != "warn"
    head = (f"nemo-lead {command}: the plan does not fit the GPUs"
            + (" (plan.check=warn: starting anyway)" if not stop else "; change the settings below, or "
               "plan.check=warn to start anyway (nemo-lead plan shows the whole plan)"))
    print(head + "\n" + "\n\n".join(failures), file=sys.stderr, flush=True)
    return 2 if stop else 0


def check_before_start(cfg: Any, kind: str) -> int:
    """`nemo-lead sft` / `rl`: the plan of `cfg` on this machine's GPUs (see the module docstring)."""
    settings = getattr(cfg, "plan", None) or PlanSettings()
    if settings.check == "off" or not torch.cuda.is_available():
        return 0
    gpu, memory = device_gpu(settings)
    failure = check_job(kind, cfg, kind, gpus=gpus_of_job(cfg), gpu=gpu, memory_gib=memory, settings=settings)
    return report_failures(kind, [failure] if failure else [], settings.check or "error")


def _resolve_kind(cfg: Any, command: str, decide: Callable[[PlanSettings, GPU, float], tuple[str, str, Any]]) -> Any:
    """engine.kind=auto made concrete, printed once (rank 0): `decide(settings, gpu, memory_gib)` -> (kind, why,
    engine config) on a machine with a GPU where the libraries of auto's candidates are installed (vLLM); the
    last candidate (megatron) elsewhere. `cfg.engine` is replaced."""
    e = cfg.engine
    if e.kind != AUTO_KIND:
        return cfg
    missing = [k.library for k in AUTO_CANDIDATES if k.auto_module and importlib.util.find_spec(k.auto_module) is None]
    chosen = AUTO_CANDIDATES[-1].name
    why = "no GPU here" if not torch.cuda.is_available() else f"{' / '.join(missing)} is not installed"
    if torch.cuda.is_available() and not missing:
        settings = getattr(cfg, "plan", None) or PlanSettings()
        chosen, why, e = decide(settings, *device_gpu(settings))
    cfg.engine = dataclasses.replace(e, kind=chosen)
    if detect_launch(os.environ).rank == 0:
        print(f"nemo-lead {command}: engine.kind=auto -> {chosen} ({why})", file=sys.stderr, flush=True)
    return cfg


def resolve_engine_kind_auto(cfg: Any, kind: str = "rl") -> Any:
    """`cfg` with engine.kind=auto made concrete before an rl job starts, printed once: on a machine with a GPU
    where vLLM is installed, the faster that fits of auto's candidates (vllm, megatron) in the plan
    (`job.auto_engine_kind`); elsewhere megatron."""
    def decide(settings: PlanSettings, gpu: GPU, memory: float) -> tuple[str, str, Any]:
        e = cfg.engine
        hf_config, divisible = hf_config_of(cfg.actor.model)
        shape = job_shape(cfg, kind, hf_config, gpus=gpus_of_job(cfg), settings=settings, vocab_divisible_by=divisible,
                          gpu=gpu, memory_gib=memory)
        why = "the plan's faster that fits on this GPU"
        if ENGINE_KINDS[shape.engine].pool == "whole" and shape.kv_cache_gib != e.kv_cache_gib:
            why += f"; its KV pool {shape.kv_cache_gib} GiB, the largest under engine.kv_cache_gib={e.kv_cache_gib} that fits"
            e = dataclasses.replace(e, kv_cache_gib=shape.kv_cache_gib)
        return shape.engine, why, e

    return _resolve_kind(cfg, kind, decide)


def resolve_stage_engine_kind(cfg: Any, problems: Callable[[], tuple[int, ...]], command: str = "eval") -> Any:
    """`cfg` (an EvalConfig: `nemo-lead eval`, a distill / eval stage; a copy is returned) with engine.kind=auto
    made concrete before the job starts, printed once: on a machine with a GPU where vLLM is installed, the
    faster that fits of auto's candidates in the plan (`engine_stage.plan_auto_engine`; a pool allocated whole,
    vllm's, the largest under engine.kv_cache_gib that fits), else megatron. `problems`: the datasets' sizes (read only when needed)."""
    def decide(settings: PlanSettings, gpu: GPU, memory: float) -> tuple[str, str, Any]:
        e = cfg.engine
        hf_config, divisible = hf_config_of(cfg.model)
        world = detect_launch(os.environ).world_size
        shape = stage_shape(cfg, dataclasses.replace(settings, gpu_memory_gib=memory), gpus=max(world, cfg.tp * cfg.pp),
                            problems=problems(), models=1, divisible=divisible)
        plan, plans = plan_auto_engine(arch_from_hf(hf_config), gpu, shape, AUTO_KIND)
        times = ", ".join(f"{k} {'does not fit' if q.seconds is None else f'{q.seconds / 3600:,.1f} h'}"
                          for k, q in plans.items())
        why = f"the plan's faster that fits on this GPU: {times}"
        if ENGINE_KINDS[plan.engine].pool == "whole" and plan.fits:
            fitted = round(with_pool(shape, plan).kv_cache_gib, 1)
            if e.kv_cache_gib is not None and fitted < e.kv_cache_gib:
                why += f"; its KV pool {fitted} GiB, the largest under engine.kv_cache_gib={e.kv_cache_gib} that fits"
                e = dataclasses.replace(e, kv_cache_gib=fitted)
        return plan.engine, why, e

    return _resolve_kind(dataclasses.replace(cfg), command, decide)


def resolve_engine_auto(cfg: Any, kind: str = "rl") -> Any:
    """`cfg` with engine.tp / engine.pp `auto` replaced by the layout chosen for this job (printed once):
    on GPUs the plan's fastest that fits of the engine at the actor's layout and the engine replicas at one
    stage and a TP dividing actor.tp (`nemo_lead.plan.job.auto_engine_layout`); without a GPU, the split
    layout, a `fixed` engine (trtllm) or an actor at TP1 x PP1, the actor's (a CPU job's memory is the host's: a
    copy is asked for explicitly), or the first layout the keys set allow when that is not the actor's."""
    cfg = resolve_engine_kind_auto(cfg, kind)
    e = cfg.engine
    if ENGINE_KINDS[e.kind].layout == "copies":  # one layout: the actor's TP at one stage (`replica_layout`)
        return cfg
    if "auto" not in (str(e.tp), str(e.pp)):
        return cfg
    settings = getattr(cfg, "plan", None) or PlanSettings()
    options = engine_options(e, tp=cfg.actor.tp, pp=cfg.actor.pp, generator_ranks=cfg.rollout.generator_ranks)
    shape, (own, engine_tp) = None, options[0]
    if len(options) > 1 and torch.cuda.is_available():
        gpu, memory = device_gpu(settings)
        hf_config, divisible = hf_config_of(cfg.actor.model)
        shape = job_shape(cfg, kind, hf_config, gpus=gpus_of_job(cfg), settings=settings,
                          vocab_divisible_by=divisible, gpu=gpu, memory_gib=memory)
        own, engine_tp = shape.engine_tp1, shape.engine_tp
    tp, pp = (str(engine_tp), "1") if own else ("actor", "actor")
    cfg.engine = dataclasses.replace(e, tp=tp if str(e.tp) == "auto" else e.tp, pp=pp if str(e.pp) == "auto" else e.pp)
    if detect_launch(os.environ).rank == 0 and (cfg.actor.tp, cfg.actor.pp) != (1, 1):
        why = ("the plan's fastest that fits on this GPU" if shape is not None else
               "the only layout auto takes here" if len(options) == 1 else
               "no GPU: the actor's layout" if not own else "no GPU: the first layout the keys set allow")
        print(f"nemo-lead {kind}: engine.tp={e.tp} engine.pp={e.pp} -> engine.tp={cfg.engine.tp} "
              f"engine.pp={cfg.engine.pp} ({why})", file=sys.stderr, flush=True)
    return cfg
