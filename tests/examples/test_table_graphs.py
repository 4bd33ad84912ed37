"""examples/table_graphs.py: reachability (with hop counts), components and PageRank on
the table API equal networkx's and the row versions' on random graphs, epochs, worker
counts and delivery orders."""

from __future__ import annotations

from typing import Any

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import load_example
from tests.examples.test_linq_graphs import nx_ranks

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
@given(
    st.lists(graphs, min_size=1, max_size=3),
    st.integers(0, 6),
    st.integers(1, 4),
    st.integers(0, 2**16),
)
def test_the_three_algorithms_equal_networkx_and_the_row_versions(
    epochs: list[list[tuple[int, int]]], iters: int, workers: int, seed: int
) -> None:
    got = ex.run(epochs, N, iters, root=0, workers=workers, backend="inline", seed=seed)
    by_rows = rows.run(epochs, N, iters, root=0, workers=workers, backend="inline", seed=seed)
    for e, edges in enumerate(epochs):
        assert got["hops"][e] == nx_hops(edges, 0), e
        assert set(got["hops"][e]) == by_rows["reach"][e], e
        assert got["cc"][e] == nx_components(edges) == by_rows["cc"][e], e
        want = nx_ranks(edges, N, iters)
        assert sorted(got["rank"][e]) == list(range(N)), e
        assert all(abs(got["rank"][e][v] - want[v]) < 1e-9 for v in range(N)), e
        assert all(abs(got["rank"][e][v] - by_rows["rank"][e][v]) < 1e-9 for v in range(N))


def test_on_ray(ray_local: Any) -> None:
    graph = ex.random_graph(40, 80, 3)
    got = ex.run([graph], 40, 5, root=0, workers=2, backend="ray")
    assert got["hops"][0] == nx_hops(graph, 0)
    assert got["cc"][0] == nx_components(graph)
    want = nx_ranks(graph, 40, 5)
    assert all(abs(got["rank"][0][v] - want[v]) < 1e-9 for v in range(40))


def test_the_example_checks_itself(capsys: pytest.CaptureFixture[str]) -> None:
    ex.main(["--backend", "inline", "--nodes", "300", "--edges", "400", "--iters", "8"])
    assert "all three match the row versions" in capsys.readouterr().out


def test_a_loop_of_rounds_that_stops_one_round_late_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``rounds=n`` must let out the ``n``-th application's output: a variant whose
    last round goes round once more gives other ranks."""
    from operators.table import loops

    graph = [(0, 1), (1, 2), (2, 0), (2, 3)]
    right = ex.run([graph], N, 3, workers=1, backend="inline")["rank"][0]
    want = nx_ranks(graph, N, 3)
    assert all(abs(right[v] - want[v]) < 1e-9 for v in range(N))
    monkeypatch.setattr(
        loops.RoundSplit, "__init__", lambda self, n: setattr(self, "rounds", n + 1)
    )
    late = ex.run([graph], N, 3, workers=1, backend="inline")["rank"][0]
    assert any(abs(late[v] - want[v]) > 1e-9 for v in range(N))
