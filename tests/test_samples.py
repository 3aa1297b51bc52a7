"""Exactly-once accounting of the committed history (elastic_chaos.analysis.samples)."""
from __future__ import annotations

import dataclasses

from elastic_chaos.analysis.samples import account_samples
from elastic_chaos.events import CheckpointEv, Event, ProgressEv


def step(t: float, n: int, rank: int, ranges: list[list[int]], epoch: int = 0) -> Event:
    return Event.make(ProgressEv.STEP, t, f"node-{rank}", {"step": n, "rank": rank, "epoch": epoch, "samples": ranges})


def loaded(t: float, n: int) -> Event:
    return Event.make(CheckpointEv.LOADED, t, "node-0", {"step": n})


def elastic_run() -> list[Event]:
    """World 2 for steps 1-6 (batch 4), crash, restore to step 4, world 1 after."""
    ev, t = [loaded(0, 0)], 1.0
    for s in range(1, 7):
        base = (s - 1) * 8
        ev += [step(t, s, 0, [[base, base + 4]]), step(t, s, 1, [[base + 4, base + 8]])]
        t += 1
    ev.append(loaded(t, 4))                     # steps 5 and 6 are rolled back
    cursor = 32
    for s in range(5, 9):
        ev.append(step(t + s, s, 0, [[cursor, cursor + 4]]))
        cursor += 4
    return ev


def test_an_elastic_restore_and_resize_trains_every_sample_once():
    acc = account_samples(elastic_run())
    assert acc.exactly_once, acc.summary()
    assert acc.committed_steps == 8
    assert acc.rolled_back_steps == 4           # 2 steps x 2 ranks thrown away
    assert acc.samples == 48


def test_rolled_back_steps_that_were_not_retrained_are_gaps_only_below_the_frontier():
    ev = elastic_run()[:-2]                      # stop after re-training step 6
    acc = account_samples(ev)
    assert acc.exactly_once, acc.summary()


def naive_run() -> list[Event]:
    """DistributedSampler-style: rank r takes positions r, r+W, ... and the batch in
    the epoch is derived from the step count at the *current* world size."""
    size, batch = 64, 4
    ev, t = [loaded(0, 0)], 1.0

    def positions(step_no: int, rank: int, world: int) -> list[list[int]]:
        mine = list(range(rank, size, world))
        j = step_no % (size // (batch * world))
        return [[p, p + 1] for p in mine[j * batch:(j + 1) * batch]]

    for s in range(0, 6):
        ev += [step(t, s + 1, r, positions(s, r, 2)) for r in range(2)]
        t += 1
    ev.append(loaded(t, 4))
    for s in range(4, 8):
        ev.append(step(t + s, s + 1, 0, positions(s, 0, 1)))
    return ev


def test_a_naive_sampler_restarted_at_a_smaller_world_trains_samples_twice():
    acc = account_samples(naive_run())
    assert not acc.exactly_once
    assert [d[1] for d in acc.duplicates] == list(range(16, 32))
    assert "duplicated" in acc.summary()


def test_a_finished_epoch_that_skipped_samples_has_gaps():
    # one rank of two at world 2, then the world grows to 4 and the epoch ends early
    ev = [loaded(0, 0), step(1, 1, 0, [[0, 4]]), step(1, 1, 1, [[4, 8]]),
          step(2, 2, 0, [[16, 20]], epoch=0), step(3, 3, 0, [[0, 4]], epoch=1)]
    ev = [dataclasses.replace(e, data=dataclasses.replace(e.data, epoch_size=20)) if e.type == ProgressEv.STEP
          else e for e in ev]
    acc = account_samples(ev)
    assert [p for _, p in acc.gaps] == list(range(8, 16))
    assert "never trained" in acc.summary()


def test_nothing_to_check_without_sample_ranges():
    ev = [Event.make(ProgressEv.STEP, 1, "node-0", {"step": 1, "rank": 0})]
    acc = account_samples(ev)
    assert not acc.accounted and not acc.exactly_once
    assert "could not be checked" in acc.summary()


def live_world2(steps: int, lagging_rank_reported: int) -> list[Event]:
    """World 2, batch 4: rank 0 has reported ``steps`` steps, rank 1 only the first
    ``lagging_rank_reported`` (its follower has not caught up yet)."""
    ev = [loaded(0, 0)]
    for s in range(1, steps + 1):
        base = (s - 1) * 8
        for rank in (0, 1):
            if rank == 1 and s > lagging_rank_reported:
                continue
            e = step(float(s), s, rank, [[base + 4 * rank, base + 4 * rank + 4]])
            ev.append(dataclasses.replace(e, data=dataclasses.replace(e.data, world_size=2)))
    return ev


def test_a_rank_whose_latest_steps_are_still_in_flight_is_not_a_gap():
    # a live account: rank 1's last three steps have not reached the timeline yet
    acc = account_samples(live_world2(steps=10, lagging_rank_reported=7))
    assert acc.exactly_once, acc.summary()


def test_a_step_every_rank_reported_still_exposes_a_skipped_sample():
    ev = live_world2(steps=10, lagging_rank_reported=10)
    ev[5] = dataclasses.replace(ev[5], data=dataclasses.replace(ev[5].data, samples=((16, 18),)))  # rank 0 of
    # step 3 skipped positions 18..19 ...
    acc = account_samples(ev)                      # ... and steps after it are settled
    assert [p for _, p in acc.gaps] == [18, 19]


def worker_step(t: float, n: int, rank: int, pid: int, base: int, world: int = 2) -> Event:
    """Rank ``rank`` (worker PID ``pid`` on node-``rank``) trained positions [base, base+4) at step ``n``."""
    return Event.make(ProgressEv.STEP, t, f"node-{rank}", {"step": n, "rank": rank, "pid": pid, "world_size": world,
                                                          "samples": [[base, base + 4]]})


def worker_start(t: float, node: str, pid: int) -> Event:
    return Event.make(ProgressEv.START, t, node, {"pid": pid})


def worker_loaded(t: float, node: str, pid: int, n: int) -> Event:
    return Event.make(CheckpointEv.LOADED, t, node, {"step": n, "pid": pid})


def two_rank_world(pids: tuple[int, int], steps: range, t: float, base: int) -> list[Event]:
    """Both ranks of one world, one step a second from ``t``, 8 positions a step from ``base``."""
    ev = []
    for i, n in enumerate(steps):
        ev += [worker_step(t + i, n, 0, pids[0], base + 8 * i), worker_step(t + i, n, 1, pids[1], base + 8 * i + 4)]
    return ev


def test_a_frozen_worker_that_thaws_after_the_survivor_restored_does_not_count_its_old_step():
    """node-1 froze inside step 7; node-0's new worker restored step 4 and trained on alone; at the
    teardown node-1 thawed and completed step 7 of the old world, stamped after everything. That step's
    update never reached the new world: it is rolled back, not trained twice."""
    ev = [worker_start(0, "node-0", 100), worker_start(0, "node-1", 101)]
    ev += two_rank_world((100, 101), range(1, 7), 1.0, 0)             # steps 1-6: positions 0-47
    ev += [worker_start(60, "node-0", 200), worker_loaded(61, "node-0", 200, 4)]
    ev += [worker_step(62 + i, 5 + i, 0, 200, 32 + 4 * i, world=1) for i in range(6)]   # 32-55
    ev.append(worker_step(90, 7, 1, 101, 52))                          # the thawed step (positions 52-55)
    acc = account_samples(ev)
    assert acc.exactly_once, acc.summary()
    assert acc.committed_steps == 10
    assert acc.rolled_back_steps == 4 + 1                              # steps 5-6 of both ranks, the thawed step


def test_an_in_process_reload_by_the_same_world_supersedes_no_peer():
    """Both workers live on; rank 0 alone says it reloaded step 4 (no restart): rank 1's later steps count."""
    ev = [worker_start(0, "node-0", 100), worker_start(0, "node-1", 101)]
    ev += two_rank_world((100, 101), range(1, 7), 1.0, 0)
    ev.append(worker_loaded(20, "node-0", 100, 4))
    ev += two_rank_world((100, 101), range(5, 9), 21.0, 32)
    acc = account_samples(ev)
    assert acc.exactly_once, acc.summary()
    assert acc.committed_steps == 8


def test_a_re_created_pod_that_reuses_a_pid_is_a_new_generation():
    """On Kubernetes a replacement pod's worker can have the PID its predecessor had: its start line
    begins a new generation, whose steps count."""
    ev = [worker_start(0, "node-0", 7), worker_start(0, "node-1", 7)]
    ev += two_rank_world((7, 7), range(1, 5), 1.0, 0)
    ev += [worker_start(40, "node-0", 7), worker_start(40, "node-1", 7), worker_loaded(41, "node-0", 7, 2)]
    ev += two_rank_world((7, 7), range(3, 7), 42.0, 16)
    acc = account_samples(ev)
    assert acc.exactly_once, acc.summary()
    assert acc.committed_steps == 6
    assert acc.rolled_back_steps == 4


def a_world_whose_rank_0_went_unheard_at_step_6(restore_at: int | None) -> list[Event]:
    """World 2 trains steps 1-6 (8 positions a step); rank 0's report of step 6 never arrives (its node was
    lost before its last lines were read); the new world (world 1) restores ``restore_at`` and trains on."""
    ev = [worker_start(0, "node-0", 100), worker_start(0, "node-1", 101)]
    ev += two_rank_world((100, 101), range(1, 7), 1.0, 0)
    ev = [e for e in ev if not (e.type == ProgressEv.STEP and e.data.step == 6 and e.data.rank == 0)]
    if restore_at is None:                           # the same world trains on, nobody restored
        return ev + two_rank_world((100, 101), range(7, 9), 7.0, 48)
    ev += [worker_start(30, "node-1", 201), worker_loaded(31, "node-1", 201, restore_at)]
    cursor = 8 * restore_at
    return ev + [worker_step(32 + i, restore_at + 1 + i, 1, 201, cursor + 4 * i, world=1) for i in range(4)]


def test_a_step_a_later_restore_shows_complete_is_trained_though_a_ranks_report_of_it_was_lost():
    acc = account_samples(a_world_whose_rank_0_went_unheard_at_step_6(restore_at=6))
    assert acc.exactly_once, acc.summary()
    assert acc.unreported == [(0, p) for p in range(40, 44)] and acc.unreported_steps == [(6, 1, 2)]
    assert "4 positions trained but unreported: step 6 (1 of 2 ranks)" in acc.summary()


def test_without_a_restore_from_it_a_step_missing_a_ranks_report_leaves_gaps():
    acc = account_samples(a_world_whose_rank_0_went_unheard_at_step_6(restore_at=None))
    assert not acc.exactly_once and acc.gaps == [(0, p) for p in range(40, 44)] and acc.unreported == []


def test_a_restore_below_the_unheard_step_rolls_it_back_and_leaves_nothing_unreported():
    acc = account_samples(a_world_whose_rank_0_went_unheard_at_step_6(restore_at=5))
    assert acc.exactly_once, acc.summary()
    assert acc.unreported == [] and acc.rolled_back_steps == 1


def test_more_missing_positions_than_the_unheard_ranks_share_stay_gaps():
    ev = a_world_whose_rank_0_went_unheard_at_step_6(restore_at=6)
    ev = [e if not (e.type == ProgressEv.STEP and e.t >= 32) else        # the new world skips 4 positions too
          Event.make(ProgressEv.STEP, e.t, e.node, {**e.to_json()["data"],
                                                    "samples": [[a + 4, b + 4] for a, b in e.data.samples]})
          for e in ev]
    acc = account_samples(ev)
    assert not acc.exactly_once and len(acc.gaps) == 8 and acc.unreported == []   # 40-43 and 48-51: not guessed
