"""Whether vLLM can run here, for the test files of the vllm leg (scripts/test): they skip where it cannot, and
fail to import under NEMO_LEAD_REQUIRE_VLLM=1 (the vllm leg sets it), so a broken install is not a skip.

    from vllm_leg import HAVE_VLLM, needs_vllm
    pytestmark = [pytest.mark.slow, needs_vllm]
"""

import os

import pytest

try:
    from nemo_lead.generation.vllm_engine import vllm_importable

    HAVE_VLLM = vllm_importable()
except Exception:  # pragma: no cover
    HAVE_VLLM = False

if not HAVE_VLLM and os.environ.get("NEMO_LEAD_REQUIRE_VLLM") == "1":
    raise RuntimeError("NEMO_LEAD_REQUIRE_VLLM=1 but vLLM does not import here (scripts/setup_venv.sh vllm)")
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason="vLLM is not installed (the vllm leg runs these)")
