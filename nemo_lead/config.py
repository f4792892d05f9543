"""Configuration: OmegaConf structured configs (dataclasses) + YAML files + `key=value` overrides.

Why our own small loader rather than Hydra: hydra-core 1.3.8 conflicts with omegaconf 2.4 (DESIGN.md
decision 2). What it adds over plain `OmegaConf.merge`:

- errors that name the file, the line and the dotted key, and suggest the nearest valid key
  (`unknown key 'rollout.temprature' (did you mean 'rollout.temperature'?)`);
- `_base_: other.yaml` (a path or a list, relative to the file) to build recipes on top of defaults;
- presets: a nested dataclass with a `preset` field and a `from_preset(name)` classmethod (for example
  `LeadConfig`) starts from that preset's values, and the keys the user set explicitly win over it.
  `lead.preset=grpo_length lead.alpha=0.1` means "the grpo_length ablation, with alpha 0.1".

Order of precedence (later wins): dataclass defaults < preset values < YAML files in the order given
< command-line overrides.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import yaml
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

T = TypeVar("T")

BASE_KEY = "_base_"


class ConfigError(ValueError):
    """A configuration problem, with a message that says where (file:line, key) and what to do."""


# ----------------------------------------------------------------------------- locations
def repo_root() -> Path:
    """The checkout this package runs from (editable install), used to find `conf/` and `recipes/`."""
    return Path(__file__).resolve().parent.parent


def conf_dir() -> Path:
    """Default-config folder: $NEMO_LEAD_CONF, else `conf/` of the checkout."""
    return Path(os.environ.get("NEMO_LEAD_CONF", repo_root() / "conf"))


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


def _check_keys(data: dict, schema: DictConfig, layer: _Layer, prefix: str = "") -> None:
    """Unknown keys and dicts given where a value is expected (and back) fail here, naming the key."""
    open_dict = OmegaConf.get_type(schema) in (dict, None)
    for k, v in data.items():
        full = f"{prefix}{k}"
        if k not in schema:
            if open_dict:
                continue
            valid = _valid_keys(schema, prefix)
            hint = difflib.get_close_matches(full, valid, n=1, cutoff=0.6)
            msg = f"{layer.where(full)}: unknown key '{full}'"
            msg += f" (did you mean '{hint[0]}'?)" if hint else f"; valid keys here: {', '.join(sorted(valid))}"
            raise ConfigError(msg)
        child = schema._get_node(k)
        if isinstance(child, DictConfig) and OmegaConf.get_type(child) not in (dict, None):
            if not isinstance(v, dict):
                raise ConfigError(f"{layer.where(full)}: key '{full}' is a section; give it a mapping, not {v!r}")
            _check_keys(v, child, layer, full + ".")


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


def _lookup(data: dict, dotted: str) -> Any:
    node: Any = data
    for p in dotted.split("."):
        if not isinstance(node, dict) or p not in node:
            return None
        node = node[p]
    return node


# ----------------------------------------------------------------------------- entry point
def load_config(
    schema: type[T],
    files: Iterable[str | os.PathLike] = (),
    overrides: Sequence[str] = (),
) -> T:
    """Build a `schema` instance from YAML `files` (in order) and `key=value` `overrides`.

    Raises ConfigError naming file, line and key for unknown keys, wrong types, bad values and bad YAML.
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
            value = _lookup(layer.data, path + ".preset")
            name = value if value is not None else name
        if name is not None:
            try:
                preset_obj = cls.from_preset(name)
            except ValueError as e:
                src = next(la for la in reversed(layers) if _lookup(la.data, path + ".preset") is not None)
                raise ConfigError(f"{src.where(path + '.preset')}: {path}.preset: {e}") from None
            OmegaConf.update(base, path, OmegaConf.structured(preset_obj), merge=False)

    cfg = base
    for layer in layers:
        try:
            cfg = OmegaConf.merge(cfg, OmegaConf.create(layer.data))
        except OmegaConfBaseException as e:
            key = e.full_key or "?"
            first = str(e).splitlines()[0]
            raise ConfigError(f"{layer.where(key)}: key '{key}': {first}") from None
    try:
        obj = OmegaConf.to_object(cfg)
    except (OmegaConfBaseException, ValueError, TypeError) as e:
        key = getattr(e, "full_key", None)
        first = str(e).splitlines()[0]
        raise ConfigError(f"invalid configuration{f' at key {key!r}' if key else ''}: {first}") from None
    return obj  # type: ignore[return-value]


def to_yaml(obj: Any) -> str:
    """The resolved configuration as YAML (what a run folder stores as config.yaml)."""
    return OmegaConf.to_yaml(OmegaConf.structured(obj))


def save_config(obj: Any, path: str | os.PathLike) -> None:
    """Write the resolved configuration atomically (temp file, then rename)."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(to_yaml(obj))
    tmp.replace(path)
