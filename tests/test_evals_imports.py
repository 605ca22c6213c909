"""The evaluation package has no import circle (module-level or inside functions)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "evals" / "seqpack_evals"
PREFIX = "seqpack_evals"


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PREFIX:
                out.update(f"{PREFIX}.{a.name}" for a in node.names)
            elif node.module.startswith(PREFIX + "."):
                out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith(PREFIX + "."))
    return out


def _graph(root: Path) -> dict[str, set[str]]:
    mods = {f"{PREFIX}.{p.stem}": p for p in root.glob("*.py") if p.stem != "__init__"}
    return {m: {d for d in _imports(p) if d in mods and d != m} for m, p in mods.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return stack[stack.index(dep):] + [dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_no_import_circle_in_the_evaluation_package():
    graph = _graph(PKG)
    assert f"{PREFIX}.dataset" in graph and graph[f"{PREFIX}.dataset"]
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None
