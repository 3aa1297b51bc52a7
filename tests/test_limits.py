"""The mechanism's limit on a shrink (elastic_chaos.analysis.limits), by hand, and against the figures
docs/PRESETS.md measured (etcd-v2, fast: 7.5 s after a kill, within 5.35-8.35 s)."""
from __future__ import annotations

import pytest

from elastic_chaos.analysis.limits import shrink_limit

FAST = {"keep_alive_interval": 1, "keep_alive_max_attempt": 4, "last_call_s": 1}
TORCH = {"keep_alive_interval": 5, "keep_alive_max_attempt": 3, "last_call_s": 30}


def test_a_hard_loss_waits_out_an_expiry_counted_from_a_heartbeat_up_to_two_intervals_old():
    limit = shrink_limit(detect_s=0.15, floor_s=2.2, left=False, **FAST)
    assert limit.expiry_s == (2, 4)
    assert limit.low_s == pytest.approx(0.15 + 2 + 1 + 2.2) and limit.high_s == pytest.approx(0.15 + 4 + 1 + 1 + 2.2)
    assert limit.low_s <= 7.533 <= limit.high_s              # bench: etcd-v2/fast/kill-node
    torch = shrink_limit(detect_s=0.169, floor_s=2.205, left=False, **TORCH)
    assert torch.low_s <= 44.099 <= torch.high_s             # bench: etcd-v2/default/kill-node (5-15 s expiry)


def test_a_node_that_left_costs_only_the_last_call_a_poll_and_the_floor():
    limit = shrink_limit(detect_s=1.256, floor_s=4.057, left=True, **FAST)
    assert limit.expiry_s == (0, 0) and limit.rendezvous_s == (1, 2)
    assert limit.high_s == pytest.approx(1.256 + 1 + 1 + 4.057)


def test_the_phase_beyond_its_part_is_named_and_none_when_all_are_within():
    limit = shrink_limit(detect_s=1.256, floor_s=4.057, left=True, **FAST)
    assert limit.beyond({"detect": 1.256, "rendezvous": 2.845, "restart": 7.2}) == ("restart", pytest.approx(3.143))
    assert limit.beyond({"detect": 1.256, "rendezvous": 2.845, "restart": 4.0}) == ("rendezvous", pytest.approx(0.845))
    assert limit.beyond({"detect": 1.256, "rendezvous": 1.5, "restart": 4.0}) is None
