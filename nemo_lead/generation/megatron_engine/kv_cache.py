"""The megatron engine's KV cache: keys and values of the live sequences, for this rank's layers.

Layout: per layer, `keys[l]` and `values[l]` of shape [batch, kv_groups_on_this_rank, capacity, head_dim].
Row b holds sequence b's positions 0 .. lengths[b]-1 (positions past a row's length hold zeros or a finished
sequence's finite values; attention masks them, so they get weight exactly 0). Rows are sequences, so the
cache is rectangular: a batch costs batch x (longest sequence) slots. That is the price of plain tensors
instead of paged blocks; it is paid back by the operations the engine does between decode steps:
- `select(rows)`: finished sequences leave (rows are compacted), so long tails run at the batch size they
  really have;
- `window(start, rows)` + `replicate(start, counts)`: newly admitted prompts are prefilled straight into
  free rows, then each prompt's row is copied to its n samples' rows (continuous batching, no second cache).
Capacity grows geometrically on demand (`reserve`, `ensure`), so memory follows the longest live sequence
rather than prompt + max_tokens up front; storage starts zeroed, never uninitialised (0 x NaN would be NaN).

Fixed storage (`max_capacity`, the engine's KV budget): the tensors are allocated once with `max_capacity`
positions per row and never reallocated, so the cache holds exactly allocated rows x max_capacity slots for
the whole `generate` call; `capacity` is then a logical bound inside them (what fixed-shape decode steps
attend over), grown by `reserve` without moving anything.

Storage stays put. The tensors are allocated with room for `reserve_rows` rows (the engine's row limit),
and `select` / `window` / `replicate` work inside them in place; only growth reallocates, and a new shape
(reallocation, or a larger logical capacity) bumps `version`. The engine's CUDA graphs
(`nemo_lead.generation.megatron_engine.cuda_graphs`) capture the addresses and shapes of these tensors, so they stay valid
while `version` does: compaction and continuous batching cost no re-capture.
`keys[l]` / `values[l]` are the live rows (views); `bucket(rows)` views the first `rows` allocated rows for a
fixed-shape decode step. Row copies (`select`, `replicate`) gather one layer's moved rows at a time: the
only transient memory besides a growth's old + new storage.
"""

from __future__ import annotations

import torch


class KVCache:
    def __init__(self, num_layers: int, batch: int, groups: int, head_dim: int, capacity: int,
                 dtype: torch.dtype, device: torch.device, reserve_rows: int = 0, max_capacity: int | None = None):
        if max_capacity is not None and max_capacity < capacity:
            raise ValueError(f"max_capacity {max_capacity} < capacity {capacity}")
        shape = (max(batch, reserve_rows), groups, capacity if max_capacity is None else max_capacity, head_dim)
        self._k = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self._v = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.rows = batch
        self.fixed = max_capacity is not None
        self._capacity = capacity
        self.version = 0
        self.peak_bytes = self.nbytes()  # most storage held at once (a reallocation briefly holds old + new)

    @property
    def keys(self) -> list[torch.Tensor]:
        return [t[: self.rows, :, : self._capacity] for t in self._k]

    @property
    def values(self) -> list[torch.Tensor]:
        return [t[: self.rows, :, : self._capacity] for t in self._v]

    @property
    def batch(self) -> int:
        return self.rows

    @property
    def allocated_rows(self) -> int:
        return self._k[0].shape[0] if self._k else 0

    @property
    def capacity(self) -> int:
        return self._capacity if self._k else 0

    def _reallocate(self, rows: int, capacity: int) -> None:
        if self.fixed:
            raise RuntimeError(f"a fixed KV cache ({self.allocated_rows} rows x {self._k[0].shape[2]} positions) "
                               f"cannot grow to {rows} x {capacity}")
        self._k = [_resized(t, rows, capacity) for t in self._k]
        self._v = [_resized(t, rows, capacity) for t in self._v]
        self._capacity = capacity
        self.version += 1
        self.peak_bytes = max(self.peak_bytes, self.nbytes())

    def _grow_capacity(self, capacity: int, rows: int) -> None:
        if self.fixed and capacity <= self._k[0].shape[2]:
            self._capacity = capacity  # inside the storage: nothing moves, but fixed-shape steps change shape
            self.version += 1
        else:
            self._reallocate(rows, capacity)

    def reserve(self, needed: int, rows: int | None = None) -> None:
        """Make room for `needed` positions per row (grows to at least 1.5x the old capacity, within
        `max_capacity` when the storage is fixed).

        `rows`: rows to keep allocated when it grows (default: all; the engine passes the live rows once no
        prompt is waiting, so a long tail of few sequences does not grow a full batch's worth of memory)."""
        if needed <= self.capacity or not self._k:
            return
        grown = max(needed, self.capacity + self.capacity // 2)
        if self.fixed and needed <= self._k[0].shape[2]:
            grown = min(grown, self._k[0].shape[2])
        self._grow_capacity(grown, self.allocated_rows if rows is None else max(rows, self.rows))

    def ensure(self, rows: int, capacity: int) -> None:
        """At least `rows` allocated rows and `capacity` positions (before an admission)."""
        if rows > self.allocated_rows:
            self._reallocate(rows, max(capacity, self.capacity))
        elif capacity > self.capacity:
            self._grow_capacity(capacity, self.allocated_rows)

    def write_block(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Prefill: k, v [batch, groups, s, d] are positions 0 .. s-1 of every row."""
        _write_block(self._k[layer], self._v[layer], k, v)

    def slots(self, positions: torch.Tensor) -> torch.Tensor:
        """Where position positions[b] of row b lies, per KV group, in a layer's flattened storage: the
        index `write_at` takes (computed once per decode step for all layers)."""
        return _slots(positions, self._k[0].shape[1], self._k[0].shape[2])

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
            self._copy_rows([r for _, r in moves], [i for i, _ in moves], self.capacity if filled is None else filled)
        self.rows = len(rows)

    def window(self, start: int, rows: int) -> _Rows:
        """Allocated rows start .. start+rows-1 as a cache of their own (prefill writes into them in place)."""
        if start + rows > self.allocated_rows:
            raise ValueError(f"rows {start}..{start + rows - 1}, only {self.allocated_rows} allocated")
        return _Rows([t[start:start + rows] for t in self._k], [t[start:start + rows] for t in self._v])

    def replicate(self, start: int, counts: list[int], filled: int) -> None:
        """Row start + j (a prompt prefilled by `window`) becomes counts[j] consecutive rows, for each j in
        order: prompt j's rows begin at start + sum(counts[:j]). Copies positions 0 .. filled-1; the live
        rows become start + sum(counts)."""
        src = [start + j for j, c in enumerate(counts) for _ in range(c)]
        dst = list(range(start, start + len(src)))
        if start + len(src) > self.allocated_rows:
            raise ValueError(f"{start + len(src)} rows needed, only {self.allocated_rows} allocated")
        moves = [(s, d) for s, d in zip(src, dst) if s != d]
        if moves:
            self._copy_rows([s for s, _ in moves], [d for _, d in moves], filled)
        self.rows = start + len(src)

    def _copy_rows(self, src: list[int], dst: list[int], length: int) -> None:
        device = self._k[0].device
        src_index = torch.tensor(src, dtype=torch.long, device=device)
        dst_index = torch.tensor(dst, dtype=torch.long, device=device)
        for t in (*self._k, *self._v):
            t[dst_index, :, :length] = t[src_index, :, :length]  # gathered first: sources and targets may overlap

    def bucket(self, rows: int) -> _Rows:
        """The first `rows` allocated rows (live rows first, then free ones), as a cache."""
        if rows > self.allocated_rows:
            raise ValueError(f"bucket of {rows} rows, only {self.allocated_rows} allocated")
        return self.window(0, rows)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self._k, *self._v))


class _Rows:
    """Some rows of a KVCache's storage (views) with its `write_block`, `slots`, `write_at` and `view`: a
    prefill window, or the fixed-shape rows of one decode step."""

    def __init__(self, keys: list[torch.Tensor], values: list[torch.Tensor]):
        self._k, self._v = keys, values

    def write_block(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        _write_block(self._k[layer], self._v[layer], k, v)

    def slots(self, positions: torch.Tensor) -> torch.Tensor:
        return _slots(positions, self._k[0].shape[1], self._k[0].shape[2])

    def write_at(self, layer: int, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> None:
        _write_at(self._k[layer], self._v[layer], k, v, slots)

    def view(self, layer: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self._k[layer][:, :, :length], self._v[layer][:, :, :length]


def _write_block(keys: torch.Tensor, values: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
    b, s = k.shape[0], k.shape[2]
    keys[:b, :, :s] = k
    values[:b, :, :s] = v


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
