"""The cadence controller alone, on synthetic timings.

A cycle of ``k`` epochs with a checkpoint cost ``c`` and a processing cost ``p`` per
epoch spends ``c / (c + k p)`` of its time coordinating. The controller must multiply
``k`` above ``hi``, take ``step`` off below ``lo``, stay within its bounds, ignore
cycles run under another interval, and at a steady load move one way only and settle
(in the band whenever an integer interval in range gives a fraction in it). The mutation
tests break each rule and show that these checks catch it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timely.checkpoint.aimd import AIMD, DEFAULT_BOUNDS, band_ratio, check_bounds

Make = Callable[..., AIMD]

BOUNDS = [DEFAULT_BOUNDS, (0.01, 0.05), (0.02, 0.04), (0.1, 0.3), (0.2, 0.5)]
"""Usable bounds (each band's ratio is at least 2), from narrow to wide."""


def fraction(c: float, p: float, k: int) -> float:
    """What the controller computes from a cycle's timings: ``coordination / total``."""
    return c / (c + k * p)


def simulate(ctrl: AIMD, c: float, p: float, cycles: int) -> list[int]:
    """The interval after each of ``cycles`` cycles at a steady load.

    After a change, a cycle that began under the old interval is reported too (as the
    coordinator sees one when the workers switch late): it must change nothing."""
    ks = [ctrl.interval]
    for _ in range(cycles):
        k = ctrl.interval
        total = c + k * p
        if ctrl.observe(c, total, k) != k:
            ctrl.observe(c, total, k)  # late: it ran under k, no longer the interval
        ks.append(ctrl.interval)
    return ks


def steady_problem(
    make: Make, c: float, p: float, k0: int, kmin: int, kmax: int, lo: float, hi: float
) -> str | None:
    """What is wrong with ``make``'s controller at a steady load (None: nothing)."""
    ctrl = make(interval=k0, lo=lo, hi=hi, min_interval=kmin, max_interval=kmax)
    k0 = ctrl.interval
    up = math.ceil(math.log2(kmax / k0)) if kmax > k0 else 0
    down = k0 - kmin
    ks = simulate(ctrl, c, p, max(up, down) + 3)
    if any(not kmin <= k <= kmax for k in ks):
        return f"left [{kmin}, {kmax}]: {ks}"
    steps = [b - a for a, b in itertools.pairwise(ks) if b != a]
    if any(s > 0 for s in steps) and any(s < 0 for s in steps):
        return f"oscillates: {ks}"
    if len(steps) > (up if steps and steps[0] > 0 else down):
        return f"{len(steps)} changes, more than the {up} doublings or {down} steps needed: {ks}"
    if ks[-1] != ks[-2] or ks[-2] != ks[-3]:
        return f"does not settle: {ks}"
    final = fraction(c, p, ks[-1])
    if any(lo <= fraction(c, p, k) <= hi for k in range(kmin, kmax + 1)):
        if not lo <= final <= hi:
            return f"settles at {ks[-1]} (fraction {final:.4f}) outside [{lo}, {hi}]: {ks}"
    elif ks[-1] not in (kmin, kmax):
        return f"no interval is in the band, yet it rests at {ks[-1]} inside the range: {ks}"
    return None


def response_problem(make: Make, k: int, f: float, kmin: int, kmax: int) -> str | None:
    """Whether one cycle at fraction ``f`` moves ``k`` as AIMD says (None: it does)."""
    lo, hi = DEFAULT_BOUNDS
    ctrl = make(interval=k, min_interval=kmin, max_interval=kmax)
    k = ctrl.interval
    got = ctrl.observe(f, 1.0, k)
    want = min(2 * k, kmax) if f > hi else max(k - 1, kmin) if f < lo else k
    return None if got == want else f"k={k}, fraction {f}: {got}, not {want}"


# -- the rules, one cycle at a time ---------------------------------------------------------


def test_multiplies_above_hi() -> None:
    ctrl = AIMD(interval=3)
    assert ctrl.observe(0.5, 1.0, 3) == 6
    assert ctrl.observe(0.2, 1.0, 6) == 12
    assert ctrl.interval == 12


def test_takes_a_step_off_below_lo() -> None:
    ctrl = AIMD(interval=10)
    assert ctrl.observe(0.01, 1.0, 10) == 9
    assert ctrl.observe(0.0, 1.0, 9) == 8


def test_keeps_the_interval_within_the_band() -> None:
    ctrl = AIMD(interval=5)
    for f in (0.05, 0.07, 0.10):
        assert ctrl.observe(f, 1.0, 5) == 5


def test_stays_within_its_bounds() -> None:
    ctrl = AIMD(interval=3, min_interval=2, max_interval=5)
    assert ctrl.observe(0.9, 1.0, 3) == 5
    assert ctrl.observe(0.9, 1.0, 5) == 5
    ctrl = AIMD(interval=2, min_interval=2, max_interval=5)
    assert ctrl.observe(0.0, 1.0, 2) == 2
    assert AIMD(interval=1000).interval == AIMD().max_interval


def test_ignores_a_cycle_under_another_interval() -> None:
    ctrl = AIMD(interval=4)
    assert ctrl.observe(0.9, 1.0, 2) == 4  # began before the last change
    assert ctrl.observe(0.0, 1.0, 8) == 4
    assert ctrl.observe(0.9, 0.0, 4) == 4  # no time: no measurement


@given(
    k=st.integers(1, 300),
    f=st.floats(0, 1),
    kmin=st.integers(1, 20),
    span=st.integers(0, 300),
)
def test_one_cycle_moves_the_interval_as_aimd_says(k: int, f: float, kmin: int, span: int) -> None:
    assert response_problem(AIMD, k, f, kmin, kmin + span) is None


def test_bounds_must_be_ordered_and_wide_enough() -> None:
    assert check_bounds(*DEFAULT_BOUNDS) is None
    assert band_ratio(*DEFAULT_BOUNDS) == pytest.approx(19 / 9)
    assert "0 < lo < hi < 1" in (check_bounds(0.1, 0.05) or "")
    assert "0 < lo < hi < 1" in (check_bounds(0.0, 0.05) or "")
    narrow = check_bounds(0.05, 0.09) or ""
    assert "too narrow" in narrow and "(0.05, 0.0952)" in narrow
    assert check_bounds(0.05, 0.0953) is None
    with pytest.raises(ValueError, match="too narrow"):
        AIMD(lo=0.05, hi=0.09)
    with pytest.raises(ValueError, match="factor"):
        AIMD(factor=1)


# -- a steady load: one way, then settled ---------------------------------------------------


@given(
    c=st.floats(1e-4, 10),
    p=st.floats(1e-4, 10),
    k0=st.integers(1, 300),
    kmin=st.integers(1, 8),
    span=st.integers(0, 300),
    bounds=st.sampled_from(BOUNDS),
)
def test_at_a_steady_load_it_settles_without_oscillating(
    c: float, p: float, k0: int, kmin: int, span: int, bounds: tuple[float, float]
) -> None:
    assert steady_problem(AIMD, c, p, k0, kmin, kmin + span, *bounds) is None


def test_settles_in_the_band_the_formula_gives() -> None:
    """c/p = 1: the band is k in [9, 19]; from 1 by doublings to 16, from 40 by steps to 19."""
    assert simulate(AIMD(interval=1), 1.0, 1.0, 8) == [1, 2, 4, 8, 16, 16, 16, 16, 16]
    assert simulate(AIMD(interval=40), 1.0, 1.0, 25)[-1] == 19


def test_follows_a_load_that_changes_tenfold() -> None:
    """Epochs ten times smaller make checkpoints relatively ten times dearer: longer
    intervals; ten times larger again: shorter ones."""
    ctrl = AIMD(interval=1)
    before = simulate(ctrl, 1.0, 1.0, 10)[-1]
    during = simulate(ctrl, 1.0, 0.1, 10)[-1]
    after = simulate(ctrl, 1.0, 1.0, 200)[-1]
    assert 9 <= before <= 19 and 90 <= during <= 190 and 9 <= after <= 19
    assert before < during and after < during


# -- mutations: each broken rule is caught --------------------------------------------------


class AdditiveIncrease(AIMD):
    def observe(self, coordination: float, total: float, interval: int) -> int:
        if interval == self.interval and total > 0 and coordination / total > self.hi:
            self.interval = min(self.interval + 1, self.max_interval)
            return self.interval
        return super().observe(coordination, total, interval)


class MultiplicativeDecrease(AIMD):
    def observe(self, coordination: float, total: float, interval: int) -> int:
        if interval == self.interval and total > 0 and coordination / total < self.lo:
            self.interval = max(self.interval // 2, self.min_interval)
            return self.interval
        return super().observe(coordination, total, interval)


class Unbounded(AIMD):
    def observe(self, coordination: float, total: float, interval: int) -> int:
        self.min_interval, self.max_interval = 0, 1 << 30
        return super().observe(coordination, total, interval)


class NoHysteresis(AIMD):
    """Aims at the middle of the band instead of keeping anything inside it."""

    def observe(self, coordination: float, total: float, interval: int) -> int:
        mid = (self.lo + self.hi) / 2
        if interval == self.interval and total > 0:
            f = coordination / total
            k = self.interval
            k = min(k * 2, self.max_interval) if f > mid else max(k - 1, self.min_interval)
            self.interval = k
        return self.interval


class CountsStaleCycles(AIMD):
    """Counts a cycle whatever interval it ran under."""

    def observe(self, coordination: float, total: float, interval: int) -> int:
        return super().observe(coordination, total, self.interval)


GRID = [
    (c, p, k0, kmin, kmax, *bounds)
    for c in (0.01, 0.3, 1.0)
    for p in (0.001, 0.1, 1.0)
    for k0 in (1, 7, 64)
    for kmin, kmax in ((1, 256), (2, 40))
    for bounds in BOUNDS
]


def _caught(make: Make) -> list[str]:
    problems = [steady_problem(make, *case) for case in GRID]
    problems += [response_problem(make, k, f, 1, 64) for k in (1, 5, 64) for f in (0.0, 0.07, 0.5)]
    return [p for p in problems if p is not None]


def test_the_checks_pass_the_controller_on_the_grid() -> None:
    assert _caught(AIMD) == []


@pytest.mark.parametrize(
    "mutant",
    [AdditiveIncrease, MultiplicativeDecrease, Unbounded, NoHysteresis, CountsStaleCycles],
)
def test_mutation_is_caught(mutant: Make) -> None:
    assert _caught(mutant), f"{mutant.__name__} passes every check"
