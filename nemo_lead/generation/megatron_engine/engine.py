"""The `megatron` rollout engine: batched sampling on the live actor modules, with a KV cache of its own.

    engine = MegatronEngine(model)                  # model: a GPTModel from nemo_lead.models.build_gpt
    rollouts = engine.generate(prompt_token_ids, SamplingParams(n=8, temperature=0.6, seed=step))
    ...train the actor...
    engine.refit(actor)                             # free: the engine runs on the actor's own modules

`refit(actor)` protocol: `actor` is the GPTModel itself, a one-element list of model chunks (what
megatron's schedules take), anything wrapping it in `.module` (megatron DDP, Float16Module), or any object
with a `.model` attribute holding one of those (e.g. the training layer's actor). Nothing is copied; if a
megatron DDP wrapper uses the distributed optimizer with overlapped parameter all-gather, `refit` forces
that gather so generation does not read the previous step's weights.

How a `generate` call runs (every rank of the model-parallel group calls it with the same arguments):
- Continuous batching. Prompts wait in a queue; up to `max_batch_size` sequences decode together (fewer
  under a KV budget, `kv_cache_gib`: reserve at admission, see `nemo_lead.generation.megatron_engine.kv_budget`). A group of
  prompts is prefilled once per prompt (padded to the group's longest, at most `max_prefill_tokens` padded
  tokens) straight into free cache rows, each row copied for the prompt's n samples. A prompt's samples are
  admitted together when they fit; when n exceeds the row limit they go in parts (the prompt is prefilled
  once per part).
- Decode: one token for every live sequence per step (`StageRunner.decode`). Every `sync_every` steps (and
  whenever a sequence may have reached max_tokens) the sampled tokens come to the host in one copy, finished
  sequences leave the batch (their cache rows are dropped) and waiting prompts are admitted. On a GPU this
  keeps the host from waiting on every token; finished rows computed between syncs are ignored.
- CUDA graphs (GPU, TP = PP = 1, the default there; one stage at TP > 1 with `cuda_graphs_tp`): each decode
  step replays a captured graph of the whole forward, padded to a power-of-two batch bucket
  (`nemo_lead.generation.megatron_engine.cuda_graphs`); the cache compacts and admits rows in place, so a graph lives
  until the cache grows. Eager steps launch ~1,500 kernels one by one from Python, which left an H200 at
  1% of its memory bandwidth.
- Pipeline parallel: each stage receives hidden states from the previous stage (send / recv on the PP group;
  gloo on CPU), runs its layers with its own cache and sends on. Stages run in turn, without micro-batch
  pipelining, so PP spreads memory, not time.
- Sampling happens on one rank (last stage, TP rank 0) with `sample_tokens`; tokens and both log-probs go
  to every rank of the model-parallel group in one broadcast, so all TP / PP ranks hold identical rollouts.
  Each sample has its own random stream, keyed by (`params.seed`, prompt index x n + sample index), or with
  per-prompt seeds by (the prompt's seed, sample index), and the token's position
  (`nemo_lead.generation.streams.sample_key`), so a fixed seed gives the same tokens whatever the batching: `max_batch_size`, `max_prefill_tokens`, `sync_every`, a KV budget's waves (tested), and TP /
  PP up to the float rounding of logits.
Memory: the cache lives only during `generate`; `sleep` / `wake` release the allocator's cached blocks.
`last_stats` describes the last call's cache (see `MegatronEngine`).
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from nemo_lead.generation.engine import Rollout, SamplingParams, check_prompts
from nemo_lead.generation.megatron_engine.comm import ActorComm, ReplicaComm, SoloComm, engine_tp_groups
from nemo_lead.generation.megatron_engine.cuda_graphs import DecodeSteps, graphs_wanted
from nemo_lead.generation.megatron_engine.kv_budget import GIB, budget_rows
from nemo_lead.generation.megatron_engine.kv_cache import KVCache, compaction_order
from nemo_lead.generation.megatron_engine.model_copy import EngineModel
from nemo_lead.generation.megatron_engine.reshard import gather_tp1_weights, shard_table
from nemo_lead.generation.megatron_engine.stage import StageRunner
from nemo_lead.generation.sampling import sample_tokens
from nemo_lead.generation.streams import check_prompt_seeds, draw_keys, sample_key
from nemo_lead.models import eval_mode, model_info, sequence_parallel_off
from nemo_lead.parallel import cpu
from nemo_lead.plan.engine_kinds import engine_layout, has_own_layout


# ----------------------------------------------------------------------------- the actor protocol
def resolve_model(actor: Any):
    """The GPTModel inside `actor` (see the module docstring for what `actor` may be)."""
    seen = actor
    for _ in range(8):
        if isinstance(actor, (list, tuple)):
            if len(actor) != 1:
                raise ValueError(f"the megatron engine needs one model chunk per rank, got {len(actor)} "
                                 "(virtual pipeline parallelism is not supported)")
            actor = actor[0]
        elif isinstance(actor, torch.nn.Module) and hasattr(actor, "decoder") and hasattr(actor, "pre_process"):
            return actor
        elif hasattr(actor, "module"):
            actor = actor.module
        elif hasattr(actor, "model"):
            actor = actor.model
        else:
            break
    raise TypeError(f"cannot find a megatron GPTModel in {type(seen).__name__}: give the model, a list "
                    "with one model chunk, a wrapper with .module, or an object with .model")


def finish_param_gather(actor: Any) -> None:
    """Megatron DDP with the distributed optimizer and overlap_param_gather all-gathers updated parameters
    lazily, in the next training forward's pre-hooks; the engine bypasses those hooks, so force it now."""
    for _ in range(8):
        if isinstance(actor, (list, tuple)) and len(actor) == 1:
            actor = actor[0]
        cfg = getattr(actor, "ddp_config", None)
        if cfg is not None and getattr(cfg, "use_distributed_optimizer", False) and getattr(cfg, "overlap_param_gather", False):
            actor.start_param_sync(force_sync=True)
            return
        nxt = getattr(actor, "module", None) or getattr(actor, "model", None)
        if nxt is None or nxt is actor:
            return
        actor = nxt


# ----------------------------------------------------------------------------- host bookkeeping
@dataclass
class _Seq:
    prompt_index: int
    sample_index: int
    prompt_len: int
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    policy: list[float] = field(default_factory=list)
    finish: str | None = None



def check_limits(max_batch_size: int, max_prefill_tokens: int, sync_every: int | None, kv_cache_gib: float | None,
                 refit_bucket_mb: float) -> None:
    """The engine's size limits, checked in this one place: by `EngineConfig` when a config is read (so a bad
    value fails before a job starts) and by `MegatronEngine` when it is built without one."""
    if max_batch_size < 1 or max_prefill_tokens < 1:
        raise ValueError("max_batch_size and max_prefill_tokens must be >= 1")
    if sync_every is not None and sync_every < 1:
        raise ValueError(f"sync_every must be >= 1, got {sync_every}")
    if kv_cache_gib is not None and not kv_cache_gib > 0:
        raise ValueError(f"engine.kv_cache_gib must be > 0 (or None for no budget), got {kv_cache_gib!r}")
    if not refit_bucket_mb > 0:
        raise ValueError(f"engine.refit_bucket_mb must be > 0, got {refit_bucket_mb!r}")


class MegatronEngine:
    """See the module docstring. Options:

    max_batch_size: sequences decoding at once (continuous batching admits more as others finish).
    max_prefill_tokens: padded prompt tokens prefilled together (bounds prefill activation memory).
    sync_every: decode steps between host syncs; None = 1 on CPU, 8 on GPU.
    cuda_graphs: decode steps as captured CUDA graphs (`nemo_lead.generation.megatron_engine.cuda_graphs`): None = on a GPU
        with one pipeline stage and one TP rank (or more with `cuda_graphs_tp`), else off; True on a CPU runs
        the same fixed-shape (bucketed) steps without capture; True with PP > 1, or TP > 1 without
        `cuda_graphs_tp`, is an error.
    cuda_graphs_tp: allow graphs at TP > 1 (one stage), the TP all-reduces captured in them: on the actor's
        modules at actor TP > 1 and on the copy at `engine_tp` > 1 (off until a GPU run has measured it).
    vocab_size: the real vocabulary (default: `model_info(model).arch.vocab_size` from build_gpt); padding columns of
        the output layer are never sampled.
    kv_cache_gib: bytes of K and V cache this rank may hold, in GiB (2^30 bytes); None = no budget (the cache
        grows on demand up to max_batch_size rows). Reserve at admission (`nemo_lead.generation.megatron_engine.kv_budget`).
    own_copy: decode on a TP1 x PP1 copy of the weights (`nemo_lead.generation.megatron_engine.model_copy`) instead of the
        actor's modules: every rank is then an engine replica of its own (`replicas`: (count, index) over
        the actor replica's model-parallel group; the caller gives each its share of the prompts,
        `nemo_lead.training.rl.rollouts`). `refit`
        rebuilds the copy by collectives over the job's ranks (`nemo_lead.generation.megatron_engine.reshard`, buckets of
        `refit_bucket_mb` MB): every rank must call `refit`, `wake` and `sleep` together.
    engine_tp: with `own_copy`, the copy's TP (dividing actor.tp; the copy has one stage): each run of
        `engine_tp` ranks of the model-parallel group is one replica (`engine_tp_groups`), holding its
        TP shards of the weights and summing row-parallel outputs over its own group.
    release_copy: with `own_copy`, `sleep` frees the copy and the next `wake` rebuilds it from the actor
        (`actor.offload_during_generation`: the copy then lives only while the optimizer state is away).

    `last_stats` (after each `generate`): `kv_budget_bytes` (None without a budget), `kv_rows` (sequences
    that may decode at once: max_batch_size, the budget and the number of samples decide), `kv_waves`
    (ceil(samples / kv_rows): how many batches' worth of sequences pass through the cache), `kv_peak_bytes`
    (most cache storage held), `peak_rows` (most sequences decoding at once), `prefills` (admissions). There
    are no preemptions: an admitted sequence keeps its row until it finishes.
    """

    def __init__(self, model: Any, *, max_batch_size: int = 256, max_prefill_tokens: int = 16384,
                 sync_every: int | None = None, vocab_size: int | None = None, cuda_graphs: bool | None = None,
                 kv_cache_gib: float | None = None, own_copy: bool = False, refit_bucket_mb: float = 512,
                 release_copy: bool = False, engine_tp: int = 1, cuda_graphs_tp: bool = False):
        check_limits(max_batch_size, max_prefill_tokens, sync_every, kv_cache_gib, refit_bucket_mb)
        self.kv_cache_gib = kv_cache_gib
        self.last_stats: dict[str, Any] = {}
        self.max_batch_size = max_batch_size
        self.max_prefill_tokens = max_prefill_tokens
        self._sync_every = sync_every
        self.cuda_graphs, self.cuda_graphs_tp = cuda_graphs, cuda_graphs_tp
        self.graph_stats = {"captures": 0, "replays": 0}  # summed over generate calls
        self._vocab_size = vocab_size
        self._comm: ActorComm | SoloComm | None = SoloComm() if own_copy else None
        self.own_copy, self.release_copy = own_copy, release_copy
        if engine_tp < 1 or (engine_tp > 1 and not own_copy):
            raise ValueError(f"engine_tp={engine_tp}: an engine TP of its own needs own_copy")
        self.engine_tp, self._engine_group = engine_tp, None
        self.refit_bucket_bytes = refit_bucket_mb * 1e6
        self.replicas: tuple[int, int] | None = None  # own_copy: (engine replicas per actor replica, this one's)
        self.weight_version: int | None = None  # it decodes whatever the actor's modules hold (`RolloutEngine`)
        self.refit_stats: dict[str, Any] = {}  # own_copy: the last rebuild's bytes, buckets, seconds, copy_bytes
        self._actor = self._table = None
        self.model = None
        self.refit(model)

    # ----------------------------------------------------------------------------- RolloutEngine
    def refit(self, actor: Any, version: int | None = None) -> None:
        """Point the engine at the actor's live modules (no copy; see the module docstring); `own_copy`:
        rebuild the TP1 copy from them (collective), or with `release_copy` at the next `wake`. `version` is
        not kept: the engine holds whatever the actor's modules hold."""
        finish_param_gather(actor)
        if not self.own_copy:
            self._point_at(resolve_model(actor))
            return
        self._actor = resolve_model(actor)
        if self._table is None:
            self._table = shard_table(self._actor)
            from megatron.core import parallel_state as ps

            group = ps.get_model_parallel_group()
            size, rank = dist.get_world_size(group), dist.get_rank(group)
            self.replicas = (size // self.engine_tp, rank // self.engine_tp)
            if self.engine_tp > 1:
                self._engine_group = engine_tp_groups(self.engine_tp)
                group, ranks, index = self._engine_group
                self._comm = ReplicaComm(group, len(ranks), ranks[0], index)
        self.model = self.runner = None
        if not self.release_copy:
            self._build_copy()

    def _build_copy(self) -> None:
        self.model = self.runner = None  # the old copy goes before the new one is gathered
        group, index = (None, 0) if self._engine_group is None else (self._engine_group[0], self._engine_group[2])
        tensors, stats = gather_tp1_weights(self._actor, self.refit_bucket_bytes, self._table, self.engine_tp, index)
        self._point_at(EngineModel(self._actor, tensors, self.engine_tp, group), direct=True)
        self.refit_stats = {**stats, "copy_bytes": self.model.nbytes}

    def _point_at(self, model, direct: bool | None = None) -> None:
        self.model = model
        self.runner = StageRunner(self.model, direct=direct)
        info = model_info(self.model, required=False)  # None: a GPTModel not built by build_gpt
        arch = info.arch if info is not None else None
        self.vocab_size = self._vocab_size or (arch.vocab_size if arch is not None else self.model.vocab_size)
        self.max_positions = getattr(self.model, "max_sequence_length", None)

    def close(self) -> None:
        """Drop the copy and the references to the actor's modules (their memory is the actor's)."""
        self.model = self.runner = self._actor = None

    def sleep(self) -> None:
        """The cache is freed when `generate` returns (`release_copy`: the copy too); hand the allocator's
        cached blocks back to the GPU."""
        if self.own_copy and self.release_copy:
            self.model = self.runner = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()

    def wake(self) -> None:
        """Nothing to restore (the engine holds no memory between calls), except a released copy: rebuilt
        from the actor (collective)."""
        if self.own_copy and self.model is None:
            self._build_copy()

    def generate(self, prompt_token_ids: list[list[int]], params: SamplingParams, prompt_offset: int = 0, *,
                 prompt_seeds: list[int] | None = None, first_sample: int = 0) -> list[Rollout]:
        """`prompt_offset`: these prompts are prompts `prompt_offset` .. of a larger call (an engine replica's
        share): each sample draws from that call's stream for it, so the tokens are the larger call's.
        `prompt_seeds` / `first_sample`: per-prompt streams, samples first_sample .. (`RolloutEngine.generate`)."""
        if self.model is None:
            raise RuntimeError("the engine's copy of the weights was released by sleep(): call wake() first")
        check_prompts(prompt_token_ids, self.vocab_size)
        check_prompt_seeds(prompt_seeds, first_sample, len(prompt_token_ids))
        if self.max_positions is not None:
            for i, ids in enumerate(prompt_token_ids):
                if len(ids) + params.max_tokens > self.max_positions:
                    raise ValueError(f"prompt {i}: {len(ids)} prompt tokens + max_tokens {params.max_tokens} exceed "
                                     f"the model's {self.max_positions} positions")
        if self._comm is None:
            self._comm = ActorComm()
        # one model-parallel rank: the decode loop makes no CUDA assumptions, so the CPU layer's per-call hop
        # is dropped; TP / PP ranks keep it (megatron's TP gathers allocate on "the current CUDA device")
        single = cpu.suspended() if self._comm.mp_size == 1 else contextlib.nullcontext()
        # inference mode, not only no_grad: no version counters or view tracking on the cache's many small
        # updates (everything it creates stays inside this call; rollouts leave as Python lists)
        with eval_mode(self.model), torch.inference_mode(), single, sequence_parallel_off(self.model):
            gen = _Generation(self, prompt_token_ids, params, prompt_offset, prompt_seeds, first_sample)
            seqs = gen.run()
        self.last_stats = dict(gen.stats)
        if gen.steps is not None:
            self.graph_stats["captures"] += gen.steps.captures
            self.graph_stats["replays"] += gen.steps.replays
        return [Rollout(s.prompt_index, first_sample + s.sample_index, s.tokens, s.logprobs, s.policy, s.finish)
                for s in seqs]

    def concurrency(self, positions: int) -> int:
        """Sequences of `positions` prompt + response tokens this engine decodes at once: max_batch_size, or fewer
        under a KV budget (every admitted sequence reserves its full length; `kv_budget.budget_rows`)."""
        if self.kv_cache_gib is None or self.runner is None:
            return self.max_batch_size
        return min(self.max_batch_size, budget_rows(self.kv_cache_gib, positions, self.runner.kv_bytes_per_position()))


def build(cfg: Any, actor: Any, *, release_copy: bool = False, weight_version: int = 0) -> MegatronEngine:
    """The engine of `cfg` (an `EngineConfig`) over `actor` (`nemo_lead.generation.build_engine`): on the
    actor's modules, or with a layout of its own for the job's TP / PP (`has_own_layout`) a copy per engine
    replica, freed between generations when `release_copy`. `weight_version` is not kept."""
    from megatron.core import parallel_state as ps

    tp, pp = ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size()
    own = has_own_layout(cfg, tp=tp, pp=pp)
    return MegatronEngine(actor, max_batch_size=cfg.max_batch_size, max_prefill_tokens=cfg.max_prefill_tokens,
                          sync_every=cfg.sync_every, cuda_graphs=cfg.cuda_graphs, kv_cache_gib=cfg.kv_cache_gib,
                          own_copy=own, refit_bucket_mb=cfg.refit_bucket_mb, release_copy=release_copy,
                          engine_tp=engine_layout(cfg, tp=tp, pp=pp)[0] if own else 1, cuda_graphs_tp=cfg.cuda_graphs_tp)


class _Generation:
    """The state of one `generate` call (see the module docstring for the schedule)."""

    def __init__(self, engine: MegatronEngine, prompts: list[list[int]], params: SamplingParams, offset: int = 0,
                 prompt_seeds: list[int] | None = None, first_sample: int = 0):
        self.e, self.r, self.comm = engine, engine.runner, engine._comm
        self.offset = offset  # the streams of prompt i are those of prompt offset + i of a larger call
        self.prompt_seeds, self.first_sample = prompt_seeds, first_sample  # or a seed per prompt (`streams.sample_key`)
        self.prompts, self.params = prompts, params
        self.device = self.r.device
        self.sync_every = engine._sync_every or (8 if self.device.type == "cuda" else 1)
        self.stops = set(params.stop_token_ids)
        # each sample's random stream (`streams`): its key, and how many tokens it has drawn, per live row
        self.seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        self.keys = torch.zeros(0, dtype=torch.long, device=self.device)
        self.drawn = torch.zeros(0, dtype=torch.long, device=self.device)
        longest = max(len(p) for p in prompts)
        self.rope = self.r.rope_tables(longest + params.max_tokens + self.sync_every)
        self.pending = deque((i, 0) for i in range(len(prompts)))  # (prompt, its first sample not yet admitted)
        self.done: list[_Seq] = []
        self.live: list[_Seq] = []
        self.row_len: list[int] = []  # cache positions filled per live row (host copy of self.lengths)
        self.cache: KVCache | None = None
        self.lengths = torch.zeros(0, dtype=torch.long, device=self.device)
        self.next_tokens = torch.zeros(0, dtype=torch.long, device=self.device)
        self.records: list[tuple[list[_Seq], torch.Tensor]] = []  # unsynced (rows, packed [3, rows])
        self.positions = longest + params.max_tokens  # the most cache positions a sequence of this call reaches
        self.row_limit = min(engine.max_batch_size, len(prompts) * params.n)  # sequences decoding at once
        if engine.kv_cache_gib is not None:
            rows = budget_rows(engine.kv_cache_gib, self.positions, self.r.kv_bytes_per_position())
            self.row_limit = self.comm.min_over_group(min(self.row_limit, rows))  # every stage admits alike
        self.stats = {"kv_budget_bytes": None if engine.kv_cache_gib is None else int(engine.kv_cache_gib * GIB),
                      "kv_rows": self.row_limit, "kv_waves": -(-len(prompts) * params.n // self.row_limit),
                      "kv_peak_bytes": 0, "peak_rows": 0, "prefills": 0}
        self.steps = self._decode_steps()

    def _decode_steps(self) -> DecodeSteps | None:
        """The fixed-shape decode steps where the engine takes them (`cuda_graphs.graphs_wanted`), else None."""
        cuda, pp = self.device.type == "cuda", self.comm.pp
        if not graphs_wanted(self.e.cuda_graphs, tp=self.comm.mp_size // pp, pp=pp, cuda_graphs_tp=self.e.cuda_graphs_tp,
                             cuda=cuda):
            return None
        return DecodeSteps(self.r, self.rope, capture=cuda, group=self.comm.graph_group)

    # ----------------------------------------------------------------------------- schedule
    def run(self) -> list[_Seq]:
        while True:
            self._sync()
            if self._admissible():
                self._admit()
                self._sync()
            if not self.live:
                if self.pending:
                    continue
                break
            remaining = min(self.params.max_tokens - len(s.tokens) for s in self.live)
            for _ in range(max(1, min(self.sync_every, remaining))):
                self._decode_step()
        if self.cache is not None:
            self.stats["kv_peak_bytes"] = self.cache.peak_bytes
        return sorted(self.done, key=lambda s: (s.prompt_index, s.sample_index))

    def _sync(self) -> None:
        """Bring unsynced tokens to the host (one copy), finish sequences, drop finished rows."""
        if not self.records:
            return
        flat = torch.cat([packed.reshape(-1) for _, packed in self.records]).tolist()
        at = 0
        for rows, _ in self.records:
            b = len(rows)
            tokens, lps, policy = flat[at:at + b], flat[at + b:at + 2 * b], flat[at + 2 * b:at + 3 * b]
            at += 3 * b
            for seq, tok, lp, pl in zip(rows, tokens, lps, policy):
                if seq.finish is not None:
                    continue
                seq.tokens.append(int(tok))
                seq.logprobs.append(lp)
                seq.policy.append(pl)
                if int(tok) in self.stops:
                    seq.finish = "stop"
                elif len(seq.tokens) >= self.params.max_tokens:
                    seq.finish = "length"
        self.records = []
        keep = [i for i, s in enumerate(self.live) if s.finish is None]
        self.done.extend(s for s in self.live if s.finish is not None)
        if len(keep) == len(self.live):
            return
        keep = compaction_order(keep)  # live rows fill the finished ones' places: few rows move
        self.live = [self.live[i] for i in keep]
        self.row_len = [self.row_len[i] for i in keep]
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self.lengths, self.next_tokens = self.lengths[index], self.next_tokens[index]
        self.keys, self.drawn = self.keys[index], self.drawn[index]
        # in place (the cache keeps its tensors, and graphs, for later admissions), filled positions only
        self.cache.select(keep, filled=max(self.row_len, default=0))

    def _admissible(self) -> bool:
        """The next prompt's remaining samples fit the free rows (or, when there are more of them than the
        row limit, as many as the limit): a prompt's samples are admitted together whenever they can be."""
        if not self.pending:
            return False
        prompt, first = self.pending[0]
        return self.row_limit - len(self.live) >= min(self.params.n - first, self.row_limit)

    def _take_group(self) -> list[tuple[int, int, int]]:
        """Waiting prompts to prefill now, as (prompt, first sample, samples): as many as fit the free rows and
        the prefill token budget (at least one)."""
        n, free = self.params.n, self.row_limit - len(self.live)
        group: list[tuple[int, int, int]] = []
        while self.pending:
            prompt, first = self.pending[0]
            count = min(n - first, free)
            if count < min(n - first, self.row_limit):
                break
            padded = (len(group) + 1) * max(len(self.prompts[i]) for i in (*(g[0] for g in group), prompt))
            if group and padded > self.e.max_prefill_tokens:
                break
            group.append((prompt, first, count))
            free -= count
            if first + count < n:  # more samples than rows: the rest of this prompt waits for rows
                self.pending[0] = (prompt, first + count)
                break
            self.pending.popleft()
        return group

    # ----------------------------------------------------------------------------- model steps
    def _ensure_cache(self, rows: int, capacity: int) -> KVCache:
        """The call's cache with room for `rows` rows and `capacity` positions: allocated once at the row limit
        (under a KV budget: with every position a sequence can reach, never to grow), grown on demand otherwise."""
        if self.cache is None:
            budget = self.e.kv_cache_gib is not None
            self.cache = KVCache(len(self.r.layers), 0, self.r.groups, self.r.head_dim,
                                 min(capacity, self.positions) if budget else capacity, self.r.dtype, self.device,
                                 reserve_rows=self.row_limit, max_capacity=self.positions if budget else None)
        self.cache.ensure(rows, min(capacity, self.positions) if self.cache.fixed else capacity)
        return self.cache

    def _through_stage(self, first_inputs, shape, run):
        """First stage: run on `first_inputs`; later stages: run on hidden states received. Returns the last
        stage's output, None elsewhere (after sending on)."""
        x = first_inputs if self.comm.first else self.comm.recv_prev(shape, self.r.dtype, self.device)
        out = run(x)
        if not self.comm.last:
            self.comm.send_next(out)
            return None
        return out

    def _sample(self, h_last: torch.Tensor | None, keys: torch.Tensor, repeat: torch.Tensor | None = None) -> torch.Tensor:
        """Logits of the last stage's hidden states -> tokens + log-probs on the sampler -> every rank."""
        return self._draw(self.r.logits(h_last) if self.comm.last else None, keys, repeat)

    def _draw(self, local_logits: torch.Tensor | None, keys: torch.Tensor, repeat: torch.Tensor | None = None) -> torch.Tensor:
        """Vocab-parallel logits (last stage) -> tokens + log-probs on the sampler -> every rank, packed [3, rows].
        `keys`: the rows' draw keys (`streams.draw_keys`); `repeat`: rows per logits row (prefill: samples)."""
        packed = torch.empty((3, keys.shape[0]), dtype=torch.float64, device=self.device)
        if self.comm.last:
            logits = self.comm.full_logits(local_logits, self.e.vocab_size)
            if self.comm.is_sampler:
                if repeat is not None:
                    logits = logits.repeat_interleave(repeat, dim=0)
                draw = sample_tokens(logits, self.params, keys=keys)
                packed = torch.stack([draw.tokens.double(), draw.logprobs.double(), draw.policy_logprobs.double()])
        return self.comm.share(packed)

    def _admit(self) -> None:
        """Prefill the next group straight into free rows of the cache, one row per prompt, then copy each
        prompt's row to its samples' rows."""
        group = self._take_group()
        n = self.params.n
        lens = [len(self.prompts[i]) for i, _, _ in group]
        counts = [c for _, _, c in group]
        s, b, start = max(lens), len(group), len(self.live)
        ids = torch.zeros((b, s), dtype=torch.long)
        for row, (i, _, _) in enumerate(group):
            ids[row, : lens[row]] = torch.tensor(self.prompts[i])
        lengths = torch.tensor(lens, dtype=torch.long, device=self.device)
        cache = self._ensure_cache(start + sum(counts), s + self.sync_every + 16)
        window = cache.window(start, b)
        h_last = self._through_stage(ids.to(self.device), (s, b, self.r.hidden_size),
                                     lambda x: self.r.prefill(x, lengths, window, self.rope))
        seqs = [_Seq(i, j, len(self.prompts[i])) for i, first, c in group for j in range(first, first + c)]
        keys = torch.tensor([sample_key(self.seed, n, q.prompt_index, q.sample_index, prompt_seeds=self.prompt_seeds,
                                        first_sample=self.first_sample, first_prompt=self.offset) for q in seqs],
                            dtype=torch.long, device=self.device)
        drawn = torch.zeros_like(keys)
        packed = self._sample(h_last, draw_keys(keys, drawn), torch.tensor(counts, device=self.device))
        cache.replicate(start, counts, filled=s)
        self.records.append((seqs, packed))
        self.live.extend(seqs)
        self.row_len.extend(q.prompt_len for q in seqs)
        self.lengths = torch.cat([self.lengths, lengths.repeat_interleave(torch.tensor(counts, device=self.device))])
        self.next_tokens = torch.cat([self.next_tokens, packed[0].long()])
        self.keys, self.drawn = torch.cat([self.keys, keys]), torch.cat([self.drawn, drawn + 1])
        self.stats["prefills"] += 1
        self.stats["peak_rows"] = max(self.stats["peak_rows"], len(self.live))

    def _decode_step(self) -> None:
        b = len(self.live)
        max_length = max(self.row_len) + 1
        self.cache.reserve(max_length, rows=None if self.pending else b)  # no admissions left: live rows only
        keys = draw_keys(self.keys, self.drawn)
        if self.steps is not None:
            packed = self._draw(self.steps.logits(self.cache, self.next_tokens, self.lengths), keys)
        else:
            h_last = self._through_stage(self.next_tokens[:, None], (1, b, self.r.hidden_size),
                                         lambda x: self.r.decode(x, self.lengths, self.cache, self.rope, max_length))
            packed = self._sample(h_last, keys)
        self.records.append((list(self.live), packed))
        self.lengths = self.lengths + 1
        self.drawn = self.drawn + 1
        self.row_len = [x + 1 for x in self.row_len]
        self.next_tokens = packed[0].long()
