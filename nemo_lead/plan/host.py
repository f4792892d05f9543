"""What a job needs besides its GPUs: host memory per node, CPU cores per task, the bytes of one checkpoint,
the disk a run needs with `keep_last`, and a stage's time (steps x the plan's step time).

Every memory figure of the plan is in GiB (2^30 bytes), as `--mem=NG` is in SLURM (its suffixes count in
1024s). Host memory per node:
- pinned offload copies (`actor.offload_during_generation`, RL only): each rank's optimizer state, the plan's
  `update` figure, times the ranks on the node (the gradient buffers are freed, not copied:
  `nemo_lead.training.offload`; the same bytes as the plan's `host_bytes_per_node` at 8 ranks a node);
- HOST_GIB_PER_RANK per rank: the Python process with torch, megatron and CUDA's host-side state, the
  tokenizer and the problem or trace set (an allowance, not a measurement);
- VERIFIER_GIB per grader process (`verify.workers`, on global rank 0) and one core each.
A full checkpoint holds the weights (the training precision) and the optimizer's fp32 master copy and two
Adam moments: 2 + 12 bytes per parameter in bf16. The run keeps `keep_last` of them and writes the next
before it deletes the oldest, so its disk is keep_last + 1 checkpoints (keep_last=0: every save is kept).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Optional

from .job import GIB, JobPlan
from .parameters import DTYPE_BYTES, parameter_count

HOST_GIB_PER_RANK = 16.0
VERIFIER_GIB = 1.0
OPTIMIZER_BYTES_PER_PARAMETER = 12  # fp32 master copy + Adam's two moments (fp32), as megatron saves them


@dataclass(frozen=True)
class HostNeeds:
    memory_gib_per_node: float
    cpus_per_task: int
    checkpoint_bytes: int  # one full checkpoint (weights + optimizer state)
    disk_bytes: Optional[int]  # checkpoints kept at once (None: keep_last=0 keeps every one)
    steps: Optional[int]  # None: decided by the data (SFT epochs)
    stage_seconds: Optional[float]  # steps x the plan's step time

    def as_json(self) -> dict[str, Any]:
        return {"host_memory_gib_per_node": round(self.memory_gib_per_node, 1), "cpus_per_task": self.cpus_per_task,
                "checkpoint_bytes": self.checkpoint_bytes, "disk_bytes": self.disk_bytes, "steps": self.steps,
                "stage_seconds": None if self.stage_seconds is None else round(self.stage_seconds)}


def host_needs(plan: JobPlan, cfg: Any, ranks_per_node: int) -> HostNeeds:
    """The host side of `plan` (`cfg`: the job's SFTConfig / RLConfig) with `ranks_per_node` ranks a node."""
    s = plan.shape
    pinned = plan.phases["update"]["optimizer"] if s.offload and s.kind == "rl" else 0
    workers = cfg.verify.workers if s.kind == "rl" else 0
    memory = ranks_per_node * (pinned / GIB + HOST_GIB_PER_RANK) + workers * VERIFIER_GIB
    params = parameter_count(s.arch, s.vocab_divisible_by)
    checkpoint = params * (DTYPE_BYTES[s.precision] + OPTIMIZER_BYTES_PER_PARAMETER)
    disk = checkpoint * (cfg.keep_last + 1) if cfg.keep_last else None
    steps = cfg.steps
    seconds = steps * plan.time.total if steps is not None and plan.time is not None else None
    return HostNeeds(memory, 2 + math.ceil(workers / ranks_per_node), checkpoint, disk, steps, seconds)


def describe_host(h: HostNeeds) -> list[str]:
    """The report's lines for `h`."""
    disk = (f"{h.disk_bytes / GIB:,.0f} GiB with keep_last" if h.disk_bytes is not None
            else "every checkpoint is kept (keep_last=0)")
    time = (f"{h.steps} steps = {h.stage_seconds / 3600:,.1f} h" if h.stage_seconds is not None
            else "steps set by the data (epochs)" if h.steps is None else "no step time for this engine")
    return [f"  host: {h.memory_gib_per_node:,.0f} GiB per node, {h.cpus_per_task} CPU cores per task; "
            f"checkpoint {h.checkpoint_bytes / GIB:,.0f} GiB per save, disk {disk}; stage time {time}"]
