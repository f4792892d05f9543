"""Checkpoint folders of the model: megatron `dist_checkpointing`, written atomically, loadable into any
TP/PP layout. The training state (optimizer, RNG, loop) is added on top by `nemo_lead.training.run.train_state`;
this module is what anything that only needs the weights (eval, generate, convert) reads.

Folder layout (one folder per saved step):

    run_dir/checkpoints/
      step_000100/
        manifest.json    every other file's size and CRC-32 (the shards' computed as they were written,
                         `nemo_lead.checkpoint.hashing`), written last (`nemo_lead.checkpoint.manifest`):
                         a checkpoint that does not match it is never loaded
        meta.json        what was saved: format, step, the saving layout (tp/pp/dp), precision, layer spec,
                         vocab padding, the HF config (so the model can be rebuilt from the checkpoint alone)
        tokenizer/       the HF tokenizer files, copied (optional)
        model/           dist_checkpointing (torch_dist format) of {"model": model.sharded_state_dict()}
        <part>/          more parts the caller writes in the same atomic save (`writing_checkpoint(parts=...)`);
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
      .damaged-step_000300/  a checkpoint that did not match its manifest, set aside by a resume (kept, not read)

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
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from nemo_lead.checkpoint.hashing import hash_writes_into, warn_unless_streamed
from nemo_lead.checkpoint.manifest import (
    CheckpointDamaged,
    check_files,
    entries_of_rank,
    remove_streamed,
    write_manifest,
)
from nemo_lead.checkpoint.meta import FORMAT_VERSION, OLD_PREFIX, TMP_PREFIX, read_checkpoint_meta
from nemo_lead.mcore.compat import checkpoint_results_queue_dies_with_us
from nemo_lead.models.gpt import build_gpt, model_info, te_available, unwrap_model
from nemo_lead.models.tokenizer import tokenizer_files
from nemo_lead.parallel.ranks import dist_barrier, dist_rank, dist_world_size


@contextmanager
def atomic_dir(final: str | Path) -> Iterator[Path]:
    """Collective: every rank writes into the yielded temp folder; on success it becomes `final`.

    An existing `final` is replaced (the old one is removed only after the new one is complete; a kill
    between the two renames leaves `.old-<name>`, which `nemo_lead.checkpoint.meta.recover_checkpoints` puts
    back). If the block raises, nothing is renamed and rank 0 removes the temp folder (a killed save's is
    removed at the next start).
    """
    final = Path(final)
    tmp = final.parent / f"{TMP_PREFIX}{final.name}"
    if dist_rank() == 0:
        final.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
    dist_barrier()
    try:
        yield tmp
    except BaseException:
        if dist_rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    dist_barrier()
    if dist_rank() == 0:
        old = final.parent / f"{OLD_PREFIX}{final.name}"
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    dist_barrier()


def _gather(value: Any) -> list[Any]:
    """Every rank's `value`, in rank order (a list of one without torch.distributed)."""
    if not dist.is_initialized():
        return [value]
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def seal_checkpoint(folder: Path) -> None:
    """Collective, last step of a save: every rank collects the entries of the files it wrote (hashed while
    written, or read back), rank 0 removes the records of the streamed hashes and writes the manifest
    (`nemo_lead.checkpoint.manifest`)."""
    dist_barrier()
    counts: dict[str, int] = {}
    entries = _gather(entries_of_rank(folder, dist_rank(), dist_world_size(), counts))
    warn_unless_streamed(folder, counts)
    if dist_rank() == 0:
        remove_streamed(folder)
        write_manifest(folder, {k: v for part in entries for k, v in part.items()})


def checkpoint_problems(path: str | Path) -> list[str]:
    """Collective: what is wrong with a checkpoint's files ([] = intact; the ranks share the reading)."""
    return sorted({p for part in _gather(check_files(path, dist_rank(), dist_world_size())) for p in part})


def verify_checkpoint(path: str | Path) -> None:
    """Collective: raise CheckpointDamaged (on every rank) unless the checkpoint matches its manifest."""
    problems = checkpoint_problems(path)
    if problems:
        raise CheckpointDamaged(path, problems)


# ----------------------------------------------------------------------------- the model part
def save_strategy():
    from megatron.core import parallel_state as ps
    from megatron.core.dist_checkpointing.serialization import get_default_save_sharded_strategy
    from megatron.core.dist_checkpointing.strategies.fully_parallel import FullyParallelSaveStrategyWrapper

    checkpoint_results_queue_dies_with_us()  # its writer's helper process must not outlive a killed rank
    strategy = get_default_save_sharded_strategy("torch_dist")
    if ps.get_data_parallel_world_size() > 1:
        strategy = FullyParallelSaveStrategyWrapper(strategy, ps.get_data_parallel_group(with_context_parallel=True))
    return strategy


# ----------------------------------------------------------------------------- whole checkpoints
def parallel_layout() -> dict[str, int]:
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


def _checkpoint_meta(model, step: int | None, parts: list[str], extra_meta: dict[str, Any] | None) -> dict[str, Any]:
    info = model_info(model)
    return {
        "format": FORMAT_VERSION,
        "step": step,
        "saved_layout": parallel_layout(),
        "precision": _precision(model),
        "layer_spec": info.layer_spec,
        "vocab_size": info.arch.vocab_size,
        "padded_vocab_size": model.vocab_size,
        "vocab_divisible_by": info.vocab_divisible_by,
        "parts": parts,
        "hf_config": info.hf_config,
        **(extra_meta or {}),
    }


@contextmanager
def writing_checkpoint(
    path: str | Path,
    model,
    *,
    step: int | None = None,
    tokenizer_dir: str | Path | None = None,
    extra_meta: dict[str, Any] | None = None,
    parts: Sequence[str] = (),
) -> Iterator[Path]:
    """Collective: write `model` (from `nemo_lead.models.build_gpt`, may be wrapped) as a complete checkpoint
    folder `path`, with more `parts` written by the caller.

    Yields the folder being written (a temporary name): its model part written, an empty sub-folder for each
    name of `parts`, which the caller fills on every rank inside the `with` block (a training checkpoint's
    optimizer and RNG states: `nemo_lead.training.run.train_state`). On leaving the block: the tokenizer files
    of `tokenizer_dir` are copied into `tokenizer/`, meta.json (with `extra_meta`'s entries, listing the parts)
    and the manifest are written, and the folder becomes `path` atomically. An exception in the block leaves
    no checkpoint. The caller drives the writing, so nothing here calls back into the training layer.
    """
    from megatron.core import dist_checkpointing

    model = unwrap_model(model)
    meta = _checkpoint_meta(model, step, ["model", *parts], extra_meta)
    with atomic_dir(path) as tmp:
        with hash_writes_into(tmp):  # the shards' CRC-32 as megatron writes them (nemo_lead.checkpoint.hashing)
            if dist_rank() == 0:
                for name in ("model", *parts):
                    (tmp / name).mkdir()
            dist_barrier()
            dist_checkpointing.save({"model": model.sharded_state_dict()}, str(tmp / "model"),
                                    sharded_strategy=save_strategy())
            yield tmp
        if dist_rank() == 0:
            if tokenizer_dir is not None:
                (tmp / "tokenizer").mkdir()
                for f in tokenizer_files(tokenizer_dir):
                    shutil.copy2(f, tmp / "tokenizer" / f.name)
            (tmp / "meta.json").write_text(json.dumps(meta, indent=2, sort_keys=True))
        seal_checkpoint(tmp)


def save_checkpoint(path: str | Path, model, *, step: int | None = None, tokenizer_dir: str | Path | None = None,
                    extra_meta: dict[str, Any] | None = None) -> Path:
    """Collective: `model`'s weights alone as a complete checkpoint folder `path` (`writing_checkpoint`
    without more parts): what convert and a weights-only final checkpoint write."""
    with writing_checkpoint(path, model, step=step, tokenizer_dir=tokenizer_dir, extra_meta=extra_meta):
        pass
    return Path(path)


def load_checkpoint(path: str | Path, model, *, verify: bool = True) -> dict[str, Any]:
    """Collective: load a checkpoint's model part into `model` (any layout, may be wrapped); return its
    meta.json. `verify`: check every file of the checkpoint against its manifest first (CheckpointDamaged);
    False when the caller just did."""

    from megatron.core import dist_checkpointing

    model = unwrap_model(model)
    if verify:
        verify_checkpoint(path)
    meta = read_checkpoint_meta(path)
    if meta["padded_vocab_size"] != model.vocab_size:
        raise ValueError(f"{path}: saved with a padded vocabulary of {meta['padded_vocab_size']} rows, the model "
                         f"has {model.vocab_size} (build it with vocab_divisible_by={meta['vocab_divisible_by']})")
    folder = Path(path) / "model"
    if not (folder / "metadata.json").is_file():
        raise FileNotFoundError(f"{folder}: not a dist_checkpointing folder (no metadata.json)")
    model.load_state_dict(dist_checkpointing.load({"model": model.sharded_state_dict()}, str(folder))["model"])
    return meta


def build_from_checkpoint(path: str | Path, parallel: Any = None, precision: str | None = None):
    """Collective: build the model a checkpoint describes (its HF config and vocabulary padding) for the
    current layout and load it. Returns (model, meta). `precision` defaults to the saved one (fp8
    checkpoints keep bf16 parameters, so fp8 becomes bf16 where TE is missing)."""
    meta = read_checkpoint_meta(path)
    precision = precision or meta["precision"]
    if precision == "fp8" and not te_available():
        precision = "bf16"
    model = build_gpt(meta["hf_config"], parallel, precision, init=False,
                      vocab_divisible_by=meta["vocab_divisible_by"])
    load_checkpoint(path, model)
    return model, meta
