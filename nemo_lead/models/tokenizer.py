"""Tokenizer loading from a local HF folder (tokenizer.json / tokenizer_config.json), never from the hub."""

from __future__ import annotations

import json
from pathlib import Path

TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
    "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json",
    "generation_config.json",
)


# tokenizer_class values that mean "tokenizer.json as it is", with no model-specific behaviour
GENERIC_CLASSES = ("PreTrainedTokenizerFast", "TokenizersBackend")


def load_tokenizer(hf_dir: str | Path):
    """The tokenizer of a local folder (offline). Raises FileNotFoundError naming the folder if it has no
    tokenizer files.

    Why not always `AutoTokenizer`: when tokenizer_config.json names a generic class (a tokenizer.json to be
    used as it is, like the tiny models' character tokenizer), transformers 5 still picks a class from the
    config.json's model_type if one sits beside it (Qwen2Tokenizer for model_type qwen2), whose
    pre-tokenizer drops whitespace; the same files without config.json (a checkpoint's tokenizer/ folder)
    would tokenize differently. A generic class is therefore loaded as exactly that.
    """
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    folder = Path(hf_dir)
    if not any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise FileNotFoundError(f"{folder}: no tokenizer.json / tokenizer_config.json / tokenizer.model here")
    cfg_file = folder / "tokenizer_config.json"
    declared = json.loads(cfg_file.read_text()).get("tokenizer_class") if cfg_file.is_file() else None
    if (folder / "tokenizer.json").is_file() and declared in (*GENERIC_CLASSES, None):
        return PreTrainedTokenizerFast.from_pretrained(str(folder), local_files_only=True)
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def tokenizer_files(hf_dir: str | Path) -> list[Path]:
    """The tokenizer (and generation config) files of a HF folder, to copy along with converted weights."""
    folder = Path(hf_dir)
    return [folder / f for f in TOKENIZER_FILES if (folder / f).is_file()]
