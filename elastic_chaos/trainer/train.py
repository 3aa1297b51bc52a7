"""The reference elastic workload: ``python -m elastic_chaos.trainer.train`` under torchrun.

Small on purpose: a tiny MLP on synthetic, deterministic regression data,
DistributedDataParallel over gloo on CPU (NCCL when CUDA is present), atomic
checkpoints every N steps on a shared directory, resume from the newest
complete checkpoint, and an emergency checkpoint when the node is told it is
going away (SIGTERM). A configurable step time makes a CPU run pace like a GPU
run without burning the cores the rest of the job needs. Rank 0 hosts the job's
store on MASTER_ADDR only (torch's env:// binds every interface).

Everything it does is reported through :mod:`elastic_chaos.trainer.progress`.
"""
from __future__ import annotations

import argparse
import datetime
import ipaddress
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed import PrefixStore, TCPStore  # type: ignore[attr-defined]  # public, not re-exported in its stubs
from torch.nn.parallel import DistributedDataParallel

from elastic_chaos.trainer import checkpoint, dcp_checkpoint, pacing, progress
from elastic_chaos.trainer.sampler import ElasticSampler
from elastic_chaos.trainer.spot_notice import ENDPOINT_VAR, SpotNoticeWatcher

FEATURES = 16
MOMENTUM = 0.5
LR_STEP, LR_GAMMA = 50, 0.9
FORGETTABLE = ("sched", "rng", "optim", "sampler")
"""The LR decays by LR_GAMMA every LR_STEP steps: a scheduler whose state a resume must restore."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m elastic_chaos.trainer.train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--checkpoint-dir", type=Path,
                   default=Path(os.environ.get("CHECKPOINT_DIR", "checkpoints")),
                   help="shared checkpoint directory (default: $CHECKPOINT_DIR or ./checkpoints)")
    p.add_argument("--checkpoint-every", type=int, default=20, help="steps between checkpoints")
    p.add_argument("--checkpoint-format", choices=["file", "dcp"], default="file",
                   help="file = one torch.save file per save (ckpt-<step>.pt); dcp = torch.distributed.checkpoint: "
                        "a folder per save (step-<step>/), one shard per rank plus .metadata, and a 'latest' "
                        "pointer written once the save is complete (elastic_chaos.trainer.dcp_checkpoint)")
    p.add_argument("--async-save", action="store_true",
                   help="dcp only: save with dcp.async_save, training on while the shards are written")
    p.add_argument("--keep-last-n", type=int, default=3,
                   help="checkpoints kept (the newest; dcp: never the one 'latest' names nor a newer one)")
    p.add_argument("--step-time", type=float, default=0.1,
                   help="minimum seconds per step; steps are padded with a wait that advances only "
                        "while the process runs (elastic_chaos.trainer.pacing: a stopped node steps slower)")
    p.add_argument("--max-steps", type=int, default=100_000, help="stop after this step")
    p.add_argument("--batch-size", type=int, default=16, help="samples per rank per step")
    p.add_argument("--dataset-size", type=int, default=2048, help="samples per epoch")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--backend", choices=["auto", "gloo", "nccl"], default="auto",
                   help="process-group backend; auto = nccl with CUDA, else gloo")
    p.add_argument("--pg-timeout", type=float, default=60.0,
                   help="seconds a collective may wait for a peer before failing")
    p.add_argument("--save-delay", type=float, default=0.0,
                   help="extra seconds spent inside each checkpoint write, before the rename "
                        "(stands in for a large model's write; widens the window "
                        "kill-during-checkpoint aims at)")
    p.add_argument("--spot-notice", choices=["auto", "on", "off"], default="auto",
                   help="poll the EC2 metadata service for spot notices; auto = when "
                        "$AWS_EC2_METADATA_SERVICE_ENDPOINT is set or IMDS answers at start")
    p.add_argument("--notice-interval", type=float, default=1.0,
                   help="seconds between spot-notice polls (AWS suggests every 5 s for a 2-minute notice)")
    p.add_argument("--checkpoint-on", choices=["interruption", "rebalance"], default="rebalance",
                   help="earliest notice that triggers an emergency checkpoint")
    p.add_argument("--sampler", choices=["elastic", "naive"], default="elastic",
                   help="elastic = exactly-once across restarts and resizes; naive = "
                        "DistributedSampler-style rank::world sharding restarted by step "
                        "count (trains samples twice or never after a resize; for tests)")
    p.add_argument("--forget", action="append", choices=FORGETTABLE, default=[],
                   help="a resume bug, for tests of the final-state oracle: restore leaves this part of the "
                        "checkpoint out (repeatable): sched, rng, optim or sampler")
    p.add_argument("--pointer-early", action="store_true",
                   help="a save bug, for tests of kill-at-save-point (dcp only): 'latest' is moved to a save when "
                        "it starts, before its shards and .metadata are written (a pointer that names a save "
                        "not yet complete)")
    p.add_argument("--checkpoint-checksum", action="store_true",
                   help="a save carries the sha256 of its state and a restore verifies it: a checkpoint whose "
                        "bits changed since its save is reported corrupt and the restore falls back to the "
                        "previous one (file format only)")
    return p.parse_args(argv)


class Stop:
    """Set by SIGTERM: finish the current step, save an emergency checkpoint, exit."""

    requested = False
    signum = 0

    @classmethod
    def install(cls) -> None:
        signal.signal(signal.SIGTERM, cls._handle)

    @classmethod
    def _handle(cls, signum: int, _frame: FrameType | None) -> None:
        cls.requested = True
        cls.signum = signum


def synthetic_data(size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(size, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    return x, x @ w + 0.01 * torch.randn(size, 1, generator=g)


def pick_backend(choice: str) -> tuple[str, torch.device]:
    if choice == "auto":
        choice = "nccl" if torch.cuda.is_available() else "gloo"
    if choice == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", 0))
        torch.cuda.set_device(local_rank)
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def init_process_group(backend: str, timeout: datetime.timedelta) -> None:
    """torchrun's env:// rendezvous, except that the store rank 0 hosts listens on MASTER_ADDR
    only (torch's own binds every interface; it has no option to do otherwise)."""
    store = bound_store(timeout)
    if store is None:
        dist.init_process_group(backend, timeout=timeout)
        return
    # as env:// does: the default group's keys under a prefix of the (multi-tenant) store
    dist.init_process_group(backend, store=PrefixStore("default_pg", store), rank=int(os.environ["RANK"]),
                            world_size=int(os.environ["WORLD_SIZE"]), timeout=timeout)


def bound_store(timeout: datetime.timedelta) -> TCPStore | None:
    """The job's TCPStore, rank 0 hosting it on a socket bound to MASTER_ADDR (every rank
    makes the same choice); None where :func:`store_address` says to leave it to env://."""
    where = store_address(os.environ)
    if where is None:
        return None
    addr, port = where
    fd = listen_only_on(addr, port).detach() if int(os.environ["RANK"]) == 0 else None
    return TCPStore(addr, port, int(os.environ["WORLD_SIZE"]), fd is not None, timeout, multi_tenant=True,
                    master_listen_fd=fd)


def store_address(env: Mapping[str, str]) -> tuple[str, int] | None:
    """Where rank 0 should host the store, bound to that address only; None (plain env://)
    where binding would be wrong or is not ours to do: the agent hosts the store
    (TORCHELASTIC_USE_AGENT_STORE=True), or MASTER_ADDR is a host name and ranks run on other
    machines (it may resolve to another address there)."""
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True" or "MASTER_ADDR" not in env:
        return None
    addr, world = env["MASTER_ADDR"], int(env["WORLD_SIZE"])
    if not (_is_ip(addr) or int(env.get("LOCAL_WORLD_SIZE", "0")) == world):
        return None
    return addr, int(env["MASTER_PORT"])


def listen_only_on(addr: str, port: int) -> socket.socket:
    """A TCP socket listening on ``addr:port`` (resolved as the other ranks resolve it)."""
    family, kind, proto, _, sockaddr = socket.getaddrinfo(addr, port, type=socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(sockaddr)
    sock.listen(1024)
    return sock


def _is_ip(addr: str) -> bool:
    try:
        ipaddress.ip_address(addr)
    except ValueError:
        return False
    return True


def build_model(device: torch.device) -> nn.Module:
    torch.manual_seed(1234)  # identical init everywhere; DDP also broadcasts rank 0's
    return nn.Sequential(nn.Linear(FEATURES, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.checkpoint_format == "dcp" and (missing := dcp_checkpoint.missing_requirement()):
        print(f"elastic_chaos.trainer: {missing}", file=sys.stderr)
        return 2
    checkpoint.use_checksums(args.checkpoint_checksum)
    Stop.install()
    # the backend it will use, not the choice ("auto"): the verdicts that order timeouts read it
    resolved = args.backend if args.backend != "auto" else "nccl" if torch.cuda.is_available() else "gloo"
    progress.report_start(backend=resolved)
    backend, device = pick_backend(resolved)
    init_process_group(backend, datetime.timedelta(seconds=args.pg_timeout))
    rank, world = dist.get_rank(), dist.get_world_size()

    model = build_model(device)
    ddp = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optim = torch.optim.SGD(model.parameters(), lr=0.01, momentum=MOMENTUM)
    sched = torch.optim.lr_scheduler.StepLR(optim, step_size=LR_STEP, gamma=LR_GAMMA)
    sampler = ElasticSampler(args.dataset_size, args.batch_size, seed=args.seed)
    x_all, y_all = synthetic_data(args.dataset_size, args.seed)

    dcp_ckpt = None
    if args.checkpoint_format == "dcp":  # a gloo group of its own: a save in flight never meets DDP's collectives
        dcp_ckpt = dcp_checkpoint.DcpCheckpointer(
            args.checkpoint_dir, keep=args.keep_last_n, async_save=args.async_save, save_delay=args.save_delay,
            pointer_early=args.pointer_early,
            group=dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=args.pg_timeout)))
        step = dcp_checkpoint.restore(dcp_ckpt, model, optim, sampler, sched, forget=frozenset(args.forget))
    else:
        step = restore(args.checkpoint_dir, model, optim, sampler, sched, forget=frozenset(args.forget))
    notices = watch_spot_notices(args)
    emergency_saved: set[str] = set()

    def state() -> dict[str, Any]:
        # everything the next step depends on, so a resumed job is the job that never stopped
        # (the final-state oracle, elastic_chaos.trainer.compare_state, compares these)
        if dcp_ckpt is not None:
            return dcp_checkpoint.template(model, optim, sampler, sched)
        return {"model": model.state_dict(), "optim": optim.state_dict(), "sched": sched.state_dict(),
                "rng": {"torch": torch.get_rng_state()}, "sampler": sampler.state_dict()}

    def save_delay() -> None:
        time.sleep(args.save_delay)

    def save_alone(at: int, reason: str) -> None:
        """An emergency save by this rank alone, in the job's format."""
        if dcp_ckpt is not None:
            dcp_ckpt.save_alone(at, state(), reason=reason)
        else:
            checkpoint.save(args.checkpoint_dir, at, state(), keep=args.keep_last_n, reason=reason)

    while step < args.max_steps:
        began = time.monotonic()
        if args.sampler == "naive":
            epoch, ranges, idx = naive_batch(sampler, step, rank, world)
        else:
            epoch, positions, idx = sampler.next_batch(rank, world)
            ranges = [positions]
        x, y = x_all[idx].to(device), y_all[idx].to(device)
        synced = time.monotonic()
        optim.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # type: ignore[no-untyped-call]
        optim.step()
        sched.step()
        step += 1
        # sync_s: forward, backward with DDP's gradient all-reduce, optimizer. A rank that waits
        # for a slower peer spends the wait here; the slow rank itself spends it in its pace.
        progress.report_step(step, epoch=epoch, samples=ranges, epoch_size=args.dataset_size,
                             loss=round(loss.item(), 6) if len(idx) else None,  # a short last step's empty
                             sync_s=round(time.monotonic() - synced, 4))            # slice has no loss (mean of none)
        if Stop.requested:
            # Every rank holds the same weights after a DDP step, so whichever
            # rank was told to go can save the job's state on its own.
            save_alone(step, "sigterm")
            progress.emit("emergency_exit", step=step, signal=Stop.signum)
            return 128 + Stop.signum
        notice = notices.notice() if notices is not None else None
        if dcp_ckpt is not None:
            dcp_ckpt.poll()
            if step % args.checkpoint_every == 0:  # collective: every rank, whatever notice one of them has
                dcp_ckpt.save(step, state())
        if notice is not None and _acts_on(notice.kind, args.checkpoint_on) and notice.kind not in emergency_saved:
            emergency_saved.add(notice.kind)
            if dcp_ckpt is None or step % args.checkpoint_every != 0:  # dcp: this step's save is being made
                save_alone(step, f"spot-{notice.kind}")
        elif dcp_ckpt is None and step % args.checkpoint_every == 0 and rank == 0:
            checkpoint.save(args.checkpoint_dir, step, state(), keep=args.keep_last_n,
                            before_rename=save_delay if args.save_delay else None)
        pacing.pace(args.step_time - (time.monotonic() - began))

    if dcp_ckpt is not None:
        dcp_ckpt.wait()
    progress.emit("finished", step=step)
    dist.barrier()   # every rank past its last collective and its last save: nothing is in flight (run exits)
    return 0


def _acts_on(kind: str, threshold: str) -> bool:
    return kind == "interruption" or threshold == "rebalance"


def watch_spot_notices(args: argparse.Namespace) -> SpotNoticeWatcher | None:
    """Start polling IMDS for spot notices when asked to (or, on auto, when it answers)."""
    if args.spot_notice == "off":
        return None
    watcher = SpotNoticeWatcher(interval_s=args.notice_interval,
                                on_notice=lambda n: progress.emit("notice", notice=n.kind, detail=n.detail))
    if args.spot_notice == "auto" and not (os.environ.get(ENDPOINT_VAR) or watcher.reachable()):
        return None
    return watcher.start()


def naive_batch(sampler: ElasticSampler, step: int, rank: int,
                world: int) -> tuple[int, list[list[int]], torch.Tensor]:
    """DistributedSampler-style: rank takes every world-th position of the epoch,
    and the position in the epoch is re-derived from the step count at the
    *current* world size. Correct at a fixed world size; wrong after a resize."""
    steps_per_epoch = max(1, -(-sampler.dataset_size // (sampler.batch_per_rank * world)))
    epoch, j = divmod(step, steps_per_epoch)
    mine = list(range(rank, sampler.dataset_size, world))
    positions = mine[j * sampler.batch_per_rank:(j + 1) * sampler.batch_per_rank]
    sampler.epoch = epoch
    idx = sampler.permutation()[positions] if positions else torch.empty(0, dtype=torch.long)
    return epoch, [[p, p + 1] for p in positions], idx


def restore(directory: Path, model: nn.Module, optim: torch.optim.Optimizer, sampler: ElasticSampler,
            sched: torch.optim.lr_scheduler.LRScheduler | None = None, *,
            forget: frozenset[str] = frozenset()) -> int:
    """Load the newest checkpoint into the job's state; its step (0 for a fresh start). A checkpoint
    written before the scheduler and RNG were saved restores what it holds; the parts named in
    ``forget`` are left out (--forget: a resume bug on purpose)."""
    loaded = checkpoint.load_newest(directory)
    if loaded is None:
        progress.report_checkpoint_loaded(0, None)
        return 0
    state = {k: v for k, v in loaded.state.items() if k not in forget}
    model.load_state_dict(state["model"])
    if "optim" in state:
        optim.load_state_dict(state["optim"])
    if "sampler" in state:
        sampler.load_state_dict(state["sampler"])
    if sched is not None and "sched" in state:
        sched.load_state_dict(state["sched"])
    if "rng" in state:
        torch.set_rng_state(state["rng"]["torch"])
    progress.report_checkpoint_loaded(loaded.step, str(loaded.path))
    return loaded.step


def run(argv: list[str] | None = None) -> NoReturn:
    """``main``, then leave at once with its exit code, without Python's and torch's teardown:
    after a failed collective the process group is broken and the agent restarts the whole
    group anyway (an orderly teardown of a broken gloo group took ~1.5 s on a 2-core machine:
    time every survivor added to detection), and after a clean end the teardown can deadlock."""
    try:
        code = main(argv)
    except Exception:  # noqa: BLE001 - any failure ends this worker; the agent decides what next
        rank = os.environ.get("RANK", "?")
        for line in traceback.format_exc().splitlines():
            print(f"[rank{rank}]: {line}", file=sys.stderr)
        code = 1
    # Leave without tearing down DDP's reducer and gloo's process groups: torch 2.13 can deadlock there
    # (the main thread, holding the GIL, joins a gloo worker thread that waits for the GIL to free the
    # last work's thread-local state; seen in 1 of about 10 clean 60-step runs on 2 cores, the worker
    # then hung until killed). Saves are fsynced; after a clean end every rank passed main's final barrier.
    sys.stderr.flush()
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
