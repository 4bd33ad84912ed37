"""examples/ysb.py: views per (campaign, 10 s window) equal a plain-Python count."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.examples import load_example

ex = load_example("ysb")


def reference(
    seconds: int,
    per_second: int,
    rows: list[tuple[str, str]],
    window_s: int,
    seed: int,
    ads: list[str] | None = None,
) -> Counter[tuple[str, int]]:
    """Views per (campaign, window) of the events the example generates, in plain Python;
    events whose ad is not in ``rows`` are not counted."""
    campaign_of = dict(rows)
    want: Counter[tuple[str, int]] = Counter()
    for s in range(seconds):
        for event in ex.events_for(s, per_second, ads or [ad for ad, _ in rows], seed):
            _, _, ad, _, kind, t_ms, _ = event
            assert s * 1000 <= t_ms < (s + 1) * 1000
            if kind == "view" and ad in campaign_of:
                want[(campaign_of[ad], t_ms // (window_s * 1000))] += 1
    return want


@pytest.mark.parametrize(
    ("seconds", "window_s", "workers", "seed"), [(30, 10, 2, 0), (25, 10, 3, 1), (7, 3, 1, 2)]
)
def test_counts_and_latencies(seconds: int, window_s: int, workers: int, seed: int) -> None:
    rows = ex.ad_table(100, 10, seed)
    assert len(rows) == 1000 and len({c for _, c in rows}) == 100
    counts, latency = ex.run(seconds, 300, rows, window_s, seed, workers=workers, backend="inline")
    assert counts == dict(reference(seconds, 300, rows, window_s, seed))
    windows = -(-seconds // window_s)  # the last one may be partial
    assert sorted(latency) == list(range(windows))
    # Order, not a clock bound: each window is reported after its last epoch was fed.
    assert all(x >= 0 for x in latency.values())


def test_unknown_ads_are_dropped() -> None:
    rows = ex.ad_table(10, 10)
    ads = [ad for ad, _ in rows]
    known = rows[:50]  # half the ads have no campaign: their views are not counted
    counts, _ = ex.run(10, 200, known, ads=ads, workers=2, backend="inline")
    want = reference(10, 200, known, 10, 0, ads=ads)
    assert counts == dict(want)
    assert sum(want.values()) < sum(reference(10, 200, rows, 10, 0).values())


def test_cli_inline(capsys: pytest.CaptureFixture[str]) -> None:
    ex.main(["--backend", "inline", "--seconds", "20", "--events-per-second", "200"])
    out = capsys.readouterr().out
    assert sum(line.startswith("window ") for line in out.splitlines()) == 2
    assert "counts match the plain-Python count" in out
