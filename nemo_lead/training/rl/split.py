"""The split layout (`rollout.generator_ranks=G`): the last G ranks of the job generate, the others train, and
with `rollout.lag=k` generation of step t+k+1 overlaps training of step t.

    link = join_split(cfg)                          # every rank, first (rl_job)
    generator ranks: generator_job(cfg, link)       # sample B_j with the weights received, send it; repeat
    trainer ranks:   s.batches = link.trainer_queue(s, queued)  # take() receives B_t; after_update() sends W_t

G = m x actor.tp x actor.pp: m generator replicas (DP m on the generators' side), at the trainers' TP x PP
(so every trainer shard has one generator shard per replica to go to); the trainers are the other ranks
(DP = their number / (TP x PP)). The replicas split each batch's prompts into contiguous shares, every
sample drawn from the stream one generator would give it (`RolloutContext.one_stream`), and gather the
rollouts over their DP group: the batch is the one generator's, for any m. Each side has
its own default world and megatron parallel state; two gloo groups over the whole job join them
(`nemo_lead.parallel.bridge`, whose docstring says why). The trainers validate on their own weights, with
the rollout engine they would use without the split.

What goes over the bridge, in order (job ranks; trainer t0 = the step the run starts or resumes at, N =
`steps`, k = `rollout.lag`):
- start: trainer 0 -> every generator {first batch to make, t0, N, the data order's state}; then every
  trainer of DP rank 0 sends its weight shard W_t0 to the generator of the same (TP, PP) position;
- weights: after step s, for t0 < s <= N - k - 1 (the versions some batch needs), the same pairs send W_s:
  a header [1, s], then the parameters in buckets of `rollout.weight_bucket_mb` (to each replica in turn;
  copied into host buffers, so
  training goes on while they travel; at most max(k, 1) versions in flight: before sending W_s a trainer
  waits until W_(s-max(k,1)) arrived); a header [0, s] tells the generators to stop early;
- batches: generator 0 -> every trainer: B_j for j = first .. N in order, with its version, its sampling
  times and the data order's state after it. Generators send without waiting for the trainers to take them.
The generator samples B_j with W_max(t0, j-k-1), as the serial loop does (`nemo_lead.training.rl.lag`): batch
for batch the same prompts, seeds and weights, so the run equals the serial one bit for bit whatever either
side's speed (tested for k = 0, 1, 2 and with either side slowed down). A trainer checks every batch's
version (`lag.check_staleness`). A checkpoint after step t waits for B_(t+1) .. B_min(t+k, N): they are in it.

Ending: generators stop after B_N. A run stopped early after step t (a signal: its checkpoint is written)
first takes, and drops, the batches the generators are still making with the weights they have, then sends
the stop header where a generator would wait for more weights: nothing is left hanging and no process is
killed. A kill -9 takes all ranks down (they die with their launcher); the rerun resumes from the
checkpoint, which holds the queue.
Stop signals reach every rank; generators ignore them (the trainers decide, at a step boundary).
"""

from __future__ import annotations

import dataclasses
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from nemo_lead.checkpoint.meta import read_checkpoint_meta
from nemo_lead.data import load_problems
from nemo_lead.models import build_gpt, load_tokenizer, unwrap_model
from nemo_lead.models.source import ModelSource, resolve_precision
from nemo_lead.parallel import ParallelInfo, destroy_parallel, init_parallel
from nemo_lead.parallel.bridge import (
    Pending,
    Sides,
    bucket_plan,
    gather_ints,
    join_sides,
    recv_object,
    recv_tensors,
    send_object,
    send_tensors,
)
from nemo_lead.runtime.signals import install_stop_handlers
from nemo_lead.training.rl.config import RLConfig
from nemo_lead.training.rl.lag import BatchQueue, batch_from_data, batch_to_data, sample_batch
from nemo_lead.training.rl.phases import Batch, GeneratorRun, RLState, rollout_context
from nemo_lead.training.run.data_order import DataOrder
from nemo_lead.training.run.lifecycle import model_and_prompt

TAG_START, TAG_BATCH, TAG_WEIGHTS = 1, 2, 3
WEIGHTS, STOP = 1, 0  # header kinds


def weights_needed(version: int, start: int, steps: int, k: int) -> bool:
    """Does some batch up to B_steps need W_version sent (the generators hold W_start from the start)?"""
    return start < version <= steps - k - 1


def generator_version(step: int, start: int, k: int) -> int:
    """The weights that sample B_step when the generators started from W_start: W_max(start, step - k - 1)."""
    return max(start, step - k - 1)


def last_batch_made(stopped_after: int, start: int, steps: int, k: int) -> int:
    """The last batch the generators make when the trainers stop after step `stopped_after`: the newest
    weights they were sent sample up to k + 1 batches ahead (never past `steps`)."""
    last_sent = max(start, min(stopped_after, steps - k - 1))
    return min(steps, last_sent + k + 1)


@dataclass
class Link:
    """This rank's side of the split layout (`join_split`) and, once its parallel state exists, its peer."""

    cfg: RLConfig
    sides: Sides

    @property
    def is_generator(self) -> bool:
        return self.sides.is_generator

    def weight_peers(self, info: ParallelInfo) -> list[int]:
        """The job ranks this rank exchanges weights with: for a trainer of DP rank 0 the generators of the
        same (TP, PP) position, one per generator replica; for a generator that trainer; none for other
        trainers. Collective over the job."""
        rows = gather_ints(self.sides.bridge_weights, [int(self.is_generator), info.tp_rank, info.pp_rank, info.dp_rank])
        if not self.is_generator and info.dp_rank != 0:
            return []
        want = (int(not self.is_generator), info.tp_rank, info.pp_rank)
        return [r for r, (g, tp, pp, dp) in enumerate(rows) if (g, tp, pp) == want and (g or dp == 0)]

    def trainer_queue(self, s: RLState, queued: list[Batch]) -> SplitQueue:
        return SplitQueue(s, self, queued)


def join_split(cfg: RLConfig) -> Link:
    """Every rank of a split job, before anything else: the two worlds and the bridges."""
    return Link(cfg, join_sides(cfg.rollout.generator_ranks))


def _parameters(model: Any) -> list:
    return list(unwrap_model(model).parameters())


# ----------------------------------------------------------------------------- trainer side
class SplitQueue(BatchQueue):
    """The trainers' queue: batches are received, never sampled here; new weights go out after each update."""

    def __init__(self, s: RLState, link: Link, queued: list[Batch]):
        k = s.cfg.rollout.lag
        super().__init__(k, s.run.step + 1, queued, produce=self._receive, ahead=0)
        self.s, self.link, self.start = s, link, s.run.step
        self.peers = link.weight_peers(s.run.info)
        self.params = _parameters(s.run.actor.model)
        self.plan = bucket_plan(self.params, s.cfg.rollout.weight_bucket_mb * 1e6)
        self.in_flight: deque[Pending] = deque()
        self.waited = 0.0
        sides = link.sides
        if sides.rank == 0:
            start = {"next": self.next_step, "version": self.start, "steps": s.cfg.steps, "data": s.order.state_dict()}
            starts = [send_object(sides.bridge_batches, start, sides.first_generator + g, TAG_START)
                      for g in range(sides.generators)]
            for p in starts:
                p.wait()
        self._send(WEIGHTS, self.start)

    def _receive(self, s: RLState, step: int) -> Batch:
        t0 = time.monotonic()
        batch = batch_from_data(recv_object(self.link.sides.bridge_batches, self.link.sides.first_generator, TAG_BATCH))
        self.waited += time.monotonic() - t0
        s.order.load_state_dict(batch.order)  # where the data order stands after it (the checkpoint's "data")
        return batch

    def _send(self, kind: int, version: int) -> None:
        if not self.peers:
            return
        while len(self.in_flight) >= max(self.k, 1):  # at most max(k, 1) versions on their way
            self.in_flight.popleft().wait()
        works, buffers = [], []
        for peer in self.peers:  # each generator replica's shard, header first
            header = send_object(self.link.sides.bridge_weights, [kind, version], peer, TAG_WEIGHTS)
            sent = send_tensors(self.link.sides.bridge_weights, self.params, self.plan, peer, TAG_WEIGHTS) \
                if kind == WEIGHTS else Pending([], [])
            works += header.works + sent.works
            buffers += header.buffers + sent.buffers
        self.in_flight.append(Pending(works, buffers))

    def take(self, s: RLState, step: int) -> Batch:
        batch = super().take(s, step)
        batch.times["time/wait_rollouts"], self.waited = self.waited, 0.0  # the trainer idle, waiting for it
        return batch

    def after_update(self, s: RLState, step: int) -> dict[str, float]:
        t0 = time.monotonic()
        if weights_needed(step, self.start, s.cfg.steps, self.k):
            self._send(WEIGHTS, step)
        return {"time/send_weights": time.monotonic() - t0}

    def close(self) -> None:
        """After the last step (or a stop after step t): drop the batches the generators still make with the
        weights they hold, tell them to stop where they would wait for more, wait for every send, end."""
        t, steps = self.s.run.step, self.s.cfg.steps
        made = last_batch_made(t, self.start, steps, self.k)
        while self.next_step <= made:
            self._receive(self.s, self.next_step)
            self.next_step += 1
        if made < steps:
            self._send(STOP, t)
        while self.in_flight:
            self.in_flight.popleft().wait()
        self.link.sides.close()


# ----------------------------------------------------------------------------- generator side
def _generator_model(cfg: RLConfig, source: ModelSource, info: ParallelInfo):
    """The actor's GPTModel without optimizer or weights of its own (they come from the trainers)."""
    divisible = {"vocab_divisible_by": read_checkpoint_meta(source.path)["vocab_divisible_by"]} \
        if source.kind == "checkpoint" else {}
    return build_gpt(source.hf_config, info, resolve_precision(cfg.actor.precision, source), spec=cfg.actor.layer_spec,
                     init=False, config_overrides=cfg.actor.megatron_overrides(), **divisible)


def _receive_weights(link: Link, params: list, plan: list, peer: int) -> int | None:
    """The next version the trainers send (its weights now in `params`), or None when told to stop."""
    kind, version = recv_object(link.sides.bridge_weights, peer, TAG_WEIGHTS)
    if kind == STOP:
        return None
    recv_tensors(link.sides.bridge_weights, params, plan, peer, TAG_WEIGHTS)
    return version


def generator_job(cfg: RLConfig, link: Link) -> None:
    """A generator rank's whole job: sample B_j with the weights the trainers send, send it (module doc)."""
    cfg, source = model_and_prompt(cfg)
    cfg = dataclasses.replace(cfg, actor=dataclasses.replace(cfg.actor, offload_during_generation=False))
    stop = install_stop_handlers()  # the trainers stop the run; a signal must not kill this rank meanwhile
    info = init_parallel(cfg.actor.tp, cfg.actor.pp, seed=cfg.seed, model_config=source.hf_config)
    ctx = None
    try:
        d = cfg.data
        problems = load_problems(d.path, split=d.split, fields=dict(d.fields), limit=d.limit)
        model = _generator_model(cfg, source, info)
        tok_dir = source.require_tokenizer()
        ctx, ends = rollout_context(cfg, source, info, model, load_tokenizer(tok_dir), tok_dir)
        ctx.one_stream = True  # the samples of one generator replica, whatever their number
        s = RLState(run=GeneratorRun(cfg), ctx=ctx, problems=problems, order=DataOrder(len(problems), cfg.seed, d.shuffle),
                    val_problems=[], end_tokens=ends)
        params = _parameters(model)
        plan = bucket_plan(params, cfg.rollout.weight_bucket_mb * 1e6)
        (peer,) = link.weight_peers(info)
        start = recv_object(link.sides.bridge_batches, 0, TAG_START)
        if start["data"]:
            s.order.load_state_dict(start["data"])
        version = _receive_weights(link, params, plan, peer)
        sends: list[Pending] = []
        for j in range(start["next"], start["steps"] + 1):
            t0 = time.monotonic()
            while version is not None and version < generator_version(j, start["version"], cfg.rollout.lag):
                version = _receive_weights(link, params, plan, peer)
            if version is None:  # the trainers stopped early
                break
            # vllm: loads W_version in place (once), and records it; an engine that keeps no version (None) takes
            # it each time (the megatron engine runs on `model` itself: this costs nothing)
            if ctx.engine.weight_version != version:
                ctx.engine.refit(model, version=version)
            waited = time.monotonic() - t0
            batch = sample_batch(s, j, version)
            batch.times["time/wait_weights"] = waited  # the generator idle, waiting for weights
            if info.rank == 0:
                data = batch_to_data(batch)
                sends = [p for p in sends if not p.done()]  # (their payloads go once the trainers have them)
                sends += [send_object(link.sides.bridge_batches, data, r, TAG_BATCH) for r in range(link.sides.trainers)]
        for p in sends:
            p.wait()
    finally:
        if ctx is not None and ctx.verifier is not None:
            ctx.verifier.close()
        destroy_parallel()
        link.sides.close()
        stop.uninstall()
