"""Everything the `trtllm` engine does that does not need TensorRT-LLM (tested on CPU).

Written against TensorRT-LLM 1.2 (`SUPPORTED_VERSIONS`); the facts below were read from its sources
(llmapi/llm_args.py, llmapi/rlhf_utils.py, executor/ray_executor.py, executor/ray_gpu_worker.py,
sampling_params.py, _torch/pyexecutor/sampler.py).

- Version: `check_version` refuses anything outside `SUPPORTED_VERSIONS` (sleep is `enable_sleep` in 1.2,
  `SleepConfig` later; the RPC entry point `LLM._collective_rpc` is private and changes with releases).
- Placement: with the Ray orchestrator a worker runs on `ray.get_gpu_ids()[0]` of the Ray cluster it joins,
  which has nothing to do with the trainer rank's GPU. `placement_env` pins it: a local Ray cluster per
  rank (`TLLM_RAY_FORCE_LOCAL_CLUSTER=1`) that sees only the rank's GPU (`CUDA_VISIBLE_DEVICES`, which the
  raylet and the worker inherit); `check_worker_devices` then compares the device UUID the worker reports
  with the rank's own and fails loudly on a mismatch (a refit would otherwise fail on the UUID later).
- Weight streaming: the actor's weights reach TensorRT-LLM as the HF-named stream of
  `nemo_lead.models.export_hf_weights`, cut into buckets of at most `max_bytes` (`weight_buckets`);
  `RefitChecker` (`nemo_lead.generation.engine`, shared with the vllm engine) checks names, shapes and
  completeness; `issue_refit` makes the exact RPC sequence:
  one `update_weights({uuid: handles})` per bucket, then always one `update_weights(None)` (the
  finalisation: post-load processing of every module and a reset of the prefix cache).
- Sampling: `trtllm_requests` maps our `SamplingParams` onto `tensorrt_llm.SamplingParams` keyword arguments,
  one request per sample (n = 1 each) with its own seed, so every sample's random stream depends only on
  (seed, prompt, sample) and never on TensorRT-LLM's seeding of child requests or on how prompts are split
  over ranks. A seed is always sent: the C++ sampler seeds an unseeded request with a fixed default, so
  unseeded samples of one prompt would all be the same. `unsupported` lists what the engine refuses instead
  of sampling from another distribution.
- Outputs: `rollouts_from_outputs` turns `RequestOutput`s into `Rollout`s and checks every log-prob.

Log-probs (`LOGPROB_NOTE`): the engine runs TensorRT-LLM's `TRTLLMSampler` (the C++ decoder), which returns
the sampled token's own log-prob under the distribution it sampled from, temperature applied. (The default
`TorchSampler` of 1.2 returns the top-k log-probs of the raw logits, before temperature, and with
`logprobs=1` holds the sampled token only when it is the most likely one.) The engine asks for it only when
sampling with temperature alone (T > 0, top_k 0, top_p 1): then it is log softmax(logits / T), which is
both `Rollout.logprobs` and `Rollout.policy_logprobs` exactly, as the RL loop needs. A missing, non-finite or
positive value raises. Greedy rollouts have `logprobs` 0.0 (a point mass) and truncated sampling
(top-k / top-p) has no log-probs from this engine: those lists hold NaN, so use temperature-only sampling
wherever log-probs are consumed (RL rollouts); evaluation reads none.
"""

from __future__ import annotations

import math
import secrets
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch
from packaging.version import InvalidVersion, Version

from nemo_lead.generation.engine import RefitChecker, Rollout, SamplingParams, completions, refuse
from nemo_lead.generation.streams import check_prompt_seeds, sample_key

SUPPORTED_VERSIONS = ("1.2.0", "1.3.0")  # [low, high): the TensorRT-LLM releases this engine is written for
SAMPLER_TYPE = "TRTLLMSampler"
WORKER_EXTENSION = "tensorrt_llm.llmapi.rlhf_utils.WorkerExtension"

# ExecutorMemoryType tags released by sleep() and restored by wake() (TensorRT-LLM 1.2): the weights
# and everything allocated around them, and the KV cache.
SLEEP_TAGS = ("sampler", "drafter", "guided_decoder", "spec_resource_manager", "model_extra",
              "executor_extra", "model", "draft_model", "kv_cache")

# LLM arguments the engine sets itself: overriding one through `trtllm.llm_kwargs` would break refit,
# placement, the log-prob contract or the prefix-cache rule, so it is refused.
OWNED_LLM_ARGS = frozenset({
    "backend", "orchestrator_type", "ray_worker_extension_cls", "sampler_type", "load_format", "enable_sleep",
    "sleep_config", "tensor_parallel_size", "pipeline_parallel_size", "kv_cache_config", "dtype",
    "max_batch_size", "max_seq_len", "placement_groups", "placement_bundle_indices", "per_worker_gpu_share",
    "ray_placement_config",
})


class TrtllmVersionError(RuntimeError):
    """The installed TensorRT-LLM is outside the range this engine is written for."""


def _version(version: str):
    """A comparable `packaging` Version; pre-releases (1.2.0rc6) count below their release (1.2.0)."""
    try:
        v = Version(version)
    except InvalidVersion:
        raise TrtllmVersionError(f"cannot read TensorRT-LLM's version {version!r}") from None
    return v


def check_version(version: str) -> None:
    """Raise TrtllmVersionError unless SUPPORTED_VERSIONS[0] <= version < SUPPORTED_VERSIONS[1] (pre-releases
    of the upper bound are outside, those of the lower bound too: 1.2.0rc6 < 1.2.0)."""
    low, high = SUPPORTED_VERSIONS
    v = _version(version)
    if not (_version(low) <= v and v.release < _version(high).release):  # 1.3.0rc1 is outside too
        raise TrtllmVersionError(
            f"the 'trtllm' rollout engine supports TensorRT-LLM >= {low}, < {high}; this is {version}. "
            f"Use NGC's nvcr.io/nvidia/tensorrt-llm/release:1.2.1 image (containers/Dockerfile) or "
            f"`pip install 'tensorrt-llm>={low},<{high}'`; later releases changed the sleep, RPC and sampler APIs")


def check_llm_fields(field_names: set[str]) -> None:
    """Fail early when TorchLlmArgs lacks an argument the engine needs (a build without Ray support, ...)."""
    needed = ("orchestrator_type", "ray_worker_extension_cls", "sampler_type", "enable_sleep", "load_format")
    missing = [f for f in needed if f not in field_names]
    if missing:
        raise TrtllmVersionError(f"this TensorRT-LLM's LLM arguments lack {missing}: the 'trtllm' engine needs "
                                 f"TensorRT-LLM >= {SUPPORTED_VERSIONS[0]}, < {SUPPORTED_VERSIONS[1]}")


# ----------------------------------------------------------------------------------------------- placement
def physical_gpu(visible: str | None, local_index: int) -> str:
    """The id, in the node's CUDA numbering, of the GPU a process sees as cuda:`local_index` under
    `CUDA_VISIBLE_DEVICES=visible` (unset or empty: all GPUs, so the index itself)."""
    if local_index < 0:
        raise ValueError(f"local GPU index must be >= 0, got {local_index}")
    if not visible:
        return str(local_index)
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if local_index >= len(entries):
        raise ValueError(f"cuda:{local_index} is not among CUDA_VISIBLE_DEVICES={visible!r}")
    entry = entries[local_index]
    if not entry.isdigit():
        raise ValueError(f"CUDA_VISIBLE_DEVICES={visible!r} names GPUs by UUID / MIG id; TensorRT-LLM's Ray "
                         "workers map GPUs by integer id: launch with integer CUDA_VISIBLE_DEVICES")
    return entry


def placement_env(visible: str | None, local_index: int) -> dict[str, str]:
    """Environment to hold while building the `LLM`: a fresh local Ray cluster that sees only this rank's GPU."""
    return {"CUDA_VISIBLE_DEVICES": physical_gpu(visible, local_index), "TLLM_RAY_FORCE_LOCAL_CLUSTER": "1"}


def check_worker_devices(reported: Any, expected_uuid: str, rank: int) -> None:
    """`reported`: what `LLM._collective_rpc("report_device_id")` returned (one UUID per worker). The single
    worker must sit on this rank's GPU; otherwise every refit would fail, so fail now and say why."""
    uuids = list(reported) if isinstance(reported, (list, tuple)) else [reported]
    if uuids != [expected_uuid]:
        raise RuntimeError(
            f"rank {rank}: TensorRT-LLM's worker runs on {uuids}, this rank's GPU is {expected_uuid}. The engine "
            "starts one local Ray cluster per rank that sees only the rank's GPU; this fails when Ray was already "
            "initialised in the process or RAY_ADDRESS points at a shared cluster. Unset RAY_ADDRESS and do not "
            "call ray.init() before building the engine")


# ----------------------------------------------------------------------------------------------- LLM arguments
def llm_kwargs(*, dtype: str, max_batch_size: int, max_seq_len: int | None, kv_cache_fraction: float,
               extra: dict[str, Any]) -> dict[str, Any]:
    """Constructor arguments of `tensorrt_llm.LLM` (1.2) for an RL rollout engine. `kv_cache_config` is a
    dict for the caller to turn into `KvCacheConfig`: prefix-block reuse is off, so no KV block computed with
    old weights can ever be reused after a refit (the finalising RPC also resets the prefix cache)."""
    owned = sorted(OWNED_LLM_ARGS & set(extra))
    if owned:
        raise ValueError(f"trtllm.llm_kwargs may not set {owned}: the engine sets them itself (use the "
                         "trtllm.* options for dtype, batch size, sequence length and KV cache fraction)")
    kwargs: dict[str, Any] = dict(
        backend="pytorch", orchestrator_type="ray", ray_worker_extension_cls=WORKER_EXTENSION,
        sampler_type=SAMPLER_TYPE, enable_sleep=True, tensor_parallel_size=1, dtype=dtype,
        load_format="dummy",  # real weights arrive by refit
        max_batch_size=max_batch_size,
        kv_cache_config={"free_gpu_memory_fraction": kv_cache_fraction, "enable_block_reuse": False},
    )
    if max_seq_len is not None:
        kwargs["max_seq_len"] = max_seq_len
    kwargs.update(extra)
    return kwargs


# ----------------------------------------------------------------------------------------------- refit
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


def issue_refit(rpc: Callable[[str, tuple], Any], device_uuid: str, buckets: Iterable[list[tuple[str, torch.Tensor]]],
                checker: RefitChecker, pack: Callable[[list[tuple[str, torch.Tensor]]], list]) -> int:
    """The RPC sequence of one refit; returns the number of calls made.

    For each bucket: every tensor checked, then `rpc("update_weights", ({device_uuid: pack(bucket)},))`
    (`pack` stages the tensors on the GPU and turns them into IPC handles). After the last bucket, once the
    stream is known complete: `rpc("update_weights", (None,))`, the finalisation TensorRT-LLM's
    WorkerExtension runs on `None` (post-load hooks, prefix-cache reset). It is always sent: deciding it
    from the decorated method's signature could silently skip it."""
    calls = 0
    for bucket in buckets:
        for name, tensor in bucket:
            checker.check(name, tensor)
        rpc("update_weights", ({device_uuid: pack(bucket)},))
        calls += 1
    checker.finish()
    if calls == 0:
        raise ValueError("refit: the weight stream was empty")
    rpc("update_weights", (None,))
    return calls + 1


# ----------------------------------------------------------------------------------------------- sampling
def unsupported(params: SamplingParams) -> list[str]:
    """Reasons the engine refuses `params` (empty when it can honour them)."""
    reasons = []
    if params.min_p > 0:
        reasons.append(f"min_p={params.min_p}: TensorRT-LLM 1.2's PyTorch flow does not apply min-p (it would "
                       "sample from the untruncated distribution); use top_p / top_k or the megatron engine")
    return reasons


def refuse_unsupported(params: SamplingParams) -> None:
    """ValueError naming every parameter of `params` the engine cannot honour."""
    refuse("trtllm", unsupported(params))


def wants_logprobs(params: SamplingParams) -> bool:
    """True when the engine asks TensorRT-LLM for log-probs: temperature-only sampling, where the value it
    returns is exactly log softmax(logits / T) (see the module docstring)."""
    return not params.greedy and not params.truncates


def trtllm_requests(params: SamplingParams, first_prompt_index: int, num_prompts: int,
                    base_seed: int | None = None, *, prompt_seeds: list[int] | None = None,
                    first_sample: int = 0) -> list[dict[str, Any]]:
    """`tensorrt_llm.SamplingParams` keyword arguments for prompts first_prompt_index .. +num_prompts, one
    request per sample (prompt-major, sample-minor), each seeded from (seed, global sample index).

    `params.seed` None: `base_seed` (or a fresh random one) stands in, so samples still differ. Stops:
    TensorRT-LLM's own EOS handling is off (`ignore_eos`) and every stop id goes in `stop_token_ids` with
    `include_stop_str_in_output`, so a sample ends exactly on our stop ids and keeps the stop token. Greedy is
    top_k 1; sampling always passes top_k and top_p (TensorRT-LLM treats both unset as greedy)."""
    refuse_unsupported(params)
    check_prompt_seeds(prompt_seeds, first_sample, num_prompts)
    seed = params.seed if params.seed is not None else (base_seed if base_seed is not None else secrets.randbits(63))
    common: dict[str, Any] = dict(
        n=1, max_tokens=params.max_tokens, stop_token_ids=list(params.stop_token_ids) or None,
        include_stop_str_in_output=True, ignore_eos=True, detokenize=False,
        logprobs=1 if wants_logprobs(params) else None,
    )
    if params.greedy:
        common.update(top_k=1, top_p=None, temperature=1.0)
    else:
        common.update(temperature=params.temperature, top_k=params.top_k, top_p=params.top_p)
    requests = []
    for p in range(num_prompts):  # `prompt_seeds`: per-prompt streams (`streams.sample_key`)
        for s in range(params.n):
            requests.append(dict(common, seed=sample_key(seed, params.n, p, s, prompt_seeds=prompt_seeds,
                                                         first_sample=first_sample, first_prompt=first_prompt_index)))
    return requests


# ----------------------------------------------------------------------------------------------- outputs
def sampled_logprobs(entries: list[Any], tokens: list[int], where: str) -> list[float]:
    """The sampled tokens' log-probs from TensorRT-LLM's per-token entries (a float, or a dict
    {token_id: Logprob(logprob=..., rank=...)}). Raises on a missing token, a non-finite or a positive value."""
    if len(entries) != len(tokens):
        raise ValueError(f"{where}: TensorRT-LLM returned {len(entries)} log-probs for {len(tokens)} tokens")
    values = []
    for i, (entry, token) in enumerate(zip(entries, tokens)):
        if isinstance(entry, dict):
            if token not in entry:
                raise ValueError(f"{where}, token {i}: the log-probs hold {sorted(entry)} but not the sampled token "
                                 f"{token} (top-k log-probs of another sampler? the engine needs sampler_type="
                                 f"{SAMPLER_TYPE!r})")
            entry = entry[token]
        value = float(getattr(entry, "logprob", entry))
        if not math.isfinite(value) or value > 1e-4:
            raise ValueError(f"{where}, token {i} ({token}): TensorRT-LLM returned log-prob {value}")
        values.append(value)
    return values


def rollouts_from_outputs(outputs: list[Any], params: SamplingParams, first_prompt_index: int = 0,
                          first_sample: int = 0) -> list[Rollout]:
    """`RequestOutput`s of `trtllm_requests` (one request per sample, in order) -> Rollouts."""
    stops = set(params.stop_token_ids)
    with_logprobs = wants_logprobs(params)
    rollouts = []
    for prompt, sample, where, c, tokens in completions(outputs, params, "TensorRT-LLM", first_prompt_index,
                                                        first_sample):
        stop_reason = getattr(c, "stop_reason", None)
        stripped = c.finish_reason == "stop" and (not tokens or tokens[-1] not in stops) and stop_reason in stops
        if with_logprobs:
            if stripped:
                raise ValueError(f"{where}: TensorRT-LLM dropped the stop token {stop_reason} and its log-prob "
                                 "despite include_stop_str_in_output")
            logprobs = sampled_logprobs(list(c.logprobs or []), tokens, where)
            policy = list(logprobs)
        else:
            if stripped:
                tokens.append(int(stop_reason))
            logprobs = [0.0 if params.greedy else math.nan] * len(tokens)
            policy = [math.nan] * len(tokens)
        rollouts.append(Rollout(prompt, sample, tokens, logprobs, policy, c.finish_reason))
    return rollouts
