"""The clipped policy-gradient objective (GRPO's surrogate, no KL by default) and its aggregation.

Per token t of response i, with r_it = pi_theta / pi_old = exp(logp - old_logp):

    l_it = max(-A_i r_it, -A_i clip(r_it, 1 - eps_low, 1 + eps_high))      (clipped surrogate, negated)
    l_it = min(l_it, -c A_i)  for A_i < 0                                  (dual clip, optional)
    l_it = w_it l_it                      (rollout correction, optional: `rollout_correction.py`)
    l_it += kl_coeff * KL_it(pi_theta || pi_ref)                          (optional; k1 or k3 estimator)
    l_it -= entropy_coeff * H_it                                           (optional entropy bonus)

Aggregation (`loss_agg`), with m_it the loss mask and S the number of responses with >= 1 token:

    token_mean           sum_it m_it l_it / sum_it m_it              (DAPO, the authors' code)
    seq_mean_token_mean  1/S sum_i (sum_t m_it l_it / |o_i|)         (the paper's 1/G sum_i 1/|o_i| sum_t)
    seq_mean_token_sum   1/S sum_i sum_t m_it l_it
    constant_norm        sum_it m_it l_it / (S * L_max)               (Dr. GRPO)

Metrics: `policy_loss` returns per-batch figures, and `METRIC_REDUCTIONS` says how each one combines over
micro-batches and data-parallel ranks (a mean over trained tokens, a mean over sequences, a maximum);
`metric_keys` lists which ones a call returns. A new metric is added here and nowhere else: the actor's
train step and the RL loop's metrics line read these two.

Why `denominator`: the training step splits one global batch into micro-batches and data-parallel
ranks. Each piece computes `sum(weights * l)` over its own tokens and divides by the denominator of the
*global* batch (`loss_denominator` summed over every piece), so the summed gradient equals the gradient
of the loss over the whole batch whatever the split. Left as None, the batch passed in is the whole batch.
"""

from __future__ import annotations

from typing import Optional, Protocol

import torch

from nemo_lead.algorithms.mismatch import logprob_mismatch
from nemo_lead.algorithms.registry import Registry
from nemo_lead.algorithms.rollout_correction import METRIC_KEYS as CORRECTION_KEYS
from nemo_lead.algorithms.rollout_correction import (
    RolloutCorrectionConfig,
    correction_metrics,
    correction_weights,
)


class LossSettings(Protocol):
    """What this module reads of the `lead` settings (`LeadConfig` has them all), in the symbols above."""

    clip_eps_low: float  # eps_low
    clip_eps_high: float  # eps_high
    dual_clip_c: Optional[float]  # c (None: no dual clip)
    kl_coeff: float
    kl_estimator: str  # a name of KL_ESTIMATORS
    entropy_coeff: float
    loss_agg: str  # a name of LOSS_AGGREGATIONS
    max_response_len: int  # L_max of constant_norm (0: the batch's padded length)
    rollout_correction: RolloutCorrectionConfig


# `lead.kl_estimator`: the one list of KL estimators (LeadConfig accepts exactly these names)
KL_ESTIMATORS = Registry("lead.kl_estimator")
# `lead.loss_agg`: the one list of aggregations (LeadConfig accepts exactly these names), each mapping a [B, T]
# mask m to (the per-token weights, this batch's share of the global denominator), as in the module docstring
LOSS_AGGREGATIONS = Registry("lead.loss_agg")

TOKEN_MEAN, SEQUENCE_MEAN, MAX = "token_mean", "sequence_mean", "max"
METRIC_REDUCTIONS = {
    "pg_loss": TOKEN_MEAN, "clip_frac": TOKEN_MEAN, "ratio_mean": TOKEN_MEAN, "approx_kl": TOKEN_MEAN,
    "ratio_max": MAX,
    "entropy": TOKEN_MEAN,  # with `entropy` given
    "kl_ref": TOKEN_MEAN,  # with `ref_logp` given
    # with `rollout_logp` given: |old log-prob - the engine's| over trained tokens
    "mismatch/logprob_abs_mean": TOKEN_MEAN, "mismatch/logprob_abs_max": MAX,
    # with a rollout correction on (shares truncated or masked, mean weight)
    CORRECTION_KEYS[0]: TOKEN_MEAN, CORRECTION_KEYS[1]: SEQUENCE_MEAN, CORRECTION_KEYS[2]: TOKEN_MEAN,
}
WEIGHTS = {TOKEN_MEAN: "tokens", SEQUENCE_MEAN: "sequences"}  # what a mean's per-batch value is weighted by


def metric_keys(cfg: LossSettings, *, entropy: bool, ref: bool, rollout: bool) -> tuple[str, ...]:
    """The metrics `policy_loss` returns (besides `tokens` and `sequences`) when given an entropy, reference
    log-probs, the engine's log-probs (`rollout`), under `cfg`."""
    keys = ["pg_loss", "clip_frac", "ratio_mean", "approx_kl", "ratio_max"]
    keys += ["entropy"] if entropy else []
    keys += ["kl_ref"] if ref else []
    keys += ["mismatch/logprob_abs_mean", "mismatch/logprob_abs_max"] if rollout else []
    keys += list(CORRECTION_KEYS) if cfg.rollout_correction.enabled and rollout else []
    return tuple(keys)


def importance_ratio(logp: torch.Tensor, old_logp: torch.Tensor) -> torch.Tensor:
    """r = exp(logp - old_logp), the log-ratio clamped to [-20, 20] so one stale token cannot overflow."""
    return torch.exp((logp - old_logp).clamp(-20.0, 20.0))


def clipped_surrogate(ratio: torch.Tensor, adv: torch.Tensor, cfg: LossSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-token negated clipped objective and a bool map of where the clip is active."""
    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1.0 - cfg.clip_eps_low, 1.0 + cfg.clip_eps_high)
    loss = torch.maximum(unclipped, clipped)
    active = clipped > unclipped
    if cfg.dual_clip_c is not None:
        bound = -adv * cfg.dual_clip_c
        dual = (adv < 0) & (loss > bound)
        loss = torch.where(dual, bound, loss)
        active = active | dual
    return loss, active


@KL_ESTIMATORS.register("k1")
def kl_k1(log_ratio: torch.Tensor) -> torch.Tensor:
    """k1 = log r (unbiased, high variance)."""
    return log_ratio


@KL_ESTIMATORS.register("k3")
def kl_k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """k3 = r' - log r' - 1 with r' = pi_ref / pi_theta (unbiased, non-negative, low variance)."""
    neg = (-log_ratio).clamp(-20.0, 20.0)
    return torch.exp(neg) - neg - 1.0


def kl_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL(pi_theta || pi_ref) estimate from samples of pi_theta (`KL_ESTIMATORS`)."""
    return KL_ESTIMATORS[estimator](logp - ref_logp)


# ----------------------------------------------------------------------------- aggregations (`loss_agg`)
def _responses(m: torch.Tensor) -> torch.Tensor:
    """S: the responses with at least one trained token (float64)."""
    return (m.sum(dim=1) > 0).to(torch.float64).sum()


@LOSS_AGGREGATIONS.register("token_mean")
def token_mean(m: torch.Tensor, cfg: LossSettings) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ARG001
    """sum_it m_it l_it / sum_it m_it: weight 1 per token over the number of tokens."""
    return m, m.sum()


@LOSS_AGGREGATIONS.register("seq_mean_token_mean")
def seq_mean_token_mean(m: torch.Tensor, cfg: LossSettings) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ARG001
    """1/S sum_i (sum_t m_it l_it / |o_i|): weight 1/|o_i| per token over S."""
    return m / m.sum(dim=1, keepdim=True).clamp_min(1.0), _responses(m)


@LOSS_AGGREGATIONS.register("seq_mean_token_sum")
def seq_mean_token_sum(m: torch.Tensor, cfg: LossSettings) -> tuple[torch.Tensor, torch.Tensor]:  # noqa: ARG001
    """1/S sum_i sum_t m_it l_it: weight 1 per token over S."""
    return m, _responses(m)


@LOSS_AGGREGATIONS.register("constant_norm")
def constant_norm(m: torch.Tensor, cfg: LossSettings) -> tuple[torch.Tensor, torch.Tensor]:
    """sum_it m_it l_it / (S * L_max): weight 1 per token over S L_max (L_max: the padded length when unset)."""
    return m, _responses(m) * (cfg.max_response_len or m.shape[-1])


def zero_advantage_terms(cfg: LossSettings) -> list[str]:
    """The loss terms under `cfg` that give a response with A_i = 0 a gradient; empty when it has none.

    Every other term of l_it is a product with A_i: the surrogate -A_i r_it and its clipped form, the dual
    clip's bound -c A_i, and the rollout correction's weight w_it (which multiplies them). With A_i exactly 0
    they are all exactly 0 (the ratio is clamped, so finite), and so is their gradient: the response adds
    nothing to the update but its tokens (or itself) in the denominator. Only the KL and entropy terms do
    not multiply A_i, so a response with A_i = 0 still moves the weights when either is on."""
    terms = []
    if cfg.kl_coeff > 0:
        terms.append(f"lead.kl_coeff={cfg.kl_coeff} (the KL term)")
    if cfg.entropy_coeff > 0:
        terms.append(f"lead.entropy_coeff={cfg.entropy_coeff} (the entropy bonus)")
    return terms


def token_weights(mask: torch.Tensor, cfg: LossSettings, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Per-token weight before the global denominator: 1/|o_i| for seq_mean_token_mean, else 1."""
    return LOSS_AGGREGATIONS[cfg.loss_agg](mask.to(dtype), cfg)[0]


def loss_denominator(mask: torch.Tensor, cfg: LossSettings) -> torch.Tensor:
    """This batch's share of the global denominator (sum it over micro-batches and DP ranks).

    float64, so that token counts of large global batches (> 2**24 tokens) stay exact."""
    return LOSS_AGGREGATIONS[cfg.loss_agg](mask.to(torch.float64), cfg)[1]


def policy_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    cfg: LossSettings,
    *,
    ref_logp: torch.Tensor | None = None,
    entropy: torch.Tensor | None = None,
    rollout_logp: torch.Tensor | None = None,
    denominator: torch.Tensor | float | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Loss scalar (differentiable in `logp`, and in `entropy` when given) and detached metrics: the keys of
    `metric_keys` (reduced as `METRIC_REDUCTIONS` says) plus `tokens` and `sequences`, the counts the means
    are over.

    Shapes: logp, old_logp, mask, ref_logp, entropy, rollout_logp are [N, T]; advantages is [N]. Values at
    masked-out positions are ignored (they may be anything, even NaN). An empty batch or an all-zero mask
    gives a zero loss that is still connected to `logp`. `rollout_logp` (the engine's log-probs): the
    metrics then include the train / inference mismatch against `old_logp`, and `cfg.rollout_correction`,
    when on, needs it and weights the loss with it.
    """
    if logp.shape != old_logp.shape or logp.shape != mask.shape or logp.dim() != 2:
        raise ValueError(
            f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask {tuple(mask.shape)} "
            "must all be [N, T]"
        )
    if advantages.shape != logp.shape[:1]:
        raise ValueError(f"advantages must be [N]={tuple(logp.shape[:1])}, got {tuple(advantages.shape)}")
    for name, extra in (("ref_logp", ref_logp), ("entropy", entropy), ("rollout_logp", rollout_logp)):
        if extra is not None and extra.shape != logp.shape:
            raise ValueError(f"{name} must be [N, T]={tuple(logp.shape)}, got {tuple(extra.shape)}")
    if cfg.kl_coeff > 0 and ref_logp is None:
        raise ValueError("lead.kl_coeff > 0 needs ref_logp (log-probs of the reference policy)")
    if cfg.entropy_coeff > 0 and entropy is None:
        raise ValueError("lead.entropy_coeff > 0 needs the per-token entropy of the current policy")
    correcting = cfg.rollout_correction.enabled
    if correcting and rollout_logp is None:
        raise ValueError(f"lead.rollout_correction.mode={cfg.rollout_correction.mode} needs rollout_logp "
                         "(the rollout engine's log-probs of the sampled tokens)")

    on = mask.bool()
    zero = torch.zeros((), dtype=logp.dtype, device=logp.device)

    def masked(x: torch.Tensor) -> torch.Tensor:
        return torch.where(on, x, zero)

    checked = (("logp", logp), ("old_logp", old_logp), ("ref_logp", ref_logp), ("entropy", entropy),
               ("rollout_logp", rollout_logp if correcting else None))
    for name, t in checked:
        if t is not None and not torch.isfinite(masked(t.detach())).all():
            raise ValueError(f"{name} holds NaN/inf at unmasked positions")
    if not torch.isfinite(advantages).all():
        raise ValueError("advantages hold NaN/inf")

    adv = advantages.to(logp.dtype)[:, None]
    ratio = importance_ratio(masked(logp), masked(old_logp))
    per_token, clip_active = clipped_surrogate(ratio, adv, cfg)
    if correcting:  # constant weights (no gradient); with mode none this line is not reached at all
        w, hit, seq_hit = correction_weights(old_logp, rollout_logp, mask, cfg.rollout_correction)
        per_token = per_token * w
    pg_per_token = per_token
    if cfg.kl_coeff > 0:
        kl = kl_penalty(masked(logp), masked(ref_logp), cfg.kl_estimator)
        per_token = per_token + cfg.kl_coeff * kl
    if cfg.entropy_coeff > 0:
        per_token = per_token - cfg.entropy_coeff * masked(entropy)

    weights = token_weights(mask, cfg, logp.dtype)
    denom = loss_denominator(mask, cfg) if denominator is None else torch.as_tensor(denominator)
    denom = denom.to(logp.dtype)
    total = (per_token * weights).sum()
    loss = total / denom if float(denom) > 0 else total * 0.0

    with torch.no_grad():
        n_tok = on.sum().clamp_min(1).to(logp.dtype)
        log_ratio = masked(logp - old_logp)
        metrics = {
            "pg_loss": (masked(pg_per_token)).sum() / n_tok,
            "clip_frac": (clip_active & on).sum() / n_tok,
            "ratio_mean": masked(ratio).sum() / n_tok,
            "ratio_max": torch.where(on, ratio, zero).max() if on.any() else zero + 1.0,
            "approx_kl": (0.5 * log_ratio**2).sum() / n_tok,
            "tokens": on.sum().to(logp.dtype),
        }
        if entropy is not None:
            metrics["entropy"] = masked(entropy).sum() / n_tok
        if ref_logp is not None:
            metrics["kl_ref"] = masked(kl_penalty(logp, ref_logp, cfg.kl_estimator)).sum() / n_tok
        metrics["sequences"] = on.any(dim=1).sum().to(logp.dtype)
        if rollout_logp is not None:
            gap = logprob_mismatch(rollout_logp.detach(), old_logp.detach(), on)
            metrics.update({"mismatch/logprob_abs_mean": logp.new_tensor(gap["mean"]),  # on logp's device
                            "mismatch/logprob_abs_max": logp.new_tensor(gap["max"])})
        if correcting:
            metrics.update(correction_metrics(w, hit, seq_hit, mask))
    return loss, {k: torch.as_tensor(v).detach() for k, v in metrics.items()}
