"""Each setting with a fixed set of names has one list of them, and every name on it runs.

The accepted names of `lead.advantage_estimator`, `reweighting`, `group_filter`, `loss_agg` and
`kl_estimator` are the keys of their implementations' registries; the two-way switches and the outcome
rule are checked against the code that reads them. An unknown name is refused when the config is built,
naming the choices, never at the first RL step.
"""

import dataclasses

import pytest
import torch

from nemo_lead.algorithms import (
    LeadConfig,
    advantages,
    compute_advantages,
    config,
    filters,
    group_keep_mask,
    loss,
    policy_loss,
)
from nemo_lead.algorithms.outcome import Outcome

# two groups of four: one with spread, one all wrong
OUTCOME = torch.tensor([Outcome.CORRECT, Outcome.WRONG, Outcome.CORRECT, Outcome.WRONG] + [Outcome.WRONG] * 4)
INDEX = torch.tensor([0] * 4 + [1] * 4)
REWARDS = torch.tensor([1.0, -1.0, 0.8, -1.0, -1.0, -1.0, -1.0, -1.0])

REGISTRIES = [
    ("advantage_estimator", config.ADVANTAGE_ESTIMATORS, advantages.ESTIMATORS),
    ("reweighting", config.REWEIGHTINGS, advantages.REWEIGHTINGS),
    ("group_filter", config.GROUP_FILTERS, filters.GROUP_FILTERS),
    ("loss_agg", config.LOSS_AGGREGATIONS, loss.LOSS_AGGREGATIONS),
    ("kl_estimator", config.KL_ESTIMATORS, loss.KL_ESTIMATORS),
]


@pytest.mark.parametrize("key, accepted, registry", REGISTRIES, ids=[r[0] for r in REGISTRIES])
def test_accepted_names_are_the_registry(key, accepted, registry):
    assert accepted == tuple(registry) and len(accepted) >= 2
    with pytest.raises(ValueError, match=rf"lead\.{key}='nope' is not one of \[") as err:
        LeadConfig(**{key: "nope"})
    assert all(repr(name) in str(err.value) for name in accepted)  # the message names every choice


@pytest.mark.parametrize("name", config.ADVANTAGE_ESTIMATORS)
def test_every_estimator_runs_and_centres_the_spread_group(name):
    adv = compute_advantages(REWARDS, OUTCOME, INDEX, LeadConfig(advantage_estimator=name, reweighting="none"))
    assert adv.shape == (8,) and torch.isfinite(adv).all()
    assert abs(float(adv[:4].sum())) < 1e-5 and adv[0] > 0 > adv[1]  # zero-sum, better reward -> higher
    assert torch.equal(adv[4:], torch.zeros(4))  # no spread, no signal


def test_reweightings_scale_as_their_formulas_say():
    cfg = LeadConfig(reweighting="none")
    base = compute_advantages(REWARDS, OUTCOME, INDEX, cfg)
    lead = compute_advantages(REWARDS, OUTCOME, INDEX, dataclasses.replace(cfg, reweighting="lead"))
    w = advantages.difficulty_weight(torch.tensor([0.5, 0.5]), cfg)  # rho = 2/4 correct: w(0.5) = w(1 - 0.5)
    torch.testing.assert_close(lead[:4], base[:4] * float(w[0]))
    dgpo = compute_advantages(REWARDS, OUTCOME, INDEX, dataclasses.replace(cfg, reweighting="dgpo_softmax"))
    torch.testing.assert_close(dgpo[:4], base[:4])  # one group with spread: B_valid * softmax = 1


def test_group_filters_keep_what_their_rules_say():
    keep = {name: group_keep_mask(REWARDS, OUTCOME, INDEX, LeadConfig(group_filter=name)).tolist()
            for name in config.GROUP_FILTERS}
    assert keep == {"none": [True] * 8, "reference_code": [True] * 4 + [False] * 4,
                    "dynamic_sampling": [True] * 4 + [False] * 4}


def test_loss_aggregations_divide_by_their_denominators():
    logp = torch.zeros(2, 3, requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    # ratio 1, no clipping: l_it = -A_i; sums per response: -3 and +1
    expected = {"token_mean": (-3 + 1) / 4, "seq_mean_token_mean": (-3 / 3 + 1 / 1) / 2,
                "seq_mean_token_sum": (-3 + 1) / 2, "constant_norm": (-3 + 1) / (2 * 5)}
    for name in config.LOSS_AGGREGATIONS:
        cfg = LeadConfig(loss_agg=name, max_response_len=5)
        value, _ = policy_loss(logp, logp.detach(), adv, mask, cfg)
        assert float(value.detach()) == pytest.approx(expected[name]), name
    assert set(expected) == set(config.LOSS_AGGREGATIONS)


def test_kl_estimators_at_a_known_ratio():
    logp, ref = torch.tensor([0.0]), torch.tensor([-1.0])  # log r = 1
    values = {name: float(loss.kl_penalty(logp, ref, name)) for name in config.KL_ESTIMATORS}
    assert values == pytest.approx({"k1": 1.0, "k3": float(torch.exp(torch.tensor(-1.0))) + 1 - 1})


def test_two_way_switches_each_change_what_they_act_on():
    a = compute_advantages(REWARDS, OUTCOME, INDEX, LeadConfig(rho_source="correct"))
    b = compute_advantages(REWARDS, OUTCOME, INDEX, LeadConfig(rho_source="positive_reward"))
    assert torch.equal(a, b)  # here the correct ones are exactly those with reward > 0 ...
    shaped = REWARDS.clone()
    shaped[1] = 0.5  # ... a wrong answer with a positive reward counts only for positive_reward
    a = compute_advantages(shaped, OUTCOME, INDEX, LeadConfig(rho_source="correct"))
    b = compute_advantages(shaped, OUTCOME, INDEX, LeadConfig(rho_source="positive_reward"))
    assert not torch.equal(a, b)
    stds = {s: compute_advantages(REWARDS, OUTCOME, INDEX, LeadConfig(advantage_std=s, reweighting="none"))
            for s in config.STD_ESTIMATORS}
    torch.testing.assert_close(stds["population"][:4] * (3 / 4) ** 0.5, stds["sample"][:4], rtol=1e-4, atol=1e-6)


def test_outcome_rules_are_the_verifiers():
    from nemo_lead.verify.verifier import RULES

    assert config.OUTCOME_RULES == RULES
