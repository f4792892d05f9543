"""CPU compatibility layer: run megatron-core 0.16.1 on a machine without a GPU.

megatron-core assumes CUDA in a handful of places that are not about computing on a GPU at all (where a
scratch buffer is allocated, which RNG dropout forks, a `synchronize()` between p2p calls). This module
covers exactly those, measured on megatron-core 0.16.1 / torch 2.13 CPU (docs/design.md, "Facts measured on the CPU machines"):

1. `torch.cuda.current_device()` -> 0, `synchronize()` / `empty_cache()` -> no-ops, and
   `current_stream()` -> a stand-in stream whose waits do nothing. Megatron calls them to pick a device
   (`GlobalMemoryBuffer.get_tensor`, p2p shape exchange, rotary `inv_freq.to(...)`, dist_checkpointing) or
   to wait for kernels (megatron-core 0.19's DDP asks for the current stream in every gradient sync, to
   wait on CUDA-graph events; 0.16 did not); on CPU there is nothing to pick or wait for.
2. A `TorchFunctionMode` that maps every CUDA device given to a torch function (`device="cuda"`,
   `device=0` from (1), `.cuda()`, `.to("cuda")`, `pin_memory=True`) to the CPU. This covers literal
   `device="cuda"` tensors in the pipeline schedules, p2p shape buffers and the distributed optimizer's
   buffers without editing megatron's code. A mode is suspended while it handles a call, and
   `torch.autograd.backward` is such a call, so autograd's engine entry (`torch.autograd._engine_run_backward`,
   torch 2.13) is wrapped to re-enter the mode: backward code then sees it too (activation recomputation
   rebuilds causal masks with `device="cuda"` inside backward).
3. `Tensor.type()` strings: the optimizers and grad clipping accept only `'torch.cuda.FloatTensor'` (and
   half/bf16) params (`optimizer.py`, `distrib_optimizer.py`, `clip_grads.py`). The mode answers the CUDA
   name of the CPU type, but only to callers inside `megatron.core.optimizer`, so no other code is misled.
4. A CPU RNG tracker in place of megatron's `CudaRNGStatesTracker`: dropout in tensor-parallel regions
   forks `get_cuda_rng_tracker()`; on CPU it must fork the CPU default generator. Activation
   recomputation saves/restores "the CUDA RNG state" through `_get_cuda_rng_state`/`_set_cuda_rng_state`,
   which we point at the CPU generator too. With the tracker class replaced, megatron's own
   `tensor_parallel.model_parallel_cuda_manual_seed` works unchanged on CPU (its `torch.cuda.manual_seed`
   is a lazy no-op there); `nemo_lead.parallel.seed_model_parallel_rng` calls it on both devices.

Everything is undone by `disable()` (tests use it); `enable()` is idempotent. `suspended()` runs a block
without the mode (the patches of 1, 3 and 4 stay): for code that makes none of the assumptions of (2), such
as the rollout engine's decode loop, where the mode's Python hop on every torch call is a large part of a
tiny model's decode step. Apply it only when
`torch.cuda.is_available()` is False: `nemo_lead.parallel.init_parallel` does that. The mode is
thread-local: it covers the thread that called `enable()` (and autograd's backward), not megatron code run
from other threads. Sequence parallelism needs nothing here (gloo has the all-gather and reduce-scatter
it uses; the local spec's RMSNorm replaces torch's norm wrapper, which refuses it). Not covered (GPU-only
features): CUDA streams/events (keep DDP's `overlap_grad_reduce` / `overlap_param_gather` off on CPU), CUDA
graphs, TE, fused kernels.
"""

from __future__ import annotations

import contextlib
import sys
from typing import Any

import torch
from torch.overrides import TorchFunctionMode, _get_current_function_mode_stack, _pop_mode_temporarily

_CPU = torch.device("cpu")

# Tensor.type() answers seen by megatron's optimizer code (it only accepts CUDA tensor types).
_CUDA_TYPE_NAMES = {
    "torch.FloatTensor": "torch.cuda.FloatTensor",
    "torch.HalfTensor": "torch.cuda.HalfTensor",
    "torch.BFloat16Tensor": "torch.cuda.BFloat16Tensor",
}
_TYPE_NAME_CALLERS = ("megatron.core.optimizer",)


def _is_cuda_device(device: Any) -> bool:
    """True for "cuda", "cuda:1", torch.device("cuda") and bare ints (an int device means an accelerator)."""
    if isinstance(device, bool):
        return False
    if isinstance(device, int):
        return True
    if isinstance(device, str):
        return device.split(":")[0] == "cuda"
    return isinstance(device, torch.device) and device.type == "cuda"


class CudaToCpuMode(TorchFunctionMode):
    """Rewrites CUDA device arguments of every torch call to the CPU (see the module docstring)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _SPECIAL:
            if func is torch.Tensor.cuda:
                return args[0]
            if func is torch.Tensor.type and len(args) == 1 and not kwargs:
                name = func(*args)
                caller = sys._getframe(1).f_globals.get("__name__", "")
                return _CUDA_TYPE_NAMES.get(name, name) if caller.startswith(_TYPE_NAME_CALLERS) else name
            if func is torch.Tensor.to and len(args) > 1 and _is_cuda_device(args[1]):
                args = (args[0], _CPU, *args[2:])
        if kwargs and ("device" in kwargs or "pin_memory" in kwargs):  # the common call has neither: fast path
            kwargs = dict(kwargs)
            if _is_cuda_device(kwargs.get("device")):
                kwargs["device"] = _CPU
            if kwargs.get("pin_memory"):
                kwargs["pin_memory"] = False
        return func(*args, **kwargs)


_SPECIAL = frozenset({torch.Tensor.cuda, torch.Tensor.type, torch.Tensor.to})


class CpuRNGStatesTracker:
    """Megatron's RNG tracker API (add / fork / get_states / set_states / reset) on the CPU generator.

    `fork(name)` swaps the CPU default generator to the named state for the duration of the block and
    stores the advanced state back, exactly what megatron's tracker does with the CUDA generator.
    """

    def __init__(self, *_, **__):
        self.reset()

    def reset(self) -> None:
        self.states_: dict[str, torch.Tensor] = {}
        self.seeds_: set[int] = set()
        self._is_initialized = False

    def is_initialized(self) -> bool:
        return self._is_initialized

    def get_states(self) -> dict[str, torch.Tensor]:
        return dict(self.states_)

    def set_states(self, states: dict[str, torch.Tensor]) -> None:
        self._is_initialized = True
        self.states_ = dict(states)

    def add(self, name: str, seed: int) -> None:
        if seed in self.seeds_:
            raise ValueError(f"RNG seed {seed} is already tracked")
        if name in self.states_:
            raise ValueError(f"RNG state {name!r} is already tracked")
        self._is_initialized = True
        self.seeds_.add(seed)
        self.states_[name] = torch.Generator().manual_seed(seed).get_state()

    @contextlib.contextmanager
    def fork(self, name: str = "model-parallel-rng"):
        if name not in self.states_:
            raise KeyError(f"RNG state {name!r} is not tracked (seed_model_parallel_rng was not called)")
        outer = torch.get_rng_state()
        torch.set_rng_state(self.states_[name])
        try:
            yield
        finally:
            self.states_[name] = torch.get_rng_state()
            torch.set_rng_state(outer)


def _run_backward_in_mode(run_backward):
    """Wrap autograd's engine entry so backward code (custom Functions, activation recomputation) runs with
    the mode active: `torch.autograd.backward` is itself dispatched through the mode, and a mode is
    suspended while it handles a call, so without this the engine would run megatron's backward code
    (e.g. recomputed attention building `torch.ones(..., device="cuda")` masks) without it."""

    def run(*args, **kwargs):
        if _mode is None:
            return run_backward(*args, **kwargs)
        with _mode:
            return run_backward(*args, **kwargs)

    return run


class _CpuStream:
    """What megatron asks of `torch.cuda.current_stream()`: waits on other streams or events, which on the
    CPU (one stream of work, in program order) are already done."""

    def wait_event(self, event) -> None:
        pass

    def wait_stream(self, stream) -> None:
        pass

    def synchronize(self) -> None:
        pass


_CPU_STREAM = _CpuStream()


def _cpu_get_rng_state(device=None, clone=False, graph_safe=False):
    return torch.get_rng_state()


def _cpu_set_rng_state(new_state, device=-1, graph_safe=False):
    torch.set_rng_state(new_state)


# ----------------------------------------------------------------------------- enable / disable
_saved: list[tuple[Any, str, Any]] = []  # (owner, attribute, original value), restored by disable()
_mode: CudaToCpuMode | None = None


def _patch(owner: Any, attr: str, value: Any) -> None:
    _saved.append((owner, attr, getattr(owner, attr)))
    setattr(owner, attr, value)


def is_enabled() -> bool:
    return _mode is not None


def enable() -> None:
    """Install the CPU layer in this process (idempotent). Refuses to run where CUDA is available."""
    global _mode
    if _mode is not None:
        return
    if torch.cuda.is_available():
        raise RuntimeError("the CPU compatibility layer is for machines without a GPU; CUDA is available here")
    from megatron.core.tensor_parallel import random as mrandom

    _patch(torch.cuda, "current_device", lambda: 0)
    _patch(torch.cuda, "synchronize", lambda *a, **k: None)
    _patch(torch.cuda, "empty_cache", lambda: None)
    _patch(torch.cuda, "current_stream", lambda device=None: _CPU_STREAM)
    _patch(mrandom, "_get_cuda_rng_state", _cpu_get_rng_state)
    _patch(mrandom, "_set_cuda_rng_state", _cpu_set_rng_state)
    _patch(mrandom, "CudaRNGStatesTracker", CpuRNGStatesTracker)
    mrandom.initialize_rng_tracker(force_reset=True)  # a fresh tracker of the CPU class
    _patch(torch.autograd, "_engine_run_backward", _run_backward_in_mode(torch.autograd._engine_run_backward))
    _mode = CudaToCpuMode()
    _mode.__enter__()


@contextlib.contextmanager
def suspended():
    """The block runs without the device-rewriting mode (see the module docstring); a no-op when the mode
    is off, or when another mode was entered after it (popping ours would then pop that one)."""
    stack = _get_current_function_mode_stack()
    if _mode is None or not stack or stack[-1] is not _mode:
        yield
        return
    with _pop_mode_temporarily():
        yield


def disable() -> None:
    """Undo `enable()` (used between tests)."""
    global _mode
    if _mode is None:
        return
    _mode.__exit__(None, None, None)
    _mode = None
    while _saved:
        owner, attr, value = _saved.pop()
        setattr(owner, attr, value)
    from megatron.core.tensor_parallel import random as mrandom

    mrandom._CUDA_RNG_STATE_TRACKER = None
    mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = False
