"""What the freeze and partition hypotheses expect: a stall when the fault ends before the
collective timeout that applies, a restart without the node when it does not."""
from __future__ import annotations

import pytest

from elastic_chaos.hypotheses.api import settings
from elastic_chaos.hypotheses.catalog import get
from elastic_chaos.hypotheses.silent import Expect, collective_timeout, expectation


@pytest.mark.parametrize(("duration", "timeout", "expected"), [
    (12.0, 15.0, Expect.STALL),       # `run freeze --duration 12`: the hypothesis' 15 s timeout applies
    (12.0, 60.0, Expect.STALL),       # the reference trainer's own default
    (12.0, 10.0, Expect.TIMEOUT),     # the fast preset's 10 s
    (14.0, 15.0, Expect.EITHER),      # too close to call
    (None, 15.0, Expect.TIMEOUT),     # frozen until the end of the run
])
def test_the_expectation_follows_the_timeout_that_applies(duration, timeout, expected):
    assert expectation(duration, timeout, known=True) is expected


def test_a_scripts_own_timeout_is_unknown_so_either_outcome_is_fine():
    s = settings(get("freeze"), {"duration_s": 12.0, "script": ("x.py",), "steady_steps": 5}, "local")
    timeout, source, known = collective_timeout(s.job)
    assert not known and timeout == 1800.0 and "torch's gloo default" in source
    assert expectation(12.0, timeout, known) is Expect.EITHER


def test_freeze_runs_with_its_own_timeout_unless_a_preset_is_named():
    assert collective_timeout(settings(get("freeze"), {}, "local").job)[0] == 15.0
    assert collective_timeout(settings(get("freeze"), {"rdzv_preset": "fast"}, "local").job)[0] == 10.0
    assert collective_timeout(settings(get("freeze"), {"rdzv_preset": "default"}, "local").job)[0] == 60.0
    given = settings(get("freeze"), {"rdzv_preset": "fast", "pg_timeout_s": 20.0}, "local").job
    assert collective_timeout(given)[0] == 20.0


def test_detection_by_timeout_is_timed_by_the_survivors_collective_not_by_the_stores_drop():
    """With the fast preset's 4 s keep-alive the store drops a frozen node after 4 s, yet the
    survivors train on until their 10 s collective timeout (measured: 3.3-4.1 s against 10 s):
    the check times the wait by the survivors' collective failure, which nothing else shortens."""
    from elastic_chaos.events import Event, ProgressEv, RdzvEv
    from elastic_chaos.events.records import FaultRecord
    from elastic_chaos.hypotheses.silent import first_collective_failure_s
    record = FaultRecord("freeze", "node-1", injected_at=100.0)
    events = [Event.make(RdzvEv.STATE, 104.1, data={"participants": [{"node": "node-0"}]}),
              Event.make(ProgressEv.WORKER_ERROR, 109.5, node="node-1", data={"cause": "timeout"}),  # the silent one
              Event.make(ProgressEv.WORKER_ERROR, 110.1, node="node-0", data={"cause": "timeout"}),
              Event.make(ProgressEv.WORKER_ERROR, 111.0, node="node-0", data={"cause": "timeout"})]
    assert first_collective_failure_s(events, record) == pytest.approx(10.1)
    assert first_collective_failure_s(events[:2], record) is None   # no survivor's collective failed
