"""``--compare-final``: the job that recovered is the job that would have existed without the fault.

A hypothesis that takes :class:`FinalStateOptions` runs its job to a fixed final step
(a checkpoint step of the reference trainer), and :func:`check_final_state` then
trains a clean reference run of the same trainer, arguments and seed to that step at
the job's full world size without any fault, and compares the two final checkpoints
tensor by tensor (elastic_chaos.analysis.final_state). The verdict's ``final-state``
check carries the one sentence every view prints: "final state: equal (...)" or
what diverged first, in which state, with the likely cause.

The reference run is ``torchrun --standalone`` on this machine with the nodes' python:
on CPU/gloo a DDP step's result does not depend on which node a rank runs on, so a
job whose world size never changed must end bitwise equal to it. A job that trained
at another world size on the way (an elastic range whose lost node was not replaced in
time) legitimately trains differently: the check says so, and compares within
``--final-tolerance``.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from elastic_chaos.analysis.final_state import (
    CHECK,
    FOLDER,
    ComparerFailed,
    FinalState,
    compare_final,
    trace_back,
)
from elastic_chaos.errors import SpecError
from elastic_chaos.events import ProgressEv
from elastic_chaos.host import lifeline, procs
from elastic_chaos.hypotheses.api import Trial
from elastic_chaos.options import MAX_STEPS, option, validate
from elastic_chaos.spec import JobSpec
from elastic_chaos.waiting import eventually

MIN_STEP_S = 0.01
"""A step time assumed where the job's is 0 (unpaced), to turn a fault's seconds into steps."""
REFERENCE_TIMEOUT_S = 600.0
"""The most a clean reference run may take (the reference trainer at step time 0: seconds)."""
EXIT_GRACE_S = 30.0
"""How long the reference run may take to exit once its final save is whole."""


@dataclass(frozen=True)
class FinalStateOptions:
    compare_final: bool = option(False, "after the verdict's own checks, train the job to its final step and compare "
                                        "its final checkpoint tensor by tensor with a clean run's of the same seed "
                                        "(model, optimizer, LR scheduler, RNG, data position): the final-state "
                                        "check. The job runs at a fixed size (--nodes MAX:MAX) so a replaced node "
                                        "restores the same world and the comparison is bitwise")
    final_step: int | None = option(None, "the step both runs train to (a multiple of --checkpoint-every; default "
                                          "the third checkpoint after the fault's step)", minimum=1,
                                    maximum=MAX_STEPS)
    final_tolerance: float = option(0.0, "largest absolute difference allowed per floating value in the final-"
                                         "state comparison (default 0: bitwise)", minimum=0, maximum=1e9)

    def __post_init__(self) -> None:
        validate(self)


def prepare(t: Trial, opts: FinalStateOptions, *, loses_a_node: bool = True, fault_s: float = 0.0,
            fault_steps: int = 0) -> JobSpec:
    """The job to start: the trial's, at a fixed size and stopping at the final step (compare_final), else as
    it is. SpecError, before anything starts, where the comparison cannot be made (``loses_a_node``: the
    fault takes a node away, so the fixed-size job needs it replaced). ``fault_s``: how long the job
    trains on between the injection and its end (a spot notice), and ``fault_steps`` the steps the faults
    span (repeated kills), which the final step must leave room for."""
    job = t.job
    if not opts.compare_final:
        return job
    if job.script:
        raise SpecError("--compare-final runs the reference trainer's clean twin; for your own script, compare "
                        "its final saves with `elastic-chaos compare-final REFERENCE RUN`")
    if loses_a_node and not t.replaces_nodes:
        raise SpecError("--compare-final runs the job at a fixed size, which trains on only once the lost node is "
                        "replaced: drop --no-replace")
    during = math.ceil(fault_s / max(job.step_time, MIN_STEP_S)) + fault_steps
    fixed = fixed_job(job, final_step(t, opts, during))
    t.settings = dataclasses.replace(t.settings, job=fixed)
    return fixed


def fixed_job(job: JobSpec, final: int) -> JobSpec:
    """``job`` at its largest size, no smaller (a lost node's replacement restores the same world), stopping
    at step ``final``."""
    return dataclasses.replace(job, nodes=f"{job.max_nodes}:{job.max_nodes}", start_nodes=None,
                               trainer_args=(*job.trainer_args, "--max-steps", str(final)))


def final_step(t: Trial, opts: FinalStateOptions, during: int = 0) -> int:
    extra = int(getattr(opts, "extra_steps", 0))   # a hypothesis that trains on after its recovery (kill-node)
    return pick_final_step(t.steady_steps + during + extra, t.job.checkpoint_every, opts.final_step)


def job_final_step(job: JobSpec) -> int:
    """The final step :func:`prepare` gave the job (its last ``--max-steps``)."""
    args = list(job.trainer_args)
    at = len(args) - 1 - args[::-1].index("--max-steps")
    return int(args[at + 1])


def pick_final_step(last_waited: int, every: int, given: int | None) -> int:
    """The step both runs train to: ``given`` (a checkpoint step past ``last_waited``, the last step the
    hypothesis waits for), else the third checkpoint step past it. SpecError for a ``given`` that is not."""
    if given is None:
        return (last_waited // every + 3) * every
    if given % every or given <= last_waited:
        raise SpecError(f"--final-step {given}: a multiple of --checkpoint-every {every} (the reference trainer "
                        f"saves there) after step {last_waited}, the last the hypothesis waits for")
    return given


def check_final_state(t: Trial, opts: FinalStateOptions, *, known_cause: str | None = None) -> FinalState | None:
    """Wait for the job's final checkpoint, train the clean reference, compare; record the ``final-state``
    check. Blocks up to the trial's timeout for the job, and :data:`REFERENCE_TIMEOUT_S` for the reference.
    ``known_cause``: what the hypothesis knows made a divergence (its fault), said instead of a guess."""
    if not opts.compare_final:
        return None
    final = job_final_step(t.job)
    folder = _checkpoint_dir(t)
    judged = final_save(folder, final, t.job)
    t.run.wait_for_step(final, timeout=t.opts.timeout_s)
    if not eventually(lambda: is_saved(judged), timeout_s=t.opts.timeout_s, interval_s=0.5):
        t.verdict.fail(f"final state: not compared: the job reached step {final} but its checkpoint {judged} "
                       f"did not appear within {t.opts.timeout_s:g}s", check=CHECK)
        return None
    out = t.run.report_dir / FOLDER
    t.run.phase("final_state", step=final)   # the clean reference trains now: the timeline says why it waits
    try:
        reference = run_reference(t, final, out)
        state = compare_final(reference, judged, tolerance=opts.final_tolerance, python=_python(t))
        state = trace_back(state, reference.parent, folder, tolerance=opts.final_tolerance, python=_python(t))
    except (SpecError, ComparerFailed) as exc:
        t.verdict.fail(f"final state: not compared: {exc}", check=CHECK)
        return None
    state = state.with_note(_note(t, final))
    if known_cause is not None:
        state = state.with_cause(known_cause)
    (out / "comparison.json").write_text(json.dumps(state.to_json(), indent=2) + "\n", encoding="utf-8")
    t.verdict.require(state.equal, state.describe(), check=CHECK)
    return state


def final_save(folder: Path, step: int, job: JobSpec) -> Path:
    """Where the reference trainer saves ``step`` in ``folder``: its file, or with ``--checkpoint-format dcp``
    its step folder (elastic_chaos.trainer.dcp_checkpoint); the last such argument wins, as in argparse."""
    args = job.trainer_command_args()   # --checkpoint-format from the job's option or its trainer arguments
    given = [a.split("=", 1)[1] if "=" in a else args[i + 1] if i + 1 < len(args) else ""
             for i, a in enumerate(args) if a.split("=", 1)[0] == "--checkpoint-format"]
    dcp = bool(given) and given[-1] == "dcp"
    return folder / (f"step-{step:08d}" if dcp else f"ckpt-{step:08d}.pt")


def is_saved(save: Path) -> bool:
    """Whether the save at ``save`` is complete: a file in place, or a DCP folder with its ``.metadata``."""
    return save.is_file() or (save / ".metadata").is_file()


def _note(t: Trial, final: int) -> str:
    sizes = sorted({int(e.data.world_size) for e in t.run.timeline.select(ProgressEv.STEP)
                    if e.data.world_size is not None})
    trained = " and ".join(map(str, sizes)) or "unknown"
    return (f"reference: a clean run to step {final} at world size {t.full_world}, same trainer arguments and seed; "
            f"the faulted run trained at world size {trained}")


def _checkpoint_dir(t: Trial) -> Path:
    folder = getattr(t.run.platform, "checkpoint_dir", None)
    if not isinstance(folder, Path):
        raise SpecError(f"--compare-final reads the job's checkpoints on this machine; the {t.run.platform.name} "
                        "platform does not keep them here (the local platform does)")
    return folder


def _python(t: Trial) -> str | None:
    python = getattr(t.run.platform.node_pool(), "python", None)
    return python if isinstance(python, str) else None


def run_reference(t: Trial, final: int, out: Path) -> Path:
    """Train the clean reference to ``final`` in ``out``; its final checkpoint. SpecError when it fails."""
    ckpts = out / "reference-checkpoints"
    out.mkdir(parents=True, exist_ok=True)
    args = t.job.trainer_command_args()   # its --max-steps and --step-time are overridden below
    # its agent's folder beside its log (torchrun's default is one in the system temp folder, never removed)
    cmd = [_python(t) or sys.executable, "-m", "torch.distributed.run", "--standalone",
           f"--nproc-per-node={t.full_world}", f"--log-dir={out / 'reference.torchelastic'}",
           "-m", "elastic_chaos.trainer.train", *args,
           "--max-steps", str(final), "--checkpoint-dir", str(ckpts), "--step-time", "0", "--spot-notice", "off"]
    root = str(Path(__file__).resolve().parents[2])   # the trainer this toolkit ships, as the nodes import it
    # tagged as the run's, as its nodes are (elastic_chaos.host.procs): torchrun starts each worker in a session
    # of its own, out of reach of torchrun's group; the tag finds them (and a dead runner's reaper does too)
    tag = f"{t.job.run_id}/reference"
    env = {**os.environ, **t.job.node_env(), procs.TAG_VAR: tag,
           "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    log = out / "reference.log"
    with open(log, "w", encoding="utf-8") as f:
        # tied to this process (lifeline): the runner's death stops torchrun; a timeout, a Ctrl-C or a worker
        # hung on its way out stops torchrun and every worker by their tag, never leaving one training
        proc = lifeline.popen(cmd, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=out,
                              start_new_session=True)
        made = final_save(ckpts, final, t.job)
        try:
            code = _wait_reference(proc, made)
        finally:
            # before: torchrun's group was killed, and a hung worker, in a session of its own, trained on
            procs.kill_tree(tag, first=proc.pid if proc.poll() is None else None)
            proc.wait(timeout=30)
        if code is None:   # said in its log, which the check names
            f.write(f"elastic-chaos: the reference run saved step {final} but had not exited "
                    f"{EXIT_GRACE_S:g}s later (a worker hung on its way out); stopped, its save compared\n")
    if code not in (0, None) or not is_saved(made):
        raise SpecError(f"the clean reference run failed (exit {code}; log: {log})")
    return made


def _wait_reference(proc: subprocess.Popen[bytes], made: Path) -> int | None:
    """The reference run's exit code; None when it saved its final step but did not exit within
    EXIT_GRACE_S after (a gloo worker can hang in its process group's destructor at exit, about once
    in five runs on a loaded machine): its final save is whole, and the comparison needs nothing
    else. SpecError past REFERENCE_TIMEOUT_S."""
    deadline = time.monotonic() + REFERENCE_TIMEOUT_S
    saved_at: float | None = None
    while (code := proc.poll()) is None:
        now = time.monotonic()
        if saved_at is None and is_saved(made):
            saved_at = now
        if saved_at is not None and now - saved_at > EXIT_GRACE_S:
            return None
        if now > deadline:
            raise SpecError(f"the clean reference run did not finish in {REFERENCE_TIMEOUT_S:g}s")
        time.sleep(0.5)
    return code
