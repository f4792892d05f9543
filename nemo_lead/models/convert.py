"""`nemo-lead convert`: HF folder <-> nemo-lead (megatron dist_checkpointing) checkpoint.

    nemo-lead convert --from-hf DIR --out CKPT [--tp N --pp M]     # HF safetensors -> checkpoint
    nemo-lead convert --from-ckpt CKPT --to-hf DIR [--tp N --pp M] # checkpoint -> config.json, safetensors,
                                                                    # tokenizer files
How it runs at TP/PP > 1 (the choice): the conversion is an ordinary SPMD job. Started as one plain process
with tp x pp > 1, it re-launches itself on tp x pp local ranks (`nemo_lead.parallel.local.run_local`,
"spawn"); started under torchrun / srun it runs on the ranks it was given (tp x pp must divide them). Each
rank reads only its slices of the HF files and writes only its shards, so memory per process is a shard.
The layout does not change the result: dist_checkpointing checkpoints reshard on load, so a checkpoint
converted at TP1 loads at TP8, and any layout exports the same HF tensors. Use TP/PP only to spread the
memory of a big model.

Tested (tests/training/test_convert.py): tiny Qwen2 HF -> checkpoint at TP2 (re-launched on 2 ranks) ->
HF at TP1, bit-identical tensors, config and tokenizer round-tripped.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import torch
import torch.distributed as dist

from nemo_lead.checkpoint.meta import read_checkpoint_meta
from nemo_lead.models import build_gpt, export_hf_weights, load_hf_weights, read_hf_config, save_hf_folder
from nemo_lead.models.weights_checkpoint import build_from_checkpoint, save_checkpoint
from nemo_lead.parallel import check_layout, destroy_parallel, detect_launch, init_parallel, model_shape
from nemo_lead.parallel.local import run_command

DTYPE_CHOICES = ("auto", "fp32", "bf16", "fp16")


@dataclass
class ConvertConfig:
    from_hf: Optional[str] = None  # HF model folder to read (with --out)
    out: Optional[str] = None  # checkpoint folder to write
    from_ckpt: Optional[str] = None  # checkpoint folder to read (with --to-hf)
    to_hf: Optional[str] = None  # HF folder to write
    tp: int = 1
    pp: int = 1
    precision: str = "fp32"  # parameters of the checkpoint written by --from-hf: fp32 | bf16 | fp16
    dtype: str = "auto"  # tensors written by --to-hf; auto = the HF config's torch_dtype (else the params')
    max_shard_mb: float = 5000  # safetensors shard size (MiB) for --to-hf
    seed: int = 1234

    def __post_init__(self) -> None:
        to_ckpt, to_hf = self.from_hf is not None, self.from_ckpt is not None
        if to_ckpt == to_hf:
            raise ValueError("give exactly one of from_hf (--from-hf DIR --out CKPT) and from_ckpt "
                             "(--from-ckpt CKPT --to-hf DIR)")
        if to_ckpt and not self.out:
            raise ValueError("from_hf needs out (--out CKPT): where to write the checkpoint")
        if to_hf and not self.to_hf:
            raise ValueError("from_ckpt needs to_hf (--to-hf DIR): where to write the HF folder")
        for key in ("tp", "pp"):
            if getattr(self, key) < 1:
                raise ValueError(f"{key} must be >= 1, got {getattr(self, key)}")
        if self.max_shard_mb <= 0:
            raise ValueError(f"max_shard_mb must be > 0, got {self.max_shard_mb}")
        if self.precision not in ("fp32", "bf16", "fp16"):
            raise ValueError(f"precision must be fp32, bf16 or fp16, got {self.precision!r}")
        if self.dtype not in DTYPE_CHOICES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPE_CHOICES)}, got {self.dtype!r}")


def _export_dtype(cfg: ConvertConfig, hf_config: dict, param_dtype):
    names = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
             "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    if cfg.dtype != "auto":
        return names[cfg.dtype]
    return names.get(hf_config.get("dtype") or hf_config.get("torch_dtype"), param_dtype)


def _say(msg: str) -> None:
    if not dist.is_initialized() or dist.get_rank() == 0:
        print(f"[convert] {msg}", flush=True)


def convert_rank(cfg: ConvertConfig) -> None:
    """The conversion on one rank of an SPMD job (every rank calls it)."""

    if cfg.from_hf is not None:
        hf_config = read_hf_config(cfg.from_hf)
        info = init_parallel(cfg.tp, cfg.pp, seed=cfg.seed, model_config=hf_config)
        try:
            _say(f"{cfg.from_hf} -> {cfg.out} (tp {info.tp}, pp {info.pp}, dp {info.dp}, {cfg.precision})")
            model = build_gpt(hf_config, info, cfg.precision, init=False)
            load_hf_weights(model, cfg.from_hf)
            save_checkpoint(cfg.out, model, tokenizer_dir=cfg.from_hf)
            _say(f"wrote {cfg.out}")
        finally:
            destroy_parallel()
        return

    hf_config = read_checkpoint_meta(cfg.from_ckpt)["hf_config"]
    info = init_parallel(cfg.tp, cfg.pp, seed=cfg.seed, model_config=hf_config)
    try:
        _say(f"{cfg.from_ckpt} -> {cfg.to_hf} (tp {info.tp}, pp {info.pp})")
        model, _ = build_from_checkpoint(cfg.from_ckpt, info)
        dtype = _export_dtype(cfg, hf_config, model.config.params_dtype)
        tok_dir = os.path.join(cfg.from_ckpt, "tokenizer")
        save_hf_folder(
            cfg.to_hf, export_hf_weights(model, dtype), hf_config, dtype=dtype,
            tokenizer_dir=tok_dir if os.path.isdir(tok_dir) else None,
            max_shard_bytes=int(cfg.max_shard_mb * 2**20), write=info.rank == 0, log=_say,
        )
        _say(f"wrote {cfg.to_hf}")
    finally:
        destroy_parallel()


def run_convert(cfg: ConvertConfig) -> int:
    """CLI runner: convert here, or on tp x pp local ranks when started as a single plain process."""

    ranks = cfg.tp * cfg.pp

    def preflight() -> None:  # bad config / layout / files fail before starting anything
        world = detect_launch(os.environ).world_size
        hf_config = read_hf_config(cfg.from_hf) if cfg.from_hf else read_checkpoint_meta(cfg.from_ckpt)["hf_config"]
        check_layout(max(world, ranks), cfg.tp, cfg.pp, **model_shape(hf_config))

    return run_command("convert", convert_rank, (cfg,), ranks=ranks, preflight=preflight,
                       log=lambda msg: print(msg, flush=True))
