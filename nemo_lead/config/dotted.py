"""Nested settings as dotted keys and back: `{"lead": {"alpha": 0.1}}` <-> `{"lead.alpha": 0.1}`.

Config differences, fingerprints, the pipeline's stage overrides, the report's eval flags and the problem
readers' nested fields all speak in dotted keys; these are the one flattening and the one lookup they use.
Any layer may import this module (standard library only).
"""

from __future__ import annotations

from typing import Any

MISSING = object()  # `lookup`'s answer for a key that is not there, when no default is given


def flatten(data: Any, prefix: str = "", *, keep_empty: bool = False) -> dict[str, Any]:
    """Every leaf of nested dicts under its dotted key, in order. An empty dict below the top is a leaf
    (`keep_empty`: the key says "set to {}") or nothing (the default: no settings there)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict) and (value or not keep_empty):
            out.update(flatten(value, f"{prefix}{key}.", keep_empty=keep_empty))
        else:
            out[f"{prefix}{key}"] = value
    return out


def lookup(data: dict, dotted: str, default: Any = MISSING) -> Any:
    """data[dotted] when it is a key itself (a column named with dots), else the value found by following
    the dots into nested dicts; `default` (MISSING unless given) when there is none."""
    if dotted in data:
        return data[dotted]
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node
