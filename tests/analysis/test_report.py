"""The HTML report of ``python -m timely profile``, on a real (inline) trace of a dataflow
with a loop and an exchange: one file that parses, names every operator, holds two
plots and the graph, and fetches nothing; the command writes it where asked, keeps
stdout for the tables or the JSON, and fails clearly where it cannot write."""

from __future__ import annotations

import json
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import msgpack
import pytest

import operators  # noqa: F401  (select, where, count_by)
from analysis.graphview import Graph
from analysis.profile import DIMENSIONS, Profile, profile
from analysis.report import write_report
from timely import Dataflow
from timely.cli import main


def _dec(x: int) -> int:
    return x - 1


def _positive(x: int) -> bool:
    return x > 0


def _seven(x: int) -> int:
    return x % 7


def _flow() -> Dataflow:
    flow = Dataflow("reported")
    nums = flow.new_input("nums")
    looped = nums.stream.select(abs, name="abs").iterate(
        lambda s: s.select(_dec, name="dec").where(_positive, name="positive"), max_iters=4
    )
    looped.count_by(_seven).collect("counts")
    for e in range(20):
        nums.advance_to(e)
        nums.send(list(range(300)))
    return flow


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A trace directory to copy from (tests that write into one use their own copy)."""
    directory = tmp_path_factory.mktemp("trace")
    _flow().run(workers=2, backend="inline", trace=str(directory))
    return directory


@pytest.fixture
def copy(trace: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(trace, tmp_path / "trace"))


class Page(HTMLParser):
    """What a test needs of a page: tags, attributes, ids and text."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.open: list[str] = []
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def ids(self) -> list[str]:
        return [str(a["id"]) for _, a in self.tags if a.get("id")]

    def count(self, tag: str) -> int:
        return sum(t == tag for t, _ in self.tags)


def _page(path: Path) -> Page:
    return Page(path.read_text(encoding="utf-8"))


def test_the_report_names_every_operator_and_holds_two_plots_and_the_graph(
    trace: Path, tmp_path: Path
) -> None:
    p = profile(str(trace), window=0.01)
    out = write_report(p, tmp_path / "report.html", source=str(trace))
    assert out == tmp_path / "report.html" and out.is_file()
    assert [f.name for f in tmp_path.iterdir()] == ["report.html"]  # no partial file left
    page = _page(out)
    text = " ".join(page.text)
    for key, _ in DIMENSIONS:
        assert p.tables[key], key
        for name, _, _ in p.tables[key]:
            assert name in text, (key, name)
    ids = page.ids()
    assert len(ids) == len(set(ids)), "every id once in the page"
    assert {"cp-operators-plot", "cp-workers-plot"} <= set(ids)
    assert p.graph is not None
    graph = Graph.parse(p.graph)
    assert {f"v-{v}" for v in range(len(graph.names))} <= set(ids)
    assert page.count("svg") == 3  # two plots and the graph
    cps = {n: c for n, c, _ in p.tables["operators"]}
    source = out.read_text(encoding="utf-8")
    for v, name in enumerate(graph.names):  # each operator's CP on its vertex's label
        found = re.search(rf'id="v-{v}-label"[^>]*>([^<]*)<', source)
        assert found is not None
        want = f"CP {cps[name]:.3f}" if name in cps else "not active"
        assert found.group(1).startswith(want), (name, found.group(1))


def test_the_report_fetches_nothing(trace: Path, tmp_path: Path) -> None:
    page = _page(write_report(profile(str(trace), window=0.01), tmp_path / "r.html"))
    for tag, attrs in page.tags:
        assert tag not in ("script", "link", "img", "iframe", "object", "embed"), tag
        for name, value in attrs.items():
            if name in ("src", "href", "xlink:href", "data", "action"):
                assert value is not None and value.startswith("#"), (tag, name, value)
            assert "url(http" not in (value or ""), (tag, name, value)


def test_the_series_weigh_up_to_the_tables(trace: Path) -> None:
    p = profile(str(trace), window=0.01)
    s = p.series
    assert len(s.starts) == len(s.ends) == len(s.paths) == p.windows > 1
    assert s.starts[0] == 0 and all(a < b for a, b in zip(s.starts, s.ends))
    lengths = [b - a for a, b, ok in zip(s.starts, s.ends, s.paths) if ok]
    weights = [b - a if ok else 0.0 for a, b, ok in zip(s.starts, s.ends, s.paths)]
    for key in ("operators", "workers"):
        series = getattr(s, key)
        assert set(series) == {n for n, _, _ in p.tables[key]}
        for name, cp, _ in p.tables[key]:
            weighed = sum(c * w for c, w in zip(series[name], weights)) / sum(lengths)
            assert weighed == pytest.approx(cp), (key, name)


def _strip_graph(directory: Path) -> None:
    """Make the trace look like one written before headers carried the graph."""
    for path in directory.glob("worker-*.trace"):
        unpacker = msgpack.Unpacker(raw=False, strict_map_key=False)
        unpacker.feed(path.read_bytes())
        items = list(unpacker)
        items[0].pop("graph")
        path.write_bytes(b"".join(msgpack.packb(item) for item in items))


def test_an_older_trace_gets_a_report_without_the_graph_saying_why(
    copy: Path, tmp_path: Path
) -> None:
    _strip_graph(copy)
    p = profile(str(copy))
    assert p.graph is None
    page = _page(write_report(p, tmp_path / "old.html"))
    assert not any(i.startswith("v-") for i in page.ids())
    assert page.count("svg") == 2
    assert "graph is left out" in " ".join(page.text)


def test_the_command_writes_the_report_beside_the_trace_and_keeps_stdout(
    copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["profile", str(copy)]) == 0
    out, err = capsys.readouterr()
    default = copy / "profile.html"
    assert default.is_file() and "operators" in out
    assert f"timely: report written to {default}" in err and str(default) not in out
    page = _page(default)
    assert page.count("svg") == 3

    default.unlink()
    assert main(["profile", str(copy), "--json"]) == 0
    out, err = capsys.readouterr()
    report: dict[str, Any] = json.loads(out)  # stdout is the JSON object alone
    assert {"activities", "operators", "workers", "channels", "series"} <= set(report)
    assert set(report["series"]["operators"]) == {r["name"] for r in report["operators"]}
    assert default.is_file() and "report written" in err


def test_html_chooses_the_path_and_no_html_writes_none(
    copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chosen = tmp_path / "elsewhere.html"
    assert main(["profile", str(copy), "--html", str(chosen), "--json"]) == 0
    out, err = capsys.readouterr()
    json.loads(out)
    assert chosen.is_file() and not (copy / "profile.html").exists()
    assert str(chosen) in err
    assert main(["profile", str(copy), "--no-html"]) == 0
    out, err = capsys.readouterr()
    assert "operators" in out and err == "" and not (copy / "profile.html").exists()


def test_an_unwritable_report_path_fails_clearly_before_any_output(
    trace: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "no such folder" / "r.html"
    assert main(["profile", str(trace), "--html", str(missing)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert "cannot write the report" in err and str(missing) in err and "--no-html" in err
    assert not missing.parent.exists()


def test_a_profile_without_windows_still_makes_a_page(tmp_path: Path) -> None:
    empty = Profile(run="empty", windows=0, windows_without_paths=0, seconds=0.0, tables={})
    page = _page(write_report(empty, tmp_path / "empty.html"))
    assert page.count("svg") == 0
    assert "nothing to plot" in " ".join(page.text)
