"""Tokenizer loading from a local HF folder (tokenizer.json / tokenizer_config.json), never from the hub."""

from __future__ import annotations

from pathlib import Path

TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
    "chat_template.json", "vocab.json", "merges.txt", "tokenizer.model", "added_tokens.json",
    "generation_config.json",
)


def load_tokenizer(hf_dir: str | Path):
    """`AutoTokenizer` of a local folder (offline). Raises FileNotFoundError naming the folder if it has no
    tokenizer files."""
    from transformers import AutoTokenizer

    folder = Path(hf_dir)
    if not any((folder / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")):
        raise FileNotFoundError(f"{folder}: no tokenizer.json / tokenizer_config.json / tokenizer.model here")
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def tokenizer_files(hf_dir: str | Path) -> list[Path]:
    """The tokenizer (and generation config) files of a HF folder, to copy along with converted weights."""
    folder = Path(hf_dir)
    return [folder / f for f in TOKENIZER_FILES if (folder / f).is_file()]
