"""`nemo-lead rl`: GRPO-LEAD on the Megatron actor, one step at a time, in the order of the paper's step list
(docs/design.md, "How a step flows").

    nemo-lead rl --model HF_DIR|CKPT --data PROBLEMS --out RUN [--steps N] [--preset NAME] [--val-data FILE] ...

One step (`rl_step`), each phase a function of its own (1-5 in `phases.py`, 6-11 here):

    1. prompts          the next `prompts_per_step` problems of a seeded per-epoch shuffle (resumable); with
                        `rollout.lag=k` steps 1-5 ran k steps earlier, with older weights (`lag.py`), or
                        on generator ranks (`rollout.generator_ranks`, `split.py`)
    2. generate         the rollout engine samples `rollout.n` responses per prompt
    3. verify           MathVerifier grades them (worker processes with deadlines; stage 2 also checks
                        repetition): an outcome per response (correct / wrong / truncated / repetition)
    4. rewards          `shape_rewards`: the LEAD length reward, explicit penalty, repetition penalty
    5. filter           `group_keep_mask` (+ DAPO's overlong mask); with dynamic sampling, more rounds of
                        prompts until the batch holds `prompts_per_step` groups with signal (`max_rounds`)
                        -- decided on raw correctness, never on the shaped reward
    6. advantages       `compute_advantages` over the selected groups: group normalisation, difficulty
                        reweighting
    7. old log-probs    the actor's, at the sampling temperature, and the old policy's token entropies;
                        with one optimizer step on the fresh samples (the paper's setting) they come from
                        the update's own forward pass (`old_logprobs=auto`), else from a pass of their own.
                        The engine's are kept for the train/inference mismatch metric and, when
                        `lead.rollout_correction` is on, its importance weights (with a lag: decoupled
                        PPO, the ratio against these proximal log-probs, weighted by pi_prox / mu)
    8. update           `ppo_epochs` x `minibatches` clipped policy-gradient steps (the paper: one)
    9. refit            the engine takes the new weights (free for the megatron engine: it runs on them);
                        split layout: the generators are sent them
   10. metrics          metrics.jsonl + TensorBoard, per-problem stats, the step's rollouts
   11. checkpoint       every `save_every` steps, at the end, and on SIGTERM / SIGUSR1 / SIGINT

A step whose groups are all filtered out skips 6-9 and is logged (`skipped: 1`). Validation (Pass@1,
Cons@n, mean length on held-out problems, the eval layer's metrics) runs at step 0 and every
`validation.every` steps into RUN/val.jsonl, so the paper's Figure 2 can be drawn (`nemo-lead plot`).
Determinism: sampling seeds derive from (seed, step, round), the data order from (seed, epoch), and the
checkpoint holds every RNG stream, so a resumed run repeats an uninterrupted one exactly.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import torch

from nemo_lead.algorithms import (
    Outcome,
    compute_advantages,
)
from nemo_lead.algorithms.loss import MAX, METRIC_REDUCTIONS, metric_keys
from nemo_lead.data import check_prompts_fit, load_problems, prompt_token_ids
from nemo_lead.eval.metrics import CONS_AT_K, MEAN_LENGTH, PASS_AT_1, cons_at_k, mean_length, pass_at_k
from nemo_lead.generation import SamplingParams, resolve_engine_kind
from nemo_lead.parallel.local import relaunches, run_command
from nemo_lead.plan.check import check_before_start, resolve_engine_auto
from nemo_lead.training.actor.megatron_actor import compute_logprobs
from nemo_lead.training.actor.microbatch import SequenceBatch
from nemo_lead.training.actor.offload import offloaded
from nemo_lead.training.actor.rl_update import policy_train_step, zero_advantage_skip_blockers
from nemo_lead.training.rl.config import RLConfig
from nemo_lead.training.rl.lag import PART, BatchQueue, lag_metrics, restored_batches
from nemo_lead.training.rl.no_signal import signal_metrics, start_check
from nemo_lead.training.rl.phases import RLState, rollout_context, rollout_params, step_seed
from nemo_lead.training.rl.rollouts import (
    Group,
    answer_extracted_frac,
    flat_tensors,
    problem_stats,
    rollout_records,
    sample_groups,
    training_batch,
    truncated_frac,
)
from nemo_lead.training.rl.split import generator_job, join_split
from nemo_lead.training.run.data_order import DataOrder
from nemo_lead.training.run.folder import PROBLEM_STATS_FILE, VALIDATION_FILE
from nemo_lead.training.run.lifecycle import (
    abort_run,
    content_digest,
    end_of_step,
    finish_run,
    model_and_prompt,
    start_run,
    stop_if_not_finite,
)
from nemo_lead.training.run.lock import refuse_if_in_use

LOGS = (PROBLEM_STATS_FILE, VALIDATION_FILE)  # per-step logs cut back on resume
FINITE_KEYS = ("loss", "grad_norm")  # a NaN / inf here stops the run


# the update's counts in metrics.jsonl (summed over its optimizer steps): `policy_train_step`'s key -> the line's
UPDATE_COUNTS = {"microbatches": "update/microbatches", "skipped_sequences": "update/skipped_zero_advantage"}


def update_keys(cfg: RLConfig) -> tuple[str, ...]:
    """The update's metrics in every line of metrics.jsonl: the loss, the gradient norm, what the policy
    loss reports (`nemo_lead.algorithms.loss.metric_keys`) and the update's counts (`UPDATE_COUNTS`: its
    micro-batches, the responses with advantage 0 it did not forward); None where a step has none of them."""
    return ("loss", "grad_norm", *metric_keys(cfg.lead, entropy=True, ref=cfg.lead.kl_coeff > 0, rollout=True),
            *UPDATE_COUNTS.values())


def zero_advantage_skip(cfg: RLConfig, actor) -> bool:
    """Whether the update skips the responses with advantage 0 (`skip_zero_advantage`: null is on where that
    is exact, `zero_advantage_skip_blockers`); true where it is not exact is refused, naming why."""
    if cfg.skip_zero_advantage is False:
        return False
    blockers = zero_advantage_skip_blockers(actor, cfg.lead)
    if blockers and cfg.skip_zero_advantage is True:
        raise ValueError("skip_zero_advantage=true: a response with advantage 0 still has a gradient under "
                         + " and ".join(blockers) + ": set skip_zero_advantage=null (auto) or false")
    return not blockers


# ----------------------------------------------------------------------------- phases 6-10 (1-5: phases.py)
def assign_advantages(s: RLState, selected: list[Group], seen: list[Group]) -> None:
    """6. advantages over the selected groups together (DGPO's question weights are batch-relative)."""
    for g in seen:
        g.advantages = torch.zeros(len(g.rollouts))
    if not selected:
        return
    outcome, _, index = flat_tensors(selected)
    rewards = torch.cat([g.rewards for g in selected])
    adv = compute_advantages(rewards, outcome, index, s.cfg.lead)
    for i, g in enumerate(selected):
        g.advantages = adv[index == i]


def old_logprobs_from_update(cfg: RLConfig) -> bool:
    """True when the update is one optimizer step on the samples just drawn from the current weights: the
    old log-probs are then the update's own log-probs, and a forward pass of their own would only repeat it.
    Never with `rollout.lag`: the samples come from older weights, the proximal policy needs its own pass."""
    return cfg.old_logprobs == "auto" and cfg.ppo_epochs == 1 and cfg.minibatches == 1 and cfg.rollout.lag == 0


def old_logprobs(s: RLState, batch: SequenceBatch, engine_logp: list[list[float]]) -> tuple[SequenceBatch, dict[str, float]]:
    """7. old log-probs and entropies from the actor, and the engine's log-probs for the update.

    From the update's forward pass (`old_logprobs_from_update`): nothing to compute here; the update reports
    the entropy. Otherwise a forward pass of their own, here, which also gives the old policy's entropy.
    Either way the batch carries the engine's log-probs (when the engine reported them): the update reports
    the train / inference mismatch against the old log-probs, and a rollout correction weights with them.
    When the update skips the responses with advantage 0 (`zero_advantage_skip`), so does this pass: their
    old log-probs are never read (zeros stand in), and the entropy is over the forwarded responses, as the
    update's own would be."""
    # an engine that cannot report untruncated log-probs marks them NaN (vllm / trtllm with top-p < 1): no metric
    # then. A rollout correction needs them: RLConfig refuses that combination before the start (the one check)
    known = all(not any(math.isnan(x) for x in lp) for lp in engine_logp)
    with_engine = engine_logp if known else None  # the policy loss reports the mismatch against them
    if old_logprobs_from_update(s.cfg):
        return dataclasses.replace(batch, rollout_logprobs=with_engine), {}
    forwarded = list(range(len(batch)))
    if zero_advantage_skip(s.cfg, s.run.actor):
        forwarded = torch.nonzero(batch.advantages != 0).flatten().tolist()
    logp = [torch.zeros(n) for n in batch.response_lens]
    ent = torch.zeros(0)
    if forwarded:
        part, entropy = compute_logprobs(s.run.actor, batch.select(forwarded), s.cfg.rollout.temperature, entropy=True)
        for i, lp in zip(forwarded, part):
            logp[i] = lp
        ent = torch.cat(entropy)
    metrics = {"entropy": float(ent.mean()) if ent.numel() else None}  # the old policy's, not the update's
    return dataclasses.replace(batch, old_logprobs=logp, rollout_logprobs=with_engine), metrics


def update_policy(s: RLState, batch: SequenceBatch, on_policy: bool) -> dict[str, float | None]:
    """8. update: `ppo_epochs` passes of `minibatches` optimizer steps; metrics combined over them (means
    averaged, maxima the largest; every key of `update_keys`, None where no pass reported it). `on_policy`:
    the old log-probs are this update's own (7 left them to it)."""
    n = len(batch)
    parts = [list(range(n))[i::s.cfg.minibatches] for i in range(s.cfg.minibatches)]
    skip = zero_advantage_skip(s.cfg, s.run.actor)
    runs = [policy_train_step(s.run.actor, batch.select(p), s.cfg.lead, temperature=s.cfg.rollout.temperature,
                              on_policy=on_policy, skip_zero_advantage=skip)
            for _ in range(s.cfg.ppo_epochs) for p in parts if p]
    keys = update_keys(s.cfg)
    out: dict[str, float | None] = {**dict.fromkeys(keys), "lr": runs[-1]["lr"]}  # None: no value this step
    for k in keys:
        values = [m[k] for m in runs if k in m]
        if values:
            out[k] = max(values) if METRIC_REDUCTIONS.get(k) == MAX else sum(values) / len(values)
    for k, name in UPDATE_COUNTS.items():
        out[name] = sum(m[k] for m in runs)
    return out


def refit(s: RLState, step: int) -> None:
    """9. refit: the engine takes W_step (an engine that keeps a weight version records `step`)."""
    s.ctx.engine.refit(s.run.actor, version=step)


def step_metrics(step: int, seen: list[Group], selected: list[Group], rounds: int) -> dict[str, Any]:
    """10. metrics of the rollouts (the update's are added by the caller)."""
    outcome, lengths, _ = flat_tensors(seen)
    rewards = torch.cat([g.rewards for g in seen])
    adv = torch.cat([g.advantages[g.keep] for g in selected]) if selected else torch.zeros(0)
    right = outcome == Outcome.CORRECT
    return {
        "step": step, "reward/mean": float(rewards.mean()), "reward/std": float(rewards.std()) if len(rewards) > 1 else 0.0,
        "accuracy": float(right.float().mean()),
        "response_length/mean": float(lengths.float().mean()), "response_length/max": int(lengths.max()),
        # right and not-right answers apart (None where a step has none): where a length term acts, and on what
        "response_length/correct_mean": float(lengths[right].float().mean()) if right.any() else None,
        "response_length/incorrect_mean": float(lengths[~right].float().mean()) if (~right).any() else None,
        "truncated_frac": truncated_frac(seen),
        "repetition_frac": float((outcome == Outcome.REPETITION).float().mean()),
        "groups/kept_frac": len(selected) / len(seen), "groups/kept": len(selected), "rounds": rounds,
        "samples": len(outcome), "advantage/abs_mean": float(adv.abs().mean()) if adv.numel() else 0.0,
        **signal_metrics(seen, selected),
    }


# ----------------------------------------------------------------------------- one step
def rl_step(s: RLState, step: int) -> dict[str, Any]:
    """One GRPO-LEAD step (see the module docstring); returns its metrics line."""
    t_step = time.monotonic()
    times = {k: 0.0 for k in ("time/generate", "time/verify", "time/logprobs", "time/train", "time/refit")}
    sampled = s.batches.take(s, step)                                     # 1-5: prompts .. filter (lag.py)
    seen, selected, rounds = sampled.seen, sampled.selected, sampled.rounds
    times.update(sampled.times)
    assign_advantages(s, selected, seen)                                  # 6: advantages
    batch, engine_logp = training_batch(selected)
    metrics = {**step_metrics(step, seen, selected, rounds), **lag_metrics(sampled, step, s.cfg.rollout.lag)}
    if batch is None:  # the same keys as an update's, empty: every line of metrics.jsonl has every key
        metrics.update(skipped=1, **dict.fromkeys(update_keys(s.cfg)),
                       lr=float(s.run.actor.optimizer.param_groups[0]["lr"]))
        s.run.say(f"step {step}: every group was filtered out (no learning signal); no update")
    else:
        t0 = time.monotonic()
        batch, logp_metrics = old_logprobs(s, batch, engine_logp)        # 7: old log-probs
        times["time/logprobs"] = time.monotonic() - t0
        t0 = time.monotonic()
        update = update_policy(s, batch, on_policy=old_logprobs_from_update(s.cfg))  # 8: update
        times["time/train"] = time.monotonic() - t0
        t0 = time.monotonic()
        refit(s, step)                                                    # 9: refit
        times["time/refit"] = time.monotonic() - t0
        metrics.update({"skipped": 0, **update, **logp_metrics})
    times.update(s.batches.after_update(s, step))                         # split layout: weights to the generators
    seconds = time.monotonic() - t_step
    tokens = sum(sum(g.lengths) for g in seen)  # generated tokens
    metrics.update(times, **{"time/step": seconds, "tokens_per_s": tokens / max(seconds, 1e-9)})
    for warning in (s.no_signal.check(step, metrics), start_check(step, metrics, s.cfg.start_check)):
        if warning:
            s.run.warn(warning)
    if s.run.is_writer:                                                   # 10: metrics and logs
        s.run.folder.append(PROBLEM_STATS_FILE, problem_stats(step, seen))
        if s.cfg.log_rollouts:
            s.run.folder.write_rollouts(step, rollout_records(step, seen, s.run.tokenizer))
    return metrics


# ----------------------------------------------------------------------------- validation
def validate(s: RLState, step: int) -> dict[str, float]:
    """Pass@1, Cons@n, mean length and truncation share on the held-out problems (RUN/val.jsonl)."""

    v = s.cfg.validation
    stops = rollout_params(s, step, 0).stop_token_ids
    params = SamplingParams(n=v.n, temperature=v.temperature, top_p=v.top_p, seed=step_seed(s.cfg.seed, 999_983),
                            max_tokens=v.max_tokens or s.cfg.rollout.max_tokens, stop_token_ids=stops)
    t0 = time.monotonic()
    with offloaded(s.run.actor, s.cfg.actor.offload_during_generation):
        s.ctx.engine.wake()
        groups = sample_groups(dataclasses.replace(s.ctx, check_repetition=False), s.val_problems, params,
                               s.val_prompt_ids)
        s.ctx.engine.sleep()
    out = {
        "step": step, PASS_AT_1: pass_at_k([[o == Outcome.CORRECT for o in g.outcomes] for g in groups]),
        CONS_AT_K: cons_at_k([g.extracted for g in groups], [g.problem.answer for g in groups]),
        MEAN_LENGTH: mean_length([g.lengths for g in groups]),
        "answer_extracted_frac": answer_extracted_frac(groups), "truncated_frac": truncated_frac(groups),
        "n": v.n, "problems": len(groups), "seconds": time.monotonic() - t0,
    }
    s.run.folder.log_validation(out)
    s.run.say(f"validation at step {step}: Pass@1 {out[PASS_AT_1]:.3f}, Cons@{v.n} {out[CONS_AT_K]:.3f}, "
              f"mean length {out[MEAN_LENGTH]:.0f}")
    return out


def _validation_due(s: RLState, step: int, steps: int) -> bool:
    return bool(s.val_problems) and (step % s.cfg.validation.every == 0 or step == steps)


# ----------------------------------------------------------------------------- the job
def rl_job(cfg: RLConfig) -> None:
    """The RL loop on one rank (every rank of the job calls it)."""
    link = None
    if cfg.rollout.generator_ranks:  # the split layout: this rank trains, or generates (and returns here)
        link = join_split(cfg)
        if link.is_generator:
            return generator_job(cfg, link)
    cfg, source = model_and_prompt(cfg)
    d = cfg.data
    problems = load_problems(d.path, split=d.split, fields=dict(d.fields), limit=d.limit)
    val = load_problems(cfg.validation.data, limit=cfg.validation.limit) if cfg.validation.data else []
    inputs = {"data.path": content_digest([(p.id, p.problem, p.answer) for p in problems]),
              "validation.data": content_digest([(p.id, p.problem, p.answer) for p in val])}
    run = start_run(cfg, "rl", cfg.steps, LOGS, source=source, inputs=inputs)
    ctx = None
    try:
        ctx, ends = rollout_context(cfg, source, run.info, run.actor, run.tokenizer, run.tokenizer_dir, run.step)
        s = _loop_state(run, ctx, ends, problems, val, source, link)
        stopped = _train(s)
    except BaseException:
        _close_rollouts(ctx)
        abort_run(run)
        raise
    _close_rollouts(ctx)  # vllm: its memory and groups go before the final save and teardown
    try:
        finish_run(run, s.loop_state, stopped)
        s.batches.close()
    except BaseException:
        abort_run(run)
        raise


def _loop_state(run, ctx, ends: list[int], problems: list, val: list, source, link) -> RLState:
    """The loop's state at the run's step: the data order (resumed), validation's prompts (tokenized once,
    refused now, naming the problem, when one cannot fit), the batches queued by a lag (restored) or the split
    layout's queue; notes for what the user should know before the first step."""
    cfg = run.cfg
    if cfg.prompts_per_step > len(problems):
        run.say(f"note: prompts_per_step={cfg.prompts_per_step} is more than the {len(problems)} problems of "
                f"data.path: every step samples some problems twice (their groups are trained twice)")
    order = DataOrder(len(problems), cfg.seed, shuffle=cfg.data.shuffle)
    if run.loop_state.get("data"):
        order.load_state_dict(run.loop_state["data"])
    val_ids = prompt_token_ids(run.tokenizer, val, cfg.prompt)
    check_prompts_fit(val, val_ids, cfg.validation.max_tokens or cfg.rollout.max_tokens,
                      source.hf_config.get("max_position_embeddings"), "validation.data")
    s = RLState(run=run, ctx=ctx, problems=problems, order=order, val_problems=val, val_prompt_ids=val_ids,
                end_tokens=ends)
    if cfg.skip_zero_advantage is not False and not zero_advantage_skip(cfg, run.actor):  # auto (true: refused)
        run.say("note: the update forwards the responses with advantage 0 too (skip_zero_advantage=null, not "
                "exact here: " + " and ".join(zero_advantage_skip_blockers(run.actor, cfg.lead)) + ")")
    queued = restored_batches(run, cfg.rollout.lag)
    s.batches = BatchQueue(cfg.rollout.lag, run.step + 1, queued) if link is None else link.trainer_queue(s, queued)
    run.parts[PART] = s.batches.write_part
    return s


def _train(s: RLState) -> bool:
    """Validation at step 0, then the steps up to `steps`; True when a stop signal or the job's end stopped
    them (checkpointed)."""
    run, cfg = s.run, s.cfg
    if run.step == 0 and s.val_problems:
        validate(s, 0)
    while run.step < cfg.steps:
        metrics = rl_step(s, run.step + 1)
        run.step += 1
        stop_if_not_finite(run, metrics, FINITE_KEYS)
        if _validation_due(s, run.step, cfg.steps):
            v = validate(s, run.step)
            metrics.update({f"val/{k}": v[k] for k in (PASS_AT_1, CONS_AT_K, MEAN_LENGTH)})
        run.folder.log_metrics(metrics)
        run.progress.step(run.step, {"reward": f"{metrics['reward/mean']:+.3f}", "acc": f"{metrics['accuracy']:.3f}",
                                     "len": f"{metrics['response_length/mean']:.0f}"})
        if end_of_step(run, s.loop_state):
            return True
    return False


def _close_rollouts(ctx) -> None:
    """The engine (vllm: before the job's process groups go) and the grader pool, once."""
    if ctx is None:
        return
    if ctx.verifier is not None:
        ctx.verifier.close()
    ctx.engine.close()


def _preflight(cfg: RLConfig) -> None:
    """Before local ranks start (`relaunches`): a run folder in use is refused in one line naming its holder,
    and bad problem files fail with the file and line."""
    refuse_if_in_use(cfg.out)
    load_problems(cfg.data.path, split=cfg.data.split, fields=dict(cfg.data.fields), limit=cfg.data.limit)
    if cfg.validation.data:
        load_problems(cfg.validation.data, limit=cfg.validation.limit)


def run_rl(cfg: RLConfig) -> int:
    """`nemo-lead rl`: the exit status (0 done or stopped by a signal after a checkpoint)."""
    cfg = resolve_engine_auto(cfg, "rl")  # engine.kind / engine.tp / engine.pp auto: the plan's choice, printed
    cfg.engine = resolve_engine_kind(cfg.engine)  # vllm: its one layout for the auto keys left
    if check_before_start(cfg, "rl"):  # on GPUs: a layout that cannot fit stops here, saying what to change
        return 2
    ranks = cfg.actor.tp * cfg.actor.pp + cfg.rollout.generator_ranks
    return run_command("rl", rl_job, (cfg,), ranks=ranks, preflight=(lambda: _preflight(cfg)) if relaunches(ranks) else None)
