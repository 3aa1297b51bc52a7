"""elastic_chaos.trainer.rdzv_notice (--leave-on-notice): on the spot interruption notice the agent stops its
workers as SIGTERM does and leaves the rendezvous, before its termination, and then waits for it. The notice
comes from a real instance-metadata stand-in on 127.0.0.1 (elastic_chaos.platforms.local.imds); the slow
tests run real jobs."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from elastic_chaos.platforms.local.imds import MetadataStandIn
from elastic_chaos.spec import JobSpec
from elastic_chaos.trainer import rdzv_leave, rdzv_notice
from elastic_chaos.trainer.rdzv_notice import State, Stop
from elastic_chaos.trainer.spot_notice import ENDPOINT_VAR, Notice, SpotNoticeWatcher


class Raised(Exception):
    """What the stand-in for torch's handler raises (torch's raises SignalException)."""


def raising(signum: int, frame: object) -> None:
    raise Raised(signum)


@pytest.fixture
def imds() -> Iterator[MetadataStandIn]:
    server = MetadataStandIn("node-0").start()
    yield server
    server.close()


@pytest.fixture
def sigterm_restored() -> Iterator[None]:
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_the_interruption_notice_raises_torchs_signal_exception_in_the_main_thread(imds, sigterm_restored):
    """The agent's path, without a job: torch's own handler (registered as torch registers it, behind the
    guard), the watcher polling the stand-in, the notice; the main thread is asleep as the agent's monitor
    loop is."""
    from torch.distributed.elastic.multiprocessing.api import SignalException, _terminate_process_handler

    state = State()
    signal.signal(signal.SIGTERM, rdzv_notice.guarded(_terminate_process_handler, state))
    watcher = rdzv_notice.watch(state, imds.endpoint, threading.main_thread().ident or 0)
    try:
        imds.announce_interruption(time.time() + 30)
        with pytest.raises(SignalException) as raised:
            for _ in range(100):     # bounded: 10 s; the notice is seen within one 0.5 s poll
                time.sleep(0.1)
    finally:
        watcher.stop()
    assert raised.value.sigval == signal.SIGTERM
    assert state.stopped_by is Stop.NOTICE and state.notice is not None and state.notice.kind == "interruption"


def test_a_rebalance_recommendation_alone_does_not_stop_the_agent(imds, sigterm_restored, capsys):
    state = State()
    signal.signal(signal.SIGTERM, rdzv_notice.guarded(raising, state))
    watcher = rdzv_notice.watch(state, imds.endpoint, threading.main_thread().ident or 0)
    try:
        imds.recommend_rebalance(time.time())
        for _ in range(100):         # bounded: until the agent said it saw the recommendation
            if "rebalance notice seen" in capsys.readouterr().err:
                break
            time.sleep(0.1)
        else:
            pytest.fail("the rebalance recommendation was never seen")
    finally:
        watcher.stop()
    assert state.stopped_by is None and state.sent == 0


def test_a_signal_that_comes_while_the_agent_stops_on_the_notice_is_held_not_raised():
    state = State(stopped_by=Stop.NOTICE)
    rdzv_notice.guarded(raising, state)(signal.SIGTERM, None)
    assert state.held == [signal.SIGTERM]


def test_a_real_sigterm_first_is_torchs_and_the_notice_then_sends_nothing(capsys):
    state = State()
    handle = rdzv_notice.guarded(raising, state)
    with pytest.raises(Raised):
        handle(signal.SIGTERM, None)
    assert state.stopped_by is Stop.SIGNAL
    rdzv_notice.on_notice(state, threading.main_thread().ident or 0)(_notice(time.time() + 5))
    assert state.sent == 0
    assert "already stops the agent: it leaves as on SIGTERM" in capsys.readouterr().err


def test_before_torch_handles_sigterm_the_notice_sends_nothing_that_would_kill_the_agent(sigterm_restored, capsys):
    """Before the first workers start torch has no handler: SIGTERM would end the agent at once, unsaved."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    state = State()
    past = time.time() - rdzv_notice.MARGIN_S - 5     # its deadline has passed: no wait for the handler
    rdzv_notice.on_notice(state, threading.main_thread().ident or 0)(_notice(past, seen_at=past))
    assert state.sent == 0 and state.stopped_by is None
    assert "torch's signal handler never came" in capsys.readouterr().err


def test_the_notices_own_sigterm_after_a_real_one_is_not_raised_again():
    """torch is already stopping the workers on the real one: a second SignalException would cut it short."""
    state = State(stopped_by=Stop.SIGNAL, sent=1)
    rdzv_notice.guarded(raising, state)(signal.SIGTERM, None)
    assert state.sent == 0 and state.held == []


def test_without_a_metadata_endpoint_it_says_once_that_it_leaves_on_sigterm_only(monkeypatch, capsys):
    silent = _closed_port()
    monkeypatch.delenv(ENDPOINT_VAR, raising=False)
    watcher = SpotNoticeWatcher(f"http://127.0.0.1:{silent}", timeout_s=0.5)
    assert rdzv_notice.begin(watcher, configured=False) is False
    err = capsys.readouterr().err
    assert err.count(rdzv_leave.PREFIX) == 1
    assert "leaves on SIGTERM only, as --leave-on-sigterm" in err


def test_it_waits_for_the_termination_the_notice_names_plus_a_margin():
    notice = _notice(1_800_000_000.0, seen_at=1_800_000_000.0 - 120)
    assert rdzv_notice.wait_deadline(notice) == 1_800_000_000.0 + rdzv_notice.MARGIN_S


def test_it_never_waits_longer_than_its_cap_after_the_notice():
    seen = 1_800_000_000.0
    far = _notice(seen + 86_400, seen_at=seen)
    unreadable = Notice("interruption", seen, {"action": "terminate", "time": "soon"})
    assert rdzv_notice.wait_deadline(far) == seen + rdzv_notice.MAX_WAIT_S
    assert rdzv_notice.wait_deadline(unreadable) == seen + rdzv_notice.MAX_WAIT_S


def test_the_option_runs_the_agent_through_the_notice_remedy():
    from elastic_chaos.options import declared

    (d,) = [d for d in declared(JobSpec) if d.name == "leave_on_notice"]
    assert d.default is False and d.flag == "--leave-on-notice" and "Implies --leave-on-sigterm" in d.meta.help
    job = JobSpec(nodes="1:2", leave_on_notice=True)
    assert job.launcher == ("-m", "elastic_chaos.trainer.rdzv_notice")
    assert JobSpec(nodes="1:2", leave_on_notice=True, leave_on_sigterm=True).launcher == job.launcher


def test_every_platforms_agent_runs_through_the_notice_remedy(tmp_path):
    from elastic_chaos.platforms.kubernetes import jobs
    from elastic_chaos.platforms.kubernetes import manifests as m
    from elastic_chaos.platforms.local.agent import agent_command

    job = JobSpec(nodes="1:2", run_id="chaos-notice", leave_on_notice=True)
    local = agent_command(job, python="python", endpoint="127.0.0.1:29400", address="127.0.0.1", store_host=True,
                          script=(), checkpoint_dir=tmp_path, log_dir=tmp_path / "agent")
    assert local[1:3] == ["-m", "elastic_chaos.trainer.rdzv_notice"]
    for doc in (m.elasticjob(job, m.kind_settings()), m.pytorchjob(job, m.kind_settings())):
        (container,) = doc["spec"][next(k for k in doc["spec"] if k.endswith("eplicaSpecs"))]["Worker"]["template"][
            "spec"]["containers"]
        assert container["command"] == ["python", "-m", "elastic_chaos.trainer.rdzv_notice"]
    docs = jobs.job_manifests(job, m.KubeSettings(dns=False, etcd_shell=True), etcd_address="10.0.0.1",
                              env={ENDPOINT_VAR: "http://10.0.0.9:8081"})
    (sts,) = [d for d in docs if d["kind"] == "StatefulSet"]
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    assert container["args"][:3] == ["python3", "-m", "elastic_chaos.trainer.rdzv_notice"]
    assert {"name": ENDPOINT_VAR, "value": "http://10.0.0.9:8081"} in container["env"]   # where the agent looks


def test_a_backend_without_the_dynamic_rendezvous_is_refused():
    out = subprocess.run([sys.executable, "-m", "elastic_chaos.trainer.rdzv_notice", "--nnodes", "1",
                          "--rdzv-backend", "static", "-m", "elastic_chaos.trainer.train"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "--rdzv-backend static: only the dynamic rendezvous" in out.stderr


def test_a_torch_whose_workers_start_does_not_register_the_handler_by_name_is_refused(monkeypatch):
    """Simulated: torch's handler is deleted (monkeypatch)."""
    from torch.distributed.elastic.multiprocessing import api

    monkeypatch.delattr(api, "_terminate_process_handler")
    with pytest.raises(rdzv_leave.MissingInternals, match="_terminate_process_handler"):
        rdzv_notice.check()


def test_the_installed_torch_has_every_internal():
    rdzv_notice.check()


@pytest.mark.slow
def test_the_agent_leaves_on_the_notice_stays_until_the_termination_and_exits_as_torchrun(tmp_path, imds):
    """One real node (c10d on 127.0.0.1) of the reference trainer under the wrapper."""
    log = tmp_path / "agent.log"
    env = dict(os.environ, **{ENDPOINT_VAR: imds.endpoint}, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    with log.open("w") as out:
        agent = subprocess.Popen(
            [sys.executable, "-m", "elastic_chaos.trainer.rdzv_notice", "--nnodes", "1:2", "--rdzv-backend", "c10d",
             "--rdzv-endpoint", f"127.0.0.1:{_closed_port()}", "--rdzv-id", "notice", "--max-restarts", "0",
             "--log-dir", str(tmp_path / "torchelastic"),
             "-m", "elastic_chaos.trainer.train", "--checkpoint-dir", str(tmp_path / "ck"), "--step-time", "0.1",
             "--spot-notice", "off"], env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        _until(lambda: '"ev":"step"' in log.read_text(), 180, "the worker never stepped")
        imds.announce_interruption(time.time() + 10)
        _until(lambda: "left the rendezvous on the interruption notice" in log.read_text(), 30,
               "the agent did not leave on the notice")
        time.sleep(1.0)
        assert agent.poll() is None, "the agent exited before its termination"
        agent.send_signal(signal.SIGTERM)
        code = agent.wait(30)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
    text = log.read_text()
    assert code == 1    # torchrun's SignalException, as on SIGTERM
    assert '"reason": "sigterm"' in text or '"reason":"sigterm"' in text   # the trainer saved on the agent's SIGTERM
    assert "SIGTERM came" in text and "exiting as torchrun does on it" in text


@pytest.mark.slow
def test_a_spot_interruption_with_leave_on_notice_holds_and_the_survivor_re_forms_before_the_termination(
        run_hypothesis):
    """`elastic-chaos run spot-interruption --leave-on-notice --rdzv-preset fast --no-replace`: the verdict
    holds (run_hypothesis fails the test otherwise), and the survivor's round completed, and it trained
    again, before the departing node's SIGTERM."""
    run = run_hypothesis("spot-interruption", leave_on_notice=True, rdzv_preset="fast", replace_lost_nodes=False,
                         notice_s=20.0)
    (rec,) = run.recoveries()
    assert rec.notice_lead_s is not None and rec.notice_lead_s > 15.0, rec.notes
    assert rec.rendezvous_s is not None and rec.recovery_s is not None
    assert rec.rendezvous_s < rec.recovery_s < rec.notice_lead_s    # both before the SIGTERM
    assert rec.after_termination_s == 0.0 and rec.lost_steps == 0 and rec.restarts_before == 0
    departed = (run.report_dir / "nodes" / f"{rec.target}.log").read_text()
    assert f"{rdzv_leave.PREFIX} left the rendezvous on the interruption notice" in departed


def _notice(terminate_at: float, seen_at: float | None = None) -> Notice:
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(terminate_at))
    return Notice("interruption", time.time() if seen_at is None else seen_at,
                  {"action": "terminate", "time": stamp})


def _closed_port() -> int:
    """A loopback port nobody listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _until(cond: Callable[[], bool], timeout_s: float, why: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    pytest.fail(why)
