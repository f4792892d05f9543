"""Preflight: every conflict of a recipe's stages that can be known before a job starts, found by
`nemo-lead run`, `nemo-lead submit` (its dry run too) and `nemo-lead plan` alike, naming the stage and keys.

    errors, warnings = recipe_conflicts(run_config, world={"rl1": 8}, prefix="stages.")

What is checked, per stage, by its kind's `check` (`nemo_lead.pipeline.kinds`; a value that is an earlier
stage's output is not known yet and is skipped):
- problem and evaluation data (select, rl, distill, eval): the files exist and every row has the fields the
  stage reads (problem, answer; the difficulty a `difficulty:` bound reads);
- models (sft, rl: actor.model; distill: the teacher; eval: each row's model): a folder holds config.json (a
  HF folder) or meta.json (a nemo-lead checkpoint); a name is a conf/model preset;
- tensor parallelism against the model: tp divides the attention heads and the KV heads;
- the job's ranks against the layout (`world`: ranks per stage, where known): tp x pp divides them, and
  with `rollout.generator_ranks` the trainer ranks are whole replicas;
- SFT's packed traces with Transformer Engine (SFTConfig refuses `actor.layer_spec=te` with
  `data.pack=true`; `auto` builds the local spec there, and this says so).

A path that does not exist from here is an error for `run` (it runs here) and a warning for `submit` and
`plan` (`missing_ok=True`): the login node may not see the compute nodes' file systems; the job checks again.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from nemo_lead.config.loading import ConfigError
from nemo_lead.data.filters import filter_by_bound
from nemo_lead.data.problems import BUILTIN_DATASETS, load_problems
from nemo_lead.data.readers import DataError
from nemo_lead.pipeline.config import RunConfig, load_recipe, resolve_stage
from nemo_lead.pipeline.kinds import KINDS, models_of, preflight_check

PENDING = "<stage "  # the placeholder of an output a stage has not written yet


class _Findings:
    def __init__(self, prefix: str, missing_ok: bool) -> None:
        self.prefix, self.missing_ok = prefix, missing_ok
        self.errors: list[str] = []
        self.warnings: list[str] = []
        self._loaded: dict[tuple, Any] = {}
        self.stands_for: dict[str, str] = {}  # an SFT / RL stage's pending checkpoint -> the model it trains

    def add(self, stage: str, keys: str, text: str) -> None:
        named = ", ".join(f"{self.prefix}{stage}.{k.strip()}" for k in keys.split(","))
        self.errors.append(f"stage {stage}: {named}: {text}")

    def missing(self, stage: str, key: str, value: str) -> None:
        text = f"stage {stage}: {self.prefix}{stage}.{key}={value}: no such file or folder"
        if self.missing_ok:
            self.warnings.append(text + " from this machine (the job checks it again when it starts)")
        else:
            self.errors.append(text)

    def problems(self, stage: str, key: str, spec: str, split: str | None, fields: Mapping[str, str]) -> list | None:
        """The problems of `spec` (None when pending, missing or unreadable: that is recorded)."""
        if PENDING in str(spec):
            return None
        if spec not in BUILTIN_DATASETS and not Path(spec).expanduser().exists():
            self.missing(stage, key, spec)
            return None
        cache_key = (spec, split, tuple(sorted(fields.items())))
        if cache_key not in self._loaded:
            try:
                self._loaded[cache_key] = load_problems(spec, split=split, fields=dict(fields) or None)
            except (DataError, OSError) as e:
                self._loaded[cache_key] = str(e)
        loaded = self._loaded[cache_key]
        if isinstance(loaded, str):
            self.add(stage, key, loaded)
            return None
        return loaded


def _model_config(f: _Findings, stage: str, key: str, model: str) -> dict[str, Any] | None:
    """The HF config of `model` (a folder, checkpoint or preset), recording what is wrong with it; an earlier
    stage's checkpoint has the shape of the model that stage trains (checked there)."""
    from nemo_lead.models.hf_config import preset_names  # (nemo_lead.models and plan.check load torch)
    from nemo_lead.plan.check import hf_config_of

    if PENDING in str(model):
        try:
            return hf_config_of(f.stands_for[model])[0] if model in f.stands_for else None
        except (ValueError, OSError, KeyError):
            return None
    path = Path(model).expanduser()
    if path.is_dir():
        if not ((path / "config.json").is_file() or (path / "meta.json").is_file()):
            f.add(stage, key, f"{model} is a folder without config.json (a HF model folder) or meta.json (a "
                              "nemo-lead checkpoint)")
            return None
    elif path.exists():
        f.add(stage, key, f"{model} is a file; give the model's folder (config.json, weights, tokenizer)")
        return None
    elif model not in preset_names():
        f.missing(stage, key, model)
        return None
    try:
        return hf_config_of(model)[0]
    except (ValueError, OSError, KeyError) as e:
        f.add(stage, key, f"{model}: {e}")
        return None


def _tp_divides_heads(f: _Findings, stage: str, keys: str, hf: dict[str, Any] | None, tp: int) -> None:
    if hf is None or "num_attention_heads" not in hf:
        return
    heads = int(hf["num_attention_heads"])
    kv = int(hf.get("num_key_value_heads") or heads)
    tp_key = keys.split(",")[0]
    for count, what in ((heads, "attention heads"), (kv, "KV heads")):
        if count % tp:
            f.add(stage, keys, f"{tp_key.strip()}={tp} does not divide the model's {count} {what}; use a tp that "
                               f"divides {heads} attention and {kv} KV heads")
            return


def _ranks_fit_layout(f: _Findings, stage: str, tp: int, pp: int, world: int | None, generators: int = 0,
                      keys: str = "actor.tp, actor.pp") -> None:
    if world is None:
        return
    replica = tp * pp
    if generators:
        trainers = world - generators
        if trainers < replica or trainers % replica:
            f.add(stage, f"{keys}, rollout.generator_ranks",
                  f"the job's {world} ranks less {generators} generator ranks leave {trainers} trainer ranks, "
                  f"not a multiple of tp x pp = {replica} (the job needs {replica} x k + {generators} ranks)")
    elif world % replica:
        f.add(stage, keys, f"tp x pp = {replica} does not divide the job's {world} ranks")


# ----------------------------------------------------------------------------- each kind's checks
# (named by the kind's entry, `nemo_lead.pipeline.kinds.StageKind.check`: (findings, stage, ranks of its job))
def check_select(f: _Findings, stage: Any, world: int | None) -> None:
    """Its problem sets load, and a `difficulty:` bound finds its field on every problem."""
    name, cfg = stage.name, stage.config
    for key in ("problems", "extra"):
        for i, spec in enumerate(getattr(cfg, key)):
            problems = f.problems(name, f"{key}[{i}]", spec, cfg.split, cfg.fields)
            if problems is not None and key == "problems" and cfg.difficulty is not None:
                try:
                    filter_by_bound(problems, cfg.difficulty_key, cfg.difficulty)
                except DataError as e:
                    f.add(name, f"difficulty, difficulty_key, problems[{i}]",
                          f"{spec}: {e}; `difficulty: {cfg.difficulty!r}` needs the field on every problem "
                          f"(nemo-lead prepare deepscaler writes it; for data without ratings set "
                          f"difficulty=null)")


def _check_actor(f: _Findings, stage: Any, world: int | None, generators: int = 0) -> None:
    """A training stage's model, its TP against the heads and its layout against the job's ranks."""
    name, cfg = stage.name, stage.config
    hf = _model_config(f, name, "actor.model", cfg.actor.model)
    _tp_divides_heads(f, name, "actor.tp, actor.model", hf, cfg.actor.tp)
    _ranks_fit_layout(f, name, cfg.actor.tp, cfg.actor.pp, world, generators)


def check_sft(f: _Findings, stage: Any, world: int | None) -> None:
    """The actor (`_check_actor`), the traces file, and what `actor.layer_spec=auto` means for packed traces."""
    name, cfg = stage.name, stage.config
    _check_actor(f, stage, world)
    if PENDING not in str(cfg.data.path) and not Path(cfg.data.path).expanduser().exists():
        f.missing(name, "data.path", cfg.data.path)
    _, note = cfg.packing_layer_spec()
    if note:
        f.warnings.append(f"stage {name}: {note}")


def check_rl(f: _Findings, stage: Any, world: int | None) -> None:
    """The actor with its generator ranks (`_check_actor`), the problems and the validation sets."""
    from nemo_lead.eval.config import dataset_specs  # (nemo_lead.eval loads torch)

    name, cfg = stage.name, stage.config
    _check_actor(f, stage, world, cfg.rollout.generator_ranks)
    f.problems(name, "data.path", cfg.data.path, cfg.data.split, cfg.data.fields)
    for spec in dataset_specs(cfg.validation.data or ""):
        f.problems(name, "validation.data", spec, None, {})


def check_generation(f: _Findings, stage: Any, world: int | None) -> None:
    """A stage that generates with its models (distill's teacher, eval's rows): each model, the TP against its
    heads, the layout against the job's ranks, the problem sets."""
    from nemo_lead.eval.config import dataset_specs  # (nemo_lead.eval loads torch)

    name, cfg = stage.name, stage.config
    for key, model in models_of(stage.kind, cfg, stage.extras).items():
        hf = _model_config(f, name, key, model)
        _tp_divides_heads(f, name, f"tp, {key}", hf, cfg.tp)
    _ranks_fit_layout(f, name, cfg.tp, cfg.pp, world, keys="tp, pp")
    for spec in dataset_specs(cfg.data):
        f.problems(name, "data", spec, cfg.split, cfg.fields)


def recipe_conflicts(run: RunConfig, *, world: Mapping[str, int] | int | None = None, names: list[str] | None = None,
                     done: Collection[str] = (), prefix: str = "stages.",
                     missing_ok: bool = False) -> tuple[list[str], list[str]]:
    """(errors, warnings) of the recipe's stages (`names`: only these; `done`: finished stages, not checked
    again). `world`: the ranks each stage's job has (a mapping by stage name, or one number for all; None:
    not known here); `prefix`: how the command names a stage's keys (`stages.` for run and plan,
    `job.stages.` for submit). An earlier stage's outputs are what nemo-lead writes, so they are not checked;
    a model read from an earlier stage's checkpoint is checked as that stage's model (the same shape)."""
    recipe = load_recipe(run)
    f = _Findings(prefix, missing_ok)
    outputs: dict[str, dict[str, Any]] = {}
    for spec in recipe.stages:
        outputs[spec.name] = {o: f"{PENDING}{spec.name}: {o}>" for o in KINDS[spec.kind].outputs}
        try:
            stage = resolve_stage(spec, recipe, run, outputs)
        except ConfigError as e:
            f.errors.append(str(e))
            continue
        if KINDS[spec.kind].planned:  # its checkpoint has the shape of the model it trains
            (model,) = models_of(spec.kind, stage.config, stage.extras).values()
            f.stands_for[outputs[spec.name]["checkpoint"]] = f.stands_for.get(model, model)
        if spec.name in done or (names is not None and spec.name not in names):
            continue
        ranks = world.get(spec.name) if isinstance(world, Mapping) else world
        check = preflight_check(spec.kind)
        if check is not None:
            check(f, stage, ranks)
    return f.errors, f.warnings


def report(command: str, errors: list[str], warnings: list[str], stream: Any) -> int:
    """Print the findings; 2 when there are errors (nothing was started), else 0."""
    for w in warnings:
        print(f"nemo-lead {command}: note: {w}", file=stream)
    if not errors:
        return 0
    print(f"nemo-lead {command}: the recipe cannot run as configured (nothing was started):", file=stream)
    for e in errors:
        print(f"  - {e}", file=stream)
    return 2
