"""Run a test function on N ranks (one process each, gloo on CPU); the launcher for every layer's tests.

    from distributed import run_distributed

    def _job(hf_dir):                      # module level, so the ranks can import it
        info = init_parallel(tp=2)         # sees RANK / WORLD_SIZE / MASTER_* set by the launcher
        ...
        destroy_parallel()
        return something_picklable         # tensors travel by value

    def test_x(tmp_path):
        results = run_distributed(_job, 2, str(tmp_path))    # one result per rank, rank order

Built on `nemo_lead.parallel.local.run_local` (timeout; on failure or timeout every rank's process group is
killed; ranks die with their parent) with the "forkserver" start method: a server process imports torch,
megatron-core and transformers once per test session and forks each rank from there, so a job starts in
well under a second instead of ~5 s of imports per rank, and no rank inherits the test process's state.
To run several layouts in one job (cheaper than one job each), call
`destroy_parallel(keep_process_group=True)` between them.
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from typing import Any

from nemo_lead.parallel.local import run_local

PRELOAD = [
    "torch", "torch.distributed", "safetensors.torch", "transformers",
    "megatron.core.models.gpt", "megatron.core.pipeline_parallel", "megatron.core.distributed",
    "megatron.core.optimizer", "megatron.core.dist_checkpointing",
    "nemo_lead.parallel", "nemo_lead.models",
]
_preload_set = False


def run_distributed(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 240, **kwargs: Any) -> list:
    """`fn(*args, **kwargs)` on `world_size` ranks; their return values in rank order (see module doc)."""
    global _preload_set
    if not _preload_set:
        mp.get_context("forkserver").set_forkserver_preload(PRELOAD)
        _preload_set = True
    return run_local(fn, world_size, args, kwargs, timeout=timeout, start_method="forkserver")
