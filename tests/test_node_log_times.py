"""Agent log times are read in the zone the nodes write them in (pods: UTC), whatever this machine's zone."""
from __future__ import annotations

import datetime
import os
import time
from collections.abc import Iterator

import pytest

from elastic_chaos.platforms import platform_class
from elastic_chaos.reporting.render import log_timezone
from elastic_chaos.watchers.logs import _AgentParser, glog_time

LINE = "I1122 08:18:31.027000 7 torch/distributed/elastic/agent/server/api.py:707] [default] Starting worker group"


@pytest.fixture
def runner_in_new_york() -> Iterator[None]:
    before = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    yield
    if before is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = before
    time.tzset()


def test_a_pods_utc_time_is_read_as_utc_on_a_runner_elsewhere(runner_in_new_york: None):
    utc = datetime.timezone.utc
    t = glog_time(11, 22, 8, 18, 31, 27000, today=datetime.date(2026, 11, 22), tz=utc)
    assert t == datetime.datetime(2026, 11, 22, 8, 18, 31, 27000, tzinfo=utc).timestamp()
    local = glog_time(11, 22, 8, 18, 31, 27000, today=datetime.date(2026, 11, 22))
    assert local - t == 5 * 3600                     # what reading it as local time got wrong
    ev = _AgentParser("w-0", utc).feed(LINE)[0]
    assert datetime.datetime.fromtimestamp(ev.t, utc).hour == 8


def test_each_platform_says_which_zone_its_nodes_log_in():
    assert platform_class("local").node_log_timezone() is None
    for name in ("kubernetes", "kind", "eks"):
        assert platform_class(name).node_log_timezone() == datetime.timezone.utc
    assert log_timezone("kubernetes") == datetime.timezone.utc and log_timezone("unknown") is None


def test_a_report_reads_its_log_times_in_the_zone_the_run_recorded_not_the_renderers(runner_in_new_york: None):
    from elastic_chaos.analysis.result import RunResult
    # a local run on a machine at UTC+1, its report rendered later in New York: the lines are read at +1
    made = RunResult(scenario="s", platform="local", job=None, verdict=None, log_utc_offset_s=3600.0)
    back = RunResult.from_json(made.to_json())
    assert back.log_utc_offset_s == 3600.0
    zone = log_timezone(back.platform or "", back.log_utc_offset_s)
    assert zone is not None and zone.utcoffset(None) == datetime.timedelta(hours=1)
    t = glog_time(11, 22, 8, 18, 31, 27000, today=datetime.date(2026, 11, 22), tz=zone)
    assert datetime.datetime.fromtimestamp(t, datetime.timezone.utc).hour == 7
    # a report written before the zone was recorded: the platform's own (local: this machine's, None)
    assert RunResult.from_json({**made.to_json(), "log_utc_offset_s": None}).log_utc_offset_s is None
    assert log_timezone("local", None) is None
