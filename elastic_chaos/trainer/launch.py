"""Run an unmodified training script with its process-group backend forced.

Many training scripts hard-code ``init_process_group("nccl")`` because they were
written for a GPU cluster. To chaos-test such a script on a CPU machine (CI),
elastic-chaos launches it through this shim when a job sets ``backend``::

    torchrun ... -m elastic_chaos.trainer.launch --backend gloo path/to/train.py --its --own --args
    torchrun ... -m elastic_chaos.trainer.launch --backend gloo -m package.module --args

The shim replaces ``torch.distributed.init_process_group`` by a wrapper that
passes the forced backend instead of whatever the script asks for, then runs
the script as ``__main__`` with its own ``sys.argv`` and ``sys.path`` (as
``python path/to/train.py`` would). Nothing else changes: device placement is
still the script's (a script that calls ``.cuda()`` unconditionally needs a
GPU, or a flag of its own; see docs/INTEGRATE.md).
"""
from __future__ import annotations

import argparse
import functools
import os
import runpy
import sys
from collections.abc import Callable
from typing import Any

BACKENDS = ("gloo", "nccl")


def parse_args(argv: list[str]) -> tuple[str, list[str]]:
    """``--backend B [-m MODULE | SCRIPT] ARGS...`` -> (backend, the script's argv)."""
    p = argparse.ArgumentParser(prog="python -m elastic_chaos.trainer.launch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=BACKENDS, required=True)
    p.add_argument("command", nargs=argparse.REMAINDER, help="SCRIPT ARGS... or -m MODULE ARGS...")
    args = p.parse_args(argv)
    command = list(args.command)
    if command and command[0] == "--":
        command = command[1:]
    if not command or (command[0] == "-m" and len(command) < 2):
        p.error("give the training script (or -m MODULE) after --backend")
    return args.backend, command


def forced(init: Callable[..., Any], backend: str) -> Callable[..., Any]:
    """``init`` (torch's init_process_group) with ``backend`` always used instead
    of the caller's. For gloo, a CUDA ``device_id`` (NCCL's eager init) is dropped."""

    @functools.wraps(init)
    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        if args:
            args = (backend, *args[1:])
        else:
            kwargs["backend"] = backend
        if backend == "gloo":
            kwargs.pop("device_id", None)
        return init(*args, **kwargs)

    init_process_group.forced_backend = backend  # type: ignore[attr-defined]
    return init_process_group


def install(backend: str) -> None:
    """Patch torch.distributed so every later ``init_process_group`` uses ``backend``."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    wrapper = forced(c10d.init_process_group, backend)
    c10d.init_process_group = wrapper
    dist.init_process_group = wrapper
    os.environ["ELASTIC_CHAOS_FORCED_BACKEND"] = backend


def main(argv: list[str] | None = None) -> None:
    backend, command = parse_args(sys.argv[1:] if argv is None else argv)
    install(backend)
    if command[0] == "-m":
        sys.argv = [command[1], *command[2:]]
        runpy.run_module(command[1], run_name="__main__", alter_sys=True)
        return
    script = os.path.abspath(command[0])
    sys.argv = [command[0], *command[1:]]
    sys.path[0] = os.path.dirname(script)  # as `python script.py` sets it
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
