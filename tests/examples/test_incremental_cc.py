"""examples/incremental_cc.py: after every epoch, the labels built from the changes equal
a from-scratch union-find over all the edges so far."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.examples import load_example

ex = load_example("incremental_cc")


def union_find_labels(edges: list[tuple[Any, Any]]) -> dict[Any, Any]:
    """Each endpoint's component, named by its least node (written independently here)."""
    parent: dict[Any, Any] = {}

    def find(x: Any) -> Any:
        parent.setdefault(x, x)
        while parent[x] != x:
            x = parent[x]
        return x

    for u, v in edges:
        ru, rv = find(u), find(v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    return {x: find(x) for x in parent}


def check(epochs: list[list[tuple[int, int]]], changes: dict[int, list[tuple[int, int]]]) -> None:
    assert set(changes) <= set(range(len(epochs)))
    labels: dict[Any, Any] = {}
    so_far: list[tuple[int, int]] = []
    for e, batch in enumerate(epochs):
        delta = changes.get(e, [])
        nodes = [n for n, _ in delta]
        assert len(nodes) == len(set(nodes)), f"epoch {e}: a node changed twice"
        for n, label in delta:
            assert labels.get(n) != label, f"epoch {e}: {n} 'changed' to its old label"
        labels.update(delta)
        so_far.extend(batch)
        assert labels == union_find_labels(so_far), e


epochs_st = st.lists(
    st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=15),
    min_size=1,
    max_size=8,
)


@settings(max_examples=40)
@given(epochs=epochs_st, workers=st.integers(1, 3), seed=st.integers(0, 1000))
def test_changes_track_union_find(
    epochs: list[list[tuple[int, int]]], workers: int, seed: int
) -> None:
    check(epochs, ex.run(epochs, workers=workers, backend="inline", seed=seed))


def test_merging_chains() -> None:
    # Two chains grow apart, then one edge joins them: only the larger-label side changes.
    epochs = [[(10, 11), (20, 21)], [(11, 12), (21, 22)], [(12, 22)], [], [(5, 22)]]
    changes = ex.run(epochs, workers=2, backend="inline")
    check(epochs, changes)
    assert sorted(changes[2]) == [(20, 10), (21, 10), (22, 10)]
    assert 3 not in changes
    assert sorted(changes[4]) == [(5, 5)] + [(n, 5) for n in (10, 11, 12, 20, 21, 22)]


def test_cli_inline(capsys: pytest.CaptureFixture[str]) -> None:
    ex.main(["--backend", "inline", "--epochs", "5", "--nodes", "300", "--edges", "80"])
    out = capsys.readouterr().out
    assert "after every epoch the labels match a from-scratch union-find" in out
