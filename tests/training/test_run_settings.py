"""The run's life reads a small typed protocol of settings (`TrainingSettings`) that both loops' configs
satisfy, and imports neither config (tests/test_imports.py checks that no package circle is left)."""

import ast
from pathlib import Path

import pytest

from nemo_lead.training.actor.config import ActorConfig
from nemo_lead.training.rl.config import RLConfig, RLDataConfig
from nemo_lead.training.run.config import TrainingSettings
from nemo_lead.training.sft.config import SFTConfig, SFTDataConfig

RUN_PACKAGE = Path(__file__).resolve().parents[2] / "nemo_lead" / "training" / "run"


@pytest.mark.parametrize("kind", ["sft", "rl"])
def test_both_configs_are_training_settings(kind):
    actor = ActorConfig(model="tiny")
    cfg = (SFTConfig(actor=actor, out="o", data=SFTDataConfig(path="t.jsonl")) if kind == "sft"
           else RLConfig(actor=actor, out="o", data=RLDataConfig(path="p.jsonl")))
    assert isinstance(cfg, TrainingSettings)
    assert cfg.stop_on_nonfinite is True and cfg.final_checkpoint == "full" and cfg.wandb.enabled is False


def test_sft_stops_on_a_non_finite_loss_without_a_key_for_it():
    from nemo_lead.config.fields import key_rules

    assert "stop_on_nonfinite" not in key_rules(SFTConfig) and "stop_on_nonfinite" in key_rules(RLConfig)


def test_the_run_package_imports_neither_loop():
    imported = set()
    for path in RUN_PACKAGE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                imported.add(node.module)
            elif isinstance(node, ast.Import):
                imported.update(a.name for a in node.names)
    assert not {m for m in imported if m.startswith(("nemo_lead.training.rl", "nemo_lead.training.sft"))}
