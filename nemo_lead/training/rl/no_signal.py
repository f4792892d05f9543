"""Steps that cannot learn: groups whose rewards are all equal, and a warning that names the likely cause.

A group's advantages are its rewards minus their mean (then scaled: GRPO's std, DGPO's MAD, LEAD's
difficulty weights), so a group whose rewards are all equal has zero advantage for every response, under
every preset, whether or not the group filter keeps it. A step whose trained groups are all like that
changes nothing (no gradient), while `groups/kept_frac` may still read 1.0: the paper's preset keeps
all-wrong groups. The usual reason, with a model no one trained for this format, is that no response has
a final answer to grade (every reward -1), so the metrics line also carries the share of responses with an
extracted answer.

    metrics.update(signal_metrics(seen, selected))       # groups/no_signal, groups/no_signal_frac, answer_extracted_frac
    message = warnings.check(step, metrics)              # NoSignalWarnings: a message or None

Metrics (every step of `nemo-lead rl`):
    groups/no_signal        sampled groups whose rewards are all equal (no advantage under any preset)
    groups/no_signal_frac   their share of the sampled groups
    groups/all_correct_frac share of the sampled groups whose every response is correct (GRPO: no signal;
                            LEAD: its length term's, where the lengths differ)
    groups/all_wrong_frac   share whose every response is not correct (wrong, no answer, cut, repetition)
    groups/mixed_frac       share with correct and not-correct responses (signal under every preset)
    answer_extracted_frac   share of responses with an answer the grader could read (`answer_region`)
    no_signal               1 when no trained group carries a signal (nothing selected counts), else 0

The first steps are also checked against `StartCheckConfig` (`start_check`): a run whose first steps read too
few answers, cut too many responses or have too few mixed groups will learn little, and the run says so in
its output at once rather than after its last step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from nemo_lead.algorithms import Outcome
from nemo_lead.training.rl.config import StartCheckConfig
from nemo_lead.training.rl.rollouts import Group, answer_extracted_frac

WARN_EVERY = 10  # after the first warning, one more every this many steps while steps stay without signal


def has_signal(rewards: torch.Tensor) -> bool:
    """True when a group's rewards are not all equal (so some advantage is non-zero)."""
    return rewards.numel() > 1 and bool((rewards != rewards[0]).any())


def signal_metrics(seen: Sequence[Group], selected: Sequence[Group]) -> dict[str, Any]:
    """The metrics of the module docstring, from the step's groups (rewards assigned):
    `seen` every group sampled, `selected` those the update trains on."""
    no_signal = sum(not has_signal(g.rewards) for g in seen)
    correct = [sum(o == Outcome.CORRECT for o in g.outcomes) for g in seen]
    share = (lambda count: count / len(seen) if seen else 0.0)  # noqa: E731
    return {
        "groups/no_signal": no_signal,
        "groups/no_signal_frac": share(no_signal),
        "groups/all_correct_frac": share(sum(c == len(g.outcomes) for c, g in zip(correct, seen))),
        "groups/all_wrong_frac": share(sum(c == 0 for c in correct)),
        "groups/mixed_frac": share(sum(0 < c < len(g.outcomes) for c, g in zip(correct, seen))),
        "answer_extracted_frac": answer_extracted_frac(seen),
        "no_signal": int(not any(has_signal(g.rewards) for g in selected)),
    }


def likely_cause(metrics: dict[str, Any]) -> str:
    """Why a step has no signal, judged from its metrics line (the most specific reason first)."""
    extracted, truncated = metrics.get("answer_extracted_frac", 1.0), metrics.get("truncated_frac", 0.0)
    accuracy = metrics.get("accuracy", 0.0)
    if truncated >= 0.5:
        return (f"{truncated:.0%} of the responses were cut at rollout.max_tokens before they ended: raise "
                "rollout.max_tokens, or SFT the model on shorter traces")
    if extracted < 0.5:
        return (f"only {extracted:.0%} of the responses have an answer the grader can read (a final \\boxed{{}} in "
                "answer_region), so every reward is the same penalty: SFT the model on traces that end in a boxed "
                "answer first, or check prompt.suffix, prompt.system and answer_region")
    if accuracy == 0.0:
        return "every response is wrong: the problems are too hard for the model (pick easier ones, or SFT first)"
    if accuracy == 1.0:
        return "every response is correct and no group's rewards differ: the problems are too easy for the model"
    return "within each group every response got the same reward (all right or all wrong per problem)"


@dataclass
class NoSignalWarnings:
    """Warn at the first step without signal, then every `every` steps while they go on (a run of such steps
    is one problem, not one message per step); a step with signal starts the count again."""

    every: int = WARN_EVERY
    _last: int | None = None  # step of the last warning in the current run of no-signal steps

    def check(self, step: int, metrics: dict[str, Any]) -> str | None:
        if not metrics.get("no_signal"):
            self._last = None
            return None
        if self._last is not None and step - self._last < self.every:
            return None
        self._last = step
        return (f"step {step}: no learning signal (groups/no_signal_frac {metrics['groups/no_signal_frac']:.2f}, "
                f"accuracy {metrics.get('accuracy', 0.0):.3f}, answer_extracted_frac "
                f"{metrics['answer_extracted_frac']:.2f}): the update changes nothing. Likely cause: "
                f"{likely_cause(metrics)}")


def start_check(step: int, metrics: dict[str, Any], cfg: StartCheckConfig) -> str | None:
    """A warning for one of the first `cfg.steps` steps whose figures are outside the bounds, else None."""
    if step > cfg.steps:
        return None
    misses = []
    extracted, truncated = metrics["answer_extracted_frac"], metrics["truncated_frac"]
    mixed = metrics["groups/mixed_frac"]
    if extracted <= cfg.min_answer_extracted:
        misses.append(f"an answer was read in {extracted:.0%} of the responses (want > {cfg.min_answer_extracted:.0%}:"
                      " check prompt.suffix, answer_region, or SFT on traces that end in \\boxed{})")
    if truncated >= cfg.max_truncated:
        misses.append(f"{truncated:.0%} were cut at rollout.max_tokens (want < {cfg.max_truncated:.0%}: raise it)")
    if mixed < cfg.min_mixed_groups:
        misses.append(f"{mixed:.0%} of the groups were mixed, right and wrong (want >= {cfg.min_mixed_groups:.0%}; "
                      f"all right {metrics['groups/all_correct_frac']:.0%}, all wrong "
                      f"{metrics['groups/all_wrong_frac']:.0%}: problems nearer the model's level give more signal)")
    if not misses:
        return None
    return f"start check, step {step}: " + "; ".join(misses)
