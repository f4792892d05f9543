"""Configuration: OmegaConf structured configs (dataclasses) + YAML files + `key=value` overrides.

Why our own small loader rather than Hydra: hydra-core 1.3.8 conflicts with omegaconf 2.4 (docs/design.md
decision 2). What it adds over plain `OmegaConf.merge`:

- errors that name the file, the line and the dotted key, and suggest the nearest valid key
  (`unknown key 'rollout.temprature' (did you mean 'rollout.temperature'?)`);
- `_base_: other.yaml` (a path or a list, relative to the file) to build recipes on top of defaults;
- presets: a nested dataclass with a `preset` field and a `from_preset(name)` classmethod (for example
  `LeadConfig`) starts from that preset's values, and the keys the user set explicitly win over it.
  `lead.preset=grpo_length lead.alpha=0.1` means "the grpo_length ablation, with alpha 0.1".

Order of precedence (later wins): dataclass defaults < preset values < YAML files in the order given
< command-line overrides.

What a key means for reruns is declared once, on its field (`setting(..., resume=, results=, since=)`,
`nemo_lead.config.fields`), and read by `key_rules`: whether a run folder may continue with a changed value (`free`: always, e.g. `steps`;
`flag`: when the user says so with `--allow-change KEY`, e.g. the learning rate; `fixed`: never) and whether
the value changes what a run computes (`results=False`: progress output, TensorBoard, grader processes,
checkpoint cadence), which the pipeline's stage fingerprints and the reproduce commands leave out.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib.resources
import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from nemo_lead.config.dotted import lookup

T = TypeVar("T")

BASE_KEY = "_base_"


class ConfigError(ValueError):
    """A configuration problem, with a message that says where (file:line, key) and what to do.

    Also as fields, for callers that re-point the message (the pipeline names a recipe's line): `where`
    ("file:line", "command line" or None), `key` (the dotted key, or None for a check across keys),
    `reason` (the message without the location) and `check` (True: the values parse, but the config class's
    own checks refused them, e.g. a required key is missing)."""

    def __init__(self, message: str, *, where: str | None = None, key: str | None = None,
                 reason: str | None = None, check: bool = False):
        super().__init__(message)
        self.where, self.key, self.reason, self.check = where, key, reason if reason is not None else message, check


# ----------------------------------------------------------------------------- what a key is for
# keys users type from other frameworks, and the key each means here (the first that the schema has)
COMMON_KEYS = {
    "lr": ("actor.optim.lr",), "learning_rate": ("actor.optim.lr",), "lr_warmup": ("actor.optim.lr_warmup_steps",),
    "warmup_steps": ("actor.optim.lr_warmup_steps",), "weight_decay": ("actor.optim.weight_decay",),
    "grad_clip": ("actor.optim.clip_grad",), "max_grad_norm": ("actor.optim.clip_grad",),
    "batch_size": ("prompts_per_step", "global_batch"), "train_batch_size": ("prompts_per_step", "global_batch"),
    "max_tokens": ("rollout.max_tokens", "sampling.max_tokens"),
    "max_new_tokens": ("rollout.max_tokens", "sampling.max_tokens"),
    "max_response_length": ("rollout.max_tokens", "sampling.max_tokens"),
    "temperature": ("rollout.temperature", "sampling.temperature"), "top_p": ("rollout.top_p", "sampling.top_p"),
    "n": ("rollout.n", "sampling.n"), "num_generations": ("rollout.n", "sampling.n"),
    "group_size": ("rollout.n", "sampling.n"), "n_samples": ("rollout.n", "sampling.n"),
    "max_seq_len": ("data.max_seq_len",), "max_length": ("data.max_seq_len",),
    "model": ("actor.model",), "model_path": ("actor.model", "model"), "tp": ("actor.tp",), "pp": ("actor.pp",),
    "tensor_parallel_size": ("actor.tp", "tp"), "pipeline_parallel_size": ("actor.pp", "pp"),
    "precision": ("actor.precision",), "dtype": ("actor.precision", "precision"), "data": ("data.path",),
    "kl_coef": ("lead.kl_coeff",), "kl_coeff": ("lead.kl_coeff",), "beta": ("lead.kl_coeff",),
    # the policy ratio's clip (TRL's epsilon / epsilon_high, verl's clip_ratio_low / high), not gradient clipping
    "epsilon": ("lead.clip_eps_low",), "clip_range": ("lead.clip_eps_low",), "clip_ratio": ("lead.clip_eps_low",),
    "clip_ratio_low": ("lead.clip_eps_low",), "epsilon_high": ("lead.clip_eps_high",),
    "clip_ratio_high": ("lead.clip_eps_high",), "preset": ("lead.preset",),
    "output_dir": ("out",), "save_steps": ("save_every",), "max_steps": ("steps",), "total_steps": ("steps",),
}

# keys renamed when their unit changed or their name did not say it: old leaf -> (the new leaf, how to convert);
# refused, not mapped, so that a value in the old unit never passes silently
RENAMED_KEYS = {
    "kv_cache_gb": ("kv_cache_gib", "GiB (2^30 bytes) like plan.gpu_memory_gib and SLURM's --mem, not GB (1e9): "
                                    "kv_cache_gib = kv_cache_gb x 0.9313 (77 GB = 71.7 GiB)"),
    "gpu_memory_gb": ("gpu_memory_gib", "GiB (2^30 bytes) as before: the same number, named for its unit"),
    "reserve_gb": ("reserve_gib", "GiB (2^30 bytes) as before: the same number, named for its unit"),
}


def drop_keys(data: dict, keys: Iterable[str]) -> dict:
    """A copy of the nested mapping `data` without the dotted `keys`."""
    out = {k: (drop_keys(v, [x[len(k) + 1:] for x in keys if x.startswith(k + ".")]) if isinstance(v, dict) else v)
           for k, v in data.items() if k not in keys}
    return out


# ----------------------------------------------------------------------------- locations
def repo_root() -> Path:
    """The folder above the package: the checkout in an editable install (bench/, scripts/, tests/)."""
    return Path(__file__).resolve().parents[2]


def package_data(name: str) -> Path:
    """A data folder shipped inside the package (`recipes`, `conf`): found the same way in a checkout and in a
    wheel install, through importlib.resources (the checkout's top-level `recipes/` and `conf/` link here)."""
    return Path(str(importlib.resources.files("nemo_lead").joinpath(name)))


def conf_dir() -> Path:
    """Default-config folder: $NEMO_LEAD_CONF, else the package's `conf/` (model presets under conf/model)."""
    return Path(os.environ.get("NEMO_LEAD_CONF", package_data("conf")))


# ----------------------------------------------------------------------------- one source of settings
@dataclasses.dataclass
class _Layer:
    """One source of user settings: a YAML file or the command line, kept for error messages."""

    data: dict
    source: str  # "path/to/file.yaml" or "command line"
    lines: dict[str, int]  # dotted key -> 1-based line in the file (empty for the command line)

    def where(self, key: str) -> str:
        line = self.lines.get(key)
        if line is None:  # a parent key may be known when the leaf is not
            parts = key.split(".")
            for i in range(len(parts) - 1, 0, -1):
                line = self.lines.get(".".join(parts[:i]))
                if line is not None:
                    break
        return f"{self.source}:{line}" if line is not None else self.source


def _key_lines(node: yaml.Node, prefix: str = "") -> dict[str, int]:
    out: dict[str, int] = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            key = f"{prefix}{k.value}"
            out[key] = k.start_mark.line + 1
            out.update(_key_lines(v, key + "."))
    return out


def _read_yaml(path: Path) -> list[_Layer]:
    """A YAML file and, first, the files named by its `_base_` key (recursively)."""
    if not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    text = path.read_text()
    try:
        data = yaml.safe_load(text) or {}
        node = yaml.compose(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise ConfigError(f"{where}: invalid YAML: {getattr(e, 'problem', e)}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of keys, got {type(data).__name__}")
    layers: list[_Layer] = []
    bases = data.pop(BASE_KEY, [])
    for base in [bases] if isinstance(bases, str) else bases:
        layers.extend(_read_yaml((path.parent / base).resolve()))
    layers.append(_Layer(data=data, source=str(path), lines=_key_lines(node) if node else {}))
    return layers


# what YAML 1.1 (PyYAML) reads as a base-60 number: 20:00:00 -> 72000, 1:30 -> 90
SEXAGESIMAL = re.compile(r"[-+]?[0-9][0-9_]*(:[0-5]?[0-9])+(\.[0-9_]*)?")


def as_overrides(data: dict[str, Any], prefix: str = "") -> list[str]:
    """{"lead": {"alpha": 0.1}, "steps": 5} -> ["lead.alpha=0.1", "steps=5"]: `key=value` lines that
    `load_config` reads back as the same values (the inverse of the override parser). A string is written
    as it is when YAML reads it back as that string, quoted (JSON is YAML) when it would not (`"1e-3"`,
    `"true"`, `""`); other values as JSON."""
    out: list[str] = []
    for key, value in data.items():
        if isinstance(value, dict) and value:
            out += as_overrides(value, f"{prefix}{key}.")
        elif isinstance(value, str) and value != "" and _reads_back(value):
            out.append(f"{prefix}{key}={value}")
        else:
            out.append(f"{prefix}{key}={json.dumps(value)}")
    return out


def _reads_back(text: str) -> bool:
    try:
        return yaml.safe_load(text) == text
    except yaml.YAMLError:
        return False


def _parse_overrides(overrides: Sequence[str]) -> _Layer:
    data: dict = {}
    for item in overrides:
        if "=" not in item or item.startswith("="):
            raise ConfigError(f"override {item!r} is not of the form key=value (e.g. lead.alpha=0.1)")
        key, raw = item.split("=", 1)
        try:
            value = yaml.safe_load(raw) if raw != "" else ""
        except yaml.YAMLError:
            value = raw
        if SEXAGESIMAL.fullmatch(raw.strip()):  # time=20:00:00 is a time, not YAML 1.1's base-60 number 72000
            value = raw.strip()
        node = data
        parts = key.strip().split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {item!r} sets a key below {p!r}, which was given a value")
        node[parts[-1]] = value
    return _Layer(data=data, source="command line", lines={})


# ----------------------------------------------------------------------------- schema checks
def _valid_keys(cfg: DictConfig, prefix: str = "") -> list[str]:
    keys = []
    for k in cfg.keys():
        full = f"{prefix}{k}"
        keys.append(full)
        child = cfg._get_node(k)
        if isinstance(child, DictConfig) and OmegaConf.get_type(child) not in (dict, None):
            keys.extend(_valid_keys(child, full + "."))
    return keys


def _suggest(key: str, valid: list[str]) -> str:
    """The hint after "unknown key 'KEY'": the key it stands for (`COMMON_KEYS`), else up to three nearest
    keys, ranked by how alike their last parts and then their whole dotted names are."""
    leaf = key.rsplit(".", 1)[-1]
    if leaf in RENAMED_KEYS:
        new, how = RENAMED_KEYS[leaf]
        return f": renamed to '{key[: len(key) - len(leaf)]}{new}', in {how}"
    for meant in COMMON_KEYS.get(leaf, ()):
        if meant in valid:
            return f" (did you mean '{meant}'?)"
    parent = key.rpartition(".")[0]
    scored = []
    for v in valid:
        if key.startswith(v + "."):  # the section the key is in is no suggestion
            continue
        last = v.rsplit(".", 1)[-1]
        score = difflib.SequenceMatcher(None, leaf, last).ratio()
        if min(len(leaf), len(last)) >= 3 and (leaf in last or last in leaf):
            score = max(score, 0.7)
        if v.rpartition(".")[0] == parent:
            score += 0.1  # the same section: most typos are in the last part
        else:  # a typo in the section's name: the whole dotted names alike
            score = max(score, difflib.SequenceMatcher(None, key, v).ratio() - 0.05)
        scored.append((score, v))
    ranked = [(score, v) for score, v in sorted(scored, key=lambda t: -t[0]) if score >= 0.6][:3]
    best = [v for _, v in ranked]
    if len(best) == 1 or (best and ranked[0][0] - ranked[1][0] >= 0.09):
        return f" (did you mean '{best[0]}'?)"
    if best:
        return f" (did you mean one of {', '.join(repr(b) for b in best)}?)"
    return "; --print-config lists every key"


def _check_keys(data: dict, schema: DictConfig, layer: _Layer, prefix: str = "",
                root_keys: list[str] | None = None) -> None:
    """Unknown keys and dicts given where a value is expected (and back) fail here, naming the key."""
    open_dict = OmegaConf.get_type(schema) in (dict, None)
    if root_keys is None:
        root_keys = _valid_keys(schema, prefix)
    for k, v in data.items():
        full = f"{prefix}{k}"
        if k not in schema:
            if open_dict:
                continue
            reason = f"unknown key '{full}'{_suggest(full, root_keys)}"
            raise ConfigError(f"{layer.where(full)}: {reason}", where=layer.where(full), key=full, reason=reason)
        child = schema._get_node(k)
        if isinstance(child, DictConfig) and OmegaConf.get_type(child) not in (dict, None):
            if not isinstance(v, dict):
                reason = f"key '{full}' is a section; give it a mapping, not {v!r}"
                raise ConfigError(f"{layer.where(full)}: {reason}", where=layer.where(full), key=full, reason=reason)
            _check_keys(v, child, layer, full + ".", root_keys)


# ----------------------------------------------------------------------------- presets
def _preset_fields(cls: type, prefix: str = "") -> dict[str, type]:
    """Dotted paths of nested dataclass fields whose class offers `from_preset` (and the class)."""
    out = {}
    for f in dataclasses.fields(cls):
        typ = f.type if isinstance(f.type, type) else None
        if typ is None and f.default_factory is not dataclasses.MISSING:  # string annotations
            typ = type(f.default_factory())
        if typ is not None and dataclasses.is_dataclass(typ):
            path = f"{prefix}{f.name}"
            if hasattr(typ, "from_preset") and any(g.name == "preset" for g in dataclasses.fields(typ)):
                out[path] = typ
            out.update(_preset_fields(typ, path + "."))
    return out


# ----------------------------------------------------------------------------- entry point
def load_config(
    schema: type[T],
    files: Iterable[str | os.PathLike] = (),
    overrides: Sequence[str] = (),
    *,
    validate: bool = True,
) -> T:
    """Build a `schema` instance from YAML `files` (in order) and `key=value` `overrides`.

    Raises ConfigError naming file, line and key for unknown keys, wrong types, bad values and bad YAML.
    `validate=False`: the merged settings (an OmegaConf DictConfig) without the dataclasses' own checks,
    e.g. to show the defaults of a command whose required keys are not given yet.
    """
    layers: list[_Layer] = []
    for f in files:
        layers.extend(_read_yaml(Path(f)))
    layers.append(_parse_overrides(overrides))

    base = OmegaConf.structured(schema)
    for layer in layers:
        _check_keys(layer.data, base, layer)

    # presets: the last layer that names one wins; its values become the base of that section
    for path, cls in _preset_fields(schema).items():
        name = None
        for layer in layers:
            value = lookup(layer.data, path + ".preset", None)
            name = value if value is not None else name
        if name is not None:
            try:
                preset_obj = cls.from_preset(name)
            except ValueError as e:
                src = next(la for la in reversed(layers) if lookup(la.data, path + ".preset", None) is not None)
                where, reason = src.where(path + ".preset"), f"{path}.preset: {e}"
                raise ConfigError(f"{where}: {reason}", where=where, key=f"{path}.preset", reason=reason) from None
            OmegaConf.update(base, path, OmegaConf.structured(preset_obj), merge=False)

    cfg = base
    for layer in layers:
        try:
            cfg = OmegaConf.merge(cfg, OmegaConf.create(layer.data))
        except OmegaConfBaseException as e:
            key = e.full_key or "?"
            first = str(e).splitlines()[0]
            reason = f"key '{key}': {first}"
            raise ConfigError(f"{layer.where(key)}: {reason}", where=layer.where(key), key=e.full_key or None,
                              reason=reason) from None
    if not validate:
        return cfg  # type: ignore[return-value]
    try:
        obj = OmegaConf.to_object(cfg)
    except (OmegaConfBaseException, ValueError, TypeError) as e:
        key = getattr(e, "full_key", None)
        first = str(e).splitlines()[0]
        reason = f"invalid configuration{f' at key {key!r}' if key else ''}: {first}"
        raise ConfigError(reason, key=key or None, reason=first, check=True) from None
    return obj  # type: ignore[return-value]


def to_yaml(obj: Any) -> str:
    """The resolved configuration as YAML (what a run folder stores as config.yaml)."""
    return OmegaConf.to_yaml(obj if isinstance(obj, DictConfig) else OmegaConf.structured(obj))
