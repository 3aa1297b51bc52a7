"""Node log lines -> events: agent lines, worker errors, and what broke a collective."""
from __future__ import annotations

import datetime

from elastic_chaos.events import AgentEv, ProgressEv, payload_json
from elastic_chaos.watchers.logs import _AgentParser, collective_cause, parse_progress, parse_raw


def test_a_gloo_timeout_is_a_timeout():
    msg = "[../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 15000ms for recv operation to complete"
    assert collective_cause(msg) == "timeout"


def test_a_closed_connection_is_not_a_timeout():
    msg = "[../gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:14766"
    assert collective_cause(msg) == "connection_closed"


def test_worker_tracebacks_become_worker_error_events():
    line = "[rank1]: RuntimeError: [gloo/pair.cc:553] Connection closed by peer [10.99.0.2]:1234"
    ev = parse_raw(line, "node-0", 5.0)
    assert ev is not None and ev.type == ProgressEv.WORKER_ERROR
    assert ev.data.rank == 1 and ev.data.cause == "connection_closed"


def test_an_agent_that_gives_up_is_recognised():
    ev = parse_raw("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "node-1", 1.0)
    assert ev is not None and ev.type == AgentEv.AGENT_GAVE_UP


def test_rendezvous_connection_errors_keep_their_message():
    line = ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to etcd "
            "has failed. See inner exception for details.")
    ev = parse_raw(line, "node-1", 1.0)
    assert ev is not None and ev.type == AgentEv.RENDEZVOUS_ERROR
    assert ev.data.error.startswith("RendezvousConnectionError: The connection to etcd has failed")


def test_a_timed_out_rank_exchange_is_a_rendezvous_error_not_a_spent_budget():
    # torch 2.13's agent, 300 s after a participant was lost right after its round closed
    line = "LookupError: Key torch.rendezvous.chaos-f573a985.1/torchelastic/role_info/1 not found in EtcdStore"
    ev = parse_raw(line, "node-0", 1.0)
    assert ev is not None and ev.type == AgentEv.RENDEZVOUS_ERROR
    assert ev.data.error == line
    ev = parse_raw("torch.distributed.DistStoreError: wait timeout after 300000ms, keys: "
                   "/torchelastic/role_info/1", "node-0", 1.0)
    assert ev is not None and ev.type == AgentEv.RENDEZVOUS_ERROR
    assert ev.data.error.startswith("DistStoreError: wait timeout")
    assert parse_raw("[rank0]: LookupError: Key x not found in EtcdStore", "node-0", 1.0).type != \
        AgentEv.RENDEZVOUS_ERROR                                           # a worker's, not the agent's


def test_agent_lines_carry_the_agents_own_time():
    parser = _AgentParser("node-0")
    line = ("I1122 12:56:15.238000 2128 torch/distributed/elastic/agent/server/api.py:942] [default] "
            "Worker group FAILED. 3/3 attempts left; will restart worker group")
    (ev,) = parser.feed(line)
    assert ev.type == AgentEv.WORKER_GROUP_FAILED and payload_json(ev.data) == {"attempts_left": 3, "max_restarts": 3}
    when = datetime.datetime.fromtimestamp(ev.t)
    assert (when.month, when.day, when.hour, when.minute, when.second, when.microsecond) == (11, 22, 12, 56, 15, 238000)


def test_progress_lines_keep_the_trainers_timestamp():
    ev = parse_progress('noise ELASTIC_CHAOS {"ev": "step", "t": 12.5, "step": 3, "rank": 0}', "node-0")
    assert ev is not None and ev.t == 12.5 and payload_json(ev.data) == {"step": 3, "rank": 0}


def test_a_progress_line_of_the_wrong_shape_is_said_once_and_the_follower_goes_on(tmp_path):
    from elastic_chaos.events import Timeline
    from elastic_chaos.watchers.logs import LogFollower
    log = tmp_path / "node-0.log"
    bad = 'ELASTIC_CHAOS {"ev": "step", "t": 1.0, "step": "three"}'
    log.write_text(f"{bad}\n{bad}\n" + 'ELASTIC_CHAOS {"ev": "step", "t": 2.0, "step": 4}\n')
    tl = Timeline()
    follower = LogFollower(tl, lambda: {"node-0": log})
    follower.poll()
    follower.finish()
    unparsed = tl.select(ProgressEv.UNPARSED)
    assert len(unparsed) == 1 and "progress/step: field 'step' must be an integer" in (unparsed[0].data.why or "")
    assert [e.data.step for e in tl.select(ProgressEv.STEP)] == [4]
