"""Rollout correction: weights against hand-computed ones, masking, metrics, and `none` unchanged bit for bit."""

import math
from dataclasses import dataclass, field

import pytest
import torch

from nemo_lead.algorithms import LeadConfig, policy_loss
from nemo_lead.algorithms.rollout_correction import RolloutCorrectionConfig, correction_weights
from nemo_lead.config.loading import ConfigError, load_config

# two responses, 3 and 2 trained tokens; ratios pi_old / pi_engine chosen by hand, C = 2
RATIOS = [[3.0, 0.6, 1.0], [1.5, 4.0, 1.0]]
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ENGINE = torch.tensor([[-1.0, -2.0, -0.5], [-0.7, -3.0, float("nan")]])  # NaN where masked: ignored
OLD = ENGINE + torch.log(torch.tensor(RATIOS))


def _cfg(mode, level="token", threshold=2.0):
    return LeadConfig.paper().replace(loss_agg="token_mean",
                                      rollout_correction=RolloutCorrectionConfig(mode, level, threshold))


# (mode, level, weights of the 5 trained tokens, truncated/masked tokens, sequences hit)
CASES = [
    ("tis", "token", [2.0, 0.6, 1.0, 1.5, 2.0], 2, 2),  # 3 -> 2, 4 -> 2
    ("seq_tis", "token", [1.8] * 3 + [2.0] * 2, 2, 1),  # products 1.8 and 6 -> 2
    ("mis", "token", [0.0, 0.6, 1.0, 1.5, 0.0], 2, 2),  # 3 and 4 leave [0.5, 2]
    ("mis", "sequence", [1.8] * 3 + [0.0] * 2, 2, 1),  # product 6 leaves it: the whole response
]


@pytest.mark.parametrize("mode, level, expected, tokens_hit, seqs_hit", CASES)
def test_weights_by_hand(mode, level, expected, tokens_hit, seqs_hit):
    cfg = _cfg(mode, level)
    w, hit, seq_hit = correction_weights(OLD, ENGINE, MASK, cfg.rollout_correction)
    on = MASK.bool()
    assert w[on].tolist() == pytest.approx(expected, rel=1e-6)
    assert w[~on].tolist() == [1.0] and not w.requires_grad
    assert int(hit.sum()) == tokens_hit and int(seq_hit.sum()) == seqs_hit and not hit[~on].any()
    # the loss at ratio 1 (logp = old): token mean of -A_i w_it; its gradient is -A_i w_it / 5 per token
    logp = OLD.clone().requires_grad_(True)
    adv = torch.tensor([1.0, -2.0])
    loss, m = policy_loss(logp, OLD, adv, MASK, cfg, rollout_logp=ENGINE)
    a = [1.0] * 3 + [-2.0] * 2
    assert loss.item() == pytest.approx(sum(-ai * wi for ai, wi in zip(a, expected)) / 5, rel=1e-6)
    loss.backward()
    assert logp.grad[on].tolist() == pytest.approx([-ai * wi / 5 for ai, wi in zip(a, expected)], rel=1e-6)
    assert m["rollout_correction/token_frac"].item() == pytest.approx(tokens_hit / 5)
    assert m["rollout_correction/seq_frac"].item() == pytest.approx(seqs_hit / 2)
    assert m["rollout_correction/weight_mean"].item() == pytest.approx(sum(expected) / 5, rel=1e-6)
    assert m["sequences"].item() == 2


def test_weights_carry_no_gradient_on_policy():
    """With old_logprobs=auto the old log-probs are the step's own, detached: w is a constant there too."""
    cfg = _cfg("tis", threshold=1.5)
    logp = OLD.clone().requires_grad_(True)
    loss, _ = policy_loss(logp, logp.detach(), torch.tensor([1.0, 1.0]), MASK, cfg, rollout_logp=ENGINE)
    loss.backward()
    w = [min(r, 1.5) for r in (3.0, 0.6, 1.0, 1.5, 4.0)]
    assert logp.grad[MASK.bool()].tolist() == pytest.approx([-wi / 5 for wi in w], rel=1e-6)


def test_sequence_products_do_not_overflow():
    old = torch.full((1, 4000), -0.1)
    engine = torch.full((1, 4000), -0.2)  # log ratio 0.1 per token: the product is exp(400)
    mask = torch.ones(1, 4000)
    for mode in ("seq_tis", "mis"):
        w, _, seq_hit = correction_weights(old, engine, mask,
                                             RolloutCorrectionConfig(mode, "sequence" if mode == "mis" else "token", 3.0))
        assert torch.isfinite(w).all() and bool(seq_hit[0])
        assert w[0, 0].item() == pytest.approx(3.0 if mode == "seq_tis" else 0.0)


def _random_inputs(seed):
    g = torch.Generator().manual_seed(seed)
    n, t = 6, 11
    logp = (-torch.rand(n, t, generator=g) * 3).requires_grad_(True)
    old = logp.detach() + 0.3 * torch.randn(n, t, generator=g)
    engine = old + 0.2 * torch.randn(n, t, generator=g)
    mask = (torch.rand(n, t, generator=g) > 0.2).float()
    extra = {"ref_logp": old + 0.1 * torch.randn(n, t, generator=g), "entropy": torch.rand(n, t, generator=g)}
    return logp, old, torch.randn(n, generator=g), mask, engine, extra


def _loss_and_grad(cfg, seed, **kw):
    logp, old, adv, mask, engine, extra = _random_inputs(seed)
    loss, m = policy_loss(logp, old, adv, mask, cfg, **extra, **kw)
    loss.backward()
    return loss.detach(), logp.grad, m


@pytest.mark.parametrize("preset", ["paper", "reference_code", "dr_grpo", "dapo"])
def test_none_is_unchanged_bit_for_bit(preset):
    base = LeadConfig.from_preset(preset).replace(kl_coeff=0.05, entropy_coeff=0.01, max_response_len=11)
    loss, grad, m = _loss_and_grad(base, 1)
    # mode none leaves the loss alone whatever the engine's log-probs; they only add the mismatch metrics
    loss2, grad2, m2 = _loss_and_grad(base, 1, rollout_logp=torch.full((6, 11), float("nan")))
    assert torch.equal(loss, loss2) and torch.equal(grad, grad2)
    assert set(m2) - set(m) == {"mismatch/logprob_abs_mean", "mismatch/logprob_abs_max"} and set(m) <= set(m2)
    assert not any(k.startswith("rollout_correction/") for k in m)
    # weights of exactly 1 (engine = old, C not reached) reproduce it bit for bit through the new path
    for mode, level in (("tis", "token"), ("seq_tis", "token"), ("mis", "token"), ("mis", "sequence")):
        cfg = base.replace(rollout_correction=RolloutCorrectionConfig(mode, level, 2.0))
        _, old, *_ = _random_inputs(1)
        loss3, grad3, m3 = _loss_and_grad(cfg, 1, rollout_logp=old.clone())
        assert torch.equal(loss, loss3) and torch.equal(grad, grad3), mode
        assert m3["rollout_correction/weight_mean"].item() == 1.0 and m3["rollout_correction/token_frac"].item() == 0.0


def test_only_the_policy_gradient_term_is_weighted():
    """With zero advantages the clipped term is 0: KL and entropy are the same with and without weights."""
    logp, old, _, mask, engine, extra = _random_inputs(2)
    base = LeadConfig.paper().replace(kl_coeff=0.05, entropy_coeff=0.01)
    zero = torch.zeros(6)
    plain, _ = policy_loss(logp, old, zero, mask, base, **extra)
    cfg = base.replace(rollout_correction=RolloutCorrectionConfig("tis", threshold=1.2))
    weighted, m = policy_loss(logp, old, zero, mask, cfg, rollout_logp=engine, **extra)
    assert weighted.item() == pytest.approx(plain.item(), rel=1e-6) and m["rollout_correction/weight_mean"] != 1.0


def test_errors():
    logp, old, adv, mask, engine, _ = _random_inputs(3)
    with pytest.raises(ValueError, match="mode=tis needs rollout_logp"):
        policy_loss(logp, old, adv, mask, _cfg("tis"))
    bad = engine.clone()
    bad[mask.bool().nonzero()[0].tolist()] = float("nan")
    with pytest.raises(ValueError, match="rollout_logp holds NaN"):
        policy_loss(logp, old, adv, mask, _cfg("tis"), rollout_logp=bad)
    with pytest.raises(ValueError, match="rollout_logp must be"):
        policy_loss(logp, old, adv, mask, _cfg("tis"), rollout_logp=engine[:, :3])
    for kwargs, match in (({"mode": "is"}, "mode='is'"), ({"mode": "mis", "level": "seq"}, "level='seq'"),
                          ({"threshold": 1.0}, "threshold=1.0 must be > 1")):
        with pytest.raises(ValueError, match=match):
            RolloutCorrectionConfig(**kwargs)


@pytest.mark.parametrize("mode, hint", [("tis", "mode=seq_tis is tis at sequence level"),
                                        ("seq_tis", "per sequence already"), ("none", "no correction")])
def test_a_level_the_mode_does_not_read_is_refused(mode, hint):
    with pytest.raises(ValueError, match=f"level=sequence is read only by mode=mis, not by mode={mode}.*{hint}"):
        RolloutCorrectionConfig(mode, "sequence")
    assert RolloutCorrectionConfig(mode, "token").level == "token"  # the default: what these modes are
    with pytest.raises(ConfigError, match="level=sequence is read only by mode=mis"):
        load_config(_Job, [], [f"lead.rollout_correction.mode={mode}", "lead.rollout_correction.level=sequence"])
    cfg = LeadConfig.paper()
    cfg.rollout_correction.mode, cfg.rollout_correction.level = mode, "sequence"  # set after construction
    with pytest.raises(ValueError, match="read only by mode=mis"):
        cfg.validate()


@dataclass
class _Job:
    lead: LeadConfig = field(default_factory=LeadConfig.paper)


def test_config_keys():
    job = load_config(_Job, [], ["lead.preset=reference_code", "lead.rollout_correction.mode=mis",
                                 "lead.rollout_correction.level=sequence", "lead.rollout_correction.threshold=1.5"])
    assert job.lead.rollout_correction == RolloutCorrectionConfig("mis", "sequence", 1.5)
    assert job.lead.group_filter == "reference_code"  # the preset's other values stay
    with pytest.raises(ConfigError, match="threshold=0.5 must be > 1"):
        load_config(_Job, [], ["lead.rollout_correction.threshold=0.5"])
    with pytest.raises(ConfigError, match="did you mean 'lead.rollout_correction.mode'"):
        load_config(_Job, [], ["lead.rollout_correction.mdoe=tis"])


def test_threshold_is_log_space_symmetric():
    # mis keeps ratios in [1/C, C]: 1/C itself is kept, just below it is masked
    c = 3.0
    engine = torch.zeros(1, 2)
    old = torch.tensor([[math.log(1 / c) + 1e-6, math.log(1 / c) - 1e-3]])
    w, hit, _ = correction_weights(old, engine, torch.ones(1, 2), RolloutCorrectionConfig("mis", "token", c))
    assert hit.tolist() == [[False, True]] and w[0, 1].item() == 0.0 and w[0, 0].item() == pytest.approx(1 / c, rel=1e-5)
