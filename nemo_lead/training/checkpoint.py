"""Checkpoints: megatron `dist_checkpointing`, written atomically, loadable into any TP/PP layout.

Folder layout (one folder per saved step):

    run_dir/checkpoints/
      step_000100/
        meta.json        what was saved: format, step, the saving layout (tp/pp/dp), precision, layer spec,
                         vocab padding, the HF config (so the model can be rebuilt from the checkpoint alone)
        tokenizer/       the HF tokenizer files, copied (optional)
        model/           dist_checkpointing (torch_dist format) of {"model": model.sharded_state_dict()}
        <part>/          more parts written in the same atomic save via `save_checkpoint(extra_parts=...)`
                         (training adds the optimizer and RNG states this way); meta.json lists them
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

Tested (tests/training/test_checkpoint.py, 2 ranks on gloo): saved through DDP at TP1 (DP2) and loaded at TP2 and
PP2 with identical eval loss; atomic rename and listing.
"""

from __future__ import annotations

import json
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
