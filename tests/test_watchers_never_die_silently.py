"""Watchers never die silently (issue 15, finding 4).

Measured at 7e9326a: a rendezvous state made only of allowed classes but with wrong
types (``participants = 5``, ``round = inf``) raised AttributeError/OverflowError out of
``decode``; the watcher thread died, the node loss written next was missed, and
``elastic-chaos watch`` said "ok: no loss observed" with exit code 0, with ``--record``
too. Now ``decode`` raises only UndecodableState (a ValueError), an undecodable value is
an event and the watch goes on, and a watcher that dies fails the run: a ChaosRun's
waits end at once and its verdict names the error; ``watch`` ends, exit code 1.
"""
from __future__ import annotations

import base64
import copyreg
import datetime
import json
import pickle
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import etcd as etcd_lib
import pytest
from hypothesis import HealthCheck, event, given, reject, settings
from hypothesis import strategies as st
from rdzv_values import malformed_state, replay_node_loss
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import _NodeDesc, _RendezvousState
from watch_cli import cli, wait_until_watching

from elastic_chaos.errors import UndecodableState, WatcherDied
from elastic_chaos.events import Timeline, payload_json
from elastic_chaos.host.etcd import EtcdServer
from elastic_chaos.runner.run import ChaosRun
from elastic_chaos.watchers.api import Watcher
from elastic_chaos.watchers.rdzv_state import decode
from elastic_chaos.watchers.rendezvous import KEY_PREFIX, RendezvousWatcher, describe

RUN_ID = "malformed"
CAPTURED = Path(__file__).parent / "fixtures" / "rdzv_state_torch-2.13_2nodes.b64"


@pytest.fixture
def etcd(tmp_path: Path):
    """A real etcd with the v2 API on 127.0.0.1, stopped by PID."""
    with EtcdServer(tmp_path / "etcd-data") as server:
        yield server


# -- decode: only its documented exception -------------------------------------------

def test_a_state_whose_participants_are_a_number_is_undecodable():
    with pytest.raises(ValueError, match="participants is int 5, not a mapping"):
        decode(malformed_state(participants=5))


def test_a_state_whose_round_is_infinite_is_undecodable():
    with pytest.raises(ValueError, match="round is float inf, not a 64-bit integer"):
        decode(malformed_state(round=float("inf")))


class Shadow:
    """Pickles as torch's class ``cls`` whose ``__dict__`` is ``state``, whatever the state
    holds (a real _NodeDesc hashes its fields, so it could not hold a list): the pickle a
    writer of arbitrary field values makes. ``newobj``: NEWOBJ as torch's own pickles do,
    else ``copyreg._reconstructor``."""

    def __init__(self, cls: type, state: dict[Any, Any], newobj: bool) -> None:
        self._cls, self._state, self._newobj = cls, state, newobj

    @property  # type: ignore[misc]
    def __class__(self) -> type:  # noqa: D105 - pickle's NEWOBJ asks the object's class
        return self._cls

    def __reduce_ex__(self, protocol: Any) -> Any:
        if protocol >= 2 and self._newobj:
            return (copyreg.__newobj__, (self._cls,), self._state)
        return (copyreg._reconstructor, (self._cls, object, None), self._state)


OFFSETS = st.timedeltas(min_value=-datetime.timedelta(hours=23, minutes=59),
                        max_value=datetime.timedelta(hours=23, minutes=59))
TIMEZONES = st.builds(datetime.timezone, OFFSETS)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.sampled_from([2 ** 63, -(2 ** 63) - 1]),
    st.builds(lambda digits: 10 ** digits, st.integers(4300, 5000)),   # str() of it raises ValueError
    st.floats(), st.text(max_size=12), st.binary(max_size=12),
    st.datetimes(timezones=st.none() | TIMEZONES), st.timedeltas(), TIMEZONES)
NODES = st.builds(lambda fields, newobj: Shadow(_NodeDesc, fields, newobj),
                  st.fixed_dictionaries({}, optional={"addr": SCALARS, "pid": SCALARS, "local_id": SCALARS}),
                  st.booleans())
KEYS = SCALARS | NODES
VALUES = st.recursive(SCALARS | NODES, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.tuples(inner, inner), st.sets(KEYS, max_size=3),
    st.frozensets(KEYS, max_size=3), st.dictionaries(KEYS, inner, max_size=3)), max_leaves=8)
FIELD_VALUES = VALUES | st.dictionaries(NODES, VALUES, max_size=3) | st.sets(NODES, max_size=3)
FIELDS = ["round", "complete", "deadline", "closed", "participants", "wait_list", "redundancy_list",
          "last_heartbeats"]
ANY_STATES = st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=4), FIELD_VALUES, max_size=8)


def mostly(valid: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """What torch writes seven times in eight, anything else the eighth: one wrong field
    among right ones reaches the checks a wrong first field would hide."""
    return st.integers(0, 7).flatmap(lambda pick: FIELD_VALUES if pick == 7 else valid)


WHEN = st.datetimes(timezones=st.none() | TIMEZONES)
NEAR_NODES = st.builds(lambda fields, newobj: Shadow(_NodeDesc, fields, newobj),
                       st.fixed_dictionaries({"addr": mostly(st.text(max_size=12)),
                                              "pid": mostly(st.integers(0, 2 ** 31)),
                                              "local_id": mostly(st.integers(0, 8))}), st.booleans())
NEAR_STATES = st.fixed_dictionaries({
    "round": mostly(st.integers(0, 2 ** 40)), "complete": mostly(st.booleans()),
    "deadline": mostly(st.none() | WHEN), "closed": mostly(st.booleans()),
    "participants": mostly(st.dictionaries(NEAR_NODES, mostly(st.integers(0, 64)), max_size=3)),
    "wait_list": mostly(st.sets(NEAR_NODES, max_size=3)),
    "redundancy_list": mostly(st.sets(NEAR_NODES, max_size=3)),
    "last_heartbeats": mostly(st.dictionaries(NEAR_NODES, mostly(WHEN), max_size=3))})


def states(fields: st.SearchStrategy[dict[Any, Any]]) -> st.SearchStrategy[Shadow]:
    return st.builds(lambda d, newobj: Shadow(_RendezvousState, d, newobj), fields, st.booleans())


def decodes_to_readable_fields_or_is_undecodable(raw: Any) -> None:
    """``decode(raw)`` raises UndecodableState, or returns a state the watcher can read:
    described as it is for an event, and that written as strict JSON."""
    try:
        state = decode(raw)
    except UndecodableState as exc:
        event(f"{type(exc).__name__}: {str(exc).split(' is ')[0][:30]}")
        return
    event("decoded")
    json.dumps(payload_json(describe(state, {})), allow_nan=False)


def pickled(state: Shadow, protocol: int) -> bytes | None:
    """The state pickled as base64; None where Python will not pickle it (protocols 0
    and 1 write ints as decimal text, which Python caps at 4300 digits)."""
    try:   # fix_imports=False: protocols 0-2 name copyreg as it is, not as Python 2's copy_reg
        return base64.b64encode(pickle.dumps(state, protocol=protocol, fix_imports=False))
    except ValueError:
        return None


@st.composite
def real_state_changed(draw: st.DrawFn) -> bytes:
    """The state captured from a real run with a few bytes changed, then cut short."""
    blob = bytearray(base64.b64decode(CAPTURED.read_text().strip()))
    for _ in range(draw(st.integers(1, 4))):
        blob[draw(st.integers(0, len(blob) - 1))] = draw(st.integers(0, 255))
    return base64.b64encode(bytes(blob[:draw(st.integers(1, len(blob)))]))


INPUTS = st.one_of(
    st.builds(pickled, states(ANY_STATES), st.integers(0, pickle.HIGHEST_PROTOCOL)),
    st.builds(pickled, states(NEAR_STATES), st.integers(3, pickle.HIGHEST_PROTOCOL)),
    st.builds(lambda blob: base64.b64encode(blob).decode(), st.binary(max_size=200)),
    st.text(max_size=60), st.binary(max_size=60),
    real_state_changed())


@settings(max_examples=800, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(raw=INPUTS)
def test_decode_raises_nothing_but_undecodable_state_whatever_it_is_given(raw):
    """Pickles of the allowed classes with any field values (torch-like states with some
    fields wrong among them), base64 of any bytes, any text or bytes as they are, and a
    real state with bytes changed or cut: each decodes to a state the watcher can read,
    or raises UndecodableState."""
    if raw is None:
        reject()
    decodes_to_readable_fields_or_is_undecodable(raw)


# -- the watch: an undecodable value is an event, and the watch goes on -----------------

def test_the_probe_malformed_states_then_a_node_loss_is_observed_and_the_watch_passes(etcd, tmp_path):
    store = etcd_lib.Client(host="127.0.0.1", port=etcd.client_port)
    key = f"{KEY_PREFIX}/{RUN_ID}"
    ready = threading.Event()
    writer = replay_node_loss(lambda value: store.write(key, value), ready,
                              before=[malformed_state(participants=5), malformed_state(round=float("inf"))])
    record = tmp_path / "rec"
    proc = subprocess.Popen(cli("watch", "--etcd", etcd.endpoint, "--run-id", RUN_ID, "--record", str(record),
                                "--duration", "7"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with proc:
        try:
            wait_until_watching(record)
            ready.set()
            stdout, stderr = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    writer.join(10)
    assert "Traceback" not in stderr, stderr
    assert "rendezvous key undecodable: participants is int 5, not a mapping" in stderr
    assert "rendezvous key undecodable: round is float inf, not a 64-bit integer" in stderr
    assert "LOST 10.0.0.1_202_0: not in the next complete round" in stderr
    assert "ok: node-lost of 10.0.0.1_202_0: rendezvous re-formed" in stdout
    assert proc.returncode == 0, stdout + stderr
    report = json.loads((record / "report.json").read_text())
    assert report["verdict"]["passed"] is True and len(report["faults"]) == 1


# -- a watcher that dies fails the run ---------------------------------------------------

def _boom(self: Any) -> None:
    raise RuntimeError("boom: a bug in the watcher")


def test_a_dead_watcher_ends_the_watch_with_exit_code_1_naming_the_error(etcd, tmp_path, monkeypatch, capsys):
    from elastic_chaos.cli.main import main
    monkeypatch.setattr(RendezvousWatcher, "poll", _boom)
    record = tmp_path / "rec"
    began = time.monotonic()
    code = main(["watch", "--etcd", etcd.endpoint, "--run-id", RUN_ID, "--record", str(record),
                 "--duration", "30"])
    out = capsys.readouterr()
    assert code == 1, out.out + out.err
    assert time.monotonic() - began < 15, "a blind watch must end, not watch on until --duration"
    assert "FAILED: watcher: RendezvousWatcher died: RuntimeError: boom" in out.out
    report = json.loads((record / "report.json").read_text())
    assert report["verdict"]["passed"] is False
    assert any("RendezvousWatcher died: RuntimeError: boom" in r for r in report["verdict"]["reasons"])


class DyingWatcher(Watcher):
    """Dies on its second look, the way a watcher with a bug dies mid-run."""

    interval_s = 0.05

    def __init__(self, timeline: Timeline) -> None:
        super().__init__(timeline)
        self.looks = 0

    def poll(self) -> None:
        self.looks += 1
        if self.looks > 1:
            raise RuntimeError("boom: a bug in the watcher")


def test_a_dead_watcher_ends_a_runs_wait_at_once_naming_the_error(tmp_path):
    with ChaosRun(tmp_path / "run") as run:
        run.add_watcher(DyingWatcher(run.timeline))
        began = time.monotonic()
        with pytest.raises(WatcherDied, match="DyingWatcher died: RuntimeError: boom"):
            run.wait_for("a step that will never be seen", lambda e: False, timeout=30)
        assert time.monotonic() - began < 5


def test_a_dead_watcher_fails_the_runs_verdict_by_name(tmp_path):
    run = ChaosRun(tmp_path / "run")
    run.add_watcher(DyingWatcher(run.timeline))
    time.sleep(0.5)
    run.close()
    report = json.loads((run.report_dir / "report.json").read_text())
    assert report["verdict"]["passed"] is False
    (check,) = [c for c in report["verdict"]["checks"] if c["ok"] is False]
    assert check["name"] == "watcher" and "DyingWatcher died: RuntimeError: boom" in check["reason"]
