"""The local platform hands each node its GPUs through the environment: real torchrun
agents, on CPU, with a GPU list given to the platform (what nvidia-smi would report)."""
from __future__ import annotations

import time

import pytest

from elastic_chaos.analysis.result import placement_of
from elastic_chaos.events import RunnerEv, Timeline
from elastic_chaos.host import procs
from elastic_chaos.platforms.local.platform import LocalOptions, LocalPlatform
from elastic_chaos.spec import JobSpec

pytestmark = pytest.mark.slow

WORKER = "import time\nprint('worker up', flush=True)\ntime.sleep(300)\n"


def environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        raw = f.read().split(b"\0")
    return dict(kv.decode(errors="replace").partition("=")[::2] for kv in raw if b"=" in kv)


def worker_env(platform: LocalPlatform, node: str, timeout: float = 90.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        agent = platform.nodes()[[n.name for n in platform.nodes()].index(node)].agent_pid
        workers = [p for p in procs.tagged_pids(platform.node_tag(node)) if p != agent]
        if workers:
            return environ(workers[0])
        time.sleep(0.2)
    raise AssertionError(f"no worker on {node}")


def test_two_nodes_on_one_gpu_share_it_with_a_host_id_each(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    timeline = Timeline(tmp_path / "timeline.jsonl")
    platform = LocalPlatform(timeline, tmp_path, LocalOptions(gpus=("0",)))
    try:
        platform.start(JobSpec(nodes="1:2", script=(str(script),), nccl_dump_wait_ms=1000))
        a, b = worker_env(platform, "node-0"), worker_env(platform, "node-1")
    finally:
        platform.stop()
        timeline.close()
    assert a["CUDA_VISIBLE_DEVICES"] == b["CUDA_VISIBLE_DEVICES"] == "0"
    assert a["NCCL_HOSTID"] != b["NCCL_HOSTID"]
    assert a["TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC"] == "1000"          # a job option, as node environment
    placement = placement_of(Timeline.load(tmp_path / "timeline.jsonl").events())
    assert placement is not None and placement.mode == "shared" and "over sockets" in (placement.note or "")
    assert placement.slices == (("0",), ("0",)) and placement.gpus == ("0",)
    assert Timeline.load(tmp_path / "timeline.jsonl").select(RunnerEv.GPU_PLACEMENT)
