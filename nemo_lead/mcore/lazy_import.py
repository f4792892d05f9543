"""megatron-core imported without compiling its kernels at import: torch.compile runs at their first call.

megatron-core decorates functions with `torch.compile` while `import megatron.core` runs (its fusions through
`megatron.core.jit.jit_fuser`, some modules directly). The first decoration imports torch._dynamo and
inductor: seconds of CPU in every process that imports megatron-core (more than the rest of megatron-core's
own import), for functions that a CPU run never calls and that a GPU run compiles at their first call anyway
(`torch.compile` wraps a function; the compilation happens when it is first called).

`install()` (called by `nemo_lead/__init__.py`, so in every process that imports nemo-lead before
megatron-core: the CLI, each rank, each helper process) adds an import hook for megatron-core's modules:
while one of them runs, `torch.compile` is a decorator that calls the real `torch.compile` on a plain
function, with the same options, at the function's first call (anything else, such as a module, is compiled
at once as before). The compiled function is the same; only the moment the compiler loads moves.
`torch.compile` itself is restored as soon as the import ends, so code that calls it later is untouched.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import inspect
import sys
from collections.abc import Callable
from typing import Any

PACKAGE = "megatron.core"


def compile_at_first_call(compile_fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator like `compile_fn` (torch.compile) that calls it on a decorated plain function at the
    function's first call instead of at decoration; `@decorator` and `@decorator(**options)` both work."""

    def deferred(fn: Any = None, **options: Any) -> Any:
        if fn is None:
            return lambda f: deferred(f, **options)
        if not inspect.isfunction(fn):
            return compile_fn(fn, **options)
        compiled: Callable[..., Any] | None = None

        @functools.wraps(fn)
        def call(*args: Any, **kwargs: Any) -> Any:
            nonlocal compiled
            if compiled is None:
                compiled = compile_fn(fn, **options)
            return compiled(*args, **kwargs)

        return call

    return deferred


class _DeferCompile(importlib.abc.MetaPathFinder):
    """Finds megatron-core's modules as Python would, and runs each with `torch.compile` deferred."""

    depth = 0  # megatron-core modules being executed (they import each other)

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if name != PACKAGE and not name.startswith(PACKAGE + "."):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        exec_module = spec.loader.exec_module

        def exec_deferred(module: Any) -> None:
            import torch  # megatron-core's first import would load it now anyway

            real = torch.compile
            if _DeferCompile.depth == 0:
                torch.compile = compile_at_first_call(real)
            _DeferCompile.depth += 1
            try:
                exec_module(module)
            finally:
                _DeferCompile.depth -= 1
                if _DeferCompile.depth == 0:
                    torch.compile = real

        spec.loader.exec_module = exec_deferred  # type: ignore[method-assign]  # this spec's own loader
        return spec


def install() -> None:
    """Add the hook (once per process), before megatron-core is imported; a no-op once it has been."""
    if PACKAGE in sys.modules or any(isinstance(f, _DeferCompile) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _DeferCompile())
