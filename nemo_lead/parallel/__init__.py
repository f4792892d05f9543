"""parallel layer (docs/design.md): process groups (nccl on GPU, gloo on CPU), megatron-core's parallel
state, the CPU compatibility layer, and a local multi-rank launcher.

    info = init_parallel(tp=2, pp=1, seed=1234, model_config=hf_config)   # checks the layout first
    ...
    destroy_parallel()

Only megatron-core and torch are imported here (megatron lazily, inside the functions that need it).
"""

from nemo_lead.parallel.layout import Layout, LayoutError, check_layout, model_shape
from nemo_lead.parallel.state import (
    Launch,
    ParallelInfo,
    describe_hosts,
    destroy_parallel,
    detect_launch,
    free_port,
    init_parallel,
    rank_hosts,
    seed_model_parallel_rng,
)

__all__ = [
    "Launch", "Layout", "LayoutError", "ParallelInfo", "check_layout", "describe_hosts", "destroy_parallel",
    "detect_launch", "free_port", "init_parallel", "model_shape", "rank_hosts", "seed_model_parallel_rng",
]
