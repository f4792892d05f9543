"""Load a policy to run (evaluate, sample from) from what `nemo_lead.models.source.model_source` describes:
a HF model folder or a nemo-lead checkpoint folder.

    source = model_source("path/to/DeepSeek-R1-Distill-Qwen-14B")                 # cheap: no torch, no weights
    model = load_policy(source, parallel_info, resolve_precision("auto", source))  # collective: this rank's shard

Checkpoint folders are read with `nemo_lead.models.checkpoint`, imported inside the function so that
describing a model stays free of torch.
"""

from __future__ import annotations

from typing import Any

from .source import ModelSource, ModelSourceError, resolve_precision


def load_policy(source: ModelSource, parallel: Any = None, precision: str = "auto"):
    """Collective: this rank's part of the policy (a megatron GPTModel for `parallel`'s layout), weights loaded,
    in `precision` (resolved by `resolve_precision`)."""
    if source.kind == "preset":
        raise ModelSourceError(f"{source.name!r} is a model preset (random weights): give a HF folder or a checkpoint")
    precision = resolve_precision(precision, source)
    if source.kind == "checkpoint":
        from .checkpoint import build_from_checkpoint

        model, _ = build_from_checkpoint(source.path, parallel, precision)
        return model
    from . import build_gpt, load_hf_weights

    model = build_gpt(source.hf_config, parallel, precision, init=False)
    load_hf_weights(model, source.path)
    return model
