"""`RLConfig`: what `nemo-lead rl` reads (its defaults: the paper's 32 prompts x 8 samples,
lr 1e-6, no KL, the LEAD preset).

One step = `prompts_per_step` problems x `rollout.n` samples (more rounds of prompts under dynamic sampling,
up to `max_rounds`), one policy update per step by default (`ppo_epochs` x `minibatches` optimizer steps
when raised; the paper takes one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from nemo_lead.algorithms import LeadConfig
from nemo_lead.algorithms.loss import zero_advantage_terms
from nemo_lead.config.fields import setting
from nemo_lead.data import PromptConfig
from nemo_lead.generation import EngineConfig
from nemo_lead.plan.engine_kinds import ENGINE_KINDS, check_engine_layout, has_own_layout
from nemo_lead.training.actor.config import ActorConfig
from nemo_lead.training.run.config import RunSettings
from nemo_lead.verify import VerifyConfig, default_region

OLD_LOGPROBS = ("auto", "recompute")


@dataclass
class RLDataConfig:
    path: Optional[str] = None  # problems: built-in name (lead_stage2, math500, ...), JSONL / Parquet / HF folder
    split: Optional[str] = None
    fields: dict[str, str] = field(default_factory=dict)  # column names: problem / answer / id
    limit: Optional[int] = None  # first N problems
    shuffle: bool = True  # seeded reshuffle every epoch (the order is part of the resumable state)


@dataclass
class RolloutConfig:
    n: int = 8  # samples per prompt (the group size G)
    temperature: float = 0.8  # training temperature of the authors' code (the paper does not state one)
    top_p: float = 1.0  # 1: the actor's log-probs and the sampling distribution are the same
    max_tokens: int = 8192  # response budget (paper: 8k for 7B, 14k for 14B)
    stop_at_eos: bool = True  # the end tokens (tokenizer EOS + generation_config.json eos_token_id) end a response
    # off-policy by a fixed lag k (nemo_lead.training.rl.lag): step t trains on samples of the weights after step
    # max(0, t - 1 - k); 0 is the paper's on-policy loop. k > 0 needs lead.rollout_correction (decoupled PPO)
    lag: int = 0
    # split layout (nemo_lead.training.rl.split): the last G ranks generate, the others train; G = a multiple of
    # actor.tp x actor.pp (that many generator replicas, each decoding a share of every batch); 0 = every rank
    # trains and generates (colocated). The same samples either way
    generator_ranks: int = 0
    weight_bucket_mb: float = setting(256.0, resume="free", results=False)  # split: weights sent in buckets of this size


@dataclass
class ValidationConfig:
    data: Optional[str] = None  # held-out problems (None: no validation)
    every: int = setting(10, resume="flag")  # at step 0 and every N steps (and at the end)
    n: int = 4  # samples per problem
    temperature: float = 0.6  # the paper's evaluation temperature
    top_p: float = 0.95
    max_tokens: Optional[int] = None  # None: rollout.max_tokens
    limit: Optional[int] = None  # first N problems


@dataclass
class StartCheckConfig:
    """What the first steps of a run that can learn look like (`start_check.*`): checked after each of the first
    `steps` steps, a warning naming every figure outside its bound (0 steps: no check;
    `nemo_lead.training.rl.no_signal.start_check`)."""

    steps: int = 2  # the first N steps are checked
    min_answer_extracted: float = 0.9  # warns unless answer_extracted_frac > this
    max_truncated: float = 0.1  # warns unless truncated_frac < this
    min_mixed_groups: float = 0.4  # warns unless groups/mixed_frac >= this

    def __post_init__(self) -> None:
        if self.steps < 0:
            raise ValueError(f"start_check.steps must be >= 0, got {self.steps}")
        for key in ("min_answer_extracted", "max_truncated", "min_mixed_groups"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                raise ValueError(f"start_check.{key} must be in [0, 1], got {getattr(self, key)}")


@dataclass
class RLConfig(RunSettings):
    steps: Optional[int] = setting(100, resume="free")
    save_every: int = setting(10, resume="flag", results=False)
    actor: ActorConfig = field(default_factory=ActorConfig)  # its optimizer's defaults are the paper's RL ones
    engine: EngineConfig = field(default_factory=EngineConfig)
    lead: LeadConfig = field(default_factory=LeadConfig.paper)
    data: RLDataConfig = field(default_factory=RLDataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    start_check: StartCheckConfig = setting(default_factory=StartCheckConfig, resume="free", results=False)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    tokenizer: Optional[str] = None  # tokenizer folder; None: the model's
    prompts_per_step: int = 32  # groups per step (the paper's batch of 32 questions)
    max_rounds: int = 3  # dynamic sampling: prompt rounds per step at most (groups with signal fill the batch)
    ppo_epochs: int = 1  # passes over the step's rollouts
    minibatches: int = 1  # optimizer steps per pass
    # auto: with one optimizer step on freshly sampled data (ppo_epochs = minibatches = 1) the old log-probs
    # are the update's own (detached), so no forward pass of their own; recompute: always a pass of their own
    old_logprobs: str = setting("auto", choices=OLD_LOGPROBS)
    # responses whose advantage is exactly 0 (a group whose rewards are all equal) get no forward or backward
    # pass in the update, their gradient being exactly 0 (`policy_train_step`); the loss's denominator still
    # counts them. null (auto): on where that is exact (no KL or entropy term, no dropout), off where not;
    # true: on, refused where not exact; false: every response is forwarded
    skip_zero_advantage: Optional[bool] = setting(None, resume="flag", since="2026-12-06")
    # grading; verify.answer_region None: the outcome rule's (`verify.verifier.default_region`: before_think
    # for reference_code*, after_think otherwise)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    # RUN/rollouts/step_NNNNNN.jsonl: prompt, response, reward, outcome per sample
    log_rollouts: bool = setting(True, resume="flag", results=False)
    # a NaN / inf loss or gradient norm stops the run (last good checkpoint kept)
    stop_on_nonfinite: bool = setting(True, resume="flag", results=False)

    def __post_init__(self) -> None:
        self.check_run_settings()
        if self.data.path is None:
            raise ValueError("data.path must name a problem set (--data PROBLEMS)")
        if self.steps is None:
            raise ValueError("steps must be set for rl (--steps N)")
        for key in ("prompts_per_step", "max_rounds", "ppo_epochs", "minibatches"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.rollout.n < 1 or self.rollout.max_tokens < 1:
            raise ValueError("rollout.n and rollout.max_tokens must be >= 1")
        if self.rollout.n < 2:
            raise ValueError("rollout.n must be >= 2: group advantages need at least two samples per prompt")
        if not self.rollout.temperature > 0:
            raise ValueError("rollout.temperature must be > 0 (the policy-gradient ratio needs a sampling distribution)")
        if self.old_logprobs not in OLD_LOGPROBS:
            raise ValueError(f"old_logprobs must be one of {list(OLD_LOGPROBS)}, got {self.old_logprobs!r}")
        if self.skip_zero_advantage not in (None, True, False):
            raise ValueError(f"skip_zero_advantage must be null (auto), true or false, got {self.skip_zero_advantage!r}")
        terms = zero_advantage_terms(self.lead)
        if self.skip_zero_advantage is True and terms:
            raise ValueError("skip_zero_advantage=true: a response with advantage 0 still has a gradient under "
                             + " and ".join(terms) + ": set skip_zero_advantage=null (auto) or false")
        if self.validation.every < 1 or self.validation.n < 1:
            raise ValueError(f"validation.every and validation.n must be >= 1, got {self.validation.every} and "
                             f"{self.validation.n}")
        self._check_lag()
        check_engine_layout(self.engine, tp=self.actor.tp, pp=self.actor.pp)
        if self.rollout.generator_ranks and has_own_layout(self.engine, tp=self.actor.tp, pp=self.actor.pp):
            raise ValueError(f"engine.tp={self.engine.tp} engine.pp={self.engine.pp} (an engine layout of its own) "
                             f"with rollout.generator_ranks={self.rollout.generator_ranks} is not implemented yet: "
                             "the generators decode at the actor's layout (engine.tp=actor engine.pp=actor)")
        kind = ENGINE_KINDS.get(self.engine.kind)  # None: auto, chosen at start
        if self.lead.rollout_correction.enabled and kind and not kind.untruncated_logprobs and self.rollout.top_p < 1:
            raise ValueError(f"lead.rollout_correction.mode={self.lead.rollout_correction.mode} needs the engine's "
                             f"untruncated log-probs, which engine.kind={self.engine.kind} cannot report with rollout.top_p < 1: "
                             "set rollout.top_p=1 or lead.rollout_correction.mode=none")

    def _check_lag(self) -> None:
        r = self.rollout
        if r.lag < 0:
            raise ValueError(f"rollout.lag must be >= 0, got {r.lag}")
        if r.lag > 0 and not self.lead.rollout_correction.enabled:
            raise ValueError(f"rollout.lag={r.lag} trains on samples of older weights: set lead.rollout_correction.mode "
                             "(tis, seq_tis or mis) for decoupled PPO's importance weights pi_prox / mu (NeMo-RL "
                             "requires its importance-sampling correction for asynchronous GRPO as well)")
        replica = self.actor.tp * self.actor.pp
        if r.generator_ranks < 0 or r.generator_ranks % replica:
            raise ValueError(f"rollout.generator_ranks={r.generator_ranks}: the generators hold whole model replicas, "
                             f"so it must be a multiple of actor.tp x actor.pp = {replica} (or 0: no split)")
        kind = ENGINE_KINDS.get(self.engine.kind)  # None: auto, which may become an engine that runs one replica
        if r.generator_ranks > replica and not (kind and kind.generator_replicas):
            several = ", ".join(f"engine.kind={k.name}" for k in ENGINE_KINDS.values() if k.generator_replicas)
            raise ValueError(f"rollout.generator_ranks={r.generator_ranks} (several generator replicas) needs "
                             f"{several} (per-sample streams across replicas); engine.kind={self.engine.kind} "
                             f"runs one replica: rollout.generator_ranks={replica}")
        if not r.weight_bucket_mb > 0:
            raise ValueError(f"rollout.weight_bucket_mb must be > 0, got {r.weight_bucket_mb}")

    @property
    def resolved_answer_region(self) -> str:
        """`verify.answer_region`, or the outcome rule's (`lead.outcome_rule`) where it is None."""
        return self.verify.region(default_region(self.lead.outcome_rule))
