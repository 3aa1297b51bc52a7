"""Sharded, asynchronous checkpoints under fire on a cluster: the reference trainer's DCP mode
(``--checkpoint-format dcp``: torch.distributed.checkpoint, a shard per rank in step-numbered folders,
``.metadata`` last, a ``latest`` pointer moved after it; ``--async-save`` writes them while training
goes on) resumes from the newest *complete* save after each fault, never from a partial or damaged one,
and a job whose lost node is replaced ends in the state a clean run ends in, bitwise.

On the local platform the same runs are the toolkit's own tests (tests/test_dcp_runs.py,
tests/test_damage_shard_runs.py); here they run where a pod's volume is the save's shared storage.
"""
from __future__ import annotations

from pathlib import Path

import pytest
from scenario_settings import CADENCE, LOSS_RDZV

from elastic_chaos.events import CheckpointEv, FaultEv, of

pytestmark = [pytest.mark.slow,
              pytest.mark.platforms("kubernetes", reason="on the local platform these runs are tests/test_dcp_runs.py "
                                                         "and tests/test_damage_shard_runs.py")]
DCP = {"checkpoint_format": "dcp", "async_save": True}


def resumed_from_the_newest_complete_save(run) -> None:
    """Every rank's first load after the fault is the newest save that completed before it, a step folder."""
    events = run.timeline.events()
    injected = of(events, FaultEv.INJECTED)[0]
    resumed = [e for e in of(events, CheckpointEv.LOADED) if e.t > injected.t]
    assert resumed, "the job did not resume after the fault"
    saved = [e for e in of(events, CheckpointEv.SAVED) if e.t < resumed[0].t]
    newest = max(saved, key=lambda e: e.data.step)
    assert Path(newest.data.path).name == f"step-{newest.data.step:08d}"
    first = [e for e in resumed if e.t - resumed[0].t < 5.0]
    assert {e.data.step for e in first} == {newest.data.step}, [e.data for e in resumed]


def test_a_replaced_node_ends_a_dcp_job_in_the_clean_runs_final_state(run_hypothesis):
    # the kill may land while an asynchronous save is in flight (shards, no .metadata yet)
    run = run_hypothesis("kill-node", compare_final=True, **DCP, **CADENCE, **LOSS_RDZV)
    resumed_from_the_newest_complete_save(run)
    final = next(c for c in run.verdict.checks if c.name == "final-state")
    assert final.ok and final.reason.startswith("final state: equal (bitwise"), final.reason


@pytest.mark.parametrize("name", ["spot-interruption", "kill-during-checkpoint"])
def test_a_dcp_job_resumes_from_its_newest_complete_save(run_hypothesis, name):
    run = run_hypothesis(name, **DCP, **CADENCE, **LOSS_RDZV)
    resumed_from_the_newest_complete_save(run)


def test_a_truncated_shard_sends_the_job_back_to_the_newest_intact_save(run_hypothesis):
    run = run_hypothesis("damage-shard", shard_action="truncate", shard_rank=1)
    injected = next(e for e in run.timeline.select(FaultEv.INJECTED) if e.data.fault == "damage-shard")
    hit = dict(injected.data.detail)
    loaded = run.timeline.select(CheckpointEv.LOADED, after=injected.t)
    assert loaded and loaded[0].data.step == hit["newest_intact_step"] < hit["step"], (hit, loaded)
    assert Path(hit["original"]).stat().st_size == hit["size_before"]   # its bytes kept in the run's folder
