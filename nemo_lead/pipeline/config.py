"""`RunConfig` (what `nemo-lead run` and `nemo-lead demo` read) and each stage's settings, resolved.

Stage kinds, their keys and outputs: `nemo_lead.pipeline.kinds` (a recipe stage is `{name, kind, slurm?,
<the kind's keys>}`).

The pipeline owns where things go: `out` of sft / rl is OUT/stages/NAME, each eval row's folder is
OUT/stages/NAME/<row>; a recipe that sets `out` (or `model` of an eval stage) is told so.

Each stage's settings are checked by loading them through `nemo_lead.config.loading.load_config` with the kind's
schema and defaults, so an unknown key or a bad value fails naming the recipe file, the line and the key
(or the command line, for `stages.NAME.KEY=VALUE` overrides).
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import yaml

from nemo_lead.config.dotted import flatten
from nemo_lead.config.loading import ConfigError, load_config, to_yaml
from nemo_lead.data.filters import parse_bound
from nemo_lead.pipeline.kinds import KINDS, schema, settings_hook
from nemo_lead.pipeline.recipe import Recipe, Ref, StageSpec, find_recipe, read_recipe, substitute
from nemo_lead.plan.settings import PlanSettings
from nemo_lead.runtime.tracking import WandbSettings

KEEP_RULES = ("first", "shortest")


@dataclass
class RunConfig:
    """`nemo-lead run RECIPE [--out DIR] [only=STAGE] [paths.KEY=...] [stages.NAME.KEY=...]`."""

    recipe: Optional[str] = None  # a recipe file, or the name of one in recipes/ (demo, lead-14b, ...)
    out: Optional[str] = None  # the run folder; None: runs/<recipe name>
    only: Optional[str] = None  # run just this stage (the stages it reads must be finished): one SLURM job each
    dry_run: bool = False  # check every stage and print the plan; run nothing
    paths: dict[str, Any] = field(default_factory=dict)  # overrides of the recipe's `paths`
    stages: dict[str, Any] = field(default_factory=dict)  # NAME: {key: value} overrides of a stage's settings
    plan: PlanSettings = field(default_factory=PlanSettings)  # laid over each SFT / RL stage's `plan` section
    # laid over each SFT / RL / eval stage's `wandb` section; stages are grouped under the run folder's name
    wandb: WandbSettings = field(default_factory=WandbSettings)
    # laid over each stage that generates (rl, eval, distill): its `engine` keys, after the recipe's and before
    # a stage's own stages.NAME.engine.* (`nemo-lead plan lead-14b engine.kind=vllm`)
    engine: dict[str, Any] = field(default_factory=dict)
    # Filled from the recipe when the configuration is built (what --print-config shows): each stage's kind
    # and complete settings, references to outputs of earlier stages shown as <stage NAME: OUTPUT>.
    resolved: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.recipe:
            raise ValueError("recipe must name a recipe file or one of recipes/ (nemo-lead run RECIPE)")
        if self.resolved:
            raise ValueError("`resolved` is filled from the recipe; set stage keys with stages.NAME.KEY=VALUE")
        recipe = load_recipe(self)
        if self.out is None:
            self.out = str(Path("runs") / recipe.path.stem)
        if self.only is not None:
            recipe.stage(self.only)
        for spec in recipe.stages:
            stage = resolve_stage(spec, recipe, self, None)
            self.resolved[spec.name] = {"kind": spec.kind, "settings": stage.as_dict()}


@dataclass
class DemoConfig(RunConfig):
    """`nemo-lead demo`: `nemo-lead run demo --out runs/demo`."""

    recipe: Optional[str] = "demo"
    out: Optional[str] = "runs/demo"


# ----------------------------------------------------------------------------- the kinds' own settings
@dataclass
class PrepareConfig:
    """The embedded demo task (`nemo_lead.data.demo_task`) and its tiny random model, written from `seed`."""

    seed: int = 1234


@dataclass
class SelectConfig:
    """A problem set built from others: `problems` filtered, then `extra` appended (unfiltered).

    The paper's stage-1 set is `difficulty: ">= 2.5"` of DeepScaleR; its stage-2 set is the stage-1 problems
    whose stage-1 rollout accuracy was `accuracy: "<= 0.75"` (`from_run`: the stage-1 RL run folder) plus
    the extra numeric-answer problems (`extra`)."""

    problems: list[str] = field(default_factory=list)  # built-in names or files, concatenated
    fields: dict[str, str] = field(default_factory=dict)  # column names: problem / answer / id
    split: Optional[str] = None
    difficulty: Optional[str] = None  # a bound on meta[difficulty_key], e.g. ">= 2.5" or "> 1"
    difficulty_key: str = "difficulty"
    from_run: Optional[str] = None  # an RL run folder: its problem_stats.jsonl gives each problem's accuracy
    accuracy: Optional[str] = None  # a bound on that accuracy, e.g. "<= 0.75" (problems the run never drew are dropped)
    evaluable_answers: bool = False  # keep answers "sympy can evaluate" (the authors' stage-1 filter)
    limit: Optional[int] = None  # first N problems after filtering (before `extra`)
    extra: list[str] = field(default_factory=list)  # problem sets appended as they are

    def __post_init__(self) -> None:
        if not self.problems:
            raise ValueError("problems must name at least one problem set")
        for key in ("difficulty", "accuracy"):
            if getattr(self, key) is not None:
                parse_bound(getattr(self, key), key)
        if (self.accuracy is None) != (self.from_run is None):
            raise ValueError("accuracy and from_run go together: the accuracy is the one measured in from_run")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1, got {self.limit}")


@dataclass
class Stage:
    """A stage ready to run: its spec, folder and validated settings (`config`: the kind's object)."""

    spec: StageSpec
    folder: Path
    config: Any  # PrepareConfig | SelectConfig | EvalConfig (distill, eval) | SFTConfig | RLConfig
    extras: dict[str, Any] = field(default_factory=dict)  # the kind's own keys (its settings hook): keep, models

    @property
    def keep(self) -> str:
        """distill: which correct response per problem becomes its trace."""
        return self.extras.get("keep", "first")

    @property
    def models(self) -> dict[str, str]:
        """eval: row name -> model."""
        return self.extras.get("models", {})

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def kind(self) -> str:
        return self.spec.kind

    def as_dict(self) -> dict[str, Any]:
        """The settings as plain data (what --print-config shows and the state file fingerprints)."""
        data = yaml.safe_load(to_yaml(self.config))
        for key in KINDS[self.kind].hidden_keys:
            data.pop(key, None)
        data.update({k: dict(v) if isinstance(v, dict) else v for k, v in self.extras.items()})
        return data


def load_recipe(run: RunConfig) -> Recipe:
    """The recipe of `run`, with `paths.*` and `stages.NAME.*` overrides checked against it."""
    recipe = read_recipe(find_recipe(run.recipe))
    for key, value in run.paths.items():
        if key not in recipe.paths:
            hint = difflib.get_close_matches(key, list(recipe.paths), n=1)
            raise ConfigError(f"command line: paths.{key}: {recipe.path.name} has no such path"
                              + (f" (did you mean 'paths.{hint[0]}'?)" if hint
                                 else f"; its paths: {', '.join(recipe.paths) or 'none'}"))
        recipe.paths[key] = value
        recipe.path_where[key] = "command line"
    names = [s.name for s in recipe.stages]
    for name, over in run.stages.items():
        if name not in names:
            hint = difflib.get_close_matches(name, names, n=1)
            raise ConfigError(f"command line: stages.{name}: {recipe.path.name} has no such stage"
                              + (f" (did you mean 'stages.{hint[0]}'?)" if hint else f"; its stages: {', '.join(names)}"))
        if not isinstance(over, dict):
            raise ConfigError(f"command line: stages.{name} takes keys (stages.{name}.KEY=VALUE), not {over!r}")
    for spec in recipe.stages:
        if spec.kind not in KINDS:
            raise ConfigError(f"{spec.location('kind')}: stage {spec.name!r}: unknown kind {spec.kind!r} "
                              f"(kinds: {', '.join(KINDS)})")
    return recipe


# ----------------------------------------------------------------------------- resolving one stage
def _override(key: str, value: Any) -> str:
    """`key=value` that the config loader reads back as exactly `value` (YAML flow style, one line)."""
    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, allow_unicode=True).strip()
    if text.endswith("\n..."):
        text = text[:-4].strip()
    return f"{key}={text}"


def _stage_lookup(spec: StageSpec, recipe: Recipe, run: RunConfig, outputs: Optional[dict[str, dict]]):
    order = [s.name for s in recipe.stages]

    def lookup(ref: Ref) -> Any:
        if ref.kind == "out":
            return str(Path(run.out).resolve()) if run.out else "<out>"
        if ref.kind == "paths":
            if ref.key not in recipe.paths:
                hint = difflib.get_close_matches(ref.key, list(recipe.paths), n=1)
                raise ConfigError(f"${{paths.{ref.key}}}: the recipe has no such path"
                                  + (f" (did you mean 'paths.{hint[0]}'?)" if hint else ""))
            value = recipe.paths[ref.key]
            if value is None:
                raise ConfigError(f"paths.{ref.key} is not set ({recipe.path_where.get(ref.key, recipe.path)}): "
                                  f"give it on the command line, paths.{ref.key}=VALUE")
            return value
        if ref.key not in order or order.index(ref.key) >= order.index(spec.name):
            raise ConfigError(f"${{stage:{ref.key}.{ref.output}}}: no stage {ref.key!r} before stage {spec.name!r}")
        kind = recipe.stage(ref.key).kind
        if ref.output not in KINDS[kind].outputs:
            raise ConfigError(f"${{stage:{ref.key}.{ref.output}}}: a {kind} stage's outputs are "
                              f"{', '.join(KINDS[kind].outputs)}")
        if outputs is None:
            return f"<stage {ref.key}: {ref.output}>"
        done = outputs.get(ref.key)
        if done is None:
            raise ConfigError(f"stage {spec.name!r} reads ${{stage:{ref.key}.{ref.output}}}, but stage {ref.key!r} "
                              "has not finished in this run folder (run it first, or run the whole recipe)")
        return done[ref.output]

    return lookup


def _relocate(e: ConfigError, spec: StageSpec, cli_keys: set[str]) -> str:
    """A loader error about our key=value list, re-pointed at the recipe line (or the command line)."""
    key, rest = e.key, e.reason
    if key is not None and key not in cli_keys and not any(key.startswith(k + ".") for k in cli_keys):
        where = spec.location(key)
    elif key is not None:
        where = "command line"
        rest = rest.replace(f"'{key}'", f"'stages.{spec.name}.{key}'", 1).replace("did you mean '",
                                                                                  f"did you mean 'stages.{spec.name}.")
    else:  # a check across keys (the schema's __post_init__): the stage, and the overrides when there are some
        where = spec.source + (f" with stages.{spec.name}.* from the command line" if cli_keys else "")
    return f"{where}: stage {spec.name!r} ({spec.kind}): {rest}"


def resolve_stage(spec: StageSpec, recipe: Recipe, run: RunConfig, outputs: Optional[dict[str, dict]]) -> Stage:
    """Stage `spec` with references resolved (outputs None: placeholders, for checking and printing) and its
    settings loaded through the kind's schema; errors name the recipe line or the command line."""
    folder = Path(run.out or "runs/_") / "stages" / spec.name
    cli = run.stages.get(spec.name, {}) or {}
    cli_keys = set(flatten(cli, keep_empty=True))
    settings = dict(spec.settings)
    lookup = _stage_lookup(spec, recipe, run, outputs)
    kind = KINDS[spec.kind]
    engine = {f"engine.{k}": v for k, v in flatten(run.engine or {}, keep_empty=True).items()} if kind.engine_keys else {}
    cli_keys |= set(engine)
    items = []
    for key, value in [*flatten(settings, keep_empty=True).items(), *engine.items(), *flatten(cli, keep_empty=True).items()]:
        try:
            items.append((key, substitute(value, lookup)))
        except ConfigError as e:
            where = "command line" if key in cli_keys else spec.location(key)
            raise ConfigError(f"{where}: stage {spec.name!r}, key {key!r}: {e}") from None
    for key, _ in items:
        if key in kind.pipeline_keys:
            where = "command line" if key in cli_keys else spec.location(key)
            raise ConfigError(f"{where}: stage {spec.name!r}: {key!r} is set by the pipeline "
                              f"({'list the models under `models`' if key == 'model' else 'OUT/stages/NAME'})")
    extras: dict[str, Any] = {}
    hook = settings_hook(spec.kind)
    if hook is not None:
        items, extras = hook(spec, items)
    if kind.out is not None:
        items.append(("out", str(folder / kind.out) if kind.out else str(folder)))
    # the defaults of the matching command (`nemo-lead sft | rl | eval`: their dataclasses); distill samples
    # as eval does
    try:
        config = load_config(schema(spec.kind), [], [_override(k, v) for k, v in items])
    except ConfigError as e:
        raise ConfigError(_relocate(e, spec, cli_keys)) from None
    if kind.planned:  # `nemo-lead run ... plan.check=warn` applies to every stage's start-up check
        config.plan = config.plan.merged(run.plan)
    if kind.tracked:  # `nemo-lead run ... wandb.enabled=true`: every stage that logs scalars logs to W&B
        config.wandb = config.wandb.merged(run.wandb)
        if config.wandb.enabled and config.wandb.group is None:
            config.wandb = dataclasses.replace(config.wandb, group=Path(run.out or "runs/_").name)
    return Stage(spec=spec, folder=folder, config=config, extras=extras)


def distill_settings(spec: StageSpec, items: list[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """A distill stage's `keep` (which correct response becomes the trace); it samples as eval, without plots.
    keep: first samples in rounds unless `rounds` says otherwise: sample 0, then the rest only for problems
    it did not solve (`EvalConfig.rounds` = [1]; `rounds: []` draws all n at once). keep: shortest needs
    every sample, so it takes no rounds."""
    keep = next((v for k, v in items if k == "keep"), "first")
    if keep not in KEEP_RULES:
        raise ConfigError(f"{spec.location('keep')}: stage {spec.name!r}: keep must be one of "
                          f"{', '.join(KEEP_RULES)}, got {keep!r}")
    rounds = [v for k, v in items if k == "rounds" or k.startswith("rounds.")]
    if keep == "shortest" and any(rounds):
        raise ConfigError(f"{spec.location('rounds')}: stage {spec.name!r}: keep: shortest compares every sample of "
                          "a problem, so it samples them all at once: leave out rounds (or keep: first)")
    extra = [("rounds", [1])] if keep == "first" and not rounds else []
    return [(k, v) for k, v in items if k != "keep"] + extra + [("plot", False)], {"keep": keep}


def eval_settings(spec: StageSpec, items: list[tuple[str, Any]]) -> tuple[list[tuple[str, Any]], dict[str, Any]]:
    """An eval stage's `models` (row name -> model, null leaving out a row its `_base_` recipe lists); the
    first row's model stands in for `model`."""
    models: dict[str, str] = {}
    for k, v in items:
        if k.startswith("models.") and v is None:  # a row of a `_base_` recipe left out (`ROW: null`)
            models.pop(k[7:], None)
        elif k.startswith("models."):
            models[k[7:]] = v
        elif k == "models" and v not in ({}, None):
            raise ConfigError(f"{spec.location(k)}: stage {spec.name!r}: models is a mapping of row names to models")
    if not models:
        raise ConfigError(f"{spec.location('models')}: stage {spec.name!r}: an eval stage needs `models`: "
                          "{row name: model folder or ${stage:NAME.checkpoint}}")
    items = [(k, v) for k, v in items if k != "models" and not k.startswith("models.")]
    return items + [("model", next(iter(models.values())))], {"models": models}


def eval_row_config(stage: Stage, row: str):
    """The EvalConfig of one row of an eval stage: its model, its folder OUT/stages/NAME/<row>."""
    return dataclasses.replace(stage.config, model=stage.models[row], out=str(stage.folder / row_slug(row)))


def row_slug(row: str) -> str:
    """A folder name for a table row ("stage 1" -> "stage-1")."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", row.strip()).strip("-") or "row"
