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
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from chaos.errors import SpecError


class RdzvBackend(str, enum.Enum):
    ETCD_V2 = "etcd-v2"
    C10D = "c10d"

    def needs_etcd(self) -> bool:
        return self is RdzvBackend.ETCD_V2


@dataclass(frozen=True)
class RendezvousSpec:
    """Rendezvous backend and the dynamic-rendezvous knobs torchrun takes as --rdzv-conf."""

    backend: RdzvBackend = RdzvBackend.ETCD_V2
    """etcd-v2 (an etcd server holds the state) or c10d (a TCPStore on one node)."""
    join_timeout: int | None = None
    """Seconds a node waits for the rendezvous to form before giving up (torch: 600)."""
    last_call_timeout: int | None = None
    """Extra seconds a round waits for more nodes once min_nodes joined (torch: 30)."""
    close_timeout: int | None = None
    """Seconds to close the rendezvous after a node leaves for good (torch: 30)."""
    keep_alive_interval: int | None = None
    """Seconds between a node's heartbeats (torch: 5)."""
    keep_alive_max_attempt: int | None = None
    """Missed heartbeats after which a node counts as dead (torch: 3)."""

    _KNOBS = ("join_timeout", "last_call_timeout", "close_timeout", "keep_alive_interval",
              "keep_alive_max_attempt")

    def __post_init__(self) -> None:
        if not isinstance(self.backend, RdzvBackend):
            try:
                object.__setattr__(self, "backend", RdzvBackend(self.backend))
            except ValueError:
                raise SpecError(f"rendezvous backend {self.backend!r}: choose etcd-v2 or c10d") from None
        for knob in self._KNOBS:
            value = getattr(self, knob)
            if value is None:
                continue
            # torch reads these with get_as_int: 1.5 would crash every agent at start
            if isinstance(value, bool) or float(value) != int(value) or int(value) < 1:
                raise SpecError(f"{knob}={value!r}: torch takes whole seconds >= 1 for rendezvous settings")
            object.__setattr__(self, knob, int(value))

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
    return lo, hi


class PgBackend(str, enum.Enum):
    """The process-group backend a job's workers use (NCCL on GPUs, gloo on CPUs)."""

    GLOO = "gloo"
    NCCL = "nccl"


def step_regex(pattern: str, option: str = "progress_regex") -> re.Pattern[str]:
    """Compile a user's progress/resume pattern; SpecError unless it is a valid
    regex with a named group ``step``."""
    try:
        compiled = re.compile(pattern)
    except re.error as exc:
        raise SpecError(f"{option} {pattern!r} is not a valid Python regular expression ({exc})") from None
    if "step" not in compiled.groupindex:
        raise SpecError(f"{option} {pattern!r} has no named group 'step': mark the counter the script "
                        r"prints as (?P<step>\d+), for example 'epoch (?P<step>\d+)'")
    return compiled


@dataclass(frozen=True)
class Observation:
    """How the toolkit observes a script that does not report through ``trainer.progress``
    (docs/INTEGRATE.md): its own log lines and its own checkpoint file. Everything
    is optional; what is not given is not measured (a null metric with a reason)."""

    progress_regex: str | None = None
    """A regex with a named group ``step`` (and optionally ``world_size``), applied to
    every line a node prints: each match is a training step in the script's own unit."""
    checkpoint: str | None = None
    """The file or directory the script saves checkpoints to, relative to the job's
    workdir: each replacement of it (new inode, mtime or size) is a checkpoint saved."""
    resume_regex: str | None = None
    """A regex with a named group ``step`` for the line the script prints when it
    restores; without it the resumed step is inferred from the first progress after a
    restart, and the report says it was inferred."""
    unit: str = "step"
    """What the script's counter counts (step, iteration, epoch): the unit of lost
    progress in reports."""

    def __post_init__(self) -> None:
        if self.progress_regex is not None:
            step_regex(self.progress_regex, "progress_regex")
        if self.resume_regex is not None:
            step_regex(self.resume_regex, "resume_regex")
        if self.checkpoint is not None and not str(self.checkpoint).strip():
            raise SpecError("checkpoint is empty: give the file or directory the script saves to")
        if not re.fullmatch(r"[A-Za-z][\w -]{0,30}", self.unit):
            raise SpecError(f"unit {self.unit!r}: a word such as step, iteration or epoch")

    @property
    def active(self) -> bool:
        """Whether anything is observed from the script's own output or files."""
        return bool(self.progress_regex or self.checkpoint or self.resume_regex)


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

    nodes: str = "1:2"
    """Elastic node range MIN:MAX (torchrun --nnodes)."""
    nproc_per_node: int = 1
    """Worker processes per node (GPUs per node on a GPU cluster)."""
    start_nodes: int | None = None
    """Nodes started at first (default: MAX); fewer leaves room to scale up."""
    rdzv: RendezvousSpec = field(default_factory=RendezvousSpec)
    max_restarts: int = 3
    """Worker-group restarts each agent may spend before the job fails."""
    monitor_interval: float | None = None
    """Seconds between the agent's checks of its workers (torch: 0.1)."""
    checkpoint_every: int = 20
    """Steps between checkpoints of the reference trainer."""
    step_time: float = 0.1
    """Minimum seconds per training step of the reference trainer."""
    script: tuple[str, ...] = ()
    """A user's training script and its arguments; empty = the reference trainer."""
    trainer_args: tuple[str, ...] = ()
    """Extra arguments for the reference trainer."""
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment variables for every node."""
    observe: Observation = field(default_factory=Observation)
    """How a script that does not use trainer.progress is observed (its log lines, its
    checkpoint file); see Observation."""
    workdir: str | None = None
    """The job's working directory, shared by every node (a cluster's EFS/FSx volume):
    a script runs with it as its current directory. None: the platform's default
    (local: a fresh ``workdir/`` in the report folder for a script)."""
    backend: PgBackend | None = None
    """Force the process-group backend: the reference trainer's ``--backend``; for a
    script, ``trainer.launch`` rewrites its ``init_process_group`` backend (a script
    that hard-codes NCCL runs on gloo on CPU). None: the script's own choice."""
    share_agent_store: bool = False
    """Let torchrun's agents share their TCPStore with the workers (torch's default
    since 2.4). Off by default: with sharing on, torch 2.13's dynamic rendezvous
    never publishes the store address to a node that joins a round whose rank 0
    is a surviving node, so a replacement node waits forever in
    ``RendezvousStoreInfo.build``. Sets ``TORCH_DISABLE_SHARE_RDZV_TCP_STORE``."""
    run_id: str = field(default_factory=lambda: f"chaos-{uuid.uuid4().hex[:8]}")

    def __post_init__(self) -> None:
        parse_nodes(self.nodes)
        if self.backend is not None and not isinstance(self.backend, PgBackend):
            try:
                object.__setattr__(self, "backend", PgBackend(self.backend))
            except ValueError:
                raise SpecError(f"backend {self.backend!r}: choose gloo or nccl") from None
        for key, _ in self.env:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise SpecError(f"environment variable name {key!r} is not valid (letters, digits, _)")
        if self.nproc_per_node < 1:
            raise SpecError("nproc_per_node must be >= 1")
        if self.checkpoint_every < 1:
            raise SpecError("checkpoint_every must be >= 1")
        if self.max_restarts < 0:
            raise SpecError("max_restarts must be >= 0")
        if self.start_nodes is not None and not self.min_nodes <= self.start_nodes <= self.max_nodes:
            raise SpecError(f"start_nodes {self.start_nodes} is outside nodes {self.nodes}")

    @property
    def initial_nodes(self) -> int:
        return self.start_nodes if self.start_nodes is not None else self.max_nodes

    def node_env(self) -> dict[str, str]:
        """Environment every node of the job gets (the spec's ``env`` wins)."""
        return {"TORCH_DISABLE_SHARE_RDZV_TCP_STORE": "0" if self.share_agent_store else "1",
                **dict(self.env)}

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


@dataclass(frozen=True)
class Preset:
    """A named set of recovery-timing settings (rendezvous knobs, agent monitor
    interval, the reference trainer's collective timeout)."""

    name: str
    description: str
    last_call_timeout: int | None = None
    keep_alive_interval: int | None = None
    keep_alive_max_attempt: int | None = None
    monitor_interval: float | None = None
    pg_timeout_s: float | None = None
    """The reference trainer's collective timeout (its --pg-timeout)."""
    trade_offs: str = ""

    def apply(self, job: JobSpec) -> JobSpec:
        """``job`` with this preset's settings (the backend and everything else kept)."""
        rdzv = replace(job.rdzv, last_call_timeout=self.last_call_timeout,
                       keep_alive_interval=self.keep_alive_interval,
                       keep_alive_max_attempt=self.keep_alive_max_attempt)
        args = job.trainer_args
        if self.pg_timeout_s is not None and "--pg-timeout" not in args:
            args = (*args, "--pg-timeout", f"{self.pg_timeout_s:g}")
        return replace(job, rdzv=rdzv, monitor_interval=self.monitor_interval, trainer_args=args)


PRESETS: dict[str, Preset] = {
    "default": Preset(
        "default", "torch's own settings: last_call_timeout 30 s, keep-alive 5 s x 3, monitor 0.1 s "
                   "(the reference trainer's collective timeout: 60 s; torch's gloo default is 30 min)"),
    "fast": Preset(
        "fast", "recommended when agents can heartbeat reliably: a dead node leaves the rendezvous "
                "after 4 s, a shrunken world starts 1 s after the minimum is reached, a silent peer "
                "fails a collective after 10 s",
        last_call_timeout=1, keep_alive_interval=1, keep_alive_max_attempt=4, monitor_interval=0.1,
        pg_timeout_s=10.0,
        trade_offs="torch writes a heartbeat only when the last one is at least keep_alive_interval old, "
                   "so with a timer of the same period heartbeats land about every 2 intervals: "
                   "keep_alive_max_attempt 2 left no margin and, measured here under load, a live node "
                   "was declared dead and a newcomer formed a second world beside it (split brain). "
                   "4 attempts leave 2 s of margin: an agent stalled longer (slow etcd, an overloaded "
                   "host) is still declared dead. A replacement arriving more than 1 s after the "
                   "survivors costs a second restart; a collective slower than 10 s (a large all-reduce "
                   "on a slow network, an uneven data loader) is taken for a failure."),
}


def preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise SpecError(f"unknown rendezvous preset {name!r}; choose one of {sorted(PRESETS)}") from None
