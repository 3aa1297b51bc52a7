"""What the freeze and partition hypotheses expect: a stall when the fault ends before the
collective timeout that applies, a restart without the node when it does not."""
from __future__ import annotations

import pytest

from chaos.hypotheses.api import settings
from chaos.hypotheses.catalog import get
from chaos.hypotheses.silent import Expect, collective_timeout, expectation


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
    s = settings(get("freeze"), {"duration_s": 12.0, "script": ("x.py",)}, "local")
    timeout, source, known = collective_timeout(s.job)
    assert not known and timeout == 1800.0 and "torch's gloo default" in source
    assert expectation(12.0, timeout, known) is Expect.EITHER


def test_freeze_runs_with_its_own_timeout_unless_a_preset_is_named():
    assert collective_timeout(settings(get("freeze"), {}, "local").job)[0] == 15.0
    assert collective_timeout(settings(get("freeze"), {"rdzv_preset": "fast"}, "local").job)[0] == 10.0
    assert collective_timeout(settings(get("freeze"), {"rdzv_preset": "default"}, "local").job)[0] == 60.0
    given = settings(get("freeze"), {"rdzv_preset": "fast", "pg_timeout_s": 20.0}, "local").job
    assert collective_timeout(given)[0] == 20.0
