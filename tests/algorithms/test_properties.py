"""Property tests (hypothesis) of the LEAD math: invariances that must hold for any batch."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nemo_lead.algorithms import LeadConfig, Outcome, compute_advantages, policy_loss, shape_rewards

OUTCOMES = [int(o) for o in Outcome]
PRESETS = ["paper", "reference_code", "grpo", "grpo_length", "stage2", "dr_grpo", "dgpo", "dapo"]


@st.composite
def batches(draw, max_groups=4, max_group_size=6):
    sizes = draw(st.lists(st.integers(1, max_group_size), min_size=1, max_size=max_groups))
    n = sum(sizes)
    group = torch.tensor([g * 7 + 3 for g, s in enumerate(sizes) for _ in range(s)])  # arbitrary ids
    outcome = torch.tensor(draw(st.lists(st.sampled_from(OUTCOMES), min_size=n, max_size=n)))
    lengths = torch.tensor(draw(st.lists(st.integers(1, 9000), min_size=n, max_size=n)))
    perm = torch.tensor(draw(st.permutations(list(range(n)))))
    return outcome, lengths, group, perm


@settings(max_examples=60, deadline=None)
@given(batches(), st.sampled_from(PRESETS))
def test_permuting_responses_permutes_outputs(b, preset):
    outcome, lengths, group, perm = b
    cfg = LeadConfig.from_preset(preset)
    r = shape_rewards(outcome, lengths, group, cfg)
    a = compute_advantages(r, outcome, group, cfg)
    rp = shape_rewards(outcome[perm], lengths[perm], group[perm], cfg)
    ap = compute_advantages(rp, outcome[perm], group[perm], cfg)
    assert torch.allclose(rp, r[perm], atol=1e-6)
    assert torch.allclose(ap, a[perm], atol=1e-5)


@settings(max_examples=60, deadline=None)
@given(batches())
def test_grpo_advantages_sum_to_zero_per_group_before_reweighting(b):
    outcome, lengths, group, _ = b
    cfg = LeadConfig.paper().replace(reweighting="none")
    a = compute_advantages(shape_rewards(outcome, lengths, group, cfg), outcome, group, cfg).double()
    for g in group.unique():
        assert abs(a[group == g].sum().item()) < 1e-4


@settings(max_examples=60, deadline=None)
@given(batches())
def test_dgpo_abs_advantages_sum_to_group_size_where_spread(b):
    outcome, lengths, group, _ = b
    cfg = LeadConfig.dgpo().replace(reweighting="none")
    r = shape_rewards(outcome, lengths, group, cfg)
    a = compute_advantages(r, outcome, group, cfg).double()
    for g in group.unique():
        sel = group == g
        if r[sel].max() > r[sel].min():
            assert abs(a[sel].abs().sum().item() - sel.sum().item()) < 1e-3


@settings(max_examples=80, deadline=None)
@given(batches(), st.sampled_from(["paper", "reference_code", "grpo_length"]))
def test_shorter_correct_answers_never_earn_less(b, preset):
    outcome, lengths, group, _ = b
    cfg = LeadConfig.from_preset(preset)
    r = shape_rewards(outcome, lengths, group, cfg)
    correct = outcome == Outcome.CORRECT
    for i in range(len(r)):
        for j in range(len(r)):
            if correct[i] and correct[j] and group[i] == group[j] and lengths[i] < lengths[j]:
                assert r[i] >= r[j]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(-3, 3, allow_nan=False).filter(lambda x: abs(x) > 1e-3), min_size=1, max_size=6),
    st.sampled_from(["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "constant_norm"]),
)
def test_loss_gradient_sign_follows_advantage(advs, mode):
    """On-policy (ratio 1, inside the clip): descending the loss raises log-probs where A > 0."""
    cfg = LeadConfig.paper().replace(loss_agg=mode)
    n = len(advs)
    logp = torch.full((n, 3), -1.0, dtype=torch.float64, requires_grad=True)
    loss, _ = policy_loss(logp, logp.detach(), torch.tensor(advs, dtype=torch.float64), torch.ones(n, 3), cfg)
    loss.backward()
    for i, a in enumerate(advs):
        assert (logp.grad[i] * (-1 if a > 0 else 1) > 0).all()
