"""The live page (``ui=True``): served on localhost while a run goes on, it draws the
graph and shows rates, frontiers and the critical path; a real browser renders it."""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

import operators  # noqa: F401  (select_many, count_by)
from timely import ConfigError, Dataflow
from timely.session.base import Session

LINE = "the quick brown fox jumps over the lazy dog"


def wordcount(name: str) -> tuple[Dataflow, Any]:
    flow = Dataflow(name)
    words = flow.new_input("words")
    words.stream.select_many(str.split).count_by(lambda w: w).collect("counts")
    return flow, words


def get(url: str) -> tuple[str, bytes]:
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.headers["Content-Type"], r.read()


class Feeder(threading.Thread):
    """Keeps the run busy (one epoch after another) until stopped; the only thread that
    touches the session while it runs."""

    def __init__(self, session: Session, words: Any) -> None:
        super().__init__(daemon=True)
        self.session, self.words = session, words
        self.stop = threading.Event()
        self.epochs = 0

    def run(self) -> None:
        while not self.stop.is_set():
            self.words.send([LINE] * 500)
            self.epochs += 1
            self.words.advance_to(self.epochs)
            self.session.poll(0.01)


def test_the_page_serves_the_graph_and_the_state() -> None:
    flow, words = wordcount("served")
    session = flow.activate(workers=2, backend="inline", ui=True)
    url = session.ui_url
    assert url is not None and url.startswith("http://127.0.0.1:")
    for epoch in range(3):
        words.send([LINE] * 10)
        words.advance_to(epoch + 1)
    kind, page = get(url)
    assert kind.startswith("text/html")
    assert b"src=" not in page and b"<link" not in page  # nothing fetched from elsewhere
    kind, svg = get(url + "graph.svg")
    assert kind == "image/svg+xml"
    assert b'id="v-1"' in svg and b"select_many" in svg
    session.poll()
    state = json.loads(get(url + "state.json")[1])
    assert state["run"] == "served" and state["state"] == "running"
    assert state["checkpoint_interval"] is None  # no checkpoint_every="auto" here
    assert [o["name"] for o in state["operators"]] == [
        "words",
        "select_many",
        "count_by.combine",
        "count_by",
        "collect:counts",
    ]
    assert state["outputs"][0]["name"] == "counts" and state["outputs"][0]["epoch"] == 2
    with pytest.raises(urllib.error.HTTPError):
        get(url + "nope")
    words.close()
    session.join()
    with pytest.raises(urllib.error.URLError):
        get(url)  # gone with the session


def test_bad_ui_options_fail_before_anything_starts() -> None:
    flow, _ = wordcount("bad")
    with pytest.raises(ConfigError, match="ui must be True, False or a TCP port"):
        flow.activate(workers=1, backend="inline", ui="yes")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(ConfigError, match="choose another port with ui=PORT"):
            flow.activate(workers=1, backend="inline", ui=busy.getsockname()[1])
    assert flow._session is None


PAGE = """
const text = (sel) => Array.from(document.querySelectorAll(sel), (e) => e.textContent);
return {
  operators: Array.from(
    document.querySelectorAll("#operators tr[data-operator]"),
    (row) => [row.getAttribute("data-operator"), row.querySelector("td.rate").textContent],
  ),
  frontiers: text("#outputs td.frontier"),
  graph: document.getElementById("graph").textContent,
  status: document.getElementById("status").textContent,
};
"""
"""Reads what the page shows in one script: the page's own script runs between two
refreshes, never during this one, so the rows, the graph and the status are of one
render (reading cell by cell through Selenium could see a row the next render had
replaced)."""


def test_a_browser_renders_a_running_dataflow(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    flow, words = wordcount("live")
    session = flow.activate(workers=2, backend="ray", ui=True)
    feeder = Feeder(session, words)
    feeder.start()
    try:
        assert session.ui_url is not None
        browser.get(session.ui_url)

        def shown(driver: Any) -> dict[str, Any] | None:
            """The page as data once it shows a rate above zero, an output's frontier
            and a running run; None (read again) until then."""
            page: dict[str, Any] = driver.execute_script(PAGE)
            rates = [float(rate.replace(",", "")) for _, rate in page["operators"]]
            ready = any(r > 0 for r in rates) and page["frontiers"]
            return page if ready and "running" in page["status"] else None

        # A wait, not a bound on the page: the run keeps going until the page shows it.
        page = WebDriverWait(browser, 120, poll_frequency=0.1).until(shown)
        assert {"words", "select_many", "count_by"} <= {name for name, _ in page["operators"]}
        assert "select_many" in page["graph"] and "count_by" in page["graph"]
        shot = tmp_path / "live-page.png"
        assert browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        feeder.stop.set()
        feeder.join()
        words.close()
        session.join()
    assert feeder.epochs > 0


def test_a_browser_shows_the_driver_s_warning_about_a_loop(browser: Any) -> None:
    """A loop past ``loop_warning`` rounds: the page shows the driver's warning, with the
    loop's name and the fix."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    flow = Dataflow("runaway")
    edges = flow.new_input("edges")
    roots = edges.stream.where(lambda e: e[0] == 0).select(lambda e: 0).distinct()
    roots.iterate(  # the loop, which re-emits its input every round
        lambda r: (
            r.join(edges.stream, lambda n: n, lambda e: e[0], lambda n, e: e[1])
            .concat(r)
            .distinct()
        ),
        max_iters=80,
        name="reach",
    ).probe()
    session = flow.activate(workers=1, backend="inline", ui=True, loop_warning=50)
    try:
        assert session.ui_url is not None
        edges.send([(0, 1), (1, 0)])
        edges.close()  # inline: its 80 rounds run here, and the page stays up until join
        browser.get(session.ui_url)
        wait = WebDriverWait(browser, 60)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#warnings .warning"))
        text = browser.find_element(By.ID, "warnings").text
        assert "loop 'reach0'" in text and "of epoch 0" in text
        assert "until='fixpoint'" in text and "max_iters" in text
    finally:
        session.join()
