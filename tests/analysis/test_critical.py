"""Critical participation against brute force, on small random traces, with mutation checks.

The properties are plain functions of a trace (and of how CP is computed), so the same
property that passes for ``analysis`` is shown to fail for each deliberately broken
variant: a property that cannot fail proves nothing.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager

import pytest
from hypothesis import Phase, given, settings

import analysis.pag
from analysis import PAG, build_pag, critical_participation, path_counts
from tests.analysis.traces import CpOf, Trace, activity_key, brute_force, by_key, traces


def _cp(pag: PAG) -> tuple[float, ...]:
    return critical_participation(pag).cp


def _pag(trace: Trace) -> PAG:
    return build_pag(trace.intervals, trace.messages, trace.start, trace.end)


# -- the properties ----------------------------------------------------------------------


def equals_brute_force(trace: Trace, cp_of: CpOf = _cp) -> None:
    """The PAG's activities are the oracle's, and each one's CP is the oracle's (1e-9)."""
    pag = _pag(trace)
    oracle = brute_force(trace)
    got = by_key(pag, cp_of(pag))
    assert got.keys() == oracle.cp.keys()
    for key, want in oracle.cp.items():
        assert math.isclose(got[key], want, rel_tol=1e-9, abs_tol=1e-12), (key, got[key], want)


def sums_to_one(trace: Trace, cp_of: CpOf = _cp) -> None:
    """Over a window with a start-to-end path, the CPs sum to 1; without one, all are 0."""
    pag = _pag(trace)
    cp = cp_of(pag)
    if path_counts(pag).paths > 0:
        assert math.isclose(math.fsum(cp), 1.0, rel_tol=1e-9)
    else:
        assert all(c == 0 for c in cp)


def stays_in_window(trace: Trace, cp_of: CpOf = _cp) -> None:
    """Every vertex and activity of the PAG lies in the window it was built for."""
    pag = _pag(trace)
    assert all(trace.start <= t <= trace.end for t in pag.times)
    assert all(trace.start <= a.start <= a.end <= trace.end for a in pag.activities)
    assert all(trace.start <= a.start <= a.end <= trace.end for a in pag.removed)


# -- the real thing passes ---------------------------------------------------------------


@given(traces())
def test_cp_equals_brute_force_enumeration(trace: Trace) -> None:
    equals_brute_force(trace)


@given(traces())
def test_cps_sum_to_one_when_a_path_exists(trace: Trace) -> None:
    sums_to_one(trace)


@given(traces())
def test_path_counts_are_exact(trace: Trace) -> None:
    pag = _pag(trace)
    oracle = brute_force(trace)
    counts = path_counts(pag)
    critical = critical_participation(pag)
    assert counts.paths == oracle.paths == critical.paths
    assert critical.has_paths == (oracle.paths > 0)
    assert counts.paths == sum(counts.bwd[s] for s in pag.sources)
    through: dict[object, int] = {}
    for a in pag.activities:
        k = activity_key(a)
        through[k] = through.get(k, 0) + counts.fwd[a.src] * counts.bwd[a.dst]
    assert through == dict(oracle.through)


@given(traces())
def test_pag_stays_in_its_window(trace: Trace) -> None:
    stays_in_window(trace)


@given(traces(max_workers=3, horizon=400, max_messages=40, skew=False))
def test_cps_sum_to_one_on_busier_traces(trace: Trace) -> None:
    """Beyond what brute force can enumerate: the conservation law still holds."""
    sums_to_one(trace)
    assert all(0.0 <= c <= 1.0 + 1e-12 for c in _cp(_pag(trace)))


def test_counts_of_thousands_of_bits_give_cps_that_sum_to_one() -> None:
    """Three workers exchanging 4,500 messages: N beyond a float's range, CPs still sum to 1."""
    from analysis import Interval, Message

    intervals, messages = [], []
    for step in range(1500):
        for w in range(3):
            intervals.append(Interval(w, step * 10, step * 10 + 10, "processing", "op"))
            peer = (w + 1) % 3
            messages.append(Message("frame", w, step * 10 + w, peer, step * 10 + 4 + w))
    pag = build_pag(intervals, messages, 0, 15_000)
    critical = critical_participation(pag)
    assert critical.paths.bit_length() > 1100
    assert math.isclose(math.fsum(critical.cp), 1.0, rel_tol=1e-12)


# -- mutants: each must be caught by the same properties ---------------------------------


def _forward_only(pag: PAG) -> list[float]:
    """Counts only the paths that reach an activity, not those that go on to the end."""
    counts = path_counts(pag)
    if counts.paths == 0:
        return [0.0] * len(pag.activities)
    return [counts.fwd[a.src] * a.weight / (counts.paths * pag.length) for a in pag.activities]


@contextmanager
def _keeps_waiting() -> Iterator[None]:
    """Waiting edges stay in the graph."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(analysis.pag, "NEVER_CRITICAL", frozenset())
        yield


@contextmanager
def _does_not_clip() -> Iterator[None]:
    """Intervals are taken whole, whatever the window."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(analysis.pag, "_clip", lambda s, e, start, end: (s, e))
        yield


@contextmanager
def _as_is() -> Iterator[None]:
    yield


Property = Callable[[Trace, CpOf], None]
Patch = Callable[[], AbstractContextManager[None]]
MUTANTS: list[tuple[str, Patch, CpOf, Property]] = [
    ("forward counts only, vs brute force", _as_is, _forward_only, equals_brute_force),
    ("forward counts only, sum", _as_is, _forward_only, sums_to_one),
    ("waiting edges kept, vs brute force", _keeps_waiting, _cp, equals_brute_force),
    ("not clipped to the window, vs brute force", _does_not_clip, _cp, equals_brute_force),
    ("not clipped to the window, in window", _does_not_clip, _cp, stays_in_window),
]


def _search(prop: Property, cp_of: CpOf) -> Callable[[], None]:
    """``prop`` over a fixed, reproducible search of 500 traces."""

    @settings(
        max_examples=500,
        phases=[Phase.generate],
        derandomize=True,
        report_multiple_bugs=False,
        print_blob=False,
        database=None,
    )
    @given(traces())
    def check(trace: Trace) -> None:
        prop(trace, cp_of)

    return check


@pytest.mark.parametrize(
    ("patch", "cp_of", "prop"), [m[1:] for m in MUTANTS], ids=[m[0] for m in MUTANTS]
)
def test_mutants_are_caught(patch: Patch, cp_of: CpOf, prop: Property) -> None:
    with patch(), pytest.raises(AssertionError):
        _search(prop, cp_of)()


@pytest.mark.parametrize("prop", [equals_brute_force, sums_to_one, stays_in_window])
def test_the_same_search_passes_the_real_thing(prop: Property) -> None:
    """The control: what catches the mutants is the bug, not the search."""
    _search(prop, _cp)()
