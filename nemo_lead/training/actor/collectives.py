"""The few collectives the actor's steps need beyond megatron's schedule: sums and maxima of a handful of
numbers over the data-parallel group, and sharing the last pipeline stage's results with the other stages.

Tensors travel on the device the process group's backend needs (CUDA for nccl, the CPU for gloo)."""

from __future__ import annotations

import torch
import torch.distributed as dist


def data_parallel():
    """(size, rank, group) of this rank's data-parallel group."""
    from megatron.core import parallel_state as ps

    return ps.get_data_parallel_world_size(), ps.get_data_parallel_rank(), ps.get_data_parallel_group()


def is_last_stage() -> bool:
    from megatron.core import parallel_state as ps

    return ps.is_pipeline_last_stage()


def broadcast_from_last_stage(t: torch.Tensor) -> torch.Tensor:
    from megatron.core import parallel_state as ps

    if ps.get_pipeline_model_parallel_world_size() > 1:
        group = ps.get_pipeline_model_parallel_group()
        dist.broadcast(t, src=dist.get_global_rank(group, ps.get_pipeline_model_parallel_world_size() - 1),
                       group=group)
    return t


def reduce_metrics(outputs: list[dict[str, torch.Tensor]], sums: list[str], maxes: list[str]) -> dict[str, float]:
    """Sum (`sums`) / max (`maxes`) the micro-batches' metrics on the last stage, over DP, then share them
    with the other pipeline stages. Keys must be the same on every rank."""
    _, _, group = data_parallel()
    device = collective_device()
    total = torch.zeros(len(sums), dtype=torch.float64, device=device)
    peak = torch.full((len(maxes),), float("-inf"), dtype=torch.float64, device=device)
    for out in outputs:
        if sums:
            total += torch.stack([out[k].detach().double() for k in sums]).to(device)
        if maxes:
            peak = torch.maximum(peak, torch.stack([out[k].detach().double() for k in maxes]).to(device))
    if is_last_stage():
        dist.all_reduce(total, group=group)
        if maxes:
            dist.all_reduce(peak, op=dist.ReduceOp.MAX, group=group)
    packed = broadcast_from_last_stage(torch.cat([total, peak]))
    return dict(zip([*sums, *maxes], packed.cpu().tolist()))


def collective_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def dp_sum(values: list[float]) -> list[float]:
    """Sum a few numbers over the DP group (float64)."""
    _, _, group = data_parallel()
    t = torch.tensor(values, dtype=torch.float64, device=collective_device())
    dist.all_reduce(t, group=group)
    return t.cpu().tolist()


def dp_max(value: float) -> float:
    _, _, group = data_parallel()
    t = torch.tensor([value], dtype=torch.float64, device=collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t)
