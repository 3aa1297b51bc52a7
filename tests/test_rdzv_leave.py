"""elastic_chaos.trainer.rdzv_leave: a node's agent leaves the rendezvous on SIGTERM (a real 2-node job), and a torch
without the internals it relies on is refused."""
from __future__ import annotations

import subprocess
import sys

import pytest

from elastic_chaos.faults import SpotInterruption
from elastic_chaos.platforms.local.platform import LocalOptions, NetworkMode
from elastic_chaos.runner.run import ChaosRun
from elastic_chaos.spec import JobSpec, RdzvBackend, RendezvousSpec
from elastic_chaos.trainer import rdzv_leave

KEEP_ALIVE_S, ATTEMPTS = 2, 10
"""A keep-alive expiry long enough (20 s) to tell leaving from expiring whatever the load."""


@pytest.mark.slow
@pytest.mark.parametrize("backend", [RdzvBackend.ETCD_V2, RdzvBackend.C10D])
def test_after_sigterm_the_survivor_re_forms_before_the_keep_alive_could_expire(tmp_path, backend):
    rdzv = RendezvousSpec(backend=backend, keep_alive_interval=KEEP_ALIVE_S, keep_alive_max_attempt=ATTEMPTS,
                          last_call_timeout=1)
    job = JobSpec(nodes="1:2", checkpoint_every=20, step_time=0.1, max_restarts=10, rdzv=rdzv,
                  leave_on_sigterm=True)
    with ChaosRun(tmp_path / "run", scenario="leave on sigterm", options=LocalOptions(
            replace_lost_nodes=False, network=NetworkMode.HOST)) as run:
        run.start(job)
        run.wait_for_step(15, timeout=180)
        fault = run.inject(SpotInterruption(rebalance_lead_s=None, notice_s=0.0, grace_s=30.0))
        rec = run.wait_for_recovery(fault, timeout=120)
        departed = (run.report_dir / "nodes" / f"{fault.target}.log").read_text()
    assert f"{rdzv_leave.PREFIX} left the rendezvous" in departed
    # torch heartbeats at most every 2 intervals, so without leaving, the departed node's heartbeat could
    # not be older than (ATTEMPTS - 2) x KEEP_ALIVE_S before the survivor formed its round
    least_expiry_s = (ATTEMPTS - 2) * KEEP_ALIVE_S
    assert rec.rendezvous_s is not None and rec.rendezvous_s < least_expiry_s, rec.phases


LEAVING = JobSpec(nodes="1:2", run_id="chaos-leave", leave_on_sigterm=True)


def test_the_option_runs_every_platforms_agent_through_the_remedy(tmp_path):
    from elastic_chaos.platforms.kubernetes import jobs
    from elastic_chaos.platforms.kubernetes import manifests as m
    from elastic_chaos.platforms.local.agent import agent_command

    c10d = RendezvousSpec(backend=RdzvBackend.C10D)
    leaving, plain = JobSpec(nodes="1:2", rdzv=c10d, leave_on_sigterm=True), JobSpec(nodes="1:2", rdzv=c10d)

    def local(job: JobSpec) -> list[str]:
        return agent_command(job, python="python", endpoint="127.0.0.1:29400", address="127.0.0.1",
                             store_host=True, script=(), checkpoint_dir=tmp_path, log_dir=tmp_path / "agent")

    assert local(leaving)[1:3] == ["-m", "elastic_chaos.trainer.rdzv_leave"]
    assert local(plain)[1:3] == ["-m", "torch.distributed.run"]
    for doc in (m.elasticjob(LEAVING, m.kind_settings()), m.pytorchjob(LEAVING, m.kind_settings())):
        (container,) = doc["spec"][next(k for k in doc["spec"] if k.endswith("eplicaSpecs"))]["Worker"]["template"][
            "spec"]["containers"]
        assert container["command"] == ["python", "-m", "elastic_chaos.trainer.rdzv_leave"]
    docs = jobs.job_manifests(LEAVING, m.KubeSettings(dns=False, etcd_shell=True), etcd_address="10.0.0.1")
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    args = sts["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:3] == ["python3", "-m", "elastic_chaos.trainer.rdzv_leave"]


def test_the_option_is_off_by_default_and_on_the_command_line():
    from elastic_chaos.options import declared

    (d,) = [d for d in declared(JobSpec) if d.name == "leave_on_sigterm"]
    assert d.default is False and d.flag == "--leave-on-sigterm" and "keep-alive" in d.meta.help


def test_a_torch_without_the_exit_operation_is_refused(monkeypatch, capsys):
    """Simulated: the installed torch has the internals; the test deletes one (monkeypatch)."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    monkeypatch.delattr(dynamic_rendezvous, "_RendezvousExitOp")
    with pytest.raises(SystemExit) as exited:
        rdzv_leave.main(["--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:1",
                         "-m", "elastic_chaos.trainer.train"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "_RendezvousExitOp" in err and "without --leave-on-sigterm" in err


def test_a_handler_missing_its_op_executor_is_refused(monkeypatch):
    """Simulated: the annotation that declares the attribute is deleted (monkeypatch)."""
    from torch.distributed.elastic.rendezvous import dynamic_rendezvous

    annotations = dict(dynamic_rendezvous.DynamicRendezvousHandler.__annotations__)
    del annotations["_op_executor"]
    monkeypatch.setattr(dynamic_rendezvous.DynamicRendezvousHandler, "__annotations__", annotations)
    with pytest.raises(rdzv_leave.MissingInternals, match=r"DynamicRendezvousHandler\._op_executor"):
        rdzv_leave.check()


def test_the_installed_torch_has_every_internal():
    rdzv_leave.check()


def test_a_backend_without_the_dynamic_rendezvous_is_refused():
    out = subprocess.run([sys.executable, "-m", "elastic_chaos.trainer.rdzv_leave", "--nnodes", "1",
                          "--rdzv-backend", "static",
                          "-m", "elastic_chaos.trainer.train"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "--rdzv-backend static: only the dynamic rendezvous" in out.stderr


def test_leaving_is_not_installed_twice():
    from torch.distributed.elastic.agent.server.api import SimpleElasticAgent

    original = SimpleElasticAgent.run
    try:
        rdzv_leave.install()
        once = SimpleElasticAgent.run
        rdzv_leave.install()
        assert SimpleElasticAgent.run is once and once is not original
    finally:
        SimpleElasticAgent.run = original  # type: ignore[method-assign]
