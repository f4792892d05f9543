"""Start and stop torch.distributed + megatron-core's parallel state, the same way everywhere.

One entry point for every launcher:
- `torchrun` (RANK / WORLD_SIZE / LOCAL_RANK / MASTER_ADDR / MASTER_PORT in the environment),
- `srun` (SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID; the master is the first node of the step),
- a plain `python` process: world size 1, a free localhost port, no environment needed.
Backend: nccl when CUDA is available (each process binds GPU LOCAL_RANK), gloo otherwise, and then the
CPU compatibility layer (`nemo_lead.parallel.cpu`) is switched on.

Tested on CPU/gloo (tests/parallel): single process, 2 ranks as TP2 / PP2 / DP2, re-initialisation with a
different layout in the same processes (`destroy_parallel` then `init_parallel`).
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from nemo_lead.parallel import cpu
from nemo_lead.parallel.host_memory import retain_freed_memory
from nemo_lead.parallel.layout import check_layout, model_shape


@dataclass(frozen=True)
class Launch:
    """Where this process sits, as told by its launcher."""

    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int  # 0 = pick a free port (single process only)
    launcher: str  # "torchrun" | "slurm" | "single"


@dataclass(frozen=True)
class ParallelInfo:
    """What `init_parallel` set up; pass it to `nemo_lead.models.build_gpt`."""

    rank: int
    world_size: int
    local_rank: int
    tp: int
    pp: int
    dp: int
    tp_rank: int
    pp_rank: int
    dp_rank: int
    backend: str
    device: torch.device
    launcher: str

    @property
    def is_first_stage(self) -> bool:
        return self.pp_rank == 0

    @property
    def is_last_stage(self) -> bool:
        return self.pp_rank == self.pp - 1


def _first_slurm_host(nodelist: str) -> str:
    """First host of a SLURM node list: "gpu[03-05,07],cpu1" -> "gpu03"; "a,b" -> "a"."""
    m = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not m:
        raise ValueError(f"cannot read the SLURM node list {nodelist!r}")
    prefix, ranges = m.group(1), m.group(2)
    if not ranges:
        return prefix
    return prefix + ranges.split(",")[0].split("-")[0]


def detect_launch(env: Mapping[str, str]) -> Launch:
    """Read rank / world size / master address from a launcher's environment variables (pure)."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return Launch(
            rank=int(env["RANK"]),
            world_size=int(env["WORLD_SIZE"]),
            local_rank=int(env.get("LOCAL_RANK", 0)),
            master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
            master_port=int(env.get("MASTER_PORT", 29500)),
            launcher="torchrun",
        )
    if "SLURM_PROCID" in env and ("SLURM_STEP_NUM_TASKS" in env or "SLURM_NTASKS" in env):
        nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or "127.0.0.1"
        job_id = int(env.get("SLURM_JOB_ID", "0") or 0)
        return Launch(
            rank=int(env["SLURM_PROCID"]),
            world_size=int(env.get("SLURM_STEP_NUM_TASKS") or env["SLURM_NTASKS"]),
            local_rank=int(env.get("SLURM_LOCALID", 0)),
            master_addr=env.get("MASTER_ADDR") or _first_slurm_host(nodelist),
            # a port that all tasks of the job agree on without talking to each other
            master_port=int(env.get("MASTER_PORT") or 20000 + job_id % 20000),
            launcher="slurm",
        )
    return Launch(rank=0, world_size=1, local_rank=0, master_addr="127.0.0.1", master_port=0, launcher="single")


def rank_hosts() -> list[str]:
    """Collective: each rank's host name, in rank order ([this host] without torch.distributed)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return [socket.gethostname()]
    hosts: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(hosts, socket.gethostname())
    return [str(h) for h in hosts]


def describe_hosts(hosts: list[str]) -> str:
    """Where the ranks run, for a job's log: ["n1", "n1", "n2"] -> "3 ranks on 2 nodes: n1 (ranks 0-1), n2 (rank 2)"."""
    spans: dict[str, list[list[int]]] = {}
    for rank, host in enumerate(hosts):
        runs = spans.setdefault(host, [])
        if runs and runs[-1][1] == rank - 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    parts = []
    for host, runs in spans.items():
        ranks = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
        parts.append(f"{host} (rank{'s' if len(runs) > 1 or runs[0][0] != runs[0][1] else ''} {ranks})")
    nodes = f"{len(spans)} node{'s' if len(spans) > 1 else ''}"
    return f"{len(hosts)} rank{'s' if len(hosts) > 1 else ''} on {nodes}: {', '.join(parts)}"


def free_port() -> int:
    """A TCP port that was free a moment ago on localhost."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def seed_model_parallel_rng(seed: int) -> None:
    """Seed the default generators and megatron's tracked RNG states (dropout inside TP regions).

    Same offsets as megatron's `model_parallel_cuda_manual_seed` (which this calls): the default state is
    `seed` on every rank, the tensor-parallel state `seed + 2718 + tp_rank`. On CPU the tracker is the CPU
    one installed by `cpu.enable()`, so the call is the same on both devices.
    """
    from megatron.core import tensor_parallel

    torch.manual_seed(seed)
    tensor_parallel.model_parallel_cuda_manual_seed(seed)


_started_process_group = False  # did init_parallel start torch.distributed (then destroy_parallel stops it)?


def init_parallel(
    tp: int = 1,
    pp: int = 1,
    *,
    seed: int = 1234,
    model_config: Mapping[str, Any] | None = None,
    backend: str | None = None,
    timeout_minutes: float = 30,
) -> ParallelInfo:
    """Start torch.distributed and megatron's model-parallel groups for TP x PP (DP = the rest).

    `model_config`: a HF config.json dict; when given, the layout is checked against its heads and layers
    before anything starts (`check_layout`). If torch.distributed is already initialised (by the caller)
    it is reused and left running by `destroy_parallel`.
    """
    launch = detect_launch(os.environ)
    world_size = dist.get_world_size() if dist.is_initialized() else launch.world_size
    shape = model_shape(model_config) if model_config is not None else {}
    layout = check_layout(world_size, tp, pp, **shape)

    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(launch.local_rank % torch.cuda.device_count())
    else:
        cpu.enable()
        retain_freed_memory()  # glibc would hand each step's activations back to the kernel (host_memory)
    backend = backend or ("nccl" if cuda else "gloo")

    global _started_process_group
    if not dist.is_initialized():
        port = launch.master_port or free_port()
        dist.init_process_group(
            backend=backend,
            init_method=f"tcp://{launch.master_addr}:{port}",
            rank=launch.rank,
            world_size=launch.world_size,
            timeout=timedelta(minutes=timeout_minutes),
        )
        _started_process_group = True

    from megatron.core import parallel_state as ps

    ps.initialize_model_parallel(
        tensor_model_parallel_size=layout.tp,
        pipeline_model_parallel_size=layout.pp,
        distributed_timeout_minutes=int(max(1, timeout_minutes)),
    )
    seed_model_parallel_rng(seed)
    return ParallelInfo(
        rank=dist.get_rank(),
        world_size=world_size,
        local_rank=launch.local_rank,
        tp=layout.tp,
        pp=layout.pp,
        dp=layout.dp,
        tp_rank=ps.get_tensor_model_parallel_rank(),
        pp_rank=ps.get_pipeline_model_parallel_rank(),
        dp_rank=ps.get_data_parallel_rank(),
        backend=dist.get_backend(),
        device=torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu"),
        launcher=launch.launcher,
    )


def destroy_parallel(keep_process_group: bool = False) -> None:
    """Undo `init_parallel`: megatron's groups and RNG tracker, the process group if we started it, the
    CPU layer. Safe to call twice.

    To run several layouts in turn in the same processes (tests), pass `keep_process_group=True`: the
    next `init_parallel` reuses the running default group. Re-creating it at once on the same port races
    with the old TCP store (ranks connect to the dying one) and can hang.
    """
    global _started_process_group
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel import random as mrandom

    if ps.model_parallel_is_initialized():
        ps.destroy_model_parallel()
    mrandom.initialize_rng_tracker(force_reset=True)
    if keep_process_group:
        return
    if _started_process_group and dist.is_initialized():
        dist.destroy_process_group()
        _started_process_group = False
    cpu.disable()
