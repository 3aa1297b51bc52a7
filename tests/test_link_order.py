"""A job's timeouts against a degraded link (issue 39): misordered pairs are named, well-ordered ones
are not, and a given degradation is checked against every timeout it meets, the same in
``elastic-chaos timeouts`` and in a link run's verdict."""
from __future__ import annotations

import pytest

from elastic_chaos.analysis.link_order import (
    Degradation,
    JobTimeouts,
    against,
    job_timeouts,
    losses_to_stall,
    order,
    ordering,
    resend_stall_s,
    verdict_line,
)
from elastic_chaos.analysis.timeouts import Level, Origin
from elastic_chaos.cli.main import main
from elastic_chaos.errors import SpecError
from elastic_chaos.faults.network import Bandwidth, FlappingLink, Latency, PacketLoss
from elastic_chaos.hypotheses.network import degradation_of
from elastic_chaos.spec import PgBackend, job_from_options


def timeouts(backend: PgBackend = PgBackend.GLOO, **values: object) -> JobTimeouts:
    job = job_from_options(dict(values))
    return job_timeouts(job, backend, Origin(frozenset(values), values.get("rdzv_preset")))  # type: ignore[arg-type]


def not_ok(findings: list) -> list:  # type: ignore[type-arg]
    return [f for f in findings if f.level is not Level.OK]


def test_torchs_defaults_and_the_fast_preset_are_ordered_for_a_degraded_link():
    for t in (timeouts(), timeouts(PgBackend.NCCL, rdzv_preset="fast")):
        assert not_ok(order(t)) == []


def test_a_collective_timeout_shorter_than_the_keep_alive_expiry_is_named():
    (warn,) = not_ok(order(timeouts(pg_timeout_s=5.0)))
    assert warn.level is Level.WARN
    assert "collective timeout 5 s" in warn.text and "keep-alive expiry 15 s (5 s x 3)" in warn.text
    assert "restarted" in warn.text and "taken for a dead node" in warn.text


def test_a_single_keep_alive_attempt_drops_a_live_node_on_any_delay():
    (warn,) = not_ok(order(timeouts(keep_alive_max_attempt=1)))
    assert "keep_alive_max_attempt 1" in warn.text and "drops a live node" in warn.text


def test_a_keep_alive_outlasting_the_store_timeout_ends_the_agent_first():
    (warn,) = not_ok(order(timeouts(keep_alive_interval=30, keep_alive_max_attempt=4, pg_timeout_s=600.0)))
    assert "store timeout 60 s" in warn.text and "stops its workers and exits" in warn.text


def test_the_ordering_is_shortest_first_and_names_nccls_timeouts_on_nccl_only():
    rows = ordering(timeouts(PgBackend.NCCL, rdzv_preset="fast"))
    assert [s for _, s in rows] == sorted(s for _, s in rows)
    assert {"NCCL dump wait", "NCCL heartbeat"} <= {n for n, _ in rows}
    assert not any(n.startswith("NCCL") for n, _ in ordering(timeouts()))


def test_tcp_resends_on_a_doubling_timer_from_200_ms():
    assert resend_stall_s(1) == pytest.approx(0.2) and resend_stall_s(4) == pytest.approx(3.0)
    assert losses_to_stall(10.0) == 6 and losses_to_stall(60.0) == 9


def test_a_flap_longer_than_the_collective_timeout_fails_and_a_short_one_is_a_stall():
    t = timeouts(rdzv_preset="fast")                                 # collective 10 s
    (fail,) = against(t, Degradation(down_s=12.0))
    assert fail.level is Level.FAIL and "down 12 s" in fail.text and "collective timeout (10 s)" in fail.text
    (ok,) = against(t, Degradation(down_s=3.0))
    assert ok.level is Level.OK and "up to 6.2 s" in ok.text
    (tight,) = against(t, Degradation(down_s=6.0))                  # TCP may come back up to 12.2 s later
    assert tight.level is Level.WARN


def test_the_store_link_down_past_the_keep_alive_drops_a_live_node():
    (fail,) = against(timeouts(), Degradation(down_s=12.0, to_store=True))
    assert fail.level is Level.FAIL and "keep-alive's tolerance (10 s)" in fail.text and "dropped" in fail.text


def test_loss_to_the_store_under_the_fast_preset_is_expected_to_drop_a_live_node():
    (fail,) = against(timeouts(rdzv_preset="fast"), Degradation(rate=0.05, to_store=True))
    assert fail.level is Level.FAIL and "4 losses in a row" in fail.text and "9e-05" in fail.text
    (ok,) = against(timeouts(), Degradation(rate=0.05))
    assert ok.level is Level.OK and "9 losses in a row" in ok.text


def test_a_round_trip_past_the_collective_timeout_fails_every_collective():
    (fail,) = against(timeouts(pg_timeout_s=1.0), Degradation(delay_ms=600.0))
    assert fail.level is Level.FAIL and "1.2 s at 600 ms each way" in fail.text
    (ok,) = against(timeouts(), Degradation(delay_ms=20.0))
    assert ok.level is Level.OK


def test_to_store_without_a_degradation_is_a_usage_error():
    with pytest.raises(SpecError, match="give the degradation"):
        Degradation(to_store=True)


def test_the_verdict_line_fails_only_on_a_failing_finding():
    t = timeouts(pg_timeout_s=5.0)
    ok, line = verdict_line(order(t))
    assert ok and line.startswith("warn: misordered")
    ok, line = verdict_line([*order(t), *against(t, Degradation(down_s=6.0))])
    assert not ok and "FAIL: the link between ranks down 6 s" in line


def test_each_link_fault_is_read_as_the_degradation_it_applies():
    assert degradation_of(Latency(delay_ms=20.0, jitter_ms=5.0, to_store=True)) == \
        Degradation(delay_ms=25.0, to_store=True)
    assert degradation_of(PacketLoss(rate=0.01)) == Degradation(rate=0.01)
    assert degradation_of(FlappingLink(down_s=3.0)) == Degradation(down_s=3.0)
    assert not degradation_of(Bandwidth(mbit=1.0)).given()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["timeouts", *argv])
    return code, capsys.readouterr().out


def test_the_command_prints_the_link_ordering_and_keeps_exit_0_for_a_sound_job(capsys):
    code, out = run(capsys, "--rdzv-preset", "fast", "--backend", "gloo")
    assert code == 0
    assert "What a degraded link meets, shortest first:" in out and "keep-alive expiry 4 s" in out
    assert "a degraded link, never a dead node:" in out and "FAIL" not in out


def test_the_command_exits_1_for_a_degradation_past_a_timeout(capsys):
    code, out = run(capsys, "--rdzv-preset", "fast", "--backend", "gloo", "--down", "12")
    assert code == 1 and "down 12 s is not inside the collective timeout (10 s)" in out


def test_the_command_exits_2_for_to_store_alone(capsys):
    assert main(["timeouts", "--to-store"]) == 2
    assert "give the degradation" in capsys.readouterr().err


def test_a_link_run_records_the_same_lines_as_its_timeouts_ordered_check():
    from types import SimpleNamespace

    from elastic_chaos.analysis.link_order import describe
    from elastic_chaos.analysis.verdict import Verdict
    from elastic_chaos.hypotheses.network import _check_order

    job = job_from_options({"rdzv_preset": "fast"})
    run = SimpleNamespace(timeline=SimpleNamespace(events=lambda: []))   # no worker said its backend: gloo
    trial = SimpleNamespace(job=job, verdict=Verdict(), run=run)
    _check_order(trial, PacketLoss(rate=0.05, to_store=True))  # type: ignore[arg-type]
    (check,) = trial.verdict.checks
    expected = describe(job_timeouts(job, PgBackend.GLOO, Origin()), Degradation(rate=0.05, to_store=True))
    assert check.name == "timeouts-ordered" and check.ok is False
    assert all(f.text in check.reason for f in expected)
    trial = SimpleNamespace(job=job, verdict=Verdict(), run=run)
    _check_order(trial, FlappingLink(down_s=3.0))  # type: ignore[arg-type]
    assert trial.verdict.checks[0].ok is True
