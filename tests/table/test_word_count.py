"""Word count on the table API (``str.split`` -> ``explode`` -> ``group_by(word)
.agg(count())``) equals ``Counter`` per epoch: random lines of short and long words
(ASCII, non-ASCII, ``\x00``), null lines, empty batches, epochs, 1-4 workers and random
delivery orders (hypothesis)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
from operators.table import col, count, table_input
from timely import Dataflow

LINES = st.lists(
    st.none()
    | st.lists(
        st.sampled_from(["a", "bb", "ccc", "w1", "w22", "longerword", "sehr", "é", "\x00z"]),
        max_size=6,
    ).map(" ".join),
    max_size=6,
)
EPOCHS = st.lists(st.lists(LINES, max_size=3), min_size=1, max_size=3)
"""Epochs of batches (maybe empty) of lines (maybe null) of short and long words."""


def check_word_count(epochs: list[list[list[str | None]]], workers: int, seed: int) -> None:
    schema = pa.schema([("line", pa.string())])
    flow = Dataflow("wc")
    inp = table_input(flow, schema)
    (
        inp.table.select(word=col("line").str.split())
        .explode("word")
        .group_by("word")
        .agg(n=count())
        .collect("out")
    )
    for e, batches in enumerate(epochs):
        inp.advance_to(e)
        for lines in batches:
            inp.send(pa.table({"line": pa.array(lines, pa.string())}))
    out = flow.run(workers=workers, backend="inline", seed=seed)
    got: dict[int, Counter[str]] = defaultdict(Counter)
    for e, table in out["out"]:
        for w, n in zip(table.column("word").to_pylist(), table.column("n").to_pylist()):
            assert w not in got[e]
            got[e][w] = n
    want = {
        e: Counter(w for lines in batches for line in lines if line for w in line.split())
        for e, batches in enumerate(epochs)
    }
    assert {e: c for e, c in got.items() if c} == {e: c for e, c in want.items() if c}


@settings(max_examples=60, deadline=None)
@given(EPOCHS, st.integers(1, 4), st.integers(0, 9))
def test_word_count_is_counters(epochs: Any, workers: int, seed: int) -> None:
    check_word_count(epochs, workers, seed)
