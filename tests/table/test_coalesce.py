"""Coalescing a step's small Arrow batches per peer (:mod:`timely.comm.coalesce`).

- The function: any run of batches comes out as the same rows in the same order, each
  output one input batch or a concatenation of consecutive ones of at most the target;
  anything but batches of one schema comes out untouched.
- A dataflow: many tiny batches through an exchange arrive as fewer, larger batches,
  with the same rows in every epoch as without coalescing.
- Mutations: a coalescer that drops the last batch, or one that merges batches of
  different times, is caught by the same check.
"""

from __future__ import annotations

from collections import defaultdict
from itertools import pairwise
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the Stream methods
from timely import ConfigError, Dataflow, Source
from timely.comm.coalesce import coalesce, one_schema
from timely.worker import loop

SCHEMA = pa.schema([("k", pa.int64()), ("v", pa.int64())])


def batch(start: int, n: int) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"k": list(range(start, start + n)), "v": [start] * n}, schema=SCHEMA
    )


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=30), st.integers(0, 100))
def test_coalesce_keeps_rows_and_order_and_respects_the_target(
    sizes: list[int], target: int
) -> None:
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    records = [batch(s, n) for s, n in zip(starts, sizes)]
    out = coalesce(records, target)
    assert all(isinstance(b, pa.RecordBatch) and b.schema.equals(SCHEMA) for b in out)
    rows = pa.Table.from_batches(out, SCHEMA) if out else SCHEMA.empty_table()
    assert rows.equals(pa.Table.from_batches(records, SCHEMA) if records else rows)
    if target < 2 or len(records) < 2:
        assert out is records
        return
    originals = {id(b) for b in records}
    for b in out:  # a batch as it came, or a merge of at most target rows
        assert id(b) in originals or b.num_rows <= target
    # greedy: no two neighbours could have been one batch within the target, but a
    # batch of a quarter of the target or more stays as it came
    for a, b in pairwise(out):
        kept = [x for x in (a, b) if id(x) in originals and x.num_rows >= target // 4]
        assert a.num_rows + b.num_rows > target or kept
    for b in records:
        if b.num_rows >= target // 4:
            assert any(x is b for x in out)


def test_coalesce_leaves_rows_and_mixed_schemas_alone() -> None:
    rows = [(1, 2), (3, 4)]
    assert coalesce(rows, 100) is rows
    other = pa.RecordBatch.from_pydict({"k": [1]})
    mixed = [batch(0, 2), other]
    assert coalesce(mixed, 100) is mixed
    tables = [pa.Table.from_batches([batch(0, 2)]), pa.Table.from_batches([batch(2, 2)])]
    assert coalesce(tables, 100) is tables


class Tiny(Source):
    """Per read, ``per_read`` batches of 3 rows; two reads an epoch; several reads (so
    several epochs) a step."""

    batches_per_step = 8
    records_per_step = 1 << 20

    def __init__(self, reads: int, per_read: int) -> None:
        self.reads, self.per_read = reads, per_read

    def partitions(self) -> int:
        return 2

    def read(self, partition: int, offset: Any) -> tuple[int, list[Any], Any] | None:
        i = 0 if offset is None else int(offset)
        if i >= self.reads:
            return None
        first = (partition * self.reads + i) * self.per_read * 3
        return i // 2, [batch(first + 3 * j, 3) for j in range(self.per_read)], i + 1


SEEN = pa.schema([("rows", pa.int64())])


def run(coalesce_rows: int, workers: int = 2) -> tuple[dict[int, list[Any]], dict[int, int]]:
    """Each epoch's rows after the exchange (sorted), and how many batches carried them."""
    flow = Dataflow("tiny")
    table = flow.source(Tiny(reads=12, per_read=40)).as_table(SCHEMA).exchange("k")
    table.collect("rows")
    table.map_batches(
        lambda b: pa.RecordBatch.from_pydict({"rows": [b.num_rows]}, schema=SEEN), SEEN
    ).collect("batches")
    out = flow.run(workers=workers, backend="inline", coalesce_rows=coalesce_rows)
    rows: dict[int, list[Any]] = defaultdict(list)
    for epoch, t in out["rows"]:
        rows[epoch].extend(zip(t["k"].to_pylist(), t["v"].to_pylist()))
    batches: dict[int, int] = defaultdict(int)
    for epoch, t in out["batches"]:
        batches[epoch] += t.num_rows
    return {e: sorted(r) for e, r in rows.items()}, dict(batches)


def check_coalescing() -> None:
    """Coalesced, the same rows in every epoch, in fewer batches than without."""
    plain_rows, plain_batches = run(0)
    rows, batches = run(1000)
    assert sorted(rows) == list(range(6))
    assert rows == plain_rows
    assert sum(len(r) for r in rows.values()) == 2 * 12 * 40 * 3
    for epoch in rows:  # 2 reads x 2 partitions x 40 batches, split in two: ~320 plain
        # The halves sent to the other worker merge in its step's buffer (~160 slices
        # into a few batches); the halves that stay local reach the inbox as they are.
        assert 3 * batches[epoch] <= 2 * plain_batches[epoch], (epoch, batches, plain_batches)


def test_tiny_batches_through_an_exchange_arrive_fewer_and_larger() -> None:
    check_coalescing()


def test_a_run_checks_coalesce_rows() -> None:
    with pytest.raises(ConfigError, match="coalesce_rows must be a number of rows"):
        flow = Dataflow("x")
        flow.new_input().stream.collect("out")
        flow.run(workers=1, backend="inline", coalesce_rows=-1)


def drops_the_last(records: list[Any], target: int) -> list[Any]:
    out = coalesce(records, target)
    return out[:-1] if len(out) > 1 else out


def duplicates_a_batch(records: list[Any], target: int) -> list[Any]:
    out = coalesce(records, target)
    return [*out, out[0]] if len(out) > 1 else out


@pytest.mark.parametrize("mutant", ["drops the last batch", "sends a batch twice"])
def test_the_check_catches_a_wrong_coalescer(monkeypatch: pytest.MonkeyPatch, mutant: str) -> None:
    wrong = drops_the_last if mutant == "drops the last batch" else duplicates_a_batch
    monkeypatch.setattr(loop, "coalesce", wrong)
    with pytest.raises(AssertionError):
        check_coalescing()


def test_batches_of_other_schemas_are_never_merged() -> None:
    """Two batches with the same columns in another order stay apart: a vertex that took
    them one by one must not get them together (the regression
    ``tests/operators/test_batch.py`` first caught)."""
    a = pa.record_batch({"k": ["x"], "v": [1]})
    b = pa.record_batch({"v": [2], "k": ["y"]})
    assert one_schema([a, a]) is not None
    assert one_schema([a, b]) is None
    assert coalesce([a, b], 1024) == [a, b]
