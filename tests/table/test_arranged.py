"""The arranged join of a table from outside a loop (``ArrangedJoin``) and the join of
the same tables outside any loop (``Join``: arranged per time for dense integer keys,
else Arrow's hash join) against a plain-Python join: inner, left, semi and anti, null
keys, dense, sparse and negative ids, 1-2 workers, random delivery orders
(hypothesis). Its fast paths are in these runs: the columns its only reader, a
``select``, drops are never gathered (projection push-down), the probe rows repeated
by ``np.repeat`` or passed whole when each matched once, the arrangement sorted by a
radix sort (16 bits a pass), a left join on unique keys as a lookup in the probe's
order, and a join of rows keyed ``k, k + 1, ...`` with unique keys in order by
position (``lookup_run``). A push-down that drops a column still read is caught, a
lookup without its nulls or with its validity bits reversed, a run lookup that
trusts either side's keys, and the sort is checked equal to a stable one."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

import operators  # noqa: F401 - registers the stream methods
from operators.table import arrange as table_arrange
from operators.table import col, lit, table_input
from operators.table import loops as table_loops
from operators.table import stream as table_stream
from timely import Dataflow

LOOP = pa.schema([("k", pa.int64()), ("v", pa.int64())])
OUTER = pa.schema([("k", pa.int64()), ("w", pa.int64()), ("x", pa.float64())])

SELECTS: dict[str, Any] = {
    "k and v + w": lambda t: t.select(k=col("k"), v=col("v") + col("w")),
    "w as k": lambda t: t.select(k=col("w"), v=col("v")),
    "no column": lambda t: t.select(k=lit(1), v=lit(2)),
    "every column": lambda t: t.select(k=col("k"), v=col("v") * 0 + col("x").cast("int64")),
}
"""What follows the join (its only reader): every column read, some, none."""

PLAIN: dict[str, Any] = {
    "k and v + w": lambda k, v, w, x: (k, None if w is None else v + w),
    "w as k": lambda k, v, w, x: (w, v),
    "no column": lambda k, v, w, x: (1, 2),
    "every column": lambda k, v, w, x: (k, None if x is None else int(x)),
}
"""The same, on one joined row."""


def reference(loop_rows: list[Any], outer_rows: list[Any], how: str, select: str) -> Counter[Any]:
    """The join in plain Python: a null key matches nothing."""
    got: Counter[Any] = Counter()
    for k, v in loop_rows:
        matches = [(w, x) for k2, w, x in outer_rows if k is not None and k2 == k]
        if how in ("semi", "anti"):
            if bool(matches) == (how == "semi"):
                got[(k, v)] += 1
            continue
        if how == "left" and not matches:
            matches = [(None, None)]
        for w, x in matches:
            got[PLAIN[select](k, v, w, x)] += 1
    return got


IDS = {"dense": lambda n: n, "sparse": lambda n: n << 36, "negative": lambda n: n - 3}

KEY = st.none() | st.integers(0, 6)
LOOP_ROWS = st.lists(st.tuples(KEY, st.integers(-5, 5)), max_size=12)
OUTER_ROWS = st.lists(
    st.tuples(KEY, st.integers(-5, 5), st.none() | st.sampled_from([1.0, 2.0])), max_size=12
)


def run(
    loop_rows: list[Any],
    outer_rows: list[Any],
    how: str,
    select: str,
    in_loop: bool,
    workers: int,
    seed: int,
) -> Counter[Any]:
    flow = Dataflow("arranged")
    a = table_input(flow, LOOP, name="loop")
    b = table_input(flow, OUTER, name="outer")

    def body(t: Any) -> Any:
        joined = t.join(b.table, on="k", how=how)
        return joined if how in ("semi", "anti") else SELECTS[select](joined)

    out = a.table.iterate(body, rounds=1) if in_loop else body(a.table)
    out.collect("out")
    half = len(loop_rows) // 2
    for part in (loop_rows[:half], loop_rows[half:]):
        a.send(pa.Table.from_pylist([{"k": k, "v": v} for k, v in part], schema=LOOP))
    b.send(pa.Table.from_pylist([{"k": k, "w": w, "x": x} for k, w, x in outer_rows], OUTER))
    got = flow.run(workers=workers, backend="inline", seed=seed)["out"]
    return Counter(tuple(r.values()) for _, t in got for r in t.to_pylist())


@settings(max_examples=60, deadline=None)
@given(
    LOOP_ROWS,
    OUTER_ROWS,
    st.sampled_from(["inner", "left", "semi", "anti"]),
    st.sampled_from(sorted(SELECTS)),
    st.sampled_from(sorted(IDS)),
    st.integers(1, 2),
    st.integers(0, 9),
)
def test_the_arranged_joins_equal_a_plain_join(
    loop_rows: Any, outer_rows: Any, how: str, select: str, ids: str, workers: int, seed: int
) -> None:
    to = IDS[ids]
    loop_rows = [(None if k is None else to(k), v) for k, v in loop_rows]
    outer_rows = [(None if k is None else to(k), w, x) for k, w, x in outer_rows]
    want = reference(loop_rows, outer_rows, how, select)
    assert run(loop_rows, outer_rows, how, select, True, workers, seed) == want
    assert run(loop_rows, outer_rows, how, select, False, workers, seed) == want


def test_the_join_sends_only_what_its_readers_read() -> None:
    """One ``select`` reads the join: its columns only. A second select: both's. Any
    other reader (here a ``where``): every column."""
    flow = Dataflow("demand")
    a = table_input(flow, LOOP).table
    b = table_input(flow, OUTER).table
    seen: list[Any] = []

    def body(t: Any) -> Any:
        joined = t.join(b, on="k")
        seen.append(joined.demand)
        return joined.select(k=col("k"), v=col("v") + col("w"))

    a.iterate(body, rounds=1)
    (demand,) = seen
    assert demand.needed() == {"k", "v", "w"}
    joined = demand.stream  # more readers of the join's stream, as a user could add
    assert joined is not None
    table = table_stream.Table(joined, OUTER.append(pa.field("v", pa.int64())), demand)
    table.select(x=col("x"))
    assert demand.needed() == {"k", "v", "w", "x"}
    table.where(col("x") > 0)
    assert demand.needed() is None


def test_a_push_down_that_drops_a_column_read_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = [(1, 1), (2, 2)]
    outer = [(1, 10, 0.5), (2, 20, 2.0)]
    good = run(rows, outer, "inner", "k and v + w", True, 1, 0)
    assert good == Counter({(1, 11): 1, (2, 22): 1})
    needed = table_stream.Demand.needed

    def too_few(self: Any) -> Any:
        got = needed(self)
        return None if got is None else got - {"w"}

    monkeypatch.setattr(table_stream.Demand, "needed", too_few)
    with pytest.raises(Exception, match="w"):
        run(rows, outer, "inner", "k and v + w", True, 1, 0)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.integers(0, 40) | st.integers(0, 1 << 20) | st.sampled_from([1 << 40]), max_size=60
    ),
    st.integers(0, 3),
)
def test_the_arrangement_order_is_a_stable_sort(keys: Any, slack: int) -> None:
    """Radix passes of 16 bits (one or two) and the merge sort alike."""
    k = np.array(keys, dtype=np.int64)
    top = (int(k.max()) + 1 + slack) if len(k) else 0
    assert table_arrange._stable_order(k, top).tolist() == np.argsort(k, kind="stable").tolist()


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 30) | st.sampled_from([-4, 1 << 40]), st.integers(-3, 3)),
        max_size=40,
    )
)
def test_a_two_column_table_is_reduced_without_gathering_rows(rows: Any) -> None:
    """``(key, value)`` tables take :func:`least_pairs` (no row index): the same least
    value per key as the general path."""
    table = pa.table(
        {"k": pa.array([k for k, _ in rows], pa.int64()), "v": pa.array([v for _, v in rows])},
        schema=pa.schema([("k", pa.int64()), ("v", pa.int64())]),
    )
    got = table_loops.least_rows(table, "k", "v")
    want: dict[int, int] = {}
    for k, v in rows:
        want[k] = min(want.get(k, v), v)
    assert got.schema == table.schema
    assert list(zip(got.column("k").to_pylist(), got.column("v").to_pylist())) == sorted(
        want.items()
    )


MATCHES = (
    st.lists(st.integers(0, 6), max_size=12),
    st.lists(st.integers(-1, 7), max_size=12),
    st.booleans(),
)


def check_matches(arranged: Any, probes: Any, unique: bool) -> None:
    keys = np.array(sorted(set(arranged) if unique else arranged), dtype=np.int64)
    at = np.array(probes, dtype=np.int64)
    lo = np.searchsorted(keys, at, side="left")
    hi = np.searchsorted(keys, at, side="right")
    counts = hi - lo
    repeat = table_arrange._Repeat(counts)
    got = table_arrange._matches(lo, hi, counts, repeat)
    rows = np.arange(len(keys))
    flat = rows[got] if isinstance(got, slice) else got
    assert list(flat) == [i for a, b in zip(lo, hi) for i in range(a, b)]
    column = pa.chunked_array([pa.array(probes, pa.int64())])
    repeated = repeat.column(column).to_pylist()
    assert repeated == [p for p, c in zip(probes, counts) for _ in range(c)]


@settings(max_examples=200, deadline=None)
@given(*MATCHES)
def test_the_matches_are_each_probe_rows_range_in_turn(
    arranged: Any, probes: Any, unique: bool
) -> None:
    """``_matches`` (a slice when the ranges of the rows that matched follow each other,
    wherever the rows that matched nothing are; the starts themselves when no row
    matched twice; else index arithmetic) against the ranges ``lo[i]:hi[i]``
    concatenated, and ``_Repeat`` (the column, a filter, a repeat) against each probe
    row repeated as often as it matched. Unique arranged keys: lookups."""
    check_matches(arranged, probes, unique)


def test_a_walk_that_skips_its_check_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant that takes the matched rows' ranges as a walk without checking that
    each starts where the one before ended fails the property above."""

    def unchecked(lo: Any, hi: Any, counts: Any, repeat: Any) -> Any:
        matched = counts > 0
        if repeat.once or not matched.any():
            return None
        return slice(int(lo[matched][0]), int(hi[matched][-1]))

    monkeypatch.setattr(table_arrange, "_walk_of_matched", unchecked)
    prop = settings(
        max_examples=200, deadline=None, database=None, derandomize=True, phases=(Phase.generate,)
    )(given(*MATCHES)(check_matches))
    with pytest.raises(AssertionError):
        prop()


WALK = pa.schema([("p", pa.int64()), ("s", pa.string()), ("v", pa.float64())])
WALK_OUT = WALK.append(pa.field("w", pa.int64()))


@st.composite
def walks(draw: Any) -> tuple[list[int], list[Any]]:
    """Keys of a dense arrangement and probe keys: half the time in any order, else
    walking it in key order (a run of its keys, keys that match nothing among them, and
    nulls or such keys anywhere), which is when ``probe`` gathers the repeated rows
    (``_walk_rows``)."""
    arranged = draw(st.lists(st.integers(0, 8), min_size=1, max_size=20))
    if draw(st.booleans()):
        return arranged, draw(st.lists(st.none() | st.integers(0, 9), max_size=12))
    present = sorted(set(arranged))
    i = draw(st.integers(0, len(present) - 1))
    j = draw(st.integers(i + 1, len(present)))
    absent = draw(st.lists(st.integers(0, 9).filter(lambda k: k not in present), max_size=3))
    walk: list[Any] = sorted(set(present[i:j] + absent))
    for extra in draw(st.lists(st.none() | st.sampled_from(absent or [None]), max_size=3)):
        walk.insert(draw(st.integers(0, len(walk))), extra)  # matching nothing, anywhere
    return arranged, walk


def probe_rows(arranged: list[int], probes: list[Any]) -> tuple[list[Any], list[Any]]:
    """``probe`` of a dense arrangement of ``(k, w)`` rows by ``(p, s, v)`` rows, and the
    inner join in plain Python (probe order, then arrangement order)."""
    outer = pa.table(
        {"k": pa.array(arranged, pa.int64()), "w": pa.array(range(len(arranged)), pa.int64())}
    )
    got = table_arrange.arrange(outer, "k", ["w"])
    assert got.dense
    rows = pa.Table.from_pylist(
        [{"p": p, "s": f"r{i}", "v": i / 2} for i, p in enumerate(probes)], schema=WALK
    )
    out = table_arrange.probe(got, rows, "p", "inner", 1, (["p", "s", "v"], {"w": "w"}), WALK_OUT)
    pairs = sorted(zip(arranged, range(len(arranged))), key=lambda kw: kw[0])  # stable
    want = [(p, f"r{i}", i / 2, w) for i, p in enumerate(probes) for k, w in pairs if k == p]
    return [tuple(r.values()) for r in out.to_pylist()], want


def check_walk(case: tuple[list[int], list[Any]]) -> None:
    got, want = probe_rows(*case)
    assert got == want


@settings(max_examples=200, deadline=None)
@given(walks())
def test_a_probe_that_walks_the_arrangement_gathers_its_repeated_rows(case: Any) -> None:
    """Probe rows in key order (gaps, keys matching nothing, nulls, or the keys
    ``first .. first + n - 1``) repeat their columns by a gather of the probe row of
    each match (``_walk_rows``), numbers and strings alike: the plain join's rows, in
    its order; and so do probe rows in any order (``np.repeat``)."""
    check_walk(case)


def test_a_walk_that_takes_every_probe_key_as_consecutive_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mutant ``_walk_rows`` that maps each match to its key less the first probe key
    (right only when the probe keys leave no gap) fails the property above."""
    monkeypatch.setattr(
        table_arrange, "_walk_rows", lambda keys, at_keys, counts, no_nulls: keys - int(at_keys[0])
    )
    prop = settings(
        max_examples=200,
        deadline=None,
        database=None,
        derandomize=True,
        phases=(Phase.generate,),
        report_multiple_bugs=False,
    )(given(walks())(check_walk))
    with pytest.raises((AssertionError, IndexError)):
        prop()


def check_arrangement(keys: list[int], ordered: bool) -> None:
    """``arrange`` keeps every row, sorted stably by key (taken as they are when they
    come in order), and each key's rows at ``index[k]:index[k + 1]``."""
    if ordered:
        keys = sorted(keys)
    table = pa.table({"k": pa.array(keys, pa.int64()), "w": pa.array(range(len(keys)), pa.int64())})
    got = table_arrange.arrange(table, "k", ["w"])
    want = sorted(zip(keys, range(len(keys))), key=lambda kw: kw[0])
    assert got.table.column("w").to_pylist() == [w for _, w in want]
    assert list(got.keys) == [k for k, _ in want]
    for k in set(keys):
        assert sorted(got.table.column("w").to_pylist()[got.index[k] : got.index[k + 1]]) == [
            w for k2, w in want if k2 == k
        ]


ARRANGED = (st.lists(st.integers(0, 9), min_size=1, max_size=20), st.booleans())


@settings(max_examples=150, deadline=None)
@given(*ARRANGED)
def test_an_arrangement_holds_every_row_in_key_order(keys: Any, ordered: bool) -> None:
    check_arrangement(keys, ordered)


def test_an_arrangement_that_takes_rows_as_in_order_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mutant that takes every table as in key order already (no sort) fails it."""
    monkeypatch.setattr(table_arrange, "in_order", lambda keys: True)
    prop = settings(
        max_examples=150, deadline=None, database=None, derandomize=True, phases=(Phase.generate,)
    )(given(*ARRANGED)(check_arrangement))
    with pytest.raises(AssertionError):
        prop()


LOOKUP_OUT = pa.schema(
    [*WALK, ("w", pa.int64()), ("t", pa.string()), ("u", pa.float64()), ("i", pa.int32())]
)


def check_lookup(keys: list[int], probes: list[Any], shift: int) -> None:
    """A left join on unique arranged keys (a lookup): every probe row once, in the
    probe's order, with its match's columns or nulls (null keys, keys not there):
    numbers without nulls (a numpy gather and a validity bitmap), a column with nulls
    and strings (Arrow's gather)."""
    keys = [k << shift for k in keys]
    probes = [None if p is None else p << shift for p in probes]
    outer = pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "w": pa.array([None if k % 3 == 0 else k * 10 for k in keys], pa.int64()),
            "t": pa.array([f"t{k}" for k in keys], pa.string()),
            "u": pa.array([k / 4 for k in keys], pa.float64()),
            "i": pa.array([k % 1000 - 7 for k in keys], pa.int32()),
        }
    )
    right = ["w", "t", "u", "i"]
    arranged = table_arrange.arrange(outer, "k", right)
    rows = pa.Table.from_pylist(
        [{"p": p, "s": f"r{i}", "v": i / 2} for i, p in enumerate(probes)], schema=WALK
    )
    out = (["p", "s", "v"], {n: n for n in right})
    got = table_arrange.probe(arranged, rows, "p", "left", 1, out, LOOKUP_OUT)
    at = {r["k"]: tuple(r[n] for n in right) for r in outer.to_pylist()}
    nothing = (None,) * len(right)
    want = [(p, f"r{i}", i / 2, *at.get(p, nothing)) for i, p in enumerate(probes)]
    assert [tuple(r.values()) for r in got.to_pylist()] == want


LOOKUPS = (
    st.lists(st.integers(0, 12), min_size=1, max_size=12, unique=True),
    st.lists(st.none() | st.integers(-2, 14), min_size=1, max_size=14),
    st.sampled_from([0, 36]),  # dense (an index of starts) or sparse (searchsorted)
)


@settings(max_examples=150, deadline=None)
@given(*LOOKUPS)
def test_a_left_join_on_unique_keys_keeps_the_probe_order(
    keys: Any, probes: Any, shift: int
) -> None:
    check_lookup(keys, probes, shift)


def test_a_lookup_without_its_nulls_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mutant lookup that gathers at each probe row's range start whether it matched
    or not (no nulls for the rows without a match) fails the property above."""

    def unmasked(table: Any, rows: Any, lo: Any, counts: Any, out: Any, schema: Any) -> Any:
        at = np.minimum(lo, max(table.num_rows - 1, 0))
        columns = [rows.column(n) for n in out[0]]
        columns += [table.column(n).take(pa.array(at)) for n in out[1]]
        return pa.Table.from_arrays(columns, schema=schema)

    monkeypatch.setattr(table_arrange, "_lookup", unmasked)
    prop = settings(
        max_examples=150, deadline=None, database=None, derandomize=True, phases=(Phase.generate,)
    )(given(*LOOKUPS)(check_lookup))
    with pytest.raises(AssertionError):
        prop()


def test_a_lookup_with_its_validity_bits_reversed_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mutant that packs the numbers' validity bits most significant first (Arrow's
    bitmaps are least significant first) fails the property above."""
    monkeypatch.setattr(
        table_arrange, "_validity", lambda bits: pa.py_buffer(np.packbits(bits, bitorder="big"))
    )
    prop = settings(
        max_examples=150, deadline=None, database=None, derandomize=True, phases=(Phase.generate,)
    )(given(*LOOKUPS)(check_lookup))
    with pytest.raises(AssertionError):
        prop()


RUN_OUT = pa.schema([*WALK, ("w", pa.int64()), ("t", pa.string()), ("u", pa.float64())])


def check_run(first: int, n: int, keys: list[int], tidy: bool, gap: int, how: str) -> None:
    """``lookup_run``: rows keyed ``first, first + 1, ...`` (with ``gap`` > 0: that row's
    key moved on by one, no longer a run) joined with rows of unique keys in order
    (unless not ``tidy``: keys as drawn, repeated or out of order) is the plain join,
    inner or left, in the rows' order; anything else it declines (``None``)."""
    if tidy:
        keys = sorted(set(keys))
    probes = list(range(first, first + n))
    if gap:
        probes[gap % n] += n + 1
    table = pa.table(
        {
            "k": pa.array(keys, pa.int64()),
            "w": pa.array([None if k % 3 == 0 else k * 10 for k in keys], pa.int64()),
            "t": pa.array([f"t{k}" for k in keys], pa.string()),
            "u": pa.array([k / 4 for k in keys], pa.float64()),
        }
    )
    rows = pa.Table.from_pylist(
        [{"p": p, "s": f"r{i}", "v": i / 2} for i, p in enumerate(probes)], schema=WALK
    )
    right = ["w", "t", "u"]
    out = (["p", "s", "v"], {c: c for c in right})
    got = table_arrange.lookup_run(rows, table, ("p", "k"), how, out, RUN_OUT)
    unique_in_order = all(a < b for a, b in pairwise(keys))
    if got is None:
        assert gap or not unique_in_order, "declined a run of keys"
        return
    at: dict[int, list[Any]] = {}
    for r in table.to_pylist():
        at.setdefault(r["k"], []).append(tuple(r[c] for c in right))
    want = []
    for i, p in enumerate(probes):
        matches = at.get(p, [])
        if how == "left" and not matches:
            matches = [(None,) * len(right)]
        want += [(p, f"r{i}", i / 2, *m) for m in matches]
    assert [tuple(r.values()) for r in got.to_pylist()] == want


RUNS = (
    st.integers(-4, 4),
    st.integers(1, 10),
    st.lists(st.integers(-6, 16), max_size=14),
    st.booleans(),
    st.sampled_from([0, 0, 1, 3]),
    st.sampled_from(["inner", "left"]),
)


@settings(max_examples=200, deadline=None)
@given(*RUNS)
def test_a_join_of_a_run_of_keys_puts_each_match_in_place(
    first: int, n: int, keys: Any, tidy: bool, gap: int, how: str
) -> None:
    check_run(first, n, keys, tidy, gap, how)


def run_fails(monkeypatch: pytest.MonkeyPatch, name: str, mutant: Any) -> None:
    monkeypatch.setattr(table_arrange, name, mutant)
    prop = settings(
        max_examples=200,
        deadline=None,
        database=None,
        derandomize=True,
        phases=(Phase.generate,),
        report_multiple_bugs=False,
    )(given(*RUNS)(check_run))
    with pytest.raises((AssertionError, IndexError)):
        prop()


def test_a_run_lookup_that_takes_any_keys_as_a_run_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mutant that takes the rows' first key as the start of a run without checking
    the others follow it fails the property above."""
    run_fails(monkeypatch, "_first_of_run", lambda keys: int(keys[0]) if len(keys) else None)


def test_a_run_lookup_that_trusts_the_other_keys_order_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A mutant whose check of the other side's keys (unique, in order) always passes
    fails the property above (a repeated key's rows are lost, keys out of order put
    the wrong rows' values in place)."""
    run_fails(monkeypatch, "unique_in_order", lambda keys: True)
