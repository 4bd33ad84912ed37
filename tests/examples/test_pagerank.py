"""examples/pagerank.py: ranks equal a plain power iteration's, within 1e-6."""

from __future__ import annotations

import random

import pytest

from tests.examples import load_example

ex = load_example("pagerank")


def power_iteration(
    n: int, edges: list[tuple[int, int]], iters: int, d: float = 0.85
) -> list[float]:
    """PageRank, the textbook way: dangling nodes' rank spread uniformly over all nodes."""
    outdeg = [0] * n
    for u, _ in edges:
        outdeg[u] += 1
    rank = [1.0 / n] * n
    for _ in range(iters):
        dangling = sum(rank[u] for u in range(n) if outdeg[u] == 0)
        new = [(1.0 - d) / n + d * dangling / n] * n
        for u, v in edges:
            new[v] += d * rank[u] / outdeg[u]
        rank = new
    return rank


@pytest.mark.parametrize(
    ("n", "m", "iters", "workers", "seed"),
    [(1, 0, 3, 2, 0), (5, 0, 4, 2, 1), (30, 60, 10, 3, 2), (200, 600, 15, 2, 3), (50, 20, 8, 1, 4)],
)
def test_ranks_match_power_iteration(n: int, m: int, iters: int, workers: int, seed: int) -> None:
    rng = random.Random(seed)
    graphs = [[(rng.randrange(n), rng.randrange(n)) for _ in range(m)] for _ in range(2)]
    got = ex.run(graphs, n, iters, workers=workers, backend="inline", seed=seed)
    for e, edges in enumerate(graphs):
        want = power_iteration(n, edges, iters)
        assert sorted(got[e]) == list(range(n))
        for v in range(n):
            assert abs(got[e][v] - want[v]) < 1e-6, (e, v)
        assert abs(sum(got[e].values()) - 1.0) < 1e-9


def test_cli_inline(capsys: pytest.CaptureFixture[str]) -> None:
    ex.main(["--backend", "inline", "--nodes", "50", "--edges", "200", "--iters", "5"])
    out = capsys.readouterr().out
    assert "sum of ranks 1.000000 over 50 nodes" in out
