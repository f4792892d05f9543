"""The SFT update: one optimizer step of the masked next-token loss (`sft_train_step`) and the same loss
without a step (`sft_eval_loss`), on the actor's schedule and micro-batches
(`nemo_lead.training.actor.megatron_actor`).

    metrics = sft_train_step(actor, pack_traces(traces, max_seq_len, pack=True))
"""

from __future__ import annotations

import torch

from nemo_lead.models import eval_mode
from nemo_lead.training.actor.collectives import dp_sum, reduce_metrics
from nemo_lead.training.actor.megatron_actor import (
    Actor,
    StepPlan,
    actor_token_logprobs,
    optimizer_step,
    run_schedule,
    step_plan,
)
from nemo_lead.training.actor.microbatch import MicroBatch, SequenceBatch


def _sftstep_plan(actor: Actor, batch: SequenceBatch, split_over_dp: bool) -> tuple[StepPlan, float]:
    """The plan and the global count of trained tokens (from the masks alone: no micro-batch is built)."""
    plan = step_plan(actor, batch, split_over_dp)
    mine = plan.batch
    local = sum(float(m.sum()) for m in mine.loss_mask) if mine.loss_mask is not None else sum(mine.response_lens)
    return plan, dp_sum([float(local)])[0]


def _masked_nll(actor: Actor, mb: MicroBatch, logits: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed negative log-likelihood of a micro-batch's trained tokens, and their count."""
    logp, _ = actor_token_logprobs(actor, mb, logits)
    return -(logp * mb.loss_mask).sum(), mb.loss_mask.sum()


def sft_train_step(actor: Actor, batch: SequenceBatch, *, split_over_dp: bool = True) -> dict[str, float]:
    """One optimizer step of the masked next-token loss: the mean negative log-likelihood over every
    response token (with loss_mask 1) of the global batch. Returns `loss`, `tokens`, `grad_norm`,
    `update_skipped`, `lr`, `sequences`, `padding_fraction`, `microbatches`. Collective over all ranks."""
    plan, total = _sftstep_plan(actor, batch, split_over_dp)

    def loss_fn(mb: MicroBatch, logits: torch.Tensor):
        nll, n = _masked_nll(actor, mb, logits)
        loss = nll / total if total > 0 else nll * 0.0
        return loss, n.to(torch.int), {"loss": loss.detach(), "tokens": n}

    return optimizer_step(actor, plan, loss_fn, ["loss", "tokens"], [])


def sft_eval_loss(actor: Actor, batch: SequenceBatch, *, split_over_dp: bool = True) -> dict[str, float]:
    """The masked next-token loss of `sft_train_step` without a step: forward only, in eval mode (no
    dropout); `loss` is the mean NLL over every response token (loss_mask 1) of the global batch, `tokens`
    their count (the same on every rank). `split_over_dp`: as in `compute_logprobs`. Collective."""
    plan, total = _sftstep_plan(actor, batch, split_over_dp)

    def loss_fn(mb: MicroBatch, logits: torch.Tensor):
        nll, n = _masked_nll(actor, mb, logits)
        return logits.new_zeros(()), torch.zeros((), dtype=torch.int), {"nll": nll.detach(), "tokens": n}

    with eval_mode(actor.model):
        outputs = run_schedule(actor, plan, loss_fn, forward_only=True)
    metrics = reduce_metrics(outputs, ["nll", "tokens"], [])
    return {"loss": metrics["nll"] / total if total > 0 else 0.0, "tokens": metrics["tokens"]}
