"""Steps without learning signal: the groups counted as such, the share of extracted answers, the warning
(first step, then every N while it lasts) and the cause it names."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from nemo_lead.training.rl.no_signal import NoSignalWarnings, has_signal, likely_cause, signal_metrics


def _group(rewards, extracted):
    return SimpleNamespace(rewards=torch.tensor(rewards), extracted=list(extracted))


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
