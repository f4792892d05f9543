"""Each setting with a fixed set of names has one list of them, and every name on it runs.

The accepted names of `lead.advantage_estimator`, `reweighting`, `group_filter`, `loss_agg`,
`kl_estimator` and `length_shaping` are the keys of their implementations' registries; the two-way switches and the outcome
rule are checked against the code that reads them. An unknown name is refused when the config is built,
naming the choices, never at the first RL step. The registries are filled where their entries are defined,
and those modules never import `algorithms/config.py` (the config reads them, not the reverse).
"""

import ast
import dataclasses
import importlib
from pathlib import Path

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
    rewards,
)
from nemo_lead.algorithms.outcome import Outcome
from nemo_lead.algorithms.registry import Registry

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
    ("length_shaping", config.LENGTH_SHAPINGS, rewards.SHAPINGS),
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


# ----------------------------------------------------------------------------- no back references
ALGORITHMS = Path(config.__file__).parent
PACKAGE = "nemo_lead.algorithms"


def _absolute(module: str, node: ast.ImportFrom) -> str:
    """The module `from X import ...` inside `nemo_lead.algorithms.<module>` reads, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = PACKAGE.split(".")[: len(PACKAGE.split(".")) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def imported_modules(module: str, source: str) -> set[str]:
    """Every module an import anywhere in `source` names (functions and `if TYPE_CHECKING` blocks included);
    `from pkg import name` counts as importing `pkg` and, when it is one, the submodule `pkg.name`."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            source_module = _absolute(module, node)
            out |= {source_module} | {f"{source_module}.{a.name}" for a in node.names}
    return out


def reaches_config(module: str, seen: set[str] | None = None) -> list[str]:
    """The chain of algorithms modules by which `module` imports `algorithms/config.py` (or the package, whose
    `__init__` imports it); empty when it does not."""
    seen = set() if seen is None else seen
    seen.add(module)
    for target in sorted(imported_modules(module, (ALGORITHMS / f"{module}.py").read_text())):
        if target in (f"{PACKAGE}.config", PACKAGE):
            return [module, target]
        name = target.removeprefix(f"{PACKAGE}.")
        if target.startswith(f"{PACKAGE}.") and (ALGORITHMS / f"{name}.py").exists() and name not in seen:
            chain = reaches_config(name, seen)
            if chain:
                return [module, *chain]
    return []


def modules_with_registries() -> list[str]:
    """The algorithms modules that create a `Registry` at their top level (read from the source)."""
    out = []
    for path in sorted(ALGORITHMS.glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            value = getattr(node, "value", None)
            if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "Registry":
                out.append(path.stem)
                break
    return out


def test_modules_with_registries_never_import_the_config():
    holders = modules_with_registries()
    assert {"advantages", "filters", "loss", "rewards"} <= set(holders), holders
    chains = {m: reaches_config(m) for m in holders}
    assert not any(chains.values()), {m: " -> ".join(c) for m, c in chains.items() if c}


def test_the_import_scan_sees_type_checking_blocks_and_functions():
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .config import LeadConfig\n"
    assert f"{PACKAGE}.config" in imported_modules("rewards", source)
    assert f"{PACKAGE}.config" in imported_modules("rewards", "def f():\n    from . import config\n")
    assert PACKAGE in imported_modules("rewards", "from nemo_lead.algorithms import Outcome\n")


def test_every_registry_is_the_choices_of_its_setting():
    fields = {f"lead.{f.name}": f for f in dataclasses.fields(LeadConfig)}
    registries = {}
    for name in modules_with_registries():
        for value in vars(importlib.import_module(f"{PACKAGE}.{name}")).values():
            if isinstance(value, Registry):
                registries[value.key] = value
    assert len(registries) >= 6
    for key, registry in registries.items():
        assert key in fields, f"{key}: no such setting of LeadConfig"
        assert fields[key].metadata["choices"] == registry.names, key


def test_a_registry_refuses_unknown_and_repeated_names():
    reg = Registry("lead.thing")
    reg.register("a")(len)
    assert reg["a"] is len and reg.names == ("a",)
    with pytest.raises(ValueError, match=r"lead\.thing='b' is not one of \['a'\]"):
        reg["b"]
    with pytest.raises(ValueError, match="registered twice"):
        reg.register("a")(abs)
