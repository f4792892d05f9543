"""Fixed-shape decode steps for the megatron engine, captured as CUDA graphs on a GPU.

Why: a decode step of a 28-layer model is ~1,500 small kernels. Launched one by one from Python through
megatron's modules, the host is the bottleneck, far from what HBM bandwidth allows (bench/RESULTS.md, "Design
measurements"). A CUDA graph replays
the whole step (embedding -> layers with the KV-cache writes -> logits) with one launch.

A graph replays fixed shapes and fixed addresses, so a step here is shaped by a *bucket*, not by the live
batch: the batch is padded to the next power of two (at least 8, at most the cache's allocated rows), and
attention covers the cache's whole capacity with the usual per-row length mask. Padding rows carry token 0
at position 0 and write into rows the cache does not use (`KVCache.bucket`); their logits are dropped.
The cache keeps its tensors across compaction and continuous batching (`KVCache.version` changes only when
it grows), so a bucket's graph is captured once per cache version and replayed for every step after.
Sampling stays outside the graph (it is a handful of kernels and owns a seeded generator).

`DecodeSteps(runner, rope, capture=True)` captures on CUDA; `capture=False` runs the very same fixed-shape
step eagerly, which is how the CPU tests check that bucketing and full-capacity attention give the same
tokens as the engine's plain decode. Used only with one pipeline stage and one tensor-parallel rank (the
engine decides): graphs around NCCL collectives and pipeline p2p are not exercised here.
"""

from __future__ import annotations

import warnings

import torch

MIN_BUCKET = 8


def bucket_rows(live: int, allocated: int) -> int:
    """The padded batch for `live` rows: the next power of two >= MIN_BUCKET, capped at `allocated`."""
    if live > allocated:
        raise ValueError(f"{live} live rows do not fit {allocated} allocated rows")
    rows = MIN_BUCKET
    while rows < live:
        rows *= 2
    return min(rows, allocated)


class DecodeSteps:
    """Logits of one decode step for the live rows, through a captured graph per (bucket, cache version)."""

    def __init__(self, runner, rope: tuple[torch.Tensor, torch.Tensor], *, capture: bool):
        self.runner, self.rope, self.capture = runner, rope, capture
        self.version: int | None = None
        self.graphs: dict[int, tuple] = {}  # bucket -> (graph or None, tokens, lengths, logits)
        self.pool = None
        self.captures = 0
        self.replays = 0

    def logits(self, cache, tokens: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        """Vocab-parallel logits [b, V_local] for next tokens [b] at positions `lengths` [b]; writes the
        step's keys and values into `cache` (as `StageRunner.decode` does)."""
        b = tokens.shape[0]
        if cache.version != self.version:  # the cache moved: every graph points at the old tensors
            self.graphs.clear()
            self.version = cache.version
        rows = bucket_rows(b, cache.allocated_rows)
        entry = self.graphs.get(rows)
        if entry is None:
            entry = self._prepare(cache, rows, tokens, lengths)
        graph, tok, pos, out = entry
        tok[:b], pos[:b] = tokens, lengths
        tok[b:], pos[b:] = 0, 0
        if graph is None:
            out = self._step(cache, rows, tok, pos)
        else:
            graph.replay()
            self.replays += 1
        return out[:b]

    def _step(self, cache, rows: int, tok: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        r = self.runner
        h = r.decode(tok[:, None], pos, cache.bucket(rows), self.rope, cache.capacity)
        return r.logits(h)

    def _prepare(self, cache, rows: int, tokens: torch.Tensor, lengths: torch.Tensor) -> tuple:
        tok = torch.zeros(rows, dtype=tokens.dtype, device=tokens.device)
        pos = torch.zeros(rows, dtype=lengths.dtype, device=lengths.device)
        entry = (None, tok, pos, None)
        if self.capture:
            try:
                entry = self._capture(cache, rows, tok, pos, tokens, lengths)
            except RuntimeError as err:  # keep generating, eagerly; say why once
                warnings.warn(f"CUDA graph capture of the decode step failed, decoding without graphs: {err}",
                              stacklevel=3)
                self.capture = False
        self.graphs[rows] = entry
        return entry

    def _capture(self, cache, rows, tok, pos, tokens, lengths) -> tuple:
        b = tokens.shape[0]
        tok[:b], pos[:b] = tokens, lengths  # the warm-up runs the real step (the replay repeats its writes)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self._step(cache, rows, tok, pos)  # lazy initialisation (cuBLAS workspaces) off the capture
        torch.cuda.current_stream().wait_stream(side)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool):
            out = self._step(cache, rows, tok, pos)
        self.captures += 1
        return graph, tok, pos, out
