"""The actor's optimizer state and DDP gradient buffers out of device memory while the rollout engine
generates (`actor.offload_during_generation`), back before the update.

    with offloaded(actor, cfg.actor.offload_during_generation):
        rollouts = engine.generate(...)

In colocated RL the engine shares the GPU with the actor, whose Adam state (and fp32 master weights for
half-precision parameters) and gradient buffer sit idle during generation: for a 14B model at TP8 about 28
of its 34 GB per GPU. What moves:
- optimizer state: the inner torch optimizers' state tensors (exp_avg, exp_avg_sq, step) and master
  parameters, every storage not shared with the model's own parameters (the engine runs on those), are
  copied to host memory (pinned on a GPU) and their device storages shrunk to nothing; `restore` grows
  them back and copies the values in, so every view (megatron's shard and master-weight views) stays valid
  and the bytes are exactly the same;
- DDP's gradient buffers: their storages are shrunk without a copy. Their values are dead between steps:
  every train step starts by zeroing them (`zero_grad_buffer`), so `restore` gives them back zeroed.
The storages keep their identity (`untyped_storage().resize_`), so nothing that holds a view notices.
Tested: tests/training/test_offload.py (bytes freed and restored exactly), tests/training/test_loops.py
(an RL run with offload equals the same run without: metrics and final weights).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class Offloaded:
    """What `offload` moved: (storage, host copy or None, size in bytes)."""

    moved: list[tuple[Any, torch.Tensor | None, int]] = field(default_factory=list)

    @property
    def device_bytes(self) -> int:
        return sum(n for _, _, n in self.moved)


def _byte_view(storage) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def _optimizer_tensors(actor) -> list[torch.Tensor]:
    out = []
    for chained in getattr(actor.optimizer, "chained_optimizers", [actor.optimizer]):
        inner = getattr(chained, "optimizer", chained)
        out += [p for g in inner.param_groups for p in g["params"]]
        out += [v for state in inner.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    return out


def _grad_buffers(actor) -> list[torch.Tensor]:
    ddp = actor.model
    return [b.grad_data for b in [*getattr(ddp, "buffers", []), *getattr(ddp, "expert_parallel_buffers", [])]]


def offload(actor) -> Offloaded:
    """Move the optimizer state to the host and free the gradient buffers (see the module docstring)."""
    keep = {p.untyped_storage().data_ptr() for p in actor.model.parameters()}
    keep |= {b.param_data.untyped_storage().data_ptr() for b in getattr(actor.model, "buffers", [])
             if getattr(b, "param_data", None) is not None}
    done = Offloaded()
    seen: set[int] = set()
    pin = torch.cuda.is_available()
    for tensors, copy in ((_optimizer_tensors(actor), True), (_grad_buffers(actor), False)):
        for t in tensors:
            storage = t.untyped_storage()
            ptr, nbytes = storage.data_ptr(), storage.nbytes()
            if ptr in keep or ptr in seen or nbytes == 0:
                continue
            seen.add(ptr)
            host = None
            if copy:
                host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=pin)
                host.copy_(_byte_view(storage), non_blocking=pin)
            done.moved.append((storage, host, nbytes))
    if pin:
        torch.cuda.synchronize()  # the copies are done before their sources go
    for storage, _, _ in done.moved:
        storage.resize_(0)
    if pin:
        torch.cuda.empty_cache()  # for an engine outside this process's allocator (TensorRT-LLM)
    return done


def restore(done: Offloaded) -> None:
    """Give back what `offload` took: optimizer state with its values, gradient buffers zeroed."""
    for storage, host, nbytes in done.moved:
        storage.resize_(nbytes)
        view = _byte_view(storage)
        if host is None:
            view.zero_()
        else:
            view.copy_(host, non_blocking=host.is_pinned())
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    done.moved.clear()


@contextlib.contextmanager
def offloaded(actor, enabled: bool = True):
    """The block runs with the actor's optimizer state and gradient buffers off the device (when `enabled`)."""
    if not enabled:
        yield None
        return
    done = offload(actor)
    try:
        yield done
    finally:
        restore(done)
