"""The headless browser the live page's tests will use (``browser`` in conftest.py).

A page served from this process over HTTP on 127.0.0.1 fetches JSON from the same server
and writes it into the DOM; the test waits for the element Selenium sees (no sleep) and
keeps a screenshot. What a live page's test does, without the page: if this fails, the
browser set-up is what broke.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

PAGE = b"""<!doctype html>
<html>
<head><meta charset="utf-8"><title>timely browser check</title></head>
<body>
<h1>timely</h1>
<div id="status">loading</div>
<script>
fetch("/state.json")
  .then((response) => response.json())
  .then((state) => {
    const p = document.createElement("p");
    p.id = "written";
    p.textContent = `epoch ${state.epoch}: ${state.records * 2} records`;
    document.body.appendChild(p);
    document.getElementById("status").textContent = "done";
  });
</script>
</body>
</html>
"""
STATE = {"epoch": 7, "records": 21}


class _Handler(BaseHTTPRequestHandler):
    """``/``: the page; ``/state.json``: what its script fetches."""

    def do_GET(self) -> None:
        if self.path == "/":
            self._reply(PAGE, "text/html; charset=utf-8")
        elif self.path == "/state.json":
            self._reply(json.dumps(STATE).encode(), "application/json")
        else:
            self.send_error(404)

    def _reply(self, body: bytes, kind: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: requests are not the test's output."""


@pytest.fixture
def page_url() -> Iterator[str]:
    """The page's URL on a free port of 127.0.0.1, served by a thread of this process."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, name="test-http", daemon=True)
    thread.start()
    try:
        host, port = server.server_address[:2]
        yield f"http://{host}:{port}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_headless_chromium_runs_the_pages_script(
    browser: Any, page_url: str, tmp_path: Path
) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(page_url)
    written = WebDriverWait(browser, 20).until(ec.presence_of_element_located((By.ID, "written")))
    assert browser.title == "timely browser check"
    # Computed by the script from what it fetched: the JS ran and reached the server.
    assert written.text == "epoch 7: 42 records"
    assert browser.find_element(By.ID, "status").text == "done"
    shot = tmp_path / "page.png"
    assert browser.save_screenshot(str(shot))
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 1000
