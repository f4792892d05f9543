"""Imports inside functions only where they keep a heavy or optional dependency off the start-up path.

A function-level import is a hidden edge in the module graph: a reader of the file's header does not see it,
and a cycle it hides is found only at run time. This test reads the package's sources (no module is imported,
so it takes a second) and accepts an import inside a function only when

- it loads a third-party package (torch, megatron, transformers, tensorrt_llm, ...) that the module's own
  top-level imports, followed through the package, do not already load; or
- hoisting it would close an import cycle: the target, through its top-level imports, imports this module,
  or needs a name from one of this module's packages while that package is still running its `__init__`.
  (A path that only passes through such a package's `__init__` is no cycle: the package is already in
  `sys.modules` when its submodule runs, so `from .sibling import name` works there.)

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

    def _source(self, module: str, node: ast.ImportFrom) -> str:
        """The absolute name of the module `from X import ...` reads, relative imports resolved."""
        if not node.level:
            return node.module or ""
        base = module.split(".")
        if self.files[module].name != "__init__.py":
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        return ".".join(base + ([node.module] if node.module else []))

    def targets(self, module: str, node) -> tuple[set, set]:
        """(package modules, third-party top-level names) that executing `node` inside `module` imports."""
        internal, external = set(), set()
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            source = self._source(module, node)
            names = [source] + [f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in self.files]
        for name in names:
            top = name.split(".")[0]
            if top == self.package:
                internal.update(p for p in self._parents(name) if p in self.files)
            elif top != "__future__" and top not in sys.stdlib_module_names:
                external.add(top)
        return internal, external

    def needs_namespace(self, module: str, node) -> set:
        """The package module whose executed namespace `node` reads, if any: a plain module it imports from,
        or a package it takes a name (not a submodule) from. `import a.b` and `from a import submodule` read
        none (the modules only have to be in `sys.modules`)."""
        if isinstance(node, ast.Import):
            return set()
        source = self._source(module, node)
        if source not in self.files:
            return set()
        plain = self.files[source].name != "__init__.py"
        takes_names = any(f"{source}.{a.name}" not in self.files for a in node.names)
        return {source} if plain or takes_names else set()

    def would_cycle(self, module: str, node) -> bool:
        """Whether `node`, moved to the top of `module`, would import `module` again while it runs, or read a
        name from one of its packages before that package's `__init__` has finished."""
        ancestors = set(self._parents(module)[:-1])
        if self.needs_namespace(module, node) & ancestors:
            return True
        todo, seen = list(self.targets(module, node)[0]), set()
        while todo:
            m = todo.pop()
            if m == module:
                return True
            if m in seen or m in ancestors:  # an importing package: in sys.modules already, not run again
                continue
            seen.add(m)
            for child in self.split[m][0]:
                if self.needs_namespace(m, child) & ancestors:
                    return True
                todo.extend(self.targets(m, child)[0])
        return False

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
                for target in internal:
                    deferred |= self.closure(target)[1]
                if deferred - own_external - LIGHT_THIRD_PARTY or self.would_cycle(module, node):
                    continue
                line = ast.get_source_segment(self.files[module].read_text(), node) or ""
                problems.append(f"{self.files[module].relative_to(self.root.parent)}:{node.lineno}: {line}")
        return problems


def test_function_level_imports_defer_a_heavy_dependency_or_break_a_cycle():
    problems = _Graph(PACKAGE_ROOT).unjustified()
    assert not problems, "move these imports to the top of their file:\n" + "\n".join(problems)


def _unjustified_in(tmp_path, files: dict[str, str]) -> list[str]:
    """The check's findings on a package `pkg` made of `files` (relative path -> source)."""
    root = tmp_path / "pkg"
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return _Graph(root).unjustified()


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
    problems = _unjustified_in(
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
    assert (problems == []) is accepted, problems


def test_an_import_already_paid_for_at_the_top_is_not_deferring_anything(tmp_path):
    problems = _unjustified_in(
        tmp_path,
        {
            "__init__.py": "",
            "heavy.py": "import torch\n",
            "user.py": "import torch\n\ndef run():\n    from pkg import heavy\n",
            "typed.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\ndef run():\n    import torch\n",
        },
    )
    assert len(problems) == 1 and "user.py:4" in problems[0], problems


@pytest.mark.parametrize(
    "sibling, accepted",
    [
        ("import json\n", False),  # reached only through pkg/sub/__init__, which is already importing: hoist
        ("from pkg.sub import x\n", True),  # reads a name pkg/sub/__init__ has not defined yet: a real cycle
        ("from . import c\n", False),  # another submodule of the importing package: nothing read from __init__
        ("from .a import x\n", True),  # imports the module under test while it runs
    ],
)
def test_a_path_through_the_importing_package_is_a_cycle_only_when_it_reads_from_it(tmp_path, sibling, accepted):
    problems = _unjustified_in(
        tmp_path,
        {
            "__init__.py": "",
            "sub/__init__.py": "from .a import x\n",
            "sub/a.py": "x = 1\n\ndef run():\n    from .b import y\n",
            "sub/b.py": sibling + "y = 2\n",
            "sub/c.py": "",
        },
    )
    assert (problems == []) is accepted, problems


def test_a_name_read_from_the_importing_package_itself_stays_in_the_function(tmp_path):
    problems = _unjustified_in(
        tmp_path,
        {
            "__init__.py": "",
            "sub/__init__.py": "from .a import run\nfrom .c import x\n",
            "sub/a.py": "def run():\n    from pkg.sub import x\n    from pkg.sub import c\n",
            "sub/c.py": "x = 1\n",
        },
    )
    assert len(problems) == 1 and "a.py:3" in problems[0], problems  # the submodule import may move up
