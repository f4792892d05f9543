"""The Megatron actor: a GPTModel in megatron's DDP with megatron's optimizer, the log-probs of given sequences,
and what the two updates share - a step's plan over DP ranks and micro-batches (`step_plan`), megatron's
schedule over them (`run_schedule`), the optimizer step (`optimizer_step`). The updates: the RL one in
`nemo_lead.training.actor.rl_update` (`policy_train_step`), the SFT one in `sft_update` (`sft_train_step`).

    info = init_parallel(cfg.actor.tp, cfg.actor.pp, seed=cfg.actor.seed)
    actor = build_actor(cfg.actor, info)
    old = compute_logprobs(actor, batch, temperature=0.8)            # list of [R_i] per response token
    metrics = policy_train_step(actor, replace(batch, old_logprobs=old), lead_cfg, temperature=0.8)
    engine.refit(actor)                                               # `actor.model` is the live model

Everything runs through megatron's `get_forward_backward_func` (no pipelining, or 1F1B with PP), so the
same code serves every TP x PP x DP layout.

How the loss is normalised (the point of this module). `policy_loss` divides a piece's summed per-token
loss by `denominator`; we pass the denominator of the *global* batch: `loss_denominator` of every
micro-batch of every DP rank, summed (one all-reduce over DP before the step, from the masks alone). Each
micro-batch then contributes exactly its share of the global loss, and the gradients must simply be
*summed* over micro-batches and DP ranks. Megatron would instead average twice, and both are switched
off, not undone by multiplying back:
- the schedule divides each micro-batch's loss by `num_microbatches` unless the model config has
  `calculate_per_token_loss=True` and the loss function returns a (loss, num_tokens, metrics) triple; we
  set that flag (`build_actor`), so the loss reaches backward as computed;
- megatron's DDP scales gradients by 1/DP before its reduce unless `calculate_per_token_loss=True`, then
  it sums (gradient_scaling_factor 1.0);
- `finalize_model_grads` would then divide every gradient by the token count summed over micro-batches and
  DP (megatron's own per-token mean); our `finalize_model_grads_func` calls it with `num_tokens=None`, so
  it only does the DP reduce, the tied-embedding all-reduce between PP stages and the TP layer-norm sync.
So token-mean means the same at any DP size, any number of micro-batches and any token budget (tested:
different budgets and DP1 vs DP2 give the same loss, gradient norm and updated weights). The optimizer's
loss scale (fp16 only; 1 otherwise) is applied by the schedule through `config.grad_scale_func`.

Pipeline parallelism: every rank holds the global batch and computes the same split, so all stages of a
pipeline run the same micro-batches in the same order (DP replicas may run different numbers of them;
nothing in the schedule is collective across DP). Micro-batches have different shapes (each is padded to
its own longest sequence), so the model config sets megatron's `variable_seq_lengths=True` when PP > 1:
the p2p code then sends each activation's shape before the activation. Losses and metrics live on the
last stage; the step all-reduces them over DP there and broadcasts them to the other stages.

Log-probs: with `actor.logprob_chunk_tokens` > 0 (the default) the last stage's forward stops before the
output layer (`nemo_lead.mcore.compat.forward_final_hidden`) and `output_token_logprobs` applies it
chunk by chunk with the log-probs and entropy, forward and backward, so no [tokens, vocab / tp] tensor of
a whole micro-batch exists; 0 takes megatron's logits and `token_logprobs` (`nemo_lead.training.actor.logprobs`).

Configuration: `nemo_lead.training.actor.config`; DP / PP collectives: `nemo_lead.training.actor.collectives`;
checkpoints: `nemo_lead.training.run.train_state`. What is tested where: tests/training/test_actor.py's docstring.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import partial
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from nemo_lead.checkpoint.meta import read_checkpoint_meta
from nemo_lead.mcore.compat import forward_final_hidden
from nemo_lead.models import build_gpt, eval_mode, load_hf_weights, model_info
from nemo_lead.models.source import model_source, resolve_precision
from nemo_lead.models.weights_checkpoint import load_checkpoint
from nemo_lead.parallel import ParallelInfo, seed_model_parallel_rng
from nemo_lead.training.actor.collectives import (
    broadcast_from_last_stage,
    collective_device,
    data_parallel,
    dp_sum,
    is_last_stage,
    reduce_metrics,
)
from nemo_lead.training.actor.config import ActorConfig, micro_batch_tokens_for_device
from nemo_lead.training.actor.logprobs import output_token_logprobs, token_logprobs
from nemo_lead.training.actor.microbatch import (
    MicroBatch,
    SequenceBatch,
    balance_over_dp,
    collate,
    dummy_like,
    padded_tokens,
    plan_microbatches,
)

if TYPE_CHECKING:  # megatron-core loads when the actor is built (nemo_lead.mcore.lazy_import)
    from megatron.core.distributed import DistributedDataParallel
    from megatron.core.optimizer import MegatronOptimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler


# ----------------------------------------------------------------------------- the actor
@dataclass
class Actor:
    """What `build_actor` returns. `model` is megatron's DistributedDataParallel around this rank's
    GPTModel stage (the live weights: the rollout engine's `refit(actor)` reads them through `.model`);
    `optimizer` is megatron's (Adam, gradient clipping, optionally distributed); `scheduler` sets its
    learning rate and weight decay per step."""

    cfg: ActorConfig
    parallel: ParallelInfo
    model: DistributedDataParallel
    optimizer: MegatronOptimizer
    scheduler: OptimizerParamScheduler
    precision: str

    @property
    def gpt(self):
        """The GPTModel stage inside the DDP wrapper."""
        return self.model.module

    @property
    def vocab_size(self) -> int:
        return model_info(self.gpt).arch.vocab_size

    @property
    def device(self) -> torch.device:
        return next(self.gpt.parameters()).device


def _finalize_grads_without_token_scaling(model, num_tokens=None, **kwargs):
    """megatron's finalize_model_grads (DP reduce, tied-embedding and TP layer-norm syncs) without its
    division by the token count: our losses are already divided by the global denominator."""
    from megatron.core.distributed import finalize_model_grads

    return finalize_model_grads(model, None, **kwargs)


def build_actor(cfg: ActorConfig, parallel: ParallelInfo | None = None) -> Actor:
    """Build the actor for the current parallel layout (`nemo_lead.parallel.init_parallel(cfg.tp, cfg.pp)`).

    Weights: a HF folder is loaded (each rank reads its slices), a checkpoint folder's model part is loaded
    (any saved layout; the optimizer state comes with `load_train_state`), a preset is random-initialised
    from `cfg.seed`. Collective over all ranks.
    """
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    if not ps.model_parallel_is_initialized():
        raise RuntimeError("call nemo_lead.parallel.init_parallel(actor.tp, actor.pp) before build_actor")
    tp, pp = ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size()
    if (tp, pp) != (cfg.tp, cfg.pp):
        raise ValueError(f"actor.tp={cfg.tp} actor.pp={cfg.pp}, but the parallel state was initialised with "
                         f"tp={tp} pp={pp}")
    source = model_source(cfg.model, key="actor.model")
    precision = resolve_precision(cfg.precision, source)
    cfg = replace(cfg, micro_batch_tokens=micro_batch_tokens_for_device(cfg.micro_batch_tokens))
    build = partial(build_gpt, parallel=parallel, precision=precision, spec=cfg.layer_spec,
                    config_overrides=cfg.megatron_overrides())
    if source.kind == "checkpoint":
        meta = read_checkpoint_meta(source.path)
        gpt = build(meta["hf_config"], init=False, vocab_divisible_by=meta["vocab_divisible_by"])
        load_checkpoint(source.path, gpt)
    elif source.kind == "hf":
        gpt = build(source.path, init=False)
        load_hf_weights(gpt, source.path)
    else:
        seed_model_parallel_rng(cfg.seed)
        gpt = build(source.path, init=True)

    half = precision in ("bf16", "fp16", "fp8")
    ddp = DistributedDataParallel(
        gpt.config,
        DistributedDataParallelConfig(grad_reduce_in_fp32=half, use_distributed_optimizer=cfg.optim.use_distributed_optimizer),
        gpt,
    )
    o = cfg.optim
    optimizer = get_megatron_optimizer(
        OptimizerConfig(
            optimizer="adam", lr=o.lr, min_lr=o.lr if o.min_lr is None else o.min_lr, weight_decay=o.weight_decay,
            adam_beta1=o.adam_beta1, adam_beta2=o.adam_beta2, adam_eps=o.adam_eps, clip_grad=o.clip_grad,
            use_distributed_optimizer=o.use_distributed_optimizer, bf16=precision in ("bf16", "fp8"),
            fp16=precision == "fp16", params_dtype=gpt.config.params_dtype,
        ),
        [ddp],
    )
    fuse_torch_adam(optimizer)
    config = gpt.config
    config.finalize_model_grads_func = _finalize_grads_without_token_scaling
    config.grad_scale_func = optimizer.scale_loss
    config.no_sync_func = ddp.no_sync
    return Actor(cfg=cfg, parallel=parallel, model=ddp, optimizer=optimizer, scheduler=o.scheduler(optimizer),
                 precision=precision)


def fuse_torch_adam(optimizer) -> None:
    """Switch torch's AdamW inside megatron's optimizer to its fused kernel.

    Without Transformer Engine or Apex, megatron-core (0.16) falls back to `torch.optim.AdamW` with torch's
    defaults: the per-tensor loop on CPUs and the multi-tensor `foreach` path on GPUs, a dozen element-wise
    passes over every parameter, gradient and moment. torch's fused AdamW (CPU and CUDA, fp32 / bf16 / fp16)
    does the same update in one pass; the arithmetic is the same (tested against torch's loop to 2e-6 through
    the actor's parity tests). TE's and Apex's FusedAdam are left alone. Measured: bench/actor_bench.py.
    """
    inner = [getattr(o, "optimizer", None) for o in getattr(optimizer, "chained_optimizers", [optimizer])]
    for opt in inner:
        if type(opt) not in (torch.optim.AdamW, torch.optim.Adam):
            continue
        params = [p for g in opt.param_groups for p in g["params"]]
        if all(p.dtype in (torch.float32, torch.bfloat16, torch.float16) and p.device.type in ("cpu", "cuda")
               for p in params):
            for group in opt.param_groups:
                group["fused"], group["foreach"] = True, False



# ----------------------------------------------------------------------------- schedule
@dataclass
class StepPlan:
    """This rank's part of a step: which sequences (indices into the given batch) in which micro-batches."""

    batch: SequenceBatch  # this rank's sequences (or a dummy when it has none)
    indices: list[int]  # their positions in the given batch (empty for the dummy)
    groups: list[list[int]]  # micro-batches, as positions into `batch`
    shares: list[list[int]] | None  # every DP rank's indices (when the batch was split here)


def step_plan(actor: Actor, batch: SequenceBatch, split_over_dp: bool, only: list[int] | None = None) -> StepPlan:
    """This rank's plan over `batch`, or over its sequences `only` (positions into `batch`; balanced over DP
    as a batch of their own, so each rank gets its share of what is left)."""
    dp, dp_rank, _ = data_parallel()
    pool = list(range(len(batch))) if only is None else list(only)
    if split_over_dp:
        shares = [[pool[j] for j in s] for s in balance_over_dp([batch.lengths[i] for i in pool], dp)]
        indices = shares[dp_rank]
    else:
        shares, indices = None, pool
    mine = batch.select(indices) if indices else dummy_like(batch)
    groups = plan_microbatches(mine.lengths, actor.cfg.micro_batch_tokens, actor.cfg.micro_batch_overhead_tokens)
    return StepPlan(mine, indices, groups, shares)


def run_schedule(actor: Actor, plan: StepPlan, loss_fn: Callable, *, forward_only: bool) -> list:
    """megatron's forward-backward schedule over the plan's micro-batches (collated lazily, one at a time);
    returns the loss function's third outputs (last stage; empty elsewhere)."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    device = actor.device
    packed = plan.batch.segments is not None and any(len(s) > 1 for s in plan.batch.segments)
    if packed and model_info(actor.gpt).layer_spec != "local":
        # a dense [b, 1, S, S] mask is not Transformer Engine's path for packed sequences (that is THD with
        # megatron's PackedSeqParams, not implemented here)
        raise NotImplementedError("packed sequences need the local layer spec: set data.pack=false or "
                                  "actor.layer_spec=local")

    multiple = actor.cfg.tp if actor.cfg.sequence_parallel else 1

    def micro_batches() -> Iterator[MicroBatch]:
        for g in plan.groups:
            yield collate(plan.batch, g, device, multiple)

    def step(data: Iterator[MicroBatch], model):
        mb = next(data)  # attention_mask: block-diagonal causal for packed rows, None (causal) otherwise
        args = (mb.input_ids, mb.position_ids, mb.attention_mask)
        if actor.cfg.logprob_chunk_tokens > 0:  # the last stage stops before the output layer (actor_token_logprobs)
            return forward_final_hidden(model, actor.gpt, *args), partial(loss_fn, mb)
        return model(*args), partial(loss_fn, mb)

    lengths = plan.batch.lengths
    return get_forward_backward_func()(
        forward_step_func=step, data_iterator=micro_batches(), model=[actor.model],
        num_microbatches=len(plan.groups), seq_length=-(-max(lengths) // multiple) * multiple,
        micro_batch_size=max(len(g) for g in plan.groups), forward_only=forward_only,
    )


# ----------------------------------------------------------------------------- log-probs
def actor_token_logprobs(actor: Actor, mb: MicroBatch, output: torch.Tensor, temperature: float = 1.0,
                    entropy: bool = False) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probs (and entropies) [b, s] of a micro-batch from the last stage's output: the logits,
    or with `actor.logprob_chunk_tokens` > 0 the final hidden states, which go through the output layer (its
    weights, or the tied embedding's, as the model does) chunk by chunk with the log-probs."""
    chunk = actor.cfg.logprob_chunk_tokens
    if chunk <= 0:
        return token_logprobs(output, mb.targets, actor.vocab_size, temperature=temperature, entropy=entropy)
    gpt = actor.gpt
    weight = gpt.shared_embedding_or_output_weight() if gpt.share_embeddings_and_output_weights else gpt.output_layer.weight
    return output_token_logprobs(output, weight, mb.targets, actor.vocab_size, chunk_tokens=chunk,
                                 temperature=temperature, entropy=entropy,
                                 sequence_parallel=gpt.output_layer.sequence_parallel)


def compute_logprobs(
    actor: Actor,
    batch: SequenceBatch,
    temperature: float = 1.0,
    *,
    entropy: bool = False,
    split_over_dp: bool = True,
) -> list[torch.Tensor] | tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per-response-token log-probs log softmax(logits / temperature)[token] of `batch` (old / reference
    log-probs), as a list of float32 CPU tensors [R_i]; with `entropy=True` also the per-token entropies.

    Forward only, in eval mode (no dropout), through the same schedule and micro-batches as training.
    `split_over_dp=True`: `batch` is the global batch (the same on every rank); each DP replica computes
    its share and the results are all-gathered, so every rank returns the whole batch's log-probs.
    `split_over_dp=False`: `batch` is this DP replica's own; every rank of its TP x PP group returns them.
    Collective over all ranks.
    """
    plan = step_plan(actor, batch, split_over_dp)

    def loss_fn(mb: MicroBatch, logits: torch.Tensor):
        logp, ent = actor_token_logprobs(actor, mb, logits, temperature, entropy)
        out = {"logp": mb.response_values(logp)}
        if entropy:
            out["entropy"] = mb.response_values(ent)
        return logits.new_zeros(()), torch.zeros((), dtype=torch.int), out

    with eval_mode(actor.model):
        outputs = run_schedule(actor, plan, loss_fn, forward_only=True)
    keys = ["logp", "entropy"] if entropy else ["logp"]
    # this rank's sequences in micro-batch order -> one flat tensor per key; shared with the other PP stages
    order = [i for g in plan.groups for i in g] if plan.indices else []
    resp = plan.batch.response_lens
    flat_len = sum(resp[i] for i in order)
    device = collective_device()
    flats = []
    for k in keys:
        if is_last_stage():
            parts = [t.float() for out in outputs for t in out[k]][: len(order)]
            flat = torch.cat(parts).to(device) if parts else torch.zeros(0, device=device)
        else:
            flat = torch.empty(flat_len, device=device)
        flats.append(broadcast_from_last_stage(flat).cpu())
    results = {k: [None] * len(batch) for k in keys}
    for k, flat in zip(keys, flats):
        for i, piece in zip(order, flat.split([resp[i] for i in order])):
            results[k][plan.indices[i]] = piece
    if split_over_dp:
        _gather_shares(results, batch, plan.shares)
    return (results["logp"], results["entropy"]) if entropy else results["logp"]


def _gather_shares(results: dict[str, list], batch: SequenceBatch, shares: list[list[int]]) -> None:
    """Fill in the other DP replicas' sequences (all-gather, padded to the largest share)."""
    dp, dp_rank, group = data_parallel()
    if dp == 1:
        return
    resp = batch.response_lens
    sizes = [sum(resp[i] for i in s) for s in shares]
    device = collective_device()
    for values in results.values():
        mine = torch.zeros(max(sizes), device=device)
        if sizes[dp_rank]:
            mine[: sizes[dp_rank]] = torch.cat([values[i] for i in shares[dp_rank]]).to(device)
        gathered = [torch.empty_like(mine) for _ in range(dp)]
        dist.all_gather(gathered, mine, group=group)
        for r, share in enumerate(shares):
            if r == dp_rank or not share:
                continue
            pieces = gathered[r][: sizes[r]].cpu().split([resp[i] for i in share])
            for i, piece in zip(share, pieces):
                values[i] = piece


# ----------------------------------------------------------------------------- train steps
def optimizer_step(actor: Actor, plan: StepPlan, loss_fn: Callable, sums: list[str], maxes: list[str]) -> dict[str, float]:
    """Zero grads, forward-backward over the plan, optimizer step; the reduced metrics plus step facts."""
    actor.model.zero_grad_buffer()
    actor.optimizer.zero_grad()
    outputs = run_schedule(actor, plan, loss_fn, forward_only=False)
    # advance the schedule first, so that optimizer step i (from 0) uses the rate at i + 1: warm-up starts at
    # lr / warmup_steps, not at 0 as megatron-LM's order gives; a skipped (fp16 overflow) step is taken back
    actor.scheduler.step(1)
    lr = float(actor.optimizer.param_groups[0]["lr"])
    ok, grad_norm, _ = actor.optimizer.step()
    if not ok:
        actor.scheduler.step(-1)
    metrics = reduce_metrics(outputs, sums, maxes)
    lengths = plan.batch.lengths
    real = sum(lengths) if plan.indices else 0
    real, padded, seqs, mbs = dp_sum([real, padded_tokens(lengths, plan.groups), len(plan.indices), len(plan.groups)])
    metrics.update(
        grad_norm=float(grad_norm) if grad_norm is not None else float("nan"),
        update_skipped=float(not ok), lr=lr, sequences=seqs, padding_fraction=1.0 - real / padded, microbatches=mbs,
    )
    return metrics
