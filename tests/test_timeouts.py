"""`elastic-chaos timeouts`: every timeout a failure meets, in order, and the orderings that cannot work."""
from __future__ import annotations

import pytest

from elastic_chaos.analysis.timeouts import Level, Origin, Surroundings, check, hierarchy, job_backend
from elastic_chaos.cli.main import main
from elastic_chaos.events import Event, ProgressEv
from elastic_chaos.events.progress_events import Start
from elastic_chaos.faults.spot import AWS_NOTICE_S
from elastic_chaos.spec import JobSpec, PgBackend, job_from_options


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["timeouts", *argv])
    return code, capsys.readouterr().out


def test_the_fast_preset_on_nccl_lists_the_hierarchy_in_order_and_passes(capsys):
    code, out = run(capsys, "--rdzv-preset", "fast", "--backend", "nccl")
    assert code == 0
    order = ["collective timeout", "NCCL dump wait", "NCCL heartbeat", "keep-alive expiry", "last call",
             "agent shutdown wait", "pod grace period", "spot notice"]
    positions = [out.index(f". {name}") for name in order]
    assert positions == sorted(positions)
    assert "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=1000 (preset fast)" in out and "FAIL" not in out


def test_gloos_half_hour_collective_timeout_is_a_partition_stall(capsys):
    code, out = run(capsys, "--backend", "gloo", "--pg-timeout", "1800")
    assert code == 1
    (fail,) = [line for line in out.splitlines() if line.strip().startswith("FAIL")]
    assert "partition" in fail and "stalls the survivors for 30 min" in fail and "gloo's own default" in fail
    assert "NCCL" not in out.split("checks:")[0]                  # no NCCL timeout on gloo


def test_a_script_on_gloo_meets_torchs_default_unless_it_says(capsys):
    code, out = run(capsys, "--own-script", "--backend", "gloo")
    assert code == 1 and "torch's gloo default" in out
    assert run(capsys, "--own-script", "--backend", "gloo", "--pg-timeout", "30")[0] == 0


def test_a_dump_wait_longer_than_the_spot_notice_leaves_no_time_to_checkpoint(capsys):
    code, out = run(capsys, "--backend", "nccl", "--nccl-dump-wait-ms", "180000")
    assert code == 1 and "no time to checkpoint" in out and "dump wait (180 s)" in out


def test_torchs_nccl_defaults_leave_a_tight_margin_in_a_spot_wave():
    job = JobSpec(backend=PgBackend.NCCL)
    (wave,) = [f for f in check(job, PgBackend.NCCL, Surroundings(), Origin()) if "spot notice" in f.text]
    assert wave.level is Level.WARN and "60 s dump wait + 15 s keep-alive + 30 s last call = 105 s" in wave.text


def test_async_error_handling_off_cannot_work():
    job = job_from_options({"backend": "nccl", "nccl_async_error_handling": 0})
    findings = check(job, PgBackend.NCCL, Surroundings(), Origin())
    assert any(f.level is Level.FAIL and "never ends its worker" in f.text for f in findings)


def test_a_longer_grace_period_lets_the_agent_stop_its_workers(capsys):
    code, out = run(capsys, "--termination-grace", "60")
    assert code == 0 and "warn" not in out.split("checks:")[1]


def test_the_default_spot_notice_is_awss():
    assert Surroundings().spot_notice_s == AWS_NOTICE_S


def test_the_values_say_where_they_come_from():
    job = job_from_options({"rdzv_preset": "fast", "pg_timeout_s": 20.0, "backend": "nccl"})
    rows = {t.name: t for t in hierarchy(job, PgBackend.NCCL, Surroundings(),
                                         Origin(frozenset({"pg_timeout_s"}), "fast"))}
    assert rows["collective timeout"].seconds == 20.0 and "(as set)" in rows["collective timeout"].setting
    assert "(preset fast)" in rows["last call"].setting and rows["keep-alive expiry"].seconds == 4.0


def test_without_a_gpu_the_reference_trainers_auto_backend_is_gloo(capsys):
    code, out = run(capsys)
    assert code == 0 and "process group gloo (auto:" in out


def _start(backend: str | None, node: str = "n0") -> Event:
    return Event(t=1.0, type=ProgressEv.START, node=node, data=Start(rank=0, backend=backend))


def test_the_backend_a_link_verdict_orders_timeouts_for_is_the_one_the_workers_used():
    # before: a job left at the reference trainer's `--backend auto` was ordered as gloo on a GPU machine
    job = JobSpec()
    assert job_backend(job, [_start("nccl"), _start("nccl", "n1")]) == (PgBackend.NCCL, "as its workers said")
    assert job_backend(job, [_start("gloo")]) == (PgBackend.GLOO, "as its workers said")
    # an old trainer's "auto", or a script that says nothing: the job's --backend, else gloo, said assumed
    assert job_backend(job, [_start("auto")]) == (PgBackend.GLOO, "assumed: the job did not say")
    assert job_backend(JobSpec(backend=PgBackend.NCCL), []) == (PgBackend.NCCL, "the job's --backend")
    # workers that disagree say nothing certain: not taken
    assert job_backend(job, [_start("gloo"), _start("nccl", "n1")])[1] != "as its workers said"

