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
tokens as the engine's plain decode. The engine decides where (`graph_layout_error`): one pipeline stage
always (pipeline stages pass hidden states between steps; not captured); one TP rank by default; TP > 1
only with `engine.cuda_graphs_tp` (`MegatronEngine(cuda_graphs_tp=True)`), both for the engine on the
actor's modules (megatron's TP linears and vocabulary-parallel embedding all-reduce over megatron's TP
group) and for the engine's own copy at engine TP > 1 (`model_copy`: row-parallel outputs all-reduced over
the replica's group). Off by default there because no GPU run has measured it yet (bench/gpu_session.sh,
step rollout_tp2); the plan counts it only once one has (`nemo_lead.plan.timing`).

Graphs around NCCL collectives (`group`: the ranks that run one decode step together). What can go wrong,
from how PyTorch's ProcessGroupNCCL, megatron-core's full-iteration graphs and vLLM capture collectives,
and what this module does about it:
- Every rank must replay the same collectives in the same order, interleaved alike with the eager ones
  (the token broadcast, prefill's all-reduces). The bucket depends only on the live rows and the cache
  version, which are the same on every rank (tokens are broadcast, admissions follow them), so the ranks
  capture the same bucket at the same step; `agree_on_capture` checks it (the bucket's size, MIN and MAX
  over the group) and fails loudly rather than deadlock later on mismatched graphs.
- A capture that fails on one rank must not leave another replaying a graph whose all-reduce nobody else
  joins (a hang) while the first decodes eagerly. After every capture attempt the group all-reduces the
  success flags (MIN), eagerly and outside any capture; unless every rank succeeded, every rank drops the
  bucket's graph and decodes eagerly for the rest of the call, together.
- The NCCL communicator must exist before capture (creating it is not capturable): the warm-up step, run
  eagerly on the side stream before capture, runs every collective of the step once.
- ProcessGroupNCCL's watchdog thread polls events of collectives enqueued earlier; under the default
  "global" capture mode such a query from another thread invalidates the capture (pytorch#104487,
  #148594). So the device is synchronised before capture (earlier work done) and the capture uses
  capture_error_mode="thread_local", as megatron-core and vLLM do. Collectives issued during capture are
  not given to the watchdog (pytorch#103503), so a hang inside a replay is not timed out by it.
- A collective under capture runs on the process group's own NCCL stream, which waits on the capturing
  stream through an event: that fork and join are captured as graph dependencies, so nothing needs to
  run on the group's stream explicitly; the tensors it reads live in the graph's private memory pool,
  which keeps them for as long as the graph.
- Settings that make capture impossible or unsafe, refused before capture (the group then decodes
  eagerly, with a warning): TORCH_NCCL_BLOCKING_WAIT=1 (the host would wait on the collective's event inside
  the capture) and NCCL_GRAPH_MIXING_SUPPORT=0 (NCCL then does not support captured and eager collectives
  on one communicator, which the engine interleaves). Not guarded: a warm-up step failing on one rank
  before its collective leaves the others waiting in theirs, as a failing eager step would.
"""

from __future__ import annotations

import os
import warnings

import torch
import torch.distributed as dist

MIN_BUCKET = 8
# environment settings under which NCCL collectives cannot be captured safely (module docstring)
UNSAFE_NCCL_SETTINGS = {"TORCH_NCCL_BLOCKING_WAIT": "1", "NCCL_BLOCKING_WAIT": "1", "NCCL_GRAPH_MIXING_SUPPORT": "0"}


def bucket_rows(live: int, allocated: int) -> int:
    """The padded batch for `live` rows: the next power of two >= MIN_BUCKET, capped at `allocated`."""
    if live > allocated:
        raise ValueError(f"{live} live rows do not fit {allocated} allocated rows")
    rows = MIN_BUCKET
    while rows < live:
        rows *= 2
    return min(rows, allocated)


def graph_layout_error(tp: int, pp: int, cuda_graphs_tp: bool) -> str | None:
    """Why `engine.cuda_graphs=True` cannot run at this engine layout (TP ranks, pipeline stages), or None."""
    if pp > 1:
        return (f"engine.cuda_graphs=True needs one pipeline stage, the engine runs {pp} (engine.pp, or actor.pp "
                "at engine.pp=actor): stages pass hidden states between graphs, which is not implemented; set "
                "engine.cuda_graphs=false or engine.pp=1")
    if tp > 1 and not cuda_graphs_tp:
        return (f"engine.cuda_graphs=True at engine TP {tp} (engine.tp, or actor.tp at engine.tp=actor) needs "
                "engine.cuda_graphs_tp=true: graphs with the tensor-parallel all-reduces captured, not yet "
                "measured on GPUs (docs/engine-layout.md); TP = PP = 1 needs no switch")
    return None


def graphs_wanted(cuda_graphs: bool | None, *, tp: int, pp: int, cuda_graphs_tp: bool, cuda: bool) -> bool:
    """Whether the engine decodes with fixed-shape steps: `cuda_graphs` None = on a GPU where they run (TP =
    PP = 1, or one stage at TP > 1 with `cuda_graphs_tp`); True where `graph_layout_error` allows (else
    the ValueError it names); False = never."""
    if cuda_graphs is None:
        return cuda and graph_layout_error(tp, pp, cuda_graphs_tp) is None
    if cuda_graphs:
        error = graph_layout_error(tp, pp, cuda_graphs_tp)
        if error is not None:
            raise ValueError(error)
    return bool(cuda_graphs)


def unsafe_nccl_settings(environ=os.environ) -> list[str]:
    """The environment's settings of `UNSAFE_NCCL_SETTINGS` (as NAME=value)."""
    return [f"{k}={v}" for k, v in UNSAFE_NCCL_SETTINGS.items() if environ.get(k, "").strip() == v]


def agree_on_capture(group, ok: bool, rows: int, device) -> bool:
    """Whether every rank of `group` captured bucket `rows` (all-reduce MIN of the flags, outside capture).
    A rank at another bucket is a bug that would deadlock later: a RuntimeError now."""
    box = torch.tensor([int(ok), rows, -rows], dtype=torch.long, device=device)
    dist.all_reduce(box, op=dist.ReduceOp.MIN, group=group)
    agreed, low, high = box.tolist()
    if low != -high:
        raise RuntimeError(f"the ranks of a tensor-parallel group captured decode buckets of {low} to {-high} "
                           "rows at one step: their schedules differ")
    return bool(agreed)


class DecodeSteps:
    """Logits of one decode step for the live rows, through a captured graph per (bucket, cache version).
    `group`: the process group of the ranks that run each step together (TP > 1; module docstring), None
    on one rank."""

    def __init__(self, runner, rope: tuple[torch.Tensor, torch.Tensor], *, capture: bool, group=None):
        self.runner, self.rope, self.capture, self.group = runner, rope, capture, group
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
            entry = self._try_capture(cache, rows, tok, pos, tokens, lengths)
        self.graphs[rows] = entry
        return entry

    def _try_capture(self, cache, rows, tok, pos, tokens, lengths) -> tuple:
        """The bucket's captured entry, or its eager one when capture failed on this rank or (TP > 1) on any
        rank of the group: then every rank stops capturing for this call, together (module docstring)."""
        entry, error = None, None
        try:
            entry = self._capture(cache, rows, tok, pos, tokens, lengths)
        except RuntimeError as err:
            error = str(err)
        if self.group is not None and not agree_on_capture(self.group, error is None, rows, tok.device):
            error = error or "another rank of the tensor-parallel group could not capture it"
        if error is None:
            self.captures += 1
            return entry
        warnings.warn(f"CUDA graph capture of the decode step failed, decoding without graphs: {error}", stacklevel=4)
        self.capture = False
        return None, tok, pos, None

    def _capture(self, cache, rows, tok, pos, tokens, lengths) -> tuple:
        b = tokens.shape[0]
        tok[:b], pos[:b] = tokens, lengths  # the warm-up runs the real step (the replay repeats its writes)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # lazy initialisation (cuBLAS workspaces, NCCL communicators) off the capture
            self._step(cache, rows, tok, pos)
        torch.cuda.current_stream().wait_stream(side)
        mode = "global"
        if self.group is not None:
            unsafe = unsafe_nccl_settings()
            if unsafe:
                raise RuntimeError(f"{', '.join(unsafe)} does not allow NCCL collectives under capture")
            torch.cuda.synchronize()  # no earlier collective left for the NCCL watchdog to poll
            mode = "thread_local"
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode=mode):
            out = self._step(cache, rows, tok, pos)
        return graph, tok, pos, out
