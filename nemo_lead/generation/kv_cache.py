"""The megatron engine's KV cache: keys and values of the live sequences, for this rank's layers.

Layout: per layer, `keys[l]` and `values[l]` of shape [batch, kv_groups_on_this_rank, capacity, head_dim].
Row b holds sequence b's positions 0 .. lengths[b]-1 (positions past a row's length are garbage and are
masked in attention). Rows are sequences, so the cache is rectangular: a batch costs
batch x (longest sequence) slots. That is the price of plain tensors instead of paged blocks; it is paid
back by the two operations the engine does between decode steps:
- `select(rows)`: finished sequences leave (rows are compacted), so long tails run at the batch size they
  really have;
- `extend(other)`: newly prefilled sequences join (continuous batching), capacity padded to the larger.
Capacity grows geometrically on demand (`reserve`), so memory follows the longest live sequence rather
than prompt + max_tokens up front. Unused slots are zero, never uninitialised memory: attention gives them
zero weight, but 0 x NaN would still be NaN.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, num_layers: int, batch: int, groups: int, head_dim: int, capacity: int,
                 dtype: torch.dtype, device: torch.device):
        shape = (batch, groups, capacity, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]

    @property
    def batch(self) -> int:
        return self.keys[0].shape[0] if self.keys else 0

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2] if self.keys else 0

    def reserve(self, needed: int) -> None:
        """Make room for `needed` positions per row (grows to at least 1.5x the old capacity)."""
        if needed <= self.capacity or not self.keys:
            return
        new = max(needed, self.capacity + self.capacity // 2)
        self.keys = [_pad_capacity(t, new) for t in self.keys]
        self.values = [_pad_capacity(t, new) for t in self.values]

    def write_block(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Prefill: k, v [batch, groups, s, d] are positions 0 .. s-1 of every row."""
        s = k.shape[2]
        self.keys[layer][:, :, :s] = k
        self.values[layer][:, :, :s] = v

    def write_at(self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> None:
        """Decode: k, v [batch, groups, d] go to position positions[b] of row b."""
        rows = torch.arange(k.shape[0], device=k.device)
        self.keys[layer][rows, :, positions] = k
        self.values[layer][rows, :, positions] = v

    def view(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of positions 0 .. length-1 (views, no copy)."""
        return self.keys[layer][:, :, :length], self.values[layer][:, :, :length]

    def select(self, rows: torch.Tensor) -> None:
        """Keep only `rows` (a 1-D index tensor), in that order."""
        self.keys = [t.index_select(0, rows) for t in self.keys]
        self.values = [t.index_select(0, rows) for t in self.values]

    def extend(self, other: KVCache) -> None:
        """Append `other`'s rows after ours (capacities padded to the larger of the two)."""
        cap = max(self.capacity, other.capacity)
        self.keys = [torch.cat([_pad_capacity(a, cap), _pad_capacity(b, cap)]) for a, b in zip(self.keys, other.keys)]
        self.values = [torch.cat([_pad_capacity(a, cap), _pad_capacity(b, cap)])
                       for a, b in zip(self.values, other.values)]

    def repeat_rows(self, times: int) -> None:
        """Each row `times` times in a row (n samples of one prefilled prompt share its cache)."""
        if times > 1:
            self.keys = [t.repeat_interleave(times, dim=0) for t in self.keys]
            self.values = [t.repeat_interleave(times, dim=0) for t in self.values]

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


def _pad_capacity(t: torch.Tensor, capacity: int) -> torch.Tensor:
    if t.shape[2] >= capacity:
        return t
    out = torch.zeros((t.shape[0], t.shape[1], capacity, t.shape[3]), dtype=t.dtype, device=t.device)
    out[:, :, : t.shape[2]] = t
    return out
