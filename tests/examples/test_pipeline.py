"""examples/pipeline.py end to end at a small size, on local Ray and the test Spark, checked
against a computation of its own from the input files (pyarrow and plain Python)."""

from __future__ import annotations

import os
from collections import Counter, defaultdict
from typing import Any

import pyarrow.parquet as pq

from tests.examples import load_example

ex = load_example("pipeline")


def expected_ad_clicks(events: dict[str, list[Any]]) -> set[tuple[int, int, int]]:
    """``(window_end, ad, clicks)`` for every window ``(w - WINDOW, w]`` with a click."""
    clicks: dict[int, Counter[int]] = defaultdict(Counter)
    for e, ad, kind in zip(events["epoch"], events["ad"], events["kind"]):
        if kind == "click":
            clicks[e][ad] += 1
    out = set()
    for w in range(ex.EPOCHS + ex.WINDOW - 1):
        total: Counter[int] = Counter()
        for e in range(w - ex.WINDOW + 1, w + 1):
            total.update(clicks.get(e, Counter()))
        out.update((w, ad, n) for ad, n in total.items())
    return out


def find(parent: dict[int, int], x: int) -> int:
    while parent.setdefault(x, x) != x:
        x = parent[x]
    return x


def expected_components(follows: dict[str, list[Any]]) -> set[tuple[int, int, int]]:
    """``(epoch, least user, users)`` per component of the edges up to each epoch."""
    out = set()
    for epoch in range(ex.EPOCHS):
        parent: dict[int, int] = {}  # a union-find from scratch; roots are least members
        for e, u, v in zip(follows["epoch"], follows["src"], follows["dst"]):
            if e <= epoch:
                ru, rv = find(parent, u), find(parent, v)
                if ru != rv:
                    parent[max(ru, rv)] = min(ru, rv)
        sizes = Counter(find(parent, x) for x in list(parent))
        out.update((epoch, label, n) for label, n in sizes.items())
    return out


def test_pipeline_matches_an_independent_computation(
    spark: Any, ray_local: Any, tmp_path: Any
) -> None:
    summary = ex.run(str(tmp_path), size=3000, workers=2, backend="ray", quiet=True)
    inputs = tmp_path / "input-3000"
    events = pq.read_table(inputs / "events").to_pydict()
    follows = pq.read_table(inputs / "follows").to_pydict()
    assert len(events["epoch"]) == 3000 and len(follows["epoch"]) == 150
    assert summary["records"] == 3150

    results = summary["results"]
    ads = pq.read_table(os.path.join(results, "ad_clicks")).to_pydict()
    got_ads = set(zip(ads["window_end"], ads["ad"], ads["clicks"]))
    want_ads = expected_ad_clicks(events)
    assert got_ads == want_ads
    assert len(ads["ad"]) == len(want_ads)  # each (window, ad) once: exactly-once output

    comps = pq.read_table(os.path.join(results, "components")).to_pydict()
    got = list(zip(comps["epoch"], comps["component"], comps["users"]))
    want = expected_components(follows)
    assert set(got) == want and len(got) == len(want)

    last = ex.EPOCHS - 1
    final = [(label, n) for e, label, n in want if e == last]
    assert summary["components"] == len(final)
    assert summary["largest_component"] == max(n for _, n in final)
    top = sorted(((-n, ad) for w, ad, n in want_ads if w == last))[:3]
    assert summary["top_ads"] == [(ad, -n) for n, ad in top]
