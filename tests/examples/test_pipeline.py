"""examples/pipeline.py end to end at a small size, on local Ray and the test Spark, checked
against a computation of its own from the input files (pyarrow and plain Python), and its
table version's result tables against its row version's (``--rows``); both versions'
incremental component sizes against a from-scratch union-find after every epoch, and at
every crash point of a checkpointed run."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from operators.table import table_input, to_table
from tests.checkpoint.sweep import ALL, epochs_for, sweep
from tests.examples import load_example
from timely import Dataflow, Stream

ex = load_example("pipeline")
cc = load_example("table_cc")
EDGES = pa.schema([("src", pa.int64()), ("dst", pa.int64())])


def expected_ad_clicks(events: dict[str, list[Any]]) -> set[tuple[int, int, int]]:
    """``(window_end, ad, clicks)`` for every window ``(w - WINDOW, w]`` with a click."""
    clicks: dict[int, Counter[int]] = defaultdict(Counter)
    for e, ad, kind in zip(events["epoch"], events["ad"], events["kind"]):
        if kind == "click":
            clicks[e][ad] += 1
    out = set()
    for w in range(ex.EPOCHS + ex.WINDOW - 1):
        total: Counter[int] = Counter()
        for e in range(w - ex.WINDOW + 1, w + 1):
            total.update(clicks.get(e, Counter()))
        out.update((w, ad, n) for ad, n in total.items())
    return out


def find(parent: dict[int, int], x: int) -> int:
    while parent.setdefault(x, x) != x:
        x = parent[x]
    return x


def from_scratch(edges: list[tuple[int, int]]) -> set[tuple[int, int]]:
    """``(least user, users)`` per component of ``edges``, by a union-find from scratch."""
    parent: dict[int, int] = {}  # roots are least members
    for u, v in edges:
        ru, rv = find(parent, u), find(parent, v)
        if ru != rv:
            parent[max(ru, rv)] = min(ru, rv)
    return set(Counter(find(parent, x) for x in list(parent)).items())


def check_components_after_every_epoch(
    follows: dict[str, list[Any]], comps: dict[str, list[Any]]
) -> set[tuple[int, int]]:
    """The output after each epoch equals a from-scratch union-find of the edges so far
    (each component once: exactly-once output); returns the last epoch's components."""
    got: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for e, label, n in zip(comps["epoch"], comps["component"], comps["users"]):
        got[e].append((label, n))
    assert set(got) <= set(range(ex.EPOCHS))
    edges = sorted(zip(follows["epoch"], follows["src"], follows["dst"]))
    want: set[tuple[int, int]] = set()
    for epoch in range(ex.EPOCHS):
        want = from_scratch([(u, v) for e, u, v in edges if e <= epoch])
        assert set(got[epoch]) == want, f"epoch {epoch}: components differ from a union-find"
        assert len(got[epoch]) == len(want), f"epoch {epoch}: a component reported twice"
    return want


def test_pipeline_matches_an_independent_computation(
    spark: Any, ray_local: Any, tmp_path: Any
) -> None:
    summary = ex.run(str(tmp_path), size=3000, workers=2, backend="ray", quiet=True)
    inputs = tmp_path / "input-3000"
    events = pq.read_table(inputs / "events").to_pydict()
    follows = pq.read_table(inputs / "follows").to_pydict()
    assert len(events["epoch"]) == 3000 and len(follows["epoch"]) == 150
    assert summary["records"] == 3150

    results = summary["results"]
    ads = pq.read_table(os.path.join(results, "ad_clicks")).to_pydict()
    got_ads = set(zip(ads["window_end"], ads["ad"], ads["clicks"]))
    want_ads = expected_ad_clicks(events)
    assert got_ads == want_ads
    assert len(ads["ad"]) == len(want_ads)  # each (window, ad) once: exactly-once output

    comps = pq.read_table(os.path.join(results, "components")).to_pydict()
    final = check_components_after_every_epoch(follows, comps)

    last = ex.EPOCHS - 1
    assert summary["components"] == len(final)
    assert summary["largest_component"] == max(n for _, n in final)
    top = sorted(((-n, ad) for w, ad, n in want_ads if w == last))[:3]
    assert summary["top_ads"] == [(ad, -n) for n, ad in top]


def result_tables(summary: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    """Each result table's rows, sorted (the run's results directory is reused by size)."""
    out = {}
    for name in ("ad_clicks", "components"):
        table = pq.read_table(os.path.join(summary["results"], name))
        out[name] = sorted(zip(*(table.column(c).to_pylist() for c in table.column_names)))
    return out


def test_table_pipeline_equals_the_row_pipeline(spark: Any, tmp_path: Any) -> None:
    # the same input, the same result tables and summary, on the inline backend
    tables = ex.run(str(tmp_path), size=3000, workers=2, backend="inline", quiet=True)
    by_tables = result_tables(tables)
    rows = ex.run(str(tmp_path), size=3000, workers=3, backend="inline", quiet=True, rows=True)
    assert result_tables(rows) == by_tables
    assert len(by_tables["ad_clicks"]) > 100 and len(by_tables["components"]) > 100
    for key in ("records", "top_ads", "components", "largest_component"):
        assert tables[key] == rows[key], key


def sizes_by_epoch(
    epochs: list[list[tuple[int, int]]], workers: int, tables: bool = False, **options: Any
) -> dict[int, list[tuple[int, int]]]:
    """``component_sizes`` over one batch of edges per epoch, on the inline backend: the
    row version's, or with ``tables`` the table version's (``table_cc``)."""
    flow = Dataflow("component_sizes")
    out: dict[int, list[tuple[int, int]]] = {}

    def record(epoch: int, records: list[tuple[int, int]]) -> None:
        assert epoch not in out, f"epoch {epoch} delivered twice"
        out[epoch] = records

    if tables:
        edges = table_input(flow, EDGES, "edges")
        sizes = cc.component_sizes(edges.table, len(epochs) - 1)
        sizes.to_rows(tuples=True).subscribe(record)
    else:
        edges = flow.new_input("edges")
        ex.component_sizes(edges.stream, len(epochs) - 1).subscribe(record)
    for e, batch in enumerate(epochs):
        edges.advance_to(e)
        edges.send(batch)
    edges.close()
    flow.activate(workers=workers, backend="inline", **options).join()
    return out


@settings(max_examples=40)
@given(
    epochs=st.lists(
        st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=12),
        min_size=1,
        max_size=7,
    ),
    workers=st.integers(1, 3),
    seed=st.integers(0, 1000),
    tables=st.booleans(),
)
def test_component_sizes_after_every_epoch(
    epochs: list[list[tuple[int, int]]], workers: int, seed: int, tables: bool
) -> None:
    # every epoch from the first edge on reports, even one with no new edge or none that
    # joins two components
    out = sizes_by_epoch(epochs, workers, tables, seed=seed)
    so_far: list[tuple[int, int]] = []
    for e, batch in enumerate(epochs):
        so_far.extend(batch)
        if not so_far:
            assert e not in out
            continue
        want = from_scratch(so_far)
        assert set(out[e]) == want and len(out[e]) == len(want), e
    assert set(out) <= set(range(len(epochs)))


def _edges_of_ints(s: Stream) -> Stream:
    return ex.component_sizes(s.select(lambda x: (x % 7, x // 7)), 9)


def _edge_table_of_ints(s: Stream) -> Stream:
    edges = to_table(s.select(lambda x: (x % 7, x // 7)), EDGES)
    return cc.component_sizes(edges, 9).to_rows(tuples=True)


@pytest.mark.parametrize(
    ("source", "workers", "seed", "tables"),
    [(True, 3, 1, False), (False, 2, 0, False), (True, 2, 2, True), (False, 3, 0, True)],
    ids=["source", "bursty", "tables-source", "tables-bursty"],
)
def test_component_sizes_at_every_crash_point(
    monkeypatch: pytest.MonkeyPatch, source: bool, workers: int, seed: int, tables: bool
) -> None:
    build = _edge_table_of_ints if tables else _edges_of_ints
    monkeypatch.setitem(ALL, "pipeline_component_sizes", build)
    events, wrong = sweep(
        "pipeline_component_sizes", epochs_for(10, 3), source, workers=workers, seed=seed
    )
    assert events > 20
    assert wrong == [], (
        f"{len(wrong)} crash points of {events} events give other outputs: {wrong[:10]}"
    )


CRASH_AT = 25
"""A scheduling event about halfway through the inline, checkpointed run at size 3000 on
the table API (50 events; the row version's has 57)."""


@pytest.mark.ci  # ~30 s; the quick profile keeps the Spark sink's exactly-once across a
# resume (test_spark.py) and the pipeline's crash points (test_component_sizes_at_...)
def test_pipeline_recovers_exactly_once_through_the_spark_sink(spark: Any, tmp_path: Any) -> None:
    # inline, checkpointed after every epoch, every worker lost once mid-run
    summary = ex.run(
        str(tmp_path),
        size=3000,
        workers=2,
        backend="inline",
        quiet=True,
        checkpoint=str(tmp_path / "checkpoints"),
        checkpoint_every=1,
        crash_at=(CRASH_AT,),
        max_restarts=1,
    )
    assert summary["restarts"] == 1
    inputs = tmp_path / "input-3000"
    events = pq.read_table(inputs / "events").to_pydict()
    ads = pq.read_table(os.path.join(summary["results"], "ad_clicks")).to_pydict()
    want_ads = expected_ad_clicks(events)
    assert set(zip(ads["window_end"], ads["ad"], ads["clicks"])) == want_ads
    assert len(ads["ad"]) == len(want_ads)
    follows = pq.read_table(inputs / "follows").to_pydict()
    comps = pq.read_table(os.path.join(summary["results"], "components")).to_pydict()
    check_components_after_every_epoch(follows, comps)
