"""replay: a trace of three spot interruptions (the bundled chaos/faults/traces/spot-3.csv, EC2's interruption
events as exported in docs/FAULTS.md) replayed 40x faster (10x on a cluster): exactly three preemptions, each within
1 s of its compressed offset, each recovered from (or overtaken by the next), and the trace's cost
in goodput in report.json's replay block."""
from __future__ import annotations

import pytest
from scenario_settings import CADENCE

from chaos.analysis.replay import REPLAY

pytestmark = pytest.mark.slow

TRACE = "spot-3"  # bundled: chaos/faults/traces/spot-3.csv


# On Kubernetes a lost machine's pod is re-created only once the pod garbage collector has
# deleted the old one (its 40 s quarantine for a vanished Node: 54 s measured on the local
# cluster). At 30x the 2nd and 3rd preemptions (+29 s, +51.7 s) came while the job was at its
# minimum and were skipped; at 10x (+87 s, +155 s) each finds the job whole again.
# Locally a lost node's replacement is back in a round 11-12 s after the loss (5 s provisioning);
# a preemption must not land just as that round closes: a participant lost before the agents have
# exchanged their ranks leaves the other waiting 300 s (chaos/analysis/barrier.py, the
# loss-after-round hypothesis). At 60x the 3rd preemption came 11.4 s after the 2nd, on the
# regrow round's close (a 300 s stall, seen once in the catalog); at 40x the gaps are 21.7 s
# and 17.1 s, each in steady training 5 s or more after the regrow.
COMPRESS = {"local": 40.0}


def test_a_replayed_trace_injects_each_preemption_at_its_offset(run_hypothesis, chaos_platform):
    run = run_hypothesis("replay", trace=TRACE, compress=COMPRESS.get(chaos_platform, 10.0),
                         **CADENCE,
                         rdzv_preset="fast")
    replay = run.result().group(REPLAY)
    assert replay is not None and replay.injected == 3 and replay.max_late_s is not None and replay.max_late_s <= 1.0
    assert replay.goodput is not None
