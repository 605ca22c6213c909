"""Figures of the shipped package: lines, modules, root modules, the largest modules, the longest functions and
the import cycles (strongly connected components of the module import graph, imports inside functions included).

    python scripts/package_figures.py [PACKAGE_DIR] [--json]

``PACKAGE_DIR`` defaults to ``reference_impl/seqpack``. ``tests/test_architecture.py`` holds the package to
:data:`MAX_MODULE_LINES` and :data:`MAX_FUNCTION_LINES` with these functions.
"""

from __future__ import annotations

import ast
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

#: No module of the shipped package over this many lines.
MAX_MODULE_LINES = 800
#: No function of the shipped package over this many lines.
MAX_FUNCTION_LINES = 120


@dataclass
class Figures:
    """What :func:`measure` counts."""

    lines: int
    modules: int
    root_modules: int
    module_lines: dict[str, int] = field(default_factory=dict)
    function_lines: list[tuple[int, str]] = field(default_factory=list)
    cycles: list[list[str]] = field(default_factory=list)

    def to_dict(self, top: int = 6) -> dict:
        """The summary: totals, the ``top`` largest modules and longest functions, the cycles."""
        largest = sorted(self.module_lines.items(), key=lambda kv: -kv[1])[:top]
        return {"lines": self.lines, "modules": self.modules, "root_modules": self.root_modules,
                "largest_modules": largest, "longest_functions": self.function_lines[:top],
                "modules_over_limit": sum(v > MAX_MODULE_LINES for v in self.module_lines.values()),
                "functions_over_limit": sum(n > MAX_FUNCTION_LINES for n, _ in self.function_lines),
                "cycles": self.cycles}


def measure(pkg: Path) -> Figures:
    """Count the ``.py`` files under ``pkg`` (a package directory)."""
    mods = sorted(p for p in pkg.rglob("*.py") if "__pycache__" not in p.parts)
    texts = {p: p.read_text(encoding="utf-8") for p in mods}
    module_lines = {str(p): len(t.splitlines()) for p, t in texts.items()}
    functions = []
    for p, t in texts.items():
        for n in ast.walk(ast.parse(t)):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions.append((n.end_lineno - n.lineno + 1, f"{p}:{n.lineno} {n.name}"))
    functions.sort(reverse=True)
    return Figures(lines=sum(module_lines.values()), modules=len(mods),
                   root_modules=sum(p.parent == pkg for p in mods), module_lines=module_lines,
                   function_lines=functions, cycles=import_cycles(pkg, texts))


def import_cycles(pkg: Path, texts: dict[Path, str]) -> list[list[str]]:
    """The import cycles among the package's modules (each a sorted list of module names, two or more)."""
    root = pkg.parent
    names = {}
    for p in texts:
        parts = p.relative_to(root).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    graph: dict[str, set[str]] = {}
    for name, p in names.items():
        deps = set()
        for n in ast.walk(ast.parse(texts[p])):
            targets = []
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                targets = [n.module] + [f"{n.module}.{a.name}" for a in n.names]
            elif isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            deps.update(t for t in targets if t in names and t != name)
        graph[name] = deps
    return [sorted(c) for c in _components(graph) if len(c) > 1]


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(comp)
    return out


def main(argv: list[str]) -> int:
    """Print the figures (``--json``: as JSON)."""
    args = [a for a in argv if a != "--json"]
    figures = measure(Path(args[0] if args else "reference_impl/seqpack"))
    summary = figures.to_dict()
    if "--json" in argv:
        print(json.dumps(summary, indent=1))
        return 0
    print(f"lines {summary['lines']}  modules {summary['modules']}  root modules {summary['root_modules']}")
    print("largest modules:", *[f"{n} {m}" for m, n in summary["largest_modules"]], sep="\n  ")
    print("longest functions:", *[f"{n} {f}" for n, f in summary["longest_functions"]], sep="\n  ")
    print(f"modules over {MAX_MODULE_LINES} lines: {summary['modules_over_limit']}; functions over "
          f"{MAX_FUNCTION_LINES} lines: {summary['functions_over_limit']}")
    print("import cycles:", *[" <-> ".join(c) for c in summary["cycles"]] or ["none"], sep="\n  ")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
