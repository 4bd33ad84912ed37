"""Property tests for ``progress.summary.PathSummary``.

The brute-force model of a path is the list of its primitive steps (identity, ingress,
egress, feedback(k)) applied to a timestamp one at a time. A summary built by composing
the steps' summaries with ``followed_by`` must act exactly like the walk; the other laws
(unit, associativity, monotonicity, ``advances``) are checked against that model or
against direct searches over small timestamps.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from functools import cache

import pytest
from hypothesis import given
from hypothesis import strategies as st

from progress.summary import PathSummary
from progress.timestamp import Timestamp

# --- the brute-force model -------------------------------------------------------------

Step = tuple[str, int]
"""``("identity", 0)``, ``("ingress", 0)``, ``("egress", 0)`` or ``("feedback", k)``."""


@dataclass(frozen=True)
class Walk:
    """Primitive steps starting at loop depth ``depth`` (so timestamps of ``depth + 1``)."""

    depth: int
    steps: tuple[Step, ...]


def apply_step(step: Step, time: Timestamp | None) -> Timestamp | None:
    if time is None:
        return None
    kind, k = step
    if kind == "identity":
        return time
    if kind == "ingress":
        return (*time, 0)
    if kind == "egress":
        return time[:-1] if len(time) > 1 else None  # never drop the epoch
    if kind == "feedback":
        return (*time[:-1], time[-1] + k)
    raise AssertionError(kind)


def apply_steps(steps: tuple[Step, ...], time: Timestamp) -> Timestamp | None:
    out: Timestamp | None = time
    for step in steps:
        out = apply_step(step, out)
    return out


def step_summary(step: Step) -> PathSummary:
    kind, k = step
    if kind == "identity":
        return PathSummary.identity()
    if kind == "ingress":
        return PathSummary.ingress()
    if kind == "egress":
        return PathSummary.egress()
    if kind == "feedback":
        return PathSummary.feedback(k)
    raise AssertionError(kind)


def compose(steps: tuple[Step, ...]) -> PathSummary:
    """Left fold: the summary of the first step, followed by the next, and so on."""
    summary = PathSummary.identity()
    for step in steps:
        summary = summary.followed_by(step_summary(step))
    return summary


def compose_right(steps: tuple[Step, ...]) -> PathSummary:
    """Right fold of the same path: the last step, preceded by the one before, ..."""
    summary = PathSummary.identity()
    for step in reversed(steps):
        summary = step_summary(step).followed_by(summary)
    return summary


def depths(walk: Walk) -> list[int]:
    """The loop depth before the first step and after each step."""
    out = [walk.depth]
    for kind, _ in walk.steps:
        out.append(out[-1] + {"ingress": 1, "egress": -1}.get(kind, 0))
    return out


def has_kept_feedback(walk: Walk) -> bool:
    """Some feedback step adds to a counter that exists all along the walk.

    A feedback step at depth ``d`` adds to counter ``d``; that counter is one the walk
    keeps (present at its start and never dropped) iff the depth never goes below ``d``.
    """
    trail = depths(walk)
    lowest = min(trail)
    return any(kind == "feedback" and trail[i] == lowest for i, (kind, _) in enumerate(walk.steps))


def product_le(a: Timestamp, b: Timestamp) -> bool:
    assert len(a) == len(b)
    return all(x <= y for x, y in zip(a, b))


def le_or_both_none(a: Timestamp | None, b: Timestamp | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return product_le(a, b)


def normal_form_steps(summary: PathSummary) -> tuple[Step, ...]:
    """A walk whose composition should be ``summary``: pop, advance, then push."""
    steps: list[Step] = [("egress", 0)] * summary.pop
    if summary.advance:
        steps.append(("feedback", summary.advance))
    for c in summary.push:
        steps.append(("ingress", 0))
        if c:
            steps.append(("feedback", c))
    return tuple(steps)


# --- strategies ------------------------------------------------------------------------

FEEDBACK = st.integers(min_value=1, max_value=3)
COORD = st.integers(min_value=0, max_value=5)


AT_THE_TOP = st.sampled_from(["identity", "ingress"])
IN_A_LOOP = st.sampled_from(["identity", "ingress", "egress", "feedback"])
EXTRA = st.integers(min_value=0, max_value=2)


@st.composite
def walks(draw: st.DrawFn, max_depth: int = 3, max_steps: int = 8) -> Walk:
    """A well-formed path: egress and feedback only where there is a loop counter."""
    start = draw(st.integers(min_value=0, max_value=max_depth))
    depth = start
    steps: list[Step] = []
    for _ in range(draw(st.integers(min_value=0, max_value=max_steps))):
        kind = draw(IN_A_LOOP if depth >= 1 else AT_THE_TOP)
        if kind == "feedback":
            steps.append((kind, draw(FEEDBACK)))
        else:
            steps.append((kind, 0))
        depth += {"ingress": 1, "egress": -1}.get(kind, 0)
    return Walk(start, tuple(steps))


@st.composite
def cycles(draw: st.DrawFn) -> Walk:
    """A walk that ends at the depth it started at (a path around a cycle)."""
    walk = draw(walks(max_depth=2, max_steps=6))
    end = depths(walk)[-1]
    fix: tuple[Step, ...] = (
        (("egress", 0),) * (end - walk.depth)
        if end > walk.depth
        else (("ingress", 0),) * (walk.depth - end)
    )
    return Walk(walk.depth, walk.steps + fix)


any_steps = st.lists(
    st.one_of(
        st.sampled_from([("identity", 0), ("ingress", 0), ("egress", 0)]),
        st.tuples(st.just("feedback"), FEEDBACK),
    ),
    max_size=8,
).map(tuple)
"""Steps with no regard for depth: the walk may try to drop the epoch."""

normal_forms = st.builds(
    PathSummary,
    pop=st.integers(min_value=0, max_value=3),
    advance=st.integers(min_value=0, max_value=4),
    push=st.lists(st.integers(min_value=0, max_value=4), max_size=3).map(tuple),
)

summaries = st.one_of(normal_forms, walks().map(lambda w: compose(w.steps)))


@cache
def times_of(length: int) -> st.SearchStrategy[Timestamp]:
    """Timestamps of ``length`` (cached: each strategy is built once)."""
    return st.tuples(*[COORD] * length)


any_time = st.integers(min_value=1, max_value=6).flatmap(times_of)


@st.composite
def walk_and_time(draw: st.DrawFn) -> tuple[Walk, Timestamp]:
    """A walk and a timestamp it applies to (possibly deeper than the walk's start)."""
    walk = draw(walks())
    extra = draw(EXTRA)
    return walk, draw(times_of(walk.depth + 1 + extra))


@st.composite
def summary_and_time(draw: st.DrawFn) -> tuple[PathSummary, Timestamp]:
    """A summary and a timestamp deep enough for it to apply."""
    summary = draw(summaries)
    extra = draw(EXTRA)
    return summary, draw(times_of(summary.pop + 1 + extra))


@st.composite
def ordered_summaries(draw: st.DrawFn) -> tuple[PathSummary, PathSummary]:
    """``(s1, s2)`` with ``s2`` adding at least as much as ``s1`` everywhere."""
    low = draw(summaries)
    bump = st.integers(min_value=0, max_value=3)
    high = PathSummary(
        low.pop,
        low.advance + draw(bump),
        tuple(c + draw(bump) for c in low.push),
    )
    return low, high


def grid(length: int, values: list[int]) -> list[Timestamp]:
    return [tuple(c) for c in itertools.product(values, repeat=length)]


# --- the key law: a composed summary acts like its walk --------------------------------


@given(walk_and_time())
def test_composed_summary_acts_like_its_steps(case: tuple[Walk, Timestamp]) -> None:
    walk, time = case
    expected = apply_steps(walk.steps, time)
    assert expected is not None  # a well-formed walk never drops the epoch
    assert compose(walk.steps).results_in(time) == expected


@given(any_steps, any_time)
def test_composed_summary_acts_like_any_steps(steps: tuple[Step, ...], time: Timestamp) -> None:
    # Including walks that drop the epoch on the way: the summary must say None then.
    assert compose(steps).results_in(time) == apply_steps(steps, time)


@given(any_steps)
def test_left_and_right_folds_agree(steps: tuple[Step, ...]) -> None:
    assert compose(steps) == compose_right(steps)


@given(walks())
def test_output_depth_follows_the_walk(walk: Walk) -> None:
    assert compose(walk.steps).output_depth(walk.depth) == depths(walk)[-1]


@given(summary_and_time())
def test_output_depth_matches_results(case: tuple[PathSummary, Timestamp]) -> None:
    summary, time = case
    result = summary.results_in(time)
    assert result is not None
    assert len(result) - 1 == summary.output_depth(len(time) - 1)


@given(summaries, any_time)
def test_results_in_follows_the_normal_form(summary: PathSummary, time: Timestamp) -> None:
    # The docstring's definition: drop ``pop`` counters, add ``advance`` to the
    # coordinate that is then last, append ``push``; None if the epoch would go.
    keep = len(time) - summary.pop
    if keep < 1:
        assert summary.results_in(time) is None
        return
    head = list(time[:keep])
    head[-1] += summary.advance
    assert summary.results_in(time) == (*head, *summary.push)


@given(normal_forms)
def test_every_normal_form_is_some_walk(summary: PathSummary) -> None:
    assert compose(normal_form_steps(summary)) == summary


# --- algebra of followed_by ------------------------------------------------------------


@given(summaries)
def test_identity_is_a_two_sided_unit(summary: PathSummary) -> None:
    identity = PathSummary.identity()
    assert summary.followed_by(identity) == summary
    assert identity.followed_by(summary) == summary


@given(summaries, summaries, summaries)
def test_followed_by_is_associative(a: PathSummary, b: PathSummary, c: PathSummary) -> None:
    assert a.followed_by(b).followed_by(c) == a.followed_by(b.followed_by(c))


@given(summaries, summaries, any_time)
def test_followed_by_is_composition(a: PathSummary, b: PathSummary, time: Timestamp) -> None:
    middle = a.results_in(time)
    expected = None if middle is None else b.results_in(middle)
    assert a.followed_by(b).results_in(time) == expected


@given(walks(), walks(), st.data())
def test_concatenated_walks_compose(first: Walk, second: Walk, data: st.DataObject) -> None:
    time = data.draw(times_of(first.depth + 1))
    joined = first.steps + second.steps
    assert compose(first.steps).followed_by(compose(second.steps)) == compose(joined)
    assert compose(joined).results_in(time) == apply_steps(joined, time)


# --- monotonicity ----------------------------------------------------------------------


@given(summary_and_time(), st.data())
def test_monotone_in_the_timestamp(
    case: tuple[PathSummary, Timestamp], data: st.DataObject
) -> None:
    summary, low = case
    high = tuple(x + d for x, d in zip(low, data.draw(times_of(len(low)))))
    low_out = summary.results_in(low)
    high_out = summary.results_in(high)
    assert low_out is not None
    assert high_out is not None
    assert product_le(low_out, high_out)


@given(summaries, st.data())
def test_monotone_in_the_timestamp_random_pairs(summary: PathSummary, data: st.DataObject) -> None:
    length = data.draw(st.integers(min_value=1, max_value=5))
    a = data.draw(times_of(length))
    b = data.draw(times_of(length))
    if product_le(a, b):
        assert le_or_both_none(summary.results_in(a), summary.results_in(b))


@given(ordered_summaries(), any_time)
def test_monotone_in_the_summary(pair: tuple[PathSummary, PathSummary], time: Timestamp) -> None:
    low, high = pair
    assert low.less_equal(high)
    assert le_or_both_none(low.results_in(time), high.results_in(time))


@given(ordered_summaries(), summaries, any_time)
def test_composition_preserves_the_summary_order(
    pair: tuple[PathSummary, PathSummary], other: PathSummary, time: Timestamp
) -> None:
    low, high = pair
    after_low, after_high = low.followed_by(other), high.followed_by(other)
    assert after_low.less_equal(after_high)
    assert le_or_both_none(after_low.results_in(time), after_high.results_in(time))
    before_low, before_high = other.followed_by(low), other.followed_by(high)
    assert before_low.less_equal(before_high)
    assert le_or_both_none(before_low.results_in(time), before_high.results_in(time))


@st.composite
def same_shape_pairs(draw: st.DrawFn) -> tuple[PathSummary, PathSummary]:
    pop = draw(st.integers(min_value=0, max_value=2))
    width = draw(st.integers(min_value=0, max_value=2))
    small = st.integers(min_value=0, max_value=2)

    def one() -> PathSummary:
        return PathSummary(pop, draw(small), tuple(draw(small) for _ in range(width)))

    return one(), one()


@given(same_shape_pairs())
def test_summary_order_is_exact_for_one_shape(pair: tuple[PathSummary, PathSummary]) -> None:
    # s1 <= s2 iff s1(t) <= s2(t) for every t; values 0..2 on the shortest timestamps
    # that apply are enough to tell any two summaries of one shape apart.
    low, high = pair
    everywhere = True
    for time in grid(low.pop + 1, [0, 1, 2]):
        a, b = low.results_in(time), high.results_in(time)
        assert a is not None
        assert b is not None
        everywhere = everywhere and product_le(a, b)
    assert low.less_equal(high) == everywhere
    assert (low.less_equal(high) and high.less_equal(low)) == (low == high)


@given(summaries, summaries)
def test_summaries_of_different_shapes_are_incomparable(a: PathSummary, b: PathSummary) -> None:
    if a.pop != b.pop or len(a.push) != len(b.push):
        assert not a.less_equal(b)
        assert not b.less_equal(a)
    else:
        assert a.less_equal(a)


# --- cycles must advance ---------------------------------------------------------------


def some_time_does_not_advance(summary: PathSummary, depth: int) -> bool:
    """Brute force: is there a timestamp at ``depth`` with ``results_in(t) <= t``?

    If one exists, one exists whose counters are 0, 1, 2 or a value of ``push``.
    """
    values = sorted({0, 1, 2, *summary.push})
    for time in grid(depth + 1, values):
        result = summary.results_in(time)
        assert result is not None
        if product_le(result, time):
            return True
    return False


@given(cycles())
def test_advances_iff_no_time_stays_put(walk: Walk) -> None:
    summary = compose(walk.steps)
    assert summary.pop == len(summary.push)  # a cycle ends at the depth it started
    assert summary.advances() == (not some_time_does_not_advance(summary, walk.depth))


@given(cycles())
def test_a_cycle_with_a_kept_feedback_advances(walk: Walk) -> None:
    summary = compose(walk.steps)
    if has_kept_feedback(walk):
        assert summary.advances()
    else:
        # Every feedback is undone by an egress: some time maps to itself or below.
        assert not summary.advances()
        assert some_time_does_not_advance(summary, walk.depth)


def test_feedback_loop_advances_and_identity_does_not() -> None:
    assert PathSummary.feedback(1).advances()
    assert not PathSummary.identity().advances()
    # ingress, feedback, egress: the counter that moved is the one thrown away.
    inner = compose((("ingress", 0), ("feedback", 1), ("egress", 0)))
    assert inner == PathSummary.identity()
    assert not inner.advances()


# --- invalid summaries -----------------------------------------------------------------

NEGATIVE = st.integers(max_value=-1)


@given(
    st.sampled_from(["pop", "advance", "push"]),
    NEGATIVE,
    st.lists(st.integers(min_value=0, max_value=3), max_size=3),
    st.data(),
)
def test_negative_components_raise(
    field: str, value: int, push: list[int], data: st.DataObject
) -> None:
    where = data.draw(st.integers(min_value=0, max_value=len(push)))
    with pytest.raises(ValueError):
        if field == "pop":
            PathSummary(pop=value, push=tuple(push))
        elif field == "advance":
            PathSummary(advance=value, push=tuple(push))
        else:
            PathSummary(push=(*push[:where], value, *push[where:]))


@given(st.integers(max_value=0), FEEDBACK)
def test_feedback_below_one_raises(bad: int, good: int) -> None:
    with pytest.raises(ValueError):
        PathSummary.feedback(bad)
    assert PathSummary.feedback(good) == PathSummary(0, good, ())
