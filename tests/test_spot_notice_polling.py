"""The trainer's notice poller as it runs in training: a background thread, the endpoint from
AWS_EC2_METADATA_SERVICE_ENDPOINT, a fresh IMDSv2 token after a 401 (all against the real
loopback stand-in, elastic_chaos.platforms.local.imds)."""
from __future__ import annotations

import threading
import time

import pytest

from elastic_chaos.platforms.local.imds import TOKEN_PATH, MetadataStandIn
from elastic_chaos.trainer.spot_notice import ENDPOINT_VAR, SpotNoticeWatcher


@pytest.fixture
def imds():
    server = MetadataStandIn("node-0").start()
    yield server
    server.close()


def test_the_endpoint_comes_from_the_variable_the_sdks_read(imds, monkeypatch):
    monkeypatch.setenv(ENDPOINT_VAR, imds.endpoint + "/")
    watcher = SpotNoticeWatcher()
    assert watcher.endpoint == imds.endpoint
    assert watcher.reachable()


def test_the_polling_thread_reports_a_notice_within_one_interval(imds):
    seen = threading.Event()
    watcher = SpotNoticeWatcher(imds.endpoint, interval_s=0.1, on_notice=lambda n: seen.set()).start()
    try:
        time.sleep(0.3)
        assert watcher.notice() is None
        published = time.time()
        imds.announce_interruption(published + 120)
        assert seen.wait(5), "the poller never reported the notice"
        notice = watcher.notice()
        assert notice.kind == "interruption" and notice.seen_at - published < 5.0   # 0.1 s polls; a busy CI
    finally:
        watcher.stop()


def test_a_rejected_token_is_replaced(imds):
    watcher = SpotNoticeWatcher(imds.endpoint, interval_s=0.05).start()
    try:
        deadline = time.monotonic() + 5
        while not any(r[2] == 404 for r in imds.requests) and time.monotonic() < deadline:
            time.sleep(0.05)
        imds._tokens.clear()          # the service forgot the token (as after an IMDS restart)
        imds.announce_interruption(time.time() + 120)
        deadline = time.monotonic() + 5
        while watcher.notice() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert watcher.notice() is not None
        assert any(r[0] == "GET" and r[2] == 401 for r in imds.requests)
        assert [r[:2] for r in imds.requests].count(("PUT", TOKEN_PATH)) >= 2
    finally:
        watcher.stop()
