"""Is there a torch for the nodes? Checked before a local job starts.

torch is not a dependency of elastic-chaos: the toolkit's own process never
imports it, and a ``torch`` requirement would make pip put PyPI's default build
(CUDA, several GB of ``nvidia-*`` packages on Linux) into a fresh environment,
or touch a torch the user installed. The local platform's nodes run torchrun
with the toolkit's interpreter, though, so a run checks that torch is there
(and not older than the toolkit is tested with) before anything starts, and
says how to install a CPU build when it is not: a setup error (exit 2), not a
job whose every node dies at start.
"""
from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys

from elastic_chaos.errors import SetupError

MINIMUM = (2, 2)
"""The oldest torch the toolkit is tested with."""

CPU_INSTALL = "pip install torch --index-url https://download.pytorch.org/whl/cpu"
"""How to install torch's CPU build (no CUDA download): docs/INSTALL.md, "torch: pins, indexes, CPU or CUDA"."""

HOW = (f"Install torch into this environment first: the CPU build with `{CPU_INSTALL}` (a plain "
       "`pip install torch` takes PyPI's CUDA build on Linux, several GB); on a GPU machine, the CUDA build "
       "you use. elastic-chaos never installs or replaces torch. `elastic-chaos doctor` checks the rest.")

_PROBE = ("import importlib.metadata as m, importlib.util as u\n"
          "if u.find_spec('torch') is None: print('absent')\n"
          "else:\n"
          "    try: print(m.version('torch'))\n"
          "    except m.PackageNotFoundError: print('unknown')\n")


def torch_version(python: str = sys.executable) -> str | None:
    """The version of the torch ``python`` would import ("2.13.0+cpu"), ``"unknown"`` for a
    torch without package metadata (a source tree on PYTHONPATH), None when there is none.
    Does not import torch (seconds); another interpreter is asked in a subprocess."""
    if python == sys.executable:
        if importlib.util.find_spec("torch") is None:
            return None
        try:
            return importlib.metadata.version("torch")
        except importlib.metadata.PackageNotFoundError:
            return "unknown"
    try:
        out = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise SetupError(f"could not ask {python} which torch it has ({exc})") from exc
    answer = out.strip().splitlines()[-1] if out.strip() else "absent"
    return None if answer == "absent" else answer


def too_old(version: str) -> bool:
    """Whether ``version`` ("2.1.2+cu121") is older than :data:`MINIMUM`; an unparsable one is not."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return m is not None and (int(m[1]), int(m[2])) < MINIMUM


def require_torch(python: str = sys.executable) -> str:
    """The torch version ``python`` has; raises SetupError, saying how to install a CPU build,
    when it has none or one older than :data:`MINIMUM`."""
    version = torch_version(python)
    where = "this Python" if python == sys.executable else python
    if version is None:
        raise SetupError(f"torch is not installed for {where} ({python}), and every node runs torchrun "
                         f"with it. {HOW}")
    if too_old(version):
        raise SetupError(f"torch {version} (for {python}) is older than the {'.'.join(map(str, MINIMUM))} "
                         f"elastic-chaos is tested with. {HOW}")
    return version
