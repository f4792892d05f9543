"""When a job must begin to stop before its time limit, from the plan: the deadline margin the loops keep
(NEMO_LEAD_DEADLINE_MARGIN_S, `nemo_lead.runtime.deadline`) and SLURM's warning (`--signal=USR1@S`).

- save: one full checkpoint (`HostNeeds.checkpoint_bytes`) written at CHECKPOINT_WRITE_GBPS per node, a
  shared file system's write rate per client (an assumption, like the plan's other rates);
- margin: the requeue and the exit (the loops' default margin) plus STEP_SLACK of a step, since a step may
  run longer than the longest one measured so far (an RL step's time follows its response lengths);
- signal: one step, one checkpoint and the margin. The loops stop by the job's end before the warning is
  due; where they cannot read the end, the warning still leaves the step in flight and its checkpoint time
  to finish. SLURM takes at most SLURM_SIGNAL_MAX_S.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from nemo_lead.runtime.deadline import DEFAULT_MARGIN_S

CHECKPOINT_WRITE_GBPS = 1.0  # GB/s per node
STEP_SLACK = 0.2
SLURM_SIGNAL_MAX_S = 65535  # sbatch --signal's largest time


@dataclass(frozen=True)
class StopTimes:
    step_s: float
    save_s: float
    margin_s: int
    signal_s: int

    def describe(self) -> str:
        return (f"signal USR1@{self.signal_s}, deadline margin {self.margin_s} s (plan: step {self.step_s:,.0f} s, "
                f"checkpoint {self.save_s:,.0f} s)")


def stop_times(step_s: float, checkpoint_bytes: int, nodes: int) -> StopTimes:
    """The margin and the warning of a job whose plan says one step takes `step_s` seconds and one
    checkpoint holds `checkpoint_bytes`, written from `nodes` nodes."""
    save = checkpoint_bytes / (CHECKPOINT_WRITE_GBPS * 1e9 * nodes)
    margin = math.ceil(DEFAULT_MARGIN_S + STEP_SLACK * step_s)
    return StopTimes(step_s, save, margin, min(math.ceil(step_s + save) + margin, SLURM_SIGNAL_MAX_S))
