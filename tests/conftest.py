"""Shared test setup. Its presence puts tests/ on sys.path, so any test can `from distributed import
run_distributed` (the multi-rank launcher in tests/distributed.py).

The suite proves the numerics on the CPU (gloo, fp32, references computed on the CPU). On a GPU machine it
hides the GPUs, so it tests the same thing there instead of mixing devices. The GPU tests (tests/gpu) are
asked for explicitly: `NEMO_LEAD_GPU_TESTS=1 python -m pytest tests/gpu` (bench/gpu_session.sh does).
"""

import os

if os.environ.get("NEMO_LEAD_GPU_TESTS") != "1":
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
