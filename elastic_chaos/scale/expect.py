"""What a job of N nodes should expect from its rendezvous, from the measured figures.

For each figure: the measured value at N when N was measured; between two measured sizes, the
straight line between them; beyond the largest size measured (or measured without the machine
limiting it), the fitted model -- an extrapolation, and said so. The figures were measured with one
preset (``fast``); for other settings the parts that are timeouts are replaced by the job's own:
re-formation after a hard loss waits out the dead node's keep-alive (``keep_alive_interval x
keep_alive_max_attempt``) and then the last call; after a node left (elastic_chaos.trainer.rdzv_leave) only the
last call. What remains -- the rendezvous' own work at that size -- is the measured part.
"""
from __future__ import annotations

from dataclasses import dataclass

from elastic_chaos.options import option, validate
from elastic_chaos.scale.figures import BackendFigures, Figures
from elastic_chaos.spec import RendezvousSpec
from elastic_chaos.torch_defaults import RDZV

MAX_SCALE_NODES = 100_000
"""The largest world a question may name: beyond any cluster torchrun has run, so a typo is refused
rather than extrapolated."""

KNOBS = ("keep_alive_interval", "keep_alive_max_attempt", "last_call_timeout", "join_timeout")
"""The rendezvous knobs a scale answer reads (torch's values for them: elastic_chaos.torch_defaults.RDZV)."""


@dataclass(frozen=True)
class Question:
    """``elastic-chaos scale``'s own options (the rendezvous ones are RendezvousSpec's)."""

    nodes: int | None = option(None, "nodes in the job (its world size); required", minimum=1,
                               maximum=MAX_SCALE_NODES, metavar="N")
    figures: str | None = option(None, "measured figures to use (default: the ones shipped with the toolkit, "
                                        "written by `python -m bench --scale-rdzv`)", metavar="PATH")
    store_costs: str | None = option(None, "measured c10d store costs for the store model (default: the ones "
                                            "shipped with the toolkit, written by `python -m bench --store-model`)",
                                     metavar="PATH")

    def __post_init__(self) -> None:
        validate(self)


@dataclass(frozen=True)
class Line:
    what: str
    seconds: float | None
    how: str
    """Where the figure comes from, in words: measured, interpolated, extrapolated, the preset."""


def knobs(rdzv: RendezvousSpec) -> dict[str, int]:
    """The job's rendezvous timeouts, torch's defaults where it leaves them unset."""
    return {k: int(getattr(rdzv, k)) if getattr(rdzv, k) is not None else RDZV[k] for k in KNOBS}


def estimate(b: BackendFigures, metric: str, nodes: int) -> tuple[float | None, str]:
    """A figure at ``nodes`` and how it was obtained (see the module docstring)."""
    pts = b.measured(metric)
    if not pts:
        return None, "not measured"
    limited = {p.nodes for p in b.points if metric in p.limited}
    exact = dict(pts)
    if nodes in exact:
        limit = " (this machine was the limit)" if nodes in limited else ""
        dilated = next((p.dilation for p in b.points if p.nodes == nodes and p.dilation != 1.0), None)
        under = f" under time dilation x{dilated:g}" if dilated else ""
        return exact[nodes], f"measured at {nodes} nodes{under}{limit}"
    if nodes < pts[0][0]:
        return pts[0][1], f"as measured at {pts[0][0]} nodes, the smallest size measured"
    if nodes > pts[-1][0]:
        fit = b.fits.get(metric)
        if fit is None:
            return pts[-1][1], f"as measured at {pts[-1][0]} nodes, the largest size measured (no model fitted)"
        caveat = f" ({fit.note.removeprefix('fitted on ')})" if "limited" in fit.note else ""
        floor_n = int(fit.n_max)
        if floor_n in exact and fit(nodes) < exact[floor_n]:
            # a rendezvous does no less work, and takes no less time, for more nodes: a model that falls below
            # its own largest point there has fitted noise (often two sizes' hundredths), not a trend. That
            # point is the largest the fit trusted (a size this machine limited is only an upper bound for itself)
            return exact[floor_n], (f"AT LEAST as measured at {floor_n} nodes (the model {fit.model} fitted on "
                                    f"{int(fit.n_min)}-{floor_n} nodes falls below that here: no growth to "
                                    f"extrapolate; measured up to {pts[-1][0]}{caveat})")
        return max(0.0, fit(nodes)), (f"EXTRAPOLATED beyond the largest size measured ({pts[-1][0]}): "
                                      f"{fit.model} fitted on {int(fit.n_min)}-{int(fit.n_max)} nodes, "
                                      f"rms {fit.rms:.3g}{caveat}")
    lo = max((p for p in pts if p[0] < nodes), default=None)
    hi = min((p for p in pts if p[0] > nodes), default=None)
    if lo is None or hi is None:
        return None, "not measured near this size"
    value = lo[1] + (hi[1] - lo[1]) * (nodes - lo[0]) / (hi[0] - lo[0])
    caveat = " (this machine was the limit there)" if lo[0] in limited or hi[0] in limited else ""
    return value, f"interpolated between the {lo[0]}- and {hi[0]}-node measurements{caveat}"


def expect(figs: Figures, backend: str, nodes: int, rdzv: RendezvousSpec) -> list[Line]:
    """The lines ``elastic-chaos scale`` prints, in order. Raises SpecError for an unmeasured backend."""
    b = figs.backend(backend)
    job, measured = knobs(rdzv), {**{k: RDZV[k] for k in KNOBS}, **figs.rdzv}
    expiry, measured_expiry = (k["keep_alive_interval"] * k["keep_alive_max_attempt"] for k in (job, measured))
    shift_last_call = job["last_call_timeout"] - measured["last_call_timeout"]
    same = expiry == measured_expiry and shift_last_call == 0
    lines = []
    form, how = estimate(b, "formation_s", nodes)
    lines.append(Line("formation (every node joins one round)", form, how))
    hard, how = estimate(b, "reform_hard_s", nodes)
    if hard is not None and not same:
        work = max(0.0, hard - measured_expiry - measured["last_call_timeout"])
        hard = expiry + job["last_call_timeout"] + work
        how = (f"the job's keep-alive expiry {expiry} s + last call {job['last_call_timeout']} s + the rendezvous' "
               f"own work {work:.1f} s ({how} with {figs.preset})")
    lines.append(Line("re-formation after 1 node lost (hard)", hard, how))
    left, how = estimate(b, "reform_leave_s", nodes)
    if left is not None and shift_last_call:
        left, how = max(0.0, left + shift_last_call), f"{how} with {figs.preset}, last call replaced by the job's"
    lines.append(Line("re-formation after 1 node left (--leave-on-sigterm)", left, how))
    join, how = estimate(b, "join_s", nodes)
    lines.append(Line("a node joining the running job", join, how))
    # a break under fast's short keep-alive expiry (heartbeats aging out while nodes queue for the store) need
    # not happen with longer ones: a job with other settings is told what the break was measured with
    measured_with = "" if same else (
        f" with preset {figs.preset} (keep-alive expiry {measured_expiry} s, last call "
        f"{measured['last_call_timeout']} s); this job's settings were not measured there")
    return _broken(b, nodes, lines, measured_with)


BROKEN_LINES = {"formation": 0, "hard 1": 1, "leave 1": 2, "join after": 3}
"""Which line the episode a size broke on stands for (Episode.label, the start of BackendFigures.broke_why)."""


def _broken(b: BackendFigures, nodes: int, lines: list[Line], measured_with: str = "") -> list[Line]:
    """At or past the size the harness broke at, no figure is extrapolated past the break: the episode that did
    not complete says so, and the others say that the size broke (``measured_with``: the settings the break was
    measured with, when the job's differ)."""
    if b.broke_at is None or nodes < b.broke_at:
        return lines
    why = b.broke_why or ""
    broken = next((i for label, i in BROKEN_LINES.items() if why.startswith(label)), None)
    out = []
    for i, line in enumerate(lines):
        if i == broken:
            out.append(Line(line.what, None,
                            f"DID NOT COMPLETE in the harness at {b.broke_at} nodes{measured_with} (below)"))
        else:
            out.append(Line(line.what, line.seconds,
                            f"{line.how}; the harness broke at {b.broke_at} nodes{measured_with} (below)"))
    return out


def traffic(figs: Figures, backend: str, nodes: int) -> list[tuple[str, float | None, str]]:
    """The store's load in steady state at ``nodes``: operations/s, bytes/s, its CPU (cores)."""
    b = figs.backend(backend)
    return [(label, *estimate(b, metric, nodes)) for label, metric in
            (("store operations per second", "store_ops_per_s"),
             ("store payload bytes per second", "store_bytes_per_s"),
             ("store CPU (cores)", "store_cpu"))]


def store_work(figs: Figures, backend: str, nodes: int) -> list[tuple[str, float | None, str]]:
    """What one formation and one re-formation after a hard loss cost the store: operations, payload MB,
    the store's own CPU seconds (its busy time: no cluster re-forms faster than its store can serve)."""
    b = figs.backend(backend)
    out = []
    for key, what in (("formation", "formation"), ("reform_hard", "re-formation after 1 node lost")):
        for unit, label in (("ops", "operations"), ("mb", "payload MB"), ("cpu_s", "store CPU seconds")):
            out.append((f"{what}: {label}", *estimate(b, f"{key}_store_{unit}", nodes)))
    return out
