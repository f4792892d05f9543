"""The generation phase's memory on one rank: the megatron engine's KV cache at the batch it will run, and
its prefill and sampling temporaries.

KV cache (`nemo_lead.generation.megatron_engine.kv_cache.KVCache`): per layer of this pipeline stage a key and a value
tensor of [rows, kv_heads / tp, capacity, head_dim] in the parameter dtype, so a row costs
`kv_slot_bytes` per position. Rows: the engine keeps room for min(max(max_batch_size, n), sequences) rows
(its continuous batch). How capacity is reached depends on the engine:
- with a KV budget (`engine.kv_cache_gib`, when the engine has one): each admitted sequence reserves
  prompt + max_tokens positions, sequences are admitted while their reservations fit the budget, so the
  cache holds min(budget, rows x (prompt + max_tokens)) (`budget=None`: the whole batch at full length);
- without one (the engine of 2026-12-01): the cache starts at the longest prompt + sync_every + 16
  positions and grows by half until it holds prompt + max_tokens; a growth builds all new keys while the
  old keys and values exist, then the new values, so its peak is the final cache plus half the one before.
Both are exact functions of the settings; `kv_cache_bytes` is tested against the engine's cache tensors
(tests/plan/test_estimates.py).

Temporaries, estimated (the peak is the cache plus the larger of):
- a prefill group: at most `max_prefill_tokens` padded prompt tokens through one layer (residual, norm
  output, the fused qkv and rotated q, k or the MLP's gate, up, silu and product), its attention mask and
  its own cache; or, after the layers, that cache being repeated for the n samples (n + 1/2 copies);
- a decode step's sampling on the sampler rank: the gathered logits [rows, V] and the fp32 tensors of
  `sample_tokens` (log-softmax, the exponential race, its quotient; top-p adds a sort and its indices).
"""

from __future__ import annotations

from dataclasses import dataclass

from nemo_lead.models.hf_config import Arch, padded_vocab_size
from nemo_lead.plan.activations import Widths

# per element of the gathered [rows, vocabulary] logits, the fp32 and int64 tensors `sample_tokens` holds at
# its peak (the log-softmax and the per-row exponential noise of `streams.exponential_noise`); top-p adds a
# sort, its indices and masks. Measured on the CPU (tests/plan/test_engine_memory.py).
SAMPLING_BYTES = 30
TOP_P_BYTES = 18


def kv_slot_bytes(arch: Arch, *, tp: int, pp: int, e: int) -> int:
    """Bytes of one row's keys and values at one position, over this pipeline stage's layers."""
    return 2 * (arch.num_layers // pp) * (arch.num_kv_heads // tp) * arch.head_dim * e


def kv_cache_bytes(arch: Arch, *, tp: int, pp: int, e: int, rows: int, capacity: int) -> int:
    """The engine's cache tensors for `rows` rows of `capacity` positions."""
    return rows * capacity * kv_slot_bytes(arch, tp=tp, pp=pp, e=e)


def grown_capacities(start: int, needed: int) -> tuple[int, int]:
    """(previous, final) capacity when a cache of `start` positions grows by half until it holds `needed`
    (`KVCache.reserve`: the needed length rises one position per decode step)."""
    previous, capacity = 0, start
    while capacity < needed:
        previous, capacity = capacity, max(capacity + 1, capacity + capacity // 2)
    return previous, capacity


@dataclass(frozen=True)
class EngineMemory:
    rows: int  # sequences decoding at once
    kv_cache: int  # the cache's peak bytes
    activations: int  # prefill temporaries (or a decode step's layer temporaries) at the peak
    logits: int  # sampling temporaries at the peak

    @property
    def total(self) -> int:
        return self.kv_cache + self.activations + self.logits


def engine_rows(*, sequences: int, max_batch_size: int, full: int, slot: int, kv_budget_bytes: int | None) -> int:
    """Sequences decoding at once: max_batch_size, the call's sequences and the budget's rows of `full`
    positions decide (`nemo_lead.generation.megatron_engine.kv_budget.budget_rows`)."""
    rows = min(max_batch_size, sequences)
    if kv_budget_bytes is not None:
        rows = min(rows, max(1, kv_budget_bytes // (full * slot)))
    return rows


def engine_memory(arch: Arch, *, tp: int, pp: int, stage: int, e: int, sequences: int, n: int,
                  prompt_tokens: int, max_tokens: int, max_batch_size: int, max_prefill_tokens: int,
                  sync_every: int, kv_budget_bytes: int | None, top_p: float = 1.0,
                  device: str = "cuda") -> EngineMemory:
    """The generation peak of rank (stage, TP rank 0) for `sequences` = prompts x n on this DP replica."""
    slot = kv_slot_bytes(arch, tp=tp, pp=pp, e=e)
    full = prompt_tokens + max_tokens
    rows = engine_rows(sequences=sequences, max_batch_size=max_batch_size, full=full, slot=slot,
                       kv_budget_bytes=kv_budget_bytes)
    if kv_budget_bytes is not None:
        kv, extra = rows * full * slot, 0
    else:
        previous, final = grown_capacities(prompt_tokens + sync_every + 16, full)
        # a growth builds the new keys while the old keys and values exist, then the new values: the peak is
        # the new cache plus the old values (half of the old cache)
        kv, extra = rows * final * slot, rows * previous * slot // 2
    w = Widths.of(arch, tp, False)
    group = max(1, min(max_prefill_tokens // prompt_tokens, max(1, rows // n)))  # prompts prefilled together
    padded = group * prompt_tokens
    per_group = w.heads // max(1, w.kv // w.head_dim)  # query heads per KV head
    layer = padded * (2 * w.h + max(4 * w.f, 2 * w.q + 3 * w.kv)) * e
    mask = group * per_group * prompt_tokens * prompt_tokens * (e if device == "cpu" else 1)
    # then each prompt's row is copied to its samples' rows, one layer's K or V at a time
    prefill = max(layer + mask, min(rows, group * n) * prompt_tokens * slot // (2 * (arch.num_layers // pp)))
    vocab = padded_vocab_size(arch.vocab_size)
    sampling = rows * vocab * (e + SAMPLING_BYTES + (TOP_P_BYTES if top_p < 1 else 0))
    sampling += rows * vocab // tp * e if tp > 1 else 0  # this rank's slice before the gather
    decode_layer = rows * w.heads * full * (2 * e + 4) if device == "cpu" else 0  # CPU: scores as matmuls
    activations, logits = max((prefill, 0), (decode_layer, sampling if stage == pp - 1 else 0), key=sum)
    if extra > activations + logits:  # growing the cache is the peak moment: both copies, nothing else
        return EngineMemory(rows=rows, kv_cache=kv + extra, activations=0, logits=0)
    return EngineMemory(rows=rows, kv_cache=kv, activations=activations, logits=logits)
