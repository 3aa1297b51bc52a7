"""Where the c10d store model answers for a figure, so that ``elastic-chaos scale`` prints each quantity once.

The measured figures (:mod:`~elastic_chaos.scale.expect`) and the store model
(:mod:`~elastic_chaos.scale.store_model`) both speak of the store's steady load and of formation. They are not
the same quantities: the harness measured its load with the compare-and-sets it lost to races, at the preset it
ran (``fast``) and under time dilation; the model gives the collision-free load (a floor: every lost race adds
an operation) and a formation time for real nodes, each on one core, at the job's own settings. So:

- the steady load's rows are named for what they count: "measured, with lost races" where the harness measured
  (or between two sizes it measured), "collision-free (MODEL)" beyond the largest size it measured -- where a
  polynomial through the harness' load would stand beside the model's figure as a second answer for one
  question, and the model replaces it. Where measured, the model is one line, with its error against the
  measurement when the harness ran the job's settings;
- formation beyond the largest size measured is the model's, labelled as the model.

Pure functions over one :class:`~elastic_chaos.scale.store_model.Load`, computed once by the caller.
"""
from __future__ import annotations

from elastic_chaos.scale.expect import Line
from elastic_chaos.scale.figures import BackendFigures, Figures
from elastic_chaos.scale.store_model import Load, error

STEADY: tuple[tuple[str, str], ...] = (("store operations per second", "store_ops_per_s"),
                                       ("store payload bytes per second", "store_bytes_per_s"),
                                       ("store CPU (cores)", "store_cpu"))
"""The steady-state quantities the model covers: (what, the measured figure's metric)."""

Row = tuple[str, float | None, str]

_FULL = "; RULED OUT: more than one store core"


def beyond_measured(b: BackendFigures, metric: str, nodes: int) -> bool:
    """Whether ``nodes`` lies past the largest size at which ``metric`` was measured (there, a figure from the
    measurements alone would be an extrapolation)."""
    return nodes > largest_measured(b, metric)


def largest_measured(b: BackendFigures, metric: str) -> int:
    """The largest size at which ``metric`` was measured (0: at none)."""
    pts = b.measured(metric)
    return pts[-1][0] if pts else 0


def model_value(m: Load, metric: str) -> float:
    """The model's collision-free figure for a steady-state metric (:data:`STEADY`)."""
    return {"store_ops_per_s": m.ops_per_s, "store_bytes_per_s": m.bytes_per_s, "store_cpu": m.store_cores}[metric]


def steady(figs: Figures, backend: str, measured: list[Row], m: Load, same_settings: bool) -> tuple[list[Row], str]:
    """The steady-state rows and the model's one line (``""`` when the rows are the model's).

    ``measured`` is :func:`~elastic_chaos.scale.expect.traffic`'s rows for ``m.nodes``, in :data:`STEADY`'s order;
    ``same_settings``: the harness ran the job's keep-alive interval (its compare-and-set rate)."""
    b = figs.backend(backend)
    rows: list[Row] = []
    errors = []
    settings = "" if same_settings else (f" with preset {figs.preset} (keep-alive interval "
                                         f"{figs.rdzv['keep_alive_interval']} s; this job's was not measured)")
    # past the largest size any of them was measured, all three are the model's: a mix would print one twice
    beyond = any(beyond_measured(b, metric, m.nodes) for _, metric in STEADY)
    for (what, metric), (_, value, how) in zip(STEADY, measured, strict=True):
        if beyond:
            rows.append((f"{what}, collision-free (MODEL)", model_value(m, metric),
                         "MODEL (below), this job's settings: a floor, each race lost adds to it (the model does "
                         f"not predict them; the harness measured its load only up to {largest_measured(b, metric)} "
                         "nodes)" + (_FULL if metric == "store_cpu" and m.over_capacity else "")))
            continue
        rows.append((f"{what}, measured with lost races", value, how + settings))
        if same_settings and value:
            errors.append(f"{error(model_value(m, metric), value):+.0%}")
    if beyond:
        return rows, ""
    line = (f"{m.ops_per_s:,.0f} ops/s, {m.bytes_per_s / 1e6:,.0f} MB/s, {m.store_cores:.2f} of one store core "
            "(MODEL, below: this job's settings, no race lost)" + (_FULL if m.over_capacity else ""))
    if errors and len(errors) == len(STEADY):
        line += f"; against the measured: {', '.join(errors)} (the lost races, which the model does not predict)"
    return rows, line


def formation(line: Line, b: BackendFigures, m: Load, preset: str) -> Line:
    """The formation line: the model's beyond the largest size measured (keeping what the harness, run with
    ``preset``, said of a break there), else ``line`` as measured."""
    if not beyond_measured(b, "formation_s", m.nodes):
        return line
    broke = ""
    if b.broke_at is not None and m.nodes >= b.broke_at:
        broke = f"; the harness did not complete one at {b.broke_at} nodes with preset {preset} (below)"
    if m.formation_s is None:
        return Line(line.what, None, f"MODEL (below), this job's settings: none, {m.why()}{broke}")
    return Line(line.what, m.formation_s, "MODEL (below), this job's settings: real nodes each on one core, all "
                                          f"starting together{broke}")
