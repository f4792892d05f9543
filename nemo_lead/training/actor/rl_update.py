"""The RL update: one optimizer step of the clipped policy-gradient loss over a batch of responses
(`policy_train_step`), on the actor's schedule and micro-batches (`nemo_lead.training.actor.megatron_actor`).

    metrics = policy_train_step(actor, replace(batch, old_logprobs=old), lead_cfg, temperature=0.8)

How the loss is normalised over micro-batches and DP ranks: the actor's module docstring. What is tested
where: tests/training/test_actor.py's docstring and tests/training/test_zero_advantage_skip.py.
"""

from __future__ import annotations

import torch

from nemo_lead.algorithms import LeadConfig, loss_denominator, policy_loss
from nemo_lead.algorithms.loss import METRIC_REDUCTIONS, WEIGHTS, metric_keys, zero_advantage_terms
from nemo_lead.training.actor.collectives import dp_max, dp_sum
from nemo_lead.training.actor.megatron_actor import (
    Actor,
    StepPlan,
    actor_token_logprobs,
    optimizer_step,
    step_plan,
)
from nemo_lead.training.actor.microbatch import MicroBatch, SequenceBatch, collate


def zero_advantage_skip_blockers(actor: Actor, lead_cfg: LeadConfig) -> list[str]:
    """What makes skipping the responses with advantage exactly 0 change the update (empty: it is exact).

    The loss terms that give such a response a gradient (`nemo_lead.algorithms.loss.zero_advantage_terms`:
    KL, entropy), and dropout: the model trains with dropout masks drawn in micro-batch order from one
    random stream, so leaving sequences out would change the masks the others get."""
    config = actor.gpt.config
    dropout = [f"the model's {k}={getattr(config, k)}" for k in ("attention_dropout", "hidden_dropout")
               if getattr(config, k, 0.0)]
    return zero_advantage_terms(lead_cfg) + dropout


def policy_train_step(
    actor: Actor,
    batch: SequenceBatch,
    lead_cfg: LeadConfig,
    *,
    temperature: float = 1.0,
    split_over_dp: bool = True,
    on_policy: bool = False,
    skip_zero_advantage: bool = False,
) -> dict[str, float]:
    """One optimizer step of the clipped policy-gradient loss (`nemo_lead.algorithms.policy_loss`) over
    `batch`, which needs `advantages` and `old_logprobs` (and `ref_logprobs` when lead_cfg.kl_coeff > 0).

    `on_policy=True`: the batch was sampled from the current weights and this is the only optimizer step
    taken on it, so the old log-probs *are* this forward pass's log-probs: the ratio is taken against them,
    detached (ratio 1, the plain policy gradient; TRL and verl do the same), and no separate forward pass
    computes them. `batch.old_logprobs` must then be None. The step also reports the token-mean `entropy`.
    With `batch.rollout_logprobs` (the engine's) the metrics include the train / inference mismatch.

    `lead_cfg.rollout_correction` on: `batch.rollout_logprobs` (the engine's) is required, the loss weights
    each token by the correction (`nemo_lead.algorithms.rollout_correction`, against the old log-probs
    above), and the step reports its `rollout_correction/...` metrics over the global batch.

    `skip_zero_advantage=True`: the sequences whose advantage is exactly 0 (every group whose rewards are all
    equal, under GRPO) get no forward or backward pass: their gradient is exactly 0 (`zero_advantage_skip_blockers`
    lists what would make it not so, and the step refuses then). They still count in the loss's denominator
    (computed over the whole batch, before they are left out), and L_max of `constant_norm` is the whole
    batch's, so the update is the one without the skip; the micro-batches (and the DP shares) are planned
    over the sequences left. The gradient is the same up to float rounding where the micro-batches' shapes
    change, and bit for bit where they do not (tests/training/test_zero_advantage_skip.py). The loss's
    token-mean metrics (`pg_loss`, `entropy`, the mismatch, ...) are then over the forwarded tokens, and left
    out of the result when no token was forwarded.

    `temperature`: the sampling temperature; log-probs are of softmax(logits / T), as the rollout engine's.
    Entropy (for lead_cfg.entropy_coeff > 0) is computed from the vocab-parallel logits (TP all-reduces).
    `split_over_dp`: as in `compute_logprobs`. Collective over all ranks.

    Returns (the same on every rank): `loss` (the global loss), the metrics of `policy_loss` over the global
    batch (`nemo_lead.algorithms.loss.metric_keys`, reduced as `METRIC_REDUCTIONS` says), `tokens` (trained
    tokens), `grad_norm` (before clipping), `update_skipped`, `lr`, `sequences`,
    `padding_fraction` (padded tokens that are padding, over all micro-batches and DP ranks),
    `microbatches` (summed over DP ranks) and `skipped_sequences` (zero-advantage sequences not forwarded).
    """
    _check_policy_batch(actor, batch, lead_cfg, on_policy, skip_zero_advantage)
    whole = step_plan(actor, batch, split_over_dp)  # the whole batch: the denominator and L_max are over it
    cfg = lead_cfg
    if cfg.loss_agg == "constant_norm" and not cfg.max_response_len:
        # Dr. GRPO's L_max defaults to the longest response of the (global) batch, not a padded width
        cfg = cfg.replace(max_response_len=int(dp_max(max(whole.batch.response_lens))))
    local = sum(float(loss_denominator(collate(whole.batch, g).loss_mask, cfg)) for g in whole.groups)
    denominator = torch.tensor(dp_sum([local])[0], dtype=torch.float64)
    plan, skipped = _forwarded(actor, batch, whole, split_over_dp) if skip_zero_advantage else (whole, 0)
    loss_fn, means, maxes = _loss_fn(actor, batch, cfg, temperature, on_policy, denominator)
    sums = ["loss", *[f"count/{w}" for w in sorted(set(WEIGHTS.values()))], *means]
    return _policy_metrics(optimizer_step(actor, plan, loss_fn, sums, maxes), means, skipped)


def _loss_fn(actor: Actor, batch: SequenceBatch, cfg: LeadConfig, temperature: float, on_policy: bool,
             denominator: torch.Tensor):
    """(the loss function of `policy_train_step`'s schedule, the metrics that are weighted means, those taken
    as the maximum). Means travel as sums weighted by what they are over (their counts, `count/...`, travel
    too), summed over micro-batches and DP ranks and divided by the global counts at the end (`_policy_metrics`)."""
    with_entropy = cfg.entropy_coeff > 0 or on_policy  # on-policy: the old policy's entropy, as a metric
    with_rollout = batch.rollout_logprobs is not None
    keys = metric_keys(cfg, entropy=with_entropy, ref=batch.ref_logprobs is not None, rollout=with_rollout)
    means = [k for k in keys if METRIC_REDUCTIONS[k] in WEIGHTS]
    counts = sorted(set(WEIGHTS.values()))

    def loss_fn(mb: MicroBatch, logits: torch.Tensor):
        logp, ent = actor_token_logprobs(actor, mb, logits, temperature, with_entropy)
        old = logp.detach() if on_policy else mb.old_logprobs
        loss, m = policy_loss(logp, old, mb.advantages, mb.loss_mask, cfg, ref_logp=mb.ref_logprobs, entropy=ent,
                              rollout_logp=mb.rollout_logprobs if with_rollout else None, denominator=denominator)
        out = {"loss": loss.detach(), **{f"count/{w}": m[w] for w in counts}}
        out.update({k: m[k] * m[WEIGHTS[METRIC_REDUCTIONS[k]]] if k in means else m[k] for k in keys})
        return loss, m["tokens"].to(torch.int), out

    return loss_fn, means, [k for k in keys if k not in means]


def _check_policy_batch(actor: Actor, batch: SequenceBatch, lead_cfg: LeadConfig, on_policy: bool,
                        skip_zero_advantage: bool) -> None:
    """ValueError naming what `policy_train_step`'s batch lacks for these settings."""
    if batch.advantages is None:
        raise ValueError("policy_train_step needs batch.advantages")
    if on_policy and batch.old_logprobs is not None:
        raise ValueError("on_policy=True takes the old log-probs from the step's own forward pass; "
                         "batch.old_logprobs must be None")
    if not on_policy and batch.old_logprobs is None:
        raise ValueError("policy_train_step needs batch.old_logprobs (or on_policy=True)")
    if lead_cfg.kl_coeff > 0 and batch.ref_logprobs is None:
        raise ValueError("lead.kl_coeff > 0 needs batch.ref_logprobs (reference-policy log-probs)")
    if lead_cfg.rollout_correction.enabled and batch.rollout_logprobs is None:
        raise ValueError(f"lead.rollout_correction.mode={lead_cfg.rollout_correction.mode} needs "
                         "batch.rollout_logprobs (the rollout engine's log-probs)")
    if skip_zero_advantage:
        blockers = zero_advantage_skip_blockers(actor, lead_cfg)
        if blockers:
            raise ValueError("skip_zero_advantage: a response with advantage 0 still has a gradient under "
                             + " and ".join(blockers) + ", so skipping it would change the update")


def _forwarded(actor: Actor, batch: SequenceBatch, whole: StepPlan, split_over_dp: bool) -> tuple[StepPlan, int]:
    """The plan over the sequences whose advantage is not 0 (`whole` when there are none to leave out), and how
    many were left out (over the global batch)."""
    nonzero = torch.nonzero(batch.advantages != 0).flatten().tolist()
    skipped = len(batch) - len(nonzero)  # this rank's batch: the global one, or its own (summed below)
    plan = step_plan(actor, batch, split_over_dp, only=nonzero) if skipped else whole
    if not split_over_dp:
        skipped = int(dp_sum([skipped])[0])
    return plan, skipped


def _policy_metrics(metrics: dict[str, float], means: list[str], skipped: int) -> dict[str, float]:
    """The step's metrics: each weighted mean divided by its global count (a mean over nothing, every response
    skipped or every token masked, is left out), `tokens`, `skipped_sequences`."""
    for k in means:
        count = metrics[f"count/{WEIGHTS[METRIC_REDUCTIONS[k]]}"]
        if count > 0:
            metrics[k] /= count
        else:
            del metrics[k]
    metrics["tokens"] = metrics.pop("count/tokens")
    metrics.pop("count/sequences")  # `sequences` (from optimizer_step) counts every sequence, trained tokens or not
    metrics["skipped_sequences"] = float(skipped)
    return metrics
