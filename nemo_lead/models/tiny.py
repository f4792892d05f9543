"""Tiny random HF models with a character-level tokenizer: the fixture of tests, the demo and the helpers.

    folder = write_tiny_model(tmp / "tiny", family="qwen2", seed=0)     # config.json, model.safetensors,
                                                                       # tokenizer files, generation_config
    tok = load_tokenizer(folder)                                       # nemo_lead.models.tokenizer

The tokenizer has ~100 tokens (docs/design.md: tiny models need a tiny vocabulary): the special tokens
`<|endoftext|>` (eos and pad), `<|unk|>`, `<|user|>`, `<|assistant|>`, `<think>`, `</think>`, the newline,
the 95 printable ASCII characters, then any `extra_tokens` (e.g. "\\boxed{" as one token). Its chat
template is one user turn -> `<|user|>{content}<|assistant|>`; with `add_generation_prompt` it also opens
`<think>\\n`, like the R1-Distill template.

Weights: transformers' own Qwen2ForCausalLM / LlamaForCausalLM, initialised from `seed`; norm weights
(1 + N(0, 0.1)) and biases (N(0, init_std)) are randomised as well, so any weight mapped to the wrong place
changes the logits. Shapes come from the presets conf/model/tiny-qwen2.yaml / tiny-llama.yaml, overridable.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from nemo_lead.models.hf_config import read_hf_config

SPECIAL_TOKENS = ("<|endoftext|>", "<|unk|>", "<|user|>", "<|assistant|>", "<think>", "</think>")
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'user' %}<|user|>{{ m['content'] }}"
    "{% elif m['role'] == 'assistant' %}<|assistant|>{{ m['content'] }}<|endoftext|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|><think>\n{% endif %}"
)


def char_tokenizer(extra_tokens: tuple[str, ...] | list[str] = ()):
    """A character-level `PreTrainedTokenizerFast` (see the module docstring for its vocabulary)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = ["\n"] + [chr(c) for c in range(32, 127)]
    extra = [t for t in extra_tokens if t not in chars and t not in SPECIAL_TOKENS]
    vocab = {tok: i for i, tok in enumerate([*SPECIAL_TOKENS, *chars, *extra])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # one piece per character
    tok.decoder = decoders.Fuse()  # join pieces without spaces
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    if extra:
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in extra])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>", unk_token="<|unk|>",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_hf_config(family: str = "qwen2", **overrides: Any) -> dict[str, Any]:
    """The tiny preset's HF config for `family` ("qwen2" | "llama"), with overrides."""
    cfg = read_hf_config(f"tiny-{family}")
    cfg.update(overrides)
    return cfg


def _randomise_norms_and_biases(model: torch.nn.Module, init_std: float) -> None:
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(torch.randn_like(p) * 0.1)
            elif name.endswith(".bias"):
                p.normal_(0.0, init_std)


def write_tiny_model(
    folder: str | Path,
    family: str = "qwen2",
    *,
    seed: int = 0,
    init_std: float = 0.02,
    extra_tokens: tuple[str, ...] | list[str] = (),
    max_shard_size: str | int | None = None,
    dtype: torch.dtype = torch.float32,
    **config_overrides: Any,
) -> Path:
    """Write a tiny random HF model folder and return its path.

    `max_shard_size` (e.g. "20KB") splits the weights into several safetensors files with a
    `model.safetensors.index.json`, as real checkpoints are. `config_overrides` are HF config keys
    (num_hidden_layers, hidden_size, tie_word_embeddings, ...).
    """
    import transformers

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = char_tokenizer(extra_tokens)
    cfg = tiny_hf_config(family, **config_overrides)
    cfg.update(vocab_size=len(tok), initializer_range=init_std, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id, bos_token_id=None)
    classes = {"qwen2": ("Qwen2Config", "Qwen2ForCausalLM"), "llama": ("LlamaConfig", "LlamaForCausalLM")}
    if family not in classes:
        raise ValueError(f"family {family!r} is not one of {', '.join(classes)}")
    config_cls, model_cls = (getattr(transformers, n) for n in classes[family])
    config = config_cls(**{k: v for k, v in cfg.items() if k != "model_type"})
    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(seed)
        model = model_cls(config)
        _randomise_norms_and_biases(model, init_std)
    finally:
        torch.random.set_rng_state(state)
    model.to(dtype)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size is not None else {}
    bars = transformers.utils.logging.is_progress_bar_enabled()
    transformers.utils.logging.disable_progress_bar()  # a fixture writes quietly
    try:
        model.save_pretrained(folder, **kwargs)
    finally:
        if bars:
            transformers.utils.logging.enable_progress_bar()
    tok.save_pretrained(folder)
    return folder
