"""The stage kinds of a recipe, one registry entry each: what a stage of that kind reads, writes and runs
(the table in docs/recipes.md is `kinds_table()` of this registry).

A new kind is one entry here and its run function (with its schema, when it brings settings of its own):
everything kind-specific hangs on the entry, and no code outside this module branches on a kind's name. What
reads it: the recipe checks (`config.py`: the keys the pipeline sets, where `out` points, the kind's own
keys, whether `nemo-lead run`'s `engine.*` and `wandb.*` apply), the preflight (`preflight.py`: the kind's
`check`, the models it reads by `model_key`), the runner (what the summary takes from it, its own keys that
name inputs), `nemo-lead plan` (training kinds are planned as jobs, generating kinds on the engine model),
`nemo-lead submit`'s sizing (host or GPU stage, a training job's plan or one engine call) and the docs'
table (`kinds_table`, in docs/recipes.md). Schemas, run functions, checks and settings hooks are
"module:attribute" strings, imported when used, so reading a recipe imports no training code; a run
function may also be given as a callable (tests).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

SUMMARY_PARTS = ("", "curve", "rows")  # what a stage gives the run's summary: nothing, a validation curve, table rows


@dataclass(frozen=True)
class StageKind:
    name: str
    schema: str  # "module:Class" of the stage's settings
    outputs: tuple[str, ...]  # what later stages may refer to
    needs_gpu: bool  # False: `nemo-lead submit` runs it as one task without GPUs
    run: str | Callable[[Any], dict[str, str]]  # "module:function" (or the function): Stage -> its outputs
    about: str = ""  # one line for the docs' table
    pipeline_keys: tuple[str, ...] = ()  # keys the pipeline sets: a recipe that sets one is told so
    out: str | None = None  # `out` of the stage's command: this sub-folder of OUT/stages/NAME ("" = itself)
    settings_hook: str | None = None  # "module:function" (spec, items) -> (items, extras) for the kind's own keys
    hidden_keys: tuple[str, ...] = ()  # settings the pipeline fills in, left out of what is shown and fingerprinted
    # a training job: `nemo-lead plan` sizes it (`nemo_lead.plan.job`), its `plan` section takes `nemo-lead run`'s,
    # and its `checkpoint` has the shape of the model it trains (`model_key`)
    planned: bool = False
    summary: str = ""  # one of SUMMARY_PARTS
    # it only generates with its models (`nemo_lead.plan.engine_stage`: `nemo-lead plan` times it, `nemo-lead
    # submit` sizes its job from one engine call)
    generates: bool = False
    engine_keys: bool = False  # `nemo-lead run`'s `engine.*` apply to it (it runs a rollout engine)
    tracked: bool = False  # `nemo-lead run`'s `wandb.*` apply to it (it logs scalars)
    # the dotted key of the model(s) it reads: a setting of its schema, or its own key (`extras`) holding
    # {row: model}; the preflight checks them, the plan and submit read their shapes
    model_key: str | None = None
    # "module:function" (or the function) (findings, stage, ranks): its preflight checks (`preflight.py`)
    check: str | Callable[[Any, Any, int | None], None] | None = None
    input_keys: tuple[str, ...] = ()  # its own keys (`extras`) whose values name input files or folders

    def __post_init__(self) -> None:
        if self.summary not in SUMMARY_PARTS:
            raise ValueError(f"stage kind {self.name}: summary must be one of {SUMMARY_PARTS}, got {self.summary!r}")


def _attr(ref: str) -> Any:
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


KINDS: dict[str, StageKind] = {k.name: k for k in (
    StageKind("prepare", "nemo_lead.pipeline.config:PrepareConfig",
              ("model", "sft_traces", "rl_stage1", "rl_stage2_extra", "heldout"), False,
              "nemo_lead.pipeline.stages:run_prepare", "the embedded demo task's files and its tiny model (`seed`)"),
    StageKind("select", "nemo_lead.pipeline.config:SelectConfig", ("data",), False,
              "nemo_lead.pipeline.stages:run_select", ("a problem set: `problems` filtered by `difficulty` (`\">= 2.5\"`) or by the accuracy measured in `from_run` "
              "(`accuracy: \"<= 0.75\"`, summed over every visit in its problem_stats.jsonl), plus `extra`, deduplicated; `limit`"),
              check="nemo_lead.pipeline.preflight:check_select"),
    StageKind("distill", "nemo_lead.eval.config:EvalConfig", ("traces", "samples"), True,
              "nemo_lead.pipeline.stages:run_distill", ("a teacher's verified traces: `nemo-lead eval`'s keys (`model` = the teacher, `data` = the problems) + "
              "`keep: first|shortest` (the correct sample with the lowest index, or the fewest tokens; `first` samples in "
                                                 "rounds: sample 0, then the rest only for unsolved problems)"),
              pipeline_keys=("out",), out="samples", settings_hook="nemo_lead.pipeline.config:distill_settings",
              generates=True, engine_keys=True, model_key="model", check="nemo_lead.pipeline.preflight:check_generation"),
    StageKind("sft", "nemo_lead.training.sft.config:SFTConfig", ("run", "checkpoint"), True,
              "nemo_lead.pipeline.stages:run_sft_stage", "`nemo-lead sft` (its keys and defaults)", pipeline_keys=("out",), out="",
              planned=True, tracked=True, model_key="actor.model", check="nemo_lead.pipeline.preflight:check_sft"),
    StageKind("rl", "nemo_lead.training.rl.config:RLConfig", ("run", "checkpoint"), True,
              "nemo_lead.pipeline.stages:run_rl_stage", "`nemo-lead rl` (its keys and defaults)", pipeline_keys=("out",), out="",
              planned=True, summary="curve", engine_keys=True, tracked=True, model_key="actor.model",
              check="nemo_lead.pipeline.preflight:check_rl"),
    StageKind("eval", "nemo_lead.eval.config:EvalConfig", ("folder",), True,
              "nemo_lead.pipeline.stages:run_eval_stage", "`nemo-lead eval` of every row's model: its keys + `models: {row name: model}`",
              pipeline_keys=("out", "model"), settings_hook="nemo_lead.pipeline.config:eval_settings",
              hidden_keys=("model",), summary="rows", generates=True, engine_keys=True, tracked=True, model_key="models",
              check="nemo_lead.pipeline.preflight:check_generation", input_keys=("models",)),
)}
PLANNED_KINDS = tuple(name for name, kind in KINDS.items() if kind.planned)  # what `nemo-lead plan` sizes as jobs
GENERATING_KINDS = tuple(name for name, kind in KINDS.items() if kind.generates)  # planned on the engine model


def schema(kind: str) -> type:
    """The settings class of stages of `kind`."""
    return _attr(KINDS[kind].schema)


def settings_hook(kind: str) -> Callable | None:
    """The kind's handler of its own keys (distill's `keep`, eval's `models`), or None."""
    hook = KINDS[kind].settings_hook
    return _attr(hook) if hook else None


def preflight_check(kind: str) -> Callable | None:
    """The kind's preflight checks (findings, stage, ranks), or None."""
    check = KINDS[kind].check
    return _attr(check) if isinstance(check, str) else check


def models_of(kind: str, config: Any, extras: dict[str, Any]) -> dict[str, str]:
    """{dotted key: model} of the models a stage of `kind` reads (`model_key`): its setting (`actor.model`,
    `model`), or each row of its own key (`models.ROW`); empty for a kind that reads none."""
    key = KINDS[kind].model_key
    if key is None:
        return {}
    if key in extras:
        return {f"{key}.{row}": model for row, model in extras[key].items()}
    value = config
    for part in key.split("."):
        value = getattr(value, part)
    return {key: value}


def kinds_table() -> str:
    """The Markdown table of stage kinds in docs/recipes.md (a test keeps that file in step with KINDS)."""
    lines = ["| kind | what it does, its keys | schema | outputs (`${stage:NAME.OUTPUT}`) | GPUs |",
             "| --- | --- | --- | --- | --- |"]
    for k in KINDS.values():
        about = k.about.replace("|", "\\|")
        lines.append(f"| `{k.name}` | {about} | `{k.schema.split(':')[1]}` | "
                     f"{', '.join(f'`{o}`' for o in k.outputs)} | {'yes' if k.needs_gpu else 'no'} |")
    return "\n".join(lines) + "\n"


KINDS_TABLE_BEGIN = "<!-- generated by nemo_lead.pipeline.kinds.kinds_table: do not edit by hand -->"
KINDS_TABLE_END = "<!-- end of the generated table -->"


def with_kinds_table(text: str) -> str:
    """`text` (docs/recipes.md) with the table between its markers replaced by `kinds_table()`."""
    head, sep, rest = text.partition(KINDS_TABLE_BEGIN)
    _, sep2, tail = rest.partition(KINDS_TABLE_END)
    if not sep or not sep2:
        raise ValueError(f"the kinds table's markers are missing: {KINDS_TABLE_BEGIN} ... {KINDS_TABLE_END}")
    return f"{head}{KINDS_TABLE_BEGIN}\n{kinds_table()}{KINDS_TABLE_END}{tail}"


def run_function(kind: str) -> Callable[[Any], dict[str, str]]:
    """What runs a stage of `kind` (a Stage -> its outputs)."""
    run = KINDS[kind].run
    return _attr(run) if isinstance(run, str) else run
