"""bench/limits.py and its rendering: each recovery case beside the mechanism's limit for its preset, its
own detection and its run's floor (elastic_chaos/analysis/limits.py), the phase named past 1.1 times it."""
from __future__ import annotations

from bench import limits
from bench.render.recovery import limit_notes, phase_table


def stat(median: float) -> dict[str, float]:
    return {"median": median, "min": median, "max": median, "n": 5}


def cases() -> dict[str, dict]:
    return {
        # fast: K 1 s x 4, last call 1 s: 0.2 + (2..4) + 1 + (0..1) + 2.2 = 5.4..8.4 s
        "etcd-v2/fast/kill-node": {"detect": stat(0.2), "rendezvous": stat(5.2), "restart": stat(2.2),
                                   "recovery_s": stat(7.5), "floor_s": 2.2},
        # left: 1.3 + 1 + (0..1) + 4.0 = 6.3..7.3 s; measured 11.3: the restart took 6.4 - 4.0 more
        "etcd-v2/fast/spot-interruption+leave": {"detect": stat(1.3), "rendezvous": stat(2.8), "restart": stat(6.4),
                                                 "recovery_s": stat(11.3), "floor_s": 4.0},
        "etcd-v2/fast/partition": {"detect": stat(3.6), "recovery_s": stat(14.2), "floor_s": 2.2},
        "cluster:etcd-v2/fast/kill-node": {"detect": stat(0.1), "recovery_s": stat(19.1), "floor_s": 3.8},
    }


def test_each_case_gets_its_limit_or_why_it_has_none():
    results = {"recovery": cases()}
    limits.annotate(results)
    got = {k: c["limit"] for k, c in results["recovery"].items()}
    assert got["etcd-v2/fast/kill-node"] == {"low_s": 5.4, "high_s": 8.4, "x_high": 0.89}
    assert got["etcd-v2/fast/spot-interruption+leave"] == {"low_s": 6.3, "high_s": 7.3, "x_high": 1.55,
                                                           "beyond": ["restart", 2.4]}
    assert got["etcd-v2/fast/partition"]["none"].startswith("no limit computed for this fault")
    assert got["cluster:etcd-v2/fast/kill-node"]["none"].startswith("a pod's scheduling and start")


def test_the_table_and_the_notes_say_the_same_as_the_limits_stored():
    results = {"recovery": cases()}
    limits.annotate(results)
    table = "\n".join(phase_table(results["recovery"], {}))
    assert "| 7.5 | 5.4-8.4 | 0.89 |" in table and "| 14.2 | - | - |" in table
    notes = limit_notes(results["recovery"])
    assert notes[1] == ("etcd-v2/fast/spot-interruption+leave: 1.55 x the limit's most; its restart phase took 2.4 s "
                        "more than the floor of its run (a worker's cold start, measured alone)")
    assert len(notes) == 2                      # the kill within its limit is not named


def test_figures_from_before_the_limits_render_as_none_and_add_no_notes():
    table = "\n".join(phase_table({"etcd-v2/fast/kill-node": cases()["etcd-v2/fast/kill-node"]}, {}))
    assert "| 7.5 | - | - |" in table
    assert limit_notes({"etcd-v2/fast/kill-node": cases()["etcd-v2/fast/kill-node"]}) == []
