"""The link faults' options, plans and cost (issue 39), without a job or root: what they refuse,
what they would do, and the link group's figures from a timeline."""
from __future__ import annotations

import subprocess
import sys

import pytest

from elastic_chaos.analysis.link import link_cost
from elastic_chaos.errors import SpecError
from elastic_chaos.events import AgentEv, Event, FaultEv, NodeEv, ProgressEv, RdzvEv
from elastic_chaos.faults.catalog import fault_class
from elastic_chaos.faults.network import Bandwidth, FlappingLink, Latency, PacketLoss
from elastic_chaos.platforms.capabilities import LinkDegrader


def test_the_catalog_makes_the_link_faults_on_the_local_platform() -> None:
    for kind, cls in (("packet-loss", PacketLoss), ("bandwidth", Bandwidth), ("flapping-link", FlappingLink),
                      ("latency", Latency)):
        assert fault_class(kind, "local") is cls
        assert cls.requires is LinkDegrader


class _Nodes:
    """What ``ends`` asks of a platform: its nodes' names."""

    def nodes(self) -> list[object]:
        return [type("N", (), {"name": f"node-{i}"})() for i in range(3)]


def test_between_names_the_node_then_its_peers() -> None:
    f = PacketLoss(rate=0.1, between=("node-1", "node-0", "node-2"))
    assert f.ends(_Nodes()) == ("node-1", ("node-0", "node-2"))  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="names node-7, which this job does not have; its nodes: node-0, node-1"):
        PacketLoss(between=("node-0", "node-7")).ends(_Nodes())  # type: ignore[arg-type]
    assert f.shape() == {"loss": 0.1, "to_store": False}
    assert Bandwidth(mbit=2.5).shape() == {"rate_kbit": 2500}
    assert FlappingLink(down_s=1, up_s=2).shape() == {"down_s": 1, "up_s": 2}


class _Pods:
    """A Kubernetes job's nodes: its worker pods."""

    def nodes(self) -> list[object]:
        return [type("N", (), {"name": f"chaos-1a2b3c-worker-{i}"})() for i in (0, 1, 10)]


def test_node_k_names_the_worker_pod_k_so_one_command_line_fits_every_platform() -> None:
    f = Latency(between=("node-0", "node-10"))
    assert f.ends(_Pods()) == ("chaos-1a2b3c-worker-0", ("chaos-1a2b3c-worker-10",))  # type: ignore[arg-type]
    assert Latency(between=("chaos-1a2b3c-worker-1",)).ends(_Pods()) == ("chaos-1a2b3c-worker-1", ())  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="names node-2, which this job does not have"):
        Latency(between=("node-0", "node-2")).ends(_Pods())  # type: ignore[arg-type]


@pytest.mark.parametrize("kwargs, words", [
    ({"rate": 0.0}, "rate 0"), ({"rate": 0.95}, "rate 0.95"),
    ({"between": ("node-0", "node-0")}, "names a node twice"),
    ({"node": "node-1", "between": ("node-0", "node-1")}, "name the node once"),
])
def test_bad_loss_options_are_refused_with_what_is_allowed(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(SpecError, match=words):
        PacketLoss(**kwargs)  # type: ignore[arg-type]


def test_the_stores_link_is_one_node_alone() -> None:
    assert Latency(to_store=True, between=("node-1",)).shape()["to_store"] is True
    assert PacketLoss(to_store=True).store_link and not Bandwidth().store_link
    with pytest.raises(SpecError, match="name the node alone"):
        PacketLoss(to_store=True, between=("node-1", "node-0"))
    cost = link_cost([], target="node-1", injected_at=0.0, fault="latency", detail={"to_store": True, "peers": []})
    assert cost.peers == ["the rendezvous store"]


def test_jitter_beyond_the_delay_is_refused() -> None:
    assert Latency(delay_ms=20, jitter_ms=5).shape() == {"delay_ms": 20, "jitter_ms": 5, "to_store": False}
    with pytest.raises(SpecError, match="cannot leave before it arrived"):
        Latency(delay_ms=5, jitter_ms=10)


def test_a_flap_needs_positive_times() -> None:
    with pytest.raises(SpecError, match="down_s 0"):
        FlappingLink(down_s=0)


def test_the_command_line_takes_between_as_a_list_and_refuses_bad_values_with_exit_2() -> None:
    ok = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "run", "packet-loss", "--rate", "0.05",
                         "--between", "node-0", "node-1", "--dry-run"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "between=('node-0', 'node-1')" in ok.stdout
    bad = subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "run", "flapping-link", "--down", "-1",
                          "--dry-run"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def _steps(start: float, end: float, every: float, restart: int = 0, gap: tuple[float, float] | None = None,
           first: int = 0) -> list[Event]:
    out, t, n = [], start, first
    while t < end:
        if gap is None or not gap[0] <= t < gap[1]:
            out.append(Event.make(ProgressEv.STEP, t, "node-0", {"rank": 0, "step": n, "restart_count": restart}))
            n += 1
        t += every
    return out


def test_the_link_group_sets_step_rates_against_the_measured_degradation() -> None:
    before = _steps(0.0, 10.0, 0.1)
    during = _steps(10.0, 20.0, 0.2, gap=(12.0, 15.0), first=100)     # 35 steps in 10 s, none for 3 s
    after = _steps(20.0, 30.0, 0.1, first=135)
    events = [*before, *during, *after,
              Event.make(FaultEv.REVERTED, 20.0, "node-0", {"fault": "flapping-link", "action": "restored"}),
              Event.make(NodeEv.LINK_RESTORED, 20.0, "node-0", {"action": "restored", "flaps": [[10, 13], [15, 18]]})]
    cost = link_cost(events, target="node-0", injected_at=10.0, fault="flapping-link",
                     detail={"down_s": 3.0, "peers": ["node-1"],
                             "probe": {"sent": 20, "echoed": 0, "loss_each_way": 1.0}})
    assert cost.rate_before == pytest.approx(10.0, rel=0.02)
    assert cost.rate_during is not None and cost.rate_during < 5.5
    assert cost.rate_after == pytest.approx(10.0, rel=0.02)
    assert cost.longest_gap_s == pytest.approx(3.2, abs=0.05)
    assert cost.flaps == 2 and cost.restarts == 0 and cost.loss_measured == 1.0
    assert cost.describe().startswith("node-0 <-> node-1: ") and "step time 100 ms before" in cost.describe()
    again = type(cost).from_json("node-0", 10.0, cost.to_json())
    assert again.peers == ["node-1"] and again.flaps == 2 and again.longest_gap_s == pytest.approx(3.2)


def test_a_restart_while_degraded_is_counted() -> None:
    events = [*_steps(0.0, 10.0, 0.1), *_steps(10.0, 20.0, 0.1, restart=1, first=100)]
    cost = link_cost(events, target="node-0", injected_at=10.0, fault="packet-loss",
                     detail={"loss": 0.05, "probe": {"loss_each_way": 0.05}})
    assert cost.restarts == 1
    assert cost.restored_at is None and any("not restored" in m for m in cost.missing)


def _rank_steps(node: str, ranks: list[int], t: float, restart: int) -> list[Event]:
    return [Event.make(ProgressEv.STEP, t, node, {"rank": r, "step": 1, "restart_count": restart}) for r in ranks]


def test_the_report_names_the_rank_pairs_whose_traffic_crossed_the_link() -> None:
    # node-0 held ranks 0-1, node-1 ranks 2-3 and node-2 ranks 4-5 before a restart; after it (node-0's
    # count 1, node-1's own count 2: each agent counts its own), node-0 holds 2-3 and node-1 holds 0-1
    events = (_rank_steps("node-0", [0, 1], 1.0, 0) + _rank_steps("node-1", [2, 3], 1.0, 0)
              + _rank_steps("node-2", [4, 5], 1.0, 0)
              + _rank_steps("node-0", [2, 3], 5.0, 1) + _rank_steps("node-1", [0, 1], 5.0, 2)
              + _rank_steps("node-0", [9], 20.0, 3))   # after the fault: not the link's world
    cost = link_cost(events, target="node-0", injected_at=10.0, fault="latency", detail={"peers": ["node-1"]})
    assert cost.rank_pairs == [(2, 0), (2, 1), (3, 0), (3, 1)]
    assert "(rank pairs 2-0, 2-1, 3-0, 3-1)" in cost.describe()
    assert type(cost).from_json("node-0", 10.0, cost.to_json()).rank_pairs == cost.rank_pairs
    # the store's link carries no rank's collective traffic
    store = link_cost(events, target="node-0", injected_at=10.0, fault="latency", detail={"to_store": True})
    assert store.rank_pairs == []


def _state(t: float, round_: int, nodes: list[str], complete: bool = True) -> Event:
    return Event.make(RdzvEv.STATE, t, None, {"round": round_, "complete": complete,
                                               "participants": [{"node": n} for n in nodes]})


def test_a_live_node_dropped_from_its_round_while_the_link_was_degraded_is_a_false_death() -> None:
    steps = _steps(0.0, 30.0, 0.5)
    dropped = steps + [_state(1.0, 0, ["node-0", "node-1"]), _state(14.0, 0, ["node-0"]),
                       _state(16.0, 1, ["node-0"], complete=False)]
    cost = link_cost(dropped, target="node-1", injected_at=10.0, fault="latency",
                     detail={"to_store": True, "delay_ms": 3000.0})
    assert cost.declared_dead == ["node-1"] and "declared dead while alive: node-1" in cost.describe()
    # a new round, where every node joins afresh, is not a death; nor is a round that stood whole
    rejoined = steps + [_state(1.0, 0, ["node-0", "node-1"]), _state(12.0, 1, ["node-0"], complete=False),
                        _state(13.0, 1, ["node-0", "node-1"])]
    assert link_cost(rejoined, target="node-1", injected_at=10.0, fault="latency", detail={}).declared_dead == []
    assert type(cost).from_json("node-1", 10.0, cost.to_json()).declared_dead == ["node-1"]
    # an agent restarting its workers leaves the round itself to rejoin (a link past the collective
    # timeout): before, that read as a death
    restarting = dropped + [Event.make(AgentEv.WORKER_GROUP_FAILED, 12.0, "node-1", {})]
    assert link_cost(restarting, target="node-1", injected_at=10.0, fault="latency", detail={}).declared_dead == []


def test_each_way_of_a_latency_defaults_to_the_other_and_may_be_set_apart() -> None:
    alike = Latency(delay_ms=20, jitter_ms=5)
    assert alike.shape() == {"delay_ms": 20, "jitter_ms": 5, "to_store": False}     # today's, exactly
    assert not alike.per_direction and alike.round_trip_ms == 40 and alike.worst_round_trip_ms == 50
    assert "each way" in alike.words()
    apart = Latency(delay_ms=20, reverse_delay_ms=5)
    assert apart.shape() == {"delay_ms": 20, "jitter_ms": 0.0, "to_store": False, "reverse_delay_ms": 5}
    assert apart.per_direction and apart.reverse() == (5, 0.0) and apart.round_trip_ms == 25
    assert "20 ms node -> peers and 5 ms peers -> node" in apart.words()
    assert "node -> the store" in Latency(delay_ms=20, reverse_delay_ms=0, to_store=True).words()
    # set to the same values, the ways are alike (one reader per side, as ever)
    assert not Latency(delay_ms=20, reverse_delay_ms=20).per_direction


@pytest.mark.parametrize("kwargs, words", [
    ({"delay_ms": 20, "reverse_delay_ms": 5, "reverse_jitter_ms": 6}, "--reverse-jitter-ms 6 is more than"),
    ({"delay_ms": 20, "jitter_ms": 10, "reverse_delay_ms": 5}, "give --reverse-jitter-ms"),
    ({"delay_ms": 20, "reverse_delay_ms": -1}, "reverse_delay_ms -1"),
])
def test_a_reverse_way_that_cannot_be_is_refused(kwargs: dict[str, float], words: str) -> None:
    with pytest.raises(SpecError, match=words):
        Latency(**kwargs)  # type: ignore[arg-type]


def test_a_bursty_loss_asks_at_least_independent_losss_own_runs() -> None:
    assert PacketLoss(rate=0.05, burst=4).shape() == {"loss": 0.05, "to_store": False, "burst": 4}
    assert PacketLoss(rate=0.05).shape() == {"loss": 0.05, "to_store": False}    # today's, exactly
    assert "in bursts of 4 on average" in PacketLoss(rate=0.05, burst=4).words()
    assert PacketLoss(rate=0.5, burst=2).burst == 2      # 1 / (1 - 0.5): independent loss, allowed
    with pytest.raises(SpecError, match=r"less clustered than independent loss.*1.05 packets"):
        PacketLoss(rate=0.05, burst=1)
    with pytest.raises(SpecError, match="burst 0.5"):
        PacketLoss(rate=0.05, burst=0.5)


def test_the_command_line_takes_the_reverse_way_and_the_burst() -> None:
    cmd = [sys.executable, "-m", "elastic_chaos.cli.main", "run"]
    ok = subprocess.run([*cmd, "latency", "--delay-ms", "20", "--reverse-delay-ms", "5", "--between", "node-0",
                         "node-1", "--dry-run"], capture_output=True, text=True, timeout=120)
    assert ok.returncode == 0, ok.stderr
    assert "reverse_delay_ms=5.0" in ok.stdout
    bursty = subprocess.run([*cmd, "packet-loss", "--rate", "0.05", "--burst", "4", "--dry-run"],
                            capture_output=True, text=True, timeout=120)
    assert bursty.returncode == 0 and "burst=4.0" in bursty.stdout, bursty.stderr
    bad = subprocess.run([*cmd, "packet-loss", "--rate", "0.05", "--burst", "1", "--dry-run"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "less clustered than independent loss" in bad.stderr
    helped = subprocess.run([*cmd, "latency", "--help"], capture_output=True, text=True, timeout=120)
    assert "--reverse-delay-ms" in helped.stdout and "peers -> node" in helped.stdout


def _probe(rtt: float, forward: float, reverse: float, **more: float) -> dict[str, float]:
    return {"sent": 400, "echoed": 400, "loss_each_way": 0.0, "rtt_ms": rtt, "forward_ms": forward,
            "reverse_ms": reverse, "arrived": 400, "loss_forward": 0.0, "loss_reverse": 0.0, **more}


def test_the_report_states_each_ways_delay_where_they_differ() -> None:
    detail = {"delay_ms": 20.0, "jitter_ms": 0.0, "reverse_delay_ms": 5.0, "peers": ["node-1"],
              "baseline": _probe(1.0, 0.4, 0.6), "probe": _probe(26.1, 20.5, 5.6)}
    cost = link_cost([], target="node-0", injected_at=0.0, fault="latency", detail=detail)
    assert (cost.one_way_ms, cost.one_way_back_ms, cost.one_way_baseline_ms) == (20.5, 5.6, 0.4)
    line = cost.describe()
    assert "round trip 26.1 ms measured (20.0 ms out + 5.0 ms back asked, 1.0 ms before)" in line, line
    assert "one way 20.5 ms out and 5.6 ms back measured (0.4 ms and 0.6 ms before)" in line, line
    assert "(out: node-0 -> node-1; back: the other way)" in line
    again = type(cost).from_json("node-0", 0.0, cost.to_json())
    assert again.one_way_back_ms == 5.6 and again.reverse_delay_ms == 5.0
    # alike both ways: today's words, no one-way figures claimed
    alike = link_cost([], target="node-0", injected_at=0.0, fault="latency",
                      detail={**detail, "reverse_delay_ms": None})
    assert "20.0 ms each way asked" in alike.describe() and alike.one_way_ms is None
    # the store's link is probed by connects: only the round trip, and the report says so
    store = link_cost([], target="node-0", injected_at=0.0, fault="latency",
                      detail={**detail, "to_store": True, "probe": {"sent": 60, "echoed": 60, "rtt_ms": 25.3},
                              "baseline": {"sent": 10, "echoed": 10, "rtt_ms": 0.1}})
    assert "each way not measured apart (the probe measured only the round trip)" in store.describe()


def test_the_report_states_a_bursty_loss_as_measured_and_as_dropped() -> None:
    drops_at_probe = [{"direction": "forward", "packets": 400, "dropped": 20, "bursts": 5}]
    drops_whole = [{"direction": "reverse", "from": "node-1", "to": "node-0", "packets": 10_000, "dropped": 480,
                    "bursts": 120},
                   {"direction": "forward", "from": "node-0", "to": "node-1", "packets": 10_000, "dropped": 520,
                    "bursts": 130}]
    detail = {"loss": 0.05, "burst": 4.0, "peers": ["node-1"], "drops": drops_at_probe,
              "probe": _probe(1.0, 0.5, 0.5, loss_each_way=0.048, loss_forward=0.05, loss_reverse=0.046)}
    events = [*_steps(0.0, 10.0, 0.1), *_steps(10.0, 20.0, 0.1, first=100),
              Event.make(FaultEv.REVERTED, 20.0, "node-0", {"fault": "packet-loss", "action": "restored"}),
              Event.make(NodeEv.LINK_RESTORED, 20.0, "node-0", {"action": "restored", "flaps": [],
                                                               "drops": drops_whole})]
    cost = link_cost(events, target="node-0", injected_at=10.0, fault="packet-loss", detail=detail)
    # the readers' count over the whole fault (the restore's), not the one at the end of the probe
    assert cost.loss_dropped == pytest.approx(0.05) and cost.burst_dropped == pytest.approx(4.0)
    assert cost.burst_asked == 4.0 and cost.loss_forward == 0.05 and cost.loss_reverse == 0.046
    line = cost.describe()
    assert "loss 5% each way measured: 5.0% out, 4.6% back (asked 5% in bursts of 4 packets)" in line, line
    assert "5.0% of the link's packets dropped in bursts of 4.0 packets on average (the queue readers' count)" \
        in line, line
    unrestored = link_cost(events[:-2], target="node-0", injected_at=10.0, fault="packet-loss", detail=detail)
    assert unrestored.loss_dropped == pytest.approx(0.05) and unrestored.burst_dropped == pytest.approx(4.0)
    assert type(cost).from_json("node-0", 10.0, cost.to_json()).burst_dropped == pytest.approx(4.0)
    # independent loss: none of it (today's report)
    plain = link_cost(events, target="node-0", injected_at=10.0, fault="packet-loss",
                      detail={**detail, "burst": None})
    assert plain.loss_dropped is None and "dropped" not in plain.describe()
