"""Per-sample random streams: the randomness of a sampled token depends only on (seed, sample, position).

    key = sample_seed(seed, prompt_index * n + sample_index)       # once per sample, on the host
    noise = exponential_noise(draw_keys(keys, drawn), vocab)       # [rows, vocab] Exp(1), on the device

Why: with one generator per `generate` call, a row's noise depends on which rows share its batch and in
which order they were admitted, so continuous batching, `max_batch_size`, a KV budget (which runs the same
samples in waves) or the data-parallel split would all change the tokens. Here every draw is a pure function
of its sample's key and its position in the response, so a sample gets the same tokens however the engine
schedules it (given the same logits).

Definition (SplitMix64 throughout, in wrapping 64-bit arithmetic):
- `sample_seed(seed, i)`: a 63-bit key for sample stream i of a call seeded `seed` (TensorRT-LLM requests are
  seeded with the same function, stream index prompt_index x n + sample_index);
- `sample_key`: which key a sample of an engine call gets (every engine asks it). By default its place in
  the call, `sample_seed(params.seed, prompt_index x n + sample_index)` (RL: a step's seed and the sample's
  place in the step). With per-prompt seeds (`prompt_seeds`, evaluation and distillation: a seed per problem)
  `sample_seed(prompt_seeds[prompt], sample_index)`, so a sample's stream depends on its problem and index
  alone, never on which problems share its call, how many samples of its problem the call holds
  (`first_sample`: the call draws samples first_sample .. first_sample + n - 1) or the call's size;
- `draw_keys(keys, t)`: the t-th output of the SplitMix64 generator whose state starts at the sample's key: the
  key of the draw of response token t (t = 0 for the first token);
- `exponential_noise(draw_key, V)`: for vocabulary entry i the i-th output x of the generator seeded with the
  draw's key; its top 24 bits m give u = (m + 1) / 2^24 in (0, 1] and E = -log u (clamped away from 0), an
  Exp(1) variate with 24-bit resolution, for `sample_tokens`' exponential race.
Tested against a pure-Python SplitMix64 (tests/generation/test_sampling.py).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB
_MASK64 = (1 << 64) - 1


def splitmix64(x: int) -> int:
    """SplitMix64's output function (finaliser) of a 64-bit integer (pure Python; the reference)."""
    x &= _MASK64
    x = ((x ^ (x >> 30)) * _MIX1) & _MASK64
    x = ((x ^ (x >> 27)) * _MIX2) & _MASK64
    return x ^ (x >> 31)


def sample_seed(seed: int, index: int) -> int:
    """A 63-bit seed for stream `index` of a call seeded `seed` (splitmix64 of the pair): streams get
    unrelated random numbers, and seed s / index i never collides with seed s+1 / index i-1."""
    return splitmix64(seed * _GOLDEN + index + 1) >> 1


def sample_key(seed: int, n: int, prompt: int, sample: int, *, prompt_seeds: Sequence[int] | None = None,
               first_sample: int = 0, first_prompt: int = 0) -> int:
    """The stream key of sample `sample` (0 .. n-1 within this call) of prompt `prompt` (0 .. within this call's
    list): `sample_seed(prompt_seeds[prompt], first_sample + sample)` with per-prompt seeds, else
    `sample_seed(seed, (first_prompt + prompt) x n + sample)` (module docstring)."""
    if prompt_seeds is not None:
        return sample_seed(prompt_seeds[prompt], first_sample + sample)
    return sample_seed(seed, (first_prompt + prompt) * n + sample)


def check_prompt_seeds(prompt_seeds: Sequence[int] | None, first_sample: int, prompts: int) -> None:
    """ValueError unless `prompt_seeds` is None (then `first_sample` must be 0: a call's own streams start at
    its first sample) or holds one integer seed per prompt; `first_sample` >= 0."""
    if first_sample < 0:
        raise ValueError(f"first_sample must be >= 0, got {first_sample}")
    if prompt_seeds is None:
        if first_sample:
            raise ValueError(f"first_sample={first_sample} needs prompt_seeds: a sample's index names its stream only "
                             "under a seed of its prompt's own")
        return
    if len(prompt_seeds) != prompts:
        raise ValueError(f"prompt_seeds holds {len(prompt_seeds)} seeds for {prompts} prompts: give one per prompt")
    bad = [s for s in prompt_seeds if not isinstance(s, int) or isinstance(s, bool)]
    if bad:
        raise ValueError(f"prompt_seeds must be integers, got {bad[:3]}")


def _int64(x: int) -> int:
    """The signed 64-bit integer with the bits of x (what an int64 tensor holds)."""
    x &= _MASK64
    return x - (1 << 64) if x >> 63 else x


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical right shift of int64 bit patterns (torch's >> is arithmetic: sign bits are masked off)."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """`splitmix64` on an int64 tensor (multiplication wraps, as 64-bit unsigned arithmetic does)."""
    x = x ^ _shift_right(x, 30)
    x = x * _int64(_MIX1)
    x = x ^ _shift_right(x, 27)
    x = x * _int64(_MIX2)
    return x ^ _shift_right(x, 31)


def draw_keys(sample_keys: torch.Tensor, drawn: torch.Tensor) -> torch.Tensor:
    """Keys [rows] of the next draw of each row: row b has already drawn `drawn[b]` tokens (int64 tensors)."""
    return _mix(sample_keys + (drawn + 1) * _int64(_GOLDEN))


def exponential_noise(keys: torch.Tensor, width: int) -> torch.Tensor:
    """Exp(1) variates [rows, width] (float32) of the draws keyed `keys` [rows] (module docstring)."""
    steps = torch.arange(1, width + 1, dtype=torch.int64, device=keys.device) * _int64(_GOLDEN)
    bits = _shift_right(_mix(keys[:, None] + steps), 40)  # the top 24 bits
    u = (bits + 1).to(torch.float32).mul_(2.0 ** -24)
    return u.log_().neg_().clamp_(min=torch.finfo(torch.float32).tiny)
