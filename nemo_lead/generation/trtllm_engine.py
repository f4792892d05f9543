"""The `trtllm` rollout engine: TensorRT-LLM's LLM API (PyTorch backend), refit in memory every step.

The only module that imports TensorRT-LLM (lazily, in `import_trtllm`, which also refuses releases outside
`trtllm_params.SUPPORTED_VERSIONS`). Written against TensorRT-LLM 1.2 (containers/Dockerfile on NGC's
nvcr.io/nvidia/tensorrt-llm/release:1.2.1) and these parts of its API:
- `tensorrt_llm.LLM(model=hf_dir, orchestrator_type="ray", ray_worker_extension_cls=<rlhf_utils.WorkerExtension>,
  sampler_type="TRTLLMSampler", load_format="dummy", enable_sleep=True,
  kv_cache_config=KvCacheConfig(free_gpu_memory_fraction=..., enable_block_reuse=False), ...)`: in-memory
  weight updates and sleep / wake exist only with the Ray orchestrator (one Ray worker per GPU);
- `LLM._collective_rpc(method, args=...)` (private in 1.2): "report_device_id" (the worker's device UUID),
  "update_weights" with `{device_uuid: [(hf_name, reduce_tensor(t)), ...]}` per bucket and `None` to finalise,
  "sleep" / "wakeup" with `ExecutorMemoryType` tags;
- `LLM.generate([{"prompt_token_ids": ids}, ...], sampling_params=[SamplingParams(...), ...])`.

Layout: each rank of the job runs its own engine (tensor_parallel_size 1, one full model copy per GPU) in a
local Ray cluster that sees only the rank's GPU, checked once the engine is built; every rank iterates the
collective export stream and refits its own copy; a `generate` call splits the prompts of the
model-parallel group over its ranks and all-gathers the rollouts, so every rank returns the same list, as
with the megatron engine. Per-sample seeds keep the output independent of that split. Sampling and
log-prob semantics: see `trtllm_params` (what is refused, which distribution the log-probs are under).
Not run on these machines (no TensorRT-LLM, no GPU): only `trtllm_params`'s functions are tested here.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch
import torch.distributed as dist
from torch.multiprocessing.reductions import reduce_tensor

from nemo_lead.generation.engine import RefitChecker, Rollout, SamplingParams, check_prompts
from nemo_lead.generation.megatron_engine.engine import finish_param_gather, resolve_model
from nemo_lead.generation.trtllm_params import (
    SLEEP_TAGS,
    SUPPORTED_VERSIONS,
    TrtllmVersionError,
    check_llm_fields,
    check_version,
    check_worker_devices,
    issue_refit,
    llm_kwargs,
    placement_env,
    refuse_unsupported,
    rollouts_from_outputs,
    trtllm_requests,
    weight_buckets,
)
from nemo_lead.models import export_hf_weights, hf_shapes, model_info

INSTALL_HINT = (
    f"the 'trtllm' rollout engine needs TensorRT-LLM >= {SUPPORTED_VERSIONS[0]}, < {SUPPORTED_VERSIONS[1]} "
    "(PyTorch backend, with Ray), which is not on the public package index: build containers/Dockerfile on "
    "NVIDIA's TensorRT-LLM release image (its header shows the command) or, inside that image, run "
    "`pip install 'nemo-lead[trtllm]'`. Use engine kind 'megatron' elsewhere."
)


class TrtllmUnavailable(ImportError):
    """TensorRT-LLM cannot be imported here (the message says how to get it)."""


def import_trtllm():
    """`tensorrt_llm` of a supported release; TrtllmUnavailable (install instructions) where it is absent,
    TrtllmVersionError where its release is outside the supported range."""
    try:
        import tensorrt_llm
    except Exception as e:  # ImportError where it is absent; OSError / RuntimeError without CUDA libraries
        raise TrtllmUnavailable(f"{INSTALL_HINT} (import failed: {type(e).__name__}: {e})") from None
    check_version(getattr(tensorrt_llm, "__version__", "unknown"))
    return tensorrt_llm


@contextlib.contextmanager
def _environ(overrides: dict[str, str]):
    """Set environment variables for the block (the Ray processes started inside inherit them)."""
    saved = {k: os.environ.get(k) for k in overrides}
    os.environ.update(overrides)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def build(cfg: Any, actor: Any, *, release_copy: bool = False, weight_version: int = 0) -> TrtllmEngine:
    """The engine of `cfg` (an `EngineConfig`: its `trtllm` section) over `actor`
    (`nemo_lead.generation.build_engine`); `release_copy` and `weight_version` are other engines'."""
    return TrtllmEngine(actor, cfg.trtllm)


class TrtllmEngine:
    """See the module docstring. `actor`: as for `MegatronEngine.refit`; `cfg`: a `TrtllmConfig`."""

    def __init__(self, actor: Any, cfg):
        tllm = import_trtllm()
        if not torch.cuda.is_available():
            raise RuntimeError("the 'trtllm' rollout engine needs a CUDA GPU")
        if not cfg.hf_dir:
            raise ValueError("trtllm.hf_dir must name the HF folder (config.json + tokenizer) the engine is built from")
        import ray
        from tensorrt_llm._torch.utils import get_device_uuid
        from tensorrt_llm.llmapi import KvCacheConfig
        from tensorrt_llm.llmapi.llm_args import TorchLlmArgs

        if ray.is_initialized():
            raise RuntimeError("Ray is already initialised in this process: the 'trtllm' engine starts its own local "
                               "Ray cluster per rank (pinned to the rank's GPU); build it before any ray.init()")
        check_llm_fields(set(TorchLlmArgs.model_fields))
        self.cfg = cfg
        self.model = resolve_model(actor)
        # one dtype for the engine and the refit stream: "auto" = the actor's parameter dtype
        self.dtype = next(self.model.parameters()).dtype if cfg.dtype == "auto" else getattr(torch, cfg.dtype)
        kwargs = llm_kwargs(dtype=str(self.dtype).removeprefix("torch."), max_batch_size=cfg.max_batch_size,
                            max_seq_len=cfg.max_seq_len, kv_cache_fraction=cfg.kv_cache_fraction,
                            extra=dict(cfg.llm_kwargs))
        kwargs["kv_cache_config"] = KvCacheConfig(**kwargs["kv_cache_config"])
        self._tllm = tllm
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.device_uuid = get_device_uuid(self.device.index)
        with _environ(placement_env(os.environ.get("CUDA_VISIBLE_DEVICES"), self.device.index)):
            self.llm = tllm.LLM(model=cfg.hf_dir, **kwargs)
        if not callable(getattr(self.llm, "_collective_rpc", None)):
            raise TrtllmVersionError("this TensorRT-LLM's LLM has no _collective_rpc: in-memory refit needs "
                                     f"TensorRT-LLM >= {SUPPORTED_VERSIONS[0]}, < {SUPPORTED_VERSIONS[1]}")
        check_worker_devices(self.llm._collective_rpc("report_device_id"), self.device_uuid, _rank())
        self._asleep = False
        self.replicas = None  # one engine per actor replica: it splits a call over its ranks itself
        self.weight_version: int | None = None  # not kept: each refit streams the actor's weights (`RolloutEngine`)
        self.refit(actor)

    # ----------------------------------------------------------------------------- RolloutEngine
    def refit(self, actor: Any, version: int | None = None) -> None:
        """Stream the actor's weights (HF names, gathered over TP/PP) into the engine, bucket by bucket,
        then finalise (`trtllm_params.issue_refit`). Collective: every rank of the job calls it. Wakes the
        engine first if it sleeps. `version` is not kept (`weight_version` stays None)."""
        if self._asleep:
            self.wake()
        finish_param_gather(actor)
        self.model = resolve_model(actor)
        staged: list[torch.Tensor] = []  # keeps the current bucket's GPU copies alive until the worker loaded them

        def pack(bucket):
            staged.clear()
            staged.extend(t.to(self.device, non_blocking=True) for _, t in bucket)
            torch.cuda.synchronize()
            return [(name, reduce_tensor(t)) for (name, _), t in zip(bucket, staged)]

        stream = export_hf_weights(self.model, dtype=self.dtype)
        issue_refit(lambda method, args: self.llm._collective_rpc(method, args=args), self.device_uuid,
                    weight_buckets(stream, int(self.cfg.refit_bucket_mb * 2**20)),
                    RefitChecker(hf_shapes(model_info(self.model).arch)), pack)
        staged.clear()

    def close(self) -> None:
        """Nothing to release before the job's process groups go: TensorRT-LLM's LLM and its local Ray cluster
        end with the process."""

    def concurrency(self, positions: int) -> int:
        """Sequences decoding at once: trtllm.max_batch_size (TensorRT-LLM sizes its pool from a memory fraction;
        its scheduler admits up to this many)."""
        return self.cfg.max_batch_size

    def sleep(self) -> None:
        if not self._asleep:
            self.llm._collective_rpc("sleep", args=(list(SLEEP_TAGS),))
            self._asleep = True

    def wake(self) -> None:
        if self._asleep:
            self.llm._collective_rpc("wakeup", args=(list(SLEEP_TAGS),))
            self._asleep = False

    def generate(self, prompt_token_ids: list[list[int]], params: SamplingParams, prompt_offset: int = 0, *,
                 prompt_seeds: list[int] | None = None, first_sample: int = 0) -> list[Rollout]:
        """`prompt_seeds` / `first_sample`: per-prompt streams, samples first_sample .. (`RolloutEngine.generate`).
        `prompt_offset` must be 0: this engine splits a call over its ranks itself (`replicas` is None)."""
        if prompt_offset:
            raise ValueError("the trtllm engine splits a call over its ranks itself: prompt_offset (a share of a "
                             "larger call) must be 0")
        check_prompts(prompt_token_ids, model_info(self.model).arch.vocab_size)
        group, size, rank = None, 1, 0
        if dist.is_initialized():
            from megatron.core import parallel_state as ps

            group = ps.get_model_parallel_group()
            size, rank = dist.get_world_size(group), dist.get_rank(group)
        base_seed = None
        if params.seed is None:  # one fresh base for the whole group, so the split cannot repeat streams
            base = [int.from_bytes(os.urandom(7), "little")]
            if size > 1:
                dist.broadcast_object_list(base, src=dist.get_global_rank(group, 0), group=group)
            base_seed = base[0]
        refuse_unsupported(params)
        if self._asleep:
            self.wake()
        per_rank = -(-len(prompt_token_ids) // size)
        start = min(rank * per_rank, len(prompt_token_ids))
        mine = prompt_token_ids[start:start + per_rank]
        rollouts: list[Rollout] = []
        if mine:
            requests = trtllm_requests(params, start, len(mine), base_seed, first_sample=first_sample,
                                       prompt_seeds=None if prompt_seeds is None else prompt_seeds[start:start + per_rank])
            inputs = [{"prompt_token_ids": list(ids)} for ids in mine for _ in range(params.n)]
            outputs = self.llm.generate(inputs, sampling_params=[self._tllm.SamplingParams(**r) for r in requests],
                                        use_tqdm=False)
            rollouts = rollouts_from_outputs(outputs, params, first_prompt_index=start, first_sample=first_sample)
        if size == 1:
            return rollouts
        gathered: list[list[Rollout] | None] = [None] * size
        dist.all_gather_object(gathered, rollouts, group=group)
        return [r for part in gathered for r in part]
