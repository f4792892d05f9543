"""models layer (docs/design.md): Megatron GPT builders from a HF config (Qwen2 / Llama families), the HF <->
Megatron weight mapping (TP- and PP-aware), tokenizer loading and the tiny-model fixture.

    model = build_gpt(hf_config_or_folder_or_preset, parallel_info, "fp32")
    load_hf_weights(model, hf_dir)
    for name, tensor in export_hf_weights(model): ...

Imports megatron-core, transformers and tokenizers only (megatron / transformers inside the functions).
"""

from nemo_lead.models.gpt import (
    PRECISIONS,
    ModelInfo,
    build_gpt,
    eval_mode,
    forward_logits,
    gather_vocab_logits,
    mask_vocab_padding,
    model_info,
    sequence_parallel_off,
    te_available,
    transformer_config,
    unwrap_model,
)
from nemo_lead.models.hf_config import (
    Arch,
    ModelConfigError,
    arch_from_hf,
    padded_vocab_size,
    preset_names,
    read_hf_config,
)
from nemo_lead.models.hf_weights import (
    HFReader,
    export_hf_weights,
    hf_names,
    hf_shapes,
    load_hf_weights,
    save_hf_folder,
)
from nemo_lead.models.tiny import char_tokenizer, tiny_hf_config, write_tiny_model
from nemo_lead.models.tokenizer import end_token_ids, generation_config_dir, load_tokenizer, tokenizer_files

__all__ = [
    "PRECISIONS", "Arch", "ModelInfo", "model_info", "HFReader", "ModelConfigError", "arch_from_hf", "build_gpt",
    "char_tokenizer", "end_token_ids", "eval_mode", "generation_config_dir",
    "export_hf_weights", "forward_logits", "gather_vocab_logits", "hf_names", "hf_shapes", "load_hf_weights", "save_hf_folder", "load_tokenizer",
    "mask_vocab_padding", "padded_vocab_size", "preset_names", "read_hf_config", "sequence_parallel_off", "te_available",
    "tiny_hf_config", "tokenizer_files", "transformer_config", "unwrap_model", "write_tiny_model",
]
