"""Tuning advice about the workers' side of a recovery: the settings that kept a failed
worker alive, each with what it cost in this run (elastic_chaos.analysis.advice.rendezvous has the rule).

- collective timeout: a silent peer (partition, hung host) is found out only when a
  survivor's collective times out; detection waits for it (the reference trainer's
  ``--pg-timeout``; torch's default 30 min on gloo, 10 min on NCCL).
- NCCL's dump wait: after a collective failed, ProcessGroupNCCL's watchdog signals a
  debug dump and waits ``TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC`` (60 s) before it takes
  the worker down; its agent sees no failure until then (the ``exit`` phase).
- NCCL's heartbeat: a watchdog stuck in a CUDA/NCCL call is found out after
  ``TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC`` (480 s).
- the agent's shutdown wait: a worker that ignores SIGTERM (blocked in a failed
  collective) is killed only after 30 s (the ``shutdown`` phase).

Figures measured elsewhere are quoted with where they come from; the cost is always
this run's.
"""
from __future__ import annotations

from typing import Any

from elastic_chaos.analysis.advice.evidence import RunEvidence
from elastic_chaos.analysis.advice.finding import Finding
from elastic_chaos.analysis.phases import collective_error, shutdown_wait
from elastic_chaos.analysis.result import FaultResult
from elastic_chaos.analysis.timeouts import TRAINER_PG_TIMEOUT_S
from elastic_chaos.events import AgentEv, Event, ProgressEv, first
from elastic_chaos.torch_defaults import AGENT_SHUTDOWN_WAIT_S, NCCL_DUMP_WAIT_MS, NCCL_HEARTBEAT_S

H100_NOTE = ("measured on one H100 in an earlier session (issue 16): kill-node with the fast rendezvous preset "
             "regained in 70.2 s with the 60 s default, 16.6 s with 1000 ms")


def worker_findings(run: RunEvidence, i: int, fault: FaultResult) -> list[Finding]:
    """The findings of this module for fault ``i`` (before the share/cost filter)."""
    found = (_collective_timeout(run, i, fault), _dump_wait(run, i, fault), _heartbeat(run, i, fault),
             _shutdown(run, i, fault))
    return [f for f in found if f is not None]


def _finding(i: int, phase: str, setting: str, cost: float, text: str, change: tuple[str, ...] = (),
             torchrun: str | None = None, saved: float | None = None) -> Finding:
    return Finding(i, phase, setting, cost, text, change=change, torchrun=torchrun, saved_s=saved)


def _job(run: RunEvidence, key: str) -> Any:
    return getattr(run.result.job, key, None)


def _error(run: RunEvidence, fault: FaultResult) -> Event | None:
    return collective_error(run.events, fault.measured_from, fault.target)


def _collective_timeout(run: RunEvidence, i: int, fault: FaultResult) -> Finding | None:
    detect = fault.phases.get("detect")
    err = _error(run, fault)
    if detect is None or err is None or err.data.cause != "timeout":
        return None
    given = _job(run, "pg_timeout_s")
    timeout = float(given) if isinstance(given, (int, float)) else TRAINER_PG_TIMEOUT_S
    if detect < 0.5 * timeout:
        return None
    origin = "as set for this job" if given is not None else "the reference trainer's default; a script's own " \
                                                               "may differ, torch's is 30 min on gloo"
    shorter = max(1.0, round(timeout / 2))
    text = (f"{detect:.1f} s before a survivor noticed: {fault.target} went silent and nobody closed a "
            f"connection, so {err.node}'s collective waited out its timeout ({timeout:g} s, {origin}). "
            f"A timeout of {shorter:g} s would have found it out about {timeout - shorter:.0f} s sooner; "
            "a collective slower than the timeout (a large all-reduce, an uneven data loader) then fails the "
            "job, so measure the slowest step's collectives first (the fast preset uses 10 s).")
    job = run.result.job
    if job is not None and job.script:  # a script's timeout is its own (init_process_group's timeout=)
        text += f" In the script: init_process_group(..., timeout=timedelta(seconds={shorter:g}))."
        return _finding(i, "detect", "collective timeout (--pg-timeout)", detect, text)
    return _finding(i, "detect", "collective timeout (--pg-timeout)", detect, text,
                    change=("--pg-timeout", f"{shorter:g}"), torchrun=f"the trainer's own --pg-timeout {shorter:g}",
                    saved=max(0.0, min(detect, timeout - shorter)))


def _dump_wait(run: RunEvidence, i: int, fault: FaultResult) -> Finding | None:
    exit_s = fault.phases.get("exit")
    err = _error(run, fault)
    if exit_s is None or err is None:
        return None
    given = _job(run, "nccl_dump_wait_ms")
    wait_ms = int(given) if isinstance(given, int) else NCCL_DUMP_WAIT_MS
    dumped = first(run.events, ProgressEv.NCCL_DUMP, node=err.node, after=err.t - 1.0)
    if dumped is None and err.data.via != "nccl":
        return None  # not NCCL: a gloo worker exits as soon as its collective raises
    if exit_s < 0.5 * wait_ms / 1000:
        return None
    f = fault.measured_from
    exited = first(run.events, AgentEv.WORKER_FAILED, node=err.node, after=f)
    down = f" (its agent saw the worker fail at +{exited.t - f:.1f} s)" if exited is not None else ""
    origin = "as set for this job" if given is not None else "torch's default"
    # The phase starts at detection; a collective that fails later (a timeout after a freeze) leaves the
    # worker waiting on it first. Only the time after the failure is the dump wait's and the teardown's.
    after_failure = exited.t - err.t if exited is not None and exited.t >= err.t else exit_s
    before = exit_s - after_failure
    waited = (f" The phase's first {before:.1f} s were the wait for the collective to fail, not the exit."
              if before >= 1.0 else "")
    text = (f"{after_failure:.1f} s for the worker on {err.node} to exit after its collective failed "
            f"(+{err.t - f:.1f} s): NCCL's watchdog signalled a debug dump and waited "
            f"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC={wait_ms} ({origin}) before it took the process down{down}: "
            f"until then no agent knew.{waited} ")
    wait_s = wait_ms / 1000
    if wait_s > 1.0:
        faster = max(0.0, after_failure - wait_s) + 1.0
        text += (f"With 1000 (the fast preset) this exit would have taken about {faster:.1f} s, "
                 f"{after_failure - faster:.0f} s less ({H100_NOTE}); the flight recorder then has 1 s to write "
                 "what hung.")
        return _finding(i, "exit", "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", exit_s, text,
                        change=("--nccl-dump-wait-ms", "1000"), torchrun="TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC=1000",
                        saved=after_failure - faster)
    text += f"That is already short; the other {max(0.0, after_failure - wait_s):.1f} s were the teardown itself."
    return _finding(i, "exit", "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", exit_s, text)


def _heartbeat(run: RunEvidence, i: int, fault: FaultResult) -> Finding | None:
    stuck = first(run.events, ProgressEv.WORKER_ERROR, after=fault.measured_from,
                  where=lambda e: e.data.cause == "watchdog_stuck" and e.node != fault.target)
    if stuck is None:
        return None
    given = _job(run, "nccl_heartbeat_timeout_s")
    timeout = int(given) if isinstance(given, int) else NCCL_HEARTBEAT_S
    cost = stuck.t - fault.measured_from
    text = (f"{cost:.1f} s until the NCCL heartbeat monitor on {stuck.node} found its watchdog stuck in a CUDA or "
            f"NCCL call and took the worker down: TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC={timeout} "
            f"({'as set for this job' if given is not None else 'torch default'}). The fast preset uses 60; a "
            "watchdog legitimately blocked longer (a heavily loaded GPU) is then taken for a hung one.")
    if timeout <= 60:
        return _finding(i, "detect", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", cost, text)
    return _finding(i, "detect", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", cost, text,
                    change=("--nccl-heartbeat-timeout", "60"), torchrun="TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC=60",
                    saved=max(0.0, min(cost, timeout - 60)))


def _shutdown(run: RunEvidence, i: int, fault: FaultResult) -> Finding | None:
    if fault.phases.get("shutdown") is None:
        return None
    f = fault.measured_from
    killed = first(run.events, AgentEv.WORKER_KILL_FORCED, after=f, where=lambda e: e.node != fault.target)
    if killed is None:
        return None
    wait = shutdown_wait(run.events, killed)
    if wait is None:
        return None
    err = first(run.events, ProgressEv.WORKER_ERROR, node=killed.node, after=f)
    why = (f"it was blocked in a collective that had failed at +{err.t - f:.1f} s (the reference trainer acts "
           "on SIGTERM only between steps)") if err is not None else "it did not act on SIGTERM"
    nccl = (" On NCCL a short TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC (the fast preset: 1000) lets such a worker "
            "exit on its own before the agent has to stop it.") if err is not None and err.data.via == "nccl" \
        else ""
    text = (f"{wait:.1f} s of the agent's shutdown wait on {killed.node}: it sent worker {killed.data.pid} "
            f"SIGTERM at +{killed.t - wait - f:.1f} s and killed it at +{killed.t - f:.1f} s because {why}. "
            f"torch's agent waits {AGENT_SHUTDOWN_WAIT_S:g} s whenever it restarts workers (torch 2.13: not "
            "configurable there; TORCH_ELASTIC_SHUTDOWN_TIMEOUT sets only the agent's own exit)." + nccl)
    return _finding(i, "shutdown", f"the agent's shutdown wait ({AGENT_SHUTDOWN_WAIT_S:g} s)", wait, text)
