"""Exact live tensor memory on the CPU: a dispatch mode that sees every storage an operation allocates.

    with LiveTensorBytes() as m:
        step()
    m.peak            # the most bytes of storages allocated inside the block and alive at once

Every aten operation's outputs pass through `__torch_dispatch__`; an output whose storage is not one of the
operation's inputs' (so not a view or an in-place result) is a new allocation: its bytes count from then
until its storage is freed (a weakref finalizer: torch keeps one Python object per storage). Storages that
existed before the block (weights, DDP buffers, optimizer state) are never counted, so `peak` is the step's
own working memory. Exact, unlike RSS (allocator caching, glibc's thresholds, page granularity).
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveTensorBytes(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.live: dict[int, int] = {}
        self.now = 0
        self.peak = 0

    def _free(self, key: int) -> None:
        self.now -= self.live.pop(key, 0)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)}
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key, nbytes = storage.data_ptr(), storage.nbytes()
            if key and nbytes and key not in inputs and key not in self.live:
                self.live[key] = nbytes
                self.now += nbytes
                self.peak = max(self.peak, self.now)
                weakref.finalize(storage, self._free, key)
        return out
