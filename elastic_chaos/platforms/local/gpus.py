"""GPUs on the local platform: which this machine has, and which each node gets.

On a cluster each node has its own GPUs. Here every node runs on one machine, so
the platform hands each node a slice of the GPUs (``CUDA_VISIBLE_DEVICES``, as a
device plugin would) when there are enough: ``max_nodes x nproc_per_node``.

With fewer, nodes share GPUs. NCCL refuses two ranks of one host on one GPU
("Duplicate GPU detected"), so each node also gets its own ``NCCL_HOSTID``: NCCL
then takes the nodes for different hosts and talks between them over its
network transport (sockets here), not NVLink, P2P or shared memory, which is
what a real multi-node job does, on a slower wire. The ranks of one node must
still have a GPU each (``nproc_per_node`` <= GPUs); otherwise the run is refused
before anything starts. With ``network=isolated`` nodes get their own host id
too, so a partition cuts NCCL's traffic as well (P2P would bypass the bridge).

``plan`` is pure (tests give it a fake GPU list); ``detect`` asks nvidia-smi.
"""
from __future__ import annotations

import enum
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from elastic_chaos.errors import SetupError
from elastic_chaos.spec import PgBackend


@dataclass(frozen=True)
class Gpu:
    id: str
    """What CUDA_VISIBLE_DEVICES names it by (its index, or the UUID the parent was given)."""
    name: str = ""
    memory_mib: int | None = None
    uuid: str = ""


@dataclass(frozen=True)
class Inventory:
    """The GPUs this process may use, and the driver's versions."""

    gpus: tuple[Gpu, ...] = ()
    driver: str | None = None
    cuda: str | None = None
    """The CUDA version the driver supports (nvidia-smi's header)."""
    why_none: str | None = None
    """Why there is no GPU (no nvidia-smi, CUDA_VISIBLE_DEVICES empty, ...)."""

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(g.id for g in self.gpus)


Runner = Callable[[Sequence[str]], str]
"""Runs a command and returns its standard output (raises OSError or CalledProcessError)."""


def _run(cmd: Sequence[str]) -> str:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=30, check=True).stdout


def detect(run: Runner | None = None, env: Mapping[str, str] | None = None) -> Inventory:
    """The GPUs nvidia-smi lists, narrowed to the parent's CUDA_VISIBLE_DEVICES when it is
    set. Never raises: no nvidia-smi, or one that fails, is an inventory without GPUs
    that says why."""
    env = os.environ if env is None else env
    if run is None:
        if shutil.which("nvidia-smi") is None:
            return Inventory(why_none="nvidia-smi not found (no NVIDIA driver)")
        run = _run
    try:
        rows = run(["nvidia-smi", "--query-gpu=index,uuid,name,memory.total,driver_version",
                    "--format=csv,noheader,nounits"])
        header = run(["nvidia-smi"])
    except (OSError, subprocess.SubprocessError) as exc:
        return Inventory(why_none=f"nvidia-smi failed: {str(exc)[:200]}")
    gpus, driver = _parse_rows(rows)
    cuda = re.search(r"CUDA Version:\s*([\d.]+)", header)
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        gpus = _narrow(gpus, visible)
    why = None if gpus else ("CUDA_VISIBLE_DEVICES hides every GPU" if visible is not None else "nvidia-smi lists none")
    return Inventory(tuple(gpus), driver, cuda[1] if cuda else None, why)


def _parse_rows(text: str) -> tuple[list[Gpu], str | None]:
    gpus, driver = [], None
    for row in text.strip().splitlines():
        cells = [c.strip() for c in row.split(",")]
        if len(cells) < 5 or not cells[0].isdigit():
            continue
        mem = int(float(cells[3])) if re.fullmatch(r"[\d.]+", cells[3]) else None
        gpus.append(Gpu(cells[0], cells[2], mem, cells[1]))
        driver = cells[4]
    return gpus, driver


def _narrow(gpus: list[Gpu], visible: str) -> list[Gpu]:
    """The GPUs CUDA_VISIBLE_DEVICES names, in its order, named as it names them."""
    by_name = {**{g.id: g for g in gpus}, **{g.uuid: g for g in gpus if g.uuid}}
    out = []
    for item in (v.strip() for v in visible.split(",") if v.strip()):
        if item.startswith("-"):
            break  # CUDA stops at the first invalid entry
        g = by_name.get(item)
        if g is not None:
            out.append(Gpu(item, g.name, g.memory_mib, g.uuid))
    return out


class GpuMode(str, enum.Enum):
    NONE = "none"
    """No GPU placement: no GPU here, or the job runs on gloo."""
    EXCLUSIVE = "exclusive"
    """Each node has GPUs of its own."""
    SHARED = "shared"
    """Nodes share GPUs; each has its own NCCL host id, so NCCL goes over sockets between nodes."""


@dataclass(frozen=True)
class Placement:
    """Which GPUs each node slot gets (a replacement takes the slot of the node it replaces)."""

    mode: GpuMode
    slices: tuple[tuple[str, ...], ...] = ()
    own_host_ids: bool = False
    """Each node gets its own NCCL_HOSTID."""
    note: str = ""

    def env(self, slot: int, node: str, run_id: str) -> dict[str, str]:
        """The environment of the node in ``slot``."""
        out: dict[str, str] = {}
        if self.slices:
            out["CUDA_VISIBLE_DEVICES"] = ",".join(self.slices[slot % len(self.slices)])
        if self.own_host_ids:
            out["NCCL_HOSTID"] = f"elastic-chaos-{run_id}-{node}"
        return out

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode.value, "slices": [list(s) for s in self.slices],
                "own_host_ids": self.own_host_ids, "note": self.note}


@dataclass
class Slots:
    """Which node holds which slot of a placement: a node started to replace a lost one
    takes the slot no live node holds (the lost node's GPUs)."""

    placement: Placement
    run_id: str
    held: dict[str, int] = field(default_factory=dict)

    def assign(self, node: str, alive: set[str]) -> dict[str, str]:
        """Give ``node`` the first slot no live node holds; returns its environment."""
        taken = {slot for name, slot in self.held.items() if name in alive}
        slot = next(i for i in range(len(taken) + 1) if i not in taken)
        self.held[node] = slot
        return self.placement.env(slot, node, self.run_id)


def plan(gpus: Sequence[str], *, slots: int, nproc_per_node: int, backend: PgBackend | None,
         share: bool = True, isolated: bool = False, strict: bool = True) -> Placement:
    """Place ``slots`` nodes of ``nproc_per_node`` ranks on ``gpus`` (CUDA_VISIBLE_DEVICES
    ids). Raises SetupError, saying what to change, when the job cannot run here: NCCL
    forced without a GPU, fewer GPUs than ranks per node, or sharing refused. Not
    ``strict`` (a user's script with no backend forced: it may not use GPUs at all), a
    job that does not fit is left with the GPUs as they are instead."""
    n, g, need = nproc_per_node, len(gpus), slots * nproc_per_node
    if backend is PgBackend.GLOO or (g == 0 and backend is None):
        return Placement(GpuMode.NONE, note="" if g == 0 else "gloo forced: GPUs left as they are")
    if g == 0:
        raise SetupError("--backend nccl needs GPUs and this machine has none: run on a GPU machine, or use "
                         "--backend gloo (a script that hard-codes nccl runs on gloo through "
                         "elastic_chaos.trainer.launch)")
    if not strict and backend is None and (g < n or (g < need and not share)):
        return Placement(GpuMode.NONE, note=f"{g} GPU(s) cannot give {slots} node(s) x {n} rank(s) one each: "
                                            "left as they are (the script did not force a backend)")
    if g < n:
        raise SetupError(f"nproc_per_node {n} needs {n} GPUs per node (NCCL refuses two ranks of one node on one "
                         f"GPU) and this machine has {g}: use --nproc-per-node {g} or fewer, or --backend gloo")
    if g >= need:
        slices = tuple(tuple(gpus[i * n:(i + 1) * n]) for i in range(slots))
        note = (f"{g} GPU(s) for {slots} node(s) x {n} rank(s): each node its own ("
                + "; ".join(",".join(s) for s in slices) + ")")
        if isolated:
            note += "; each node its own NCCL_HOSTID, so NCCL crosses the (partitionable) node network"
        else:
            note += "; NCCL between nodes on one machine may use NVLink/P2P, faster than a real network"
        return Placement(GpuMode.EXCLUSIVE, slices, own_host_ids=isolated, note=note)
    if not share:
        raise SetupError(f"{slots} node(s) x {n} rank(s) need {need} GPUs and this machine has {g}: allow nodes "
                         "to share GPUs (drop --no-share-gpus), or use fewer nodes or --nproc-per-node")
    slices = tuple(tuple(gpus[(i * n + k) % g] for k in range(n)) for i in range(slots))
    note = (f"{g} GPU(s) for {slots} node(s) x {n} rank(s): nodes share GPUs, each with its own NCCL_HOSTID, so "
            "NCCL talks between nodes over sockets, not NVLink/P2P/shared memory: slower collectives and "
            "communicator setup than on one host, closer to a multi-node job on a slow network")
    return Placement(GpuMode.SHARED, slices, own_host_ids=True, note=note)
