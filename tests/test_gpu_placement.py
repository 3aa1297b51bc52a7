"""GPUs on the local platform, without a GPU: the placement is a pure function of a GPU list."""
from __future__ import annotations

import subprocess

import pytest

from elastic_chaos.errors import SetupError
from elastic_chaos.platforms.local.gpus import GpuMode, Slots, detect, plan
from elastic_chaos.spec import PgBackend

SMI_ROWS = ("0, GPU-aaaa, NVIDIA H100 80GB HBM3, 81559, 580.95.05\n"
            "1, GPU-bbbb, NVIDIA H100 80GB HBM3, 81559, 580.95.05\n")
SMI_HEADER = "| NVIDIA-SMI 580.95.05    Driver Version: 580.95.05    CUDA Version: 13.0     |\n"


def smi(cmd):
    return SMI_ROWS if any(a.startswith("--query-gpu") for a in cmd) else SMI_HEADER


def test_enough_gpus_give_each_node_its_own_slice():
    p = plan([str(i) for i in range(8)], slots=2, nproc_per_node=4, backend=None)
    assert p.mode is GpuMode.EXCLUSIVE and p.slices == (("0", "1", "2", "3"), ("4", "5", "6", "7"))
    assert p.env(1, "node-1", "run") == {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}      # one host: no host id


def test_one_gpu_for_two_nodes_is_shared_with_a_host_id_per_node():
    p = plan(["0"], slots=2, nproc_per_node=1, backend=PgBackend.NCCL)
    assert p.mode is GpuMode.SHARED and p.slices == (("0",), ("0",))
    a, b = p.env(0, "node-0", "chaos-1"), p.env(1, "node-1", "chaos-1")
    assert a["CUDA_VISIBLE_DEVICES"] == b["CUDA_VISIBLE_DEVICES"] == "0"
    assert a["NCCL_HOSTID"] != b["NCCL_HOSTID"]
    assert "over sockets, not NVLink/P2P" in p.note


def test_sharing_keeps_a_nodes_ranks_on_distinct_gpus():
    p = plan(["0", "1", "2"], slots=2, nproc_per_node=2, backend=None)
    assert p.mode is GpuMode.SHARED and all(len(set(s)) == 2 for s in p.slices)


def test_fewer_gpus_than_ranks_per_node_is_refused_with_what_to_change():
    with pytest.raises(SetupError, match=r"nproc_per_node 2 needs 2 GPUs per node .* --nproc-per-node 1"):
        plan(["0"], slots=2, nproc_per_node=2, backend=None)


def test_sharing_can_be_refused():
    with pytest.raises(SetupError, match="--no-share-gpus"):
        plan(["0"], slots=2, nproc_per_node=1, backend=None, share=False)


def test_nccl_without_a_gpu_is_refused_and_cpu_is_left_alone():
    with pytest.raises(SetupError, match="--backend nccl needs GPUs"):
        plan([], slots=2, nproc_per_node=1, backend=PgBackend.NCCL)
    assert plan([], slots=2, nproc_per_node=1, backend=None).mode is GpuMode.NONE
    assert plan(["0"], slots=2, nproc_per_node=1, backend=PgBackend.GLOO).mode is GpuMode.NONE


def test_a_script_that_forced_no_backend_is_not_refused():
    p = plan(["0"], slots=2, nproc_per_node=2, backend=None, strict=False)
    assert p.mode is GpuMode.NONE and "left as they are" in p.note


def test_isolated_nodes_get_their_own_host_ids_so_a_partition_cuts_nccl_too():
    p = plan(["0", "1"], slots=2, nproc_per_node=1, backend=None, isolated=True)
    assert p.mode is GpuMode.EXCLUSIVE and "NCCL_HOSTID" in p.env(0, "node-0", "r")


def test_a_replacement_takes_the_lost_nodes_gpus():
    slots = Slots(plan(["0", "1"], slots=2, nproc_per_node=1, backend=None), "run")
    assert slots.assign("node-0", set())["CUDA_VISIBLE_DEVICES"] == "0"
    assert slots.assign("node-1", {"node-0"})["CUDA_VISIBLE_DEVICES"] == "1"
    assert slots.assign("node-2", {"node-0"})["CUDA_VISIBLE_DEVICES"] == "1"   # node-1 is gone


def test_detect_reads_nvidia_smi_and_the_driver():
    inv = detect(run=smi, env={})
    assert inv.ids == ("0", "1") and inv.gpus[0].name == "NVIDIA H100 80GB HBM3"
    assert (inv.driver, inv.cuda) == ("580.95.05", "13.0")


def test_detect_keeps_to_the_parents_cuda_visible_devices():
    assert detect(run=smi, env={"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}).ids == ("GPU-bbbb",)
    assert detect(run=smi, env={"CUDA_VISIBLE_DEVICES": "1,0"}).ids == ("1", "0")
    hidden = detect(run=smi, env={"CUDA_VISIBLE_DEVICES": ""})
    assert hidden.ids == () and "hides every GPU" in (hidden.why_none or "")


def test_no_driver_is_no_gpu_with_the_reason():
    def fails(cmd):
        raise subprocess.CalledProcessError(9, cmd, stderr="NVIDIA-SMI has failed")
    inv = detect(run=fails, env={})
    assert inv.gpus == () and "nvidia-smi failed" in (inv.why_none or "")


def test_doctor_shows_gpus_driver_cuda_nccl_and_the_demos_placement():
    from elastic_chaos.cli.doctor import gpu_summary
    one = detect(run=lambda cmd: SMI_ROWS.splitlines()[0] if any(a.startswith("--query") for a in cmd)
                 else SMI_HEADER, env={})
    line = gpu_summary(one, "13.0", "2.28.9")
    assert "1: 0 NVIDIA H100 80GB HBM3 (81559 MiB); driver 580.95.05, CUDA 13.0" in line
    assert "NCCL 2.28.9" in line and "nodes share GPUs" in line


def test_doctor_says_none_on_a_cpu_machine():
    from elastic_chaos.cli.doctor import gpu_summary
    from elastic_chaos.platforms.local.gpus import Inventory
    line = gpu_summary(Inventory(why_none="nvidia-smi not found (no NVIDIA driver)"), None, None)
    assert line.startswith("none (nvidia-smi not found") and "NCCL none (CPU build of torch)" in line
