"""Rollout correction: importance weights for the gap between the rollout engine's policy and the actor's.

The engine that samples (bf16 kernels, TensorRT-LLM, later FP8) and the actor that trains compute slightly
different probabilities for the same tokens with the same weights, so the samples are a little off-policy
for pi_old, the policy the clipped surrogate is anchored at. Per response token t of response i:

    log rho_it = log pi_old(o_it) - log pi_engine(o_it)                       (log_ratio)

and by `mode` (`lead.rollout_correction.mode`), with C = `threshold`:

    none     w = 1: no correction (the loss is the one without this module, bit for bit)
    tis      w_it = min(rho_it, C)                           truncated importance sampling, per token
    seq_tis  w_i = min(prod_t rho_it, C) = exp(min(sum_t log rho_it, log C)), one weight per sequence
    mis      masked importance sampling: w = rho where rho lies in [1/C, C], 0 where it leaves it;
             per token (`level=token`: rho_it) or per sequence (`level=sequence`: rho_i = prod_t rho_it)

w multiplies each token's clipped policy-gradient term (not the KL or entropy terms) and is a constant: it
carries no gradient. A masked token (or sequence) then adds nothing to the loss but stays in its
denominator: the denominator is fixed from the loss mask before the forward pass (see `loss.py`), which
keeps the micro-batch split exact (verl's rejection sampling removes such tokens from the denominator
instead). Products over a sequence are taken in log space, so no long response overflows.

Which log-probs: pi_old is the actor's log-prob of the sampled token (with `old_logprobs=auto`, the update's
own forward pass, detached; with `recompute`, a forward pass of its own); pi_engine is the engine's
`Rollout.policy_logprobs`, carried as `SequenceBatch.rollout_logprobs`: log softmax(logits / T) over the
whole vocabulary, the same distribution the actor computes. So w measures only how the two
implementations differ numerically. Under top-p / top-k sampling the engine also reports
`Rollout.logprobs`, renormalised over the tokens the truncation kept; a ratio against those would carry
the kept mass S <= 1 in every token (log rho = log S: a weight of about 0.95 at top_p 0.95, far less under
top_k) that is no policy change, and `mis` would mask tokens for the truncation alone (the bias of TRL
issue 6789). That is why the untruncated ones are used. What no weight can correct: with truncation the
tokens outside the kept set are never sampled while the loss treats the samples as drawn from the full
softmax. Train with top_p = 1 and top_k = 0 (the RL default, where both log-probs are equal) unless the
truncation is wanted; an engine that cannot report untruncated log-probs (TensorRT-LLM with top_p < 1)
cannot be corrected, and the RL loop says so instead of running.

`level` is read by `mis` alone: `tis` is per token and `seq_tis` per sequence by definition, so
`level=sequence` with `tis`, `seq_tis` or `none` is refused rather than ignored (`tis` at sequence level is
`seq_tis`). `level=token` is the default and what the other modes are read as.

The same settings elsewhere (current key names; the definitions agree except where noted):

    here                         verl (algorithm.rollout_correction.*)        TRL (GRPOConfig)
    tis, threshold C             rollout_is=token, rollout_is_threshold=C     vllm_importance_sampling_mode=
                                                                              token_truncate, ..._clip_max=C
    seq_tis, threshold C         rollout_is=sequence, rollout_is_threshold=C  sequence_truncate, ..._clip_max=C
    mis, level=token, C          rollout_rs=token_k1,                         token_mask, ..._clip_min=1/C,
                                 rollout_rs_threshold="{1/C}_{C}"             ..._clip_max=C
    mis, level=sequence, C       rollout_rs=seq_sum_k1, same threshold        sequence_mask, same clips

verl's rejection sampling removes the rejected tokens from the loss denominator (here they stay in it,
see above); its k1 modes take the band as a "lower_upper" string. TRL's mask modes are one-sided (mask
only above clip_max) unless `vllm_importance_sampling_clip_min` is set, and its truncate modes also clamp
from below when it is; `vllm_importance_sampling_correction=True` turns it on. NeMo-RL calls these its
importance-sampling correction and seq-mask-tis; slime `--use-tis`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

MODES = ("none", "tis", "seq_tis", "mis")
LEVELS = ("token", "sequence")
# metrics of one update (token / sequence shares truncated or masked, mean weight over trained tokens)
METRIC_KEYS = ("rollout_correction/token_frac", "rollout_correction/seq_frac", "rollout_correction/weight_mean")


@dataclass
class RolloutCorrectionConfig:
    """`lead.rollout_correction`: see the module docstring."""

    mode: str = field(default="none", metadata={"choices": MODES})  # none | tis | seq_tis | mis
    level: str = field(default="token", metadata={"choices": LEVELS})  # read by mis only: mask tokens or whole sequences whose ratio leaves [1/C, C]
    threshold: float = 2.0  # C (verl's default rollout_is_threshold); > 1

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"lead.rollout_correction.mode={self.mode!r} is not one of {list(MODES)}")
        if self.level not in LEVELS:
            raise ValueError(f"lead.rollout_correction.level={self.level!r} is not one of {list(LEVELS)}")
        if self.level != "token" and self.mode != "mis":
            hint = {"tis": "mode=seq_tis is tis at sequence level",
                    "seq_tis": "mode=seq_tis is per sequence already; leave level at token",
                    "none": "mode=none applies no correction"}[self.mode]
            raise ValueError(f"lead.rollout_correction.level={self.level} is read only by mode=mis, not by "
                             f"mode={self.mode} ({hint})")
        if not self.threshold > 1:
            raise ValueError(f"lead.rollout_correction.threshold={self.threshold} must be > 1 (the band is [1/C, C])")

    @property
    def enabled(self) -> bool:
        return self.mode != "none"


def log_ratio(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log rho = log pi_old - log pi_engine per token, 0 where `mask` is off (float64: sums stay exact)."""
    lr = old_logp.detach().to(torch.float64) - rollout_logp.detach().to(torch.float64)
    return torch.where(mask.bool(), lr, torch.zeros_like(lr))


def correction_weights(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, cfg: RolloutCorrectionConfig
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(w [N, T] in old_logp's dtype, hit [N, T] bool, seq_hit [N] bool) for tensors [N, T].

    `hit`: the token's weight was truncated (tis, seq_tis: ratio above C) or masked (mis); `seq_hit`: some
    token of the sequence was (for the sequence-level modes: the sequence itself). Both are False outside
    `mask`. w is 1 outside `mask` and for mode none; it is detached."""
    on = mask.bool()
    lr = log_ratio(old_logp, rollout_logp, mask)
    log_c = math.log(cfg.threshold)
    if cfg.mode == "none":
        w, hit = torch.ones_like(lr), torch.zeros_like(on)
    elif cfg.mode == "tis":
        w, hit = torch.exp(lr.clamp(max=log_c)), lr > log_c
    elif cfg.mode == "seq_tis":
        seq = lr.sum(dim=1, keepdim=True)
        w, hit = torch.exp(seq.clamp(max=log_c)).expand_as(lr), (seq > log_c).expand_as(on)
    else:  # mis
        ratio_log = lr if cfg.level == "token" else lr.sum(dim=1, keepdim=True).expand_as(lr)
        outside = ratio_log.abs() > log_c
        w, hit = torch.where(outside, torch.zeros_like(lr), torch.exp(ratio_log)), outside
    hit = hit & on
    w = torch.where(on, w, torch.ones_like(w))
    return w.to(old_logp.dtype).detach(), hit, hit.any(dim=1)


def correction_metrics(w: torch.Tensor, hit: torch.Tensor, seq_hit: torch.Tensor, mask: torch.Tensor) -> dict:
    """Shares of trained tokens / of sequences with trained tokens that were truncated or masked, and the
    mean weight over trained tokens (0 for an empty mask)."""
    on = mask.bool()
    n_tok = on.sum().clamp_min(1).to(w.dtype)
    nonempty = on.any(dim=1)
    n_seq = nonempty.sum().clamp_min(1).to(w.dtype)
    return {
        "rollout_correction/token_frac": hit.sum().to(w.dtype) / n_tok,
        "rollout_correction/seq_frac": (seq_hit & nonempty).sum().to(w.dtype) / n_seq,
        "rollout_correction/weight_mean": torch.where(on, w, torch.zeros_like(w)).sum() / n_tok,
    }
