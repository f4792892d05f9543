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
    answer_extracted_frac   share of responses with an answer the grader could read (`answer_region`)
    no_signal               1 when no trained group carries a signal (nothing selected counts), else 0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from nemo_lead.training.rl.rollouts import Group, answer_extracted_frac

WARN_EVERY = 10  # after the first warning, one more every this many steps while steps stay without signal


def has_signal(rewards: torch.Tensor) -> bool:
    """True when a group's rewards are not all equal (so some advantage is non-zero)."""
    return rewards.numel() > 1 and bool((rewards != rewards[0]).any())


def signal_metrics(seen: Sequence[Group], selected: Sequence[Group]) -> dict[str, Any]:
    """The metrics of the module docstring, from the step's groups (rewards assigned):
    `seen` every group sampled, `selected` those the update trains on."""
    no_signal = sum(not has_signal(g.rewards) for g in seen)
    return {
        "groups/no_signal": no_signal,
        "groups/no_signal_frac": no_signal / len(seen) if seen else 0.0,
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
