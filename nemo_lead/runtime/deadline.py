"""The job's end: never start a unit of work that would run past it.

SLURM sends its warning (`--signal=USR1@300`) 300 s before the time limit and the loops stop after the
step in flight, so a step longer than the warning (a 14B RL step takes over an hour) is killed at the limit:
the job ends TIMEOUT, is not requeued, and a chained next stage is cancelled. So a loop reads the job's end
(`SLURM_JOB_END_TIME`, epoch seconds, which SLURM sets in the job's environment) and, before each step,
checks that the longest step so far plus the last checkpoint's save time still end before the job's end
(where SLURM does not set SLURM_JOB_END_TIME: the job's start plus the limit `nemo-lead submit` exports)
less a margin (`NEMO_LEAD_DEADLINE_MARGIN_S`, default 120 s). When they would not, it checkpoints,
asks SLURM to requeue the job (`nemo_lead.runtime.requeue`) and exits 0 saying why. The USR1 path stays for
preemption.

    deadline = Deadline.from_env(os.environ)          # None outside a job with a known end
    deadline.step_done(seconds); deadline.saved(seconds)
    if deadline.next_would_pass(time.time()): ...    # checkpoint, requeue, stop

`nemo-lead eval` (and the distill stage, which runs it) does the same per engine call: the longest call so
far plus the store's last flush must end before the job's end less the margin; otherwise it stops with what
it wrote kept, requeues and exits 0, and the rerun generates only the missing samples.

NEMO_LEAD_TEST_STEP_DELAY_S (tests only) adds that many seconds to every step and every eval call, so a
test can make one long without a large model.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Optional

from nemo_lead.runtime.requeue import requeue_current_job

END_ENV = "SLURM_JOB_END_TIME"
# where SLURM does not export its end (older releases): the job's start plus its limit, which the scripts of
# `nemo-lead submit` export (the limit parsed from --time; the start SLURM's, else the script's first second)
START_ENVS = ("SLURM_JOB_START_TIME", "NEMO_LEAD_JOB_START_TIME")
LIMIT_ENV = "NEMO_LEAD_JOB_TIME_LIMIT_S"
MARGIN_ENV = "NEMO_LEAD_DEADLINE_MARGIN_S"
DEFAULT_MARGIN_S = 120.0
TEST_DELAY_ENV = "NEMO_LEAD_TEST_STEP_DELAY_S"


def _seconds(env: Mapping[str, str], name: str) -> float:
    try:
        return float(env[name])
    except ValueError:
        raise ValueError(f"{name}={env[name]!r} is not a number of seconds") from None


def test_step_delay(env: Mapping[str, str] = os.environ) -> float:
    """The seconds the test hook adds to each step (0 unless NEMO_LEAD_TEST_STEP_DELAY_S is set)."""
    return float(env.get(TEST_DELAY_ENV) or 0)


@dataclass
class Deadline:
    end: float  # epoch seconds
    margin: float
    longest_step: float = 0.0
    last_save: float = 0.0

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Optional[Deadline]:
        """SLURM_JOB_END_TIME; without it the start (START_ENVS, the first set) plus NEMO_LEAD_JOB_TIME_LIMIT_S;
        None for a job without a known end."""
        if env.get(END_ENV):
            end = _seconds(env, END_ENV)
        else:
            start = next((name for name in START_ENVS if env.get(name)), None)
            if not env.get(LIMIT_ENV) or start is None:
                return None
            end = _seconds(env, start) + _seconds(env, LIMIT_ENV)
        if end <= 0:  # SLURM writes 0 for a job without a time limit
            return None
        return cls(end=end, margin=float(env.get(MARGIN_ENV) or DEFAULT_MARGIN_S))

    def step_done(self, seconds: float) -> None:
        self.longest_step = max(self.longest_step, seconds)

    def saved(self, seconds: float) -> None:
        self.last_save = seconds

    def next_would_pass(self, now: float) -> bool:
        """Whether one more step and a checkpoint after it would end past the job's end less the margin."""
        return now + self.longest_step + self.last_save > self.end - self.margin

    def why(self, now: float, step: int, unit: str = "step", save: str = "a checkpoint") -> str:
        """Why the loop stops before unit `step + 1` (`unit`: "step", "call"; `save`: what each one writes)."""
        return (f"stopping before {unit} {step + 1}: the job ends in {self.end - now:,.0f} s and a {unit} takes up "
                f"to {self.longest_step:,.0f} s, {save} {self.last_save:,.0f} s, with a margin of "
                f"{self.margin:,.0f} s ({END_ENV})")


def requeue_or_advise(say: Callable[[str], None], env: Mapping[str, str] = os.environ) -> bool:
    """After a stop before the job's end: under SLURM ask it to requeue the job (False when it refused: the
    command must then exit non-zero, so that a chained next stage does not start); outside SLURM say how to
    resume."""
    if "SLURM_JOB_ID" in env:
        return requeue_current_job()
    say("run the same command again (in a job with more time) to resume")
    return True
