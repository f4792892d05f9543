"""Load a policy to run (evaluate, sample from) from what `nemo_lead.models.source.model_source` describes:
a HF model folder or a nemo-lead checkpoint folder.

    source = model_source("path/to/DeepSeek-R1-Distill-Qwen-14B")                 # cheap: config files only
    model = load_policy(source, parallel_info, resolve_precision("auto", source))  # collective: this rank's shard

Checkpoint folders are read with `nemo_lead.models.weights_checkpoint`, imported inside the function so that
describing a model stays free of torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from nemo_lead.models import build_gpt, load_hf_weights
from nemo_lead.models.source import ModelSource, ModelSourceError, resolve_precision
from nemo_lead.models.tokenizer import end_token_ids, generation_config_dir
from nemo_lead.models.weights_checkpoint import build_from_checkpoint


def with_end_tokens(params: Any, tokenizer: Any, source: ModelSource) -> Any:
    """`params` (a `SamplingParams`) with the model's end tokens added to its stop tokens: the tokenizer's EOS
    and generation_config.json's eos_token_id (`nemo_lead.models.tokenizer.end_token_ids`; a checkpoint
    carries the file in tokenizer/). Used by eval and generate."""
    ends = end_token_ids(tokenizer, [generation_config_dir(source.path), source.require_tokenizer()])
    return dataclasses.replace(params, stop_token_ids=list(dict.fromkeys([*params.stop_token_ids, *ends])))


def load_policy(source: ModelSource, parallel: Any = None, precision: str = "auto"):
    """Collective: this rank's part of the policy (a megatron GPTModel for `parallel`'s layout), weights loaded,
    in `precision` (resolved by `resolve_precision`)."""
    if source.kind == "preset":
        raise ModelSourceError(f"{source.name!r} is a model preset (random weights): give a HF folder or a checkpoint")
    precision = resolve_precision(precision, source)
    if source.kind == "checkpoint":
        model, _ = build_from_checkpoint(source.path, parallel, precision)
        return model
    model = build_gpt(source.hf_config, parallel, precision, init=False)
    load_hf_weights(model, source.path)
    return model
