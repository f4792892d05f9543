"""`retain_freed_memory`: after it, a large tensor freed and allocated again reuses mapped pages (no page
faults); with glibc's defaults (or with NEMO_LEAD_RETAIN_HOST_MEMORY=0) each such tensor is mapped afresh and
faults every page in. Each case runs in its own interpreter: the setting is process-wide."""

import json
import os
import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")

PROBE = r"""
import json, resource, sys, torch
from nemo_lead.parallel.host_memory import retain_freed_memory
applied = retain_freed_memory() if sys.argv[1] == "retain" else None
n = (64 << 20) // 4  # 64 MiB: above glibc's largest dynamic mmap threshold (32 MiB)
for _ in range(20):  # warm-up: the heap grows (a few blocks) until freed blocks coalesce into one that fits
    torch.ones(n)  # allocated, touched, freed
faults = []
for _ in range(3):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    torch.ones(n)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"applied": applied, "faults": faults}))
"""


def _probe(mode: str, **env) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, timeout=120,
                         env={**os.environ, **env}, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_freed_tensors_reuse_mapped_pages():
    pages = (64 << 20) // 4096
    default = _probe("default")
    assert default["applied"] is None
    assert min(default["faults"]) > pages // 2  # glibc maps each 64 MiB tensor afresh
    retained = _probe("retain")
    assert retained["applied"] is True
    assert max(retained["faults"]) < pages // 20


def test_environment_variable_turns_it_off():
    off = _probe("retain", NEMO_LEAD_RETAIN_HOST_MEMORY="0")
    assert off["applied"] is False
    assert min(off["faults"]) > (64 << 20) // 4096 // 2
