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

Storage stays put. The tensors are allocated with room for `reserve_rows` rows (the engine's
max_batch_size), and `select` / `extend` compact and append rows inside them in place; only `reserve`
(capacity growth) and appending past the allocated rows reallocate, and each reallocation bumps `version`.
The engine's CUDA graphs (`nemo_lead.generation.cuda_graphs`) capture the addresses of these tensors, so
they stay valid while `version` does: compaction and continuous batching cost no re-capture.
`keys[l]` / `values[l]` are the live rows (views); `bucket(rows)` views the first `rows` allocated rows at
full capacity for a fixed-shape decode step.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, num_layers: int, batch: int, groups: int, head_dim: int, capacity: int,
                 dtype: torch.dtype, device: torch.device, reserve_rows: int = 0):
        shape = (max(batch, reserve_rows), groups, capacity, head_dim)
        self._k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self._v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.rows = batch
        self.version = 0

    @property
    def keys(self) -> list[torch.Tensor]:
        return [t[: self.rows] for t in self._k]

    @property
    def values(self) -> list[torch.Tensor]:
        return [t[: self.rows] for t in self._v]

    @property
    def batch(self) -> int:
        return self.rows

    @property
    def allocated_rows(self) -> int:
        return self._k[0].shape[0] if self._k else 0

    @property
    def capacity(self) -> int:
        return self._k[0].shape[2] if self._k else 0

    def _reallocate(self, rows: int, capacity: int) -> None:
        self._k = [_resized(t, rows, capacity) for t in self._k]
        self._v = [_resized(t, rows, capacity) for t in self._v]
        self.version += 1

    def reserve(self, needed: int, rows: int | None = None) -> None:
        """Make room for `needed` positions per row (grows to at least 1.5x the old capacity).

        `rows`: rows to keep allocated when it grows (default: all; the engine passes the live rows once no
        prompt is waiting, so a long tail of few sequences does not grow a full batch's worth of memory)."""
        if needed <= self.capacity or not self._k:
            return
        rows = self.allocated_rows if rows is None else max(rows, self.rows)
        self._reallocate(rows, max(needed, self.capacity + self.capacity // 2))

    def write_block(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Prefill: k, v [batch, groups, s, d] are positions 0 .. s-1 of every row."""
        b, s = k.shape[0], k.shape[2]
        self._k[layer][:b, :, :s] = k
        self._v[layer][:b, :, :s] = v

    def slots(self, positions: torch.Tensor) -> torch.Tensor:
        """Where position positions[b] of row b lies, per KV group, in a layer's flattened storage: the
        index `write_at` takes (computed once per decode step for all layers)."""
        return _slots(positions, self._k[0].shape[1], self.capacity)

    def write_at(self, layer: int, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
        """Decode: k, v [batch, groups, d] go to the positions `slots` names (`slots(positions)`)."""
        _write_at(self._k[layer], self._v[layer], k, v, slots)

    def view(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of positions 0 .. length-1 of the live rows (views, no copy)."""
        return self._k[layer][: self.rows, :, :length], self._v[layer][: self.rows, :, :length]

    def select(self, rows: list[int], filled: int | None = None) -> None:
        """Keep only `rows` (row indices, on the host), in that order, compacted in place. Only rows that change
        index are copied, and of them only the first `filled` positions (default: all), so an order from
        `compaction_order` costs a copy per finished row rather than per row after it."""
        moves = [(i, r) for i, r in enumerate(rows) if r != i]
        if moves:
            device = self._k[0].device
            dst = torch.tensor([i for i, _ in moves], dtype=torch.long, device=device)
            src = torch.tensor([r for _, r in moves], dtype=torch.long, device=device)
            length = self.capacity if filled is None else filled
            for t in (*self._k, *self._v):
                t[dst, :, :length] = t[src, :, :length]  # gathered first: sources and targets may overlap
        self.rows = len(rows)

    def extend(self, other: KVCache) -> None:
        """Append `other`'s rows after ours (in place while they fit the allocated rows and capacity)."""
        need = self.rows + other.rows
        if need > self.allocated_rows or other.capacity > self.capacity:
            self._reallocate(max(need, self.allocated_rows), max(self.capacity, other.capacity))
        cap = other.capacity
        for mine, theirs in zip((*self._k, *self._v), (*other._k, *other._v)):
            mine[self.rows:need, :, :cap] = theirs[: other.rows]
            mine[self.rows:need, :, cap:] = 0  # rows may hold a finished sequence's data
        self.rows = need

    def repeat_rows(self, times: int) -> None:
        """Each row `times` times in a row (n samples of one prefilled prompt share its cache)."""
        if times > 1:
            self._k = [t[: self.rows].repeat_interleave(times, dim=0) for t in self._k]
            self._v = [t[: self.rows].repeat_interleave(times, dim=0) for t in self._v]
            self.rows *= times
            self.version += 1

    def bucket(self, rows: int) -> _Bucket:
        """The first `rows` allocated rows (live rows first, then free ones) at full capacity, as a cache."""
        if rows > self.allocated_rows:
            raise ValueError(f"bucket of {rows} rows, only {self.allocated_rows} allocated")
        return _Bucket([t[:rows] for t in self._k], [t[:rows] for t in self._v])

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self._k, *self._v))


class _Bucket:
    """Fixed-shape view of a KVCache for one decode step (`write_at` and `view`, as KVCache's)."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor]):
        self._k, self._v = keys, values

    def slots(self, positions: torch.Tensor) -> torch.Tensor:
        return _slots(positions, self._k[0].shape[1], self._k[0].shape[2])

    def write_at(self, layer: int, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
        _write_at(self._k[layer], self._v[layer], k, v, slots)

    def view(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._k[layer][:, :, :length], self._v[layer][:, :, :length]


def _slots(positions: torch.Tensor, groups: int, capacity: int) -> torch.Tensor:
    """Flat row indices of [rows, groups, capacity, d] storage viewed as [rows * groups * capacity, d]:
    (b * groups + g) * capacity + positions[b], for b < len(positions), every g."""
    b = positions.shape[0]
    rows = torch.arange(b * groups, device=positions.device).view(b, groups) * capacity
    return (rows + positions[:, None]).reshape(-1)


def _write_at(keys: torch.Tensor, values: torch.Tensor, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor):
    """One index_copy_ per tensor into the (contiguous) storage: cheaper than advanced-index assignment."""
    d = keys.shape[-1]
    keys.view(-1, d).index_copy_(0, slots, k.reshape(-1, d))
    values.view(-1, d).index_copy_(0, slots, v.reshape(-1, d))


def compaction_order(keep: list[int]) -> list[int]:
    """The rows `keep` (ascending indices of the rows that stay) in the order that moves fewest of them: each
    row already below len(keep) stays where it is, and the rows above fill the holes, lowest first."""
    n = len(keep)
    stay = {r for r in keep if r < n}
    movers = iter(r for r in keep if r >= n)
    return [r if r in stay else next(movers) for r in range(n)]


def _resized(t: torch.Tensor, rows: int, capacity: int) -> torch.Tensor:
    """A tensor of `rows` x `capacity` with t's data in its corner and zeros elsewhere (each slot written once)."""
    out = torch.empty((rows, t.shape[1], capacity, t.shape[3]), dtype=t.dtype, device=t.device)
    n, c = min(rows, t.shape[0]), min(capacity, t.shape[2])
    out[:n, :, :c] = t[:n, :, :c]
    out[:n, :, c:] = 0
    out[n:] = 0
    return out
