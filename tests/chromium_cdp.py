"""Open a page in a real headless Chromium and report what a person would see.

Talks the DevTools protocol over ``--remote-debugging-pipe`` (fd 3: commands
in, fd 4: replies out, NUL-separated JSON), so no port is opened and no extra
package is needed. Collects console errors, uncaught exceptions, log entries
of level error (CSP violations, failed loads) and every network request that
is not the page itself, evaluates an expression in the page, and takes a
screenshot. The browser runs with a fresh profile, no sandbox (root in CI),
no GPU and background networking off, and is stopped by its PID.
"""
from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--no-default-browser-check",
         "--disable-extensions", "--mute-audio", "--hide-scrollbars"]


def find_chromium() -> str | None:
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
    requests: list[str] = field(default_factory=list)
    value: Any = None
    screenshot: Path | None = None


class _Pipe:
    def __init__(self, proc: subprocess.Popen[bytes], to_browser: int, from_browser: int) -> None:
        self.proc, self.out, self.inp = proc, to_browser, from_browser
        self.buf = b""
        self.next_id = 0
        self.events: list[dict[str, Any]] = []

    def send(self, method: str, params: dict[str, Any] | None = None, session: str | None = None,
             timeout: float = 30.0) -> dict[str, Any]:
        self.next_id += 1
        msg: dict[str, Any] = {"id": self.next_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.out, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                result: dict[str, Any] = reply.get("result", {})
                return result
            self.events.append(reply)

    def wait_event(self, method: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            for i, ev in enumerate(self.events):
                if ev.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._read(deadline))

    def _read(self, deadline: float) -> dict[str, Any]:
        import select
        while b"\0" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no reply from chromium in time")
            ready, _, _ = select.select([self.inp], [], [], min(left, 1.0))
            if ready:
                chunk = os.read(self.inp, 1 << 20)
                if not chunk:
                    raise RuntimeError(f"chromium closed the pipe (exit code {self.proc.poll()})")
                self.buf += chunk
        raw, self.buf = self.buf.split(b"\0", 1)
        loaded: dict[str, Any] = json.loads(raw)
        return loaded


def open_page(chromium: str, page: Path, *, screenshot: Path, expression: str,
              width: int = 1280, height: int = 1800, timeout: float = 60.0) -> PageResult:
    """Load ``page`` (a file), settle, evaluate ``expression``, screenshot; stop the browser."""
    profile = tempfile.mkdtemp(prefix="chromium-profile-")
    scratch = tempfile.mkdtemp(prefix="chromium-tmp-")   # its singleton socket dir lands here, not in /tmp
    cmd_r, cmd_w = os.pipe()    # we write commands, chromium reads fd 3
    rep_r, rep_w = os.pipe()    # chromium writes replies to fd 4, we read
    proc = subprocess.Popen(
        [chromium, *FLAGS, f"--user-data-dir={profile}", "--remote-debugging-pipe",
         f"--window-size={width},{height}", "about:blank"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        preexec_fn=_dup_fds(cmd_r, rep_w), pass_fds=(3, 4), start_new_session=True,
        env={**os.environ, "TMPDIR": scratch})
    os.close(cmd_r)
    os.close(rep_w)
    pipe = _Pipe(proc, cmd_w, rep_r)
    try:
        return _drive(pipe, page, screenshot, expression, width, height, timeout)
    finally:
        try:
            pipe.send("Browser.close", timeout=5)  # a clean exit removes its own files
        except (OSError, RuntimeError, TimeoutError):
            pass
        os.close(cmd_w)
        os.close(rep_r)
        _stop(proc)
        shutil.rmtree(profile, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)


def _dup_fds(cmd_r: int, rep_w: int) -> Any:
    def child() -> None:
        # place the pipe ends at the fds chromium expects; dup first so the
        # targets can not clobber each other
        a, b = os.dup(cmd_r), os.dup(rep_w)
        os.dup2(a, 3)
        os.dup2(b, 4)
        os.set_inheritable(3, True)
        os.set_inheritable(4, True)
    return child


def _drive(pipe: _Pipe, page: Path, screenshot: Path, expression: str, width: int, height: int,
           timeout: float) -> PageResult:
    targets = pipe.send("Target.getTargets", timeout=timeout)["targetInfos"]
    target = next(t["targetId"] for t in targets if t["type"] == "page")
    session = pipe.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
    for domain in ("Runtime", "Log", "Network", "Page"):
        pipe.send(f"{domain}.enable", session=session)
    pipe.send("Emulation.setDeviceMetricsOverride",
              {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False}, session=session)
    pipe.send("Page.navigate", {"url": page.resolve().as_uri()}, session=session)
    pipe.wait_event("Page.loadEventFired", timeout)
    time.sleep(0.5)  # let scripts run and layout settle
    result = PageResult()
    value = pipe.send("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session=session)
    result.value = value.get("result", {}).get("value")
    shot = pipe.send("Page.captureScreenshot", {"format": "png"}, session=session)
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    result.screenshot = screenshot
    page_url = page.resolve().as_uri()
    for ev in pipe.events:
        method, params = ev.get("method"), ev.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            result.console_errors.append(" ".join(str(a.get("value", a.get("description")))
                                                  for a in params.get("args", [])))
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            result.console_errors.append(str(details.get("exception", {}).get("description") or details))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            result.console_errors.append(str(params["entry"].get("text")))
        elif method == "Network.requestWillBeSent":
            url = params.get("request", {}).get("url", "")
            if url != page_url:
                result.requests.append(url)
    return result


def _stop(proc: subprocess.Popen[bytes]) -> None:
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(10)
