"""The reference trainer run to its end by ``torchrun --standalone``, for the tests that compare final
states (clean runs of one seed, a resumed one). Bounded; on a timeout every process of the run is stopped
by its tag, not only torchrun: torchrun starts each worker in a session of its own, and a worker hung on
its way out (torch 2.13's teardown deadlock, since avoided by the trainer) outlived a killed torchrun for
an hour and more."""
from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from elastic_chaos.host import procs

REPO = Path(__file__).resolve().parent.parent
TIMEOUT_S = 300.0


def train(folder: Path, max_steps: int, *args: str, every: int = 20, nproc: int = 2) -> None:
    """Train the reference trainer at world size ``nproc`` to ``max_steps``, saving every ``every`` steps
    into ``folder`` (its agent's folder beside it); fails with its output when it fails or overruns."""
    tag = f"tests-reference/{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
           f"--log-dir={folder.parent / (folder.name + '.torchelastic')}",   # not the system temp folder
           "-m", "elastic_chaos.trainer.train", "--max-steps", str(max_steps), "--checkpoint-every", str(every),
           "--step-time", "0", "--spot-notice", "off", "--checkpoint-dir", str(folder), *args]
    env = {**os.environ, "PYTHONPATH": str(REPO), procs.TAG_VAR: tag}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        procs.kill_tree(tag, first=proc.pid)
        out, err = proc.communicate()
        raise AssertionError(f"the reference run to step {max_steps} did not end within {TIMEOUT_S:g}s (stopped "
                             f"by its tag):\n{out[-2000:]}{err[-2000:]}") from None
    assert proc.returncode == 0, out[-2000:] + err[-2000:]
