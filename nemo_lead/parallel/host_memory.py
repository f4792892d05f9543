"""Keep freed host memory mapped between training steps on CPU (glibc's malloc), as CUDA's caching
allocator keeps device memory on a GPU.

Why: torch's CPU allocator is plain `malloc`. With glibc's defaults, a freed block of 32 MiB or more goes
back to the kernel at once (mmap threshold), and after every backward pass, when the step's activations
are freed, the free top of the heap is handed back too (trim threshold: at most twice the dynamic mmap
threshold). The next forward pass then faults every page of its activations back in: tens of thousands of
minor page faults per train step, a few percent of the step and most of its step-to-step spread
(bench/RESULTS.md, "Design measurements"). With both thresholds raised the steady state has no faults.

`retain_freed_memory()` raises glibc's mmap threshold to 1 GiB (tensors below it come from the heap, whose
pages are reused) and its trim threshold to 2 GiB - 1 (the most `mallopt` accepts: the freed heap stays
mapped), which fixes both thresholds (glibc stops adapting them). Cost: the process keeps its peak heap
mapped, as a GPU process keeps its peak in torch's caching allocator, and a pattern of equal large blocks
can grow the heap by a few blocks before freed ones coalesce into one that fits (64 MiB tensors allocated
and freed in a loop: the resident set settles at 350-670 MiB, then stays there with no faults). It is
process-wide, so every model in the process shares it (in bench/ the transformers baselines run with it too).

Applied by `init_parallel` when it runs without CUDA. Set NEMO_LEAD_RETAIN_HOST_MEMORY=0 to keep glibc's
defaults. A no-op (returns False) on a C library other than glibc (musl, macOS).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform

ENV = "NEMO_LEAD_RETAIN_HOST_MEMORY"
MMAP_THRESHOLD = 1 << 30
TRIM_THRESHOLD = (1 << 31) - 1  # mallopt takes an int
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's malloc.h

_applied = False


def retain_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds (see the module docstring); idempotent. Returns True when the
    thresholds are (now or already) set, False when the environment variable turns it off or the C library
    is not glibc."""
    global _applied
    if _applied:
        return True
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    ok = libc.mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    ok = libc.mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1 and ok
    _applied = ok
    return ok
