"""Tokenizer loading from a local HF folder (tokenizer.json / tokenizer_config.json), never from the hub, and
the token ids that end a response (`end_token_ids`).

End tokens: the tokenizer's EOS, united with `eos_token_id` of the model's generation_config.json (an int
or a list). Instruct models often list more than one there: Llama-3 ends a turn with `<|eot_id|>` beside
`<|end_of_text|>`, Qwen2.5-Instruct with `<|im_end|>` beside `<|endoftext|>`, while the tokenizer names
only one of them as its EOS; stopping at the tokenizer's alone would run such a model to the token limit.
Every engine and command (rl rollouts and validation, eval, generate) takes its stop tokens from here.
generation_config.json is one of `TOKENIZER_FILES`, so it travels into a checkpoint's tokenizer/ folder and
into a HF export with the tokenizer.
"""

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


GENERATION_CONFIG = "generation_config.json"


def generation_config_eos(folder: str | Path | None) -> list[int]:
    """`eos_token_id` of `folder`/generation_config.json as a list ([] when the folder or the file or the key
    is missing); a value that is neither a token id nor a list of them is an error naming the file."""
    path = Path(folder) / GENERATION_CONFIG if folder is not None else None
    if path is None or not path.is_file():
        return []
    try:
        value = json.loads(path.read_text()).get("eos_token_id")
    except (json.JSONDecodeError, AttributeError):
        raise ValueError(f"{path}: not a JSON object") from None
    ids = [] if value is None else value if isinstance(value, list) else [value]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        raise ValueError(f"{path}: eos_token_id must be a token id or a list of token ids, got {value!r}")
    return ids


def generation_config_dir(model: str | Path) -> Path | None:
    """Where the generation_config.json of `model` lives: a HF folder itself, a nemo-lead checkpoint's
    tokenizer/ copy; None for anything else (a model preset)."""
    path = Path(model)
    if (path / "meta.json").is_file():
        return path / "tokenizer"
    return path if path.is_dir() else None


def end_token_ids(tokenizer, folders=()) -> list[int]:
    """The ids that end a response: the tokenizer's EOS first, then the `eos_token_id`s of the
    generation_config.json in each of `folders` (None entries and folders without one are skipped),
    each id once, in that order (see the module docstring)."""
    ids = [tokenizer.eos_token_id] if getattr(tokenizer, "eos_token_id", None) is not None else []
    for folder in folders:
        ids += generation_config_eos(folder)
    return list(dict.fromkeys(ids))
