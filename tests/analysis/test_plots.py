"""The plots' SVG fits in a page beside others: one ``<svg>`` element, every id prefixed
and every ``#`` reference resolved inside it; at most ``top`` lines, the lowest summed."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from analysis.plots import cp_over_time, scope_ids


def _plot(series: int, top: int = 10) -> str:
    starts, ends = [0.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 3.5]
    paths = [True, False, True, True]
    data = {f"op{i}": [0.05 * (i % 4) if ok else 0.0 for ok in paths] for i in range(series)}
    order = sorted(data, key=lambda n: -sum(data[n]))
    return cp_over_time(starts, ends, paths, data, "CP per operator", "p-", order, top)


def test_ids_are_prefixed_and_references_stay_inside() -> None:
    svg = _plot(3)
    assert svg.startswith("<svg") and "<metadata>" not in svg and "<?xml" not in svg
    root = ET.fromstring(svg)
    ids = [str(e.get("id")) for e in root.iter() if e.get("id")]
    assert ids and all(i.startswith("p-") for i in ids) and len(ids) == len(set(ids))
    refs = re.findall(r'href="#([^"]+)"|url\(#([^)]+)\)', svg)
    assert refs and all((a or b) in ids for a, b in refs)


def test_more_series_than_lines_are_summed_into_the_last() -> None:
    texts = re.findall(r"<!-- (.*?) -->", _plot(14, top=10))  # matplotlib notes each text
    assert "the other 5" in texts and sum(t.startswith("op") for t in texts) == 9
    assert "no path (CP unknown)" in texts
    texts = re.findall(r"<!-- (.*?) -->", _plot(10, top=10))
    assert not any(t.startswith("the other") for t in texts)
    assert sum(t.startswith("op") for t in texts) == 10


def test_scope_ids_leaves_colours_and_unknown_names_alone() -> None:
    svg = '<svg><path id="a1" fill="#abcdef"/><use href="#a1"/><use href="#zz"/></svg>'
    assert scope_ids(svg, "x-") == (
        '<svg><path id="x-a1" fill="#abcdef"/><use href="#x-a1"/><use href="#zz"/></svg>'
    )
