"""What a config field declares about itself, read without loading any config: `setting(...)` and the rules
read from the fields of a schema (a dataclass and its nested sections).

    out: Optional[str] = setting(None, resume="free", results=False)
    length_shaping: str = setting("exp_z", choices=LENGTH_SHAPINGS, since="2026-12-04")

- `key_rules` / `keys_where`: each dotted key's rule for reruns (`resume`: fixed | free | flag) and whether it
  changes results (`nemo_lead.config.loading`'s module docstring says what each means);
- `added_keys`: the keys that change results and came after run folders and pipeline states of the schema
  existed (`since=DATE`): a stage recorded before one existed was fingerprinted without it, so while the key is
  at its default the stage is the same one (`nemo_lead.pipeline.runner.same_settings`).

No third-party import: the algorithms' settings (`LeadConfig`) declare theirs here too.
"""

from __future__ import annotations

import dataclasses
import datetime
import typing
from collections.abc import Sequence
from typing import Any

RESUME_RULES = ("fixed", "free", "flag")


def setting(default: Any = dataclasses.MISSING, *, default_factory: Any = dataclasses.MISSING,
            resume: str | None = None, results: bool | None = None, choices: Sequence[Any] = (),
            help: str | None = None, since: str | None = None) -> Any:
    """A config field with its rules for reruns (see the module docstring): `resume` is fixed | free | flag,
    `results=False` marks a key that does not change what a run computes; a rule not given is the section's
    (at the top: fixed, changes results). `choices`: the values the field's check accepts, and `help` a
    description instead of the field's comment, both for the config reference (`nemo_lead.config.reference`).
    `since`: the date (YYYY-MM-DD) a key that changes results was added to a schema whose run folders and
    pipeline states existed before it (`added_keys`)."""
    if resume is not None and resume not in RESUME_RULES:
        raise ValueError(f"resume must be one of {RESUME_RULES}, got {resume!r}")
    if since is not None:
        try:
            datetime.date.fromisoformat(since)
        except (TypeError, ValueError):
            raise ValueError(f"since must be a date YYYY-MM-DD, got {since!r}") from None
        if results is False:
            raise ValueError("since marks a key that changes results; results=False keys need none")
    metadata: dict[str, Any] = {}
    if resume is not None:
        metadata["resume"] = resume
    if results is not None:
        metadata["results"] = results
    if choices:
        metadata["choices"] = tuple(choices)
    if help:
        metadata["help"] = help
    if since is not None:
        metadata["since"] = since
    return dataclasses.field(default=default, default_factory=default_factory, metadata=metadata)


def field_type(cls: type, f: dataclasses.Field) -> Any:
    try:
        hints = typing.get_type_hints(cls)
    except Exception:  # noqa: BLE001 - unresolvable annotations: fall back to the default's type
        hints = {}
    typ = hints.get(f.name, f.type)
    if not isinstance(typ, type) and f.default_factory is not dataclasses.MISSING:
        typ = type(f.default_factory())
    return typ


def key_rules(schema: type, prefix: str = "", inherited: dict | None = None) -> dict[str, dict[str, Any]]:
    """{dotted key: {"resume": fixed|free|flag, "results": bool}} for every field of `schema` and its nested
    sections (a section's rule applies to its keys unless they declare their own)."""
    inherited = inherited or {"resume": "fixed", "results": True}
    out: dict[str, dict[str, Any]] = {}
    for f in dataclasses.fields(schema):
        rule = {**inherited, **{k: v for k, v in f.metadata.items() if k in ("resume", "results")}}
        key = f"{prefix}{f.name}"
        out[key] = rule
        typ = field_type(schema, f)
        if isinstance(typ, type) and dataclasses.is_dataclass(typ):
            out.update(key_rules(typ, key + ".", rule))
    return out


def keys_where(schema: type, *, resume: str | None = None, results: bool | None = None) -> tuple[str, ...]:
    """The dotted keys of `schema` whose rule matches (see `key_rules`)."""
    return tuple(k for k, r in key_rules(schema).items()
                 if (resume is None or r["resume"] == resume) and (results is None or r["results"] == results))


def added_keys(schema: type, prefix: str = "") -> tuple[tuple[str, str], ...]:
    """(dotted key, date) of every field of `schema` and its nested sections declared with `since=`, oldest
    first (fields of one date in the schema's order)."""
    found: list[tuple[str, str]] = []
    for f in dataclasses.fields(schema):
        key = f"{prefix}{f.name}"
        if "since" in f.metadata:
            found.append((key, f.metadata["since"]))
        typ = field_type(schema, f)
        if isinstance(typ, type) and dataclasses.is_dataclass(typ):
            found.extend(added_keys(typ, key + "."))
    return tuple(sorted(found, key=lambda kd: kd[1]))
