"""Rollouts of the RL loop: sampled across data-parallel replicas, graded once, kept as groups.

    groups = sample_groups(ctx, problems, params)     # every rank: the same list of Group, graded
    batch = training_batch(selected)                  # the actor's SequenceBatch of the kept responses

Data parallelism: each DP replica generates a contiguous share of the prompts with its own seed (derived
from the call's seed and its DP rank; the split layout's generator replicas instead keep the streams of
one replica, `RolloutContext.one_stream`), then the rollouts are all-gathered, so every rank holds the whole
step's rollouts in prompt order. An engine with a TP1 copy on every rank (engine.tp=1 engine.pp=1 over a
larger actor layout) splits each DP share further over the actor replica's ranks, every sample keeping the
random stream it has at the actor's layout: the same tokens, given the same logits. Grading runs on global rank 0 only (one `MathVerifier` worker pool per
job, not per rank) and the grades are broadcast. Every rank then computes rewards and advantages from the
same numbers, so the train step's inputs agree without further talk.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from nemo_lead.algorithms import Outcome, outcome_label
from nemo_lead.data import Problem, PromptConfig, prompt_token_ids
from nemo_lead.generation import Rollout, RolloutEngine, SamplingParams
from nemo_lead.parallel import ParallelInfo
from nemo_lead.parallel.ranks import share_from_rank0
from nemo_lead.training.actor.microbatch import SequenceBatch
from nemo_lead.verify import MathVerifier
from nemo_lead.verify.extract import THINK_OPEN

if TYPE_CHECKING:  # transformers loads when the tokenizer does
    from transformers import PreTrainedTokenizerBase


@dataclass
class Group:
    """One problem's n samples, filled in place phase by phase (each field written by one phase only, so a
    field read before its phase ran is still its default):

    - problem, prompt_ids, rollouts: 2. generate, `generate_groups` (here)
    - texts, outcomes, extracted: 3. verify, `grade_groups` (here; the same on every rank)
    - rewards, keep: 4-5. rewards and filter, `phases.score_and_filter`; `phases.select_groups` then clears
      `keep` of groups that passed the filter after the batch was full
    - advantages: 6. advantages, `loop.assign_advantages` (zeros for groups not selected)

    `lag.batch_from_data` rebuilds a group with every field but `advantages` (a queued or checkpointed batch
    is one sampled through phase 5). Why in place: the groups travel as one object per problem through the
    lag queue, the split layout's wire and the checkpoint, and the metrics and logs read them whole."""

    problem: Problem
    prompt_ids: list[int]
    rollouts: list[Rollout]  # sample order
    texts: list[str] = field(default_factory=list)
    outcomes: list[int] = field(default_factory=list)  # Outcome values
    extracted: list[str | None] = field(default_factory=list)
    rewards: torch.Tensor | None = None
    advantages: torch.Tensor | None = None
    keep: torch.Tensor | None = None  # bool per sample: takes part in the update

    @property
    def lengths(self) -> list[int]:
        return [r.num_tokens for r in self.rollouts]

    @property
    def correct(self) -> int:
        return sum(o == Outcome.CORRECT for o in self.outcomes)


@dataclass
class RolloutContext:
    """What sampling and grading need; built once per job."""

    info: ParallelInfo
    engine: RolloutEngine
    tokenizer: PreTrainedTokenizerBase  # nemo_lead.models.load_tokenizer's
    prompt_cfg: PromptConfig
    verifier: MathVerifier | None  # on global rank 0, None elsewhere
    think_open: bool  # the prompt ends inside an open <think> block: the grader sees it prepended
    check_repetition: bool = False
    # DP replicas draw each sample from the stream one replica's call would give it (the call's seed and
    # `prompt_offset`), not from a seed of their own: the split layout's generator replicas, whose samples
    # are then one generator's whatever their number
    one_stream: bool = False


def _dp_share(n: int, dp: int, rank: int) -> range:
    per, extra = divmod(n, dp)
    start = rank * per + min(rank, extra)
    return range(start, start + per + (rank < extra))


def _replica_share(ctx: RolloutContext, prompt_ids: list[list[int]], share: range, params: SamplingParams,
                   offset: int = 0) -> list[list[Rollout]]:
    """This rank's part of its DP replica's `share`, when the engine has replicas of its own inside the actor
    replica (`MegatronEngine.replicas`: a TP1 copy on each of its ranks): a contiguous part per engine
    replica, each sample drawing from the stream the whole share's call would give it (`prompt_offset`),
    then gathered over the model-parallel group, so the share's rollouts are the actor-layout engine's."""
    from megatron.core import parallel_state as ps

    count, index = ctx.engine.replicas
    part = _dp_share(len(share), count, index)
    mine: list[list[Rollout]] = [[] for _ in part]
    if len(part):
        for r in ctx.engine.generate([prompt_ids[share[i]] for i in part], params, prompt_offset=offset + part.start):
            mine[r.prompt_index].append(r)
    group = ps.get_model_parallel_group()
    gathered: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(gathered, mine, group=group)
    per_replica = len(gathered) // count  # an engine replica at TP > 1: its ranks hold the same rollouts
    return [per_prompt for piece in gathered[::per_replica] for per_prompt in piece]


def generate_all(ctx: RolloutContext, prompt_ids: list[list[int]], params: SamplingParams) -> list[list[Rollout]]:
    """Per prompt, its n rollouts (every rank gets all of them; see the module docstring). Collective."""
    info = ctx.info
    share = _dp_share(len(prompt_ids), info.dp, info.dp_rank)
    one = ctx.one_stream and info.dp > 1
    seed = params.seed if info.dp == 1 or one else (params.seed * 1_000_003 + info.dp_rank) % (2**63)
    params = dataclasses.replace(params, seed=seed)
    offset = share.start if one else 0
    if ctx.engine.replicas:
        mine = _replica_share(ctx, prompt_ids, share, params, offset)
    else:
        mine = [[] for _ in share]
        if len(share):
            more = {"prompt_offset": offset} if one else {}
            for r in ctx.engine.generate([prompt_ids[i] for i in share], params, **more):
                mine[r.prompt_index].append(r)
    if info.dp == 1:
        return mine
    from megatron.core import parallel_state as ps

    gathered: list[Any] = [None] * info.dp
    dist.all_gather_object(gathered, mine, group=ps.get_data_parallel_group())
    return [per_prompt for part in gathered for per_prompt in part]


def decode(tokenizer, rollout: Rollout, stop_ids: set[int]) -> str:
    ids = rollout.token_ids
    return tokenizer.decode(ids[:-1] if ids and ids[-1] in stop_ids else ids, skip_special_tokens=False)


def generate_groups(ctx: RolloutContext, problems: list[Problem], params: SamplingParams,
                    prompt_ids: list[list[int]] | None = None) -> list[Group]:
    """n samples per problem (not yet graded). Collective. `prompt_ids`: the problems' prompts tokenized
    already (validation's, once per job); None: tokenized here."""
    prompts = prompt_ids if prompt_ids is not None else prompt_token_ids(ctx.tokenizer, problems, ctx.prompt_cfg)
    per_prompt = generate_all(ctx, prompts, params)
    return [Group(problem=p, prompt_ids=ids, rollouts=rs) for p, ids, rs in zip(problems, prompts, per_prompt)]


def grade_groups(ctx: RolloutContext, groups: list[Group], params: SamplingParams) -> None:
    """Decode and grade every sample on global rank 0, then share texts, outcomes and answers. Collective."""
    stops = set(params.stop_token_ids)
    grades = None
    if ctx.info.rank == 0:
        flat = [(g, r) for g in groups for r in g.rollouts]
        texts = [decode(ctx.tokenizer, r, stops) for _, r in flat]
        golds, finished = [g.problem.answer for g, _ in flat], [r.finish_reason == "stop" for _, r in flat]
        if ctx.verifier.rule == "reference_code":  # the authors grade prompt + response as decoded together
            prompts = {id(g): ctx.tokenizer.decode(g.prompt_ids, skip_special_tokens=False) for g in groups}
            result = ctx.verifier.grade([decode(ctx.tokenizer, r, set()) for _, r in flat], golds, finished,
                                        check_repetition=ctx.check_repetition,
                                        prompts=[prompts[id(g)] for g, _ in flat])
        else:
            prefix = THINK_OPEN if ctx.think_open else ""
            result = ctx.verifier.grade([prefix + t for t in texts], golds, finished,
                                        check_repetition=ctx.check_repetition)
        grades = [(t, int(x.outcome), x.extracted) for t, x in zip(texts, result)]
    grades = share_from_rank0(grades, ctx.info.world_size)
    it = iter(grades)
    for g in groups:
        for _ in g.rollouts:
            text, outcome, extracted = next(it)
            g.texts.append(text)
            g.outcomes.append(outcome)
            g.extracted.append(extracted)


def sample_groups(ctx: RolloutContext, problems: list[Problem], params: SamplingParams,
                  prompt_ids: list[list[int]] | None = None) -> list[Group]:
    """`generate_groups` then `grade_groups`. Collective."""
    groups = generate_groups(ctx, problems, params, prompt_ids)
    grade_groups(ctx, groups, params)
    return groups


def flat_tensors(groups: list[Group]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(outcome, length, group index) over every sample of `groups`, as the algorithms take them."""
    outcome = torch.tensor([o for g in groups for o in g.outcomes], dtype=torch.long)
    lengths = torch.tensor([n for g in groups for n in g.lengths], dtype=torch.long)
    index = torch.tensor([i for i, g in enumerate(groups) for _ in g.rollouts], dtype=torch.long)
    return outcome, lengths, index


def answer_extracted_frac(groups: list[Group]) -> float:
    """Share of responses with an extracted answer (training steps and validation alike)."""
    flat = [a for g in groups for a in g.extracted]
    return sum(a is not None for a in flat) / len(flat) if flat else 0.0


def truncated_frac(groups: list[Group]) -> float:
    """Share of responses cut at the token limit (finish reason "length")."""
    flat = [r.finish_reason for g in groups for r in g.rollouts]
    return sum(f == "length" for f in flat) / len(flat) if flat else 0.0


def training_batch(groups: list[Group]) -> tuple[SequenceBatch | None, list[list[float]]]:
    """The kept responses of `groups` as the actor's SequenceBatch (advantages set), plus the engine's
    policy log-probs of the same responses (for the mismatch metric)."""
    prompts, responses, adv, engine_logp = [], [], [], []
    for g in groups:
        for r, a, k in zip(g.rollouts, g.advantages.tolist(), g.keep.tolist()):
            if k and r.num_tokens > 0:
                prompts.append(g.prompt_ids)
                responses.append(r.token_ids)
                adv.append(a)
                engine_logp.append(r.policy_logprobs)
    if not prompts:
        return None, []
    batch = SequenceBatch.from_prompts_and_responses(prompts, responses, advantages=torch.tensor(adv))
    return batch, engine_logp


def rollout_records(step: int, groups: list[Group], tokenizer) -> list[dict[str, Any]]:
    """RUN/rollouts/step_N.jsonl: one line per sample (prompt, response, reward, advantage, outcome: CORRECT,
    WRONG, REPETITION, NO_ANSWER (ended without a final answer) or TRUNCATED (cut at max_tokens))."""
    rows = []
    for g in groups:
        prompt = tokenizer.decode(g.prompt_ids, skip_special_tokens=False)
        for i, r in enumerate(g.rollouts):
            rows.append({
                "step": step, "problem_id": g.problem.id, "sample": i, "prompt": prompt, "response": g.texts[i],
                "gold": g.problem.answer, "extracted": g.extracted[i], "outcome": outcome_label(g.outcomes[i], r.finish_reason == "stop"),
                "reward": float(g.rewards[i]), "advantage": float(g.advantages[i]) if g.advantages is not None else None,
                "kept": bool(g.keep[i]) if g.keep is not None else False, "tokens": r.num_tokens,
                "finish_reason": r.finish_reason,
            })
    return rows


def problem_stats(step: int, groups: list[Group]) -> list[dict[str, Any]]:
    """RUN/problem_stats.jsonl: per problem visited in the step, its accuracy and mean length (stage-2
    selection reads these)."""
    return [{"id": g.problem.id, "step": step, "samples": len(g.rollouts), "correct": g.correct,
             "mean_length": sum(g.lengths) / max(len(g.lengths), 1)} for g in groups]
