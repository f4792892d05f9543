"""A policy to run (evaluate, sample from): a HF model folder or a nemo-lead checkpoint folder, described
cheaply and loaded.

    source = policy_source("path/to/DeepSeek-R1-Distill-Qwen-14B")      # reads config / meta.json only
    model = load_policy(source, parallel_info, source.precision)        # collective: this rank's shard

`policy_source` is cheap (no torch, no weights), so `nemo-lead eval` checks a run folder against the model
before any rank starts. `identity` is what "the same model" means for resuming: the resolved folder, and the
name, size and modification time of every weight / config file in it -- rewriting, moving or copying the
model (without preserving times) makes it another model, and the run folder refuses to mix their samples;
so does another tokenizer folder.

Checkpoint folders are read with `nemo_lead.models.checkpoint`, imported inside the functions that need it
so that `policy_source` stays free of torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

_HF_PRECISION = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


@dataclass(frozen=True)
class PolicySource:
    path: str  # resolved folder
    kind: str  # "hf" | "checkpoint"
    hf_config: dict[str, Any]
    tokenizer_dir: str
    precision: str  # fp32 | bf16 | fp16 (resolved from "auto")
    step: int | None = None  # the checkpoint's training step

    def identity(self) -> dict[str, Any]:
        """What must not change between the runs that fill one eval folder (see the module docstring)."""
        root = Path(self.path)
        if self.kind == "hf":
            files = [root / "config.json", *sorted(root.glob("*.safetensors")), *sorted(root.glob("*.bin"))]
        else:
            files = [root / "meta.json", *sorted(p for p in (root / "model").rglob("*") if p.is_file())]
        stats = {str(f.relative_to(root)): [f.stat().st_size, f.stat().st_mtime_ns] for f in files}
        return {"path": self.path, "kind": self.kind, "step": self.step, "precision": self.precision, "files": stats,
                "tokenizer": self.tokenizer_dir}


def policy_source(model: str, precision: str = "auto", tokenizer: str | None = None) -> PolicySource:
    """Describe `model` (errors say what the folder lacks)."""
    path = Path(model).expanduser()
    if not path.is_dir():
        raise FileNotFoundError(f"--model {model}: no such folder")
    path = path.resolve()
    if (path / "meta.json").is_file():
        from nemo_lead.models.checkpoint import read_checkpoint_meta

        meta = read_checkpoint_meta(path)
        hf_config, kind, step = meta["hf_config"], "checkpoint", meta.get("step")
        saved = meta.get("precision", "fp32")
        auto = "bf16" if saved == "fp8" else saved  # fp8 checkpoints keep bf16 parameters
        tok = Path(tokenizer) if tokenizer else path / "tokenizer"
        if not tok.is_dir():
            raise FileNotFoundError(f"{path}: the checkpoint has no tokenizer/ folder; give one with tokenizer=DIR")
    elif (path / "config.json").is_file():
        from nemo_lead.models import read_hf_config

        hf_config, kind, step = read_hf_config(path), "hf", None
        auto = _HF_PRECISION.get(hf_config.get("dtype") or hf_config.get("torch_dtype"), "fp32")
        tok = Path(tokenizer) if tokenizer else path
    else:
        hint = " (a run folder? give one of its checkpoints/step_N)" if (path / "checkpoints").is_dir() else ""
        raise FileNotFoundError(f"--model {model}: neither a HF model folder (config.json) nor a nemo-lead "
                                f"checkpoint (meta.json){hint}")
    return PolicySource(path=str(path), kind=kind, hf_config=hf_config, tokenizer_dir=str(tok.resolve()),
                        precision=auto if precision == "auto" else precision, step=step)


def with_end_tokens(params: Any, tokenizer: Any, source: PolicySource) -> Any:
    """`params` (a `SamplingParams`) with the model's end tokens added to its stop tokens: the tokenizer's EOS
    and generation_config.json's eos_token_id (`nemo_lead.models.tokenizer.end_token_ids`; a checkpoint
    carries the file in tokenizer/). Used by eval and generate."""
    import dataclasses

    from .tokenizer import end_token_ids, generation_config_dir

    ends = end_token_ids(tokenizer, [generation_config_dir(source.path), source.tokenizer_dir])
    return dataclasses.replace(params, stop_token_ids=list(dict.fromkeys([*params.stop_token_ids, *ends])))


def load_policy(source: PolicySource | str, parallel: Any = None, precision: str | None = None):
    """Collective: this rank's part of the policy (a megatron GPTModel for `parallel`'s layout), weights loaded.
    `precision` None: the source's."""
    if isinstance(source, str):
        source = policy_source(source)
    precision = precision or source.precision
    if source.kind == "checkpoint":
        from nemo_lead.models.checkpoint import build_from_checkpoint

        model, _ = build_from_checkpoint(source.path, parallel, precision)
        return model
    from nemo_lead.models import build_gpt, load_hf_weights

    model = build_gpt(source.hf_config, parallel, precision, init=False)
    load_hf_weights(model, source.path)
    return model
