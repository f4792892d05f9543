"""The Megatron actor: a GPTModel in megatron's DDP with megatron's optimizer, and the three things the RL and
SFT loops do with it - log-probs of given sequences, one policy-gradient step, one SFT step.

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

What is tested where (CPU, gloo; tests/training/test_actor.py unless named):
- fp32, against transformers' Qwen2 (tied embeddings, q/k/v biases) with torch's AdamW and the same loss:
  loss, gradient norm (1e-5) and the weights after one clipped AdamW step (2e-6), and per-token log-probs
  and entropies (1e-5), at TP1; TP2, PP2, DP2 (plain and distributed optimizer; global batch split here,
  and each DP rank passing its own sequences); TP2 x PP2 (4 ranks). All but TP1 run many micro-batches.
- token budgets (one micro-batch vs several vs one per sequence) for token-mean, the paper's
  seq-mean-token-mean and Dr. GRPO's constant normaliser: the same loss and gradient norm (1e-6);
- activation recomputation (full / uniform and selective) equal to none (1e-6); SFT loss = transformers'
  masked NLL, and a few steps reduce it; one sequence on two DP ranks (the other runs an empty stand-in);
- bf16 parameters (the GPU default; fp32 master weights): a CPU smoke test within 2% of fp32;
- resume and resharding: tests/training/test_resume.py (see `nemo_lead.training.checkpoint`).
Not tested here: Transformer Engine / FP8 and anything CUDA-only (`bench/actor_bench.py --gpu` runs bf16 on
a GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

from nemo_lead.algorithms import LeadConfig, loss_denominator, policy_loss
from nemo_lead.models import eval_mode

from .logprobs import token_logprobs
from .microbatch import (
    MicroBatch,
    SequenceBatch,
    balance_over_dp,
    collate,
    dummy_like,
    padded_tokens,
    plan_microbatches,
)

PRECISION_CHOICES = ("auto", "fp32", "bf16", "fp16", "fp8")
RECOMPUTE_GRANULARITIES = ("full", "selective")
RECOMPUTE_METHODS = ("uniform", "block")
LR_DECAY_STYLES = ("constant", "linear", "cosine")


# ----------------------------------------------------------------------------- configuration

@dataclass
class ActorOptimConfig:
    """Adam (decoupled weight decay, i.e. AdamW) with global-norm gradient clipping, megatron's optimizer,
    and megatron's learning-rate schedule (OptimizerParamScheduler, which also applies the "no weight decay
    on biases and norm weights" rule: without it every parameter group would decay)."""

    lr: float = 1e-6  # peak learning rate (the paper's RL value; constant by default)
    min_lr: Optional[float] = None  # end of a linear / cosine decay (None = lr)
    lr_warmup_steps: int = 0  # linear warm-up: step i (from 0) of the first ones uses lr * (i + 1) / lr_warmup_steps
    lr_decay_style: str = "constant"  # constant | linear | cosine
    lr_decay_steps: Optional[int] = None  # linear / cosine: the step (counting from 1) that reaches min_lr
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    weight_decay: float = 0.01  # on matrices only (megatron leaves biases and norm weights alone)
    clip_grad: float = 1.0  # max global gradient norm; 0 = no clipping
    use_distributed_optimizer: bool = False  # shard optimizer state over DP (ZeRO-1)

    def validate(self, prefix: str = "actor.optim") -> None:
        if self.lr <= 0:
            raise ValueError(f"{prefix}.lr={self.lr} must be > 0")
        for key in ("adam_beta1", "adam_beta2"):
            if not 0 <= getattr(self, key) < 1:
                raise ValueError(f"{prefix}.{key}={getattr(self, key)} must be in [0, 1)")
        if self.adam_eps <= 0:
            raise ValueError(f"{prefix}.adam_eps={self.adam_eps} must be > 0")
        for key in ("weight_decay", "clip_grad", "lr_warmup_steps"):
            if getattr(self, key) < 0:
                raise ValueError(f"{prefix}.{key}={getattr(self, key)} must be >= 0")
        if self.min_lr is not None and not 0 <= self.min_lr <= self.lr:
            raise ValueError(f"{prefix}.min_lr={self.min_lr} must be in [0, lr={self.lr}]")
        if self.lr_decay_style not in LR_DECAY_STYLES:
            raise ValueError(f"{prefix}.lr_decay_style={self.lr_decay_style!r} is not one of {list(LR_DECAY_STYLES)}")
        # lr_decay_steps None with a decay: the training loops fill in the run's length (`for_run`)
        if self.lr_decay_style != "constant" and self.lr_decay_steps is not None \
                and self.lr_decay_steps <= self.lr_warmup_steps:
            raise ValueError(f"{prefix}.lr_decay_style={self.lr_decay_style} needs {prefix}.lr_decay_steps > "
                             f"{prefix}.lr_warmup_steps={self.lr_warmup_steps}, got {self.lr_decay_steps}")

    def for_run(self, steps: int) -> ActorOptimConfig:
        """These settings with a decay that has no `lr_decay_steps` stretched over the run's `steps`."""
        import dataclasses

        if self.lr_decay_style == "constant" or self.lr_decay_steps is not None:
            return self
        return dataclasses.replace(self, lr_decay_steps=max(steps, self.lr_warmup_steps + 1))

    def scheduler(self, optimizer):
        """megatron's OptimizerParamScheduler for these settings (config values win over checkpointed ones;
        only the step count is restored on resume)."""
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

        constant = self.lr_decay_style == "constant"
        if not constant and self.lr_decay_steps is None:
            raise ValueError("actor.optim.lr_decay_steps is needed for a linear / cosine decay (or use for_run(steps))")
        return OptimizerParamScheduler(
            optimizer, init_lr=0.0, max_lr=self.lr, min_lr=self.lr if self.min_lr is None else self.min_lr,
            lr_warmup_steps=self.lr_warmup_steps,
            lr_decay_steps=self.lr_warmup_steps + 1 if constant else self.lr_decay_steps,
            lr_decay_style=self.lr_decay_style, start_wd=self.weight_decay, end_wd=self.weight_decay,
            wd_incr_steps=1, wd_incr_style="constant", use_checkpoint_opt_param_scheduler=False,
            override_opt_param_scheduler=True,
        )

    def __post_init__(self) -> None:
        self.validate()


@dataclass
class ActorConfig:
    """The `actor` section of the SFT / RL job configs."""

    model: str = "tiny-qwen2"  # a HF folder (weights loaded), a checkpoint folder, or a conf/model preset (random init)
    tp: int = 1
    pp: int = 1
    precision: str = "auto"  # auto (bf16 on GPU, fp32 on CPU) | fp32 | bf16 | fp16 | fp8 (needs TE)
    layer_spec: str = "auto"  # auto (TE when importable) | te | local
    optim: ActorOptimConfig = field(default_factory=ActorOptimConfig)
    micro_batch_tokens: int = 16384  # padded tokens per micro-batch at most (rows x longest row)
    micro_batch_overhead_tokens: int = 256  # what one more micro-batch costs, in tokens: where to cut (microbatch.py)
    recompute_granularity: Optional[str] = None  # None | full | selective (megatron activation recomputation)
    recompute_method: Optional[str] = None  # full only: uniform | block
    recompute_num_layers: Optional[int] = None  # full only: layers per recomputed chunk (uniform) / recomputed layers (block)
    seed: int = 1234  # initialisation of preset models; the model-parallel RNG is seeded by init_parallel

    def __post_init__(self) -> None:
        if isinstance(self.optim, dict):
            self.optim = ActorOptimConfig(**self.optim)
        for key in ("tp", "pp", "micro_batch_tokens"):
            if getattr(self, key) < 1:
                raise ValueError(f"actor.{key}={getattr(self, key)} must be >= 1")
        if self.micro_batch_overhead_tokens < 0:
            raise ValueError(f"actor.micro_batch_overhead_tokens={self.micro_batch_overhead_tokens} must be >= 0")
        if not self.model:
            raise ValueError("actor.model must name a HF folder, a checkpoint folder or a model preset")
        if self.precision not in PRECISION_CHOICES:
            raise ValueError(f"actor.precision={self.precision!r} is not one of {list(PRECISION_CHOICES)}")
        if self.layer_spec not in ("auto", "te", "local"):
            raise ValueError(f"actor.layer_spec={self.layer_spec!r} is not one of ['auto', 'te', 'local']")
        g, method, n = self.recompute_granularity, self.recompute_method, self.recompute_num_layers
        if g is not None and g not in RECOMPUTE_GRANULARITIES:
            raise ValueError(f"actor.recompute_granularity={g!r} is not one of {[None, *RECOMPUTE_GRANULARITIES]}")
        if g == "full":
            if method not in RECOMPUTE_METHODS:
                raise ValueError(f"actor.recompute_granularity=full needs actor.recompute_method in "
                                 f"{list(RECOMPUTE_METHODS)}, got {method!r}")
            if n is None or n < 1:
                raise ValueError(f"actor.recompute_granularity=full needs actor.recompute_num_layers >= 1, got {n}")
        elif method is not None or n is not None:
            raise ValueError("actor.recompute_method / actor.recompute_num_layers apply only with "
                             "actor.recompute_granularity=full")

    def megatron_overrides(self) -> dict[str, Any]:
        """TransformerConfig settings the actor needs (see the module docstring for the first two)."""
        out: dict[str, Any] = {"calculate_per_token_loss": True}
        if self.pp > 1:
            # megatron refuses variable_seq_lengths with its default MoE token dispatcher ("allgather") even
            # for dense models; the dispatcher is unused here, so name one that accepts it
            out.update(variable_seq_lengths=True, moe_token_dispatcher_type="alltoall")
        if self.recompute_granularity is not None:
            out["recompute_granularity"] = self.recompute_granularity
        if self.recompute_granularity == "full":
            out.update(recompute_method=self.recompute_method, recompute_num_layers=self.recompute_num_layers)
        return out


def resolve_precision(precision: str) -> str:
    """"auto" -> bf16 with CUDA, fp32 without."""
    if precision == "auto":
        return "bf16" if torch.cuda.is_available() else "fp32"
    return precision


def model_source(model: str) -> tuple[str, str]:
    """("checkpoint" | "hf" | "preset", model): what `actor.model` names. A folder with meta.json is one of
    our checkpoints, a folder with config.json a HF model; otherwise it must be a conf/model preset."""
    from nemo_lead.models import preset_names

    path = Path(model)
    if (path / "meta.json").is_file():
        return "checkpoint", str(path)
    if (path / "config.json").is_file():
        return "hf", str(path)
    if model in preset_names():
        return "preset", model
    raise ValueError(f"actor.model={model!r} is neither a checkpoint folder (meta.json), a HF folder "
                     f"(config.json) nor a model preset ({', '.join(preset_names())})")


# ----------------------------------------------------------------------------- the actor
@dataclass
class Actor:
    """What `build_actor` returns. `model` is megatron's DistributedDataParallel around this rank's
    GPTModel stage (the live weights: the rollout engine's `refit(actor)` reads them through `.model`);
    `optimizer` is megatron's (Adam, gradient clipping, optionally distributed); `scheduler` sets its
    learning rate and weight decay per step."""

    cfg: ActorConfig
    parallel: Any  # nemo_lead.parallel.ParallelInfo
    model: Any  # megatron.core.distributed.DistributedDataParallel
    optimizer: Any  # megatron.core.optimizer.MegatronOptimizer
    scheduler: Any  # megatron.core.optimizer_param_scheduler.OptimizerParamScheduler
    precision: str

    @property
    def gpt(self):
        """The GPTModel stage inside the DDP wrapper."""
        return self.model.module

    @property
    def vocab_size(self) -> int:
        return self.gpt.arch.vocab_size

    @property
    def device(self) -> torch.device:
        return next(self.gpt.parameters()).device


def _finalize_grads_without_token_scaling(model, num_tokens=None, **kwargs):
    """megatron's finalize_model_grads (DP reduce, tied-embedding and TP layer-norm syncs) without its
    division by the token count: our losses are already divided by the global denominator."""
    from megatron.core.distributed import finalize_model_grads

    return finalize_model_grads(model, None, **kwargs)


def build_actor(cfg: ActorConfig, parallel: Any = None) -> Actor:
    """Build the actor for the current parallel layout (`nemo_lead.parallel.init_parallel(cfg.tp, cfg.pp)`).

    Weights: a HF folder is loaded (each rank reads its slices), a checkpoint folder's model part is loaded
    (any saved layout; the optimizer state comes with `load_train_state`), a preset is random-initialised
    from `cfg.seed`. Collective over all ranks.
    """
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    from nemo_lead.models import build_gpt, load_hf_weights
    from nemo_lead.models.checkpoint import load_checkpoint, read_checkpoint_meta
    from nemo_lead.parallel import seed_model_parallel_rng

    if not ps.model_parallel_is_initialized():
        raise RuntimeError("call nemo_lead.parallel.init_parallel(actor.tp, actor.pp) before build_actor")
    tp, pp = ps.get_tensor_model_parallel_world_size(), ps.get_pipeline_model_parallel_world_size()
    if (tp, pp) != (cfg.tp, cfg.pp):
        raise ValueError(f"actor.tp={cfg.tp} actor.pp={cfg.pp}, but the parallel state was initialised with "
                         f"tp={tp} pp={pp}")
    precision = resolve_precision(cfg.precision)
    kind, source = model_source(cfg.model)
    build = partial(build_gpt, parallel=parallel, precision=precision, spec=cfg.layer_spec,
                    config_overrides=cfg.megatron_overrides())
    if kind == "checkpoint":
        meta = read_checkpoint_meta(source)
        gpt = build(meta["hf_config"], init=False, vocab_divisible_by=meta["vocab_divisible_by"])
        load_checkpoint(source, gpt)
    elif kind == "hf":
        gpt = build(source, init=False)
        load_hf_weights(gpt, source)
    else:
        seed_model_parallel_rng(cfg.seed)
        gpt = build(source, init=True)

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
    _fuse_torch_adam(optimizer)
    config = gpt.config
    config.finalize_model_grads_func = _finalize_grads_without_token_scaling
    config.grad_scale_func = optimizer.scale_loss
    config.no_sync_func = ddp.no_sync
    return Actor(cfg=cfg, parallel=parallel, model=ddp, optimizer=optimizer, scheduler=o.scheduler(optimizer),
                 precision=precision)


def _fuse_torch_adam(optimizer) -> None:
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


# ----------------------------------------------------------------------------- plumbing
def _dp():
    from megatron.core import parallel_state as ps

    return ps.get_data_parallel_world_size(), ps.get_data_parallel_rank(), ps.get_data_parallel_group()


def _is_last_stage() -> bool:
    from megatron.core import parallel_state as ps

    return ps.is_pipeline_last_stage()


def _broadcast_from_last_stage(t: torch.Tensor) -> torch.Tensor:
    from megatron.core import parallel_state as ps

    if ps.get_pipeline_model_parallel_world_size() > 1:
        group = ps.get_pipeline_model_parallel_group()
        dist.broadcast(t, src=dist.get_global_rank(group, ps.get_pipeline_model_parallel_world_size() - 1),
                       group=group)
    return t


@dataclass
class _Plan:
    """This rank's part of a step: which sequences (indices into the given batch) in which micro-batches."""

    batch: SequenceBatch  # this rank's sequences (or a dummy when it has none)
    indices: list[int]  # their positions in the given batch (empty for the dummy)
    groups: list[list[int]]  # micro-batches, as positions into `batch`
    shares: list[list[int]] | None  # every DP rank's indices (when the batch was split here)


def _plan(actor: Actor, batch: SequenceBatch, split_over_dp: bool) -> _Plan:
    dp, dp_rank, _ = _dp()
    shares = balance_over_dp(batch.lengths, dp) if split_over_dp else None
    indices = shares[dp_rank] if split_over_dp else list(range(len(batch)))
    mine = batch.select(indices) if indices else dummy_like(batch)
    groups = plan_microbatches(mine.lengths, actor.cfg.micro_batch_tokens, actor.cfg.micro_batch_overhead_tokens)
    return _Plan(mine, indices, groups, shares)


def _run_schedule(actor: Actor, plan: _Plan, loss_fn: Callable, *, forward_only: bool) -> list:
    """megatron's forward-backward schedule over the plan's micro-batches (collated lazily, one at a time);
    returns the loss function's third outputs (last stage; empty elsewhere)."""
    from megatron.core.pipeline_parallel import get_forward_backward_func

    device = actor.device
    packed = plan.batch.segments is not None and any(len(s) > 1 for s in plan.batch.segments)
    if packed and getattr(actor.gpt, "layer_spec_name", "local") != "local":
        # a dense [b, 1, S, S] mask is not Transformer Engine's path for packed sequences (that is THD with
        # megatron's PackedSeqParams, not implemented here)
        raise NotImplementedError("packed sequences need the local layer spec: set data.pack=false or "
                                  "actor.layer_spec=local")

    def micro_batches() -> Iterator[MicroBatch]:
        for g in plan.groups:
            yield collate(plan.batch, g, device)

    def step(data: Iterator[MicroBatch], model):
        mb = next(data)  # attention_mask: block-diagonal causal for packed rows, None (causal) otherwise
        return model(mb.input_ids, mb.position_ids, mb.attention_mask), partial(loss_fn, mb)

    lengths = plan.batch.lengths
    return get_forward_backward_func()(
        forward_step_func=step, data_iterator=micro_batches(), model=[actor.model],
        num_microbatches=len(plan.groups), seq_length=max(lengths),
        micro_batch_size=max(len(g) for g in plan.groups), forward_only=forward_only,
    )


def _reduce_metrics(outputs: list[dict[str, torch.Tensor]], sums: list[str], maxes: list[str]) -> dict[str, float]:
    """Sum (`sums`) / max (`maxes`) the micro-batches' metrics on the last stage, over DP, then share them
    with the other pipeline stages. Keys must be the same on every rank."""
    _, _, dp_group = _dp()
    device = _collective_device()
    total = torch.zeros(len(sums), dtype=torch.float64, device=device)
    peak = torch.full((len(maxes),), float("-inf"), dtype=torch.float64, device=device)
    for out in outputs:
        if sums:
            total += torch.stack([out[k].detach().double() for k in sums]).to(device)
        if maxes:
            peak = torch.maximum(peak, torch.stack([out[k].detach().double() for k in maxes]).to(device))
    if _is_last_stage():
        dist.all_reduce(total, group=dp_group)
        if maxes:
            dist.all_reduce(peak, op=dist.ReduceOp.MAX, group=dp_group)
    packed = _broadcast_from_last_stage(torch.cat([total, peak]))
    return dict(zip([*sums, *maxes], packed.cpu().tolist()))


def _collective_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def _dp_sum(values: list[float]) -> list[float]:
    """Sum a few numbers over the DP group (float64)."""
    _, _, group = _dp()
    t = torch.tensor(values, dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t, group=group)
    return t.cpu().tolist()


def _dp_max(value: float) -> float:
    _, _, group = _dp()
    t = torch.tensor([value], dtype=torch.float64, device=_collective_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    return float(t)


# ----------------------------------------------------------------------------- log-probs
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
    plan = _plan(actor, batch, split_over_dp)
    vocab = actor.vocab_size

    def loss_fn(mb: MicroBatch, logits: torch.Tensor):
        logp, ent = token_logprobs(logits, mb.targets, vocab, temperature=temperature, entropy=entropy)
        out = {"logp": mb.response_values(logp)}
        if entropy:
            out["entropy"] = mb.response_values(ent)
        return logits.new_zeros(()), torch.zeros((), dtype=torch.int), out

    with eval_mode(actor.model):
        outputs = _run_schedule(actor, plan, loss_fn, forward_only=True)
    keys = ["logp", "entropy"] if entropy else ["logp"]
    # this rank's sequences in micro-batch order -> one flat tensor per key; shared with the other PP stages
    order = [i for g in plan.groups for i in g] if plan.indices else []
    resp = plan.batch.response_lens
    flat_len = sum(resp[i] for i in order)
    device = _collective_device()
    flats = []
    for k in keys:
        if _is_last_stage():
            parts = [t.float() for out in outputs for t in out[k]][: len(order)]
            flat = torch.cat(parts).to(device) if parts else torch.zeros(0, device=device)
        else:
            flat = torch.empty(flat_len, device=device)
        flats.append(_broadcast_from_last_stage(flat).cpu())
    results = {k: [None] * len(batch) for k in keys}
    for k, flat in zip(keys, flats):
        for i, piece in zip(order, flat.split([resp[i] for i in order])):
            results[k][plan.indices[i]] = piece
    if split_over_dp:
        _gather_shares(results, batch, plan.shares)
    return (results["logp"], results["entropy"]) if entropy else results["logp"]


def _gather_shares(results: dict[str, list], batch: SequenceBatch, shares: list[list[int]]) -> None:
    """Fill in the other DP replicas' sequences (all-gather, padded to the largest share)."""
    dp, dp_rank, group = _dp()
    if dp == 1:
        return
    resp = batch.response_lens
    sizes = [sum(resp[i] for i in s) for s in shares]
    device = _collective_device()
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
def _train(actor: Actor, plan: _Plan, loss_fn: Callable, sums: list[str], maxes: list[str]) -> dict[str, float]:
    """Zero grads, forward-backward over the plan, optimizer step; the reduced metrics plus step facts."""
    actor.model.zero_grad_buffer()
    actor.optimizer.zero_grad()
    outputs = _run_schedule(actor, plan, loss_fn, forward_only=False)
    # advance the schedule first, so that optimizer step i (from 0) uses the rate at i + 1: warm-up starts at
    # lr / warmup_steps, not at 0 as megatron-LM's order gives; a skipped (fp16 overflow) step is taken back
    actor.scheduler.step(1)
    lr = float(actor.optimizer.param_groups[0]["lr"])
    ok, grad_norm, _ = actor.optimizer.step()
    if not ok:
        actor.scheduler.step(-1)
    metrics = _reduce_metrics(outputs, sums, maxes)
    lengths = plan.batch.lengths
    real = sum(lengths) if plan.indices else 0
    real, padded, seqs, mbs = _dp_sum([real, padded_tokens(lengths, plan.groups), len(plan.indices), len(plan.groups)])
    metrics.update(
        grad_norm=float(grad_norm) if grad_norm is not None else float("nan"),
        update_skipped=float(not ok), lr=lr, sequences=seqs, padding_fraction=1.0 - real / padded, microbatches=mbs,
    )
    return metrics


def policy_train_step(
    actor: Actor,
    batch: SequenceBatch,
    lead_cfg: LeadConfig,
    *,
    temperature: float = 1.0,
    split_over_dp: bool = True,
    on_policy: bool = False,
) -> dict[str, float]:
    """One optimizer step of the clipped policy-gradient loss (`nemo_lead.algorithms.policy_loss`) over
    `batch`, which needs `advantages` and `old_logprobs` (and `ref_logprobs` when lead_cfg.kl_coeff > 0).

    `on_policy=True`: the batch was sampled from the current weights and this is the only optimizer step
    taken on it, so the old log-probs *are* this forward pass's log-probs: the ratio is taken against them,
    detached (ratio 1, the plain policy gradient; TRL and verl do the same), and no separate forward pass
    computes them. `batch.old_logprobs` must then be None. The step also reports the token-mean `entropy`
    and, when `batch.rollout_logprobs` is set, the train/inference mismatch over the trained tokens
    (`mismatch_sum`, to divide by `tokens`, and `mismatch_max`).

    `temperature`: the sampling temperature; log-probs are of softmax(logits / T), as the rollout engine's.
    Entropy (for lead_cfg.entropy_coeff > 0) is computed from the vocab-parallel logits (TP all-reduces).
    `split_over_dp`: as in `compute_logprobs`. Collective over all ranks.

    Returns (the same on every rank): `loss` (the global loss), the token means over the global batch of
    `pg_loss`, `clip_frac`, `ratio_mean`, `approx_kl` (and `entropy`, `kl_ref` when computed), `ratio_max`,
    `tokens` (trained tokens), `grad_norm` (before clipping), `update_skipped`, `lr`, `sequences`,
    `padding_fraction` (padded tokens that are padding, over all micro-batches and DP ranks) and
    `microbatches` (summed over DP ranks).
    """
    if batch.advantages is None:
        raise ValueError("policy_train_step needs batch.advantages")
    if on_policy and batch.old_logprobs is not None:
        raise ValueError("on_policy=True takes the old log-probs from the step's own forward pass; "
                         "batch.old_logprobs must be None")
    if not on_policy and batch.old_logprobs is None:
        raise ValueError("policy_train_step needs batch.old_logprobs (or on_policy=True)")
    if lead_cfg.kl_coeff > 0 and batch.ref_logprobs is None:
        raise ValueError("lead.kl_coeff > 0 needs batch.ref_logprobs (reference-policy log-probs)")
    plan = _plan(actor, batch, split_over_dp)
    cfg = lead_cfg
    if cfg.loss_agg == "constant_norm" and not cfg.max_response_len:
        # Dr. GRPO's L_max defaults to the longest response of the (global) batch, not a padded width
        cfg = cfg.replace(max_response_len=int(_dp_max(max(plan.batch.response_lens))))
    local = sum(float(loss_denominator(collate(plan.batch, g).loss_mask, cfg)) for g in plan.groups)
    denominator = torch.tensor(_dp_sum([local])[0], dtype=torch.float64)
    with_entropy = cfg.entropy_coeff > 0 or on_policy  # on-policy: the old policy's entropy, as a metric
    with_ref = batch.ref_logprobs is not None
    with_mismatch = on_policy and batch.rollout_logprobs is not None
    vocab = actor.vocab_size
    token_means = ["pg_loss", "clip_frac", "ratio_mean", "approx_kl"]
    token_means += (["entropy"] if with_entropy else []) + (["kl_ref"] if with_ref else [])

    def loss_fn(mb: MicroBatch, logits: torch.Tensor):
        logp, ent = token_logprobs(logits, mb.targets, vocab, temperature=temperature, entropy=with_entropy)
        old = logp.detach() if on_policy else mb.old_logprobs
        loss, m = policy_loss(logp, old, mb.advantages, mb.loss_mask, cfg,
                              ref_logp=mb.ref_logprobs, entropy=ent, denominator=denominator)
        n = m["tokens"]
        out = {"loss": loss.detach(), "tokens": n, "ratio_max": m["ratio_max"]}
        out.update({k: m[k] * n for k in token_means})  # token sums; divided by the global count below
        if with_mismatch:
            gap = torch.where(mb.loss_mask > 0, (logp.detach() - mb.rollout_logprobs).abs(), 0.0)
            out.update(mismatch_sum=gap.sum(), mismatch_max=gap.max())
        return loss, n.to(torch.int), out

    sums, maxes = ["loss", "tokens", *token_means], ["ratio_max"]
    if with_mismatch:
        sums, maxes = [*sums, "mismatch_sum"], [*maxes, "mismatch_max"]
    metrics = _train(actor, plan, loss_fn, sums, maxes)
    for k in token_means:
        metrics[k] /= max(metrics["tokens"], 1.0)
    return metrics


def _sft_plan(actor: Actor, batch: SequenceBatch, split_over_dp: bool) -> tuple[_Plan, float]:
    """The plan and the global count of trained tokens (from the masks alone: no micro-batch is built)."""
    plan = _plan(actor, batch, split_over_dp)
    mine = plan.batch
    local = sum(float(m.sum()) for m in mine.loss_mask) if mine.loss_mask is not None else sum(mine.response_lens)
    return plan, _dp_sum([float(local)])[0]


def _masked_nll(actor: Actor, mb: MicroBatch, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed negative log-likelihood of a micro-batch's trained tokens, and their count."""
    logp, _ = token_logprobs(logits, mb.targets, actor.vocab_size)
    return -(logp * mb.loss_mask).sum(), mb.loss_mask.sum()


def sft_train_step(actor: Actor, batch: SequenceBatch, *, split_over_dp: bool = True) -> dict[str, float]:
    """One optimizer step of the masked next-token loss: the mean negative log-likelihood over every
    response token (with loss_mask 1) of the global batch. Returns `loss`, `tokens`, `grad_norm`,
    `update_skipped`, `lr`, `sequences`, `padding_fraction`, `microbatches`. Collective over all ranks."""
    plan, total = _sft_plan(actor, batch, split_over_dp)

    def loss_fn(mb: MicroBatch, logits: torch.Tensor):
        nll, n = _masked_nll(actor, mb, logits)
        loss = nll / total if total > 0 else nll * 0.0
        return loss, n.to(torch.int), {"loss": loss.detach(), "tokens": n}

    return _train(actor, plan, loss_fn, ["loss", "tokens"], [])


def sft_eval_loss(actor: Actor, batch: SequenceBatch, *, split_over_dp: bool = True) -> dict[str, float]:
    """The masked next-token loss of `sft_train_step` without a step: forward only, in eval mode (no
    dropout); `loss` is the mean NLL over every response token (loss_mask 1) of the global batch, `tokens`
    their count (the same on every rank). `split_over_dp`: as in `compute_logprobs`. Collective."""
    plan, total = _sft_plan(actor, batch, split_over_dp)

    def loss_fn(mb: MicroBatch, logits: torch.Tensor):
        nll, n = _masked_nll(actor, mb, logits)
        return logits.new_zeros(()), torch.zeros((), dtype=torch.int), {"nll": nll.detach(), "tokens": n}

    with eval_mode(actor.model):
        outputs = _run_schedule(actor, plan, loss_fn, forward_only=True)
    metrics = _reduce_metrics(outputs, ["nll", "tokens"], [])
    return {"loss": metrics["nll"] / total if total > 0 else 0.0, "tokens": metrics["tokens"]}


# ----------------------------------------------------------------------------- checkpoints
def save_actor_state(
    actor: Actor,
    path: str | Path,
    *,
    step: int,
    loop_state: dict[str, Any] | None = None,
    tokenizer_dir: str | Path | None = None,
    extra_meta: dict[str, Any] | None = None,
) -> Path:
    """Collective: the actor's full training state (model, optimizer, LR schedule, RNG) and the caller's
    `loop_state` as one atomic checkpoint folder (`nemo_lead.training.checkpoint.save_train_state`)."""
    from .checkpoint import save_train_state

    return save_train_state(path, actor.model, actor.optimizer, step=step, loop_state=loop_state,
                            scheduler=actor.scheduler, tokenizer_dir=tokenizer_dir, extra_meta=extra_meta)


def load_actor_state(actor: Actor, path: str | Path, *, load_optimizer: bool = True,
                     load_rng: bool = True) -> dict[str, Any]:
    """Collective: restore what `save_actor_state` wrote, into an actor of any layout. Returns the
    checkpoint's meta.json: `loop` (the loop state), `step`, `rng_restored` (False when the layout differs
    from the saving one: RNG streams are per rank)."""
    from .checkpoint import load_train_state

    return load_train_state(path, actor.model, actor.optimizer if load_optimizer else None,
                            scheduler=actor.scheduler if load_optimizer else None, load_rng=load_rng)
