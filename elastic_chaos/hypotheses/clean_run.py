"""One clean torchrun beside the job, for the final-state check: the reference trainer's legs
(elastic_chaos.hypotheses.final) and a user's script's clean twin (elastic_chaos.hypotheses.final_script).

Both need the same care: the toolkit's own package on the path (the launch shim and the trainer the nodes
import), the run's tag on every process (elastic_chaos.host.procs: torchrun starts each worker in a session
of its own, out of torchrun's group; the tag finds them, and a dead runner's reaper does too), torchrun tied
to this process (lifeline: the runner's death stops it), and, however the wait ends (its result, a timeout,
a Ctrl-C, a worker hung on its way out), torchrun and every worker stopped by their tag, never one left
training.
"""
from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, TypeVar

from elastic_chaos.host import lifeline, procs

T = TypeVar("T")

ROOT = str(Path(__file__).resolve().parents[2])
"""The toolkit this runner ships, as the nodes import it."""


def run_tagged(cmd: list[str], *, env: dict[str, str], tag: str, cwd: Path, log: IO[str],
               wait: Callable[[subprocess.Popen[bytes]], T]) -> T:
    """Start ``cmd`` (output to ``log``) tagged ``tag``, with ``env`` and this toolkit first on PYTHONPATH;
    return what ``wait`` says of the process; stop what is left of it by its tag, whatever happened."""
    env = {**env, procs.TAG_VAR: tag, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)}
    proc = lifeline.popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd,
                          start_new_session=True)
    try:
        return wait(proc)
    finally:
        # before: torchrun's group was killed, and a hung worker, in a session of its own, trained on
        procs.kill_tree(tag, first=proc.pid if proc.poll() is None else None)
        proc.wait(timeout=30)
