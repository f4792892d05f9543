"""The stage kinds of a recipe, one registry entry each: what a stage of that kind reads, writes and runs.

    kind     schema (its keys)                            outputs (`${stage:NAME.OUTPUT}`)     GPU  runs
    prepare  PrepareConfig: the demo task's files, model  model, sft_traces, rl_stage1, ...      no   stages.run_prepare
    select   SelectConfig: problems filtered / combined   data                                   no   stages.run_select
    distill  EvalConfig (+ keep): a teacher's traces      traces, samples                        yes  stages.run_distill
    sft      SFTConfig (`nemo-lead sft`)                  run, checkpoint                        yes  stages.run_sft_stage
    rl       RLConfig (`nemo-lead rl`)                    run, checkpoint                        yes  stages.run_rl_stage
    eval     EvalConfig (+ models): `nemo-lead eval`      folder                                 yes  stages.run_eval_stage

A new kind is one entry here and its run function in `stages.py`; the recipe checks (`config.py`), the
runner, `nemo-lead submit`'s sizing (kinds that need no GPU run as one task without GPUs) and the docs'
table read this registry. Schemas and run functions are "module:attribute" strings, imported when used,
so reading a recipe imports no training code; a run function may also be given as a callable (tests).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class StageKind:
    name: str
    schema: str  # "module:Class" of the stage's settings
    outputs: tuple[str, ...]  # what later stages may refer to
    needs_gpu: bool  # False: `nemo-lead submit` runs it as one task without GPUs
    run: str | Callable[[Any], dict[str, str]]  # "module:function" (or the function): Stage -> its outputs
    about: str = ""


def _attr(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


KINDS: dict[str, StageKind] = {k.name: k for k in (
    StageKind("prepare", "nemo_lead.pipeline.config:PrepareConfig",
              ("model", "sft_traces", "rl_stage1", "rl_stage2_extra", "heldout"), False,
              "nemo_lead.pipeline.stages:run_prepare", "the embedded demo task's files and its tiny model"),
    StageKind("select", "nemo_lead.pipeline.config:SelectConfig", ("data",), False,
              "nemo_lead.pipeline.stages:run_select", "a problem set filtered by difficulty or rollout accuracy"),
    StageKind("distill", "nemo_lead.eval.config:EvalConfig", ("traces", "samples"), True,
              "nemo_lead.pipeline.stages:run_distill", "a teacher's verified traces (nemo-lead eval's keys + keep)"),
    StageKind("sft", "nemo_lead.training.sft_config:SFTConfig", ("run", "checkpoint"), True,
              "nemo_lead.pipeline.stages:run_sft_stage", "nemo-lead sft"),
    StageKind("rl", "nemo_lead.training.rl_config:RLConfig", ("run", "checkpoint"), True,
              "nemo_lead.pipeline.stages:run_rl_stage", "nemo-lead rl"),
    StageKind("eval", "nemo_lead.eval.config:EvalConfig", ("folder",), True,
              "nemo_lead.pipeline.stages:run_eval_stage", "nemo-lead eval of every row's model (+ models)"),
)}


def schema(kind: str) -> type:
    """The settings class of stages of `kind`."""
    return _attr(KINDS[kind].schema)


def run_function(kind: str) -> Callable[[Any], dict[str, str]]:
    """What runs a stage of `kind` (a Stage -> its outputs)."""
    run = KINDS[kind].run
    return _attr(run) if isinstance(run, str) else run
