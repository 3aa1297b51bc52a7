"""What to run: the elastic job and its rendezvous settings, as frozen dataclasses.

A JobSpec is platform-neutral: the local platform turns it into torchrun
command lines, the Kubernetes platform into manifests. ``None`` for a
rendezvous setting means "torch's default", so a report can say which
settings were tuned and which were not.
"""
from __future__ import annotations

import enum
import importlib.util
import re
import uuid
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from elastic_chaos import torch_defaults as _T
from elastic_chaos.errors import SpecError
from elastic_chaos.options import DAY_S, MAX_NODES, MAX_STEPS, environment, option, split, validate


class RdzvBackend(str, enum.Enum):
    ETCD_V2 = "etcd-v2"
    C10D = "c10d"

    def needs_etcd(self) -> bool:
        return self is RdzvBackend.ETCD_V2


@dataclass(frozen=True)
class RendezvousSpec:
    """Rendezvous backend and the dynamic-rendezvous knobs torchrun takes as --rdzv-conf.
    A knob left None is torch's default (the comments say which); torch reads them as
    whole seconds."""

    backend: RdzvBackend = option(RdzvBackend.ETCD_V2, "rendezvous backend: etcd-v2 (an etcd server holds "
                                  "the state) or c10d (a TCPStore on one node)", keyword="rdzv_backend")
    join_timeout: int | None = option(None, "seconds a node waits for the rendezvous to form before giving "
                                      f"up (torch: {_T.RDZV['join_timeout']})", minimum=1, maximum=DAY_S)
    last_call_timeout: int | None = option(None, "extra seconds a round waits for more nodes once the minimum "
                                           f"joined (torch: {_T.RDZV['last_call_timeout']})", minimum=1,
                                           maximum=DAY_S)
    close_timeout: int | None = option(None, "seconds to close the rendezvous after a node leaves for good "
                                       f"(torch: {_T.RDZV['close_timeout']})", minimum=1, maximum=DAY_S)
    keep_alive_interval: int | None = option(None, "seconds between a node's heartbeats "
                                             f"(torch: {_T.RDZV['keep_alive_interval']})", minimum=1, maximum=3600)
    keep_alive_max_attempt: int | None = option(None, "missed heartbeats after which a node counts as dead "
                                                f"(torch: {_T.RDZV['keep_alive_max_attempt']})", minimum=1,
                                                maximum=1000)

    _KNOBS = ("join_timeout", "last_call_timeout", "close_timeout", "keep_alive_interval",
              "keep_alive_max_attempt")

    def __post_init__(self) -> None:
        validate(self)

    def conf(self) -> dict[str, str]:
        """The non-default settings as torchrun's ``--rdzv-conf`` key/values."""
        return {knob: str(getattr(self, knob)) for knob in self._KNOBS if getattr(self, knob) is not None}


_NODES = re.compile(r"^(\d+)(?::(\d+))?$")


def parse_nodes(nodes: str) -> tuple[int, int]:
    """``"1:2"`` -> (1, 2); ``"2"`` -> (2, 2). Raises SpecError with the accepted forms."""
    m = _NODES.match(nodes.strip())
    if not m:
        raise SpecError(f"nodes {nodes!r} is not MIN:MAX or N (for example 1:2)")
    lo = int(m[1])
    hi = int(m[2]) if m[2] else lo
    if lo < 1 or hi < lo:
        raise SpecError(f"nodes {nodes!r}: need 1 <= MIN <= MAX")
    if hi > MAX_NODES:
        raise SpecError(f"nodes {nodes!r}: at most {MAX_NODES} nodes (need 1 <= MIN <= MAX <= {MAX_NODES})")
    return lo, hi


class PgBackend(str, enum.Enum):
    """The process-group backend a job's workers use (NCCL on GPUs, gloo on CPUs)."""

    GLOO = "gloo"
    NCCL = "nccl"


class CheckpointFormat(str, enum.Enum):
    """How the reference trainer saves (its --checkpoint-format)."""

    FILE = "file"
    """One ``torch.save`` file per save (``ckpt-<step>.pt``)."""
    DCP = "dcp"
    """``torch.distributed.checkpoint``: a ``step-<step>/`` folder of shards, one per rank, plus ``.metadata``."""


def step_regex(pattern: str, name: str = "progress_regex") -> re.Pattern[str]:
    """Compile a user's progress/resume pattern; SpecError unless it is a valid
    regex with a named group ``step``."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise SpecError(f"{name} {pattern!r} is not a valid Python regular expression ({exc})") from None
    if "step" not in compiled.groupindex:
        raise SpecError(f"{name} {pattern!r} has no named group 'step': mark the counter the script "
                        r"prints as (?P<step>\d+), for example 'epoch (?P<step>\d+)'")
    return compiled


@dataclass(frozen=True)
class Observation:
    """How the toolkit observes a script that does not report through ``elastic_chaos.trainer.progress``
    (docs/INTEGRATE.md): its own log lines and its own checkpoint file. Everything
    is optional; what is not given is not measured (a null metric with a reason)."""

    progress_regex: str | None = option(
        None, r"regex with a named group 'step' matched against every line a node prints; each match is "
              r"a step in the script's own unit, e.g. 'epoch (?P<step>\d+)' (a 'world_size' group is read too)",
        metavar="REGEX")
    checkpoint: str | None = option(
        None, "file or directory the script saves checkpoints to, relative to --workdir (with "
              "--node-local-workdir: to every node's own folder); each replacement (new inode, mtime or size) is "
              "a checkpoint saved", metavar="PATH")
    resume_regex: str | None = option(
        None, "regex (named group 'step') for the line the script prints when it restores; without it the "
              "resumed step is inferred from the first progress after a restart, and the report says so",
        metavar="REGEX")
    unit: str = option("step", "what the script's counter counts (step, iteration, epoch): the unit of "
                               "lost progress; --steady-steps and --checkpoint-every count in it too")

    def __post_init__(self) -> None:
        if self.progress_regex is not None:
            step_regex(self.progress_regex, "--progress-regex")
        if self.resume_regex is not None:
            step_regex(self.resume_regex, "--resume-regex")
        if self.checkpoint is not None and not str(self.checkpoint).strip():
            raise SpecError("checkpoint is empty: give the file or directory the script saves to")
        if not re.fullmatch(r"[A-Za-z][\w -]{0,30}", self.unit):
            raise SpecError(f"unit {self.unit!r}: a word such as step, iteration or epoch")

    @property
    def active(self) -> bool:
        """Whether anything is observed from the script's own output or files."""
        return bool(self.progress_regex or self.checkpoint or self.resume_regex)


LOCAL_DIR_VAR = "ELASTIC_CHAOS_LOCAL_DIR"
"""With ``node_local_workdir``: the node's own folder (its working directory), on every platform."""
SHARED_DIR_VAR = "ELASTIC_CHAOS_SHARED_DIR"
"""With ``node_local_workdir``: the job's shared workdir (data every node reads)."""

REFERENCE_STEADY_STEPS = 50
"""Where the reference trainer is hit by default: step 50, halfway between its checkpoints
at 40 and 60 (every 20), so the fault costs real progress."""


def default_steady_steps(job: JobSpec) -> int:
    """How far training gets before the fault when ``--steady-steps`` is not given: the
    reference trainer's 50 steps; a script, halfway between its 2nd and 3rd save by its
    ``checkpoint_every`` (its save interval), the rule that gives the reference trainer's
    50 from its 20, in the script's unit: 5 epochs for a script saving every 2."""
    if not job.script:
        return REFERENCE_STEADY_STEPS
    return 2 * job.checkpoint_every + max(1, job.checkpoint_every // 2)


def locate_script(argv: tuple[str, ...] | list[str], base: Path | None = None) -> tuple[str, ...]:
    """A training script's argv with its path made absolute (nodes run it from the
    job's workdir). ``-m MODULE`` is kept as is once the module is found. Raises
    SpecError, saying what to pass, when the script is missing."""
    argv = tuple(str(a) for a in argv)
    if not argv or not argv[0]:
        raise SpecError("no training script given: put the script and its arguments after `--`, "
                        "e.g. `elastic-chaos run kill-node -- train.py --epochs 10`")
    if argv[0] == "-m":
        if len(argv) < 2 or not _module_found(argv[1]):
            name = argv[1] if len(argv) > 1 else ""
            raise SpecError(f"training module {name!r} not found: `-m MODULE` needs a module importable "
                            "by this Python (installed, or on PYTHONPATH)")
        return argv
    if argv[0].startswith("-"):
        raise SpecError(f"{argv[0]!r}: the first word of the training command must be the script's path "
                        "(or -m MODULE); torchrun options are set by elastic-chaos")
    path = Path(argv[0]).expanduser()
    if not path.is_absolute():
        path = (base or Path.cwd()) / path
    if not path.is_file():
        raise SpecError(f"training script {argv[0]!r} not found (looked for {path}); give its path "
                        "relative to the current directory, or absolute")
    return (str(path.resolve()), *argv[1:])


def _module_found(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


@dataclass(frozen=True)
class JobSpec:
    """An elastic training job: how many nodes, what each runs, how it restarts."""

    nodes: str = option("1:2", "elastic node range MIN:MAX (torchrun --nnodes)", metavar="MIN:MAX")
    nproc_per_node: int = option(1, "worker processes per node (GPUs per node on a GPU cluster)", minimum=1,
                                 maximum=MAX_NODES)
    start_nodes: int | None = option(None, "nodes started at first (default: MAX); fewer leave room to "
                                           "scale up", minimum=1, maximum=MAX_NODES)
    rdzv: RendezvousSpec = field(default_factory=RendezvousSpec)
    max_restarts: int = option(3, "worker-group restarts each agent may spend before the job fails "
                                  "(torchrun --max-restarts)", minimum=0, maximum=1000)
    monitor_interval: float | None = option(None, "seconds between the agent's checks of its workers "
                                                  f"(torch: {_T.MONITOR_INTERVAL_S:g})", above=0, units="s",
                                            maximum=3600)
    checkpoint_every: int = option(20, "the reference trainer: steps between its checkpoints. A script: its own "
                                       "save interval in --unit (elastic-chaos cannot change it), so the most "
                                       "progress a fault may cost (the bounded-loss check) and, without "
                                       "--steady-steps, where the fault lands", minimum=1, maximum=MAX_STEPS)
    step_time: float = option(0.1, "minimum seconds per training step of the reference trainer",
                              minimum=0, units="s", maximum=3600)
    pg_timeout_s: float | None = option(None, "the workers' collective timeout: a silent peer fails a "
                                              "collective after it (the reference trainer's --pg-timeout; "
                                              "its default 60 s)", flag="--pg-timeout", above=0, units="s",
                                        maximum=DAY_S)
    nccl_dump_wait_ms: int | None = option(
        None, "NCCL only: how long a worker's watchdog waits for a debug dump after a collective failed before "
              f"it takes the worker down: the agent sees no failure until then (torch: {_T.NCCL_DUMP_WAIT_MS})",
        minimum=0, metavar="MS", env="TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", maximum=DAY_S * 1000)
    nccl_async_error_handling: int | None = option(
        None, "NCCL only: what the watchdog does with a failed collective: 0 nothing (the worker hangs), 1 abort "
              "the communicators then take the process down (torchrun sets 1 when unset), 2 abort only, 3 take "
              "the process down without aborting (torch's own default)", minimum=0, maximum=3,
        env="TORCH_NCCL_ASYNC_ERROR_HANDLING")
    nccl_heartbeat_timeout_s: int | None = option(
        None, "NCCL only: seconds the watchdog thread may be stuck (a hung CUDA/NCCL call) before its monitor "
              f"takes the worker down (torch: {_T.NCCL_HEARTBEAT_S})", minimum=1, units="s",
        flag="--nccl-heartbeat-timeout", env="TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC", maximum=DAY_S)
    script: tuple[str, ...] = option((), "a user's training script and its arguments (after `--` on the "
                                         "command line); empty: the reference trainer", cli=False)
    trainer_args: tuple[str, ...] = option((), "extra arguments for the reference trainer", cli=False)
    env: tuple[tuple[str, str], ...] = option((), "extra environment variables for every node", cli=False)
    observe: Observation = field(default_factory=Observation)
    """How a script that does not use elastic_chaos.trainer.progress is observed (its log lines, its
    checkpoint file); see Observation."""
    workdir: str | None = option(None, "the job's working directory, shared by every node like EFS/FSx: a "
                                       "script runs in it (default: a fresh workdir/ in the report folder)",
                                 metavar="DIR")
    node_local_workdir: bool = option(
        False, "give each node a working directory of its own instead of the shared workdir, as on a "
               "cluster whose machines have local disks and no shared volume: what the script writes to "
               "relative paths (a snapshot saved by every node's local rank 0) is its node's alone, a node "
               "lost to a fault loses it, and its replacement starts with an empty one. The script finds "
               "its node's folder in $ELASTIC_CHAOS_LOCAL_DIR (its working directory) and the shared "
               "workdir in $ELASTIC_CHAOS_SHARED_DIR; --checkpoint is watched in every node's folder")
    checkpoint_format: CheckpointFormat | None = option(
        None, "the reference trainer's save format: file (one torch.save file per save, its default) or dcp "
              "(torch.distributed.checkpoint: a step-<step>/ folder of shards, one per rank, and a 'latest' "
              "pointer written once the save is complete)")
    async_save: bool = option(False, "the reference trainer saves with torch.distributed.checkpoint's async_save "
                                     "(--checkpoint-format dcp): training goes on while the shards are written, "
                                     "and a fault can land with a save in flight")
    backend: PgBackend | None = option(None, "force the process-group backend: the reference trainer's "
                                             "--backend; a script that hard-codes nccl runs on gloo (CPU) "
                                             "through elastic_chaos.trainer.launch")
    leave_on_sigterm: bool = option(False, "on SIGTERM (a spot interruption, a pod deletion) a node's agent leaves the "
                                           "rendezvous once its workers stopped, so the survivors re-form without "
                                           "waiting for its keep-alive to expire (elastic_chaos.trainer.rdzv_leave: "
                                           "relies on torch "
                                           "internals, checked at start; etcd-v2 and c10d)")
    leave_on_notice: bool = option(False, "on the spot interruption notice in the instance metadata "
                                          "($AWS_EC2_METADATA_SERVICE_ENDPOINT, the platform's stand-in), before "
                                          "the termination, a node's agent stops its workers as SIGTERM does "
                                          "(the reference trainer saves) and leaves the rendezvous, so the "
                                          "survivors re-form while it still runs; it then waits for the "
                                          "termination. Implies --leave-on-sigterm; without a metadata endpoint "
                                          "it is --leave-on-sigterm (elastic_chaos.trainer.rdzv_notice: relies "
                                          "on torch internals, checked at start; etcd-v2 and c10d)")
    share_agent_store: bool = option(False, "let torchrun's agents share their TCPStore with the workers "
                                            "(torch's default since 2.4; off because torch 2.13 then never "
                                            "tells a node joining a survivor-led round the store address)",
                                     cli=False)
    storage_layer: bool = option(False, "put the job's checkpoint folder behind the storage layer (a FUSE "
                                        "passthrough, mounted before the nodes start) so storage faults can "
                                        "hit it; needs root and /dev/fuse (the storage hypotheses set it)")
    run_id: str = option(factory=lambda: f"chaos-{uuid.uuid4().hex[:8]}",
                         help="the rendezvous run id (torchrun --rdzv-id)", cli=False)

    def __post_init__(self) -> None:
        parse_nodes(self.nodes)
        validate(self)
        for key, _ in self.env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise SpecError(f"environment variable name {key!r} is not valid (letters, digits, _)")
        if self.start_nodes is not None and not self.min_nodes <= self.start_nodes <= self.max_nodes:
            raise SpecError(f"start_nodes {self.start_nodes} is outside nodes {self.nodes}")
        if self.checkpoint_format is not None and self.script:
            raise SpecError("checkpoint_format is the reference trainer's; a script saves as it does (watch its "
                            "saves with --checkpoint, a glob of step folders for DCP: 'checkpoints/step-*')")
        if self.async_save and self.checkpoint_format is not CheckpointFormat.DCP:
            raise SpecError("async_save is the reference trainer's DCP mode: give checkpoint_format dcp "
                            "(--checkpoint-format dcp) with it")
        if self.node_local_workdir and not self.script:
            raise SpecError("node_local_workdir is for a training script (give it after `--`): the reference "
                            "trainer keeps its checkpoints in the shared checkpoints/ folder")

    def trainer_command_args(self) -> list[str]:
        """The reference trainer's arguments for this job (every platform runs it so)."""
        args = ["--checkpoint-every", str(self.checkpoint_every), "--step-time", str(self.step_time)]
        if self.backend is not None:
            args += ["--backend", self.backend.value]
        if self.checkpoint_format is not None:
            args += ["--checkpoint-format", self.checkpoint_format.value]
        if self.async_save:
            args += ["--async-save"]
        if self.pg_timeout_s is not None:
            args += ["--pg-timeout", f"{self.pg_timeout_s:g}"]
        return [*args, *self.trainer_args]

    @property
    def launcher(self) -> tuple[str, str]:
        """``python`` arguments that start a node's agent: torchrun, or torchrun leaving the rendezvous
        on SIGTERM (``leave_on_sigterm``; elastic_chaos.trainer.rdzv_leave takes torchrun's arguments), or
        on the interruption notice and on SIGTERM (``leave_on_notice``; elastic_chaos.trainer.rdzv_notice)."""
        if self.leave_on_notice:
            return ("-m", "elastic_chaos.trainer.rdzv_notice")
        return ("-m", "elastic_chaos.trainer.rdzv_leave") if self.leave_on_sigterm else ("-m", "torch.distributed.run")

    @property
    def initial_nodes(self) -> int:
        return self.start_nodes if self.start_nodes is not None else self.max_nodes

    def node_env(self) -> dict[str, str]:
        """Environment every node of the job gets: the options declared with ``env=``
        that are set (NCCL's timeouts), then the spec's ``env``, which wins."""
        return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0" if self.share_agent_store else "1",
                **environment(self), **dict(self.env)}

    @property
    def min_nodes(self) -> int:
        return parse_nodes(self.nodes)[0]

    @property
    def max_nodes(self) -> int:
        return parse_nodes(self.nodes)[1]

    def to_json(self) -> dict[str, Any]:
        """The spec as report.json's ``job`` object."""
        d = asdict(self)
        d["rdzv_backend"] = self.rdzv.backend.value
        d["rdzv"] = {k: (v.value if isinstance(v, enum.Enum) else v) for k, v in asdict(self.rdzv).items()}
        d["env"] = dict(self.env)
        d["script"] = list(self.script)
        d["trainer_args"] = list(self.trainer_args)
        d["backend"] = self.backend.value if self.backend is not None else None
        return d

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> JobSpec:
        """report.json's ``job`` read back (``to_json``). Keys this version does not know
        are ignored and absent ones take today's defaults (a report written by an older
        version); a value out of bounds raises SpecError, as for any JobSpec."""
        known = {f.name for f in fields(cls)}
        kw = {k: v for k, v in raw.items() if k in known and k not in ("rdzv", "observe")}
        for key in ("script", "trainer_args"):
            if key in kw:
                kw[key] = tuple(str(a) for a in kw[key] or ())
        if isinstance(kw.get("env"), dict):
            kw["env"] = tuple((str(k), str(v)) for k, v in kw["env"].items())
        if kw.get("backend") is not None:
            kw["backend"] = PgBackend(kw["backend"])
        rdzv = dict(raw.get("rdzv") or {})
        rdzv.setdefault("backend", raw.get("rdzv_backend") or RendezvousSpec().backend.value)
        rdzv_known = {f.name for f in fields(RendezvousSpec)}
        rdzv_kw = {k: v for k, v in rdzv.items() if k in rdzv_known}
        rdzv_kw["backend"] = RdzvBackend(rdzv_kw["backend"])
        observe = raw.get("observe") or {}
        observe_known = {f.name for f in fields(Observation)}
        return cls(**kw, rdzv=RendezvousSpec(**rdzv_kw),
                   observe=Observation(**{k: v for k, v in observe.items() if k in observe_known}))


@dataclass(frozen=True)
class Preset:
    """A named set of recovery-timing settings: rendezvous knobs, the agent's monitor
    interval, the reference trainer's collective timeout and NCCL's own timeouts
    (each a JobSpec option of the same name; None is torch's default)."""

    name: str
    description: str
    last_call_timeout: int | None = None
    keep_alive_interval: int | None = None
    keep_alive_max_attempt: int | None = None
    monitor_interval: float | None = None
    pg_timeout_s: float | None = None
    """The reference trainer's collective timeout (its --pg-timeout)."""
    nccl_dump_wait_ms: int | None = None
    nccl_async_error_handling: int | None = None
    nccl_heartbeat_timeout_s: int | None = None
    trade_offs: str = ""

    RDZV_KNOBS = ("last_call_timeout", "keep_alive_interval", "keep_alive_max_attempt")
    JOB_KNOBS = ("monitor_interval", "pg_timeout_s", "nccl_dump_wait_ms", "nccl_async_error_handling",
                 "nccl_heartbeat_timeout_s")
    """The JobSpec options a preset sets (a value given beside the preset wins)."""

    def apply(self, job: JobSpec) -> JobSpec:
        """``job`` with this preset's settings (the backend and everything else kept)."""
        rdzv = replace(job.rdzv, **{k: getattr(self, k) for k in self.RDZV_KNOBS})
        return replace(job, rdzv=rdzv, **{k: getattr(self, k) for k in self.JOB_KNOBS})


PRESETS: dict[str, Preset] = {
    "default": Preset(
        "default", "torch's own settings: last_call_timeout 30 s, keep-alive 5 s x 3, monitor 0.1 s "
                   "(the reference trainer's collective timeout: 60 s; torch's gloo default is 30 min); on "
                   "NCCL a failed collective's worker waits 60 s for a debug dump before it exits, torchrun "
                   "aborts communicators first (async error handling 1), a stuck watchdog lasts 480 s"),
    "fast": Preset(
        "fast", "recommended when agents can heartbeat reliably: a dead node leaves the rendezvous "
                "after 4 s, a shrunken world starts 1 s after the minimum is reached, a silent peer "
                "fails a collective after 10 s; on NCCL a worker whose collective failed exits after a "
                "1 s dump wait, without aborting its communicators, and a stuck watchdog after 60 s",
        last_call_timeout=1, keep_alive_interval=1, keep_alive_max_attempt=4, monitor_interval=0.1,
        pg_timeout_s=10.0, nccl_dump_wait_ms=1000, nccl_async_error_handling=3, nccl_heartbeat_timeout_s=60,
        trade_offs="torch writes a heartbeat only when the last one is at least keep_alive_interval old, "
                   "so with a timer of the same period heartbeats land about every 2 intervals: "
                   "keep_alive_max_attempt 2 left no margin and, measured here under load, a live node "
                   "was declared dead and a newcomer formed a second world beside it (split brain). "
                   "4 attempts leave 2 s of margin: an agent stalled longer (slow etcd, an overloaded "
                   "host) is still declared dead. A replacement arriving more than 1 s after the "
                   "survivors costs a second restart; a collective slower than 10 s (a large all-reduce "
                   "on a slow network, an uneven data loader) is taken for a failure. NCCL: a 1 s dump "
                   "wait leaves the flight recorder 1 s to write what hung (rarely complete for a large "
                   "job); skipping the communicator abort (3) leaves NCCL's resources to the process exit; a "
                   "watchdog stuck 60 s in a CUDA call (a heavily loaded GPU) is taken for a hung one."),
}


def preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise SpecError(f"unknown rendezvous preset {name!r}; choose one of {sorted(PRESETS)}") from None


PRESET_OPTION = "rdzv_preset"
"""The keyword (``--rdzv-preset`` on the command line) that names a preset."""


def job_from_options(values: dict[str, Any]) -> JobSpec:
    """The one way a JobSpec is built from flat options (the CLI's flags, the pytest
    fixture's keywords): JobSpec fields, rendezvous knobs (``rdzv_backend`` for the
    backend), a script's observation fields, and ``rdzv_preset``: the preset first,
    every knob given beside it over it. Raises SpecError for an unknown name or a
    value out of bounds, naming what is allowed."""
    values = dict(values)
    named = values.pop(PRESET_OPTION, None)
    rdzv_backend = values.pop("rdzv_backend", RdzvBackend.ETCD_V2)  # `backend` is the process group's
    job_kw, rdzv_kw, observe_kw = split(values, JobSpec, RendezvousSpec, Observation)
    if "workdir" in job_kw and job_kw["workdir"] is not None:
        job_kw["workdir"] = str(Path(job_kw["workdir"]).expanduser().resolve())
    if "checkpoint" in observe_kw and observe_kw["checkpoint"] is not None:
        observe_kw["checkpoint"] = str(observe_kw["checkpoint"])
    job = JobSpec(**job_kw, rdzv=RendezvousSpec(backend=rdzv_backend), observe=Observation(**observe_kw))
    if named is not None:
        job = preset(str(named)).apply(job)
    if rdzv_kw:
        job = replace(job, rdzv=replace(job.rdzv, **rdzv_kw))
    given_beside = {k: job_kw[k] for k in Preset.JOB_KNOBS if k in job_kw}
    if given_beside and named is not None:  # given beside a preset: it wins
        job = replace(job, **given_beside)
    return job


JOB_OPTION_CLASSES = (JobSpec, RendezvousSpec, Observation)
"""The dataclasses whose declared options make up a job's options."""
