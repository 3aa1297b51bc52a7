"""stale-read on real jobs (slow): every node's reads of the checkpoint volume go stale, the job saves
twice more, and the node that reported those saves is killed. The reference trainer trusts what the
volume shows it: its restart resumes from the save that was newest when reads went stale, reporting no
save it could not load, in file mode (a listing without the newer files) and in DCP mode (an old
`latest`). The verdict says so, naming the steps trained again; the final state still equals a clean
run's (the trainer is deterministic: the steps trained again reproduce the same state)."""
from __future__ import annotations

import pytest

from elastic_chaos.analysis.final_state import CHECK as FINAL
from elastic_chaos.events import CheckpointEv, FaultEv
from elastic_chaos.hypotheses.stale import CHECK

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("checkpoint_format", ["file", "dcp"])
def test_a_restart_behind_stale_caches_resumes_from_an_older_save_without_reporting_it(run_hypothesis,
                                                                                       checkpoint_format):
    run = run_hypothesis("stale-read", checkpoint_format=checkpoint_format, expect_failed={CHECK})
    said = {c.name: c.reason for c in run.verdict.checks}
    injected = [e for e in run.timeline.select(FaultEv.INJECTED)]
    stale, kill = injected[0], injected[1]
    assert stale.data.fault == "stale-read" and kill.data.fault == "kill-node"
    saved = [e for e in run.timeline.select(CheckpointEv.SAVED) if e.data.via != "file"]
    newest_then = max(e.data.step for e in saved if e.t < stale.t)
    newest = max(e.data.step for e in saved if e.t < kill.t)
    loaded = run.timeline.select(CheckpointEv.LOADED, after=kill.t)
    assert loaded and {e.data.step for e in loaded[:2]} == {newest_then} and newest_then < newest
    assert said[CHECK].startswith(f"the job resumed from step {newest_then}, older than the newest complete save "
                                  f"(step {newest}), without reporting a save it could not load"), said[CHECK]
    assert f"steps {newest_then + 1}-{newest}, already saved, were trained again" in said[CHECK]
    assert said[FINAL].startswith("final state: equal"), said[FINAL]
    assert "its final state equals the clean run's all the same" in said[CHECK]
    assert said["aim"].startswith(f"the node killed, {kill.node}, reported every save made while reads were "
                                  "stale"), said["aim"]
    assert not run.timeline.select(CheckpointEv.CORRUPT, after=kill.t)
    assert run.verdict.failed_checks() == {CHECK}   # the one failure: no separate loss bound repeats it
