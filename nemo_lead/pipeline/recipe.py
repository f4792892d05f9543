"""Recipe files: reading the YAML, `_base_` includes, and `${...}` references.

A recipe is a list of stages run in order, plus named paths users override:

    description: GRPO-LEAD 14B
    paths:                                   # keys with clear names; `nemo-lead run R paths.base_model=DIR`
      base_model: models/DeepSeek-R1-Distill-Qwen-14B
    hardware: {gpu: h100, gpus_per_node: 8}  # optional: what it is sized for (`submit` plans on it)
    presets: {base_model: r1-distill-qwen-14b}  # optional: conf/model shapes of paths a login node cannot read
    stages:
      - name: sft                            # unique; the stage folder is OUT/stages/<name>/
        kind: sft                            # prepare | select | distill | sft | rl | eval (see config.py)
        slurm: {nodes: 2, gpus_per_node: 8, time: "24:00:00"}   # optional; read by `nemo-lead submit` only
        actor: {model: "${paths.base_model}"}                   # the kind's own keys (SFTConfig here)
        data: {path: "${stage:distill.traces}"}                 # an output of an earlier stage

References inside string values: `${paths.KEY}` (the recipe's paths, after overrides), `${stage:NAME.OUTPUT}`
(an output of an earlier stage: `checkpoint`, `run`, `data`, `traces`, ... per kind) and `${out}` (the run
folder). A whole-string reference is replaced by the value; references inside a longer string are
substituted as text.

`_base_: other.yaml` (relative to the file) starts from another recipe: `paths` merge key by key, and a
stage whose `name` is already in the base merges into it (nested mappings key by key; `kind` may not
change); other stages are appended. So one rung of an ablation ladder is its base plus a changed preset.

`hardware` names the GPUs the recipe's layouts were chosen for, so that `nemo-lead submit` plans memory,
host and time on them when its command line names none (`plan.gpu` wins). `presets` maps a `paths` key to the
conf/model preset of the same shape: when the path is not readable where `submit` runs (a login node that
does not mount the models), the plan reads the preset instead, and says so. Neither changes what a job runs.

Every key remembers the file and line it came from, so that errors name them.
"""

from __future__ import annotations

import copy
import difflib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from nemo_lead.config.loading import BASE_KEY, ConfigError, package_data

TOP_KEYS = ("description", "paths", "hardware", "presets", "stages")
HARDWARE_KEYS = ("gpu", "gpus_per_node")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
REF_RE = re.compile(r"\$\{([^}]*)\}")


def recipes_dir() -> Path:
    """The shipped recipes (package data; the checkout's top-level recipes/ links to it)."""
    return package_data("recipes")


def find_recipe(spec: str) -> Path:
    """A recipe file: a path, or the name of one in recipes/ (`demo`, `lead-14b`, ...)."""
    path = Path(spec).expanduser()
    if path.is_file():
        return path.resolve()
    for candidate in (recipes_dir() / spec, recipes_dir() / f"{spec}.yaml"):
        if candidate.is_file():
            return candidate.resolve()
    names = sorted(p.stem for p in recipes_dir().glob("*.yaml"))
    hint = difflib.get_close_matches(Path(spec).stem if spec.endswith(".yaml") else spec, names, n=3)
    raise ConfigError(f"recipe {spec!r} is neither a file nor one of recipes/"
                      + (f" (did you mean {' or '.join(repr(h) for h in hint)}?)" if hint else "")
                      + f"; the recipes: {', '.join(names)}")


@dataclass
class StageSpec:
    """One stage as the recipe writes it (references not yet resolved)."""

    name: str
    kind: str
    settings: dict[str, Any]  # the kind's own keys
    slurm: dict[str, Any] = field(default_factory=dict)
    where: dict[str, str] = field(default_factory=dict)  # dotted key -> "file:line"
    source: str = ""  # "file:line" of the stage's `- name:` entry

    def location(self, key: str) -> str:
        parts = key.split(".")
        for i in range(len(parts), 0, -1):
            hit = self.where.get(".".join(parts[:i]))
            if hit:
                return hit
        return self.source


@dataclass
class Recipe:
    path: Path
    description: str
    paths: dict[str, Any]
    stages: list[StageSpec]
    path_where: dict[str, str] = field(default_factory=dict)
    hardware: dict[str, Any] = field(default_factory=dict)  # gpu, gpus_per_node: what the recipe is sized for
    presets: dict[str, str] = field(default_factory=dict)  # paths key -> the conf/model preset of its shape

    def stage(self, name: str) -> StageSpec:
        for s in self.stages:
            if s.name == name:
                return s
        raise ConfigError(f"{self.path}: no stage named {name!r}; stages: {', '.join(s.name for s in self.stages)}")


# ----------------------------------------------------------------------------- reading
def _lines(node: yaml.Node, source: str, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = f"{prefix}{k.value}"
            out[key] = f"{source}:{k.start_mark.line + 1}"
            out.update(_lines(v, source, key + "."))
    return out


def _merge(base: dict, top: dict) -> dict:
    out = dict(base)
    for k, v in top.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else copy.deepcopy(v)
    return out


def _parse(path: Path) -> tuple[Any, yaml.Node | None]:
    """The document and its node tree (for line numbers), from one pass of the YAML parser."""
    loader = yaml.SafeLoader(path.read_text())
    try:
        node = loader.get_single_node()
        return (loader.construct_document(node) if node is not None else None) or {}, node
    except yaml.MarkedYAMLError as e:
        line = f":{e.problem_mark.line + 1}" if e.problem_mark else ""
        raise ConfigError(f"{path}{line}: invalid YAML: {e.problem}") from None
    finally:
        loader.dispose()


def read_recipe(path: str | Path, _seen: tuple[Path, ...] = ()) -> Recipe:
    """Parse a recipe file (and its `_base_`); structural errors name the file and line."""
    path = Path(path).resolve()
    if path in _seen:
        raise ConfigError(f"{path}: `_base_` includes form a cycle")
    if not path.is_file():
        raise ConfigError(f"recipe file not found: {path}")
    data, node = _parse(path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a recipe is a mapping with keys {', '.join(TOP_KEYS)}")
    top = _lines(node, str(path)) if node is not None else {}
    for key in data:
        if key not in (*TOP_KEYS, BASE_KEY):
            hint = difflib.get_close_matches(str(key), TOP_KEYS, n=1)
            raise ConfigError(f"{top.get(key, path)}: unknown recipe key {key!r}"
                              + (f" (did you mean {hint[0]!r}?)" if hint else f"; recipe keys: {', '.join(TOP_KEYS)}"))

    base_spec = data.get(BASE_KEY)
    recipe = (read_recipe(path.parent / base_spec, (*_seen, path)) if base_spec
              else Recipe(path=path, description="", paths={}, stages=[]))
    recipe.path = path
    if "description" in data:
        recipe.description = str(data["description"] or "")
    paths = data.get("paths") or {}
    if not isinstance(paths, dict):
        raise ConfigError(f"{top.get('paths', path)}: `paths` must be a mapping of names to paths")
    for k, v in paths.items():
        if isinstance(v, (dict, list)):
            raise ConfigError(f"{top.get('paths.' + str(k), path)}: paths.{k} must be one value, not {type(v).__name__}")
        recipe.paths[str(k)] = v
        recipe.path_where[str(k)] = top.get(f"paths.{k}", str(path))

    _read_hardware(recipe, data, top, path)

    stages = data.get("stages", [])
    if not isinstance(stages, list):
        raise ConfigError(f"{top.get('stages', path)}: `stages` must be a list of stages")
    items = node.value if node is not None else []
    stage_nodes = next((v.value for k, v in items if k.value == "stages" and isinstance(v, yaml.SequenceNode)), [])
    for i, raw in enumerate(stages):
        snode = stage_nodes[i] if i < len(stage_nodes) else None
        source = f"{path}:{snode.start_mark.line + 1}" if snode is not None else str(path)
        where = _lines(snode, str(path)) if snode is not None else {}
        _add_stage(recipe, raw, source, where)
    if not recipe.stages:
        raise ConfigError(f"{path}: the recipe has no stages")
    return recipe


def _read_hardware(recipe: Recipe, data: dict, top: dict[str, str], path: Path) -> None:
    """`hardware` and `presets` (merged key by key over a `_base_`'s), checked for their shape here; the GPU's
    name and the presets' are checked where they are used (`nemo_lead.launch.sizes`)."""
    hardware = data.get("hardware") or {}
    if not isinstance(hardware, dict):
        raise ConfigError(f"{top.get('hardware', path)}: `hardware` must be a mapping ({', '.join(HARDWARE_KEYS)})")
    for key, value in hardware.items():
        where = top.get(f"hardware.{key}", path)
        if key not in HARDWARE_KEYS:
            hint = difflib.get_close_matches(str(key), HARDWARE_KEYS, n=1)
            raise ConfigError(f"{where}: unknown key hardware.{key}"
                              + (f" (did you mean 'hardware.{hint[0]}'?)" if hint else f"; it takes {', '.join(HARDWARE_KEYS)}"))
        if key == "gpus_per_node" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
            raise ConfigError(f"{where}: hardware.gpus_per_node must be an integer >= 1, got {value!r}")
        if key == "gpu" and not isinstance(value, str):
            raise ConfigError(f"{where}: hardware.gpu must be a GPU's name (h100, h200, ...), got {value!r}")
        recipe.hardware[key] = value
    presets = data.get("presets") or {}
    if not isinstance(presets, dict) or not all(isinstance(v, str) for v in presets.values()):
        raise ConfigError(f"{top.get('presets', path)}: `presets` maps paths keys to conf/model preset names")
    for key, value in presets.items():
        if key not in recipe.paths:
            raise ConfigError(f"{top.get(f'presets.{key}', path)}: presets.{key}: the recipe has no paths.{key}; "
                              f"paths: {', '.join(recipe.paths) or 'none'}")
        recipe.presets[str(key)] = value


def _add_stage(recipe: Recipe, raw: Any, source: str, where: dict[str, str]) -> None:
    if not isinstance(raw, dict):
        raise ConfigError(f"{source}: each stage is a mapping with at least `name` and `kind`")
    raw = dict(raw)
    name = raw.pop("name", None)
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise ConfigError(f"{where.get('name', source)}: stage `name` must be letters, digits, '_' or '-' "
                          f"(it names the folder OUT/stages/<name>/), got {name!r}")
    kind = raw.pop("kind", None)
    slurm = raw.pop("slurm", None) or {}
    if not isinstance(slurm, dict):
        raise ConfigError(f"{where.get('slurm', source)}: stage {name!r}: `slurm` must be a mapping "
                          "(nodes, gpus_per_node, time, ...)")
    existing = next((s for s in recipe.stages if s.name == name), None)
    if existing is not None:  # a `_base_` stage refined here
        if kind is not None and kind != existing.kind:
            raise ConfigError(f"{where.get('kind', source)}: stage {name!r} is a {existing.kind!r} stage in the base "
                              f"recipe; its kind cannot change to {kind!r}")
        existing.settings = _merge(existing.settings, raw)
        existing.slurm = _merge(existing.slurm, slurm)
        existing.where.update(where)
        existing.source = source
        return
    if not isinstance(kind, str):
        raise ConfigError(f"{where.get('kind', source)}: stage {name!r} needs a `kind`")
    recipe.stages.append(StageSpec(name=name, kind=kind, settings=raw, slurm=slurm, where=where, source=source))


# ----------------------------------------------------------------------------- references
@dataclass(frozen=True)
class Ref:
    """A parsed `${...}`: kind "paths" (key), "stage" (stage, output) or "out"."""

    kind: str
    key: str = ""
    output: str = ""


def parse_ref(text: str) -> Ref:
    body = text.strip()
    if body == "out":
        return Ref("out")
    if body.startswith("paths.") and len(body) > 6:
        return Ref("paths", body[6:])
    if body.startswith("stage:"):
        name, _, output = body[6:].partition(".")
        if name and output:
            return Ref("stage", name, output)
    raise ConfigError(f"unknown reference ${{{text}}}: use ${{paths.KEY}}, ${{stage:NAME.OUTPUT}} or ${{out}}")


def substitute(value: Any, lookup) -> Any:
    """`value` with each `${...}` replaced by `lookup(Ref)` (recursively through dicts and lists)."""
    if isinstance(value, dict):
        return {k: substitute(v, lookup) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, lookup) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value
    whole = REF_RE.fullmatch(value)
    if whole:
        return lookup(parse_ref(whole.group(1)))
    return REF_RE.sub(lambda m: str(lookup(parse_ref(m.group(1)))), value)
