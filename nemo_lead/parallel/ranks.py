"""The job's rank, size and barrier through torch.distributed, with one-process defaults when it is not
initialised: what checkpoint writers and loggers ask before deciding who writes; and the one way a value
global rank 0 computed reaches every rank (`share_from_rank0`, `on_writer_then_share`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import torch.distributed as dist

T = TypeVar("T")


def dist_rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def dist_world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def dist_barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


def share_from_rank0(value: T, world_size: int | None = None) -> T:
    """`value` as global rank 0 holds it, on every rank (a broadcast; collective). `world_size`: the job's,
    when the caller knows it (default: torch.distributed's); one process returns `value` as it is."""
    if (dist_world_size() if world_size is None else world_size) <= 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def on_writer_then_share(info: Any, fn: Callable[[], T]) -> T:
    """Run `fn()` on global rank 0 (`info.rank`) and hand its result (or its ValueError) to every rank."""
    result: Any = None
    if info.rank == 0:
        try:
            result = ("ok", fn())
        except ValueError as e:
            result = ("error", str(e))
    kind, value = share_from_rank0(result, info.world_size)
    if kind == "error":
        raise ValueError(value)
    return value
