"""Property tests for ``progress.antichain``: ``Antichain`` and ``MutableAntichain``.

The model is brute force: keep every inserted element (or every ``(time, delta)``
update), and compute minimal elements, ``<=`` questions and frontier changes directly
from the product order, spelled out here.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from functools import cache
from typing import Any, TypeVar

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from progress.antichain import Antichain, MutableAntichain
from progress.summary import PathSummary
from progress.timestamp import Timestamp

E = TypeVar("E")


def ts_le(a: Timestamp, b: Timestamp) -> bool:
    """The product order, spelled out."""
    assert len(a) == len(b)
    return all(x <= y for x, y in zip(a, b))


def summary_le(a: PathSummary, b: PathSummary) -> bool:
    """The summary order, spelled out: same shape, and ``a`` adds no more anywhere."""
    return (
        a.pop == b.pop
        and len(a.push) == len(b.push)
        and a.advance <= b.advance
        and all(x <= y for x, y in zip(a.push, b.push))
    )


def minimal(elements: Iterable[E], le: Callable[[E, E], bool]) -> set[E]:
    """The elements that no other element is strictly below."""
    pool = set(elements)
    return {x for x in pool if not any(y != x and le(y, x) for y in pool)}


def lex_sorted(times: Iterable[Timestamp]) -> tuple[Timestamp, ...]:
    return tuple(sorted(times))


# --- strategies ------------------------------------------------------------------------

LENGTH = st.integers(min_value=1, max_value=3)


@cache
def times_of(length: int, top: int = 4) -> st.SearchStrategy[Timestamp]:
    """Timestamps of ``length`` with coordinates in ``0..top`` (cached: built once)."""
    return st.tuples(*[st.integers(min_value=0, max_value=top)] * length)


@st.composite
def time_lists(draw: st.DrawFn, count: int = 1) -> tuple[list[Timestamp], ...]:
    """``count`` lists of timestamps, all of one length (1 to 3)."""
    length = draw(LENGTH)
    return tuple(draw(st.lists(times_of(length), max_size=14)) for _ in range(count))


@st.composite
def times_and_probes(draw: st.DrawFn) -> tuple[list[Timestamp], list[Timestamp]]:
    """Timestamps to insert, and more of the same length to ask about."""
    length = draw(LENGTH)
    inserted = draw(st.lists(times_of(length), max_size=14))
    probes = draw(st.lists(times_of(length), max_size=10))
    return inserted, probes


small_summaries = st.builds(
    PathSummary,
    pop=st.integers(min_value=0, max_value=1),
    advance=st.integers(min_value=0, max_value=2),
    push=st.lists(st.integers(min_value=0, max_value=2), max_size=2).map(tuple),
)


# --- Antichain of timestamps -----------------------------------------------------------


@given(times_and_probes())
def test_antichain_keeps_the_minimal_elements(
    data: tuple[list[Timestamp], list[Timestamp]],
) -> None:
    inserted, probes = data
    antichain: Antichain[Timestamp] = Antichain()
    seen: list[Timestamp] = []
    for t in inserted:
        expected = not any(ts_le(u, t) for u in seen)
        assert antichain.insert(t) == expected
        seen.append(t)
        elements = antichain.elements
        assert len(elements) == len(set(elements)), f"duplicates in {elements!r}"
        assert set(elements) == minimal(seen, ts_le)
    assert len(antichain) == len(minimal(seen, ts_le))
    assert antichain.is_empty() == (not seen)
    assert set(antichain) == minimal(seen, ts_le)
    for p in probes + inserted:
        assert antichain.less_equal(p) == any(ts_le(u, p) for u in seen)
        assert antichain.less_than(p) == any(u != p and ts_le(u, p) for u in seen)


@given(time_lists(), st.randoms(use_true_random=False))
def test_antichain_does_not_depend_on_insertion_order(
    lists: tuple[list[Timestamp], ...], rnd: random.Random
) -> None:
    (inserted,) = lists
    shuffled = list(inserted)
    rnd.shuffle(shuffled)
    one = Antichain(inserted)
    other = Antichain(shuffled)
    assert set(one.elements) == set(other.elements) == minimal(inserted, ts_le)
    assert one == other


@given(time_lists(count=2))
def test_dominates_matches_the_model(lists: tuple[list[Timestamp], ...]) -> None:
    left, right = lists
    expected = all(any(ts_le(a, b) for a in left) for b in right)
    assert Antichain(left).dominates(Antichain(right)) == expected


@given(st.data())
def test_dominates_holds_for_elements_moved_forward(data: st.DataObject) -> None:
    (base,) = data.draw(time_lists())
    length = len(base[0]) if base else 1
    later: list[Timestamp] = []
    for t in base:
        bump = data.draw(times_of(length, top=2))
        if data.draw(st.booleans()):
            later.append(tuple(x + d for x, d in zip(t, bump)))
    assert Antichain(base).dominates(Antichain(later))
    assert Antichain(base).dominates(Antichain(base))


@given(time_lists(count=2))
def test_equality_is_equality_of_minimal_sets(lists: tuple[list[Timestamp], ...]) -> None:
    left, right = lists
    assert (Antichain(left) == Antichain(right)) == (minimal(left, ts_le) == minimal(right, ts_le))


@given(st.data())
def test_adding_dominated_elements_keeps_the_antichain_equal(data: st.DataObject) -> None:
    (base,) = data.draw(time_lists())
    length = len(base[0]) if base else 1
    extra = [
        tuple(x + d for x, d in zip(t, data.draw(times_of(length, top=2))))
        for t in data.draw(st.lists(st.sampled_from(base), max_size=6) if base else st.just([]))
    ]
    mixed = data.draw(st.permutations(base + extra))
    assert Antichain(base) == Antichain(mixed)


# --- Antichain of path summaries -------------------------------------------------------


@given(st.lists(small_summaries, max_size=14), st.lists(small_summaries, max_size=8))
def test_antichain_of_summaries_keeps_the_minimal_ones(
    inserted: list[PathSummary], probes: list[PathSummary]
) -> None:
    antichain: Antichain[PathSummary] = Antichain()
    seen: list[PathSummary] = []
    for s in inserted:
        expected = not any(summary_le(u, s) for u in seen)
        assert antichain.insert(s) == expected
        seen.append(s)
        elements = antichain.elements
        assert len(elements) == len(set(elements))
        assert set(elements) == minimal(seen, summary_le)
    for p in probes + inserted:
        assert antichain.less_equal(p) == any(summary_le(u, p) for u in seen)
        assert antichain.less_than(p) == any(u != p and summary_le(u, p) for u in seen)


@given(st.lists(small_summaries, max_size=10), st.lists(small_summaries, max_size=10))
def test_antichain_of_summaries_dominates_and_equality(
    left: list[PathSummary], right: list[PathSummary]
) -> None:
    expected = all(any(summary_le(a, b) for a in left) for b in right)
    assert Antichain(left).dominates(Antichain(right)) == expected
    assert (Antichain(left) == Antichain(right)) == (
        minimal(left, summary_le) == minimal(right, summary_le)
    )


# --- MutableAntichain ------------------------------------------------------------------

DELTA = st.integers(min_value=-2, max_value=2)


@st.composite
def update_programs(
    draw: st.DrawFn,
) -> tuple[list[list[tuple[Timestamp, int]]], list[Timestamp]]:
    """Batches of ``(time, delta)`` updates on times of one length, and probe times."""
    length = draw(LENGTH)
    time = times_of(length, top=3)
    # A small pool of times makes cancellations and negative counts common.
    pool = draw(st.lists(time, min_size=1, max_size=6, unique=True))
    update = st.tuples(st.sampled_from(pool), DELTA)
    batches = draw(st.lists(st.lists(update, max_size=5), max_size=14))
    probes = draw(st.lists(time, max_size=5))
    return batches, pool + probes


def model_frontier(counts: dict[Timestamp, int]) -> tuple[Timestamp, ...]:
    return lex_sorted(minimal((t for t, c in counts.items() if c > 0), ts_le))


def expected_changes(
    old: tuple[Timestamp, ...], new: tuple[Timestamp, ...]
) -> list[tuple[Timestamp, int]]:
    left = [(t, -1) for t in set(old) - set(new)]
    joined = [(t, 1) for t in set(new) - set(old)]
    return sorted(left + joined)


def check_queries(
    antichain: MutableAntichain, counts: dict[Timestamp, int], probes: list[Timestamp]
) -> None:
    live = [t for t, c in counts.items() if c > 0]
    assert antichain.is_empty() == (not live)
    for p in probes:
        assert antichain.count_for(p) == counts.get(p, 0)
        assert antichain.less_equal(p) == any(ts_le(u, p) for u in live)
        assert antichain.less_than(p) == any(u != p and ts_le(u, p) for u in live)


@given(update_programs())
def test_mutable_antichain_matches_the_model(
    program: tuple[list[list[tuple[Timestamp, int]]], list[Timestamp]],
) -> None:
    batches, probes = program
    antichain = MutableAntichain()
    counts: dict[Timestamp, int] = {}
    old = model_frontier(counts)
    assert antichain.frontier() == old
    for batch in batches:
        changes = antichain.update_iter(batch)
        for t, delta in batch:
            counts[t] = counts.get(t, 0) + delta
        new = model_frontier(counts)
        assert antichain.frontier() == new
        assert len(changes) == len(set(changes)), f"a change reported twice: {changes!r}"
        assert sorted(changes) == expected_changes(old, new)
        check_queries(antichain, counts, probes)
        old = new


@given(update_programs())
def test_mutable_antichain_single_updates_match_the_model(
    program: tuple[list[list[tuple[Timestamp, int]]], list[Timestamp]],
) -> None:
    """``update`` (the tracker's, a loop of its own) against the model, change by change."""
    check_single_updates(program)


def forgets_evictions(self: MutableAntichain, time: Timestamp, delta: int) -> Any:
    """A mutant ``update``: a time that joins reports itself, not what it evicts."""
    return [c for c in MUTABLE_UPDATE(self, time, delta) if c[1] > 0 or c[0] == time]


def forgets_rebuilds(self: MutableAntichain, time: Timestamp, delta: int) -> Any:
    """A mutant ``update``: a time that leaves reports its leaving only."""
    got = MUTABLE_UPDATE(self, time, delta)
    return [c for c in got if c[1] < 0] if delta < 0 else got


MUTABLE_UPDATE = MutableAntichain.update


@pytest.mark.parametrize("mutant", [forgets_evictions, forgets_rebuilds])
def test_the_single_update_property_catches_mutants(
    mutant: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(MutableAntichain, "update", mutant)
    prop = settings(max_examples=300, database=None, derandomize=True, phases=(Phase.generate,))(
        given(update_programs())(check_single_updates)
    )
    with pytest.raises(AssertionError):
        prop()


def check_single_updates(
    program: tuple[list[list[tuple[Timestamp, int]]], list[Timestamp]],
) -> None:
    batches, probes = program
    antichain = MutableAntichain()
    counts: dict[Timestamp, int] = {}
    old = model_frontier(counts)
    for t, delta in (u for batch in batches for u in batch):
        changes = antichain.update(t, delta)
        counts[t] = counts.get(t, 0) + delta
        new = model_frontier(counts)
        assert antichain.frontier() == new
        assert sorted(changes) == expected_changes(old, new)
        check_queries(antichain, counts, probes)
        old = new


@given(update_programs())
def test_mutable_antichain_empties_when_every_update_is_undone(
    program: tuple[list[list[tuple[Timestamp, int]]], list[Timestamp]],
) -> None:
    batches, probes = program
    antichain = MutableAntichain()
    reported: dict[Timestamp, int] = {}
    everything = [u for batch in batches for u in batch]
    for batch in [*batches, [(t, -d) for t, d in everything]]:
        for t, d in antichain.update_iter(batch):
            reported[t] = reported.get(t, 0) + d
    assert antichain.is_empty()
    assert antichain.frontier() == ()
    for p in probes:
        assert antichain.count_for(p) == 0
    # The reported changes add up to the frontier's net movement: from empty to empty.
    assert all(v == 0 for v in reported.values()), reported
