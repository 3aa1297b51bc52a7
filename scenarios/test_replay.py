"""replay: a trace of three spot interruptions (the bundled elastic_chaos/faults/traces/spot-3.csv, EC2's interruption
events as exported in docs/FAULTS.md) replayed 40x faster (10x on a cluster): every preemption comes due within
1 s of its compressed offset and is injected, or skipped because an earlier one's replacement is not back yet
(the hypothesis' skips-justified check, with the measured replacement time); each injected one is recovered
from (or overtaken by the next), and the trace's cost in goodput is in report.json's replay block."""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE

from elastic_chaos.analysis.replay import REPLAY

pytestmark = pytest.mark.slow

TRACE = "spot-3"  # bundled: elastic_chaos/faults/traces/spot-3.csv
PREEMPTIONS = 3   # at +0 s, +869 s and +1551 s of the trace


# Whether a preemption finds the job whole depends on how fast the platform replaces a node, not on
# the toolkit. Locally a lost node's replacement is back in a round 11-12 s after the loss (5 s
# provisioning): at 40x the gaps are 21.7 s and 17.1 s, each in steady training 5 s or more after the
# regrow (at 60x the 3rd came 11.4 s after the 2nd, on the regrow round's close: a participant lost
# before the agents exchanged their ranks leaves the other waiting 300 s, elastic_chaos/analysis/barrier.py).
# On Kubernetes a lost machine's pod is re-created only once the pod garbage collector has deleted
# the old one (its 40 s quarantine for a vanished Node: 54 s measured on the local cluster, more under
# load): at 10x the gaps are 87 s and 68 s, and a clean-clone cluster run once found the job at its
# minimum for the 3rd and skipped it. So a skip is part of the hypothesis rather than luck: the
# verdict's skips-justified check holds only when each skipped preemption came while an earlier one's
# replacement had not joined yet (its measured replacement_s longer than the gap), and the scenario
# asserts every preemption came due (injected or skipped), never how many were skipped.
COMPRESS = {"local": 40.0}


def test_a_replayed_trace_injects_each_preemption_at_its_offset(run_hypothesis, chaos_platform):
    run = run_hypothesis("replay", trace=TRACE, compress=COMPRESS.get(chaos_platform, 10.0),
                         **CADENCE,
                         rdzv_preset="fast")
    replay = run.result().group(REPLAY)
    assert replay is not None and replay.injected is not None and replay.skipped is not None
    assert replay.injected + replay.skipped == PREEMPTIONS and replay.injected >= 1   # the first finds the job whole
    assert replay.max_late_s is not None and replay.max_late_s <= 1.0
    assert replay.goodput is not None
    assert run.verdict is not None and not {"skips-justified", "replayed"} & run.verdict.failed_checks()
