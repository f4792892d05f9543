"""What the megatron engine's KV cache costs, and how many sequences a KV budget (`engine.kv_cache_gib`) admits.

The cache is rectangular (`nemo_lead.generation.megatron_engine.kv_cache`): every row holds the same number of positions.
Under a budget the engine reserves at admission: before the first prompt is prefilled it allocates, once,

    rows = min(max_batch_size, prompts x n, floor(budget / (positions x bytes_per_position)))

rows of `positions` = longest prompt + max_tokens slots each (everything any sequence of the call can reach),
so the cache holds rows x positions x bytes_per_position <= budget bytes for the whole call, never grows,
and no admitted sequence is ever preempted. Sequences beyond `rows` wait and are admitted as others finish
(continuous batching): 256 samples of 14k tokens run in waves inside the budget. Results do not depend on
the budget, because each sample draws from its own random stream (`nemo_lead.generation.streams`).

    bytes_per_position = 2 (K and V) x layers on this rank x KV heads on this rank x head_dim x dtype bytes

Example: R1-Distill-Qwen-14B (48 layers, 8 KV heads of 128) at TP8, bf16: 2 x 48 x 1 x 128 x 2 = 24,576
bytes per position, so one sequence of 14,336 + 512 tokens costs 0.340 GiB and 256 of them 87.0 GiB.
"""

from __future__ import annotations

import math

BUDGET_KEY = "engine.kv_cache_gib"
GIB = 2**30  # the budget's unit: GiB (2^30 bytes), as plan.gpu_memory_gib and SLURM's --mem


def kv_bytes_per_position(num_layers: int, kv_groups: int, head_dim: int, dtype_bytes: int) -> int:
    """Bytes of K and V one sequence position costs on this rank (its layers and KV heads)."""
    return 2 * num_layers * kv_groups * head_dim * dtype_bytes


def budget_rows(kv_cache_gib: float, positions: int, bytes_per_position: int) -> int:
    """Rows of `positions` slots that fit `kv_cache_gib`; a budget smaller than one row is an error that
    names the key and what one sequence needs."""
    if not kv_cache_gib > 0:
        raise ValueError(f"{BUDGET_KEY} must be > 0 (or None for no budget), got {kv_cache_gib!r}")
    row_bytes = positions * bytes_per_position
    rows = math.floor(kv_cache_gib * GIB / row_bytes)
    if rows < 1:
        raise ValueError(f"{BUDGET_KEY}={kv_cache_gib} is smaller than one sequence's KV cache: "
                         f"{positions} positions (longest prompt + max_tokens) x {bytes_per_position} bytes = "
                         f"{row_bytes / GIB:.4g} GiB on this rank; raise {BUDGET_KEY} or lower max_tokens")
    return rows
