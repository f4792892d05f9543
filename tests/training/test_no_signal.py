"""Steps without learning signal: the groups counted as such, the shares of all-right / all-wrong / mixed
groups, the share of extracted answers, the warning (first step, then every N while it lasts) and the cause it
names; the start check of the first steps (answers read, responses cut, mixed groups)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from nemo_lead.algorithms import Outcome
from nemo_lead.training.rl.config import StartCheckConfig
from nemo_lead.training.rl.no_signal import (
    NoSignalWarnings,
    has_signal,
    likely_cause,
    signal_metrics,
    start_check,
)

C, W, N = Outcome.CORRECT, Outcome.WRONG, Outcome.TRUNCATED


def _group(rewards, extracted, outcomes=None):
    outcomes = outcomes or [C if r > 0 else W for r in rewards]
    return SimpleNamespace(rewards=torch.tensor(rewards), extracted=list(extracted), outcomes=list(outcomes))


def test_groups_with_equal_rewards_are_counted_whatever_the_filter_kept():
    all_wrong = _group([-1.0, -1.0, -1.0, -1.0], [None, None, "3", None])
    mixed = _group([1.0, -1.0, -1.0, -1.0], ["7", "3", None, None])
    lengths_only = _group([0.9512, 1.0, 1.0, 0.9048], ["7", "7", "7", "7"])  # all correct, LEAD's length spread
    assert [has_signal(g.rewards) for g in (all_wrong, mixed, lengths_only)] == [False, True, True]
    # the paper's preset keeps all three groups; only two carry any advantage
    m = signal_metrics([all_wrong, mixed, lengths_only], [all_wrong, mixed, lengths_only])
    expected = {"groups/no_signal": 1, "groups/no_signal_frac": 1 / 3, "answer_extracted_frac": 7 / 12, "no_signal": 0}
    assert {k: m[k] for k in expected} == expected  # the keys it owns (more may be added beside them)
    # trained on the all-wrong group alone (or on nothing): the step cannot learn
    assert signal_metrics([all_wrong, mixed], [all_wrong])["no_signal"] == 1
    assert signal_metrics([all_wrong], [])["no_signal"] == 1


def test_the_cause_named_follows_the_metrics():
    assert "max_tokens" in likely_cause({"truncated_frac": 0.75, "answer_extracted_frac": 0.0, "accuracy": 0.0})
    no_box = likely_cause({"truncated_frac": 0.0, "answer_extracted_frac": 0.05, "accuracy": 0.0})
    assert "only 5% of the responses have an answer" in no_box and "SFT" in no_box
    assert "too hard" in likely_cause({"truncated_frac": 0.0, "answer_extracted_frac": 0.9, "accuracy": 0.0})
    assert "too easy" in likely_cause({"truncated_frac": 0.0, "answer_extracted_frac": 1.0, "accuracy": 1.0})
    assert "same reward" in likely_cause({"truncated_frac": 0.0, "answer_extracted_frac": 1.0, "accuracy": 0.5})


def test_warns_at_the_first_step_without_signal_then_every_n():
    warnings = NoSignalWarnings(every=3)
    line = {"no_signal": 1, "groups/no_signal_frac": 1.0, "accuracy": 0.0, "answer_extracted_frac": 0.0,
            "truncated_frac": 0.0}
    warned = [step for step in range(1, 9) if warnings.check(step, line)]
    assert warned == [1, 4, 7]
    message = NoSignalWarnings().check(5, line)
    assert message.startswith("step 5: no learning signal") and "answer_extracted_frac 0.00" in message
    # a step with signal ends the spell: the next one without warns at once
    assert warnings.check(9, {**line, "no_signal": 0}) is None
    assert warnings.check(10, line) is not None


def test_groups_are_counted_all_right_all_wrong_or_mixed_by_outcome():
    right = _group([1.0, 0.95, 1.05], ["7", "7", "7"], [C, C, C])  # LEAD's length term: rewards differ
    wrong = _group([-1.0, -1.0, -1.0], ["3", None, "4"], [W, N, W])  # no answer counts as not right
    mixed = _group([1.0, -1.0, -1.0], ["7", "3", None], [C, W, N])
    m = signal_metrics([right, wrong, mixed, mixed], [right, wrong, mixed, mixed])
    assert (m["groups/all_correct_frac"], m["groups/all_wrong_frac"], m["groups/mixed_frac"]) == (0.25, 0.25, 0.5)
    assert m["groups/no_signal_frac"] == 0.25  # only the all-wrong group: the all-right one has length signal


def test_start_check_names_every_figure_out_of_bounds_in_the_first_steps():
    cfg = StartCheckConfig()  # 2 steps; answers read > 90%, cut < 10%, mixed groups >= 40%
    good = {"answer_extracted_frac": 0.95, "truncated_frac": 0.05, "groups/mixed_frac": 0.5,
            "groups/all_correct_frac": 0.3, "groups/all_wrong_frac": 0.2}
    assert start_check(1, good, cfg) is None
    bad = {**good, "answer_extracted_frac": 0.9, "truncated_frac": 0.1, "groups/mixed_frac": 0.375,
           "groups/all_correct_frac": 0.625, "groups/all_wrong_frac": 0.0}
    message = start_check(2, bad, cfg)
    assert message.startswith("start check, step 2: ")
    assert "read in 90% of the responses (want > 90%" in message and "10% were cut" in message
    assert "38% of the groups were mixed" in message and "all right 62%" in message
    assert start_check(3, bad, cfg) is None  # after the first steps: the no-signal warning's business
    assert start_check(1, bad, StartCheckConfig(steps=0)) is None
    with pytest.raises(ValueError, match="start_check.min_mixed_groups must be in"):
        StartCheckConfig(min_mixed_groups=1.5)
