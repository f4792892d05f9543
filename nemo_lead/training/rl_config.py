"""`RLConfig`: what `nemo-lead rl` reads (defaults in conf/rl.yaml: the paper's 32 prompts x 8 samples,
lr 1e-6, no KL, the LEAD preset).

One step = `prompts_per_step` problems x `rollout.n` samples (more rounds of prompts under dynamic sampling,
up to `max_rounds`), one policy update per step by default (`ppo_epochs` x `minibatches` optimizer steps
when raised; the paper takes one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from nemo_lead.algorithms import LeadConfig
from nemo_lead.data import PromptConfig
from nemo_lead.generation import EngineConfig

from .actor_config import ActorConfig, ActorOptimConfig
from .run_config import RunSettings

ANSWER_REGIONS = ("after_think", "before_think", "all")
OLD_LOGPROBS = ("auto", "recompute")


def _rl_actor() -> ActorConfig:
    return ActorConfig(optim=ActorOptimConfig(lr=1e-6, weight_decay=0.01, clip_grad=1.0))


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


@dataclass
class ValidationConfig:
    data: Optional[str] = None  # held-out problems (None: no validation)
    every: int = 10  # at step 0 and every N steps (and at the end)
    n: int = 4  # samples per problem
    temperature: float = 0.6  # the paper's evaluation temperature
    top_p: float = 0.95
    max_tokens: Optional[int] = None  # None: rollout.max_tokens
    limit: Optional[int] = None  # first N problems


@dataclass
class RLConfig(RunSettings):
    steps: Optional[int] = 100
    save_every: int = 10
    actor: ActorConfig = field(default_factory=_rl_actor)
    engine: EngineConfig = field(default_factory=EngineConfig)
    lead: LeadConfig = field(default_factory=LeadConfig.paper)
    data: RLDataConfig = field(default_factory=RLDataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    tokenizer: Optional[str] = None  # tokenizer folder; None: the model's
    prompts_per_step: int = 32  # groups per step (the paper's batch of 32 questions)
    max_rounds: int = 3  # dynamic sampling: prompt rounds per step at most (groups with signal fill the batch)
    ppo_epochs: int = 1  # passes over the step's rollouts
    minibatches: int = 1  # optimizer steps per pass
    # auto: with one optimizer step on freshly sampled data (ppo_epochs = minibatches = 1) the old log-probs
    # are the update's own (detached), so no forward pass of their own; recompute: always a pass of their own
    old_logprobs: str = "auto"
    answer_region: str = "after_think"  # where the final answer is read
    verify_workers: int = 2
    verify_timeout_s: float = 5.0
    log_rollouts: bool = True  # RUN/rollouts/step_NNNNNN.jsonl: prompt, response, reward, outcome per sample
    stop_on_nonfinite: bool = True  # a NaN / inf loss or gradient norm stops the run (last good checkpoint kept)

    def __post_init__(self) -> None:
        self.check_run_settings()
        if self.data.path is None:
            raise ValueError("data.path must name a problem set (--data PROBLEMS)")
        if self.steps is None:
            raise ValueError("steps must be set for rl (--steps N)")
        for key in ("prompts_per_step", "max_rounds", "ppo_epochs", "minibatches", "verify_workers"):
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
        if self.answer_region not in ANSWER_REGIONS:
            raise ValueError(f"answer_region must be one of {list(ANSWER_REGIONS)}, got {self.answer_region!r}")
        if self.validation.every < 1 or self.validation.n < 1:
            raise ValueError("validation.every and validation.n must be >= 1")
