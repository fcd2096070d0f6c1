"""No two modules of dnnprof import each other at module level, directly or through others (issue 24: the house has
no cycles). ``from package import submodule`` counts as importing the package, whose ``__init__`` runs first."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def _graph() -> dict[str, set[str]]:
    mods = {}
    for p in (SRC / "dnnprof").rglob("*.py"):
        name = ".".join(p.relative_to(SRC).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.parse(p.read_text()).body:  # module level only: imports inside functions run later
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            else:
                continue
            edges[m] |= {n for n in names if n in mods and n != m}
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


def test_a_cycle_would_be_found() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
