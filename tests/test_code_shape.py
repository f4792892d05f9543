"""The package's shape, read from source: few long functions, and the helpers that were written several times
defined once (what rank 0 computes reaches every rank through `nemo_lead.parallel.ranks`; the launcher's rank
is read from the environment in `nemo_lead.runtime.processes.launch_rank`)."""

import ast
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parents[1] / "nemo_lead"
LONG = 60  # lines of a function (its docstring included) above which it should be cut into named parts
MOST_LONG = 5


def _functions(root: Path = PACKAGE_ROOT):
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                yield path, node


def long_functions(root: Path = PACKAGE_ROOT) -> list[str]:
    return sorted(f"{p.relative_to(root.parent)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
                  for p, n in _functions(root) if n.end_lineno - n.lineno + 1 > LONG)


def test_at_most_five_functions_run_over_60_lines():
    found = long_functions()
    assert len(found) <= MOST_LONG, f"{len(found)} functions over {LONG} lines (at most {MOST_LONG}):\n" + "\n".join(found)


def test_the_count_sees_a_long_function(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "m.py").write_text("def short():\n    pass\n\n\ndef long():\n" + "    x = 1\n" * 60)
    assert long_functions(pkg) == ["pkg/m.py:5 long (61 lines)"]


def _calls(name: str) -> set[str]:
    """Modules (paths under nemo_lead/) that call `name` (an attribute or a plain name)."""
    found = set()
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                f = node.func
                if (isinstance(f, ast.Attribute) and f.attr == name) or (isinstance(f, ast.Name) and f.id == name):
                    found.add(path.relative_to(PACKAGE_ROOT).as_posix())
    return found


def test_rank_0_shares_a_value_in_one_place():
    # trtllm_engine broadcasts within a model-parallel group, from that group's first rank
    assert _calls("broadcast_object_list") == {"parallel/ranks.py", "generation/trtllm_engine.py"}


def test_the_launchers_rank_is_read_in_one_place():
    readers = set()
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in ("RANK", "SLURM_PROCID"):
                readers.add(path.relative_to(PACKAGE_ROOT).as_posix())
    # launch_rank; detect_launch (the whole launch: rank, world, master); vLLM's launcher is told the rank
    assert readers == {"runtime/processes.py", "parallel/state.py", "generation/vllm_engine.py"}
