"""Checkpoints: megatron `dist_checkpointing`, written atomically, loadable into any TP/PP layout.

Folder layout (one folder per saved step):

    run_dir/checkpoints/
      step_000100/
        meta.json        what was saved: format, step, the saving layout (tp/pp/dp), precision, layer spec,
                         vocab padding, the HF config (so the model can be rebuilt from the checkpoint alone)
        tokenizer/       the HF tokenizer files, copied (optional)
        model/           dist_checkpointing (torch_dist format) of {"model": model.sharded_state_dict()}
        <part>/          more parts written in the same atomic save via `save_checkpoint(extra_parts=...)`;
                         meta.json lists them. A training checkpoint (`save_train_state`) adds:
        optim/           dist_checkpointing of {"optimizer": optimizer.sharded_state_dict(model's)}: Adam
                         moments (and fp32 master weights) as sharded tensors keyed like the model's
                         parameters, so they reshard like the model; the distributed optimizer's as its
                         DP ranks' flat shards ("dp_reshardable": any DP size, the same TP x PP; see
                         _OPTIM_METADATA); param-group settings as common state
        rng/rank_NNNNN.pt  each rank's RNG states: python, numpy, torch CPU, CUDA (when present), megatron's
                         model-parallel tracker (dropout inside TP regions)
                       and in meta.json: "loop" (the caller's loop state: step, consumed samples, data
                       position), "scheduler" (the learning-rate schedule's position), "world_size"
      .tmp-step_000200/  a save in progress (or one that died): never read; removed by the next save

Atomicity: all ranks write into `.tmp-step_N`; after a barrier rank 0 renames it to `step_N` (a rename is
atomic on POSIX file systems), so a `step_N` folder is always complete. `latest_checkpoint` only sees
complete ones.

Resharding: dist_checkpointing stores global tensors with shard metadata, so a checkpoint saved at one
TP/PP layout loads at another (the padded vocabulary does not depend on TP; see
`nemo_lead.models.padded_vocab_size`). Save strategy: torch_dist (megatron's default), wrapped in
`FullyParallelSaveStrategyWrapper` over the data-parallel group when DP > 1 so replicas share the writing;
loading uses the plain strategy (each rank reads what it holds) - both work on CPU/gloo. torch_dist's
writer starts helper processes (a spawned multiprocessing Manager and forked writers), so scripts that
save must guard their entry point with `if __name__ == "__main__":`.

Resuming (`load_train_state`): model, optimizer (the distributed optimizer's: at the saving TP x PP; megatron
documents its format as DP-reshardable, not tested here) and loop state load into any layout. RNG states are
per rank and only mean something in the layout that saved them: they are restored when the world size,
TP and PP are the same, and otherwise left as seeded (the return value says which).

Tested (tests/training/test_checkpoint.py, 2 ranks on gloo): saved through DDP at TP1 (DP2) and loaded at TP2 and
PP2 with identical eval loss; atomic rename and listing. Training state (tests/training/test_resume.py):
N steps straight vs k steps, save, fresh processes, load, N - k steps give bit-identical weights and
losses (DP2, distributed optimizer, dropout, LR schedule); the (plain) optimizer state saved at TP1 x DP2
continues training at TP2 and PP2 with the same losses and updates; a distributed optimizer's state
refuses another TP x PP with a clear error.
"""

from __future__ import annotations

import json
import random
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

FORMAT_VERSION = 1
_STEP_RE = re.compile(r"^step_(\d+)$")


def checkpoint_dir(run_dir: str | Path, step: int) -> Path:
    """run_dir/checkpoints/step_{step:06d}"""
    return Path(run_dir) / "checkpoints" / f"step_{step:06d}"


def list_checkpoints(run_dir: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints of a run, oldest first, as (step, folder)."""
    root = Path(run_dir) / "checkpoints"
    found = []
    for p in root.glob("step_*") if root.is_dir() else []:
        m = _STEP_RE.match(p.name)
        if m and (p / "meta.json").is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(run_dir: str | Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1][1] if found else None


# ----------------------------------------------------------------------------- collective helpers
def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_initialized() else 0


def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_initialized() else 1


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()


@contextmanager
def atomic_dir(final: str | Path) -> Iterator[Path]:
    """Collective: every rank writes into the yielded temp folder; on success it becomes `final`.

    An existing `final` is replaced (the old one is removed only after the new one is complete). If the
    block raises, nothing is renamed and the temp folder stays for inspection until the next save.
    """
    final = Path(final)
    tmp = final.parent / f".tmp-{final.name}"
    if _rank() == 0:
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    _barrier()
    yield tmp
    _barrier()
    if _rank() == 0:
        old = final.parent / f".old-{final.name}"
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    _barrier()


# ----------------------------------------------------------------------------- the model part
def _save_strategy():
    from megatron.core import parallel_state as ps
    from megatron.core.dist_checkpointing.serialization import get_default_save_sharded_strategy
    from megatron.core.dist_checkpointing.strategies.fully_parallel import FullyParallelSaveStrategyWrapper

    strategy = get_default_save_sharded_strategy("torch_dist")
    if ps.get_data_parallel_world_size() > 1:
        strategy = FullyParallelSaveStrategyWrapper(strategy, ps.get_data_parallel_group(with_context_parallel=True))
    return strategy


def save_model_state(model, folder: str | Path) -> None:
    """Collective: write this model's sharded state into `folder` (created; must be new or empty)."""
    from megatron.core import dist_checkpointing

    folder = Path(folder)
    if _rank() == 0:
        folder.mkdir(parents=True, exist_ok=True)
    _barrier()
    dist_checkpointing.save({"model": model.sharded_state_dict()}, str(folder), sharded_strategy=_save_strategy())


def load_model_state(model, folder: str | Path) -> None:
    """Collective: fill `model` (any TP/PP layout) from a sharded state written by `save_model_state`."""
    from megatron.core import dist_checkpointing

    folder = Path(folder)
    if not (folder / "metadata.json").is_file():
        raise FileNotFoundError(f"{folder}: not a dist_checkpointing folder (no metadata.json)")
    state = dist_checkpointing.load({"model": model.sharded_state_dict()}, str(folder))
    model.load_state_dict(state["model"])


# ----------------------------------------------------------------------------- whole checkpoints
def _layout() -> dict[str, int]:
    from megatron.core import parallel_state as ps

    return {
        "tp": ps.get_tensor_model_parallel_world_size(),
        "pp": ps.get_pipeline_model_parallel_world_size(),
        "dp": ps.get_data_parallel_world_size(),
    }


def _precision(model) -> str:
    config = model.config
    if getattr(config, "fp8", None):
        return "fp8"
    return {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(config.params_dtype, "fp32")


def save_checkpoint(
    path: str | Path,
    model,
    *,
    step: int | None = None,
    tokenizer_dir: str | Path | None = None,
    extra_meta: dict[str, Any] | None = None,
    extra_parts: Mapping[str, Callable[[Path], None]] | None = None,
) -> Path:
    """Collective: save `model` (from `nemo_lead.models.build_gpt`, may be wrapped) as a complete checkpoint
    folder `path`.

    `tokenizer_dir`: a HF folder whose tokenizer files are copied into `path/tokenizer/`.
    `extra_meta`: more JSON-able entries for meta.json (loop counters, the run's config).
    `extra_parts`: name -> writer; each writer is called on every rank with the (not yet existing) folder
    `<temp>/<name>` inside the atomic write, after the model part, in order; meta.json lists the parts.
    Phase 2 saves the optimizer this way, e.g. `{"optim": lambda d: dist_checkpointing.save(...)}`, and
    reads it back from `path / "optim"`.
    """
    from nemo_lead.models import tokenizer_files, unwrap_model

    model = unwrap_model(model)
    path = Path(path)
    meta = {
        "format": FORMAT_VERSION,
        "step": step,
        "saved_layout": _layout(),
        "precision": _precision(model),
        "layer_spec": model.layer_spec_name,
        "vocab_size": model.arch.vocab_size,
        "padded_vocab_size": model.vocab_size,
        "vocab_divisible_by": model.vocab_divisible_by,
        "parts": ["model", *(extra_parts or {})],
        "hf_config": model.hf_config,
        **(extra_meta or {}),
    }
    with atomic_dir(path) as tmp:
        save_model_state(model, tmp / "model")
        for name, write in (extra_parts or {}).items():
            write(tmp / name)
        if _rank() == 0:
            if tokenizer_dir is not None:
                (tmp / "tokenizer").mkdir()
                for f in tokenizer_files(tokenizer_dir):
                    shutil.copy2(f, tmp / "tokenizer" / f.name)
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
    return path


def read_checkpoint_meta(path: str | Path) -> dict[str, Any]:
    """meta.json of a checkpoint folder (raises FileNotFoundError naming the folder if incomplete)."""
    meta_file = Path(path) / "meta.json"
    if not meta_file.is_file():
        raise FileNotFoundError(f"{path}: not a complete checkpoint (no meta.json)")
    meta = json.loads(meta_file.read_text())
    if meta.get("format") != FORMAT_VERSION:
        raise ValueError(f"{meta_file}: checkpoint format {meta.get('format')} is not {FORMAT_VERSION}")
    return meta


def load_checkpoint(path: str | Path, model) -> dict[str, Any]:
    """Collective: load a checkpoint's model part into `model` (any layout, may be wrapped); return its
    meta.json."""
    from nemo_lead.models import unwrap_model

    model = unwrap_model(model)
    meta = read_checkpoint_meta(path)
    if meta["padded_vocab_size"] != model.vocab_size:
        raise ValueError(f"{path}: saved with a padded vocabulary of {meta['padded_vocab_size']} rows, the model "
                         f"has {model.vocab_size} (build it with vocab_divisible_by={meta['vocab_divisible_by']})")
    load_model_state(model, Path(path) / "model")
    return meta


def build_from_checkpoint(path: str | Path, parallel: Any = None, precision: str | None = None):
    """Collective: build the model a checkpoint describes (its HF config and vocabulary padding) for the
    current layout and load it. Returns (model, meta). `precision` defaults to the saved one (fp8
    checkpoints keep bf16 parameters, so fp8 becomes bf16 where TE is missing)."""
    from nemo_lead.models import build_gpt, te_available

    meta = read_checkpoint_meta(path)
    precision = precision or meta["precision"]
    if precision == "fp8" and not te_available():
        precision = "bf16"
    model = build_gpt(meta["hf_config"], parallel, precision, init=False,
                      vocab_divisible_by=meta["vocab_divisible_by"])
    load_checkpoint(path, model)
    return model, meta


# ----------------------------------------------------------------------------- training state
def _rng_states() -> dict[str, Any]:
    import numpy as np
    from megatron.core import tensor_parallel

    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state() if torch.cuda.is_available() else None,
        "tracker": tensor_parallel.get_cuda_rng_tracker().get_states(),
    }


def _set_rng_states(states: dict[str, Any]) -> None:
    import numpy as np
    from megatron.core import tensor_parallel

    random.setstate(states["python"])
    np.random.set_state(states["numpy"])
    torch.set_rng_state(states["torch"])
    if states["cuda"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda"])
    tensor_parallel.get_cuda_rng_tracker().set_states(states["tracker"])


# The distributed optimizer's checkpoint format. "dp_reshardable" writes each DP rank's flat shard of the
# optimizer buffers as it is (no gather); megatron documents it as loadable at any DP size with the same
# TP x PP (we test the same layout only). The formats that would also reshard over TP / PP do not work
# with megatron-core 0.16.1 when the Adam is torch's (no Transformer Engine / apex, as on CPU):
# "fully_sharded_model_space" (its default) is refused by its own dist_checkpointing ("flattened_range is
# not supported") and "fully_reshardable" fails on load (it copies every optimizer-state key and torch
# Adam's "step" is not among the saved tensors). Plain (non-distributed) optimizers ignore the setting:
# their state is sharded like the model's parameters and reshards anywhere.
_OPTIM_METADATA = {"distrib_optim_sharding_type": "dp_reshardable"}


def _is_distributed(optimizer) -> bool:
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    return any(isinstance(o, DistributedOptimizer) for o in getattr(optimizer, "chained_optimizers", [optimizer]))


def _ensure_adam_state(optimizer) -> None:
    """Give every parameter of the torch Adam(W) inside megatron's optimizer the state its first step would
    create (step 0, zero moments), if it has none yet: the state to be loaded needs its structure (megatron
    0.16's distributed optimizer reads the common step from it and fails on a fresh optimizer when neither
    Transformer Engine nor apex provides the Adam). Loading then overwrites every value."""
    for sub in getattr(optimizer, "chained_optimizers", [optimizer]):
        inner = sub.optimizer
        if not isinstance(inner, torch.optim.Adam | torch.optim.AdamW):
            continue
        for group in inner.param_groups:
            for p in group["params"]:
                if not inner.state[p]:
                    inner.state[p] = {"step": torch.tensor(0.0), "exp_avg": torch.zeros_like(p),
                                      "exp_avg_sq": torch.zeros_like(p)}


def _restore_adam_steps(optimizer, loaded) -> None:
    """Give each parameter of a distributed optimizer's torch Adam its own step counter, set to the saved
    step. megatron-core 0.16.1 (torch's Adam, no TE / apex) restores it wrongly: one tensor shared by all
    parameters (torch's foreach Adam would then add 1 per parameter per step), which the dp_reshardable
    loader then overwrites with the value the load started from. The saved step is in the common state
    (`param_groups[*]["step"]`), where megatron's own state_dict puts it."""
    from megatron.core.optimizer.distrib_optimizer import DistributedOptimizer

    subs = getattr(optimizer, "chained_optimizers", [optimizer])
    states = [loaded] if len(subs) == 1 else [loaded[k] for k in sorted(loaded)]
    for sub, state in zip(subs, states):
        inner = sub.optimizer
        if not isinstance(sub, DistributedOptimizer) or not isinstance(inner, torch.optim.Adam | torch.optim.AdamW):
            continue
        steps = {g["step"] for g in state["optimizer"]["param_groups"] if g.get("step") is not None}
        if len(steps) != 1:
            raise ValueError(f"the optimizer checkpoint holds {len(steps)} different step counts: {sorted(steps)}")
        step = float(steps.pop())
        for param_state in inner.state.values():
            param_state["step"] = torch.tensor(step, dtype=torch.float32)


def _rng_file(folder: Path) -> Path:
    return folder / f"rank_{_rank():05d}.pt"


def save_train_state(
    path: str | Path,
    model,
    optimizer,
    *,
    step: int,
    loop_state: Mapping[str, Any] | None = None,
    scheduler=None,
    tokenizer_dir: str | Path | None = None,
    extra_meta: dict[str, Any] | None = None,
) -> Path:
    """Collective: a complete training checkpoint in `path` (atomically): the model, megatron's optimizer
    state, every rank's RNG states, `loop_state` (JSON-able: consumed samples, data-iterator position, ...)
    as meta.json["loop"] and the learning-rate scheduler's state (megatron's OptimizerParamScheduler, if
    given) as meta.json["scheduler"]. `model` may be DDP-wrapped. Take it between optimizer steps (the
    gradients are not saved)."""
    from megatron.core import dist_checkpointing

    from nemo_lead.models import unwrap_model

    gpt = unwrap_model(model)

    def write_optimizer(folder: Path) -> None:
        if _rank() == 0:
            folder.mkdir()
        _barrier()
        state = {"optimizer": optimizer.sharded_state_dict(gpt.sharded_state_dict(), metadata=_OPTIM_METADATA)}
        dist_checkpointing.save(state, str(folder), sharded_strategy=_save_strategy())

    def write_rng(folder: Path) -> None:
        if _rank() == 0:
            folder.mkdir()
        _barrier()
        torch.save(_rng_states(), _rng_file(folder))

    meta = {"loop": dict(loop_state or {}), "world_size": _world_size(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "distributed_optimizer": _is_distributed(optimizer), **(extra_meta or {})}
    return save_checkpoint(path, gpt, step=step, tokenizer_dir=tokenizer_dir, extra_meta=meta,
                           extra_parts={"optim": write_optimizer, "rng": write_rng})


def load_train_state(path: str | Path, model, optimizer=None, *, scheduler=None, load_rng: bool = True) -> dict[str, Any]:
    """Collective: load what `save_train_state` wrote into `model` (any TP/PP/DP layout), `optimizer` and
    `scheduler` (None = skip that part). RNG states are restored when `load_rng` and the layout (world
    size, TP, PP) is the saving one. Returns meta.json, whose `loop` is the saved loop state, with
    `rng_restored` (bool) added."""
    from megatron.core import dist_checkpointing

    from nemo_lead.models import unwrap_model

    path = Path(path)
    gpt = unwrap_model(model)
    meta = load_checkpoint(path, gpt)
    missing = [p for p in ("optim", "rng") if p not in meta["parts"]]
    if missing:
        raise ValueError(f"{path}: not a training checkpoint (no {' / '.join(missing)} part; "
                         "saved by save_checkpoint, not save_train_state)")
    layout = _layout()
    same_mp = all(layout[k] == meta["saved_layout"][k] for k in ("tp", "pp"))
    if optimizer is not None:
        if meta["distributed_optimizer"] != _is_distributed(optimizer):
            raise ValueError(f"{path}: saved with use_distributed_optimizer={meta['distributed_optimizer']}; load "
                             "it with the same setting (or without the optimizer state)")
        if meta["distributed_optimizer"] and not same_mp:
            saved = meta["saved_layout"]
            raise ValueError(f"{path}: the distributed optimizer's state was saved at tp={saved['tp']} "
                             f"pp={saved['pp']} and reshards over data-parallel ranks only (megatron-core 0.16.1 "
                             f"with torch's Adam); this run has tp={layout['tp']} pp={layout['pp']}. Load it at "
                             "the saving TP x PP, or load the model without the optimizer state")
        _ensure_adam_state(optimizer)
        sharded = {"optimizer": optimizer.sharded_state_dict(gpt.sharded_state_dict(), is_loading=True,
                                                             metadata=_OPTIM_METADATA)}
        state = dist_checkpointing.load(sharded, str(path / "optim"))["optimizer"]
        with torch.no_grad():  # the distributed optimizer copies into views of parameters
            optimizer.load_state_dict(state)
        _restore_adam_steps(optimizer, state)
    if scheduler is not None and meta.get("scheduler"):
        scheduler.load_state_dict(meta["scheduler"])
    meta["rng_restored"] = bool(load_rng and same_mp and _world_size() == meta["world_size"])
    if meta["rng_restored"]:
        _set_rng_states(torch.load(_rng_file(path / "rng"), weights_only=False))
    meta.setdefault("loop", {})
    return meta
