"""The `trtllm` rollout engine: TensorRT-LLM's LLM API (PyTorch backend), refit in memory every step.

The only module that imports TensorRT-LLM (lazily, in `import_trtllm`). Written against TensorRT-LLM 1.2
(containers/Dockerfile built on the NGC image nvcr.io/nvidia/tensorrt-llm/release:1.2.1) and
these names of its API (read from its sources: llmapi/llm.py, llmapi/rlhf_utils.py, sampling_params.py):
- `tensorrt_llm.LLM(model=hf_dir, orchestrator_type="ray",
  ray_worker_extension_cls="tensorrt_llm.llmapi.rlhf_utils.WorkerExtension", load_format="dummy",
  enable_sleep=True, kv_cache_config=KvCacheConfig(free_gpu_memory_fraction=...), ...)`: in-memory weight
  updates and sleep / wake exist only with the Ray orchestrator (TensorRT-LLM starts a Ray worker per GPU);
- `LLM._collective_rpc("update_weights", args=({device_uuid: [(hf_name, reduce_tensor(t)), ...]},))`: the
  worker rebuilds each CUDA tensor from its IPC handle on its own device and loads it by HF name; a final
  `update_weights(None)` (versions whose WorkerExtension takes `ipc_handles=None`) runs the post-load
  processing. `TrtllmConfig.finalize_refit` overrides the detection;
- `LLM._collective_rpc("sleep" | "wakeup", args=(tags,))` with `ExecutorMemoryType` tags;
- `LLM.generate([{"prompt_token_ids": ids}, ...], sampling_params=[SamplingParams(...), ...])`.

Layout: each rank of the job runs its own engine (tensor_parallel_size 1, one full model copy per GPU);
every rank iterates the collective export stream and refits its own copy; a `generate` call splits the
prompts of the model-parallel group over its ranks and all-gathers the rollouts, so every rank returns the
same list, as with the megatron engine. Per-prompt seeds keep the output independent of that split.
Not run on these machines (no TensorRT-LLM, no GPU): only `trtllm_plan`'s functions are tested here. The
Ray worker must land on the rank's own GPU (the IPC handles are keyed by device UUID; a mismatch fails with
TensorRT-LLM's "Device UUID ... not found"); pass placement options through `TrtllmConfig.llm_kwargs`.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch

from .megatron_engine import _finish_param_gather, resolve_model
from .params import Rollout, SamplingParams, check_prompts
from .trtllm_plan import (
    SLEEP_TAGS,
    RefitChecker,
    llm_kwargs,
    rollouts_from_outputs,
    trtllm_sampling_kwargs,
    weight_buckets,
)

INSTALL_HINT = (
    "the 'trtllm' rollout engine needs TensorRT-LLM >= 1.2 (PyTorch backend, with Ray), which is not on the "
    "public package index: build containers/Dockerfile on NVIDIA's TensorRT-LLM release image (its header "
    "shows the command) or, inside that image, run `pip install 'nemo-lead[trtllm]'`. Use engine kind 'megatron' elsewhere."
)


class TrtllmUnavailable(ImportError):
    """TensorRT-LLM cannot be imported here (the message says how to get it)."""


def import_trtllm():
    """`tensorrt_llm`, or TrtllmUnavailable with install instructions."""
    try:
        import tensorrt_llm
    except Exception as e:  # ImportError where it is absent; OSError / RuntimeError without CUDA libraries
        raise TrtllmUnavailable(f"{INSTALL_HINT} (import failed: {type(e).__name__}: {e})") from None
    return tensorrt_llm


def _takes_finalize_call(tllm) -> bool:
    from tensorrt_llm.llmapi.rlhf_utils import WorkerExtension

    param = inspect.signature(WorkerExtension.update_weights).parameters.get("ipc_handles")
    return param is not None and param.default is None


class TrtllmEngine:
    """See the module docstring. `actor`: as for `MegatronEngine.refit`; `cfg`: a `TrtllmConfig`."""

    def __init__(self, actor: Any, cfg):
        tllm = import_trtllm()
        if not torch.cuda.is_available():
            raise RuntimeError("the 'trtllm' rollout engine needs a CUDA GPU")
        if not cfg.hf_dir:
            raise ValueError("trtllm.hf_dir must name the HF folder (config.json + tokenizer) the engine is built from")
        from tensorrt_llm.llmapi import KvCacheConfig
        from tensorrt_llm.llmapi.llm_args import TorchLlmArgs

        self.cfg = cfg
        self.model = resolve_model(actor)
        # one dtype for the engine and the refit stream: "auto" = the actor's parameter dtype
        self.dtype = next(self.model.parameters()).dtype if cfg.dtype == "auto" else getattr(torch, cfg.dtype)
        kwargs = llm_kwargs(set(TorchLlmArgs.model_fields), dtype=str(self.dtype).removeprefix("torch."),
                            max_batch_size=cfg.max_batch_size,
                            max_seq_len=cfg.max_seq_len, kv_cache_fraction=cfg.kv_cache_fraction,
                            extra=dict(cfg.llm_kwargs))
        kwargs["kv_cache_config"] = KvCacheConfig(**kwargs["kv_cache_config"])
        if kwargs.get("sleep_config") == "default":
            from tensorrt_llm.llmapi.llm_args import SleepConfig

            kwargs["sleep_config"] = SleepConfig()
        self._tllm = tllm
        self.llm = tllm.LLM(model=cfg.hf_dir, **kwargs)
        self._finalize = cfg.finalize_refit if cfg.finalize_refit is not None else _takes_finalize_call(tllm)
        self._asleep = False
        self.refit(actor)

    # ----------------------------------------------------------------------------- RolloutEngine
    def refit(self, actor: Any) -> None:
        """Stream the actor's weights (HF names, gathered over TP/PP) into the engine, bucket by bucket.

        Collective: every rank of the job calls it. Wakes the engine first if it sleeps."""
        from tensorrt_llm._torch.utils import get_device_uuid
        from torch.multiprocessing.reductions import reduce_tensor

        from nemo_lead.models import export_hf_weights, hf_shapes

        if self._asleep:
            self.wake()
        _finish_param_gather(actor)
        self.model = resolve_model(actor)
        device = torch.device("cuda", torch.cuda.current_device())
        uuid = get_device_uuid(device.index)
        checker = RefitChecker(hf_shapes(self.model.arch))
        stream = export_hf_weights(self.model, dtype=self.dtype)
        for bucket in weight_buckets(stream, int(self.cfg.refit_bucket_mb * 2**20)):
            staged = []
            for name, tensor in bucket:
                checker.check(name, tensor)
                staged.append((name, tensor.to(device, non_blocking=True)))
            torch.cuda.synchronize()
            self.llm._collective_rpc("update_weights", args=({uuid: [(n, reduce_tensor(t)) for n, t in staged]},))
            del staged
        checker.finish()
        if self._finalize:
            self.llm._collective_rpc("update_weights", args=(None,))

    def sleep(self) -> None:
        if not self._asleep:
            self.llm._collective_rpc("sleep", args=(list(SLEEP_TAGS),))
            self._asleep = True

    def wake(self) -> None:
        if self._asleep:
            self.llm._collective_rpc("wakeup", args=(list(SLEEP_TAGS),))
            self._asleep = False

    def generate(self, prompt_token_ids: list[list[int]], params: SamplingParams) -> list[Rollout]:
        import torch.distributed as dist

        check_prompts(prompt_token_ids, self.model.arch.vocab_size)
        if self._asleep:
            self.wake()
        group, size, rank = None, 1, 0
        if dist.is_initialized():
            from megatron.core import parallel_state as ps

            group = ps.get_model_parallel_group()
            size, rank = dist.get_world_size(group), dist.get_rank(group)
        per_rank = -(-len(prompt_token_ids) // size)
        start = min(rank * per_rank, len(prompt_token_ids))
        mine = prompt_token_ids[start:start + per_rank]
        rollouts: list[Rollout] = []
        if mine:
            sampling = [self._tllm.SamplingParams(**trtllm_sampling_kwargs(params, start + i)) for i in range(len(mine))]
            outputs = self.llm.generate([{"prompt_token_ids": list(ids)} for ids in mine], sampling_params=sampling,
                                        use_tqdm=False)
            rollouts = rollouts_from_outputs(outputs, params, first_prompt_index=start)
        if size == 1:
            return rollouts
        gathered: list[list[Rollout] | None] = [None] * size
        dist.all_gather_object(gathered, rollouts, group=group)
        return [r for part in gathered for r in part]
