"""Phases 1-5 of an RL step and the state they share: where a step's training groups come from.

    1. prompts     the next `prompts_per_step` problems of the seeded, resumable data order
    2. generate    the rollout engine samples `rollout.n` responses per prompt
    3. verify      MathVerifier grades them: an outcome per response
    4. rewards     `shape_rewards`: the LEAD length reward, explicit and repetition penalties
    5. filter      the group keep mask on raw outcomes; with dynamic sampling, more rounds until the batch
                   holds `prompts_per_step` groups with signal (`select_groups`)

`loop.py` runs the step (phases 6-11) and picks where these phases run (`s.batches`, a `StepBatches`): in
the step itself, k steps ahead (`lag.py`), or on generator ranks (`split.py`); all three call the functions
here, so this module imports none of them: what the phases produce (`Batch`) and what they read on a
generator rank (`GeneratorRun`) are defined here.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import torch

from nemo_lead.algorithms import group_keep_mask, overlong_keep_mask, shape_rewards
from nemo_lead.data import Problem, open_think
from nemo_lead.generation import SamplingParams, build_engine, engine_config_for
from nemo_lead.models import end_token_ids, generation_config_dir
from nemo_lead.models.source import ModelSource
from nemo_lead.parallel import ParallelInfo
from nemo_lead.training.actor.offload import offloaded
from nemo_lead.training.rl.config import RLConfig
from nemo_lead.training.rl.no_signal import NoSignalWarnings
from nemo_lead.training.rl.rollouts import Group, RolloutContext, flat_tensors, generate_groups, grade_groups
from nemo_lead.training.run.data_order import DataOrder
from nemo_lead.training.run.lifecycle import Run


@dataclass
class Batch:
    """B_step: what phases 1-5 of `rl_step` produced for `step`, sampled with the weights W_version."""

    step: int
    version: int  # optimizer steps behind the weights that sampled it
    seen: list[Group]  # every group sampled for the step
    selected: list[Group]  # the groups that train (a sub-list of `seen`, the same objects)
    rounds: int
    times: dict[str, float] = field(default_factory=dict)  # seconds spent sampling it (`lag.SAMPLE_TIMES`, waits)
    order: dict[str, int] = field(default_factory=dict)  # the data order's state right after sampling it


@dataclass
class GeneratorRun:
    """The part of `Run` (`nemo_lead.training.run.lifecycle`) the sampling phases read on a generator rank of
    the split layout (no actor: no optimizer state to offload during generation)."""

    cfg: RLConfig
    actor: None = None  # never offloaded: generator_job turns actor.offload_during_generation off


@runtime_checkable
class StepBatches(Protocol):
    """Where each step's batch (phases 1-5) comes from: what `rl_step`, `rl_job` and `RLState` call on
    `s.batches`. `lag.BatchQueue` (serial, any lag) and `split.SplitQueue` (the trainers of the split layout)
    are the two."""

    def take(self, s: RLState, step: int) -> Batch:
        """B_step, made or received when due, checked for staleness."""

    def after_update(self, s: RLState, step: int) -> dict[str, float]:
        """After step's update (the split layout sends the new weights); seconds by metric key."""

    def loop_state(self, s: RLState) -> dict[str, Any]:
        """meta.json's "lag" entry, once the queue holds what the checkpoint after this step must."""

    def write_part(self, folder: Path) -> None:
        """The checkpoint part (`lag.PART`): the queued batches."""

    def close(self) -> None:
        """After the last step, or a stop: end what the queue started."""


@dataclass
class RLState:
    """Everything the loop carries from step to step (besides the actor)."""

    run: Run | GeneratorRun  # GeneratorRun on the split layout's generator ranks: the part of Run phases 1-5 read
    ctx: RolloutContext
    problems: list[Problem]
    order: DataOrder
    val_problems: list[Problem]
    val_prompt_ids: list[list[int]] = field(default_factory=list)  # val_problems' prompts, tokenized once per job
    end_tokens: list[int] = field(default_factory=list)  # stop tokens: nemo_lead.models.end_token_ids
    no_signal: NoSignalWarnings = field(default_factory=NoSignalWarnings)  # warns when steps cannot learn
    batches: StepBatches | None = None  # where each step's rollouts come from; rl_job sets it (None on generators)

    @property
    def cfg(self) -> RLConfig:
        return self.run.cfg

    def loop_state(self) -> dict[str, Any]:
        lag = self.batches.loop_state(self)  # first: the checkpoint's batches may still be due (lag.py)
        return {"data": self.order.state_dict(), **lag}


def step_seed(*parts: int) -> int:
    """A sampling seed from (seed, step, round, ...): the same parts give the same seed on every rank and resume."""
    value = 0
    for p in parts:
        value = (value * 1_000_003 + int(p)) % (2**63)
    return value


# ----------------------------------------------------------------------------- phases 1-5
def next_prompts(s: RLState) -> list[Problem]:
    """1. prompts."""
    return [s.problems[i] for i in s.order.take(s.cfg.prompts_per_step)]


def rollout_params(s: RLState, step: int, round_: int) -> SamplingParams:
    r = s.cfg.rollout
    return SamplingParams(n=r.n, temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_tokens,
                          stop_token_ids=list(s.end_tokens) if r.stop_at_eos else [], seed=step_seed(s.cfg.seed, step, round_))


def generate_and_verify(s: RLState, problems: list[Problem], params: SamplingParams, times: dict[str, float]) -> list[Group]:
    """2. generate and 3. verify (one round of prompts); their seconds are added to `times`."""
    t0 = time.monotonic()
    with offloaded(s.run.actor, s.cfg.actor.offload_during_generation):  # optimizer state on the host meanwhile
        s.ctx.engine.wake()
        groups = generate_groups(s.ctx, problems, params)
        s.ctx.engine.sleep()
    t1 = time.monotonic()
    grade_groups(s.ctx, groups, params)
    times["time/generate"] += t1 - t0
    times["time/verify"] += time.monotonic() - t1
    return groups


def score_and_filter(s: RLState, groups: list[Group]) -> None:
    """4. rewards and 5. filter: per-sample rewards and the keep mask (by group, on raw outcomes)."""
    outcome, lengths, index = flat_tensors(groups)
    rewards = shape_rewards(outcome, lengths, index, s.cfg.lead)
    keep = group_keep_mask(rewards, outcome, index, s.cfg.lead) & overlong_keep_mask(outcome, s.cfg.lead)
    for i, g in enumerate(groups):
        g.rewards, g.keep = rewards[index == i], keep[index == i]


def select_groups(s: RLState, step: int, times: dict[str, float]) -> tuple[list[Group], list[Group], int]:
    """1-5 with dynamic sampling: (every group sampled this step, the selected ones, rounds used)."""
    seen, selected = [], []
    dynamic = s.cfg.lead.group_filter == "dynamic_sampling"
    rounds = 0
    while rounds < (s.cfg.max_rounds if dynamic else 1):
        groups = generate_and_verify(s, next_prompts(s), rollout_params(s, step, rounds), times)
        score_and_filter(s, groups)
        rounds += 1
        seen += groups
        selected += [g for g in groups if bool(g.keep.any())]
        if len(selected) >= s.cfg.prompts_per_step:
            break
    for g in selected[s.cfg.prompts_per_step:]:  # passed the filter, but the batch is full: not trained
        g.keep = torch.zeros_like(g.keep)
    return seen, selected[: s.cfg.prompts_per_step], rounds


# ----------------------------------------------------------------------------- the engine and verifier of a job
def rollout_context(cfg: RLConfig, source: ModelSource, info: ParallelInfo, model, tokenizer, tokenizer_dir: str,
                    weight_version: int = 0) -> tuple[RolloutContext, list[int]]:
    """(the job's RolloutContext: the engine on `model`, whose weights are optimizer step `weight_version`'s,
    the verifier's worker pool on global rank 0 (the caller closes it), the end tokens): rl_job's, and the
    split layout's generators'."""
    verifier = cfg.verify.verifier(rule=cfg.lead.outcome_rule) if info.rank == 0 else None
    try:
        engine_cfg = engine_config_for(cfg.engine, source)  # trtllm: a HF folder to build from; weights by refit
        ctx = RolloutContext(info=info, engine=build_engine(engine_cfg, model, release_copy=cfg.actor.offload_during_generation,
                                                                weight_version=weight_version), tokenizer=tokenizer, prompt_cfg=cfg.prompt,
                             verifier=verifier, check_repetition=cfg.lead.check_repetition,
                             think_open=bool(open_think(tokenizer, cfg.prompt)))
    except BaseException:
        if verifier is not None:
            verifier.close()
        raise
    return ctx, end_token_ids(tokenizer, [generation_config_dir(source.path), tokenizer_dir])


