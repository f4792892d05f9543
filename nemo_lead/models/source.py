"""What a `--model` / `actor.model` names, read once for every command: a HF folder, a nemo-lead checkpoint, or a
model preset (random weights), with its HF config, tokenizer folder, saved precision and training prompt.

    source = model_source("runs/sft/checkpoints/step_000400")     # reads config.json / meta.json only
    precision = resolve_precision("auto", source)                  # the one precision rule
    source.fingerprint()                                           # what "the same model" means on resume

Cheap (reads config files, never weights), so commands check a model before any rank starts.

The precision rule (`resolve_precision`): an explicit fp32 / bf16 / fp16 / fp8 is used as given; "auto" is
fp32 on a machine without a GPU (the CPU computes in fp32; bf16 there is slower and rounds more) and, on a
GPU, the model's own half precision: fp16 when its weights were saved in fp16, bf16 otherwise (also for
fp32 weights, as GPU training and inference of these models run). Training, evaluation and generation use
the same rule.

`fingerprint()` identifies the model's content: for every config and weight file its size and a hash of
its bytes. A hash is computed once per (file, size, modification time) and kept in a small cache file, so
`touch config.json` costs one re-read and changes nothing, while rewriting a file with other bytes makes it
another model.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from nemo_lead.checkpoint.meta import read_checkpoint_meta
from nemo_lead.models.hf_config import preset_names, read_hf_config
from nemo_lead.runtime.files import write_atomic

HF_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
PRECISIONS = ("fp32", "bf16", "fp16", "fp8")  # fp8: bf16 parameters + Transformer Engine FP8 GEMMs
PRECISION_CHOICES = ("auto", *PRECISIONS)  # what a `precision` setting accepts


class ModelSourceError(ValueError):
    """`--model` does not name a usable model (the message says what the folder lacks)."""


@dataclass(frozen=True)
class ModelSource:
    name: str  # as given
    kind: str  # "hf" | "checkpoint" | "preset"
    path: str  # the resolved folder; for a preset, its name
    hf_config: dict[str, Any]
    tokenizer_dir: str | None  # None: a preset or a checkpoint without a tokenizer given (`require_tokenizer`)
    saved_precision: str  # fp32 | bf16 | fp16: the dtype of the weights on disk (a preset: fp32)
    step: int | None = None  # a checkpoint's training step
    prompt: dict[str, Any] | None = None  # the prompt settings a checkpoint was trained with (meta.json)

    def require_tokenizer(self, key: str = "tokenizer") -> str:
        """The tokenizer folder, or an error saying how to give one."""
        if self.tokenizer_dir is None:
            what = (f"{self.path}: the checkpoint has no tokenizer/ folder" if self.kind == "checkpoint"
                    else f"{self.name!r} is a model preset (random weights) without a tokenizer")
            raise ModelSourceError(f"{what}; give one with {key}=DIR")
        return self.tokenizer_dir

    def weight_files(self) -> list[Path]:
        root = Path(self.path)
        if self.kind == "hf":
            return [root / "config.json", *sorted(root.glob("*.safetensors")), *sorted(root.glob("*.bin"))]
        if self.kind == "checkpoint":
            return [root / "meta.json", *sorted(p for p in (root / "model").rglob("*") if p.is_file())]
        return []

    def fingerprint(self) -> dict[str, Any]:
        """What must not change between runs that fill one eval folder: the kind, step, tokenizer folder and
        every config / weight file's size and content hash (by path relative to the model folder)."""
        root = Path(self.path)
        files = {str(f.relative_to(root)): [f.stat().st_size, content_hash(f)] for f in self.weight_files()}
        return {"kind": self.kind, "step": self.step, "files": files, "tokenizer": self.tokenizer_dir}


def model_source(model: str, tokenizer: str | None = None, *, key: str = "--model") -> ModelSource:
    """Describe `model`: a checkpoint folder (meta.json), a HF folder (config.json) or a conf/model preset.
    `tokenizer`: a tokenizer folder that replaces the model's own. `key` names the setting in errors."""
    path = Path(model).expanduser()
    tok = Path(tokenizer).expanduser().resolve() if tokenizer else None
    if tok is not None and not tok.is_dir():
        raise ModelSourceError(f"tokenizer={tokenizer}: no such folder")
    if (path / "meta.json").is_file():
        path = path.resolve()
        meta = read_checkpoint_meta(path)
        saved = meta.get("precision", "fp32")
        tok = tok or (path / "tokenizer" if (path / "tokenizer").is_dir() else None)
        return ModelSource(name=model, kind="checkpoint", path=str(path), hf_config=meta["hf_config"],
                           tokenizer_dir=str(tok) if tok else None, saved_precision="bf16" if saved == "fp8" else saved,
                           step=meta.get("step"), prompt=meta.get("prompt"))
    if (path / "config.json").is_file():
        path = path.resolve()
        cfg = read_hf_config(path)
        return ModelSource(name=model, kind="hf", path=str(path), hf_config=cfg, tokenizer_dir=str(tok or path),
                           saved_precision=HF_DTYPES.get(cfg.get("dtype") or cfg.get("torch_dtype"), "fp32"))
    if model in preset_names() and not path.is_dir():
        return ModelSource(name=model, kind="preset", path=model, hf_config=read_hf_config(model),
                           tokenizer_dir=str(tok) if tok else None, saved_precision="fp32")
    if not model:
        raise ModelSourceError(f"{key} is required: a HF model folder, a nemo-lead checkpoint or a model preset")
    if path.is_dir():
        hint = " (a run folder? give one of its checkpoints/step_N)" if (path / "checkpoints").is_dir() else ""
        raise ModelSourceError(f"{key} {model}: neither a HF model folder (config.json) nor a nemo-lead "
                               f"checkpoint (meta.json){hint}")
    raise ModelSourceError(f"{key} {model}: no such folder, and not a model preset ({', '.join(preset_names())})")


def resolve_precision(precision: str, source: ModelSource | None = None, *, cuda: bool | None = None) -> str:
    """The precision to run `source` in (see the module docstring for the rule). `cuda`: whether a GPU is
    used (None: ask torch)."""
    if precision not in PRECISION_CHOICES:
        raise ModelSourceError(f"precision {precision!r} is not one of {', '.join(PRECISION_CHOICES)}")
    if precision != "auto":
        return precision
    if cuda is None:
        cuda = torch.cuda.is_available()
    if not cuda:
        return "fp32"
    return "fp16" if source is not None and source.saved_precision == "fp16" else "bf16"


# ----------------------------------------------------------------------------- content hashes
def _cache_file() -> Path:
    root = os.environ.get("NEMO_LEAD_CACHE") or os.path.join(os.environ.get("XDG_CACHE_HOME") or "~/.cache", "nemo-lead")
    return Path(root).expanduser() / "file_hashes.json"


def content_hash(path: Path) -> str:
    """blake2b of the file's bytes (hex, 32 characters), cached by (resolved path, size, modification time)."""
    path = Path(path).resolve()
    st = path.stat()
    key = f"{path}|{st.st_size}|{st.st_mtime_ns}"
    cache_path = _cache_file()
    try:
        cache = json.loads(cache_path.read_text())
    except (OSError, ValueError):
        cache = {}
    if key in cache:
        return cache[key]
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    cache = {k: v for k, v in cache.items() if not k.startswith(f"{path}|")}  # one entry per file
    cache[key] = digest
    try:
        write_atomic(cache_path, json.dumps(cache))
    except OSError:  # a read-only home: hashes are recomputed next time, nothing else changes
        pass
    return digest
