"""engine.tp / engine.pp: the engine decodes at the model's own layout (`actor` or the same numbers) or,
in rl, as TP1 x PP1 replicas over any actor layout (engine.tp=1 engine.pp=1: a copy of the weights per
rank); `auto` (the default) is one of the two, chosen before an rl job starts (tests/plan/test_engine_auto.py)
and the model's own layout where it is not chosen; anything else is an error before a job starts, naming
both values."""

import pytest

from nemo_lead.config.loading import ConfigError, load_config
from nemo_lead.eval.config import EvalConfig
from nemo_lead.generation import EngineConfig, check_engine_layout, has_own_layout
from nemo_lead.generation.command import GenerateConfig
from nemo_lead.plan.engine_kinds import engine_layout
from nemo_lead.training.rl.config import RLConfig

RL = ["out=x", "data.path=x", "steps=1", "actor.model=tiny-qwen2", "actor.tp=2", "actor.pp=1"]


def test_actor_or_the_actors_own_numbers_are_accepted():
    default = load_config(RLConfig, [], RL).engine
    assert (default.tp, default.pp) == ("auto", "auto") and not has_own_layout(default, tp=2, pp=1)
    cfg = load_config(RLConfig, [], [*RL, "engine.tp=2", "engine.pp=1"])
    assert (cfg.engine.tp, cfg.engine.pp) == ("2", "1")
    assert not has_own_layout(cfg.engine, tp=2, pp=1)
    g = load_config(GenerateConfig, [], ["model=tiny-qwen2", "prompts=[hi]", "tp=2", "engine.tp=2"])
    assert g.engine.tp == "2"
    e = load_config(EvalConfig, [], ["model=tiny-qwen2", "tp=2"]).engine  # auto: the model's layout
    assert engine_layout(e, tp=2, pp=1) == (2, 1)


def test_tp1_pp1_replicas_are_accepted_in_rl_over_any_actor_layout():
    cfg = load_config(RLConfig, [], [*RL, "engine.tp=1", "engine.refit_bucket_mb=64"])
    assert has_own_layout(cfg.engine, tp=2, pp=1) and cfg.engine.refit_bucket_mb == 64
    pp2 = load_config(RLConfig, [], [*RL[:-2], "actor.tp=1", "actor.pp=2", "engine.pp=1"])
    assert has_own_layout(pp2.engine, tp=1, pp=2)
    check_engine_layout(EngineConfig(tp="1", pp="1"), tp=4, pp=2)
    assert not has_own_layout(EngineConfig(tp="1", pp="1"), tp=1, pp=1)  # the model's own layout: no copy


def test_other_layouts_are_errors_naming_both_values():
    with pytest.raises(ConfigError, match=r"engine.tp=1 engine.pp=actor over actor.tp=2 actor.pp=2: .*replicas at "
                                          r"one stage .*not implemented yet"):
        load_config(RLConfig, [], [*RL[:-1], "actor.pp=2", "engine.tp=1", "engine.pp=actor"])
    with pytest.raises(ConfigError, match=r"engine.tp=3 engine.pp=actor over actor.tp=4 .*b \| actor.tp"):
        load_config(RLConfig, [], [*RL[:-2], "actor.tp=4", "engine.tp=3", "engine.pp=actor"])
    check_engine_layout(EngineConfig(tp="2", pp="actor"), tp=4, pp=1)  # engine TP2 replicas over actor TP4
    with pytest.raises(ConfigError, match=r"engine.tp=actor engine.pp=2 over actor.tp=2 actor.pp=1"):
        load_config(RLConfig, [], [*RL, "engine.tp=actor", "engine.pp=2"])
    with pytest.raises(ConfigError, match=r"engine.tp=1 differs from tp=2: .*implemented for rl only"):
        load_config(EvalConfig, [], ["model=tiny-qwen2", "tp=2", "engine.tp=1"])
    with pytest.raises(ConfigError, match=r"engine.pp=2 differs from pp=1"):
        load_config(GenerateConfig, [], ["model=tiny-qwen2", "prompts=[hi]", "engine.kind=megatron", "engine.pp=2"])
    # auto becomes vllm or megatron at the start: a layout set by number must suit both
    with pytest.raises(ConfigError, match=r"engine.kind=auto may run the vllm engine: engine.pp=2 with engine.kind=vllm"):
        load_config(GenerateConfig, [], ["model=tiny-qwen2", "prompts=[hi]", "pp=2", "engine.pp=2"])
    load_config(GenerateConfig, [], ["model=tiny-qwen2", "prompts=[hi]", "engine.kind=megatron", "pp=2", "engine.pp=2"])
    with pytest.raises(ConfigError, match=r"engine.tp=auto engine.pp=2 over actor.tp=4 actor.pp=1: auto chooses "
                                          r"the model's layout or one stage at a TP dividing actor.tp, and none agrees"):
        load_config(RLConfig, [], [*RL[:-2], "actor.tp=4", "engine.pp=2"])
    with pytest.raises(ConfigError, match=r"rollout.generator_ranks=2 is not implemented yet"):
        load_config(RLConfig, [], [*RL, "engine.tp=1", "rollout.generator_ranks=2"])


def test_values_that_are_no_layout_and_trtllm_are_refused():
    for bad in ("fastest", "0", "two"):
        with pytest.raises(ValueError, match=rf"engine.tp must be auto, actor or a number >= 1 .*got '{bad}'"):
            EngineConfig(tp=bad)
    with pytest.raises(ValueError, match="engine.refit_bucket_mb must be > 0"):
        EngineConfig(refit_bucket_mb=0)
    with pytest.raises(ValueError, match="engine.kind=trtllm runs one TP1 copy of the model per GPU"):
        check_engine_layout(EngineConfig(kind="trtllm", tp="1"), tp=1, pp=1)
    check_engine_layout(EngineConfig(kind="trtllm"), tp=2, pp=1)  # auto: nothing to check
    check_engine_layout(EngineConfig(kind="trtllm", tp="actor"), tp=2, pp=1)
