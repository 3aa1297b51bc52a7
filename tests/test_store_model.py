"""The c10d store model (elastic_chaos/scale/store_model.py): hand-computed values on costs chosen so the
arithmetic is short, monotonic growth, the break point, the collapse, the costs file, and `elastic-chaos
scale`'s model lines (from a costs file written here: no store is measured)."""
from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from elastic_chaos.errors import SpecError
from elastic_chaos.scale import store_costs
from elastic_chaos.scale.store_model import (
    Protocol,
    StoreCosts,
    break_point,
    costs_from_json,
    costs_to_json,
    describe,
    formation_s,
    load,
    stall_participants,
)

FAST = Protocol(1.0, 4)
"""The bench's preset fast: keep-alive 1 s x 4."""


def linear(get_per_node: float = 1e-7, cas_per_node: float = 1e-7, client_per_node: float = 2e-4) -> StoreCosts:
    """Costs proportional to N (measured at 1 and 1000 nodes, so the power law between them has exponent 1):
    a state of 100 bytes per node, and the given seconds per node."""
    return StoreCosts((1, 1000), (100.0, 100_000.0), (get_per_node, get_per_node * 1000),
                      (cas_per_node, cas_per_node * 1000), (client_per_node, client_per_node * 1000))


def test_a_cost_between_two_sizes_follows_the_power_law_through_them():
    costs = StoreCosts((8, 64), (1052.0, 5528.0), (1.0, 2.0), (1.0, 2.0), (1.0, 2.0))
    exponent = math.log(5528 / 1052) / math.log(8)
    assert costs.at(costs.state_b64, 8) == pytest.approx(1052)
    assert costs.at(costs.state_b64, 16) == pytest.approx(1052 * 2 ** exponent)
    assert costs.at(costs.get_s, 128) == pytest.approx(2 * 2 ** (1 / 3))   # beyond: the last segment's law
    assert costs.measured(64) and not costs.measured(128)


def test_the_load_at_a_small_size_matches_the_hand_computed_one():
    m = load(10, linear(), FAST)
    assert m.state_b64 == pytest.approx(1000)                       # 100 bytes x 10
    assert (m.reads_per_s, m.cas_per_s) == (10, 10)                 # 1/s reads (cache 1 s), 1/K heartbeats
    assert m.bytes_per_s == pytest.approx(10 * 1000 + 10 * 3 * 1000)  # a read moves S, a compare-and-set 3 S
    assert m.store_cores == pytest.approx(10 * 1e-6 + 10 * 1e-6)
    assert m.turnaround_s == pytest.approx(2e-3 + 1e-6)            # client 2e-4 x 10, compare_set 1e-7 x 10
    assert m.serial_s == pytest.approx(10 * (2e-3 + 1e-6))
    last = 10 / 11
    assert m.formation_s == pytest.approx(max(last * 0.3, m.serial_s) + last * 1.0 + m.turnaround_s)
    assert not m.breaks and m.why() == ""


def test_formation_of_one_node_is_half_the_round0_wait_and_half_a_poll():
    assert formation_s(1, 0.0) == pytest.approx(0.15 + 0.5)


def test_every_figure_of_the_load_grows_with_the_size():
    costs = linear()
    loads = [load(n, costs, FAST) for n in (1, 2, 10, 100, 141)]
    for key in ("state_b64", "ops_per_s", "bytes_per_s", "store_cores", "turnaround_s", "serial_s", "formation_s"):
        values = [getattr(m, key) for m in loads]
        assert values == sorted(values) and values[0] < values[-1], key


def test_the_break_point_is_where_n_writes_in_turn_outlast_the_heartbeat_expiry():
    # w(n) = 2.001e-4 n: n x w(n) > 4 s first at n = 142 (141.39...); the store's core is far from full there
    costs = linear()
    assert break_point(costs, FAST) == 142
    assert not load(141, costs, FAST).breaks
    m = load(142, costs, FAST)
    assert m.over_serialization and not m.over_capacity and m.formation_s is None
    assert "142 writes in turn take" in m.why()


def test_the_break_point_is_the_stores_core_when_that_fills_first():
    # store: n x (1e-4 n + 1e-4 n) >= 1 core first at n = 71 (70.7...); writes in turn still fit in 4 s there
    costs = linear(get_per_node=1e-4, cas_per_node=1e-4, client_per_node=1e-7)
    assert break_point(costs, FAST) == 71
    m = load(71, costs, FAST)
    assert m.over_capacity and not m.over_serialization


def test_faster_clients_and_a_longer_expiry_move_the_break_later():
    costs = linear()
    assert break_point(costs, Protocol(1.0, 4, client_speedup=8.0)) > break_point(costs, FAST)  # type: ignore[operator]
    assert break_point(costs, Protocol(5.0, 3)) > break_point(costs, FAST)  # type: ignore[operator]
    assert break_point(costs, Protocol(1.0, 4, rtt_s=1e-3)) < break_point(costs, FAST)  # type: ignore[operator]


def test_a_collapsed_round_keeps_the_participants_whose_heartbeats_fit_in_the_expiry():
    flat = StoreCosts((1, 1000), (100.0, 100_000.0), (1e-4, 1e-4), (1e-4, 1e-4), (1e-4, 1e-4))
    assert stall_participants(1000, flat, FAST) == pytest.approx(4 / (1000 * 1e-4), rel=1e-6)   # 40
    assert stall_participants(10, flat, FAST) == 10   # all of them fit: nothing collapses


def test_store_costs_must_be_whole_and_ascending():
    with pytest.raises(ValueError, match="same number"):
        StoreCosts((1, 2), (1.0,), (1.0, 1.0), (1.0, 1.0), (1.0, 1.0))
    with pytest.raises(ValueError, match="ascending"):
        StoreCosts((2, 1), (1.0, 1.0), (1.0, 1.0), (1.0, 1.0), (1.0, 1.0))
    with pytest.raises(ValueError, match="positive"):
        StoreCosts((1, 2), (1.0, 0.0), (1.0, 1.0), (1.0, 1.0), (1.0, 1.0))


def test_costs_round_trip_through_their_file_and_a_missing_file_says_how_to_measure(tmp_path):
    costs = linear()
    path = store_costs.save(costs, tmp_path / "costs.json")
    assert store_costs.load(path) == costs == costs_from_json(costs_to_json(costs))
    with pytest.raises(SpecError, match="python -m bench --store-model"):
        store_costs.load(tmp_path / "absent.json")
    (tmp_path / "bad.json").write_text(json.dumps({"nodes": [1]}))
    with pytest.raises(SpecError, match="measure them again"):
        store_costs.load(tmp_path / "bad.json")


def test_the_shipped_costs_load():
    costs = store_costs.load()
    assert costs.nodes[0] <= 64 and costs.nodes[-1] >= 4096 and costs.date


def test_describe_says_ruled_out_and_the_smallest_size_ruled_out():
    lines = dict(describe(200, linear(), FAST))
    assert "RULED OUT" in lines["N writes in turn (N x w)"]
    assert lines["smallest size the bounds rule out"] == "142 nodes"
    assert lines["formation on real nodes, all starting together"].startswith("none: 200 writes in turn")
    assert "within it" in dict(describe(100, linear(), FAST))["N writes in turn (N x w)"]


def scale(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "elastic_chaos.cli.main", "scale", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.fixture
def costs_path(tmp_path: Path) -> Path:
    return store_costs.save(linear(), tmp_path / "costs.json")


def test_scale_prints_the_c10d_store_model_labelled_as_a_model(costs_path):
    out = scale("--nodes", "200", "--rdzv-backend", "c10d", "--rdzv-preset", "fast", "--store-costs", str(costs_path))
    assert out.returncode == 0, out.stderr
    model = out.stdout.split("MODEL, not a measurement", 1)[1].splitlines()
    assert any("N writes in turn" in line and "RULED OUT" in line for line in model)
    assert any("smallest size the bounds rule out" in line and "142 nodes" in line for line in model)


def test_scale_shows_the_model_hosted_as_the_harness_beside_a_measured_formation(costs_path):
    out = scale("--nodes", "512", "--rdzv-backend", "c10d", "--rdzv-preset", "fast", "--store-costs", str(costs_path))
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stdout.splitlines() if "formation, the model hosted as the harness" in x)
    assert "the model hosted as the harness" in line and "(above)" in line and "dilation" in line


def test_scale_with_another_backend_prints_no_store_model(costs_path):
    out = scale("--nodes", "16", "--rdzv-backend", "etcd-v2", "--store-costs", str(costs_path))
    assert out.returncode == 0, out.stderr
    assert "MODEL" not in out.stdout


def test_scale_with_store_costs_it_cannot_read_is_a_usage_error_that_says_how_to_measure(tmp_path):
    out = scale("--nodes", "64", "--rdzv-backend", "c10d", "--store-costs", str(tmp_path / "absent.json"))
    assert out.returncode == 2
    assert "python -m bench --store-model" in out.stderr
