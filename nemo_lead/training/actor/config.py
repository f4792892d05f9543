"""The `actor` section of the SFT and RL configs: the model, its parallel layout and precision, the
optimizer and learning-rate schedule, micro-batch token budgets and activation recomputation.
Kept apart from the actor itself so that a config can be read (`nemo-lead rl --print-config`) without
building anything."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from nemo_lead.config.fields import setting
from nemo_lead.models.source import PRECISION_CHOICES

RECOMPUTE_GRANULARITIES = ("full", "selective")
RECOMPUTE_METHODS = ("uniform", "block")
LR_DECAY_STYLES = ("constant", "linear", "cosine")


@dataclass
class ActorOptimConfig:
    """Adam (decoupled weight decay, i.e. AdamW) with global-norm gradient clipping, megatron's optimizer,
    and megatron's learning-rate schedule (OptimizerParamScheduler, which also applies the "no weight decay
    on biases and norm weights" rule: without it every parameter group would decay)."""

    lr: float = setting(1e-6, resume="flag")  # peak learning rate (the paper's RL value; constant by default)
    min_lr: Optional[float] = setting(None, resume="flag")  # end of a linear / cosine decay (None = lr)
    lr_warmup_steps: int = 0  # linear warm-up: step i (from 0) of the first ones uses lr * (i + 1) / lr_warmup_steps
    lr_decay_style: str = setting("constant", choices=LR_DECAY_STYLES)  # constant | linear | cosine
    lr_decay_steps: Optional[int] = None  # linear / cosine: the step (counting from 1) that reaches min_lr
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    weight_decay: float = 0.01  # on matrices only (megatron leaves biases and norm weights alone)
    clip_grad: float = setting(1.0, resume="flag")  # max global gradient norm; 0 = no clipping
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

    # a HF folder (weights loaded), a checkpoint folder, or a conf/model preset (random init); required
    model: Optional[str] = None
    tp: int = 1
    pp: int = 1
    precision: str = setting("auto", choices=PRECISION_CHOICES)  # auto (fp32 on CPU; on a GPU bf16, fp16 for fp16 weights) | fp32 | bf16 | fp16 | fp8 (TE)
    layer_spec: str = setting("auto", choices=("auto", "te", "local"))  # auto (TE when importable) | te | local
    optim: ActorOptimConfig = field(default_factory=ActorOptimConfig)
    # padded tokens per micro-batch at most (rows x longest row); None: per device at build time
    # (`micro_batch_tokens_for_device`: 16384 on a GPU, 4096 on a CPU, whose RAM holds the fp32 logits)
    micro_batch_tokens: Optional[int] = None
    micro_batch_overhead_tokens: int = 256  # what one more micro-batch costs, in tokens: where to cut (microbatch.py)
    # tokens per chunk of the output layer + log-probs / entropy, forward and backward (0 = unchunked: the whole
    # micro-batch's [tokens, vocab / tp] fp32 logits at once). 2048 bounds those temporaries at 2 x 2048 x
    # vocab / tp x 4 bytes (2.5 GB for Qwen's 152k vocabulary at TP1, 0.3 GB at TP8) instead of several
    # [micro_batch_tokens, vocab / tp] tensors, while 2048-row GEMMs stay efficient; the price is one more
    # output-layer GEMM per micro-batch (logits recomputed in backward)
    logprob_chunk_tokens: int = 2048
    recompute_granularity: Optional[str] = setting(None, choices=(None, *RECOMPUTE_GRANULARITIES))  # None | full | selective (megatron activation recomputation)
    recompute_method: Optional[str] = setting(None, choices=(None, *RECOMPUTE_METHODS))  # full only: uniform | block
    recompute_num_layers: Optional[int] = None  # full only: layers per recomputed chunk (uniform) / recomputed layers (block)
    seed: int = 1234  # initialisation of preset models; the model-parallel RNG is seeded by init_parallel
    # megatron's sequence parallelism (TP > 1): norms, residuals and dropout work on 1/tp of the tokens,
    # which divides the activations kept between the linears by tp (the same results; tests/training)
    sequence_parallel: bool = False
    # RL: optimizer state and DDP's gradient buffers go to host memory while the engine generates, and come
    # back before the update (the same run; `nemo_lead.training.actor.offload`), freeing their GPU memory for the cache
    offload_during_generation: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.optim, dict):
            self.optim = ActorOptimConfig(**self.optim)
        for key in ("tp", "pp", "micro_batch_tokens"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise ValueError(f"actor.{key}={getattr(self, key)} must be >= 1")
        if self.micro_batch_overhead_tokens < 0:
            raise ValueError(f"actor.micro_batch_overhead_tokens={self.micro_batch_overhead_tokens} must be >= 0")
        if self.logprob_chunk_tokens < 0:
            raise ValueError(f"actor.logprob_chunk_tokens={self.logprob_chunk_tokens} must be >= 0 (0 = unchunked)")
        if self.precision not in PRECISION_CHOICES:
            raise ValueError(f"actor.precision={self.precision!r} is not one of {list(PRECISION_CHOICES)}")
        if self.layer_spec not in ("auto", "te", "local"):
            raise ValueError(f"actor.layer_spec={self.layer_spec!r} is not one of ['auto', 'te', 'local']")
        if self.sequence_parallel and self.tp < 2:
            raise ValueError("actor.sequence_parallel=true needs actor.tp > 1 (it splits tokens over the TP ranks)")
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
        if self.sequence_parallel:
            out["sequence_parallel"] = True
        if self.recompute_granularity is not None:
            out["recompute_granularity"] = self.recompute_granularity
        if self.recompute_granularity == "full":
            out.update(recompute_method=self.recompute_method, recompute_num_layers=self.recompute_num_layers)
        return out


# actor.micro_batch_tokens=None: the device's budget. A GPU's budget took a 135M model with a 49k vocabulary
# to several times the host RAM of a smaller one on a CPU, at the same speed (bench/RESULTS.md, "Design
# measurements")
GPU_MICRO_BATCH_TOKENS = 16384
CPU_MICRO_BATCH_TOKENS = 4096


def micro_batch_tokens_for_device(micro_batch_tokens: int | None) -> int:
    """`actor.micro_batch_tokens` as set, or when None the device's default (GPU 16384, CPU 4096)."""
    if micro_batch_tokens is not None:
        return micro_batch_tokens
    return GPU_MICRO_BATCH_TOKENS if torch.cuda.is_available() else CPU_MICRO_BATCH_TOKENS
