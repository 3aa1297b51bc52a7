"""The keep-alive settings the c10d store model allows at N (elastic_chaos/scale/suggest.py), on the linear
costs of tests/test_store_model.py (their arithmetic by hand below), and `elastic-chaos scale`'s lines for them."""
from __future__ import annotations

import pytest
from test_store_model import linear, scale

from elastic_chaos.scale import store_costs
from elastic_chaos.scale.store_model import Protocol, load
from elastic_chaos.scale.suggest import ATTEMPTS, CHOICES_S, HEADROOM, NoSetting, Setting, suggest

# linear(): w(N) = 2e-4 N + 1e-7 N seconds, so N writes in turn take 2.001e-4 N^2 s; the reads alone need
# 1e-7 N^2 of the store's core and the heartbeats 1e-7 N^2 / K more


def test_a_small_job_keeps_torchs_five_seconds():
    got = suggest(50, linear())                     # 50 writes in turn: 0.5 s, 2 x that under 15 s
    assert isinstance(got, Setting) and got.keep_alive_interval_s == 5 and got.keep_alive_max_attempt == ATTEMPTS
    assert got.flags == "--keep-alive-interval 5 --keep-alive-max-attempt 3"
    assert got.rdzv_conf == "keep_alive_interval=5,keep_alive_max_attempt=3"


def test_the_shortest_interval_that_holds_n_writes_in_turn_twice_over_is_chosen():
    got = suggest(200, linear())                    # 8.0 s in turn: 2 x 8.0 > 15 (5 s x 3), <= 30 (10 s x 3)
    assert isinstance(got, Setting) and got.keep_alive_interval_s == 10
    assert got.load.serial_s == pytest.approx(2.001e-4 * 200 ** 2)
    shorter = load(200, linear(), Protocol(5.0, ATTEMPTS))
    assert shorter.serial_s * HEADROOM > shorter.expiry_s     # the one before it did not hold
    assert 0 < got.collapse_keeps <= 200


def test_no_interval_holds_when_n_writes_in_turn_outlast_the_longest_expiry_twice():
    got = suggest(1000, linear())                   # 200 s in turn: 2 x 200 > 120 s x 3
    assert isinstance(got, NoSetting)
    assert got.reason == (f"even a {CHOICES_S[-1]} s keep-alive (360 s expiry) is under 2 x the 200.1 s that 1000 "
                          "writes in turn take")


def test_no_interval_lowers_the_reads_that_fill_the_store():
    got = suggest(3000, linear())                   # reads alone: 1e-7 x 3000^2 = 0.9 of the core
    assert isinstance(got, NoSetting) and got.reason.startswith("the agents' reads alone (one a second each) need 0.90")


def test_a_steady_state_over_the_stores_share_even_at_the_longest_interval_is_said_so():
    got = suggest(2230, linear())                   # reads 0.497, with 120 s heartbeats 0.501 of the core
    assert isinstance(got, NoSetting)
    assert got.reason.startswith("even with a 120 s keep-alive the steady state needs 0.50")


def test_scale_prints_the_settings_as_flags_with_what_they_cost_and_where_they_come_from(tmp_path):
    costs = store_costs.save(linear(), tmp_path / "costs.json")
    out = scale("--nodes", "200", "--rdzv-backend", "c10d", "--rdzv-preset", "fast", "--store-costs", str(costs))
    assert out.returncode == 0, out.stderr
    section = out.stdout.split("Settings to use at 200 nodes", 1)[1]
    assert section.startswith(" (MODEL, derived, not measured: the harness formed up to ")
    assert "--keep-alive-interval 10 --keep-alive-max-attempt 3 (this job's 1 s x 4 does not hold: its 4 s expiry " \
           "is under 2 x 8.0 s)" in section
    assert "--rdzv-conf keep_alive_interval=10,keep_alive_max_attempt=3" in section
    # formation (store_model.formation_s): 200 writes in turn 8.00 s + 200/201 of the 1 s poll + w 0.04 s
    assert "a node lost hard is dropped" in section and "10-30 s after the loss (its heartbeat expires" in section
    # that + last call 1 + poll 0..1 + formation 9.04: 20.0-41.0
    assert "about 20-41 s: that + the job's last call 1 s + a poll + the model's formation 9.0 s" in section


def test_scale_says_when_the_jobs_own_settings_hold(tmp_path):
    costs = store_costs.save(linear(), tmp_path / "costs.json")
    out = scale("--nodes", "200", "--rdzv-backend", "c10d", "--keep-alive-interval", "20", "--store-costs", str(costs))
    assert out.returncode == 0, out.stderr
    assert "--keep-alive-interval 10 --keep-alive-max-attempt 3 (this job's 20 s x 3 holds as well)" in out.stdout


def test_scale_says_why_no_setting_holds(tmp_path):
    costs = store_costs.save(linear(), tmp_path / "costs.json")
    out = scale("--nodes", "3000", "--rdzv-backend", "c10d", "--store-costs", str(costs))
    assert out.returncode == 0, out.stderr
    assert "none: the agents' reads alone (one a second each) need 0.90 of the store's core" in out.stdout
