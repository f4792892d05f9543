"""What every rollout engine takes and returns: `SamplingParams` in, `Rollout`s out, behind `RolloutEngine`.

    params = SamplingParams(n=8, temperature=0.6, top_p=0.95, max_tokens=8192, stop_token_ids=[eos], seed=1234)
    rollouts = engine.generate(prompt_token_ids, params)     # list[Rollout], prompt-major, sample-minor
    engine.refit(actor); engine.sleep(); engine.wake()

The two log-probabilities of a `Rollout` (the point of this module; see `nemo_lead.generation.sampling`):
- `logprobs[i]`: log-probability of token i under the distribution it was actually drawn from: logits / T,
  restricted by top-k, then top-p, then min-p, and renormalised over the tokens kept. 0.0 for every token when
  temperature == 0 (greedy: the distribution is a point mass).
- `policy_logprobs[i]`: log softmax(logits / T) of the same token with no truncation (T taken as 1 when greedy).
  This is what the actor recomputes in the training step (logits / T over the whole vocabulary), so the
  train/inference mismatch metric (`nemo_lead.algorithms.mismatch.logprob_mismatch`) compares the actor against `policy_logprobs`.
  Relation: logprobs = policy_logprobs - log(mass of the kept tokens); they are equal when top_k = 0,
  top_p = 1 and min_p = 0.

Both are float32 values computed from the engine's logits (fp32 softmax whatever the model's precision).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, runtime_checkable

FINISH_REASONS = ("stop", "length")


@dataclass
class SamplingParams:
    """How to sample (an OmegaConf structured config as well: nest it in a job's config)."""

    n: int = 1  # samples per prompt
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0  # nucleus: keep the smallest set of most likely tokens with mass >= top_p; 1 = off
    top_k: int = 0  # keep the k most likely tokens (ties at the k-th logit are kept); 0 = off
    min_p: float = 0.0  # keep tokens with probability >= min_p x the most likely token's; 0 = off
    max_tokens: int = 256  # generated tokens per sample, stop token included
    stop_token_ids: list[int] = field(default_factory=list)  # a sample ends after emitting one of these
    seed: Optional[int] = None  # None = a fresh random seed per call (not reproducible)

    def __post_init__(self) -> None:
        if not isinstance(self.n, int) or self.n < 1:
            raise ValueError(f"n must be an integer >= 1, got {self.n!r}")
        if not self.temperature >= 0:
            raise ValueError(f"temperature must be >= 0 (0 = greedy), got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if not isinstance(self.top_k, int) or self.top_k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {self.top_k!r}")
        if not 0 <= self.min_p < 1:
            raise ValueError(f"min_p must be in [0, 1), got {self.min_p!r}")
        if not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ValueError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        bad = [t for t in self.stop_token_ids if not isinstance(t, int) or t < 0]
        if bad:
            raise ValueError(f"stop_token_ids must be non-negative token ids, got {bad}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    @property
    def truncates(self) -> bool:
        """True when top-k / top-p / min-p can remove tokens (then logprobs != policy_logprobs)."""
        return not self.greedy and (self.top_k > 0 or self.top_p < 1 or self.min_p > 0)


@dataclass
class Rollout:
    """One sampled response. `token_ids` include the stop token when the sample stopped on one."""

    prompt_index: int  # index into the prompt list given to `generate`
    sample_index: int  # 0 .. n-1 within the prompt
    token_ids: list[int]
    logprobs: list[float]  # under the sampling distribution actually used (module docstring)
    policy_logprobs: list[float]  # log softmax(logits / T), untruncated: what the actor recomputes
    finish_reason: str  # "stop" | "length"

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@runtime_checkable
class RolloutEngine(Protocol):
    """The interface the RL loop, the split layout's generators, the evaluation runner and `nemo-lead generate`
    use, and all they use (engines: `megatron`, `vllm`, `trtllm`; `nemo_lead.generation.kinds`).

    Under torch.distributed every rank of a model-parallel group (TP x PP) calls each method with the same
    arguments and gets the same result; data-parallel replicas generate their own prompts independently.
    """

    # (engine replicas inside one actor replica, this rank's replica) when the engine decodes on copies of its
    # own smaller than the actor's model-parallel group (the megatron engine at engine.tp=b < actor TP x PP,
    # vllm at engine.tp < actor.tp): the caller splits each data-parallel share over them
    # (`nemo_lead.training.rl.rollouts`); None: one engine per actor replica
    replicas: Optional[tuple[int, int]]
    # the optimizer step whose weights the engine holds, for an engine that keeps it (vllm: set by `refit`,
    # stamped on its outputs; a batch sampled with other weights is an error, `nemo_lead.training.rl.lag`); None
    # for one that does not (the megatron engine decodes whatever the actor's modules hold; trtllm)
    weight_version: Optional[int]

    def generate(self, prompt_token_ids: list[list[int]], params: SamplingParams, prompt_offset: int = 0, *,
                 prompt_seeds: Optional[list[int]] = None, first_sample: int = 0) -> list[Rollout]:
        """n samples of each prompt. `prompt_offset`: these prompts are prompts `prompt_offset` .. of a larger
        call (a replica's share), each sample drawing from that call's stream for it. `prompt_seeds` (one per
        prompt): sample s of prompt i draws from the stream of (prompt_seeds[i], first_sample + s) and is
        returned as sample first_sample + s, so a call may hold any samples of any problems and each comes out
        as it would in any other call (`nemo_lead.generation.streams.sample_key`); without them the call's own
        streams (`params.seed`)."""

    def concurrency(self, positions: int) -> int:
        """Sequences of `positions` prompt + response tokens the engine decodes at once (its KV budget and batch
        limit): how large a call keeps it full (evaluation sizes its calls from it)."""

    def refit(self, actor: Any, version: Optional[int] = None) -> None:
        """Take the actor's current weights (in memory; see each engine for what `actor` may be), those of
        optimizer step `version` (None: the next after the ones it holds)."""

    def sleep(self) -> None:
        """Free the engine's device memory before the training step."""

    def wake(self) -> None:
        """Restore what `sleep` freed, before the next `generate`."""

    def close(self) -> None:
        """Release what the engine holds (vllm: its memory and process groups, before the job's own go); called
        once, after the last `generate`."""


def refuse(engine: str, reasons: list[str]) -> None:
    """ValueError naming every sampling parameter the `engine` engine cannot honour (`reasons`: its own list,
    empty when it samples exactly the distribution `SamplingParams` defines)."""
    if reasons:
        raise ValueError(f"the '{engine}' engine cannot honour these sampling parameters: " + "; ".join(reasons))


def completions(outputs: list[Any], params: SamplingParams, engine: str, first_prompt_index: int = 0,
                first_sample: int = 0):
    """(prompt index, sample index, "prompt P, sample S" for messages, the completion, its token ids) of an
    engine's request outputs, one request per sample in prompt-major order (the vllm and trtllm engines'
    `RequestOutput`s: `.outputs[0]` with `token_ids` and `finish_reason`), each checked: a multiple of n
    requests, one completion each, finished on "stop" or "length". `engine` names the library in errors;
    sample indices start at `first_sample`."""
    if len(outputs) % params.n:
        raise ValueError(f"{engine} returned {len(outputs)} requests, not a multiple of n = {params.n}")
    for k, request in enumerate(outputs):
        prompt, sample = first_prompt_index + k // params.n, first_sample + k % params.n
        where = f"prompt {prompt}, sample {sample}"
        if len(request.outputs) != 1:
            raise ValueError(f"{where}: {engine} returned {len(request.outputs)} completions for one request")
        c = request.outputs[0]
        if c.finish_reason not in FINISH_REASONS:
            raise ValueError(f"{where}: unfinished sample (finish_reason {c.finish_reason!r})")
        yield prompt, sample, where, c, [int(t) for t in c.token_ids]


class RefitChecker:
    """Checks a weight stream against the model's HF names and shapes (`nemo_lead.models.hf_shapes`): the
    refit of every engine that loads the actor's weights by name (vllm, trtllm)."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]):
        self.shapes = shapes
        self.seen: set[str] = set()

    def check(self, name: str, tensor: Any) -> None:
        if name not in self.shapes:
            raise ValueError(f"refit: the weight stream has {name!r}, which this model does not have")
        if name in self.seen:
            raise ValueError(f"refit: {name!r} arrived twice in one weight stream")
        if tuple(tensor.shape) != tuple(self.shapes[name]):
            raise ValueError(f"refit: {name} has shape {tuple(tensor.shape)}, the model expects {tuple(self.shapes[name])}")
        self.seen.add(name)

    def finish(self) -> None:
        missing = sorted(set(self.shapes) - self.seen)
        if missing:
            raise ValueError(f"refit: the weight stream ended without {len(missing)} tensors, e.g. {missing[:3]}")


def check_prompts(prompt_token_ids: list[list[int]], vocab_size: int | None = None) -> None:
    """Raise ValueError naming the first bad prompt: an empty list of prompts, an empty prompt, or a token id
    outside the vocabulary. Shared by the engines so they fail the same way."""
    if len(prompt_token_ids) == 0:
        raise ValueError("generate() needs at least one prompt; got an empty list")
    for i, ids in enumerate(prompt_token_ids):
        if len(ids) == 0:
            raise ValueError(f"prompt {i} is empty: every prompt needs at least one token")
        lo, hi = min(ids), max(ids)
        if lo < 0 or (vocab_size is not None and hi >= vocab_size):
            bad = lo if lo < 0 else hi
            raise ValueError(f"prompt {i} has token id {bad}, outside the vocabulary [0, {vocab_size})")
