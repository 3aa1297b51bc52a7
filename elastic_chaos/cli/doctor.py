"""``elastic-chaos doctor``: check that this machine can run the local platform.

Checks torch (not a dependency of elastic-chaos: installed by you, and whether
it is a CPU or CUDA build), torchrun, python-etcd
and an etcd with the v2 API, and says what to do about each problem; shows the
GPUs (driver, CUDA and NCCL versions, and how two local nodes would be placed on
them), or "none" on a CPU machine. Exit 0 when everything needed is there, 2
otherwise (no GPU is not a problem: jobs then run on gloo).
"""
from __future__ import annotations

import argparse
import importlib
import warnings
from typing import Any


def register(sub: Any) -> None:
    p = sub.add_parser("doctor", help="check torch, torchrun and etcd on this machine",
                       description=__doc__ + "\nexample:\n  elastic-chaos doctor --etcd-binary /usr/bin/etcd\n",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--etcd-binary", help="etcd 3.4/3.5 executable to check")
    p.set_defaults(func=main)


def _check_torch() -> str:
    from elastic_chaos.platforms.local.torch_check import require_torch
    require_torch()  # not a dependency of elastic-chaos: absent or too old, say how to install a CPU build
    with warnings.catch_warnings():   # torch's own import warnings (no numpy, ...) are not doctor's findings
        warnings.simplefilter("ignore")
        torch = importlib.import_module("torch")
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU"
    gpus = torch.cuda.device_count() if torch.version.cuda else 0
    importlib.import_module("torch.distributed.run")
    return f"torch {torch.__version__} ({build} build, {gpus} GPU(s) visible); torchrun importable"


def _check_gpus() -> str:
    from elastic_chaos.platforms.local.gpus import detect
    torch = importlib.import_module("torch")
    nccl = None
    if torch.version.cuda:
        try:
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
        except (AttributeError, RuntimeError):
            nccl = None
    return gpu_summary(detect(), torch.version.cuda, nccl)


def gpu_summary(inventory: Any, torch_cuda: str | None, nccl: str | None) -> str:
    """One line: the GPUs, the driver's and torch's CUDA, NCCL, and how the demo's two nodes
    would be placed on them ("none ..." on a CPU machine)."""
    from elastic_chaos.errors import SetupError
    from elastic_chaos.platforms.local.gpus import plan
    nccl_text = f"NCCL {nccl}" if nccl else "NCCL none" + ("" if torch_cuda else " (CPU build of torch)")
    if not inventory.gpus:
        return f"none ({inventory.why_none or 'no GPU'}): jobs run on gloo; {nccl_text}"
    names = ", ".join(f"{g.id} {g.name}" + (f" ({g.memory_mib} MiB)" if g.memory_mib else "") for g in inventory.gpus)
    line = (f"{len(inventory.gpus)}: {names}; driver {inventory.driver or '?'}, CUDA {inventory.cuda or '?'} "
            f"(torch built for CUDA {torch_cuda or 'none: a CPU build cannot use them'}); {nccl_text}")
    try:
        placement = plan(inventory.ids, slots=2, nproc_per_node=1, backend=None)
        return f"{line}; two local nodes: {placement.note}"
    except SetupError as exc:
        return f"{line}; two local nodes: {exc}"


def _check_python_etcd() -> str:
    importlib.import_module("etcd")
    return "python-etcd importable (torch's etcd-v2 rendezvous backend needs it)"


def _check_etcd(binary: str | None) -> str:
    from elastic_chaos.host.etcd import check_supported, find_binary
    path = find_binary(binary)
    version = ".".join(map(str, check_supported(path)))
    return f"etcd {version} at {path} (v2 API available with --enable-v2)"


def main(args: argparse.Namespace) -> int:
    from elastic_chaos.errors import ChaosError
    checks = [("torch", _check_torch, ""),
              ("GPUs", _check_gpus, "install torch first (see the torch line)"),
              ("python-etcd", _check_python_etcd, "pip install python-etcd"),
              ("etcd", lambda: _check_etcd(args.etcd_binary), "")]
    ok = True
    for name, check, fix in checks:
        try:
            print(f"ok    {name}: {check()}")
        except (ImportError, ChaosError, OSError) as exc:
            ok = False
            print(f"FAIL  {name}: {exc}" + (f"\n      fix: {fix}" if fix else ""))
    return 0 if ok else 2
