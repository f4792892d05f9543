"""What happened to one sampled response, as decided by the verifier.

The reward shaper (`rewards.py`) maps each outcome to a number; keeping the outcome separate from the
reward lets the same graded batch be re-scored under different presets (paper vs the authors' code).
"""

from enum import IntEnum

import torch


class Outcome(IntEnum):
    """Per-response verdict. Values are stable: they are stored in rollout logs."""

    CORRECT = 1
    WRONG = 0
    TRUNCATED = -1  # no final answer, or cut at the maximum response length
    REPETITION = -2  # repeated n-gram chunks (stage-2 penalty), see nemo_lead.verify.find_repetition


def outcome_label(outcome: int, finished: bool) -> str:
    """The outcome's name for logs and reports: TRUNCATED for a response cut at the length limit, NO_ANSWER
    for one that ended by itself without a final answer (both are `Outcome.TRUNCATED` to the rewards)."""
    if outcome == Outcome.TRUNCATED and finished:
        return "NO_ANSWER"
    return Outcome(outcome).name


_VALID = torch.tensor([int(o) for o in Outcome])


def check_outcomes(outcome: torch.Tensor) -> None:
    """Raise ValueError when `outcome` holds a value that is not an `Outcome`."""
    if outcome.numel() and not torch.isin(outcome, _VALID.to(outcome.device)).all():
        bad = sorted(set(outcome.tolist()) - {int(o) for o in Outcome})
        raise ValueError(f"outcome holds values {bad} that are not Outcome members {[int(o) for o in Outcome]}")
