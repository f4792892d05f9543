"""`nemo-lead run RECIPE`: the recipe's stages in order, each feeding the next, in one run folder.

    OUT/pipeline_state.json   per stage: status (running / done), the fingerprint of its resolved settings,
                              its outputs (checkpoint, run folder, data files), start and wall time
    OUT/run.yaml              the resolved RunConfig of the latest invocation
    OUT/stages/NAME/          each stage's own folder (an SFT / RL run folder, eval folders, data files)
    OUT/summary.{json,md}     the evaluation of every evaluated checkpoint (report.py), and the figures

Skip and resume: a stage recorded as done whose resolved settings (its references to earlier outputs
included) are unchanged, and whose input files and folders hold what they held when it ran
(`input_fingerprints`: data files by content, checkpoints by their manifest), is skipped. Any other stage runs: one that was interrupted runs its command again
into the same folder, and the SFT / RL loops and the evaluation resume from what is there; one whose
settings changed since it finished runs again too (a larger `steps` extends an SFT / RL run; the loops
refuse other changes, so start a new OUT for those). The state file is written atomically after each
change, so a kill at any moment leaves either the old or the new state.

`only=NAME` runs that one stage (what `nemo-lead submit` does per SLURM job); the stages it reads must be
done in OUT. Under torchrun / srun every rank runs the stages (the loops and the evaluation use the ranks
they are given; data stages write the same files atomically); only global rank 0 writes the state and the
summary.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from nemo_lead.checkpoint.manifest import MANIFEST_FILE, file_entry
from nemo_lead.config.dotted import lookup
from nemo_lead.config.fields import added_keys, keys_where
from nemo_lead.config.loading import ConfigError, drop_keys, to_yaml
from nemo_lead.pipeline.config import RunConfig, Stage, eval_row_config, load_recipe, resolve_stage
from nemo_lead.pipeline.kinds import KINDS, run_function, schema
from nemo_lead.pipeline.preflight import recipe_conflicts, report
from nemo_lead.pipeline.recipe import Recipe
from nemo_lead.pipeline.recipe_plan import check_recipe
from nemo_lead.pipeline.stages import StageStopped, say
from nemo_lead.runtime.files import write_atomic, write_json
from nemo_lead.runtime.processes import launch_rank
from nemo_lead.training.run.lock import lock_folder

STATE_FILE = "pipeline_state.json"


# ----------------------------------------------------------------------------- state
def read_state(out: Path) -> dict[str, Any]:
    path = out / STATE_FILE
    if not path.is_file():
        return {"stages": {}}
    try:
        state = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise ConfigError(f"{path}: not valid JSON ({e.msg}); it is only ever replaced whole, so the folder "
                          "was edited by hand") from None
    state.setdefault("stages", {})
    return state


def write_state(out: Path, state: dict[str, Any]) -> None:
    if not is_writer():
        return
    write_json(out / STATE_FILE, state)


def is_writer() -> bool:
    """Global rank 0 (or a plain single process)."""
    return launch_rank() == 0


def fingerprint(stage: Stage, without: tuple[str, ...] = ()) -> str:
    """A short hash of the stage's resolved settings (its inputs' paths included), without the keys that do
    not change its results (progress output, grader processes, checkpoint cadence, ...: the fields marked
    `results=False`), so a finished stage is not run again for them; and without the dotted keys `without`."""
    quiet = keys_where(type(stage.config), results=False) if dataclasses.is_dataclass(stage.config) else ()
    settings = drop_keys(stage.as_dict(), [*quiet, *without])
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _field_default(cls: Any, dotted: str) -> Any:
    """The default of a nested config field (`lead.alpha` of RLConfig), or a marker when it has none."""
    for name in dotted.split("."):
        found = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
        if name not in found:
            return _NO_DEFAULT
        f = found[name]
        cls = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return cls


_NO_DEFAULT = object()


def same_settings(stage: Stage, recorded: str | None) -> bool:
    """Whether `recorded` (a state file's fingerprint) is the stage's at today's settings: the fingerprint
    itself, or one taken before some of the keys its schema declares with `since=` existed
    (`nemo_lead.config.fields.added_keys`, oldest first), those keys being at their defaults now. A finished RL
    stage of many GPU hours is not run again because a knob appeared."""
    if recorded == fingerprint(stage):
        return True
    if not dataclasses.is_dataclass(stage.config):
        return False
    settings = stage.as_dict()
    at_default = [key for key, _ in added_keys(type(stage.config))
                  if (value := lookup(settings, key, _NO_DEFAULT)) is not _NO_DEFAULT
                  and value == _field_default(type(stage.config), key)]
    # a record taken between two additions lacks the later keys only: drop the newest ones, more and more
    return any(recorded == fingerprint(stage, tuple(at_default[i:])) for i in range(len(at_default)))


def __getattr__(name: str) -> Any:
    """`ADDED_KEYS`: every stage kind's keys declared with `since=` ((key, date), oldest first), derived from
    the fields when asked for (it imports the kinds' schemas, which reading a recipe does not)."""
    if name == "ADDED_KEYS":
        found = {kd for kind in KINDS if dataclasses.is_dataclass(cls := schema(kind)) for kd in added_keys(cls)}
        return tuple(sorted(found, key=lambda kd: (kd[1], kd[0])))
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_HASHED_FILE_BYTES = 1 << 28  # data files up to 256 MB are hashed; larger ones (and folders) go by size and time


def _path_fingerprint(path: Path) -> str:
    """What a stage's input file or folder holds, cheaply: a file's bytes (CRC-32; size and modification time
    above `_HASHED_FILE_BYTES`); a checkpoint's manifest; any other folder's file names, sizes and times
    (dot files aside: locks, temporaries)."""
    if path.is_file():
        st = path.stat()
        if st.st_size > _HASHED_FILE_BYTES:
            return f"{st.st_size}:{st.st_mtime_ns}"
        return f"{st.st_size}:{file_entry(path)['crc32']}"
    if (path / MANIFEST_FILE).is_file():
        return "manifest:" + file_entry(path / MANIFEST_FILE)["crc32"]
    listing = sorted((p.relative_to(path).as_posix(), p.stat().st_size, p.stat().st_mtime_ns) for p in path.rglob("*")
                     if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts))
    return hashlib.sha256(json.dumps(listing).encode()).hexdigest()[:16]


def input_fingerprints(stage: Stage) -> dict[str, str]:
    """{setting: fingerprint} of every setting of `stage` that names an existing file or folder outside the
    stage's own folder (its data, its model, earlier stages' outputs): a stage is done only for these."""
    own = stage.folder.resolve()
    found: dict[str, str] = {}

    def visit(key: str, value: Any) -> None:
        if isinstance(value, dict):
            for k, v in value.items():
                visit(f"{key}.{k}" if key else str(k), v)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                visit(f"{key}[{i}]", v)
        elif isinstance(value, str) and key != "out" and value and len(value) < 4096:
            path = Path(value).expanduser()
            if path.exists() and own not in (path.resolve(), *path.resolve().parents):
                found[key] = _path_fingerprint(path)

    # the config's fields as they are (Stage.as_dict renders YAML: slow, and the paths are the same)
    settings = dataclasses.asdict(stage.config) if dataclasses.is_dataclass(stage.config) else stage.as_dict()
    for key in KINDS[stage.kind].input_keys:  # the kind's own keys that name inputs (an eval stage's models)
        settings[key] = dict(stage.extras[key])
    visit("", settings)
    return found


def changed_inputs(stage: Stage, rec: dict[str, Any]) -> list[str]:
    """The settings whose files changed since the stage recorded them (a record without: none)."""
    saved = rec.get("inputs")
    if saved is None:
        return []
    now = input_fingerprints(stage)
    return sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))


def done_outputs(state: dict[str, Any]) -> dict[str, dict[str, str]]:
    return {name: rec["outputs"] for name, rec in state["stages"].items() if rec.get("status") == "done"}


# ----------------------------------------------------------------------------- one stage
def run_stage(stage: Stage, state: dict[str, Any], out: Path) -> None:
    """Run `stage` (skipping it when it is done with the same settings) and record it in `state`."""
    fp = fingerprint(stage)
    rec = state["stages"].get(stage.name)
    changed = changed_inputs(stage, rec) if rec and rec.get("status") == "done" else []
    if rec and rec.get("status") == "done" and same_settings(stage, rec.get("fingerprint")) and not changed:
        say(f"stage {stage.name} ({stage.kind}): done, skipped")
        return
    if changed:
        say(f"stage {stage.name} ({stage.kind}): its inputs changed since it finished ({', '.join(changed)}); "
            f"running it again in {stage.folder} (an SFT / RL run refuses changed data: give it another --out)")
    elif rec and rec.get("status") == "done":
        say(f"stage {stage.name} ({stage.kind}): its settings changed since it finished; running it again "
            f"in {stage.folder}")
    elif rec and rec.get("status") == "failed":
        say(f"stage {stage.name} ({stage.kind}): failed before (exit {rec.get('exit_status')}); running it again "
            f"in {stage.folder}")
    elif rec:
        say(f"stage {stage.name} ({stage.kind}): interrupted before; resuming in {stage.folder}")
    else:
        say(f"stage {stage.name} ({stage.kind}): starting in {stage.folder}")
    stage.folder.mkdir(parents=True, exist_ok=True)
    seconds = (rec or {}).get("seconds", 0.0) if rec and rec.get("status") != "done" else 0.0
    state["stages"][stage.name] = {"kind": stage.kind, "status": "running", "fingerprint": fp,
                                   "inputs": input_fingerprints(stage), "folder": str(stage.folder.resolve()),
                                   "seconds": seconds}
    write_state(out, state)
    start = time.monotonic()
    try:
        outputs = run_function(stage.kind)(stage)
    except StageStopped as e:  # stopped cleanly (resumable), or failed with the command's exit status
        state["stages"][stage.name].update(status="stopped" if e.status == 0 else "failed", exit_status=e.status)
        raise
    finally:
        state["stages"][stage.name]["seconds"] = seconds + time.monotonic() - start
        write_state(out, state)
    state["stages"][stage.name].update(status="done", outputs=outputs, finished=time.strftime("%Y-%m-%dT%H:%M:%S"))
    write_state(out, state)
    say(f"stage {stage.name} ({stage.kind}): done in {state['stages'][stage.name]['seconds']:.0f} s")


# ----------------------------------------------------------------------------- summary
def summarise(recipe: Recipe, cfg: RunConfig, state: dict[str, Any], out: Path) -> str:
    """summary.json / summary.md / figures from every eval stage that has results, and the RL stages."""
    from nemo_lead.pipeline.report import eval_rows, write_summary

    outputs = done_outputs(state)
    rows: list[dict[str, Any]] = []
    rl_runs: list[tuple[str, str]] = []
    for spec in recipe.stages:
        part = KINDS[spec.kind].summary
        if part == "curve" and spec.name in outputs:
            rl_runs.append((spec.name, outputs[spec.name]["run"]))
        if part != "rows":
            continue
        try:
            stage = resolve_stage(spec, recipe, cfg, outputs)
        except ConfigError:  # an input has not finished: nothing of this stage to report
            continue
        rows += eval_rows(spec.name, {row: eval_row_config(stage, row) for row in stage.models})
    times = {name: round(rec.get("seconds", 0.0), 1) for name, rec in state["stages"].items()}
    return write_summary(out, str(recipe.path), rows, rl_runs, times)


def planned_status(stage: Stage | None, rec: dict[str, Any] | None) -> str:
    """What `run` would do with a stage, in a word or two: done (skipped), rerun (done, but its settings
    changed), rerun (inputs) (done, but a file or folder it reads changed), resume (interrupted or stopped), failed (exit N; runs again), to do; `stage` None: its inputs
    are not finished yet (waits)."""
    if not rec:
        return "to do" if stage is not None else "waits"
    status = rec.get("status")
    if status == "done":
        if stage is None:
            return "rerun"  # an input will run again
        if not same_settings(stage, rec.get("fingerprint")):
            return "rerun"
        return "rerun (inputs)" if changed_inputs(stage, rec) else "done"
    if status == "failed":
        return f"failed (exit {rec.get('exit_status')})"
    return "resume"


def print_plan(recipe: Recipe, cfg: RunConfig, state: dict[str, Any]) -> None:
    """The stages, what a run would do with each (`planned_status`) and their folders."""
    print(f"recipe {recipe.path} -> {cfg.out}")
    outputs = done_outputs(state)
    for spec in recipe.stages:
        try:
            stage = resolve_stage(spec, recipe, cfg, outputs)
        except ConfigError:  # reads the output of a stage that is not done
            stage = None
        rec = state["stages"].get(spec.name)
        status = planned_status(stage, rec)
        if status in ("to do", "waits") or status.startswith(("failed", "rerun")):
            outputs.pop(spec.name, None)  # later stages that read it run again too
        folder = stage.folder if stage is not None else resolve_stage(spec, recipe, cfg, None).folder
        print(f"  {spec.name:<14} {spec.kind:<8} {status:<15} {folder}")


# ----------------------------------------------------------------------------- entry point
def run_recipe(cfg: RunConfig) -> int:
    """CLI runner of `nemo-lead run` and `nemo-lead demo` (see the module docstring); the exit status."""
    from nemo_lead.parallel.state import detect_launch  # (torch)

    try:
        recipe = load_recipe(cfg)
        out = Path(cfg.out)
        state = read_state(out)
        todo = [recipe.stage(cfg.only)] if cfg.only else recipe.stages
        world = detect_launch(os.environ).world_size
        finished = [n for n, r in state["stages"].items() if r.get("status") == "done"]
        found = recipe_conflicts(cfg, world=world if world > 1 else None, names=[s.name for s in todo],
                                 done=finished, missing_ok=cfg.dry_run)
        # what the stages after these read from outside the run (a base model, a teacher, data) is there now:
        # `only=sft_problems` with a base model path that does not exist fails now, not a day later in SFT
        # (their ranks are unknown here: those jobs check them)
        first = recipe.stages.index(todo[0]) if todo else len(recipe.stages)
        later = [s.name for s in recipe.stages[first:] if s not in todo and s.name not in finished]
        if later:
            errors, notes = recipe_conflicts(cfg, names=later, done=finished, missing_ok=cfg.dry_run)
            found = (found[0] + [f"{e} (an input of a later stage)" for e in errors],
                     found[1] + [n for n in notes if "no such file" in n])
        if report("run", *found, sys.stderr):
            return 2
        if cfg.dry_run:
            print_plan(recipe, cfg, state)
            return 0
        if is_writer():
            lock_folder(out)  # one `nemo-lead run` per OUT (each SFT / RL stage locks its own folder too)
            write_atomic(out / "run.yaml", to_yaml(cfg))
        if check_recipe(cfg, [s.name for s in todo], done_outputs(state)):  # on GPUs: every stage fits
            return 2
        say(f"recipe {recipe.path.name}: {' -> '.join(s.name for s in recipe.stages)}; run folder {out}")
        for spec in todo:
            run_stage(resolve_stage(spec, recipe, cfg, done_outputs(state)), state, out)
    except StageStopped as e:
        if e.status == 0:
            say(f"{e}; run the same command again to resume it")
        else:
            say(f"{e}: see its message above. A stage refused for changed settings fails the same way when run "
                "again: fix the setting, or give the stage a fresh folder (another --out)")
        _summarise_quietly(recipe, cfg, state, out)
        return e.status or 1
    except (ConfigError, ValueError, OSError) as e:
        print(f"nemo-lead run: {e}", file=sys.stderr)
        return 2
    if not is_writer():
        return 0
    text = summarise(recipe, cfg, state, out)
    print(text, flush=True)
    say(f"wrote {out / 'summary.md'} and {out / 'summary.json'}")
    return 0


def _summarise_quietly(recipe: Recipe, cfg: RunConfig, state: dict[str, Any], out: Path) -> None:
    if is_writer():
        try:
            summarise(recipe, cfg, state, out)
        except (OSError, ValueError) as e:
            say(f"no summary: {e}")
