"""Take the docs' screenshot of the live page (docs/how-to/watch-a-run.md): a word count
on 2 Ray workers fed by a rate-controlled source, with a deliberately slow step, seen by
headless Chromium.

    .venv/bin/python scripts/screenshot_ui.py [docs/live-page.png]

Needs Chromium and ChromeDriver (``bash scripts/check_browser.sh``).
"""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import operators  # noqa: F401  (the LINQ operators)
from connectors.rate import rate_source
from timely import Dataflow

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "and",
    "runs",
    "far",
    "away",
]


def slow_upper(word: str) -> str:
    """A step that costs about 20 µs a record, so that it shows on the critical path."""
    end = time.perf_counter() + 20e-6
    while time.perf_counter() < end:
        pass
    return word.upper()


def main(out: str) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    source = rate_source(
        100_000, seconds=12, make=lambda i: WORDS[i % len(WORDS)], epoch_seconds=0.5
    )
    flow = Dataflow("live-wordcount")
    words = flow.source(source, name="words")
    words.select(slow_upper, name="upper").count_by(lambda w: w, name="count").collect("counts")
    session = flow.activate(workers=2, backend="ray", ui=True)
    done = threading.Event()

    def drive() -> None:
        while not done.is_set():
            session.poll(0.1)

    driver_thread = threading.Thread(target=drive, daemon=True)
    driver_thread.start()
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1300"):
        options.add_argument(flag)
    for flag in ("--disable-background-networking", "--disable-component-update", "--no-first-run"):
        options.add_argument(flag)
    browser = webdriver.Chrome(
        options=options, service=Service(executable_path="/usr/bin/chromedriver")
    )
    try:
        assert session.ui_url is not None
        browser.get(session.ui_url)
        WebDriverWait(browser, 30).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "#critical td + td")
        )
        time.sleep(2.0)  # a few more windows of rates and CP: this is a picture, not a test
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        browser.save_screenshot(out)
        print(f"saved {out}")
    finally:
        browser.quit()
        done.set()
        driver_thread.join()
        session.join()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "docs/live-page.png")
