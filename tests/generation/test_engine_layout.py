"""engine.tp / engine.pp: today the engine decodes on the model's own modules, so they may only say so
(`actor`, the default) or repeat the model's layout; anything else is an error before a job starts, naming
both values (an engine layout of its own is not implemented yet)."""

import pytest

from nemo_lead.config import ConfigError, load_config
from nemo_lead.eval.config import EvalConfig
from nemo_lead.generation import EngineConfig, check_engine_layout
from nemo_lead.generation.command import GenerateConfig
from nemo_lead.training.rl_config import RLConfig

RL = ["out=x", "data.path=x", "steps=1", "actor.model=tiny-qwen2", "actor.tp=2", "actor.pp=1"]


def test_actor_or_the_actors_own_numbers_are_accepted():
    assert (load_config(RLConfig, [], RL).engine.tp, load_config(RLConfig, [], RL).engine.pp) == ("actor", "actor")
    cfg = load_config(RLConfig, [], [*RL, "engine.tp=2", "engine.pp=1"])
    assert (cfg.engine.tp, cfg.engine.pp) == ("2", "1")
    g = load_config(GenerateConfig, [], ["model=tiny-qwen2", "prompts=[hi]", "tp=2", "engine.tp=2"])
    assert g.engine.tp == "2"


def test_another_layout_is_an_error_naming_both_values():
    with pytest.raises(ConfigError, match=r"engine.tp=1 differs from actor.tp=2: .*not implemented yet: set "
                                          r"engine.tp=actor or engine.tp=2"):
        load_config(RLConfig, [], [*RL, "engine.tp=1"])
    with pytest.raises(ConfigError, match=r"engine.pp=2 differs from actor.pp=1"):
        load_config(RLConfig, [], [*RL, "engine.pp=2"])
    with pytest.raises(ConfigError, match=r"engine.tp=1 differs from tp=2"):
        load_config(EvalConfig, [], ["model=tiny-qwen2", "tp=2", "engine.tp=1"])
    with pytest.raises(ConfigError, match=r"engine.pp=2 differs from pp=1"):
        load_config(GenerateConfig, [], ["model=tiny-qwen2", "prompts=[hi]", "engine.pp=2"])


def test_values_that_are_no_layout_and_trtllm_are_refused():
    for bad in ("auto", "0", "two"):
        with pytest.raises(ValueError, match=rf"engine.tp must be actor or the model's TP .*got '{bad}'"):
            EngineConfig(tp=bad)
    with pytest.raises(ValueError, match="engine.kind=trtllm runs one TP1 copy of the model per GPU"):
        check_engine_layout(EngineConfig(kind="trtllm", tp="1"), tp=1, pp=1)
    check_engine_layout(EngineConfig(kind="trtllm"), tp=2, pp=1)  # actor: nothing to check
