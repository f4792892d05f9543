"""The config reference: descriptions read from the dataclasses' source, allowed values from the tuples the
checks use, the `--print-config --explain` and `nemo-lead config` output, and docs/config.md kept current."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from omegaconf import MISSING

from nemo_lead.algorithms import LeadConfig
from nemo_lead.algorithms.config import ADVANTAGE_ESTIMATORS
from nemo_lead.cli import command_schemas, main
from nemo_lead.config.fields import setting
from nemo_lead.config.reference import (
    REGENERATE,
    class_field_help,
    explain,
    markdown,
    reference,
)
from nemo_lead.training.rl.config import RLConfig

DOCS = Path(__file__).resolve().parents[2] / "docs"


@dataclass
class Inner:
    depth: int = 3  # how deep


@dataclass
class Sample:
    # --- a section header, no description ---
    plain: int = 1  # after the field
    # above the field,
    # two lines
    above: str = "x"  # and after it
    doc: float = 0.5
    """A docstring under the field
    (megatron-core's style)."""
    bare: bool = False
    mode: str = setting("a", choices=("a", "b"), resume="free")  # what mode
    helped: int = setting(2, help="from help=", results=False)  # this comment is not used
    inner: Inner = field(default_factory=Inner)  # a nested section
    required: int = MISSING  # a key without a default


def test_descriptions_come_from_comments_docstrings_and_help():
    helps = class_field_help(Sample)
    assert helps["plain"] == "after the field"
    assert helps["above"] == "above the field, two lines and after it"
    assert helps["doc"] == "A docstring under the field (megatron-core's style)."
    assert helps["bare"] == ""
    by_key = {e.key: e for e in reference(Sample)}
    assert by_key["helped"].help == "from help="
    assert by_key["mode"].choices == ("a", "b") and by_key["mode"].resume == "free"
    assert by_key["helped"].results is False and by_key["helped"].resume == "fixed"
    assert by_key["inner"].type == "section" and by_key["inner"].help == "a nested section"
    assert by_key["inner.depth"].default == 3 and by_key["inner.depth"].help == "how deep"
    assert by_key["required"].default == "???"
    assert list(by_key) == ["plain", "above", "doc", "bare", "mode", "helped", "inner", "inner.depth", "required"]


def test_inherited_fields_read_their_own_class():
    by_key = {e.key: e for e in reference(RLConfig)}
    assert by_key["keep_last"].help.startswith("complete checkpoints kept")  # declared on RunSettings
    assert by_key["actor.optim.lr"].resume == "flag"
    assert by_key["rollout.n"].default == 8


def test_allowed_values_are_the_ones_the_checks_accept():
    by_key = {e.key: e for e in reference(RLConfig)}
    assert by_key["lead.advantage_estimator"].choices == ADVANTAGE_ESTIMATORS
    lead_choices = {e.key[5:]: e.choices for e in by_key.values() if e.key.startswith("lead.") and e.choices
                    and "." not in e.key[5:]}
    assert len(lead_choices) >= 9
    for name, allowed in lead_choices.items():
        with pytest.raises(ValueError, match=f"lead.{name}='bogus' is not one of"):
            LeadConfig(**{name: "bogus"})
        for value in allowed:
            try:
                LeadConfig(**{name: value})
            except ValueError as e:  # another key's check may need a partner value; never this key's domain
                assert "is not one of" not in str(e), (name, value, e)


def test_explain_marks_the_values_in_use(capsys):
    assert main(["rl", "--print-config", "--explain", "--data", "aime24", "--out", "x", "lead.alpha=0.1"]) == 0
    out = capsys.readouterr().out
    assert "lead.alpha = 0.05  [float]  (set: 0.1)" in out
    assert "lead.advantage_estimator = grpo  [str]\n    one of: grpo | dr_grpo | dgpo | rloo" in out
    assert "actor.optim.lr = 1e-06  [float]" in out and "(may change on resume with --allow-change)" in out
    assert main(["sft", "--explain"]) == 0  # required keys missing: the reference anyway, and what is missing
    captured = capsys.readouterr()
    assert "actor.model = null  [str or null]" in captured.out and "not runnable as given" in captured.err
    text = explain(Sample, {"plain": 1, "mode": "b"})
    assert "mode = a  [str]  (set: b)\n    one of: a | b\n    what mode\n    (may change on resume)" in text
    assert "plain = 1  [int]\n    after the field\n" in text


def test_config_command_prints_one_command_or_fails_naming_the_choices(capsys, tmp_path):
    assert main(["config", "sft"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("# nemo-lead sft\n") and "data.overlong = drop  [str]\n    one of: drop | truncate" in out
    assert "# nemo-lead rl" not in out
    with pytest.raises(ValueError, match="command must be one of demo, sft, rl"):
        command_schemas("nope")
    assert main(["config", "nope"]) == 2
    assert "nemo-lead config: command must be one of demo, sft, rl" in capsys.readouterr().err


def test_docs_config_md_is_current():
    expected = markdown(command_schemas())
    current = (DOCS / "config.md").read_text() if (DOCS / "config.md").exists() else ""
    assert current == expected, f"docs/config.md is stale: regenerate it with `{REGENERATE}`"
