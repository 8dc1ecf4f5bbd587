"""The package's import graph: every module imports alone in a fresh
interpreter, and no module reaches itself again through the package's own
imports, wherever in the module they stand (a function-level import is a
cycle too, only a later one). Imports under ``if TYPE_CHECKING:`` are for
the type checker and do not count."""

import ast
import os
import subprocess
import sys

import pytest

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src")
PKG = os.path.join(SRC, "kubicle")
MODULES = sorted(f[:-3] for f in os.listdir(PKG) if f.endswith(".py") and f != "__init__.py")


def _type_checking_only(node: ast.AST, parents: dict) -> bool:
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return True
    return False


def package_imports(module: str) -> set:
    """The package's own modules that ``module`` imports, anywhere in it."""
    with open(os.path.join(PKG, module + ".py")) as f:
        tree = ast.parse(f.read())
    parents = {c: p for p in ast.walk(tree) for c in ast.iter_child_nodes(p)}
    out = set()
    for node in ast.walk(tree):
        if _type_checking_only(node, parents):
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:                       # from .x import y
                out.add(node.module.split(".")[0])
            else:                                 # from . import x, y
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and \
                node.module.split(".")[0] == "kubicle" and node.level == 0:
            parts = node.module.split(".")
            out.update([parts[1]] if len(parts) > 1 else [a.name for a in node.names])
        elif isinstance(node, ast.Import):
            for a in node.names:
                parts = a.name.split(".")
                if parts[0] == "kubicle" and len(parts) > 1:
                    out.add(parts[1])
    return {m for m in out if m in MODULES}


def find_cycles(graph: dict) -> list:
    """Every cycle, as the path that closes it (depth-first, each node's
    edges in order)."""
    cycles, state = [], {}

    def visit(n: str, path: list) -> None:
        state[n] = "open"
        for m in sorted(graph.get(n, ())):
            if state.get(m) == "open":
                cycles.append(path[path.index(m):] + [m])
            elif m not in state:
                visit(m, path + [m])
        state[n] = "done"

    for n in sorted(graph):
        if n not in state:
            visit(n, [n])
    return cycles


def test_the_cycle_finder_finds_cycles():
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set(), "c": {"b"}}) == []
    assert package_imports("client")        # the walk sees the package's imports


def test_the_package_has_no_import_cycle():
    graph = {m: package_imports(m) for m in MODULES}
    assert find_cycles(graph) == []


@pytest.mark.parametrize("module", ["kubicle"] + [f"kubicle.{m}" for m in MODULES])
def test_each_module_imports_alone_in_a_fresh_interpreter(module):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(SRC))
    r = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, "
                        f"{os.path.abspath(SRC)!r}); import {module}"],
                       env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
