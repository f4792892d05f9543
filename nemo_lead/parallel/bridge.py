"""One job as two: trainer ranks and generator ranks, each side with a torch.distributed default world and a
megatron parallel state of its own, joined by process groups that span the whole job (the split layout of
`rollout.generator_ranks`, `nemo_lead.training.rl.split`).

    sides = join_sides(generator_ranks=G)   # every rank, before init_parallel: the last G ranks generate
    info = init_parallel(tp, pp)            # megatron's groups over this side's ranks only
    ...sides.bridge_weights / sides.bridge_batches: send_object, recv_object, send_tensors, recv_tensors...
    sides.close()

Why two default worlds joined explicitly, not one world with sub-groups: megatron-core's parallel state
(`initialize_model_parallel`) builds its tensor-, pipeline- and data-parallel groups over every rank of
the default world; it has no way to leave ranks out. With the generators in the trainers' world they would
be data-parallel replicas of the actor: in every gradient all-reduce, every distributed-optimizer gather and
every checkpoint. So each side calls `init_process_group` on its own ranks (side rank = job rank minus the
side's first rank; the trainers come first, so a trainer's side rank is its job rank and global rank 0
writes the run folder as always), and megatron sees a normal job of that size. The join is two gloo
process groups over all ranks of the job, built directly on the launcher's TCP store (under a prefix of
their own, as the two worlds are), not registered as torch.distributed groups: they are used through their
own send / recv (tagged point-to-point, asynchronous), which no collective of either side can disturb.
Weights travel through host memory (gloo): GPU tensors are copied to the host on one side and back on the
other; NCCL between the two sides' GPUs would be faster and is not done here.
"""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from nemo_lead.parallel.state import detect_launch

TRAINER, GENERATOR = "trainer", "generator"


@dataclass
class Sides:
    """This rank's place in a job split into trainers (job ranks 0 .. trainers-1) and generators (the rest)."""

    role: str  # TRAINER | GENERATOR
    rank: int  # in the whole job (the bridges' rank)
    trainers: int
    generators: int
    bridge_weights: Any  # gloo over the job: trainer -> generator weights and control headers
    bridge_batches: Any  # gloo over the job: generator -> trainer batches, trainer -> generator the start message

    @property
    def is_generator(self) -> bool:
        return self.role == GENERATOR

    @property
    def first_generator(self) -> int:
        return self.trainers

    def close(self) -> None:
        """End this side's default world (the bridges go with the objects)."""
        if dist.is_initialized():
            dist.destroy_process_group()


def join_sides(generator_ranks: int, timeout_minutes: float = 30) -> Sides:
    """Collective over the whole job: this side's default world and the two bridges (module docstring)."""
    launch = detect_launch(os.environ)
    world, rank = launch.world_size, launch.rank
    if not 0 < generator_ranks < world:
        raise ValueError(f"rollout.generator_ranks={generator_ranks} needs a job of more ranks than that (this one has "
                         f"{world}): the first ranks train, the last {generator_ranks} generate")
    if dist.is_initialized():
        raise RuntimeError("join_sides starts the default process group itself: call it before anything else does")
    timeout = timedelta(minutes=timeout_minutes)
    # torchrun's agent already serves the store at MASTER_PORT: connect to it (as init_process_group would)
    serve = rank == 0 and os.environ.get("TORCHELASTIC_USE_AGENT_STORE") != "True"
    store = dist.TCPStore(launch.master_addr, launch.master_port, world, is_master=serve, timeout=timeout)
    trainers = world - generator_ranks
    role = GENERATOR if rank >= trainers else TRAINER
    side_rank, side_size = (rank - trainers, generator_ranks) if role == GENERATOR else (rank, trainers)
    cuda = torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(launch.local_rank % torch.cuda.device_count())
    dist.init_process_group("nccl" if cuda else "gloo", store=dist.PrefixStore(f"{role}/", store), rank=side_rank,
                            world_size=side_size, timeout=timeout)
    weights = dist.ProcessGroupGloo(dist.PrefixStore("bridge/weights/", store), rank, world, timeout)
    batches = dist.ProcessGroupGloo(dist.PrefixStore("bridge/batches/", store), rank, world, timeout)
    return Sides(role, rank, trainers, generator_ranks, weights, batches)


def gather_ints(group: Any, values: list[int]) -> list[list[int]]:
    """Every rank's `values` (the same length everywhere), in job-rank order. Collective over `group`."""
    mine = torch.tensor(values, dtype=torch.long)
    out = [torch.empty_like(mine) for _ in range(group.size())]
    group.allgather([out], [mine]).wait()
    return [t.tolist() for t in out]


# ----------------------------------------------------------------------------- messages
@dataclass
class Pending:
    """Sends in flight and the buffers they read (kept alive until `wait`)."""

    works: list
    buffers: list

    def done(self) -> bool:
        return all(w.is_completed() for w in self.works)

    def wait(self) -> None:
        for w in self.works:
            w.wait()
        self.works, self.buffers = [], []


def send_object(group: Any, obj: Any, dst: int, tag: int) -> Pending:
    """Start sending a picklable object to job rank `dst` (its size first); `recv_object` takes it."""
    payload = torch.frombuffer(bytearray(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)), dtype=torch.uint8)
    size = torch.tensor([payload.numel()], dtype=torch.long)
    return Pending([group.send([size], dst, tag), group.send([payload], dst, tag)], [size, payload])


def recv_object(group: Any, src: int, tag: int) -> Any:
    """The next object `send_object` sent from job rank `src` with `tag` (blocks until it is here)."""
    size = torch.empty(1, dtype=torch.long)
    group.recv([size], src, tag).wait()
    payload = torch.empty(int(size), dtype=torch.uint8)
    group.recv([payload], src, tag).wait()
    return pickle.loads(payload.numpy().tobytes())


def bucket_plan(tensors: list[torch.Tensor], bucket_bytes: float) -> list[list[int]]:
    """Indices of `tensors` in consecutive buckets of one dtype and at most `bucket_bytes` each (a larger
    tensor gets a bucket of its own). Both ends compute it from the same shapes, so it is never sent."""
    plan: list[list[int]] = []
    size, dtype = 0.0, None
    for i, t in enumerate(tensors):
        nbytes = t.numel() * t.element_size()
        if not plan or t.dtype != dtype or size + nbytes > bucket_bytes:
            plan.append([])
            size, dtype = 0.0, t.dtype
        plan[-1].append(i)
        size += nbytes
    return plan


def send_tensors(group: Any, tensors: list[torch.Tensor], plan: list[list[int]], dst: int, tag: int) -> Pending:
    """Start sending `tensors` bucket by bucket: each bucket is copied into one flat host buffer first, so the
    tensors may change as soon as this returns."""
    buffers = [torch.cat([tensors[i].detach().reshape(-1).cpu() for i in bucket]) for bucket in plan]
    return Pending([group.send([b], dst, tag) for b in buffers], buffers)


def recv_tensors(group: Any, tensors: list[torch.Tensor], plan: list[list[int]], src: int, tag: int) -> None:
    """Receive what `send_tensors` sent (the same plan) into `tensors`, in place."""
    with torch.no_grad():
        for bucket in plan:
            flat = torch.empty(sum(tensors[i].numel() for i in bucket), dtype=tensors[bucket[0]].dtype)
            group.recv([flat], src, tag).wait()
            at = 0
            for i in bucket:
                n = tensors[i].numel()
                tensors[i].copy_(flat[at:at + n].view_as(tensors[i]))
                at += n
