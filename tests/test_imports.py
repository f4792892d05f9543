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


# ----------------------------------------------------------------------------- cycles and layers
DESIGN_DOC = PACKAGE_ROOT.parent / "docs" / "design.md"


def _module_edges(graph: _Graph, type_only: bool = False) -> dict[str, set[str]]:
    """module -> the package modules it imports, function-level imports included (and with `type_only`, the
    imports under `if TYPE_CHECKING` too). `from pkg import sub` points at the submodule; a name read from a
    package points at its `__init__`."""
    edges = {}
    for module, (top, inner) in graph.split.items():
        out = set()
        nodes = top + inner
        if type_only:
            nodes = [n for n in ast.walk(graph.trees[module]) if isinstance(n, (ast.Import, ast.ImportFrom))]
        for node in nodes:
            if isinstance(node, ast.Import):
                out |= {a.name for a in node.names if a.name in graph.files}
                continue
            source = graph._source(module, node)
            subs = {f"{source}.{a.name}" for a in node.names if f"{source}.{a.name}" in graph.files}
            out |= subs
            if source in graph.files and (len(subs) < len(node.names) or graph.files[source].name != "__init__.py"):
                out.add(source)
        edges[module] = out - {module}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycle_between_the_package_modules():
    cycles = _cycles(_module_edges(_Graph(PACKAGE_ROOT)))
    assert not cycles, "import cycles (function-level imports included):\n" + "\n".join(" <-> ".join(c) for c in cycles)


def _package_edges(graph: _Graph, edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """package -> the packages its modules import (a module's package: its folder), leaving out imports of a
    package's own sub-packages and parents (`training.rl` importing `training`, or the reverse, is no circle
    between two concerns)."""
    def package(module: str) -> str:
        return module if graph.files[module].name == "__init__.py" else module.rpartition(".")[0]

    out: dict[str, set[str]] = {}
    for module, targets in edges.items():
        for target in targets:
            a, b = package(module), package(target)
            if a != b and not b.startswith(a + ".") and not a.startswith(b + "."):
                out.setdefault(a, set()).add(b)
    return out


def test_no_import_cycle_of_any_kind():
    """No circle through imports made only for type checking, and none between packages (folders): a package
    whose modules import another's while that one's import it back is one concern split in two."""
    graph = _Graph(PACKAGE_ROOT)
    edges = _module_edges(graph, type_only=True)
    typed = _cycles(edges)
    assert not typed, "import cycles (imports under TYPE_CHECKING included):\n" + "\n".join(" <-> ".join(c) for c in typed)
    packages = _cycles(_package_edges(graph, edges))
    assert not packages, "cycles between packages:\n" + "\n".join(" <-> ".join(c) for c in packages)


def _layers(doc: Path = DESIGN_DOC) -> dict[str, int]:
    """docs/design.md's layer table: `nemo_lead/<package>/` or `nemo_lead/<module>.py` -> its level (the
    table's `level` column; lower levels are imported by higher ones, never the reverse)."""
    levels, header = {}, None
    for line in doc.read_text().splitlines():
        if not line.startswith("|"):
            header = None  # a table ends at its first line that is not a row
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = [c.lower() for c in cells]
        elif {"level", "modules"} <= set(header) and not set(line) <= set("|-: "):
            for name in cells[header.index("modules")].split(","):
                name = name.strip().strip("`").removeprefix("nemo_lead/").removesuffix("/").removesuffix(".py")
                levels[name] = int(cells[header.index("level")])
    return levels


def _level_of(module: str, levels: dict[str, int]) -> tuple[str, int]:
    parts = module.split(".")[1:] or ["__init__"]
    for key in (".".join(parts[:2]).replace(".", "/"), parts[0]):
        if key in levels:
            return key, levels[key]
    raise AssertionError(f"{module}: not in docs/design.md's layer table (add its package or module there)")


def test_the_layer_table_names_every_module_once():
    levels = _layers()
    assert len(levels) >= 10, levels
    for module in _Graph(PACKAGE_ROOT).files:
        _level_of(module, levels)


def test_no_module_imports_a_higher_layer():
    levels = _layers()
    graph = _Graph(PACKAGE_ROOT)
    upward = []
    for module, targets in _module_edges(graph).items():
        name, level = _level_of(module, levels)
        for target in sorted(targets):
            target_name, target_level = _level_of(target, levels)
            if target_level > level:
                upward.append(f"{module} (level {level}, {name}) imports {target} (level {target_level}, {target_name})")
    assert not upward, "imports from a lower layer to a higher one (docs/design.md, Layers):\n" + "\n".join(upward)


def test_the_cycle_and_layer_checks_find_what_they_should(tmp_path):
    root = tmp_path / "pkg"
    files = {"__init__.py": "", "low.py": "def f():\n    from pkg import high\n", "high.py": "from pkg import low\n",
             "other.py": "import json\n"}
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    graph = _Graph(root)
    edges = _module_edges(graph)
    assert edges["pkg.low"] == {"pkg.high"} and edges["pkg.high"] == {"pkg.low"} and edges["pkg.other"] == set()
    assert _cycles(edges) == [["pkg.high", "pkg.low"]]
    typed = {"__init__.py": "", "a/__init__.py": "", "a/x.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
             "    from pkg.b.y import Y\n", "b/__init__.py": "", "b/y.py": "from pkg.a.x import X\n",
             "b/z.py": "import json\n", "c/__init__.py": "", "c/w.py": "from pkg.d import v\n", "d/__init__.py": "",
             "d/v.py": "from pkg.c.w import W\n", "d/u.py": "", "e/__init__.py": "", "e/s.py": "from pkg.f import t\n",
             "f/__init__.py": "", "f/t.py": "", "f/r.py": "from pkg.e import s\n"}
    root2 = tmp_path / "typed" / "pkg"
    for name, text in typed.items():
        (root2 / name).parent.mkdir(parents=True, exist_ok=True)
        (root2 / name).write_text(text)
    g2 = _Graph(root2)
    assert _cycles(_module_edges(g2)) == [["pkg.c.w", "pkg.d.v"]]  # a run-time circle
    assert _cycles(_module_edges(g2, type_only=True)) == [["pkg.a.x", "pkg.b.y"], ["pkg.c.w", "pkg.d.v"]]
    assert _cycles(_package_edges(g2, _module_edges(g2, type_only=True))) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"],
                                                                             ["pkg.e", "pkg.f"]]
    doc = tmp_path / "design.md"
    doc.write_text("## Layers\n\n| level | modules | holds |\n| --- | --- | --- |\n| 0 | `nemo_lead/runtime/files.py`, `nemo_lead/runtime/processes.py` | x |\n"
                   "| 1 | `nemo_lead/algorithms/` | y |\n\ntext\n\n| other | table |\n| --- | --- |\n| 5 | z |\n")
    levels = _layers(doc)
    assert levels == {"runtime/files": 0, "runtime/processes": 0, "algorithms": 1}
    assert _level_of("nemo_lead.algorithms.loss", levels) == ("algorithms", 1)
    assert _level_of("nemo_lead.runtime.files", levels) == ("runtime/files", 0)
    with pytest.raises(AssertionError, match="not in docs/design.md"):
        _level_of("nemo_lead.nowhere", levels)
