"""Everything the `trtllm` engine does that does not need TensorRT-LLM (tested on CPU).

- Weight streaming: the actor's weights reach TensorRT-LLM as the HF-named stream of
  `nemo_lead.models.export_hf_weights` (gathered over TP, broadcast over PP), cut into buckets of at most
  `max_bytes` (`weight_buckets`) so only one bucket is staged on the GPU at a time. `RefitChecker` checks
  every tensor's name and shape against the config and that the stream was complete: a refit bug fails
  loudly here instead of generating from half-old weights.
- Names: TensorRT-LLM's PyTorch backend loads HF checkpoints by their HF names (its weight mapper fuses
  q/k/v and gate/up itself), so the stream's names are passed unchanged; tied embeddings have no
  `lm_head.weight`, as in the HF checkpoint.
- Sampling parameters: `trtllm_sampling_kwargs` maps our `SamplingParams` onto the fields of
  `tensorrt_llm.SamplingParams` (TensorRT-LLM 1.2): one set per prompt, each with its own seed.
- Outputs: `rollouts_from_outputs` turns `RequestOutput`s (duck-typed: `.outputs[i].token_ids`,
  `.logprobs`, `.finish_reason`, `.stop_reason`) into `Rollout`s.

Log-probs from TensorRT-LLM: it returns one log-prob per generated token of the distribution it sampled
from. So `Rollout.logprobs` is that value (0.0 under greedy, as for the megatron engine), and
`Rollout.policy_logprobs` equals it when nothing truncates the distribution (top_k 0, top_p 1, min_p 0:
then both are log softmax(logits / T)); when truncating, or greedy, TensorRT-LLM does not report the
untruncated value and `policy_logprobs` is NaN, so a mismatch metric computed from it shows NaN rather than
a wrong number. RL training sampling (temperature only) is the case that matters and is exact.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from typing import Any

import torch

from .params import Rollout, SamplingParams

# ExecutorMemoryType tags released by sleep() and restored by wake() (TensorRT-LLM 1.2): the weights
# and everything allocated around them, and the KV cache.
SLEEP_TAGS = ("sampler", "drafter", "guided_decoder", "spec_resource_manager", "model_extra",
              "executor_extra", "model", "draft_model", "kv_cache")


def weight_buckets(stream: Iterable[tuple[str, torch.Tensor]], max_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Group consecutive (name, tensor) pairs into lists of at most `max_bytes` (a larger tensor goes alone)."""
    if max_bytes < 1:
        raise ValueError(f"max_bytes must be >= 1, got {max_bytes}")
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in stream:
        nbytes = tensor.numel() * tensor.element_size()
        if bucket and size + nbytes > max_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += nbytes
    if bucket:
        yield bucket


class RefitChecker:
    """Checks a weight stream against the model's HF names and shapes (`nemo_lead.models.hf_shapes`)."""

    def __init__(self, shapes: dict[str, tuple[int, ...]]):
        self.shapes = shapes
        self.seen: set[str] = set()

    def check(self, name: str, tensor: torch.Tensor) -> None:
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


def prompt_seed(seed: int, prompt_index: int) -> int:
    """A 63-bit seed for prompt `prompt_index` of a call seeded `seed` (splitmix64 of the pair): prompts get
    unrelated random streams, and seed s / prompt i never collides with seed s+1 / prompt i-1."""
    x = (seed * 0x9E3779B97F4A7C15 + prompt_index + 1) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return (x ^ (x >> 31)) >> 1


def trtllm_sampling_kwargs(params: SamplingParams, prompt_index: int) -> dict[str, Any]:
    """Keyword arguments of `tensorrt_llm.SamplingParams` for one prompt.

    Stops: TensorRT-LLM's own EOS handling is switched off (`ignore_eos`) and every stop id goes in
    `stop_token_ids` with `include_stop_str_in_output`, so a sample ends exactly on our stop ids and keeps
    the stop token (with its log-prob), as the megatron engine does. Greedy is top_k = 1. `logprobs=1`
    asks for the sampled token's log-prob. No detokenisation (we work in token ids).
    """
    kwargs: dict[str, Any] = dict(
        n=params.n, max_tokens=params.max_tokens, stop_token_ids=list(params.stop_token_ids) or None,
        include_stop_str_in_output=True, ignore_eos=True, logprobs=1, detokenize=False,
    )
    if params.greedy:
        kwargs.update(top_k=1, temperature=1.0)
    else:
        kwargs.update(temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)
        if params.min_p > 0:
            kwargs["min_p"] = params.min_p
    if params.seed is not None:
        kwargs["seed"] = prompt_seed(params.seed, prompt_index)
    return kwargs


def _token_logprob(entry: Any, token: int) -> float:
    """One generated token's log-prob from TensorRT-LLM's per-token entry: a float, or a dict
    {token_id: Logprob(logprob=..., rank=...)} (top-k form)."""
    if isinstance(entry, dict):
        value = entry.get(token)
        if value is None:
            return math.nan
        return float(getattr(value, "logprob", value))
    return float(entry)


def rollouts_from_outputs(outputs: list[Any], params: SamplingParams, first_prompt_index: int = 0) -> list[Rollout]:
    """`RequestOutput`s (one per prompt, in order) -> Rollouts, prompt-major, sample-minor."""
    stops = set(params.stop_token_ids)
    rollouts = []
    for offset, request in enumerate(outputs):
        completions = sorted(request.outputs, key=lambda c: c.index)
        if len(completions) != params.n:
            raise ValueError(f"prompt {first_prompt_index + offset}: TensorRT-LLM returned {len(completions)} "
                             f"samples, {params.n} were asked for")
        for c in completions:
            tokens = [int(t) for t in c.token_ids]
            raw = list(c.logprobs or [])
            if len(raw) != len(tokens):
                raise ValueError(f"prompt {first_prompt_index + offset}: {len(raw)} log-probs for {len(tokens)} tokens")
            lps = [_token_logprob(e, t) for e, t in zip(raw, tokens)]
            stop_reason = getattr(c, "stop_reason", None)
            if c.finish_reason == "stop" and (not tokens or tokens[-1] not in stops) and stop_reason in stops:
                tokens.append(int(stop_reason))  # a version that strips the stop token: put it back
                lps.append(math.nan)
            if c.finish_reason not in ("stop", "length"):
                raise ValueError(f"prompt {first_prompt_index + offset}: unfinished sample (finish_reason "
                                 f"{c.finish_reason!r})")
            if params.greedy:
                logprobs, policy = [0.0] * len(tokens), [math.nan] * len(tokens)
            else:
                logprobs = lps
                policy = list(lps) if not params.truncates else [math.nan] * len(tokens)
            rollouts.append(Rollout(first_prompt_index + offset, c.index, tokens, logprobs, policy, c.finish_reason))
    return rollouts


def llm_kwargs(field_names: set[str], *, dtype: str, max_batch_size: int, max_seq_len: int | None,
               kv_cache_fraction: float, extra: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments of `tensorrt_llm.LLM` for an RL rollout engine, given the names of
    `TorchLlmArgs.model_fields` of the installed version (sleep support is `enable_sleep` in 1.2,
    `sleep_config` later; the caller turns the latter's marker into a `SleepConfig`)."""
    if "orchestrator_type" not in field_names:
        raise RuntimeError("this TensorRT-LLM has no Ray orchestrator (in-memory weight updates need >= 1.2)")
    kwargs: dict[str, Any] = dict(
        backend="pytorch", orchestrator_type="ray",
        ray_worker_extension_cls="tensorrt_llm.llmapi.rlhf_utils.WorkerExtension",
        tensor_parallel_size=1, dtype=dtype, load_format="dummy",  # real weights arrive by refit
        max_batch_size=max_batch_size, kv_cache_config={"free_gpu_memory_fraction": kv_cache_fraction},
    )
    if max_seq_len is not None:
        kwargs["max_seq_len"] = max_seq_len
    if "enable_sleep" in field_names:
        kwargs["enable_sleep"] = True
    elif "sleep_config" in field_names:
        kwargs["sleep_config"] = "default"
    kwargs.update(extra)
    return kwargs
