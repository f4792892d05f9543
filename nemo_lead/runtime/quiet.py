"""Import-time noise of megatron-core and transformers, hidden; what it meant, said once.

Without Transformer Engine and Apex (every CPU machine, GPU images without them), megatron-core warns from
several modules on import that it falls back to torch implementations. A user cannot act on those lines,
so `hide_import_noise()` filters them and `backend_note()` says in one line what runs instead. The
`nemo-lead` command calls it before it loads a command's code, and every local rank calls it at start-up,
so no command prints them. Like `nemo_lead.config.loading`, any layer may use this module.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import warnings

_NOISE = (
    r".*Transformer Engine and Apex are not installed.*",
    r".*Apex is not installed.*",
    r".*transformer_engine.*not installed.*",
    r".*Could not import .*transformer_engine.*",
    r".*TorchDistLoadShardedStrategy.*",
    r".*full scope is deprecated.*",
    r".*`load_state_dict` is deprecated.*",
    r".*Please use DTensor instead.*",
    # megatron-core 0.19: its own local spec's MLP entry does not pass ffn_hidden_size (the config's is used)
    r".*MLP requires ffn_hidden_size.*",
    # megatron-core 0.19: a deprecation note inside megatron.core.inference's own imports
    r".*imports from `dynamic_context.py` will be removed.*",
)


def hide_import_noise() -> None:
    """Filter the fallback warnings (call before importing megatron-core); quiet transformers' logger."""
    for pattern in _NOISE:
        warnings.filterwarnings("ignore", message=pattern)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if not _has_cuda():
        # megatron's tensor-parallel layers advise a CUDA setting; meaningless without a GPU
        warnings.filterwarnings("ignore", message=r".*CUDA_DEVICE_MAX_CONNECTIONS.*")
        # torch's CUDA build on a machine without a GPU logs "No CUDA runtime is found" when megatron-core
        # (0.19: tensor_parallel.random) imports torch.utils.cpp_extension: nothing to act on without a GPU
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    logging.getLogger("megatron.core").setLevel(logging.ERROR)


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def backend_note() -> str:
    """One line: which layer spec and optimizer kernels are in use."""
    te = importlib.util.find_spec("transformer_engine") is not None
    apex = importlib.util.find_spec("apex") is not None and importlib.util.find_spec("apex.optimizers") is not None
    layers = "Transformer Engine layers" if te else "local layer spec (torch SDPA attention; no Transformer Engine)"
    optim = "Apex/TE fused Adam" if (te or apex) else "torch fused AdamW (no Apex / Transformer Engine)"
    return f"using the {layers} and {optim}"
