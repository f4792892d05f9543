"""megatron-core's fused kernels are compiled at their first call, not while `import megatron.core` runs."""

import json
import subprocess
import sys

from nemo_lead.mcore.lazy_import import compile_at_first_call


def test_the_compiler_runs_at_the_first_call_with_the_options_and_once():
    calls = []

    def fake_compile(fn, **options):
        calls.append((fn.__name__, options))
        return lambda *a, **k: ("compiled", fn(*a, **k))

    jit_fuser = compile_at_first_call(fake_compile)

    @jit_fuser
    def double(x):
        return 2 * x

    @jit_fuser(mode="max-autotune")
    def square(x):
        """x squared"""
        return x * x

    assert calls == [] and double.__name__ == "double" and square.__doc__ == "x squared"
    assert double(3) == ("compiled", 6) and double(4) == ("compiled", 8)
    assert square(5) == ("compiled", 25)
    assert calls == [("double", {}), ("square", {"mode": "max-autotune"})]


def test_importing_megatron_core_after_nemo_lead_loads_no_compiler():
    """On both megatron-core releases (0.19 also decorates a router method with torch.compile directly);
    torch.compile is itself again once the import is over."""
    code = ("import json, sys, nemo_lead, torch, megatron.core\n"
            "from megatron.core import jit\n"
            "from megatron.core.fusions import fused_bias_gelu\n"
            "print(json.dumps({'dynamo': 'torch._dynamo' in sys.modules, 'deferred': jit.jit_fuser is not torch.compile,"
            " 'original': fused_bias_gelu.bias_gelu.__wrapped__.__name__,"
            " 'restored': torch.compile.__module__ == 'torch'}))\n")
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"dynamo": False, "deferred": True, "original": "bias_gelu",
                                                     "restored": True}
