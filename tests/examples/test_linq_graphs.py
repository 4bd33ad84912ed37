"""examples/linq_graphs.py: reachability, components and PageRank written in plain LINQ
equal networkx's on random graphs, epochs, worker counts and delivery orders."""

from __future__ import annotations

from typing import Any

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.loops import LeastOnly
from tests.examples import load_example

ex = load_example("linq_graphs")
N = 12
graphs = st.lists(st.tuples(st.integers(0, N - 1), st.integers(0, N - 1)), max_size=30)


def nx_reach(edges: list[tuple[int, int]], root: int) -> set[int]:
    g = nx.DiGraph(edges)
    g.add_node(root)
    return {root} | nx.descendants(g, root)


def nx_components(edges: list[tuple[int, int]]) -> dict[int, int]:
    labels: dict[int, int] = {}
    for comp in nx.connected_components(nx.Graph(edges)):
        least = min(comp)
        labels.update(dict.fromkeys(comp, least))
    return labels


def nx_ranks(edges: list[tuple[int, int]], n: int, iters: int) -> dict[int, float]:
    """``iters`` power-iteration steps with networkx's Google matrix (its dangling-node
    rule; parallel edges weigh as many times as they appear)."""
    g = nx.MultiDiGraph()
    g.add_nodes_from(range(n))
    g.add_edges_from(edges)
    m = np.asarray(nx.google_matrix(g, alpha=0.85, nodelist=range(n)))
    x = np.full(n, 1.0 / n)
    for _ in range(iters):
        x = x @ m
    return dict(enumerate(x.tolist()))


def check(epochs: list[list[tuple[int, int]]], got: dict[str, dict[int, Any]], iters: int) -> None:
    for e, edges in enumerate(epochs):
        assert got["reach"][e] == nx_reach(edges, 0), e
        assert got["cc"][e] == nx_components(edges), e
        want = nx_ranks(edges, N, iters)
        assert sorted(got["rank"][e]) == list(range(N))
        assert all(abs(got["rank"][e][v] - want[v]) < 1e-9 for v in range(N)), e


@settings(max_examples=60, deadline=None)
@given(
    st.lists(graphs, min_size=1, max_size=3),
    st.integers(0, 6),
    st.integers(1, 4),
    st.integers(0, 2**16),
)
def test_the_three_algorithms_equal_networkx(
    epochs: list[list[tuple[int, int]]], iters: int, workers: int, seed: int
) -> None:
    got = ex.run(epochs, N, iters, root=0, workers=workers, backend="inline", seed=seed)
    check(epochs, got, iters)


def test_on_ray(ray_local: Any) -> None:
    graph = ex.random_graph(40, 80, 3)
    got = ex.run([graph], 40, 5, root=0, workers=2, backend="ray")
    assert got["reach"][0] == nx_reach(graph, 0)
    assert got["cc"][0] == nx_components(graph)
    want = nx_ranks(graph, 40, 5)
    assert all(abs(got["rank"][0][v] - want[v]) < 1e-9 for v in range(40))


def test_mutation_a_loop_that_keeps_the_first_label_of_a_node_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``min_by``'s loop must let a node's better labels through however late they come:
    a variant that lets only a node's first label through is caught (a path's far end
    hears its own label first, the least one later)."""
    chain = [(3, 2), (2, 1), (1, 0)]
    right = ex.run([chain], N, 1, workers=1, backend="inline")
    assert right["cc"][0] == nx_components(chain)

    original = LeastOnly.on_recv

    def first_only(self: Any, input: int, records: list[Any], time: Any) -> None:
        seen = self.best.table((*time[:-1], 0))
        fresh = [r for r in records if self.key(r) not in seen]
        original(self, input, fresh, time)

    monkeypatch.setattr(LeastOnly, "on_recv", first_only)
    broken = ex.run([chain], N, 1, workers=1, backend="inline")
    assert broken["cc"][0] != nx_components(chain)


def test_the_example_checks_itself(capsys: pytest.CaptureFixture[str]) -> None:
    ex.main(["--backend", "inline", "--nodes", "300", "--edges", "400", "--iters", "8"])
    assert "all three match their references" in capsys.readouterr().out
