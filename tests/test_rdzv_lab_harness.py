"""The rendezvous scale harness at small N, on both backends: torch's own agents and handlers (no workers)
against a real etcd / a real c10d TCPStore on loopback. What forms and re-forms is asserted; how fast is
the sweep's business (bench/rdzv/sweep.py)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from bench.rdzv.cpu import proc_cpu_s
from bench.rdzv.episodes import Sizer, measure_size
from bench.rdzv.harness import Harness, ScaleJob
from elastic_chaos.spec import JobSpec, RdzvBackend, preset

pytestmark = pytest.mark.slow

FAST = preset("fast").apply(JobSpec()).rdzv


@pytest.mark.parametrize("backend", [RdzvBackend.ETCD_V2, RdzvBackend.C10D])
def test_agents_form_then_re_form_without_a_lost_node_and_with_a_newcomer(tmp_path, backend):
    job = ScaleJob(backend, 4, 2, 4, rdzv=FAST, processes=2)
    with Harness(job, tmp_path / "h") as h:
        ids = [0, 1, 2, 3]
        h.spawn(ids)
        at = time.time() + 0.3
        h.run_nodes(ids, at)
        formed = h.wait_world(ids, 4, at, timeout_s=120)
        assert formed.seconds is not None and formed.errors == ()

        at = time.time() + 0.2
        h.order([3], "kill", at)
        h.order([0, 1, 2], "fail", at)
        reformed = h.wait_world([0, 1, 2], 3, at, timeout_s=120)
        assert reformed.seconds is not None and reformed.missing == 0
        ranks = {e["id"]: e["rank"] for e in h.events if e["ev"] == "formed" and e["t"] >= at and e["world"] == 3}
        assert sorted(ranks.values()) == [0, 1, 2]

        h.spawn([4])
        at = time.time() + 0.2
        h.run_nodes([4], at)
        assert h.wait_world([0, 1, 2, 4], 4, at, timeout_s=120).seconds is not None

        counts = h.counts()
        assert counts["ops"]["state_get"] > 0 and counts["ops"]["state_set"] > 0 and counts["received"] > 0
        assert h.store_pid is not None and proc_cpu_s(h.store_pid) > 0
        pids = [h.store_pid, *h.host_pids]
    assert all(proc_cpu_s(p) == 0.0 for p in pids)  # stopped by PID: nothing left


@pytest.mark.parametrize("backend", [RdzvBackend.ETCD_V2, RdzvBackend.C10D])
def test_a_leaving_node_is_gone_from_the_next_world(tmp_path, backend):
    job = ScaleJob(backend, 3, 2, 3, rdzv=FAST, processes=1)
    with Harness(job, tmp_path / "h") as h:
        h.spawn([0, 1, 2])
        at = time.time() + 0.3
        h.run_nodes([0, 1, 2], at)
        assert h.wait_world([0, 1, 2], 3, at, timeout_s=120).seconds is not None
        at = time.time() + 0.2
        h.order([2], "sigterm", at, leave=True)
        h.order([0, 1], "fail", at)
        assert h.wait_world([0, 1], 2, at, timeout_s=120).seconds is not None
        ended = [e for e in h.events if e["ev"] == "ended" and e["id"] == 2]
        assert [e["how"] for e in ended] == ["leave"]


def test_one_size_runs_every_episode_and_reports_the_store(tmp_path):
    job = ScaleJob(RdzvBackend.C10D, 4, 3, 4, rdzv=FAST, processes=2)
    result = measure_size(job, tmp_path / "m", lambda _: None, steady_s=2.0, modes=("hard", "leave"),
                          losses=(("1", None),))
    assert result.broke is None
    assert [e.label for e in result.episodes] == ["formation", "hard 1", "join after hard 1", "leave 1",
                                                  "join after leave 1"]
    assert all(e.seconds is not None and e.store_ops > 0 for e in result.episodes)
    assert result.steady is not None and result.steady.ops_per_s and result.steady.agent_cpu > 0


def test_replayed_restart_offsets_hold_each_survivor_back_until_its_own(tmp_path):
    job = ScaleJob(RdzvBackend.ETCD_V2, 4, 3, 4, rdzv=FAST, processes=2)
    with Harness(job, tmp_path / "h") as h:
        sizer = Sizer(h, lambda _: None, steady_s=0, restarts=[1.5, 1.5, 1.5])
        assert sizer.formation().seconds is not None
        began = time.time()
        ep = sizer.loss("hard", "1", None)
        assert ep.seconds is not None and ep.world == 3
        restarted = sorted(e["t"] - began for e in h.events if e["ev"] == "rdzv_started" and e["t"] >= began)
    # the loss is ordered 0.3 s after `began`; survivors replayed at 1.5 s fail 1.45 s after it (each offset
    # alone is not tested here: the first survivor to rejoin waits, and the others' monitor loops restart
    # for it -- torch's membership change, in the real job as in the harness)
    assert len(restarted) == 3 and min(restarted) >= 0.3 + 1.45


def test_a_silent_participant_of_a_completed_round_is_reported_declared_dead(tmp_path):
    # a node whose heartbeats stop while its round stands complete: the others' monitor loops sync the state
    # (num_nodes_waiting) and torch's _sanitize drops it once its heartbeat is interval x attempts old
    job = ScaleJob(RdzvBackend.C10D, 3, 2, 3, rdzv=FAST, processes=1)
    with Harness(job, tmp_path / "h") as h:
        h.spawn([0, 1, 2])
        at = time.time() + 0.3
        h.run_nodes([0, 1, 2], at)
        assert h.wait_world([0, 1, 2], 3, at, timeout_s=120).seconds is not None
        assert h.declared_dead(at) == []
        killed = time.time() + 0.2
        h.order([2], "kill", killed)
        h.drain(FAST.keep_alive_interval * FAST.keep_alive_max_attempt + 4.0)
        dead = h.declared_dead(killed)
    assert [d["node"] for d in dead] == [2]
    assert dead[0]["heartbeat_age_s"] >= FAST.keep_alive_interval * FAST.keep_alive_max_attempt


def test_under_time_dilation_torch_sees_perceived_seconds_and_the_store_is_held_to_its_share(tmp_path):
    # dilation 3: every clock the agents read runs 3x slower (bench.rdzv.clock), the store gets 1/3 core
    job = ScaleJob(RdzvBackend.C10D, 3, 2, 3, rdzv=FAST, processes=1, dilation=3.0)
    cgroups = set(Path("/sys/fs/cgroup/cpu").glob("elastic-chaos-scale-*"))  # another harness' may be there
    result = measure_size(job, tmp_path / "m", lambda _: None, steady_s=1.0, modes=("hard",), losses=(("1", None),))
    assert result.broke is None and result.dilation == 3.0 and result.store_share == pytest.approx(1 / 3)
    hard = result.episode("hard 1")
    assert hard is not None and hard.seconds is not None
    expiry = FAST.keep_alive_interval * FAST.keep_alive_max_attempt
    # the lost node's last heartbeat lands up to two intervals before the loss; the survivors drop it once
    # it is `expiry` old on *their* perceived clock, then wait the last call: in perceived seconds as at
    # dilation 1 (a heartbeat written on the real clock would be 3x older or younger than that)
    assert expiry - 2 * FAST.keep_alive_interval <= hard.seconds <= expiry + FAST.last_call_timeout + 4.0
    assert hard.elapsed_s >= 2.5 * hard.seconds  # it took about 3x as long in real time
    assert set(Path("/sys/fs/cgroup/cpu").glob("elastic-chaos-scale-*")) <= cgroups  # the store's cgroup is gone


def test_the_state_of_a_round_that_has_not_formed_can_be_read_in_numbers(tmp_path):
    # two of three nodes started: the round waits for min_nodes 3 with both in it
    job = ScaleJob(RdzvBackend.C10D, 3, 3, 3, rdzv=FAST, processes=1)
    with Harness(job, tmp_path / "h") as h:
        h.spawn([0, 1, 2])
        at = time.time() + 0.3
        h.run_nodes([0, 1], at)
        assert h.wait_world([0, 1], 3, at, timeout_s=3.0).seconds is None
        state = h.peek()
    assert state is not None
    assert (state["participants"], state["wait_list"], state["round"], state["complete"]) == (2, 0, 0, False)
    assert state["heartbeat_span_s"] is not None and state["state_bytes"] > 0


def test_a_broken_episode_says_what_the_store_held_when_it_gave_up():
    from bench.rdzv.episodes import _broke
    from bench.rdzv.records import Episode, Stalled

    ep = Episode("formation", "formation", 1024, 1024, None, 0, 0.3, missing=1024, declared_dead=913,
                 dead_heartbeat_age_s=4.4, stalled=Stalled(110, 0, 0, False, heartbeat_span_s=3.97))
    said = _broke(ep, 37.5)
    assert said.startswith("formation: 1024 node(s) had not formed the world of 1024 after the episode's timeout of "
                           "37.5 perceived seconds (0 round(s) completed meanwhile)")
    assert "913 live participant(s) declared dead" in said
    assert "round 0 forming, 110 participant(s) and 0 waiting, their heartbeats spanning 3.97 s" in said
