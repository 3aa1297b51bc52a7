"""The reference trainer's DCP mode on a real job (slow): under kill-node it resumes from the newest
complete DCP save (a step folder with its ``.metadata``, named by ``latest``), never from a partial one,
and ends in the clean run's final state (--compare-final on DCP folders)."""
from __future__ import annotations

from pathlib import Path

import pytest

from elastic_chaos.analysis.final_state import CHECK
from elastic_chaos.events import CheckpointEv, FaultEv, of
from elastic_chaos.trainer.dcp_checkpoint import METADATA, read_pointer, step_of

pytestmark = pytest.mark.slow


def test_kill_node_resumes_from_the_newest_complete_dcp_save(run_hypothesis) -> None:
    # asynchronous saves: the kill may land while one is in flight (its folder has shards and no
    # .metadata, and latest still names the one before); synchronous saves are the other tests' case
    run = run_hypothesis("kill-node", compare_final=True, checkpoint_format="dcp",
                         trainer_args=("--keep-last-n", "2", "--async-save"))
    events = run.timeline.events()
    [injected, *_] = of(events, FaultEv.INJECTED)
    before = [e for e in of(events, CheckpointEv.SAVED) if e.t < injected.t]
    assert before, "no DCP save completed before the kill"
    newest = max(before, key=lambda e: e.data.step)
    assert Path(newest.data.path).name == f"step-{newest.data.step:08d}"
    resumed = [e for e in of(events, CheckpointEv.LOADED) if e.t > injected.t]
    assert resumed and {e.data.step for e in resumed} == {newest.data.step}, [e.data for e in resumed]
    assert {e.data.path for e in resumed} == {newest.data.path}
    # what the job left: complete step folders only up to the pointer, at most --keep-last-n of them
    # at or below it, and the pointer names a complete one
    folder = Path(newest.data.path).parent
    pointed = read_pointer(folder)
    assert pointed is not None and (pointed / METADATA).is_file()
    at_or_below = [p for p in folder.glob("step-*") if step_of(p) <= step_of(pointed)]
    assert len(at_or_below) <= 2 and all((p / METADATA).is_file() for p in at_or_below)
    # and the job that resumed is the job a clean run is: its final DCP save, bitwise
    check = next(c for c in run.verdict.checks if c.name == CHECK)
    assert check.ok and check.reason.startswith("final state: equal (bitwise"), check.reason
