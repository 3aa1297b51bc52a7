"""Open a page in Debian's chromium through Playwright and report what a person would see.

Playwright for Python drives the system's chromium (``executable_path``; Playwright's
own browser downloads are never used, so ``playwright install`` is not needed).
Collects console errors and uncaught exceptions (chromium reports a CSP violation or
a failed load as a console error) and every request that is not the page itself,
evaluates an expression in the page, and takes a screenshot. Headless, no sandbox
(root in CI), no GPU, background networking off; the browser's profile and
temporary files go to folders removed afterwards, and Playwright stops it.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = ["--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
         "--hide-scrollbars"]


def find_chromium() -> str | None:
    """$CHROMIUM, else the first chromium (Debian's) or chrome on PATH."""
    explicit = os.environ.get("CHROMIUM")
    if explicit:
        return explicit
    for name in ("chromium", "chromium-browser", "google-chrome", "chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


@dataclass
class PageResult:
    console_errors: list[str] = field(default_factory=list)
    """Console errors and asserts, uncaught exceptions, CSP violations, failed loads."""
    requests: list[str] = field(default_factory=list)
    """Every URL requested but the page's own."""
    value: Any = None
    """What ``expression`` evaluated to."""
    screenshot: Path | None = None


def open_page(chromium: str, page: Path, *, screenshot: Path, expression: str,
              width: int = 1280, height: int = 1800, timeout: float = 60.0) -> PageResult:
    """Load ``page`` (a file), settle, evaluate ``expression``, screenshot; stop the browser."""
    from playwright.sync_api import ConsoleMessage, Request, sync_playwright

    url = page.resolve().as_uri()
    result = PageResult()

    def on_console(message: ConsoleMessage) -> None:
        if message.type in ("error", "assert"):
            result.console_errors.append(message.text)

    def on_request(request: Request) -> None:
        if request.url != url:
            result.requests.append(request.url)

    # chromium's singleton socket and other temporaries land in TMPDIR, not in /tmp
    with tempfile.TemporaryDirectory(prefix="chromium-tmp-") as scratch, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=FLAGS, timeout=timeout * 1000,
                                             env={**os.environ, "TMPDIR": scratch})
        try:
            view = browser.new_page(viewport={"width": width, "height": height}, device_scale_factor=1)
            view.on("console", on_console)
            view.on("pageerror", lambda error: result.console_errors.append(f"uncaught: {error}"))
            view.on("request", on_request)
            view.goto(url, wait_until="load", timeout=timeout * 1000)
            view.wait_for_timeout(500)  # let scripts run and layout settle
            result.value = view.evaluate(expression)
            view.screenshot(path=str(screenshot))
            result.screenshot = screenshot
        finally:
            browser.close()
    return result
