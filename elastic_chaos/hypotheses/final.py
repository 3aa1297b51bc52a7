"""``--compare-final``: the job that recovered is the job that would have existed without the fault.

A hypothesis that takes :class:`FinalStateOptions` runs its job to a fixed final step
(a checkpoint step of the reference trainer), and :func:`check_final_state` then
trains a clean reference run of the same trainer, arguments and seed to that step
without any fault, and compares the two final checkpoints tensor by tensor
(elastic_chaos.analysis.final_state). The verdict's ``final-state`` check carries the
one sentence every view prints: "final state: equal (...)" or what diverged first, in
which state, with the likely cause; the run's report.json carries the whole comparison
as its ``final_state`` block.

The reference run is ``torchrun --standalone`` on this machine with the nodes' python:
on CPU/gloo a DDP step's result does not depend on which node a rank runs on. Which
clean run (elastic_chaos.analysis.schedule.Reference):

- a job that loses a node and has it replaced runs at a fixed size (``--nodes MAX:MAX``),
  so its world never changes: the reference is one clean run at that world size;
- a job in an elastic range that trains on without the lost node (``--no-replace``)
  trains at another world size from the save it resumed from: the reference replays the
  schedule the timeline shows (world size W1 to step S1, then W2 from the reference's own
  step-S1 save, ...; elastic_chaos.analysis.schedule.trained_schedule). The reference
  trainer's step depends only on the checkpoint it resumed from and the world size, so a
  job that recovered correctly ends bitwise equal to that replay too.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from elastic_chaos.analysis.final_state import (
    CHECK,
    FOLDER,
    ComparerFailed,
    FinalState,
    compare_final,
    trace_back,
)
from elastic_chaos.analysis.schedule import Leg, Reference, ReferenceKind, ScheduleUnknown, trained_schedule
from elastic_chaos.errors import SpecError
from elastic_chaos.hypotheses import final_script
from elastic_chaos.hypotheses.api import Trial
from elastic_chaos.hypotheses.clean_run import run_tagged
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
                                        "check. A job whose lost node is replaced runs at a fixed size (--nodes "
                                        "MAX:MAX) and is compared with a clean run at that size; with --no-replace "
                                        "in an elastic range (--nodes 1:2) the clean run replays the world sizes "
                                        "the job trained at, from the same saves, twice, and the job may differ by "
                                        "what the two replays differ by. Both are bitwise on CPU/gloo. A "
                                        "script (after `--`) trains to its own end, and its clean twin, the same "
                                        "command run again without the fault, is compared at what --checkpoint "
                                        "names")
    final_step: int | None = option(None, "the step both runs train to (a multiple of --checkpoint-every; default "
                                          "the third checkpoint after the fault's step)", minimum=1,
                                    maximum=MAX_STEPS)
    final_tolerance: float = option(0.0, "largest absolute difference allowed per floating value in the final-"
                                         "state comparison (default 0: bitwise)", minimum=0, maximum=1e9)

    def __post_init__(self) -> None:
        validate(self)


def prepare(t: Trial, opts: FinalStateOptions, *, loses_a_node: bool = True, fault_s: float = 0.0,
            fault_steps: int = 0) -> JobSpec:
    """The job to start (compare_final): the trial's, stopping at the final step, at a fixed size where the
    world is to stay whole, in its own elastic range where ``loses_a_node`` and nodes are not replaced (the
    reference then replays the world sizes it trained at); else the trial's job as it is. SpecError, before
    anything starts, where the comparison cannot be made (a fixed-size job that loses a node for good cannot
    train on). ``fault_s``: how long the job trains on between the injection and its end (a spot notice), and
    ``fault_steps`` the steps the faults span (repeated kills), which the final step must leave room for."""
    job = t.job
    if not opts.compare_final:
        return job
    shrinks = loses_a_node and not t.replaces_nodes
    if job.script:   # its clean twin, run to its own end (elastic_chaos.hypotheses.final_script)
        return final_script.prepare(t, shrinks=shrinks)
    _checkpoint_dir(t)   # refused before the job starts where its saves cannot be read here
    if shrinks and job.min_nodes == job.max_nodes:
        raise SpecError(f"--compare-final with --no-replace: a job of --nodes {job.nodes} cannot train on without "
                        "the lost node; give it an elastic range (--nodes 1:2; the clean reference then replays "
                        "the world sizes it trained at) or drop --no-replace")
    during = math.ceil(fault_s / max(job.step_time, MIN_STEP_S)) + fault_steps
    final = final_step(t, opts, during)
    made = elastic_job(job, final) if shrinks else fixed_job(job, final)
    t.settings = dataclasses.replace(t.settings, job=made)
    return made


def fixed_job(job: JobSpec, final: int) -> JobSpec:
    """``job`` at its largest size, no smaller (a lost node's replacement restores the same world), stopping
    at step ``final``."""
    return dataclasses.replace(job, nodes=f"{job.max_nodes}:{job.max_nodes}", start_nodes=None,
                               trainer_args=(*job.trainer_args, "--max-steps", str(final)))


def elastic_job(job: JobSpec, final: int) -> JobSpec:
    """``job`` in its own node range, stopping at step ``final``."""
    return dataclasses.replace(job, trainer_args=(*job.trainer_args, "--max-steps", str(final)))


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
    if t.job.script:
        return final_script.check(t, tolerance=opts.final_tolerance, python=_python(t), known_cause=known_cause)
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
        reference = pick_reference(t, final)
        made = run_reference(t, reference, out)
        spread, tolerance = None, opts.final_tolerance
        if reference.kind is ReferenceKind.SCHEDULE_REPLAY:   # the world changed: a replay's own noise is allowed
            spread, tolerance = replay_spread(t, reference, made, out, opts.final_tolerance)
        state = compare_final(made, judged, tolerance=tolerance, python=_python(t))
        state = trace_back(state, made.parent, folder, tolerance=tolerance, python=_python(t))
    except (SpecError, ComparerFailed, ScheduleUnknown) as exc:
        t.verdict.fail(f"final state: not compared: {exc}", check=CHECK)
        return None
    state = state.with_reference(reference)
    if spread is not None:
        state = state.with_clean_spread(spread)
    if known_cause is not None:
        state = state.with_cause(known_cause)
    (out / "comparison.json").write_text(json.dumps(state.to_json(), indent=2) + "\n", encoding="utf-8")
    t.run.final_state = state   # report.json's final_state block, rendered by every view from there
    t.verdict.require(state.equal, state.describe(), check=CHECK)
    return state


SECOND_REPLAY = "second-replay"
"""Where, in the final-state folder, the schedule's second clean replay trains."""


def replay_spread(t: Trial, reference: Reference, made: Path, out: Path, tolerance: float) -> tuple[float, float]:
    """Train the schedule's replay a second time and compare the two clean replays: the spread they show
    (0.0: bitwise equal, as the reference trainer on CPU/gloo) and the tolerance to compare the job with, the
    larger of that and ``tolerance``. A job whose world changed trains differently from a full-size run; its
    replay is the reference, and what two replays differ by (NCCL's reduction order, a GPU's kernels) is
    noise the job may differ by too. SpecError where they differ in a value no tolerance covers."""
    again = run_reference(t, reference, out / SECOND_REPLAY)
    twice = compare_final(made, again, tolerance=0.0, python=_python(t))
    if twice.not_numeric and twice.first is not None:
        raise SpecError(f"two clean replays of the schedule differ in {twice.not_numeric} value(s) no tolerance "
                        f"covers ({twice.first.describe()}): the reference does not replay, so no comparison "
                        "can tell the job's recovery from its noise")
    spread = twice.max_abs_diff or 0.0
    return spread, max(tolerance, spread)


def pick_reference(t: Trial, final: int) -> Reference:
    """The clean run to compare with: one at the full world for a fixed-size job (:func:`prepare` made its world
    stay whole), else a replay of the legs the job's committed history trained (one leg: a clean run at that
    size). ScheduleUnknown where the timeline does not say them."""
    if t.job.min_nodes == t.job.max_nodes:
        return Reference.of((Leg(t.full_world, 0, final),))
    return Reference.of(trained_schedule(t.run.timeline.events(), final))


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


def _checkpoint_dir(t: Trial) -> Path:
    """The job's checkpoint folder as this machine reads it: the local platform's, or the local cluster's
    shared host-path volume (``Platform.checkpoint_folder``). SpecError where the platform keeps it elsewhere."""
    folder = t.run.platform.checkpoint_folder()
    if folder is None:
        raise SpecError(f"--compare-final reads the job's checkpoints on this machine; the {t.run.platform.name} "
                        "platform does not keep them here (the local platform and the local cluster's shared "
                        "host-path volume do)")
    return folder.here


def _python(t: Trial) -> str | None:
    python = getattr(t.run.platform.node_pool(), "python", None)
    return python if isinstance(python, str) else None


def run_reference(t: Trial, reference: Reference, out: Path) -> Path:
    """Train the clean reference's legs in ``out``, without a fault; its final checkpoint. SpecError when it fails."""
    # its --max-steps, --checkpoint-every and --step-time are overridden leg by leg (argparse: the last wins)
    env = {**os.environ, **t.job.node_env()}
    return train_legs(reference.legs, python=_python(t) or sys.executable, args=t.job.trainer_command_args(),
                      env=env, out=out, tag=f"{t.job.run_id}/reference", every=t.job.checkpoint_every,
                      save_of=lambda folder, step: final_save(folder, step, t.job))


def train_legs(legs: tuple[Leg, ...], *, python: str, args: list[str], env: dict[str, str], out: Path, tag: str,
               every: int, save_of: Callable[[Path, int], Path]) -> Path:
    """Train the reference trainer's ``legs`` one after another in ``out/reference-checkpoints`` (each leg
    ``torchrun --standalone --nproc-per-node=WORLD`` to its end, resuming from the previous leg's save there);
    the last leg's save. A leg that ends off the checkpoint steps (a resume from an emergency save) saves at
    its end alone. Blocks up to :data:`REFERENCE_TIMEOUT_S` a leg; SpecError when a leg fails."""
    ckpts = out / "reference-checkpoints"
    out.mkdir(parents=True, exist_ok=True)
    log = out / "reference.log"
    made = ckpts
    with open(log, "w", encoding="utf-8") as f:
        for i, leg in enumerate(legs):
            if i:
                f.write(f"elastic-chaos: leg {i + 1} of {len(legs)}: world size {leg.world} from the save of step "
                        f"{leg.start} to step {leg.end}\n")
                f.flush()
            made = save_of(ckpts, leg.end)
            code = _train_leg(leg_command(leg, python=python, args=args, every=every, out=out), env, tag, made, f, out)
            if code not in (0, None) or not is_saved(made):
                raise SpecError(f"the clean reference run failed (exit {code}; log: {log})")
    return made


def leg_command(leg: Leg, *, python: str, args: list[str], every: int, out: Path) -> list[str]:
    """The torchrun of one leg of the reference, saving in ``out/reference-checkpoints``: ``args`` with its
    --max-steps, --checkpoint-every and --step-time overridden (argparse: the last wins). A leg that ends
    off the checkpoint steps (the job resumed from an emergency save) saves every ``leg.end`` steps: at its
    end alone."""
    return [python, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={leg.world}",
            # its agent's folder beside its log (torchrun's default is one in the system temp folder)
            f"--log-dir={out / 'reference.torchelastic'}", "-m", "elastic_chaos.trainer.train", *args,
            "--max-steps", str(leg.end), "--checkpoint-every", str(every if leg.end % every == 0 else leg.end),
            "--checkpoint-dir", str(out / "reference-checkpoints"), "--step-time", "0", "--spot-notice", "off"]


def _train_leg(cmd: list[str], env: dict[str, str], tag: str, made: Path, f: IO[str], out: Path) -> int | None:
    """One torchrun of the reference: its exit code (None: it saved ``made`` but did not exit)."""
    code = run_tagged(cmd, env=env, tag=tag, cwd=out, log=f, wait=lambda proc: _wait_reference(proc, made))
    if code is None:   # said in its log, which the check names
        f.write(f"elastic-chaos: the reference run saved {made.name} but had not exited {EXIT_GRACE_S:g}s later "
                "(a worker hung on its way out); stopped, its save kept\n")
        f.flush()
    return code


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
