"""examples/table_ysb.py: the table API's YSB gives the row version's counts per
(campaign, window), and a latency for every window."""

from __future__ import annotations

import pytest

from tests.examples import load_example

table = load_example("table_ysb")
rows_version = load_example("ysb")


@pytest.mark.parametrize(
    ("seconds", "window_s", "workers", "seed"), [(30, 10, 2, 0), (7, 3, 1, 2), (12, 5, 3, 1)]
)
def test_counts_equal_the_row_versions(
    seconds: int, window_s: int, workers: int, seed: int
) -> None:
    ads = rows_version.ad_table(100, 10, seed)
    want, _ = rows_version.run(seconds, 300, ads, window_s, seed, workers=2, backend="inline")
    got, latency = table.run(seconds, 300, ads, window_s, seed, workers=workers, backend="inline")
    assert got == want
    # Which windows the run reported on (a count, not a time): every one, the last
    # possibly partial.
    reported = sorted(latency)
    assert reported == list(range(-(-seconds // window_s)))


def test_unknown_ads_are_dropped_as_in_the_row_version() -> None:
    """Views of ads the table does not name find no campaign in the join: not counted."""
    rows = rows_version.ad_table(10, 10)
    ads = [ad for ad, _ in rows]
    want, _ = rows_version.run(10, 200, rows[:50], ads=ads, workers=2, backend="inline")
    got, _ = table.run(10, 200, rows[:50], ads=ads, workers=2, backend="inline")
    assert got == want
    full, _ = table.run(10, 200, rows, ads=ads, workers=2, backend="inline")
    assert sum(got.values()) < sum(full.values())


def test_cli_inline(capsys: pytest.CaptureFixture[str]) -> None:
    table.main(["--backend", "inline", "--seconds", "20", "--events-per-second", "200"])
    assert "counts match the plain-Python count" in capsys.readouterr().out
