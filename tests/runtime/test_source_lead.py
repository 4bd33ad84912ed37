"""The control input's lead over the sources is kept in time (timely.session.lead): at a
steady pace it covers LEAD_SECONDS of reading, never fewer than MIN_LEAD epochs; on a
fake clock."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import MUTANT_SEARCH
from timely.session.lead import LEAD_SECONDS, MAX_LEAD, MIN_LEAD, WINDOW, SourceLead


class FixedLead(SourceLead):
    """A mutant: the old rule, a lead of so many epochs whatever their length."""

    def epochs(self) -> int:
        return self.initial


class NoFloor(SourceLead):
    """A mutant: the lead in time with no floor (one epoch of 0.5 s: stalls on Ray)."""

    def epochs(self) -> int:
        pace = self.pace()
        return self.initial if pace is None else max(1, math.ceil(pace * LEAD_SECONDS - 1e-9))


def steady(
    seconds_per_epoch: float, epochs: int, initial: int = 4, kind: type[SourceLead] = SourceLead
) -> SourceLead:
    lead = kind(initial)
    for e in range(epochs):
        lead.observe(e, 100.0 + e * seconds_per_epoch)
    return lead


def test_before_a_pace_is_known_the_lead_is_the_initial_one() -> None:
    lead = SourceLead(4)
    assert lead.epochs() == 4
    lead.observe(3, 1.0)
    lead.observe(3, 2.0)  # the same epoch again: still no pace
    assert lead.pace() is None and lead.epochs() == 4


@pytest.mark.parametrize(
    ("seconds_per_epoch", "want"),
    [(0.5, MIN_LEAD), (0.1, 3), (0.01, 25), (0.001, 250), (1e-6, MAX_LEAD)],
)
def test_the_lead_covers_a_quarter_second_of_reading(seconds_per_epoch: float, want: int) -> None:
    assert steady(seconds_per_epoch, 40).epochs() == want


def spans_lead_seconds(lead: SourceLead, seconds_per_epoch: float) -> None:
    got = lead.epochs()
    assert MIN_LEAD <= got <= MAX_LEAD
    if got not in (MIN_LEAD, MAX_LEAD):
        # enough epochs to cover LEAD_SECONDS, and not one more than needed
        assert got * seconds_per_epoch >= LEAD_SECONDS * (1 - 1e-9)
        assert (got - 1) * seconds_per_epoch < LEAD_SECONDS * (1 + 1e-9)


@given(st.floats(1e-5, 10.0), st.integers(2, 3 * WINDOW))
def test_at_a_steady_pace_the_lead_spans_lead_seconds_or_its_bounds(
    seconds_per_epoch: float, epochs: int
) -> None:
    spans_lead_seconds(steady(seconds_per_epoch, epochs), seconds_per_epoch)


@pytest.mark.parametrize("mutant", [FixedLead, NoFloor])
def test_a_lead_in_epochs_or_without_a_floor_is_caught(mutant: type[SourceLead]) -> None:
    @MUTANT_SEARCH
    @given(st.floats(1e-5, 10.0), st.integers(2, 3 * WINDOW))
    def prop(seconds_per_epoch: float, epochs: int) -> None:
        spans_lead_seconds(steady(seconds_per_epoch, epochs, kind=mutant), seconds_per_epoch)

    with pytest.raises(AssertionError):
        prop()


def test_the_pace_follows_the_latest_reads() -> None:
    """A run whose sources speed up (a backlog read at once, epochs shorter) gets the
    longer lead within one window."""
    lead = steady(0.5, WINDOW)
    assert lead.epochs() == MIN_LEAD
    for e in range(WINDOW, 2 * WINDOW):
        lead.observe(e, 100.0 + WINDOW * 0.5 + (e - WINDOW + 1) * 0.01)
    assert lead.epochs() == math.ceil(LEAD_SECONDS / 0.01)
