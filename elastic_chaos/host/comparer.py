"""Run the final-state comparer (``elastic_chaos.trainer.compare_state``) under a python with torch.

The toolkit's own process never imports torch: comparing two checkpoints tensor
by tensor happens in a child process of the nodes' python, bounded by a timeout.
This module only starts it and hands back what it said; reading that is
``elastic_chaos.analysis.final_state``'s.
"""
from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MODULE = "elastic_chaos.trainer.compare_state"
DEFAULT_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class ComparerRun:
    """What the comparer process did: its exit status and its output (None: killed at the timeout)."""

    returncode: int | None
    stdout: str
    stderr: str
    command: tuple[str, ...]


def run_comparer(a: Path, b: Path, *, tolerance: float = 0.0, python: str | None = None,
                 trust: bool = False, timeout_s: float = DEFAULT_TIMEOUT_S) -> ComparerRun:
    """Compare checkpoints ``a`` and ``b`` in a child ``python`` (default: this one); blocks at most
    ``timeout_s`` (the child is killed then: returncode None). OSError when ``python`` cannot start."""
    cmd = (python or sys.executable, "-m", MODULE, str(a), str(b), "--tolerance", repr(float(tolerance)),
           *(("--trust",) if trust else ()))
    root = str(Path(__file__).resolve().parents[2])   # the trainer as this process sees it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        return ComparerRun(None, _text(exc.stdout), _text(exc.stderr), cmd)
    return ComparerRun(done.returncode, done.stdout, done.stderr, cmd)


def _text(out: str | bytes | None) -> str:
    if out is None:
        return ""
    return out.decode(errors="replace") if isinstance(out, bytes) else out
