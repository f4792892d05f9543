"""HF `config.json` -> the architecture facts a Megatron GPT needs (Qwen2 and Llama families).

`read_hf_config` accepts a dict, a config.json path, a HF folder, or a preset name from `conf/model/`
(e.g. "r1-distill-qwen-7b", "tiny-qwen2"). `arch_from_hf` turns it into an `Arch`: the one place that knows
HF key names (including transformers 5's `rope_parameters`) and what each family implies (Qwen2 always
has q/k/v biases; Llama has `attention_bias` / `mlp_bias` switches). Anything we would silently get wrong
(sliding-window attention in use, an unsupported RoPE scaling, a different activation) is an error here.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

SUPPORTED_FAMILIES = ("qwen2", "llama")


class ModelConfigError(ValueError):
    """A HF config this package cannot build faithfully (the message names the key)."""


@dataclass(frozen=True)
class Arch:
    family: str  # "qwen2" | "llama"
    num_layers: int
    hidden_size: int
    ffn_hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    rope_theta: float
    rope_scaling_factor: float | None  # Llama-3.1 style ("llama3") scaling factor; None = no scaling
    norm_eps: float
    qkv_bias: bool  # q/k/v projections have biases (Qwen2: always)
    linear_bias: bool  # o_proj and the MLP have biases (megatron has one switch for both)
    tied_embeddings: bool
    init_std: float
    attention_dropout: float


def _preset_dir() -> Path:
    from nemo_lead.config.loading import conf_dir

    return conf_dir() / "model"


def preset_names() -> list[str]:
    return sorted(p.stem for p in _preset_dir().glob("*.yaml"))


REQUIRED_INTS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
OPTIONAL_INTS = ("num_key_value_heads", "head_dim", "max_position_embeddings")  # null = derived / default
OPTIONAL_FLOATS = ("rope_theta", "rms_norm_eps", "initializer_range", "attention_dropout")


def check_hf_config(cfg: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`cfg` when its architecture keys are there and are numbers; else ModelConfigError naming `where` (the
    file) and the keys."""
    if not isinstance(cfg, Mapping):
        raise ModelConfigError(f"{where}: a HF config is a JSON object of settings, not {type(cfg).__name__}")
    problems = [f"{k} is missing" for k in REQUIRED_INTS if k not in cfg]
    for key in (*REQUIRED_INTS, *OPTIONAL_INTS):
        v = cfg.get(key)
        if key in cfg and (v is not None or key in REQUIRED_INTS) and not (isinstance(v, int) and not isinstance(v, bool)
                                  or isinstance(v, float) and v.is_integer()):
            problems.append(f"{key} must be an integer, got {v!r}")
    for key in OPTIONAL_FLOATS:
        v = cfg.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int | float)):
            problems.append(f"{key} must be a number, got {v!r}")
    if problems:
        raise ModelConfigError(f"{where}: " + "; ".join(problems))
    return dict(cfg)


def read_hf_config(source: Mapping[str, Any] | str | os.PathLike) -> dict[str, Any]:
    """A HF config dict from a dict, a config.json file, a HF model folder, or a conf/model preset name;
    checked by `check_hf_config`."""
    if isinstance(source, Mapping):
        return check_hf_config(source, "the HF config")
    path = Path(source)
    if path.is_dir():
        path = path / "config.json"
    if path.is_file():
        try:
            return check_hf_config(json.loads(path.read_text()), str(path))
        except json.JSONDecodeError as e:
            raise ModelConfigError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    preset = _preset_dir() / f"{source}.yaml"
    if preset.is_file():
        data = yaml.safe_load(preset.read_text())
        if not isinstance(data, dict) or not isinstance(data.get("hf_config"), dict):
            raise ModelConfigError(f"{preset}: a model preset needs an `hf_config:` mapping (config.json values)")
        return check_hf_config(data["hf_config"], f"{preset}: hf_config")
    raise ModelConfigError(
        f"no HF config at {source!r}: give a config.json, a HF model folder or a preset "
        f"({', '.join(preset_names()) or 'none found in ' + str(_preset_dir())})"
    )


def _rope(cfg: Mapping[str, Any]) -> tuple[float, float | None]:
    params = cfg.get("rope_parameters") or {}
    theta = cfg.get("rope_theta", params.get("rope_theta", 10000.0))
    scaling = cfg.get("rope_scaling") or (params if params.get("rope_type", "default") != "default" else None)
    if not scaling:
        return float(theta), None
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "default":
        return float(theta), None
    # megatron-core's RoPE scaling is Llama-3.1's, with these constants fixed
    fixed = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    if kind != "llama3" or any(float(scaling.get(k, v)) != v for k, v in fixed.items()):
        raise ModelConfigError(
            f"rope_scaling {dict(scaling)} is not supported: megatron-core implements only 'llama3' scaling "
            "with low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192"
        )
    return float(theta), float(scaling["factor"])


def arch_from_hf(cfg: Mapping[str, Any]) -> Arch:
    """Validate a HF config of the Qwen2 / Llama families and extract its architecture."""
    family = cfg.get("model_type")
    if family not in SUPPORTED_FAMILIES:
        raise ModelConfigError(
            f"model_type {family!r} is not supported; supported families: {', '.join(SUPPORTED_FAMILIES)}"
        )
    check_hf_config(cfg, "the HF config")  # read_hf_config checked a file's already, naming it
    act = cfg.get("hidden_act", "silu")
    if act != "silu":
        raise ModelConfigError(f"hidden_act {act!r} is not supported (the SwiGLU MLP of these families uses silu)")
    if family == "qwen2" and cfg.get("use_sliding_window"):
        raise ModelConfigError("use_sliding_window=true is not supported (the R1-Distill models leave it off)")
    heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    head_dim = cfg.get("head_dim") or hidden // heads
    if cfg.get("head_dim") is None and hidden % heads:
        raise ModelConfigError(f"hidden_size {hidden} is not divisible by num_attention_heads {heads}")
    if family == "llama" and bool(cfg.get("attention_bias", False)) != bool(cfg.get("mlp_bias", False)):
        raise ModelConfigError(
            "attention_bias and mlp_bias differ; megatron-core has one switch (add_bias_linear) for the biases "
            "of o_proj and the MLP, so only configs where both are equal are supported"
        )
    theta, factor = _rope(cfg)
    eps = cfg.get("rms_norm_eps", 1e-6)
    return Arch(
        family=family,
        num_layers=int(cfg["num_hidden_layers"]),
        hidden_size=hidden,
        ffn_hidden_size=int(cfg["intermediate_size"]),
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(head_dim),
        vocab_size=int(cfg["vocab_size"]),
        max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
        rope_theta=theta,
        rope_scaling_factor=factor,
        norm_eps=float(eps),
        qkv_bias=True if family == "qwen2" else bool(cfg.get("attention_bias", False)),
        linear_bias=False if family == "qwen2" else bool(cfg.get("attention_bias", False)),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),  # both HF classes default to untied
        init_std=float(cfg.get("initializer_range", 0.02)),
        attention_dropout=float(cfg.get("attention_dropout", 0.0)),
    )


def padded_vocab_size(vocab_size: int, divisible_by: int = 128) -> int:
    """Vocabulary rounded up to a multiple of `divisible_by` (rows of the embedding / output layer).

    Unlike Megatron-LM we do not multiply by TP: the padded size then does not depend on the layout, so a
    checkpoint saved at one TP loads at another. Any TP that divides `divisible_by` (1, 2, 4, ... 128)
    divides the padded vocabulary; `build_gpt` checks this.
    """
    return int(math.ceil(vocab_size / divisible_by) * divisible_by)
