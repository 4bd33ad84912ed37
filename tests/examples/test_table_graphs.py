"""examples/table_graphs.py: reachability (with hop counts) and components on the table
API equal networkx's and the row versions' on random graphs, epochs, worker counts and
delivery orders."""

from __future__ import annotations

from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import load_example

ex = load_example("table_graphs")
rows = load_example("linq_graphs")
N = 12
graphs = st.lists(st.tuples(st.integers(0, N - 1), st.integers(0, N - 1)), max_size=30)


def nx_hops(edges: list[tuple[int, int]], root: int) -> dict[int, int]:
    g = nx.DiGraph(edges)
    g.add_node(root)
    return dict(nx.single_source_shortest_path_length(g, root))


def nx_components(edges: list[tuple[int, int]]) -> dict[int, int]:
    labels: dict[int, int] = {}
    for comp in nx.connected_components(nx.Graph(edges)):
        labels.update(dict.fromkeys(comp, min(comp)))
    return labels


@settings(max_examples=40, deadline=None)
@given(st.lists(graphs, min_size=1, max_size=3), st.integers(1, 4), st.integers(0, 2**16))
def test_hops_and_components_equal_networkx_and_the_row_versions(
    epochs: list[list[tuple[int, int]]], workers: int, seed: int
) -> None:
    got = ex.run(epochs, root=0, workers=workers, backend="inline", seed=seed)
    by_rows = rows.run(epochs, N, 0, root=0, workers=workers, backend="inline", seed=seed)
    for e, edges in enumerate(epochs):
        assert got["hops"][e] == nx_hops(edges, 0), e
        assert set(got["hops"][e]) == by_rows["reach"][e], e
        assert got["cc"][e] == nx_components(edges) == by_rows["cc"][e], e


def test_on_ray(ray_local: Any) -> None:
    graph = ex.random_graph(40, 80, 3)
    got = ex.run([graph], root=0, workers=2, backend="ray")
    assert got["hops"][0] == nx_hops(graph, 0)
    assert got["cc"][0] == nx_components(graph)


def test_the_example_checks_itself(capsys: pytest.CaptureFixture[str]) -> None:
    ex.main(["--backend", "inline", "--nodes", "300", "--edges", "400"])
    assert "both match the row versions" in capsys.readouterr().out
