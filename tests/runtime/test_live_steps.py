"""A live change moves its bins in as many configurations as its keys need
(timely.session.base.live_steps): one when no key moves, about LIVE_KEYS_PER_STEP keys
each, never more than LIVE_STEPS. Runs on the inline backend; outputs equal a fixed run's.
(test_live_rescale and test_live_sources keep every change at LIVE_STEPS, to test the
fluid steps with small state.)"""

from __future__ import annotations

import math

import pytest

from tests.runtime.test_live_rescale import run
from timely.session.base import LIVE_KEYS_PER_STEP, LIVE_STEPS, live_steps


@pytest.mark.parametrize(
    ("keys", "moving", "bins", "want"),
    [
        (None, 128, 256, LIVE_STEPS),  # keys not known: the most
        (0, 128, 256, 1),  # nothing to move
        (10_000, 128, 256, math.ceil(5_000 / LIVE_KEYS_PER_STEP)),
        (100_000, 128, 256, LIVE_STEPS),  # 50,000 keys: capped
        (10_000_000, 3, 256, 3),  # no more configurations than bins that move
        (100_000, 0, 256, 1),
    ],
)
def test_configurations_follow_the_keys_that_move(
    keys: int | None, moving: int, bins: int, want: int
) -> None:
    assert live_steps(keys, moving, bins) == want


def test_a_change_with_no_state_to_move_takes_one_configuration() -> None:
    """``count_by`` keeps counts per epoch only: with the workers caught up at each epoch
    nothing is held when the change starts, and its bins move in one configuration (it
    took LIVE_STEPS before: 4 s of input at 0.5 s epochs)."""
    epochs = [[(e * 7 + i * 5) % 23 for i in range(6)] for e in range(12)]
    want, _, _ = run("count_by", epochs, 1, 0)
    got, rescales, _ = run("count_by", epochs, 1, 0, {3: 2})
    assert got == want
    (r,) = rescales
    assert r["path"] == "live" and r["epochs"] == [r["epoch"]]


def test_many_keys_move_in_steps_of_about_live_keys_per_step() -> None:
    """A running count over 3 x LIVE_KEYS_PER_STEP keys: half of them move to the joiner,
    in two configurations (1.5 x LIVE_KEYS_PER_STEP keys), and the counts stay exact."""
    keys = 3 * LIVE_KEYS_PER_STEP
    epochs = [list(range(e, keys, 3)) for e in range(3)] + [[1, 2, 3]] * 6
    want, _, _ = run("running_reduce_wide", epochs, 1, 0)
    got, rescales, _ = run("running_reduce_wide", epochs, 1, 0, {4: 2})
    assert got == want
    (r,) = rescales
    moving_keys = keys / 2
    assert len(r["epochs"]) == math.ceil(moving_keys / LIVE_KEYS_PER_STEP) == 2
