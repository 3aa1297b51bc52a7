"""What ends the wait for a job to train at its full size again (ChaosRun.wait_for_world_size)."""
from __future__ import annotations

from elastic_chaos.events import AgentEv, Event, ProgressEv
from elastic_chaos.runner.run import trains_at_size


def step(t: float, node: str, world: int) -> Event:
    return Event.make(ProgressEv.STEP, t, node, {"world_size": world, "step": int(t)})


def first_match(events: list[Event], world: int, after: float) -> Event | None:
    pred = trains_at_size(world, after=after)
    return next((e for e in events if pred(e)), None)


def test_a_survivors_step_at_the_old_size_just_after_the_fault_does_not_end_the_wait():
    # the drain of a cluster run: worker-0 still stepped at world size 2 for 0.9 s after the eviction
    events = [step(9.0, "w0", 2), step(10.5, "w0", 2), step(10.9, "w0", 2),
              Event.make(AgentEv.WORKERS_STARTING, 20.0, "w0", {}), step(22.0, "w0", 1)]
    assert first_match(events, 2, after=10.0) is None


def test_a_step_at_full_size_by_a_generation_started_after_the_fault_ends_it():
    events = [step(10.5, "w0", 2), Event.make(AgentEv.WORKERS_STARTING, 20.0, "w0", {}), step(22.0, "w0", 1),
              Event.make(AgentEv.WORKERS_STARTING, 60.0, "w0", {}),
              Event.make(AgentEv.WORKERS_STARTING, 60.1, "w1", {}), step(62.0, "w1", 2)]
    hit = first_match(events, 2, after=10.0)
    assert hit is not None and hit.t == 62.0


def test_a_restart_before_the_fault_does_not_count():
    events = [Event.make(AgentEv.WORKERS_STARTING, 5.0, "w0", {}), step(10.5, "w0", 2)]
    assert first_match(events, 2, after=10.0) is None
