"""megatron_compat: the helpers that do not need a model."""

from types import SimpleNamespace

from nemo_lead.mcore.compat import saved_param_groups_take_current_lrs


def _group(max_lr, min_lr, wd_mult):
    return {"max_lr": max_lr, "min_lr": min_lr, "wd_mult": wd_mult, "params": [0, 1]}


def test_saved_groups_take_the_current_learning_rates_at_any_nesting():
    optimizer = SimpleNamespace(param_groups=[_group(1e-4, 1e-5, 1.0), _group(1e-4, 1e-5, 0.0)])
    # a chained optimizer's state: one entry per sub-optimizer, float16 ("optimizer" key) and distributed
    state = {0: {"optimizer": {"param_groups": [_group(2e-4, 2e-4, 1.0), _group(2e-4, 2e-4, 0.0)], "state": {}}},
             1: {"param_groups": [{"wd_mult": 1.0, "params": [2]}]}}
    saved_param_groups_take_current_lrs(optimizer, state)
    assert [(g["max_lr"], g["min_lr"], g["wd_mult"]) for g in state[0]["optimizer"]["param_groups"]] == [
        (1e-4, 1e-5, 1.0), (1e-4, 1e-5, 0.0)]
    assert state[1]["param_groups"] == [{"wd_mult": 1.0, "params": [2]}]  # no lr keys saved: none added


def test_several_current_learning_rates_leave_the_saved_state_as_it_is():
    optimizer = SimpleNamespace(param_groups=[_group(1e-4, 1e-5, 1.0), _group(3e-4, 1e-5, 0.0)])
    state = {"param_groups": [_group(2e-4, 2e-4, 1.0)]}
    saved_param_groups_take_current_lrs(optimizer, state)
    assert state["param_groups"][0]["max_lr"] == 2e-4
