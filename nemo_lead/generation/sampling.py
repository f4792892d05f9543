"""The one sampling function of the project (rollout engines and evaluation share it).

    draw = sample_tokens(logits [B, V], params, generator)   # -> Draw(tokens, logprobs, policy_logprobs)

Definition of the sampling distribution, in order (the order of transformers' logits warpers):
1. temperature: z = logits / T (T == 0 is greedy: argmax of the logits, no randomness);
2. top-k: keep tokens whose scaled logit is >= the k-th largest (ties at the k-th value are all kept);
3. top-p: over the distribution renormalised after (2), sort descending and keep each token whose mass
   *before* it is < top_p (so the token that crosses top_p is kept, and at least one token always is);
4. min-p: keep tokens whose probability is >= min_p x the largest probability (unchanged by renormalising);
5. renormalise over the kept tokens and draw one.

Drawing uses the exponential race, argmax_i p_i / E_i with E_i ~ Exp(1): it picks i with probability p_i,
needs no sort or cumulative sum, and does not synchronise a GPU with the host. The E_i come from a seeded
`torch.Generator`, or, given per-row `keys`, from each row's own stream (`nemo_lead.generation.streams`:
what the megatron engine uses, so that a sample's tokens do not depend on the rows it is batched with). `logprobs` / `policy_logprobs`: see `nemo_lead.generation.engine` (both float32).
"""

from __future__ import annotations

import math
import os
from typing import NamedTuple

import torch

from nemo_lead.generation.engine import SamplingParams
from nemo_lead.generation.streams import exponential_noise


class Draw(NamedTuple):
    tokens: torch.Tensor  # [B] int64
    logprobs: torch.Tensor  # [B] float32, under the truncated, renormalised distribution (0 when greedy)
    policy_logprobs: torch.Tensor  # [B] float32, log softmax(logits / T) (T = 1 when greedy)


def truncated_logits(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """float32 logits / T with the tokens that top-k, top-p and min-p remove set to -inf (steps 1-4 above).

    Its softmax is the sampling distribution. Needs temperature > 0.
    """
    if params.greedy:
        raise ValueError("truncated_logits needs temperature > 0 (temperature 0 is greedy argmax)")
    z = logits.float() / params.temperature
    if params.top_k > 0 and params.top_k < z.shape[-1]:
        kth = torch.topk(z, params.top_k, dim=-1).values[..., -1:]
        z = z.masked_fill(z < kth, float("-inf"))
    if params.top_p < 1:
        probs, order = torch.softmax(z, dim=-1).sort(dim=-1, descending=True)
        mass_before = probs.cumsum(dim=-1) - probs
        drop_sorted = mass_before >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        z = z.masked_fill(drop, float("-inf"))
    if params.min_p > 0:
        log_probs = torch.log_softmax(z, dim=-1)
        floor = log_probs.max(dim=-1, keepdim=True).values + math.log(params.min_p)
        z = z.masked_fill(log_probs < floor, float("-inf"))
    return z


def sample_tokens(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator | None = None, *,
                  keys: torch.Tensor | None = None) -> Draw:
    """One token per row of `logits` [B, V] (any float dtype), with its two log-probabilities.

    Greedy (temperature 0) ignores the generator and keys. Otherwise the draw is a deterministic function
    of the logits and either the generator's state or `keys` [B] (int64, one per row: `streams.draw_keys`),
    so a fixed seed reproduces it; with keys, row b's token depends on row b's logits and key alone.
    """
    if logits.dim() != 2:
        raise ValueError(f"logits must be [batch, vocab], got shape {tuple(logits.shape)}")
    if params.greedy:
        policy = torch.log_softmax(logits.float(), dim=-1)
        tokens = policy.argmax(dim=-1)
        chosen = policy.gather(-1, tokens[:, None])[:, 0]
        return Draw(tokens, torch.zeros_like(chosen), chosen)
    policy = torch.log_softmax(logits.float() / params.temperature, dim=-1)
    sampling = torch.log_softmax(truncated_logits(logits, params), dim=-1) if params.truncates else policy
    # E_i can come out as exactly 0 in float32 (about once per 2^24 draws); clamping keeps p_i / E_i finite
    # (p_i > 0 then wins, as it should with E_i that small) and 0 / E_i == 0 for removed tokens.
    if keys is not None:
        if keys.shape != (logits.shape[0],):
            raise ValueError(f"keys must be one per row ({logits.shape[0]}), got shape {tuple(keys.shape)}")
        race = exponential_noise(keys, sampling.shape[-1])
    else:
        race = torch.empty_like(sampling).exponential_(1.0, generator=generator).clamp_(min=torch.finfo(torch.float32).tiny)
    tokens = (sampling.exp() / race).argmax(dim=-1)
    index = tokens[:, None]
    return Draw(tokens, sampling.gather(-1, index)[:, 0], policy.gather(-1, index)[:, 0])


def make_generator(seed: int | None, device: torch.device | str) -> torch.Generator:
    """A generator on `device` seeded with `seed` (None: a fresh seed from the OS, not reproducible)."""
    if seed is None:
        seed = int.from_bytes(os.urandom(8), "little") >> 1
    return torch.Generator(device=device).manual_seed(seed)
