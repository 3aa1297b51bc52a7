"""``--compare-final`` for a user's training script: its clean twin.

The reference trainer stops at a final step the toolkit gives it (``--max-steps``); a user's script
stops where it stops. So for a script the judged run is the job trained to its own end with the fault,
and the reference is its *clean twin*: the same script and arguments (its seed among them) run again
without any fault, at the job's full world size (``torchrun --standalone`` on this machine, the nodes'
python), in a working directory of its own, to its own end. Each run's final save is what
``--checkpoint`` names in its working directory (for a glob, the newest match), compared tensor by
tensor (elastic_chaos.analysis.final_state: torch.save files and DCP folders alike).

What it needs, refused before the job starts (SpecError, exit 2) where missing:

- ``--checkpoint``, relative to the workdir: the twin's saves land in its own folder (an absolute path
  would be the job's own);
- a world that stays whole: a fixed-size job whose lost node is replaced (replaying the world sizes
  a shrunken job trained at needs the reference trainer's control of its steps);
- the shared workdir (with --node-local-workdir each node's saves are its own).

A script whose own clean runs differ (unseeded, nondeterministic) diverges here too; the final-state
sentence names that beside the likely resume bug, and two clean runs compared with ``elastic-chaos
compare-final A B`` tell which.
"""
from __future__ import annotations

import dataclasses
import glob
import os
import subprocess
import sys
import time
from pathlib import Path

from elastic_chaos.analysis.final_state import CHECK, FOLDER, ComparerFailed, FinalState, compare_final
from elastic_chaos.analysis.schedule import Leg, Reference, ReferenceKind
from elastic_chaos.errors import SpecError
from elastic_chaos.events import ProgressEv
from elastic_chaos.hypotheses.api import Trial
from elastic_chaos.hypotheses.clean_run import run_tagged
from elastic_chaos.spec import JobSpec, locate_script

TWIN_TIMEOUT_S = 1800.0
"""The most the clean twin may take: a user's script trains for as long as it trains."""
NONDETERMINISTIC = ("a script that does not train the same twice (an unseeded RNG, a nondeterministic kernel: "
                    "two clean runs compared with `elastic-chaos compare-final A B` tell)")
"""Said beside the state class' likely cause: the twin is the script's own clean run, not a known-good one."""


def prepare(t: Trial, *, shrinks: bool) -> JobSpec:
    """The job to start for a script with ``--compare-final``: at its largest size, no smaller (a lost node's
    replacement restores the same world). SpecError where the twin cannot be made (see the module)."""
    job = t.job
    checkpoint = job.observe.checkpoint
    if not checkpoint:
        raise SpecError("--compare-final on a script compares its final save with its clean twin's: name it with "
                        "--checkpoint (the file, folder or glob the script saves to, relative to --workdir)")
    if Path(checkpoint).is_absolute():
        raise SpecError(f"--checkpoint {checkpoint} is absolute: the clean twin would save over the job's own; "
                        "give it relative to --workdir (where the script runs)")
    if job.node_local_workdir:
        raise SpecError("--compare-final with --node-local-workdir: each node's saves are its own, there is no one "
                        "final save to compare; drop one of them")
    if shrinks:
        raise SpecError("--compare-final on a script needs a world that stays whole (its lost node replaced): the "
                        "clean twin cannot replay the world sizes a shrunken job trained at; drop --no-replace")
    made = dataclasses.replace(job, nodes=f"{job.max_nodes}:{job.max_nodes}", start_nodes=None)
    t.settings = dataclasses.replace(t.settings, job=made)
    return made


def final_save(workdir: Path, checkpoint: str) -> Path | None:
    """What ``checkpoint`` names in ``workdir``: the path, or for a glob its newest match (modified last);
    None when nothing is there."""
    if not glob.has_magic(checkpoint):
        path = workdir / checkpoint
        return path if path.exists() else None
    matches = [Path(m) for m in glob.glob(str(workdir / checkpoint))]
    return max(matches, key=lambda p: p.stat().st_mtime_ns) if matches else None


def check(t: Trial, *, tolerance: float, python: str | None, known_cause: str | None = None) -> FinalState | None:
    """Wait for the script to end, run its clean twin, compare the two final saves; record the ``final-state``
    check. Blocks up to the trial's timeout for the job and :data:`TWIN_TIMEOUT_S` for the twin.
    ``known_cause``: what the hypothesis knows made a divergence (its fault), said instead of a guess."""
    job = t.job
    assert job.observe.checkpoint is not None
    outcome = t.run.wait_for_job_end(timeout=t.opts.timeout_s)
    if outcome.failed:
        t.verdict.fail(f"final state: not compared: the job did not finish ({'; '.join(outcome.reasons)})",
                       check=CHECK)
        return None
    workdir = t.run.platform.job_workdir()
    judged = final_save(workdir, job.observe.checkpoint) if workdir is not None else None
    if judged is None:
        t.verdict.fail(f"final state: not compared: the job ended and --checkpoint {job.observe.checkpoint} names "
                       f"nothing in its workdir {workdir}", check=CHECK)
        return None
    out = t.run.report_dir / FOLDER
    t.run.phase("final_state", why="the clean twin trains")   # the timeline says why it waits
    world = job.max_nodes * job.nproc_per_node
    try:
        twin_dir = run_twin(t, world, out, python=python)
        made = final_save(twin_dir, job.observe.checkpoint)
        if made is None:
            raise SpecError(f"the clean twin ended and --checkpoint {job.observe.checkpoint} names nothing in its "
                            f"workdir {twin_dir} (log: {out / 'twin.log'})")
        state = compare_final(made, judged, tolerance=tolerance, python=python)
    except (SpecError, ComparerFailed) as exc:
        t.verdict.fail(f"final state: not compared: {exc}", check=CHECK)
        return None
    steps = t.run.timeline.select(ProgressEv.STEP)
    last = max((e.data.step for e in steps if e.data.step is not None), default=0)
    state = state.with_reference(Reference(ReferenceKind.CLEAN_TWIN, (Leg(world, 0, last),)))
    if known_cause is not None:
        state = state.with_cause(known_cause)
    elif state.first is not None:
        state = state.with_cause(f"{state.first.cause}; or {NONDETERMINISTIC}")
    t.run.final_state = state
    t.verdict.require(state.equal, state.describe(), check=CHECK)
    return state


def twin_command(job: JobSpec, world: int, *, python: str, out: Path) -> list[str]:
    """The clean twin: ``torchrun --standalone`` of the job's script and arguments at ``world`` ranks."""
    shim = ["-m", "elastic_chaos.trainer.launch", "--backend", job.backend.value] if job.backend else []
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={world}",
            f"--log-dir={out / 'twin.torchelastic'}", *shim, *locate_script(job.script)]


def _wait_twin(proc: subprocess.Popen[bytes]) -> int | None:
    """The twin's exit code; None when it runs past :data:`TWIN_TIMEOUT_S`."""
    deadline = time.monotonic() + TWIN_TIMEOUT_S
    while (code := proc.poll()) is None and time.monotonic() < deadline:
        time.sleep(0.5)
    return code


def run_twin(t: Trial, world: int, out: Path, *, python: str | None) -> Path:
    """Run the clean twin to its end in ``out/twin-workdir``; that folder. SpecError when it fails or takes
    longer than :data:`TWIN_TIMEOUT_S`."""
    workdir = out / "twin-workdir"
    workdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **t.job.node_env(), "ELASTIC_CHAOS_SHARED_DIR": str(workdir)}
    cmd = twin_command(t.job, world, python=python or sys.executable, out=out)
    log = out / "twin.log"
    with open(log, "w", encoding="utf-8") as f:
        code = run_tagged(cmd, env=env, tag=f"{t.job.run_id}/twin", cwd=workdir, log=f, wait=_wait_twin)
    if code is None:
        raise SpecError(f"the clean twin did not finish in {TWIN_TIMEOUT_S:g}s (log: {log})")
    if code != 0:
        raise SpecError(f"the clean twin failed (exit {code}; log: {log})")
    return workdir
