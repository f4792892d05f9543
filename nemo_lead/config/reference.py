"""The config reference: every key of a command with its default, its allowed values and what it means, read
from the config dataclasses themselves (`nemo-lead CMD --print-config --explain`, `nemo-lead config CMD`,
and docs/config.md, written by `nemo-lead config --markdown --out docs/config.md`).

A setting's description is written once, where its default is (megatron-core keeps it in a docstring under
the field; this project keeps it in comments, which read the same in the source):

    # several lines of comment right above the field ...
    alpha: float = 0.05  # ... and / or one after it on the same line
    beta: float = 0.1
    \"\"\"or a string right under the field (megatron-core's style)\"\"\"

`setting(..., help="...")` overrides all three. Comment lines that open a section (`# --- rewards ---`) are
no description. The allowed values come from `setting(..., choices=TUPLE)`, the tuple the field's check
uses (e.g. `ADVANTAGE_ESTIMATORS`), so the reference cannot drift from what is accepted.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import textwrap
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from omegaconf import OmegaConf

from nemo_lead.config.dotted import lookup
from nemo_lead.config.fields import field_type, key_rules

REGENERATE = "nemo-lead config --markdown --out docs/config.md"


@dataclass(frozen=True)
class Entry:
    """One key of the reference."""

    key: str  # dotted
    type: str  # int, float, str, bool, list, dict, section, or "T or null"
    default: Any  # the value a command starts from ("???" for a required key)
    choices: tuple = ()  # allowed values, when the key takes one of a fixed set
    help: str = ""
    resume: str = "fixed"  # fixed | free | flag (see nemo_lead.config.loading)
    results: bool = True  # False: the key changes no result


# ----------------------------------------------------------------------------- descriptions in the source
def _comments(source: str) -> dict[int, str]:
    """{1-based line: comment text without '#'} for every comment in `source`."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            out[tok.start[0]] = tok.string.lstrip("#").strip()
    return out


def _is_section_header(text: str) -> bool:
    return text.startswith("---") or text.startswith("===") or text.startswith("noqa")


@functools.cache
def class_field_help(cls: type) -> dict[str, str]:
    """{field name: description} for the fields `cls` itself declares (see the module docstring)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # no source (a frozen or generated class)
        return {}
    tree = ast.parse(source)
    comments = _comments(source)
    lines = source.splitlines()
    body = next(n for n in tree.body if isinstance(n, ast.ClassDef)).body
    out: dict[str, str] = {}
    for i, node in enumerate(body):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        nxt = body[i + 1] if i + 1 < len(body) else None
        if (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            out[node.target.id] = " ".join(inspect.cleandoc(nxt.value.value).split())
            continue
        above = []
        line = node.lineno - 1
        while line >= 1 and lines[line - 1].strip().startswith("#"):
            text = comments.get(line, "")
            if _is_section_header(text):
                break
            above.insert(0, text)
            line -= 1
        after = [comments[n] for n in range(node.lineno, node.end_lineno + 1) if n in comments
                 and not _is_section_header(comments[n])]
        out[node.target.id] = " ".join(t for t in [*above, *after] if t)
    return out


def field_help(schema: type, f: dataclasses.Field) -> str:
    """The description of field `f` of `schema`: `setting(help=)`, else what its declaring class says."""
    if f.metadata.get("help"):
        return f.metadata["help"]
    for cls in schema.__mro__:
        if f.name in cls.__dict__.get("__annotations__", {}):
            return class_field_help(cls).get(f.name, "")
    return ""


# ----------------------------------------------------------------------------- the reference of a schema
def _type_name(typ: Any) -> str:
    if isinstance(typ, type):
        return "section" if dataclasses.is_dataclass(typ) else typ.__name__
    text = str(typ).replace("typing.", "")
    if text.startswith("Optional["):
        return f"{_type_name_text(text[9:-1])} or null"
    return _type_name_text(text)


def _type_name_text(text: str) -> str:
    return text.split("[", 1)[0].lower() if "[" in text else text


def _entries(schema: type, defaults: Any, rules: dict, prefix: str) -> list[Entry]:
    out = []
    for f in dataclasses.fields(schema):
        key = f"{prefix}{f.name}"
        typ = field_type(schema, f)
        default = defaults.get(f.name) if isinstance(defaults, dict) else None
        rule = rules.get(key, {"resume": "fixed", "results": True})
        nested = isinstance(typ, type) and dataclasses.is_dataclass(typ)
        out.append(Entry(key=key, type=_type_name(typ), default=None if nested else default,
                         choices=tuple(f.metadata.get("choices", ())), help=field_help(schema, f),
                         resume=rule["resume"], results=rule["results"]))
        if nested:
            out.extend(_entries(typ, default, rules, key + "."))
    return out


def reference(schema: type) -> list[Entry]:
    """Every key of `schema` (nested sections included, in declaration order) with its default, allowed
    values, description and rules for reruns."""
    defaults = OmegaConf.to_container(OmegaConf.structured(schema), resolve=False, throw_on_missing=False)
    return _entries(schema, defaults, key_rules(schema), "")


def _value(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return repr(v) if v == "" else v
    return str(v).replace("'", "")


def _rule_words(e: Entry) -> str:
    words = {"free": "may change on resume", "flag": "may change on resume with --allow-change", "fixed": ""}
    parts = [w for w in (words[e.resume], "" if e.results else "changes no result") if w]
    return "; ".join(parts)


def explain(schema: type, values: Optional[dict] = None) -> str:
    """The reference as text, one key per block; `values` (a resolved config as a nested dict) adds the value
    in use where it differs from the default."""
    lines = []
    for e in reference(schema):
        if e.type == "section":
            lines.append(f"{e.key}:  (section){'  ' + e.help if e.help else ''}")
            continue
        head = f"{e.key} = {_value(e.default)}  [{e.type}]"
        if values is not None:
            current = lookup(values, e.key, _ABSENT)
            if current is not _ABSENT and current != e.default:
                head += f"  (set: {_value(current)})"
        lines.append(head)
        if e.choices:
            lines.append(f"    one of: {' | '.join(_value(c) for c in e.choices)}")
        if e.help:
            lines.extend("    " + t for t in textwrap.wrap(e.help, 104))
        if _rule_words(e):
            lines.append(f"    ({_rule_words(e)})")
    return "\n".join(lines) + "\n"


_ABSENT = object()


def _cell(text: str) -> str:
    """Text for a Markdown table cell: pipes escaped, and `<` so that `</think>` is not read as HTML."""
    return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def markdown(schemas: dict[str, type]) -> str:
    """docs/config.md: one section per command, one table row per key."""
    out = ["# Configuration reference", "",
           "Every key of every command, with its default, the values it accepts and what it means, generated",
           f"from the config dataclasses by `{REGENERATE}` (do not edit by hand: a",
           "test fails when this file is stale). Each command prints its own part with the values in use:",
           "`nemo-lead CMD --print-config --explain [key=value ...]`. How settings combine (files,",
           "`key=value`, presets, `_base_`) is in [training.md](training.md#configuration).", "",
           "Resume: `free` may change when a run continues, `flag` with `--allow-change KEY`, `fixed` never.",
           "Results `no`: the key changes no result (left out of stage fingerprints and reproduce commands).", ""]
    out += ["| command | keys |", "| --- | --- |"]
    out += [f"| [`nemo-lead {name}`](#nemo-lead-{name}) | {sum(e.type != 'section' for e in reference(s))} |"
            for name, s in schemas.items()]
    for name, s in schemas.items():
        doc = inspect.getdoc(s) or ""
        out += ["", f"## nemo-lead {name}", "", f"`{s.__module__}.{s.__qualname__}`"
                + (f": {' '.join(doc.split(chr(10) + chr(10))[0].split())}" if doc else ""), "",
                "| key | default | allowed | resume | results | description |", "| --- | --- | --- | --- | --- | --- |"]
        for e in reference(s):
            if e.type == "section":
                out.append(f"| **`{e.key}`** | | | | | {_cell(e.help)} |")
                continue
            allowed = " \\| ".join(f"`{_value(c)}`" for c in e.choices) if e.choices else _cell(e.type)
            out.append(f"| `{e.key}` | `{_cell(_value(e.default))}` | {allowed} | {e.resume} | "
                       f"{'yes' if e.results else 'no'} | {_cell(e.help)} |")
    return "\n".join(out) + "\n"


# ----------------------------------------------------------------------------- `nemo-lead config`
@dataclass
class ReferenceConfig:
    """`nemo-lead config [COMMAND] [--markdown] [--out FILE]`."""

    command: Optional[str] = None  # the command whose keys to list; None: every command
    markdown: bool = False  # print Markdown tables (docs/config.md) instead of text
    out: Optional[str] = None  # write to this file instead of stdout


def write_reference(cfg: ReferenceConfig, schemas: dict[str, type]) -> int:
    """`nemo-lead config`: the reference of `schemas` ({command: config dataclass}) as text or Markdown."""
    if cfg.markdown:
        text = markdown(schemas)
    else:
        text = "\n".join(f"# nemo-lead {name}\n{explain(s)}" for name, s in schemas.items())
    if cfg.out:
        Path(cfg.out).write_text(text)
    else:
        print(text, end="")
    return 0
