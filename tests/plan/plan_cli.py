"""`nemo-lead plan ARGS --json FILE` as the plan tests run it."""

from __future__ import annotations

import json
from pathlib import Path

from nemo_lead.cli import main


def plan_json(tmp_path: Path, *args: str, megatron: bool = True) -> tuple[int, dict]:
    """(exit status, the JSON plan). A recipe's RL stages with the megatron engine by default (`megatron`):
    the figures the tests compute are its own; the recipes take engine.kind=auto (tests/plan/test_vllm_plan.py)."""
    out = tmp_path / "plan.json"
    recipe = megatron and bool(args) and not args[0].startswith("-") and not Path(args[0]).exists()
    rc = main(["plan", *args, *(["engine.kind=megatron"] if recipe else []), "--json", str(out)])
    return rc, json.loads(out.read_text())
