"""What a job needs besides its GPUs: host memory per node, CPU cores per task, the bytes of one checkpoint,
the disk a run needs with `keep_last`, and a stage's time (steps x the plan's step time, at the stated mean
response and with every response at max_tokens; none for a layout that does not fit: the time of the
fastest layout that fits stands in, named, when one is given).

Every memory figure of the plan is in GiB (2^30 bytes), as `--mem=NG` is in SLURM (its suffixes count in
1024s). Host memory per node:
- what the plan keeps on the host while the engine generates (`host_bytes_per_node`, per rank times the ranks
  on the node): pinned offload copies (`actor.offload_during_generation`, RL only: each rank's optimizer
  state, the plan's `update` figure; the gradient buffers are freed, not copied:
  `nemo_lead.training.actor.offload`) and, with `engine.kind=vllm`, vLLM's weights asleep during the update
  (sleep level 1, the default on GPUs);
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

from nemo_lead.plan.job import GIB, GPUS_PER_NODE, JobPlan
from nemo_lead.plan.parameters import DTYPE_BYTES, parameter_count

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
    stage_seconds: Optional[float]  # steps x the step time (of `timed_layout` when that is given)
    stage_seconds_all_at_max: Optional[float] = None  # the same with every response at max_tokens
    timed_layout: Optional[str] = None  # the layout timed instead of the configured one, which does not fit
    no_time: str = ""  # why there is no stage time, when there is none

    def as_json(self) -> dict[str, Any]:
        return {"host_memory_gib_per_node": round(self.memory_gib_per_node, 1), "cpus_per_task": self.cpus_per_task,
                "checkpoint_bytes": self.checkpoint_bytes, "disk_bytes": self.disk_bytes, "steps": self.steps,
                "stage_seconds": None if self.stage_seconds is None else round(self.stage_seconds),
                "stage_seconds_all_at_max": (None if self.stage_seconds_all_at_max is None
                                             else round(self.stage_seconds_all_at_max)),
                "timed_layout": self.timed_layout}


def host_needs(plan: JobPlan, cfg: Any, ranks_per_node: int, fastest: JobPlan | None = None,
               fastest_name: str | None = None) -> HostNeeds:
    """The host side of `plan` (`cfg`: the job's SFTConfig / RLConfig) with `ranks_per_node` ranks a node. The
    stage time is the plan's when it fits; else `fastest`'s (the fastest layout that fits, `fastest_name`
    naming it), else none."""
    s = plan.shape
    # per rank: the plan's host bytes while the engine generates (pinned optimizer copies; vLLM's weights asleep)
    pinned = plan.host_bytes_per_node / min(s.gpus, GPUS_PER_NODE)
    workers = cfg.verify.workers if s.kind == "rl" else 0
    memory = ranks_per_node * (pinned / GIB + HOST_GIB_PER_RANK) + workers * VERIFIER_GIB
    params = parameter_count(s.arch, s.vocab_divisible_by)
    checkpoint = params * (DTYPE_BYTES[s.precision] + OPTIMIZER_BYTES_PER_PARAMETER)
    disk = checkpoint * (cfg.keep_last + 1) if cfg.keep_last else None
    steps = cfg.steps if s.kind == "rl" else sft_steps(cfg)
    timed, name = (plan, None) if plan.fits else (fastest, fastest_name)
    seconds = worst = None
    if steps is None:
        why = "steps set by the data (epochs; plan.data_rows=N gives the plan the traces' number)"
    elif timed is None:
        why = "none: as configured it does not fit, and no layout that fits was found"
    elif timed.time is None:
        why = "no step time for this engine"
    else:
        why, seconds, worst = "", steps * timed.time.total, steps * timed.worst_time.total
    return HostNeeds(memory, 2 + math.ceil(workers / ranks_per_node), checkpoint, disk, steps, seconds, worst,
                     name if seconds is not None else None, why)


def sft_steps(cfg: Any) -> Optional[int]:
    """An SFT job's optimizer steps: epochs x ceil(traces / global_batch) with the traces `plan.data_rows`
    (None when not given: the data decides)."""
    rows = cfg.plan.data_rows
    return None if rows is None else cfg.epochs * math.ceil(rows / cfg.global_batch)


def describe_host(h: HostNeeds) -> list[str]:
    """The report's lines for `h`."""
    disk = (f"{h.disk_bytes / GIB:,.0f} GiB with keep_last" if h.disk_bytes is not None
            else "every checkpoint is kept (keep_last=0)")
    if h.stage_seconds is not None:
        time = f"{h.steps} steps = {h.stage_seconds / 3600:,.1f} h"
        if round(h.stage_seconds_all_at_max) != round(h.stage_seconds):  # RL at a stated mean response
            time += f" (every response at max_tokens: {h.stage_seconds_all_at_max / 3600:,.1f} h)"
        if h.timed_layout:
            time += f" at the fastest layout that fits, {h.timed_layout} (as configured it does not fit)"
    else:
        time = h.no_time
    return [f"  host: {h.memory_gib_per_node:,.0f} GiB per node, {h.cpus_per_task} CPU cores per task; "
            f"checkpoint {h.checkpoint_bytes / GIB:,.0f} GiB per save, disk {disk}; stage time {time}"]
