"""Watch the EC2 instance metadata service for spot notices, as a training script on EC2 should.

AWS announces a spot reclaim twice before it happens: a *rebalance
recommendation* (``/latest/meta-data/events/recommendations/rebalance``,
elevated risk) and then the *interruption notice*
(``/latest/meta-data/spot/instance-action``, two minutes before the instance
is stopped or terminated). Both are 404 until they exist. IMDSv2 needs a
session token first (``PUT /latest/api/token``).

The endpoint is configurable (``AWS_EC2_METADATA_SERVICE_ENDPOINT``, the
variable the AWS SDKs read) so the same code runs against the local
platform's per-node stand-in and in tests against a loopback server. The
poller is a daemon thread; the training loop only reads ``notice()``.
"""
from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass

DEFAULT_ENDPOINT = "http://169.254.169.254"
ENDPOINT_VAR = "AWS_EC2_METADATA_SERVICE_ENDPOINT"
REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
INSTANCE_ACTION_PATH = "/latest/meta-data/spot/instance-action"
TOKEN_PATH = "/latest/api/token"
TOKEN_TTL_S = 21600


@dataclass(frozen=True)
class Notice:
    kind: str
    """``rebalance`` or ``interruption``."""
    seen_at: float
    """When this process first saw it (time.time())."""
    detail: dict[str, object]
    """The metadata document (``action``/``time``, or ``noticeTime``)."""


class SpotNoticeWatcher:
    """Polls IMDS every ``interval_s``; remembers the most serious notice seen."""

    def __init__(self, endpoint: str | None = None, *, interval_s: float = 1.0,
                 timeout_s: float = 1.0, on_notice: Callable[[Notice], None] | None = None) -> None:
        self.endpoint = (endpoint or os.environ.get(ENDPOINT_VAR) or DEFAULT_ENDPOINT).rstrip("/")
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.on_notice = on_notice
        self._token: str | None = None
        self._token_expires = 0.0
        self._seen: dict[str, Notice] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- what the training loop reads --------------------------------------
    def notice(self) -> Notice | None:
        """The interruption notice if one was seen, else a rebalance recommendation, else None."""
        with self._lock:
            return self._seen.get("interruption") or self._seen.get("rebalance")

    def reachable(self) -> bool:
        """Whether the endpoint hands out an IMDSv2 token (one quick try)."""
        try:
            self._fresh_token()
            return True
        except (OSError, urllib.error.URLError, ValueError):
            return False

    # -- polling -------------------------------------------------------------
    def start(self) -> SpotNoticeWatcher:
        self._thread = threading.Thread(target=self._run, name="spot-notice", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.poll_once()
            except (OSError, urllib.error.URLError, ValueError):
                self._token = None  # endpoint blipped; fetch a new token next time
            self._stop.wait(self.interval_s)

    def poll_once(self) -> None:
        """One look at both documents; records each the first time it appears."""
        for kind, path in (("rebalance", REBALANCE_PATH), ("interruption", INSTANCE_ACTION_PATH)):
            if kind in self._seen:
                continue
            doc = self._get(path)
            if doc is not None:
                notice = Notice(kind=kind, seen_at=time.time(), detail=doc)
                with self._lock:
                    self._seen[kind] = notice
                if self.on_notice is not None:
                    self.on_notice(notice)

    def _fresh_token(self) -> str:
        if self._token is None or time.monotonic() >= self._token_expires:
            req = urllib.request.Request(self.endpoint + TOKEN_PATH, method="PUT",
                                         headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_S)})
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                self._token = resp.read().decode().strip()
            self._token_expires = time.monotonic() + TOKEN_TTL_S - 60
        return self._token

    def _get(self, path: str) -> dict[str, object] | None:
        req = urllib.request.Request(self.endpoint + path,
                                     headers={"X-aws-ec2-metadata-token": self._fresh_token()})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                body = resp.read().decode()
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            if exc.code == 401:
                self._token = None
            raise
        try:
            doc = json.loads(body)
        except ValueError:
            doc = {"raw": body}
        return doc if isinstance(doc, dict) else {"value": doc}
