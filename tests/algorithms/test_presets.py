"""Presets: the ablation ladder of Table 1 and the authors' code, field by field (docs/design.md, "Paper vs the authors' code")."""

import pytest

from nemo_lead.algorithms import PRESETS, LeadConfig
from nemo_lead.verify import default_region


def test_every_preset_builds_and_names_itself():
    for name in PRESETS:
        cfg = LeadConfig.from_preset(name)
        assert cfg.preset == name


def test_paper_defaults():
    cfg = LeadConfig()
    assert cfg == LeadConfig.paper()
    assert (cfg.alpha, cfg.wrong_reward, cfg.length_reward, cfg.reweighting) == (0.05, -1.0, True, "lead")
    assert (cfg.A, cfg.B, cfg.rho0, cfg.k) == (0.4, 1.5, 0.75, 10.0)
    assert (cfg.clip_eps_low, cfg.clip_eps_high, cfg.kl_coeff, cfg.group_filter) == (0.2, 0.2, 0.0, "none")
    assert cfg.loss_agg == "seq_mean_token_mean"  # 1/G sum_i 1/|o_i| sum_t


def test_table1_ladder_adds_one_part_at_a_time():
    grpo, length, reweight, lead = (LeadConfig.grpo(), LeadConfig.grpo_length(),
                                    LeadConfig.grpo_length_reweight(), LeadConfig.lead())
    assert not grpo.length_reward and grpo.reweighting == "none" and grpo.wrong_reward == 0.0
    assert length.length_reward and length.reweighting == "none" and length.wrong_reward == 0.0
    assert reweight.length_reward and reweight.reweighting == "lead" and reweight.wrong_reward == 0.0
    assert lead.length_reward and lead.reweighting == "lead" and lead.wrong_reward == -1.0


def test_reference_code_deviations():
    cfg = LeadConfig.reference_code()
    assert cfg.length_gate_tokens == 4000 and cfg.length_gate_k == 3 and cfg.length_std == "sample"
    assert cfg.truncated_reward == 0.0 and cfg.repetition_reward == -2.0
    assert cfg.rho_source == "positive_reward" and cfg.group_filter == "reference_code"
    assert cfg.loss_agg == "token_mean" and cfg.entropy_coeff == 0.001 and cfg.kl_coeff == 0.0
    # the classification: the authors' rule, their region, and their repetition check (always on)
    assert cfg.outcome_rule == "reference_code" and cfg.check_repetition
    assert default_region(cfg.outcome_rule) == "before_think"
    stage2 = LeadConfig.reference_code_stage2()
    assert not stage2.length_reward and stage2.check_repetition and stage2.repetition_reward == -2.0
    assert stage2.outcome_rule == "reference_code" and default_region(stage2.outcome_rule) == "before_think"
    assert stage2 == cfg.replace(preset="reference_code_stage2", length_reward=False)


def test_paper_presets_read_the_final_answer():
    for name in PRESETS:
        cfg = LeadConfig.from_preset(name)
        if not name.startswith("reference_code"):
            assert cfg.outcome_rule == "paper" and default_region(cfg.outcome_rule) == "after_think", name
        assert cfg.rollout_correction.mode == "none", name


def test_rl_answer_region_follows_the_preset_unless_set():
    from nemo_lead.config.loading import load_config
    from nemo_lead.training.rl.config import RLConfig

    base = ["data.path=problems.jsonl", "out=runs/x", "actor.model=tiny-qwen2"]
    assert load_config(RLConfig, [], base).resolved_answer_region == "after_think"
    cfg = load_config(RLConfig, [], [*base, "lead.preset=reference_code"])
    assert (cfg.verify.answer_region, cfg.resolved_answer_region) == (None, "before_think")
    cfg = load_config(RLConfig, [], [*base, "lead.preset=reference_code_stage2", "verify.answer_region=after_think"])
    assert cfg.resolved_answer_region == "after_think"
    cfg = load_config(RLConfig, [], [*base, "lead.outcome_rule=reference_code"])
    assert cfg.resolved_answer_region == "before_think"


def test_neighbours():
    assert LeadConfig.dapo().clip_eps_high == 0.28 and LeadConfig.dapo().group_filter == "dynamic_sampling"
    assert LeadConfig.dr_grpo().advantage_estimator == "dr_grpo" and LeadConfig.dr_grpo().loss_agg == "constant_norm"
    assert LeadConfig.dgpo().reweighting == "dgpo_softmax" and LeadConfig.dgpo().dgpo_temperature == 2.0


@pytest.mark.parametrize(
    "bad, match",
    [
        ({"advantage_estimator": "ppo"}, "lead.advantage_estimator='ppo' is not one of"),
        ({"loss_agg": "mean"}, "lead.loss_agg"),
        ({"alpha": -0.1}, "lead.alpha=-0.1 must be >= 0"),
        ({"dual_clip_c": 0.5}, "dual_clip_c"),
        ({"clip_eps_low": 1.0}, "clip_eps_low"),
        ({"overlong_buffer_len": 10}, "max_response_len"),
        ({"preset": "nope"}, "lead.preset"),
        ({"outcome_rule": "authors"}, "lead.outcome_rule"),
    ],
)
def test_invalid_values_name_the_field(bad, match):
    with pytest.raises(ValueError, match=match):
        LeadConfig(**bad)
    with pytest.raises(ValueError, match="unknown LEAD preset"):
        LeadConfig.from_preset("nope")
