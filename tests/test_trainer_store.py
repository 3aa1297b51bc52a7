"""The reference trainer keeps its own listeners on MASTER_ADDR (issue 15, finding 7).

torch's env:// rendezvous makes rank 0 host the job's TCPStore on every interface;
the trainer builds the store itself from a socket bound to MASTER_ADDR (torchrun's
``--local-addr``). The multi-process test runs the trainer under a real torchrun with
two workers and reads where they listen while they train.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from listening import WILDCARDS, listeners

from elastic_chaos.trainer.train import store_address

HERE = Path(__file__).resolve().parent.parent

ENV = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "0", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "2"}


def test_the_store_is_bound_to_an_ip_master_addr():
    assert store_address(ENV) == ("127.0.0.1", 29500)
    assert store_address({**ENV, "MASTER_ADDR": "10.99.0.2"}) == ("10.99.0.2", 29500)
    assert store_address({**ENV, "MASTER_ADDR": "::1"}) == ("::1", 29500)


def test_a_host_name_is_bound_only_when_every_rank_is_on_this_machine():
    assert store_address({**ENV, "MASTER_ADDR": "node-0.cluster"}) is None        # others may resolve it otherwise
    assert store_address({**ENV, "MASTER_ADDR": "localhost", "LOCAL_WORLD_SIZE": "4"}) == ("localhost", 29500)


def test_no_store_is_hosted_by_a_worker_when_the_agent_hosts_it():
    assert store_address({**ENV, "TORCHELASTIC_USE_AGENT_STORE": "True"}) is None


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


@pytest.mark.slow
def test_training_workers_listen_only_on_the_master_address(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(HERE), "TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "1",
           "GLOO_SOCKET_IFNAME": "lo", "LOGLEVEL": "WARNING"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", "2",
           "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--local-addr", "127.0.0.1",
           f"--log-dir={tmp_path / 'torchelastic'}",   # not the system temp folder
           "-m", "elastic_chaos.trainer.train", "--checkpoint-dir", str(tmp_path / "ck"), "--max-steps", "400",
           "--step-time", "0.05", "--spot-notice", "off"]
    log = tmp_path / "job.log"
    with open(log, "wb") as out:
        agent = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            steps = [json.loads(line.split("ELASTIC_CHAOS ", 1)[1]) for line in log.read_text().splitlines()
                     if '"ev":"step"' in line]
            if {s["rank"] for s in steps} == {0, 1}:
                break
            assert agent.poll() is None, log.read_text()[-3000:]
            time.sleep(0.2)
        else:
            raise AssertionError(f"the workers did not train in time:\n{log.read_text()[-3000:]}")
        workers = children(agent.pid)
        found = {w: listeners(w) for w in workers}
    finally:
        agent.terminate()
        agent.wait(60)
    assert len(workers) == 2
    assert all(found.values()), found                            # rank 0's store, gloo's pairs
    assert [(w, a) for w, addrs in found.items() for a in addrs if a[0] in WILDCARDS] == []
    assert {a[0] for addrs in found.values() for a in addrs} == {"127.0.0.1"}
