"""examples/connected_components.py: labels equal the least node of each union-find set."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import load_example

ex = load_example("connected_components")


def union_find_labels(edges: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """Each endpoint's component, named by its least node: plain union-find."""
    parent: dict[Any, Any] = {}

    def find(x: Any) -> Any:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for u, v in edges:
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)  # the root is always the set's least node
    return {x: find(x) for x in parent}


graphs = st.lists(
    st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=40),
    min_size=1,
    max_size=3,
)


@settings(max_examples=25)
@given(graphs=graphs, workers=st.integers(1, 3), seed=st.integers(0, 1000))
def test_labels_match_union_find(
    graphs: list[list[tuple[int, int]]], workers: int, seed: int
) -> None:
    got = ex.run(graphs, workers=workers, backend="inline", seed=seed)
    for e, edges in enumerate(graphs):
        assert got.get(e, {}) == union_find_labels(edges), e


def test_long_path_and_random_graph() -> None:
    path = [(i + 1, i) for i in range(60)]  # diameter 60: 60 rounds to settle
    rand = ex.random_graph(400, 300, seed=7)
    got = ex.run([path, rand], workers=3, backend="inline")
    assert got[0] == {i: 0 for i in range(61)}
    assert got[1] == union_find_labels(rand)


def test_cli_inline(capsys: pytest.CaptureFixture[str]) -> None:
    ex.main(["--backend", "inline", "--workers", "2", "--nodes", "200", "--edges", "150"])
    out = capsys.readouterr().out
    assert out.count(" components; largest") == 3
    assert "every label matches a union-find" in out


def test_finished_epochs_are_freed() -> None:
    """Each epoch's graph and labels go once the loop is done with the epoch."""
    from timely import Dataflow

    graphs = [ex.random_graph(40, 30, seed=s) for s in range(5)]
    got: dict[int, dict[Any, Any]] = {}
    flow = Dataflow("cc_memory")
    edges = flow.new_input("edges")
    ex.components(edges.stream).subscribe(lambda e, pairs: got.update({e: dict(pairs)}))
    with flow.activate(workers=2, backend="inline", seed=5) as session:
        for e, graph in enumerate(graphs):
            edges.advance_to(e)  # the inline backend finishes epoch e - 1 here
            edges.send(graph)
        edges.close()
        session.join()
        props = [
            v
            for w in session.worker_list  # type: ignore[attr-defined]
            for v in w.vertices
            if isinstance(v, ex.Propagate)
        ]
    assert got == {e: union_find_labels(g) for e, g in enumerate(graphs)}
    assert len(props) == 2
    # Nothing runs after the last epoch finishes, so only it can be left.
    assert all(set(v.adj) <= {4} and set(v.label) <= {4} for v in props)
    assert any(v.adj for v in props) and not any(v.best for v in props)
