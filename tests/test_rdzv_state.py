"""The allow-list decoder of torch's rendezvous state: real states decode, anything else is refused."""
from __future__ import annotations

import base64
import os
import pickle
from pathlib import Path

import pytest

from elastic_chaos.errors import UnsafeUnpickle
from elastic_chaos.watchers.rdzv_state import NodeDesc, decode

CAPTURED = Path(__file__).parent / "fixtures" / "rdzv_state_torch-2.13_2nodes.b64"


def test_a_state_captured_from_a_real_run_decodes():
    # Captured from etcd (/torch/elastic/rendezvous/<run_id>) while a 2-node
    # job of torch 2.13 trained; see tests/fixtures/README.md.
    state = decode(CAPTURED.read_text().strip())
    assert state.round == 0 and state.complete and not state.closed
    assert sorted(state.participants.values()) == [0, 1]
    assert all(isinstance(n, NodeDesc) and n.addr == "localhost" for n in state.participants)
    assert set(state.last_heartbeats) == set(state.participants)


def test_decoding_needs_no_torch_classes():
    state = decode(CAPTURED.read_text().strip())
    assert type(next(iter(state.participants))).__module__ == "elastic_chaos.watchers.rdzv_state"


class Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_a_pickle_that_names_another_class_is_refused():
    evil = base64.b64encode(pickle.dumps(Exploit())).decode()
    with pytest.raises(UnsafeUnpickle, match="system"):
        decode(evil)


def test_a_reconstructor_aimed_at_a_foreign_class_is_refused():
    import copyreg

    class Sneaky:
        def __reduce__(self):
            return (copyreg._reconstructor, (dict, object, None))

    with pytest.raises(UnsafeUnpickle):
        decode(base64.b64encode(pickle.dumps(Sneaky())).decode())


def test_not_base64_is_a_value_error():
    with pytest.raises(ValueError, match="base64"):
        decode("%%% not base64 %%%")


def test_a_plain_pickle_of_another_shape_is_a_value_error():
    with pytest.raises(ValueError, match="not a state"):
        decode(base64.b64encode(pickle.dumps({"round": 1})).decode())


def test_participants_are_named_by_address_where_pids_repeat():
    from elastic_chaos.watchers.rdzv_state import RendezvousState
    from elastic_chaos.watchers.rendezvous import describe

    pod_a, pod_b = NodeDesc("trainer-worker-0.trainer.ns.svc", 1, 0), NodeDesc("trainer-worker-1", 1, 0)
    state = RendezvousState(round=1, complete=True, participants={pod_a: 0, pod_b: 1})
    names = {"trainer-worker-0": "trainer-worker-0", "trainer-worker-1": "trainer-worker-1"}
    assert [p.node for p in describe(state, names).participants] == ["trainer-worker-0", "trainer-worker-1"]


def test_participants_sharing_localhost_are_named_by_pid():
    from elastic_chaos.watchers.rdzv_state import RendezvousState
    from elastic_chaos.watchers.rendezvous import describe

    state = RendezvousState(participants={NodeDesc("localhost", 11, 0): 0, NodeDesc("localhost", 12, 0): 1})
    assert [p.node for p in describe(state, {11: "node-0", 12: "node-1"}).participants] == ["node-0", "node-1"]
