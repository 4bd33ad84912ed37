"""The progress bar (``progress=``): drawn on stderr when asked for, counting epochs
out of the run's epochs; never on a stderr that is not a terminal unless forced."""

from __future__ import annotations

import re

import pytest

from timely import ConfigError, Dataflow

EPOCHS = 12


def counted() -> Dataflow:
    flow = Dataflow("barred")
    numbers = flow.new_input("numbers")
    numbers.stream.select(lambda x: x * 2).collect("doubled")
    for epoch in range(EPOCHS):
        numbers.advance_to(epoch)
        numbers.send(range(100))
    return flow


def test_a_forced_bar_counts_every_epoch(capsys: pytest.CaptureFixture[str]) -> None:
    results = counted().run(workers=2, backend="inline", progress=True)
    assert len(results["doubled"]) == EPOCHS * 100
    err = capsys.readouterr().err
    # tqdm redraws with carriage returns; the last drawing is the finished bar.
    last = err.replace("\r", "\n").strip().splitlines()[-1]
    assert last.startswith("barred:")
    assert re.search(rf"\b{EPOCHS}/{EPOCHS}\b", last), last
    assert "records/s" in last


def test_auto_draws_nothing_when_stderr_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    counted().run(workers=2, backend="inline")  # run's default: progress="auto"
    assert "barred:" not in capsys.readouterr().err
    counted().run(workers=2, backend="inline", progress=False)
    assert capsys.readouterr().err == ""


def test_a_bad_value_fails_before_starting() -> None:
    with pytest.raises(ConfigError, match='progress must be True, False or "auto"'):
        counted().run(workers=1, backend="inline", progress="yes")
