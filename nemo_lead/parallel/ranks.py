"""The job's rank, size and barrier through torch.distributed, with one-process defaults when it is not
initialised: what checkpoint writers and loggers ask before deciding who writes."""

from __future__ import annotations

import torch.distributed as dist


def dist_rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def dist_world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def dist_barrier() -> None:
    if dist.is_initialized():
        dist.barrier()
