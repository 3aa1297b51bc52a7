"""``elastic-chaos watch``: a read-only live view of a job's rendezvous, recorded as a timeline.

A real etcd on 127.0.0.1 holds the rendezvous key; the states written to it
are torch's own ``_RendezvousState`` objects, pickled and base64-encoded the
way torch's etcd backend stores them, so the watch decodes exactly what a
real job would leave there. The writes replay a node loss as torch 2.13
performs it (the survivor re-rendezvouses, the dead node expires, a smaller
round forms and closes).
"""
from __future__ import annotations

import json
import signal
import subprocess
import threading
import urllib.parse
import urllib.request

import pytest
from rdzv_values import replay_node_loss
from watch_cli import cli, wait_until_watching

from elastic_chaos.events import FaultEv, RdzvEv, RunnerEv, Source, of, read_events
from elastic_chaos.host.etcd import EtcdServer, free_port

RUN_ID = "watched-job"


@pytest.fixture
def etcd(tmp_path):
    with EtcdServer(tmp_path / "etcd-data") as server:
        yield server


def put(etcd: EtcdServer, value: str) -> None:
    data = urllib.parse.urlencode({"value": value}).encode()
    req = urllib.request.Request(f"{etcd.url}/v2/keys/torch/elastic/rendezvous/{RUN_ID}", data=data, method="PUT")
    urllib.request.urlopen(req, timeout=5).read()


def etcd_index(etcd: EtcdServer) -> int:
    with urllib.request.urlopen(f"{etcd.url}/v2/keys/", timeout=5) as resp:
        return int(resp.headers["X-Etcd-Index"])


def writes_since(etcd: EtcdServer, index: int) -> list[tuple[str, str]]:
    """(action, key) of every change to etcd's key space after ``index`` (from etcd's own history)."""
    out = []
    while True:
        url = f"{etcd.url}/v2/keys/?recursive=true&wait=true&waitIndex={index + 1}"
        try:
            with urllib.request.urlopen(url, timeout=1.0) as resp:
                body = json.load(resp)
        except OSError:  # the long poll timed out: no further change
            return out
        out.append((body["action"], body["node"]["key"]))
        index = body["node"]["modifiedIndex"]


def test_watch_records_rounds_and_an_observed_loss_without_writing_to_etcd(etcd, tmp_path):
    before = etcd_index(etcd)
    ready = threading.Event()
    writer = replay_node_loss(lambda value: put(etcd, value), ready)
    record = tmp_path / "rec"
    proc = subprocess.Popen(cli("watch", "--etcd", etcd.endpoint, "--run-id", RUN_ID, "--record", str(record),
                                "--duration", "6"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        wait_until_watching(record)
        ready.set()
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    writer.join(10)
    out = subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)
    assert out.returncode == 0, out.stdout + out.stderr
    key = f"/torch/elastic/rendezvous/{RUN_ID}"
    assert writes_since(etcd, before) == [("set", key)] * 4, "the watch must only read: 4 writes are the test's"
    assert "\x1b" not in out.stderr and "\r" not in out.stderr   # not a TTY: plain lines only
    assert "round 0 COMPLETE: world of 2 node(s)" in out.stderr
    assert "round 1 forming: participants ['10.0.0.1_101_0']" in out.stderr
    assert "LOST 10.0.0.1_202_0: not in the next complete round (timed by its last heartbeat" in out.stderr
    assert "round 1 COMPLETE: world of 1 node(s)" in out.stderr

    events = list(read_events(record / "timeline.jsonl"))
    assert len(of(events, RdzvEv.ROUND_COMPLETE)) == 2
    (observed,) = of(events, Source.FAULT)
    assert observed.type == FaultEv.OBSERVED and observed.node == "10.0.0.1_202_0"
    states = of(events, RdzvEv.STATE)
    assert observed.t == pytest.approx(states[1].data.heartbeats["10.0.0.1_202_0"], abs=0.01)
    assert events[-1].type == RunnerEv.PHASE and events[-1].data.phase == "finished"

    report = json.loads((record / "report.json").read_text())
    assert report["scenario"] == "watch" and report["platform"] == "etcd"
    assert report["verdict"]["passed"] is True
    (fault,) = report["faults"]
    assert fault["kind"] == "node-lost" and fault["observed"] is True
    assert 1.0 < fault["metrics"]["rendezvous_s"] < 5.0          # round 1 completed ~1.6 s after the heartbeat
    assert (record / "report.html").exists() and f"report: {(record / 'report.html').resolve()}" in out.stdout


def test_ctrl_c_stops_the_watch_cleanly_and_keeps_the_recording(etcd, tmp_path):
    record = tmp_path / "rec"
    # Ctrl-C at a terminal: a suite started in the background (`.ci/run &`) inherits
    # SIGINT ignored, which Python then keeps; give the watch a terminal's disposition
    proc = subprocess.Popen(cli("watch", "--etcd", etcd.endpoint, "--run-id", RUN_ID, "--record", str(record)),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    with proc:  # closes the pipes whatever happens
        try:
            wait_until_watching(record)
            proc.send_signal(signal.SIGINT)
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == 0, stderr
    assert "Traceback" not in stderr
    assert "phase: finished (interrupted=True)" in stderr
    assert "no loss observed while watching" in stdout
    assert (record / "report.json").exists()


def test_an_unreachable_etcd_is_a_setup_error(tmp_path):
    out = subprocess.run(cli("watch", "--etcd", f"127.0.0.1:{free_port()}", "--run-id", "x", "--duration", "1"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "cannot reach etcd" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--etcd", "no-port", "--run-id", "x"), "is not HOST:PORT"),
    (("--run-id", "x"), "watch needs --etcd HOST:PORT and --run-id ID"),
    (("--etcd", "127.0.0.1:2379", "--run-id", "x", "--duration", "0"), "argument --duration: 0: must be a finite "
                                                                       "number > 0"),
    (("--etcd", "127.0.0.1:2379", "--run-id", "x", "--duration", "1e12"), "<= 604800"),
])
def test_bad_watch_options_are_usage_errors(args, message):
    out = subprocess.run(cli("watch", *args), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_the_live_view_keeps_a_status_line_on_a_tty(etcd, monkeypatch):
    import io

    monkeypatch.setenv("COLUMNS", "200")   # the status line is cut at the terminal's width (xdist workers: 80)

    from elastic_chaos.cli.watching import WatchOptions, watch

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    stream = Tty()
    ready = threading.Event()
    writer = replay_node_loss(lambda value: put(etcd, value), ready)
    threading.Timer(1.0, ready.set).start()
    watch(WatchOptions(etcd=etcd.endpoint, run_id=RUN_ID, duration_s=4.5), stream=stream)
    writer.join(10)
    text = stream.getvalue()
    assert "\r\x1b[K" in text                                    # the status line is redrawn in place
    assert f"{RUN_ID} round 1 complete | 1 participant(s), 0 waiting | world size 1" in text
