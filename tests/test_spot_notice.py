"""The trainer's IMDS watcher against the platform's metadata stand-in (both real, on loopback)."""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

from elastic_chaos.platforms.local.imds import INSTANCE_ACTION_PATH, TOKEN_PATH, MetadataStandIn
from elastic_chaos.trainer.spot_notice import SpotNoticeWatcher


@pytest.fixture
def imds():
    server = MetadataStandIn("node-0").start()
    yield server
    server.close()


def test_no_notice_until_one_is_published(imds):
    watcher = SpotNoticeWatcher(imds.endpoint)
    watcher.poll_once()
    assert watcher.notice() is None
    assert (("GET", INSTANCE_ACTION_PATH, 404)) in imds.requests


def test_rebalance_then_interruption_are_seen_in_order_of_severity(imds):
    seen = []
    watcher = SpotNoticeWatcher(imds.endpoint, on_notice=seen.append)
    imds.recommend_rebalance(time.time())
    watcher.poll_once()
    assert watcher.notice().kind == "rebalance"
    imds.announce_interruption(time.time() + 120)
    watcher.poll_once()
    notice = watcher.notice()
    assert notice.kind == "interruption" and notice.detail["action"] == "terminate"
    assert [n.kind for n in seen] == ["rebalance", "interruption"]


def test_the_watcher_uses_imdsv2_tokens(imds):
    watcher = SpotNoticeWatcher(imds.endpoint)
    watcher.poll_once()
    assert imds.requests[0][:2] == ("PUT", TOKEN_PATH)


def test_a_request_without_a_token_is_refused(imds):
    imds.announce_interruption(time.time() + 120)
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(imds.endpoint + INSTANCE_ACTION_PATH, timeout=2)
    err.value.close()
    assert err.value.code == 401


def test_the_interruption_document_has_aws_shape(imds):
    imds.announce_interruption(1_800_000_000.0)
    req = urllib.request.Request(imds.endpoint + TOKEN_PATH, method="PUT",
                                 headers={"X-aws-ec2-metadata-token-ttl-seconds": "60"})
    with urllib.request.urlopen(req, timeout=2) as resp:
        token = resp.read().decode()
    req = urllib.request.Request(imds.endpoint + INSTANCE_ACTION_PATH, headers={"X-aws-ec2-metadata-token": token})
    with urllib.request.urlopen(req, timeout=2) as resp:
        doc = json.load(resp)
    assert doc == {"action": "terminate", "time": "2027-01-15T08:00:00Z"}


def test_an_unreachable_endpoint_is_not_reachable():
    assert SpotNoticeWatcher("http://127.0.0.1:9", timeout_s=0.5).reachable() is False
