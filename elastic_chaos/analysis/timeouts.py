"""Every timeout a job's failure meets, in the order it meets them, and the orderings that cannot work.

When a node of an elastic job fails, the survivors go through a chain of
timeouts owned by different layers: the collective timeout (a silent peer),
NCCL's dump wait and heartbeat (a failed collective's worker, a hung watchdog),
the rendezvous' keep-alive expiry and last call (a dead node leaves, a smaller
world forms), torch's agent's shutdown wait (a worker that ignores SIGTERM), and
the platform's pod grace period and spot notice. ``hierarchy`` lays them out for
one JobSpec; ``check`` says which orderings cannot work, and why, in numbers:

- a collective timeout longer than the stall budget: a partition or a hung host
  holds the survivors that long before anyone notices (gloo's own default is
  30 minutes);
- NCCL's async error handling off: a failed collective never ends its worker;
- after a loss, training resumes no earlier than the dump wait + the keep-alive
  expiry + the last call; when that is not shorter than the spot notice, a node
  reclaimed in the same wave gets its notice while no worker trains, and is gone
  before it can checkpoint (a dump wait alone longer than the notice guarantees it).

Pure: no platform, no clock.
"""
from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from elastic_chaos.events import Event, ProgressEv, of
from elastic_chaos.options import DAY_S, option, validate
from elastic_chaos.spec import JobSpec, PgBackend
from elastic_chaos.torch_defaults import AGENT_SHUTDOWN_WAIT_S, NCCL_DUMP_WAIT_MS, NCCL_HEARTBEAT_S, PG_TIMEOUT_S, RDZV

TRAINER_PG_TIMEOUT_S = 60.0
"""The reference trainer's --pg-timeout default."""


@dataclass(frozen=True)
class Surroundings:
    """What a failure meets outside the job: the platform's timeouts, and the budget for a stall."""

    termination_grace_s: int = option(30, "pod grace period: SIGTERM -> SIGKILL when a pod is deleted, evicted "
                                          "or drained (Kubernetes' default)", flag="--termination-grace",
                                      minimum=0, units="s", maximum=DAY_S)
    spot_notice_s: float = option(120.0, "how long before a spot node is reclaimed it gets its notice (AWS: "
                                         "2 minutes)", flag="--spot-notice", above=0, units="s", maximum=DAY_S)
    stall_budget_s: float = option(300.0, "the longest a silent peer may hold the survivors before it must be "
                                          "found out (default: Kubernetes evicts an unreachable node's pods "
                                          "after 300 s)", flag="--stall-budget", above=0, units="s", maximum=DAY_S)

    def __post_init__(self) -> None:
        validate(self)


@dataclass(frozen=True)
class Timeout:
    """One timeout on a failure's path."""

    name: str
    seconds: float
    setting: str
    """The knob that sets it, with its value and where the value comes from."""
    meets: str
    """What it governs when a node fails."""


class Level(enum.Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "FAIL"


@dataclass(frozen=True)
class Finding:
    level: Level
    text: str


@dataclass(frozen=True)
class Origin:
    """Where a job's values come from, to say so beside each one."""

    given: frozenset[str] = frozenset()
    """Options given explicitly."""
    preset: str | None = None
    script: bool = False
    """The job runs a user's script (its collective timeout is torch's unless --pg-timeout says)."""

    def of(self, name: str, value: object) -> str:
        if value is None:
            return "torch default"
        if self.preset is not None and name not in self.given:
            return f"preset {self.preset}"
        return "as set"


def job_backend(job: JobSpec, events: Sequence[Event]) -> tuple[PgBackend, str]:
    """The process-group backend the job's workers used, and how that is known: what a worker said
    at its start (the reference trainer resolves ``auto`` there: NCCL with CUDA, else gloo), else
    the job's ``--backend``, else gloo, assumed (a script that does not say)."""
    said = {e.data.backend for e in of(events, ProgressEv.START)} & {b.value for b in PgBackend}
    if len(said) == 1:
        return PgBackend(said.pop()), "as its workers said"
    if job.backend is not None:
        return job.backend, "the job's --backend"
    return PgBackend.GLOO, "assumed: the job did not say"


def collective_timeout(job: JobSpec, backend: PgBackend, origin: Origin) -> tuple[float, str]:
    """The collective timeout the job's workers use, and where it comes from."""
    if job.pg_timeout_s is not None:
        return job.pg_timeout_s, origin.of("pg_timeout_s", job.pg_timeout_s)
    if origin.script:
        return PG_TIMEOUT_S[backend.value], f"torch's {backend.value} default, unless your script sets one"
    return TRAINER_PG_TIMEOUT_S, "the reference trainer's default"


def hierarchy(job: JobSpec, backend: PgBackend, around: Surroundings, origin: Origin) -> list[Timeout]:
    """The timeouts a failure of ``job`` meets, in order."""
    pg, pg_from = collective_timeout(job, backend, origin)
    out = [Timeout("collective timeout", pg, f"--pg-timeout {pg:g} ({pg_from})",
                   "a silent peer (partition, hung host) fails a survivor's collective after this; a dead one at once")]
    if backend is PgBackend.NCCL:
        dump = job.nccl_dump_wait_ms if job.nccl_dump_wait_ms is not None else NCCL_DUMP_WAIT_MS
        beat = job.nccl_heartbeat_timeout_s if job.nccl_heartbeat_timeout_s is not None else NCCL_HEARTBEAT_S
        out += [Timeout("NCCL dump wait", dump / 1000, f"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC={dump} "
                        f"({origin.of('nccl_dump_wait_ms', job.nccl_dump_wait_ms)})",
                        "then the failed collective's worker waits this long for a debug dump before it exits: "
                        "no agent knows of the failure until then"),
                Timeout("NCCL heartbeat", float(beat), f"TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC={beat} "
                        f"({origin.of('nccl_heartbeat_timeout_s', job.nccl_heartbeat_timeout_s)})",
                        "a watchdog stuck in a CUDA/NCCL call (a hung GPU) takes its worker down after this")]
    interval, attempts, last_call = _rdzv(job)
    out += [Timeout("keep-alive expiry", float(interval * attempts),
                    f"keep_alive_interval {interval} x keep_alive_max_attempt {attempts} "
                    f"({origin.of('keep_alive_interval', job.rdzv.keep_alive_interval)})",
                    "a dead node leaves the rendezvous after this without a heartbeat"),
            Timeout("last call", float(last_call), f"last_call_timeout {last_call} "
                    f"({origin.of('last_call_timeout', job.rdzv.last_call_timeout)})",
                    "a round with fewer than max_nodes closes after this: every shrink pays it"),
            Timeout("agent shutdown wait", AGENT_SHUTDOWN_WAIT_S, "torch 2.13's, fixed when an agent restarts its "
                    "workers (TORCH_ELASTIC_SHUTDOWN_TIMEOUT sets only the agent's own exit)",
                    "a worker that ignores SIGTERM (blocked in a failed collective) is killed after this"),
            Timeout("pod grace period", float(around.termination_grace_s),
                    f"--termination-grace {around.termination_grace_s}",
                    "Kubernetes kills a terminating pod (eviction, drain, scale-down) after this"),
            Timeout("spot notice", around.spot_notice_s, f"--spot-notice {around.spot_notice_s:g}",
                    "a spot node is reclaimed this long after its interruption notice")]
    return out


def _rdzv(job: JobSpec) -> tuple[int, int, int]:
    r = job.rdzv
    return (r.keep_alive_interval or RDZV["keep_alive_interval"],
            r.keep_alive_max_attempt or RDZV["keep_alive_max_attempt"],
            r.last_call_timeout or RDZV["last_call_timeout"])


def check(job: JobSpec, backend: PgBackend, around: Surroundings, origin: Origin) -> list[Finding]:
    """Which orderings of ``hierarchy`` work, which are tight, which cannot work."""
    return [_stall(job, backend, around, origin), *_nccl_handling(job, backend), _wave(job, backend, around),
            _grace(around)]


def _s(v: float) -> str:
    return f"{v / 60:g} min" if v >= 600 and v % 60 == 0 else f"{v:g} s"


def _stall(job: JobSpec, backend: PgBackend, around: Surroundings, origin: Origin) -> Finding:
    pg, pg_from = collective_timeout(job, backend, origin)
    budget = around.stall_budget_s
    if pg <= budget:
        return Finding(Level.OK, f"a partition or a hung host is found out within {_s(pg)} (the collective "
                                 f"timeout), inside the stall budget {_s(budget)}")
    gloo = "; gloo's own default is 30 minutes" if backend is PgBackend.GLOO and pg >= 1800 else ""
    return Finding(Level.FAIL, f"a partition or a hung host stalls the survivors for {_s(pg)} before anyone "
                               f"notices: the collective timeout ({pg_from}{gloo}) is longer than the stall "
                               f"budget {_s(budget)}. Nobody closes a connection for a silent peer, so nothing "
                               f"else ends the wait; set --pg-timeout {min(budget, 60.0):g} or less (the fast "
                               "preset uses 10 s), above the slowest step's collectives")


def _nccl_handling(job: JobSpec, backend: PgBackend) -> list[Finding]:
    if backend is not PgBackend.NCCL or job.nccl_async_error_handling != 0:
        return []
    return [Finding(Level.FAIL, "TORCH_NCCL_ASYNC_ERROR_HANDLING=0: a failed NCCL collective never ends its "
                                "worker, so its agent never sees a failure and the survivors hang until the "
                                "heartbeat or a person stops them; use 3 (the fast preset) or 1")]


def _wave(job: JobSpec, backend: PgBackend, around: Surroundings) -> Finding:
    interval, attempts, last_call = _rdzv(job)
    dump = (job.nccl_dump_wait_ms if job.nccl_dump_wait_ms is not None else NCCL_DUMP_WAIT_MS) / 1000 \
        if backend is PgBackend.NCCL else 0.0
    chain = dump + interval * attempts + last_call
    parts = (f"{dump:g} s dump wait + " if dump else "") + f"{interval * attempts} s keep-alive + {last_call} s " \
                                                           f"last call = {chain:g} s"
    notice = around.spot_notice_s
    if dump >= notice:
        return Finding(Level.FAIL, f"the NCCL dump wait ({dump:g} s) is not shorter than the spot notice "
                                   f"({notice:g} s): spot reclaims come in waves, and a node whose notice "
                                   "arrives while its worker sits in the dump wait after a peer's loss is gone "
                                   "before it trains again: no time to checkpoint. Set "
                                   "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC well below it (the fast preset: 1000)")
    if chain >= notice:
        return Finding(Level.FAIL, f"after a loss, training resumes no earlier than {parts}, not shorter than the "
                                   f"spot notice ({notice:g} s): a node reclaimed in the same wave gets its notice "
                                   "while no worker trains and is gone before it can checkpoint")
    level = Level.WARN if chain > 0.75 * notice else Level.OK
    return Finding(level, f"after a loss, training resumes no earlier than {parts} (plus the restart itself), "
                          f"{notice - chain:g} s inside the spot notice ({notice:g} s): a node noticed during a "
                          "recovery still has time to checkpoint once training resumes"
                   + ("; tight: a restart on GPUs takes 9-12 s" if level is Level.WARN else ""))


def _grace(around: Surroundings) -> Finding:
    if around.termination_grace_s > AGENT_SHUTDOWN_WAIT_S:
        return Finding(Level.OK, f"the pod grace period ({around.termination_grace_s} s) outlasts the agent's "
                                 f"shutdown wait ({AGENT_SHUTDOWN_WAIT_S:g} s): the agent stops its workers itself")
    return Finding(Level.WARN, f"the pod grace period ({around.termination_grace_s} s) is not longer than the "
                               f"agent's shutdown wait ({AGENT_SHUTDOWN_WAIT_S:g} s): a worker blocked in a "
                               "collective is killed by Kubernetes, not by its agent; only a worker between "
                               "steps saves on SIGTERM in time")
