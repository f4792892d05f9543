"""The `vllm` rollout engine: vLLM's offline `LLM` in every rank's own process, refit in memory after each update.

The only module that imports vLLM (lazily, in `import_vllm`, which also refuses releases outside
`vllm_params.SUPPORTED_VERSIONS`). What it sets and why (construction, sampling, log-probs): `vllm_params`.

Layout. Every rank of the job builds one engine. Under torch.distributed it is vLLM's `external_launcher`
executor: the engine joins the job's world in process, and vLLM's tensor-parallel groups are runs of
`tp` consecutive ranks (vLLM splits the world as [-1, pp=1, tp], the same order as megatron's, whose TP
ranks are innermost), so an engine replica lies inside one actor replica whenever `tp` divides actor.tp
(`check_engine_layout`). The replica's ranks compute the same outputs; `replicas` = (actor replica's
ranks / tp, this rank's replica) splits each data-parallel share of the prompts over the replicas, every
sample keeping its stream (`prompt_offset`), as for the megatron engine's copies
(`nemo_lead.training.rl.rollouts`). Without torch.distributed (a script, the bench) it is vLLM's one-process
executor.

Refit (`refit`): the actor's weights, gathered over TP / PP into HF names by the same stream the other
engines use (`nemo_lead.models.export_hf_weights`, a collective every rank iterates), checked against the
model's names and shapes (`RefitChecker`; a tied model's embedding goes in as `lm_head.weight` too), go into vLLM's model in place through its worker's
`reload_weights(weights_iterator=...)` (vLLM's in-place reload: it takes checkpoint-format tensors, repacks
them into the kernels' layouts where a backend repacks, e.g. the CPU build's linears, and shards them for
the engine's TP rank). The engine runs in this process, so the tensors pass by reference: no disk, no
serialisation; the stream is consumed tensor by tensor, so at most one full HF tensor is materialised beside
the engine's own weights (`engine.refit_bucket_mb` does not apply). After every refit the prefix cache is
reset (no KV block computed with old weights is reused) and the engine's weight version is set
(`weight_version`: the optimizer step whose weights it holds; vLLM stamps each output with it and
`generate` checks the stamp).

Memory. On a GPU the engine sleeps while the actor trains (`engine.vllm.sleep_level`: 1 keeps the weights
on the host, 2 drops them; the refit that follows fills them either way) and wakes before generating: the
weights first (`refit`), then the KV cache (`wake`). vLLM's CPU worker has no sleep mode: on a CPU the engine
says so once and keeps its memory. vLLM's start resets torch's global random state: the engine saves and
restores it (and Python's and NumPy's), so building it does not change what the trainer draws.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import sys
import tempfile
import time
import warnings
import weakref
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from nemo_lead.generation.engine import RefitChecker, Rollout, SamplingParams, check_prompts
from nemo_lead.generation.megatron_engine.engine import finish_param_gather, resolve_model
from nemo_lead.generation.streams import sample_seed
from nemo_lead.generation.vllm_params import (
    INSTALL_HINT,
    check_cpu_head_size,
    check_version,
    llm_kwargs,
    refuse_unsupported,
    rollouts_from_outputs,
    vllm_requests,
)
from nemo_lead.models import export_hf_weights, hf_shapes, model_info
from nemo_lead.parallel.ranks import share_from_rank0
from nemo_lead.plan.engine_kinds import replica_layout

IN_PROCESS_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
TIED_SOURCE = "model.embed_tokens.weight"  # "0": the engine core runs in the calling process


class VllmUnavailable(ImportError):
    """vLLM cannot be imported here (the message says how to get it)."""


def import_vllm():
    """`vllm` of a supported release, its engine core set to run in process; VllmUnavailable (install
    instructions) where it is absent, VllmVersionError where its release is outside the supported range."""
    os.environ[IN_PROCESS_ENV] = "0"  # read by vLLM when an engine is built; external_launcher requires it
    try:
        import vllm
    except Exception as e:  # ImportError where it is absent; OSError / RuntimeError from a broken build
        raise VllmUnavailable(f"{INSTALL_HINT} (import failed: {type(e).__name__}: {e})") from None
    check_version(getattr(vllm, "__version__", "unknown"))
    return vllm


def vllm_importable() -> bool:
    """True when `import_vllm` would succeed (engine.kind=auto asks this)."""
    try:
        import_vllm()
    except (ImportError, RuntimeError):
        return False
    return True


def build(cfg: Any, actor: Any, *, release_copy: bool = False, weight_version: int = 0) -> VllmEngine:
    """The engine of `cfg` (an `EngineConfig`) over `actor` (`nemo_lead.generation.build_engine`): on every
    rank, replicas at the TP `replica_layout` gives for the job's layout, filled from `actor`, whose weights are
    those of optimizer step `weight_version` (`release_copy` is the megatron engine's)."""
    from megatron.core import parallel_state as ps

    tp = replica_layout(cfg, tp=ps.get_tensor_model_parallel_world_size(), pp=ps.get_pipeline_model_parallel_world_size())
    return VllmEngine(actor, cfg, tp=tp, weight_version=weight_version)


def _job_unique_cpu_shm_names(job: str) -> str | None:
    """Name the shared memory of vLLM's CPU tensor-parallel communicator after this job (`job`: the same on
    every rank, e.g. rank 0's host and process id, which no other live job has).

    vLLM's CPU build names that segment from the executor's init method, which under `external_launcher` is
    always "env://": every TP > 1 engine on a machine asks for the same /dev/shm name, so two jobs on one node
    collide, and so does any job after one that was killed before it could unlink its segment (vLLM then fails
    with "create shm in SHMManager failed. errno: 17"), so `job` goes into the name. A vLLM release without
    that communicator is left alone (None). Returns the names' prefix (`_unlink_joined_shm`)."""
    try:
        from vllm.distributed.device_communicators import cpu_communicator
    except ImportError:
        return None
    shm = getattr(cpu_communicator, "_CPUSHMDistributed", None)
    base = getattr(shm, "make_group_name", None)
    if base is None:
        return None
    prefix = f"nemo-lead-{job}-"
    base = getattr(base, "nemo_lead_base", base)

    def make_group_name(communicator) -> str:
        # vLLM's own name starts with "//" (from "env://"), which shm_open drops only at the front
        return f"{prefix}{base(communicator)}".replace("/", "")

    make_group_name.nemo_lead_base = base
    shm.make_group_name = staticmethod(make_group_name)
    return prefix


def _unlink_joined_shm(prefix: str, root: Path = Path("/dev/shm")) -> None:
    """Unlink this job's segments of vLLM's CPU TP communicator once every rank has mapped them.

    vLLM unlinks them only in a destructor that a rank leaving by a signal or `os._exit` never runs, which
    leaves 4 MiB per rank in /dev/shm for good. Every rank has created and joined its group's segments when
    its engine is built (vLLM's own barriers); after one more barrier the names can go, the mappings stay
    (POSIX shared memory lives until the last unmap). Every rank unlinks what it finds, so each node's
    segments go whichever ranks it holds."""
    dist.barrier()
    for path in root.glob(prefix + "*"):
        path.unlink(missing_ok=True)  # another rank of this node may have been first


class _RandomState:
    """torch's (CPU and CUDA), Python's and NumPy's global random state, saved and put back."""

    def __init__(self):
        self.torch = torch.get_rng_state()
        self.cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
        self.python, self.numpy = random.getstate(), np.random.get_state()

    def restore(self) -> None:
        torch.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.python)
        np.random.set_state(self.numpy)


@contextlib.contextmanager
def _keeping_default_group():
    """vLLM's engine shutdown tears down "its" distributed environment, which under external_launcher is the
    job's own default process group; keep that one (vLLM's own groups are still destroyed)."""
    real = dist.destroy_process_group

    def destroy(group=None):
        if group is not None:
            real(group)

    dist.destroy_process_group = destroy
    try:
        yield
    finally:
        dist.destroy_process_group = real


def _shutdown(core) -> None:
    """vLLM's in-process engine core shut down, the job's process group kept; after the job destroyed its
    groups (an error path, or the exit-time finalizer), vLLM's own are gone with them."""
    with _keeping_default_group():
        try:
            core.shutdown()
        except (ValueError, RuntimeError):
            if dist.is_initialized() and not sys.is_finalizing():
                raise  # the job's groups still stand: a real failure
            # otherwise vLLM's groups went with the job's: nothing of them is left to tear down


_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        if not dist.is_initialized() or dist.get_rank() == 0:
            print(f"[nemo-lead] {message}", flush=True)


class VllmEngine:
    """See the module docstring. `actor`: as for `MegatronEngine.refit`; `cfg`: the job's `EngineConfig`;
    `tp`: the engine's TP (ranks per replica); `weight_version`: the optimizer step of the actor's weights."""

    def __init__(self, actor: Any, cfg: Any, *, tp: int = 1, weight_version: int = 0):
        vllm = import_vllm()
        self.cuda = torch.cuda.is_available()
        self.model = resolve_model(actor)
        info = model_info(self.model)
        self.arch = info.arch
        if not self.cuda:
            check_cpu_head_size(self.arch.head_dim)
            if cfg.vllm.sleep_level is not None:
                raise ValueError(f"engine.vllm.sleep_level={cfg.vllm.sleep_level}: vLLM's CPU build has no sleep mode; "
                                 "leave it unset (null) on CPU")
        self.sleep_level = cfg.vllm.sleep_level or 1
        self.dtype = next(self.model.parameters()).dtype
        distributed = dist.is_initialized()
        shm_prefix = None
        if distributed:
            from megatron.core import parallel_state as ps

            group = ps.get_model_parallel_group()
            size, rank = dist.get_world_size(group), dist.get_rank(group)
            if size % tp:
                raise ValueError(f"engine.tp={tp} does not divide the actor replica's {size} ranks")
            self.replicas = (size // tp, rank // tp) if size > tp else None
            # external_launcher reads the rank from the environment (torchrun / srun and the local launcher set
            # it; a one-process job initialises torch.distributed without it)
            os.environ.setdefault("RANK", str(dist.get_rank()))
            os.environ.setdefault("LOCAL_RANK", str(torch.cuda.current_device() if self.cuda else 0))
            if tp > 1 and not self.cuda:
                shm_prefix = _job_unique_cpu_shm_names(share_from_rank0(f"{socket.gethostname()}-{os.getpid()}"))
        else:
            if tp != 1:
                raise ValueError(f"engine.tp={tp}: an engine TP > 1 needs the job's ranks (torch.distributed)")
            self.replicas = None
        self.tp = tp
        # vLLM reads the model's architecture from a HF folder: the actor's own config.json, no weights
        self._folder = tempfile.TemporaryDirectory(prefix="nemo-lead-vllm-")
        Path(self._folder.name, "config.json").write_text(json.dumps(info.hf_config))
        kwargs = llm_kwargs(model=self._folder.name, dtype=str(self.dtype).removeprefix("torch."), tp=tp,
                            external_launcher=distributed, cuda=self.cuda, max_num_seqs=cfg.max_batch_size,
                            max_model_len=cfg.vllm.max_model_len, kv_cache_gib=cfg.kv_cache_gib,
                            gpu_memory_utilization=cfg.vllm.gpu_memory_utilization,
                            enforce_eager=cfg.vllm.enforce_eager, extra=dict(cfg.vllm.llm_kwargs))
        state = _RandomState()
        try:
            self.llm = vllm.LLM(**kwargs)
        finally:
            state.restore()
        self._vllm = vllm
        if shm_prefix:
            _unlink_joined_shm(shm_prefix)
        client = self.llm.llm_engine.engine_core  # vLLM's own finalizer would destroy the job's process group
        if client._finalizer.detach() is not None:
            client._finalizer = weakref.finalize(client, _shutdown, client.engine_core)
        # unseeded calls: a base drawn once for the job (every rank builds its engine together), then one per call
        self._base_seed, self._calls = share_from_rank0(int.from_bytes(os.urandom(7), "little")), 0
        self._asleep = self._weights_asleep = False
        self.weight_version: int | None = None
        self.refit_stats: dict[str, Any] = {}
        self.refit(actor, version=weight_version)

    def close(self) -> None:
        """Shut vLLM down (its memory, its process groups), keeping the job's; idempotent. The jobs call it
        before they tear down torch.distributed."""
        llm, self.llm = getattr(self, "llm", None), None
        if llm is not None:
            llm.llm_engine.engine_core._finalizer()

    # ----------------------------------------------------------------------------- the in-process worker
    def _worker(self):
        """vLLM's worker object of this process (the in-process executor's one worker)."""
        return self.llm.llm_engine.model_executor.driver_worker.worker

    # ----------------------------------------------------------------------------- RolloutEngine
    def refit(self, actor: Any, version: int | None = None) -> None:
        """Load the actor's current weights in place (module docstring). Collective: every rank of the job
        calls it. `version`: the optimizer step of these weights (None: one more than the last)."""
        t0 = time.monotonic()
        finish_param_gather(actor)
        self.model = resolve_model(actor)
        if self._weights_asleep:
            self.llm.wake_up(tags=["weights"])
            self._weights_asleep = False
        checker = RefitChecker(hf_shapes(self.arch))
        stats = {"tensors": 0, "bytes": 0}

        def stream():
            for name, tensor in export_hf_weights(self.model, dtype=self.dtype):
                checker.check(name, tensor)
                stats["tensors"] += 1
                stats["bytes"] += tensor.numel() * tensor.element_size()
                yield name, tensor
                if name == TIED_SOURCE and self.arch.tied_embeddings:
                    # tied embeddings: HF's checkpoints have no lm_head, but vLLM's in-place reload redoes a layer's
                    # post-load processing (the CPU build's repacked GEMM weights) only for layers it is given
                    # tensors for, so without this its output layer keeps the previous weights' packed copy
                    yield "lm_head.weight", tensor

        state = _RandomState()
        try:
            self._worker().reload_weights(weights_iterator=stream())
        finally:
            state.restore()
        checker.finish()
        self.llm.reset_prefix_cache()
        self.weight_version = (self.weight_version or 0) + 1 if version is None else int(version)
        self.llm.llm_engine.set_weight_version(str(self.weight_version))
        self.refit_stats = {**stats, "seconds": time.monotonic() - t0}

    def sleep(self) -> None:
        """GPU: free the KV cache and the weights (`engine.vllm.sleep_level`) for the training step. CPU: nothing
        (no sleep mode in vLLM's CPU build)."""
        if not self.cuda:
            _say_once("engine.kind=vllm on CPU: vLLM's CPU build has no sleep mode; the engine keeps its memory "
                      "during the update")
            return
        if not self._asleep:
            self.llm.sleep(level=self.sleep_level)
            self._asleep = self._weights_asleep = True

    def wake(self) -> None:
        """Restore what `sleep` freed, before the next `generate` (the weights come back with the next refit
        when a refit follows the sleep; here whatever is still asleep)."""
        if self._asleep:
            if self._weights_asleep:
                self.llm.wake_up(tags=["weights"])
                self._weights_asleep = False
                if self.sleep_level >= 2:
                    raise RuntimeError("engine.vllm.sleep_level=2 dropped the engine's weights and no refit "
                                       "followed: refit(actor) before generating")
            self.llm.wake_up(tags=["kv_cache"])
            self._asleep = False

    def generate(self, prompt_token_ids: list[list[int]], params: SamplingParams, prompt_offset: int = 0, *,
                 prompt_seeds: list[int] | None = None, first_sample: int = 0) -> list[Rollout]:
        """Rollouts of `prompt_token_ids` on this rank's engine (its replica's share when `replicas` is set:
        the caller splits). `prompt_offset`: these prompts are prompts `prompt_offset` .. of a larger call,
        whose per-sample seeds they keep. `prompt_seeds` / `first_sample`: per-prompt streams, samples
        first_sample .. (`RolloutEngine.generate`)."""
        check_prompts(prompt_token_ids, self.arch.vocab_size)
        refuse_unsupported(params)
        self.wake()
        base_seed = None
        if params.seed is None:  # the same on every rank of a replica (vLLM's TP ranks sample in step), new per call
            self._calls += 1
            base_seed = sample_seed(self._base_seed, self._calls)
        requests = vllm_requests(params, prompt_offset, len(prompt_token_ids), base_seed, prompt_seeds=prompt_seeds,
                                 first_sample=first_sample)
        inputs = [{"prompt_token_ids": list(ids)} for ids in prompt_token_ids for _ in range(params.n)]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            outputs = self.llm.generate(inputs, [self._vllm.SamplingParams(**r) for r in requests], use_tqdm=False)
        stamps = {getattr(o, "weight_version", None) for o in outputs} - {None}
        if stamps and stamps != {str(self.weight_version)}:
            raise RuntimeError(f"vLLM generated with weight version(s) {sorted(stamps)}, the engine was refit to "
                               f"{self.weight_version}")
        return rollouts_from_outputs(outputs, params, first_sample=first_sample)  # prompt indices into this call's list

    def concurrency(self, positions: int) -> int:
        """Sequences of `positions` prompt + response tokens vLLM holds at once at their full length: its KV
        pool's tokens (blocks x block size) over `positions`, at most max_num_seqs. The paged pool gives a
        sequence blocks as it grows, so more run at once while responses are shorter; this is the count every
        admitted sequence can finish in without preemption (vLLM's own "maximum concurrency" figure)."""
        cache = self.llm.llm_engine.vllm_config.cache_config
        tokens = (cache.num_gpu_blocks or 0) * cache.block_size
        limit = self.llm.llm_engine.vllm_config.scheduler_config.max_num_seqs
        return max(1, min(limit, tokens // positions))
