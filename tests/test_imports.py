"""Imports inside functions only where they keep a heavy or optional dependency off the start-up path.

A function-level import is a hidden edge in the module graph: a reader of the file's header does not see it,
and a cycle it hides is found only at run time. This test reads the package's sources (no module is imported,
so it takes a second) and accepts an import inside a function only when

- it loads a third-party package (torch, megatron, transformers, tensorrt_llm, ...) that the module's own
  top-level imports, followed through the package, do not already load; or
- hoisting it would close an import cycle (the target, through its top-level imports, imports this module).

Everything else (stdlib, a light package such as yaml, a nemo_lead module that adds nothing heavy) belongs at
the top of the file.
"""

import ast
import sys
import textwrap
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "nemo_lead"

# Third-party packages that import in milliseconds and are installed wherever nemo_lead is: no reason to defer.
LIGHT_THIRD_PARTY = frozenset({"yaml", "packaging"})


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking_block(node: ast.AST) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _split_imports(tree: ast.Module):
    """(module-level import nodes, function-level import nodes): module level includes imports under a
    module-level `try` / `if` and in class bodies, never under `if TYPE_CHECKING`."""
    top, inner = [], []

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if _is_type_checking_block(child):
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                (inner if in_function else top).append(child)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                walk(child, True)
            else:
                walk(child, in_function)

    walk(tree, False)
    return top, inner


class _Graph:
    """The package's module graph as its top-level imports draw it, read from source."""

    def __init__(self, root: Path):
        self.root = root
        self.package = root.name
        self.files = {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}
        self.trees = {m: ast.parse(p.read_text(), filename=str(p)) for m, p in self.files.items()}
        self.split = {m: _split_imports(t) for m, t in self.trees.items()}
        self._closure = {}

    def _parents(self, module: str):
        parts = module.split(".")
        return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]

    def targets(self, module: str, node) -> tuple[set, set]:
        """(package modules, third-party top-level names) that executing `node` inside `module` imports."""
        internal, external = set(), set()
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            if node.level:
                base = module.split(".")
                if self.files[module].name != "__init__.py":
                    base = base[:-1]
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            names = [source] + [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in self.files]
        for name in names:
            top = name.split(".")[0]
            if top == self.package:
                internal.update(p for p in self._parents(name) if p in self.files)
            elif top != "__future__" and top not in sys.stdlib_module_names:
                external.add(top)
        return internal, external

    def closure(self, module: str) -> tuple[frozenset, frozenset]:
        """(package modules, third-party names) loaded by importing `module`, top-level imports only."""
        if module in self._closure:
            return self._closure[module]
        seen, external, todo = set(), set(), [p for p in self._parents(module) if p in self.files]
        while todo:
            m = todo.pop()
            if m in seen:
                continue
            seen.add(m)
            for node in self.split[m][0]:
                internal, ext = self.targets(m, node)
                external |= ext
                todo.extend(internal - seen)
        self._closure[module] = (frozenset(seen), frozenset(external))
        return self._closure[module]

    def unjustified(self) -> list[str]:
        """Every function-level import that neither defers a heavy package nor breaks a cycle."""
        problems = []
        for module, (_, inner) in self.split.items():
            _, own_external = self.closure(module)
            for node in inner:
                internal, external = self.targets(module, node)
                deferred = set(external)
                cycle = False
                for target in internal:
                    reached, ext = self.closure(target)
                    deferred |= ext
                    cycle |= module in reached
                heavy = deferred - own_external - LIGHT_THIRD_PARTY
                if heavy or cycle:
                    continue
                line = ast.get_source_segment(self.files[module].read_text(), node) or ""
                problems.append(f"{self.files[module].relative_to(self.root.parent)}:{node.lineno}: {line}")
        return problems


def test_function_level_imports_defer_a_heavy_dependency_or_break_a_cycle():
    problems = _Graph(PACKAGE_ROOT).unjustified()
    assert not problems, "move these imports to the top of their file:\n" + "\n".join(problems)


def _package(tmp_path, files: dict[str, str]) -> Path:
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root


@pytest.mark.parametrize(
    "body, accepted",
    [
        ("import json", False),  # stdlib: top of the file
        ("import yaml", False),  # light third party
        ("import torch", True),  # heavy third party not loaded by this module
        ("from pkg import light", False),  # package module that loads nothing heavy
        ("from . import light", False),  # the same, relative
        ("from pkg.heavy import f", True),  # package module whose top level loads torch
        ("from pkg import cyclic", True),  # cyclic imports pkg.user at its top: hoisting closes a cycle
        ("from pkg.sub import deep", True),  # pkg/sub/__init__ loads megatron on the way
    ],
)
def test_the_check_tells_deferred_and_cyclic_imports_from_misplaced_ones(tmp_path, body, accepted):
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "light.py": "import json\n",
            "heavy.py": "import torch\ndef f(): pass\n",
            "cyclic.py": "from pkg import user\n",
            "sub/__init__.py": "import megatron\n",
            "sub/deep.py": "",
            "user.py": f"import os\n\ndef run():\n    {body}\n",
        },
    )
    problems = _Graph(root).unjustified()
    assert (problems == []) is accepted, problems


def test_an_import_already_paid_for_at_the_top_is_not_deferring_anything(tmp_path):
    root = _package(
        tmp_path,
        {
            "__init__.py": "",
            "heavy.py": "import torch\n",
            "user.py": "import torch\n\ndef run():\n    from pkg import heavy\n",
            "typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\ndef run():\n    import torch\n",
        },
    )
    problems = _Graph(root).unjustified()
    assert len(problems) == 1 and "user.py:4" in problems[0], problems
