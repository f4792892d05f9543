"""Training checkpoints: the model checkpoint of `nemo_lead.models.weights_checkpoint` (its docstring has the folder
layout) plus the optimizer (optim/), each rank's RNG states (rng/) and the loop state (meta.json "loop"),
in the same atomic folder, so a run resumes bit-identically (tests/training/test_resume.py).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from nemo_lead.checkpoint.meta import TRAINING_PARTS
from nemo_lead.mcore.compat import saved_param_groups_take_current_lrs
from nemo_lead.models import unwrap_model
from nemo_lead.models.weights_checkpoint import (
    load_checkpoint,
    parallel_layout,
    save_checkpoint,
    save_strategy,
    writing_checkpoint,
)
from nemo_lead.parallel.ranks import dist_rank, dist_world_size

if TYPE_CHECKING:
    from nemo_lead.training.actor.megatron_actor import Actor


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
    return folder / f"rank_{dist_rank():05d}.pt"


def _save_optimizer(optimizer, gpt, folder: Path) -> None:
    """Collective: megatron's optimizer state into the (existing) `folder` (dist_checkpointing, sharded like
    `gpt`)."""
    from megatron.core import dist_checkpointing

    state = {"optimizer": optimizer.sharded_state_dict(gpt.sharded_state_dict(), metadata=_OPTIM_METADATA)}
    dist_checkpointing.save(state, str(folder), sharded_strategy=save_strategy())


def _save_rng(folder: Path) -> None:
    """Each rank's RNG states, a file per rank."""
    torch.save(_rng_states(), _rng_file(folder))


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
    extra_parts: Mapping[str, Callable[[Path], None]] | None = None,
) -> Path:
    """Collective: a complete training checkpoint in `path` (atomically): the model, megatron's optimizer
    state, every rank's RNG states, `loop_state` (JSON-able: consumed samples, data-iterator position, ...)
    as meta.json["loop"] and the learning-rate scheduler's state (megatron's OptimizerParamScheduler, if
    given) as meta.json["scheduler"]; `extra_parts`: the caller's own parts, name -> writer(folder), each
    called on every rank with its (existing, empty) folder inside the atomic write (the lag queue's samples). `model` may be
    DDP-wrapped. Take it between optimizer steps (the gradients are not saved)."""
    gpt = unwrap_model(model)
    extra_parts = dict(extra_parts or {})
    meta = {"loop": dict(loop_state or {}), "world_size": dist_world_size(),
            "scheduler": scheduler.state_dict() if scheduler is not None else None,
            "distributed_optimizer": _is_distributed(optimizer), **(extra_meta or {})}
    with writing_checkpoint(path, gpt, step=step, tokenizer_dir=tokenizer_dir, extra_meta=meta,
                            parts=(*TRAINING_PARTS, *extra_parts)) as folder:
        _save_optimizer(optimizer, gpt, folder / "optim")
        _save_rng(folder / "rng")
        for name, write in extra_parts.items():
            write(folder / name)
    return Path(path)


def load_train_state(path: str | Path, model, optimizer=None, *, scheduler=None, load_rng: bool = True,
                     verify: bool = True) -> dict[str, Any]:
    """Collective: load what `save_train_state` wrote into `model` (any TP/PP/DP layout), `optimizer` and
    `scheduler` (None = skip that part). RNG states are restored when `load_rng` and the layout (world
    size, TP, PP) is the saving one. Returns meta.json, whose `loop` is the saved loop state, with
    `rng_restored` (bool) added. `verify`: check every part against the manifest first (False: the caller
    just did)."""
    from megatron.core import dist_checkpointing

    path = Path(path)
    gpt = unwrap_model(model)
    meta = load_checkpoint(path, gpt, verify=verify)
    missing = [p for p in TRAINING_PARTS if p not in meta["parts"]]
    if missing:
        raise ValueError(f"{path}: not a training checkpoint (no {' / '.join(missing)} part; "
                         "saved by save_checkpoint, not save_train_state)")
    layout = parallel_layout()
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
        saved_param_groups_take_current_lrs(optimizer, state)
        with torch.no_grad():  # the distributed optimizer copies into views of parameters
            optimizer.load_state_dict(state)
        _restore_adam_steps(optimizer, state)
    if scheduler is not None and meta.get("scheduler"):
        scheduler.load_state_dict(meta["scheduler"])
    meta["rng_restored"] = bool(load_rng and same_mp and dist_world_size() == meta["world_size"])
    if meta["rng_restored"]:
        _set_rng_states(torch.load(_rng_file(path / "rng"), weights_only=False))
    meta.setdefault("loop", {})
    return meta


# ----------------------------------------------------------------------------- the actor
def save_actor_state(
    actor: Actor,
    path: str | Path,
    *,
    step: int,
    loop_state: dict[str, Any] | None = None,
    tokenizer_dir: str | Path | None = None,
    extra_meta: dict[str, Any] | None = None,
    weights_only: bool = False,
    extra_parts: Mapping[str, Callable[[Path], None]] | None = None,
) -> Path:
    """Collective: the actor's full training state (model, optimizer, LR schedule, RNG) and the caller's
    `loop_state` as one atomic checkpoint folder (`nemo_lead.training.run.train_state.save_train_state`), with
    the caller's `extra_parts` (name -> writer(folder), every rank; full checkpoints only).

    `weights_only`: the model part, tokenizer and meta.json (with the loop state) alone, without the optimizer
    and RNG states: about a third of a full fp32 checkpoint (Adam keeps two moments per weight), a seventh
    with bf16 weights and fp32 master copies. What eval, convert, generate and a next stage read; a run
    cannot be resumed from it (`final_checkpoint=weights`)."""
    if weights_only:
        return save_checkpoint(path, actor.model, step=step, tokenizer_dir=tokenizer_dir,
                               extra_meta={"loop": dict(loop_state or {}), **(extra_meta or {})})
    return save_train_state(path, actor.model, actor.optimizer, step=step, loop_state=loop_state,
                            scheduler=actor.scheduler, tokenizer_dir=tokenizer_dir, extra_meta=extra_meta,
                            extra_parts=extra_parts)


def load_actor_state(actor: Actor, path: str | Path, *, load_optimizer: bool = True,
                     load_rng: bool = True, verify: bool = True) -> dict[str, Any]:
    """Collective: restore what `save_actor_state` wrote, into an actor of any layout. Returns the
    checkpoint's meta.json: `loop` (the loop state), `step`, `rng_restored` (False when the layout differs
    from the saving one: RNG streams are per rank).

    The learning rates are the configuration's, not the checkpoint's (a continued run may lower them with
    `--allow-change`): megatron's scheduler takes its own settings over the saved ones, but each optimizer
    parameter group also keeps a `max_lr` / `min_lr` of its own, restored with the optimizer state and
    preferred by the scheduler; they are set back to the scheduler's here."""
    meta = load_train_state(path, actor.model, actor.optimizer if load_optimizer else None,
                            scheduler=actor.scheduler if load_optimizer else None, load_rng=load_rng,
                            verify=verify)
    if load_optimizer:
        for group in actor.optimizer.param_groups:
            for key in ("max_lr", "min_lr"):
                if key in group:
                    group[key] = getattr(actor.scheduler, key)
    return meta
