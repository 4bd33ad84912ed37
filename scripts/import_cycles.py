"""Import cycles among the modules of the project's packages: none, or the script names them.

``python scripts/import_cycles.py`` builds the import graph that import-linter checks
(grimp's: every import counts, at module level, inside a function or under
``TYPE_CHECKING``), finds its strongly connected components, and prints each one of more
than one module (a module that imports itself counts too). It exits 1 if there is any.
import-linter's ``no-cycles`` contract (``acyclic_siblings``, pyproject.toml) says the same
of the siblings of each package; this is the finer grain, module by module, across
packages. ``tests/test_import_contracts.py`` runs it on the tree and on a copy with a
cycle put back.
"""

from __future__ import annotations

import sys

import grimp

PACKAGES = ("progress", "timely", "operators", "connectors", "analysis", "control")


def imports() -> dict[str, set[str]]:
    """Each module of the packages -> the modules of the packages it imports directly."""
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    return {m: set(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module, and the modules that
    import themselves (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1 or v in edges.get(v, ()):
                    found.append(sorted(component))
    return sorted(found)


def main() -> int:
    edges = imports()
    found = cycles(edges)
    count = sum(len(e) for e in edges.values())
    print(f"{len(edges)} modules, {count} imports between them, {len(found)} cycles")
    for component in found:
        print("cycle:", " <-> ".join(component))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
