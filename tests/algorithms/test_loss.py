"""policy_loss against a direct, slow reference of each aggregation mode; split invariance."""

import math

import pytest
import torch

from nemo_lead.algorithms import LeadConfig, loss_denominator, policy_loss

MODES = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant_norm"]


def reference_loss(logp, old, adv, mask, cfg, ref=None, ent=None):
    """Token by token, sequence by sequence, straight from the formulas in loss.py's docstring."""
    N, Tn = len(logp), len(logp[0])
    per_seq, n_tok, n_seq = [], 0, 0
    for i in range(N):
        s, cnt = 0.0, 0
        for t in range(Tn):
            if not mask[i][t]:
                continue
            r = math.exp(logp[i][t] - old[i][t])
            a = adv[i]
            lo, hi = 1 - cfg.clip_eps_low, 1 + cfg.clip_eps_high
            l_tok = max(-a * r, -a * min(max(r, lo), hi))
            if cfg.dual_clip_c is not None and a < 0:
                l_tok = min(l_tok, -a * cfg.dual_clip_c)
            if cfg.kl_coeff:
                d = ref[i][t] - logp[i][t]
                l_tok += cfg.kl_coeff * (math.exp(d) - d - 1 if cfg.kl_estimator == "k3" else -d)
            if cfg.entropy_coeff:
                l_tok -= cfg.entropy_coeff * ent[i][t]
            s += l_tok
            cnt += 1
        per_seq.append((s, cnt))
        n_tok += cnt
        n_seq += cnt > 0
    if cfg.loss_agg == "token_mean":
        return sum(s for s, _ in per_seq) / n_tok
    if cfg.loss_agg == "seq_mean_token_mean":
        return sum(s / c for s, c in per_seq if c) / n_seq
    if cfg.loss_agg == "seq_mean_token_sum":
        return sum(s for s, _ in per_seq) / n_seq
    return sum(s for s, _ in per_seq) / (n_seq * (cfg.max_response_len or Tn))


def batch(seed=0, N=5, Tn=7):
    g = torch.Generator().manual_seed(seed)
    logp = -torch.rand(N, Tn, generator=g, dtype=torch.float64) * 3
    old = logp + 0.4 * torch.randn(N, Tn, generator=g, dtype=torch.float64)  # ratios well outside the clip
    adv = torch.randn(N, generator=g, dtype=torch.float64)
    lengths = torch.tensor([7, 3, 1, 5, 6])[:N]
    mask = torch.arange(Tn)[None, :] < lengths[:, None]
    ref = logp + 0.1 * torch.randn(N, Tn, generator=g, dtype=torch.float64)
    ent = torch.rand(N, Tn, generator=g, dtype=torch.float64)
    return logp, old, adv, mask, ref, ent


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "extra",
    [{}, {"clip_eps_high": 0.28}, {"dual_clip_c": 3.0}, {"kl_coeff": 0.1}, {"kl_coeff": 0.1, "kl_estimator": "k1"},
     {"entropy_coeff": 0.01}],
)
def test_matches_slow_reference(mode, extra):
    cfg = LeadConfig.paper().replace(loss_agg=mode, **extra)
    logp, old, adv, mask, ref, ent = batch()
    loss, metrics = policy_loss(logp, old, adv, mask, cfg, ref_logp=ref, entropy=ent)
    want = reference_loss(logp.tolist(), old.tolist(), adv.tolist(), mask.tolist(), cfg, ref.tolist(), ent.tolist())
    assert loss.item() == pytest.approx(want, rel=1e-10)
    assert 0 < metrics["clip_frac"] < 1 and metrics["tokens"] == mask.sum()


def test_dual_clip_bounds_negative_advantage_loss():
    cfg = LeadConfig.paper().replace(dual_clip_c=3.0)
    logp = torch.tensor([[math.log(10.0)]], dtype=torch.float64)  # ratio 10 against old logp 0
    old = torch.zeros(1, 1, dtype=torch.float64)
    loss, _ = policy_loss(logp, old, torch.tensor([-1.0], dtype=torch.float64), torch.ones(1, 1), cfg)
    assert loss.item() == pytest.approx(3.0)  # min(max(10, 1.2), 3) with A = -1
    loss, _ = policy_loss(logp, old, torch.tensor([-1.0], dtype=torch.float64), torch.ones(1, 1), LeadConfig.paper())
    assert loss.item() == pytest.approx(10.0)


@pytest.mark.parametrize("mode", MODES)
def test_global_denominator_makes_split_batches_sum_to_whole(mode):
    """What the actor does across micro-batches and DP ranks: same gradient whatever the split."""
    cfg = LeadConfig.paper().replace(loss_agg=mode)
    logp, old, adv, mask, _, _ = batch(seed=3)
    whole_p = logp.clone().requires_grad_()
    policy_loss(whole_p, old, adv, mask, cfg)[0].backward()

    split_p = logp.clone().requires_grad_()
    parts = [slice(0, 2), slice(2, 3), slice(3, 5)]
    denom = sum(loss_denominator(mask[s], cfg) for s in parts)
    total = sum(policy_loss(split_p[s], old[s], adv[s], mask[s], cfg, denominator=denom)[0] for s in parts)
    total.backward()
    assert torch.allclose(whole_p.grad, split_p.grad, atol=1e-12)


def test_masked_positions_may_hold_garbage():
    cfg = LeadConfig.paper()
    logp, old, adv, mask, _, _ = batch()
    clean = policy_loss(logp, old, adv, mask, cfg)[0]
    dirty_logp = torch.where(mask, logp, torch.tensor(float("nan"), dtype=logp.dtype))
    assert policy_loss(dirty_logp, old, adv, mask, cfg)[0].item() == pytest.approx(clean.item())


def test_empty_and_fully_masked_batches_give_connected_zero():
    cfg = LeadConfig.paper()
    p = torch.zeros(0, 4, requires_grad=True)
    loss, _ = policy_loss(p, p.detach(), torch.zeros(0), torch.zeros(0, 4, dtype=torch.bool), cfg)
    assert loss.item() == 0.0 and loss.requires_grad
    p = torch.randn(2, 3, requires_grad=True)
    loss, _ = policy_loss(p, p.detach(), torch.ones(2), torch.zeros(2, 3, dtype=torch.bool), cfg)
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(p.grad, torch.zeros(2, 3))


def test_bad_inputs_raise():
    cfg = LeadConfig.paper()
    p = torch.zeros(2, 3)
    m = torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match="must all be"):
        policy_loss(p, torch.zeros(2, 4), torch.zeros(2), m, cfg)
    with pytest.raises(ValueError, match="advantages must be"):
        policy_loss(p, p, torch.zeros(3), m, cfg)
    with pytest.raises(ValueError, match="NaN/inf"):
        policy_loss(p, p, torch.tensor([0.0, float("nan")]), m, cfg)
    with pytest.raises(ValueError, match="NaN/inf at unmasked"):
        policy_loss(torch.full((2, 3), float("inf")), p, torch.zeros(2), m, cfg)
    with pytest.raises(ValueError, match="needs ref_logp"):
        policy_loss(p, p, torch.zeros(2), m, cfg.replace(kl_coeff=0.1))
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(p, p, torch.zeros(2), m, cfg.replace(entropy_coeff=0.1))


def test_every_metric_of_the_loss_is_declared_with_its_reduction():
    """`metric_keys` lists what `policy_loss` returns for given inputs, and each has a reduction: the one place
    a new metric is declared (the actor's step and the RL loop read these)."""
    from nemo_lead.algorithms.loss import METRIC_REDUCTIONS, metric_keys
    from nemo_lead.algorithms.rollout_correction import RolloutCorrectionConfig

    torch.manual_seed(0)
    logp, old = -torch.rand(3, 5), -torch.rand(3, 5)
    mask = torch.ones(3, 5)
    cfg = LeadConfig.paper().replace(kl_coeff=0.1, rollout_correction=RolloutCorrectionConfig("tis"))
    for entropy in (None, torch.rand(3, 5)):
        for ref in (None, -torch.rand(3, 5)):
            for engine in (None, old + 0.01):
                c = cfg if engine is not None else cfg.replace(rollout_correction=RolloutCorrectionConfig())
                c = c if ref is not None else c.replace(kl_coeff=0.0)
                _, m = policy_loss(logp, old, torch.randn(3), mask, c, ref_logp=ref, entropy=entropy, rollout_logp=engine)
                keys = metric_keys(c, entropy=entropy is not None, ref=ref is not None, rollout=engine is not None)
                assert set(m) == {*keys, "tokens", "sequences"}
                assert set(keys) <= set(METRIC_REDUCTIONS)
    assert m["mismatch/logprob_abs_mean"].item() == pytest.approx(0.01, abs=1e-6)
