"""replay: a trace of three spot interruptions (examples/traces/spot-3.csv, EC2's interruption
events as exported in docs/FAULTS.md) replayed 30x faster: exactly three preemptions, each within
1 s of its compressed offset, each recovered from (or overtaken by the next), and the trace's cost
in goodput in report.json's replay block."""
from __future__ import annotations

from pathlib import Path

import pytest
from scenario_settings import CHECKPOINT_EVERY

pytestmark = pytest.mark.slow

TRACE = Path(__file__).parent.parent / "examples" / "traces" / "spot-3.csv"


def test_a_replayed_trace_injects_each_preemption_at_its_offset(run_hypothesis):
    run = run_hypothesis("replay", trace=str(TRACE), compress=30.0, checkpoint_every=CHECKPOINT_EVERY,
                         rdzv_preset="fast")
    replay = run.result().replay
    assert replay is not None and replay["injected"] == 3 and replay["max_late_s"] <= 1.0
    assert replay["goodput"] is not None
