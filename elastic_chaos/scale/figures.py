"""The measured rendezvous-at-scale figures the toolkit ships: one typed value, one JSON file.

``python -m bench --scale-rdzv`` measures them with the rendezvous lab (bench/rdzv, not shipped), which
turns the sizes' results into :class:`Figures` (bench/rdzv/shipped.py) -- per backend, per N, the figures
``elastic-chaos scale`` needs, which of them this machine limited, where the harness broke, and a fitted
model per figure -- and writes them to :data:`SHIPPED` (``elastic_chaos/scale/measured.json``, package data) with
:func:`save`. :func:`load` reads them back; nothing else reads that file.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from elastic_chaos.errors import SpecError
from elastic_chaos.scale.model import Fit, FitError

SHIPPED = Path(__file__).with_name("measured.json")

EPISODE_METRICS: dict[str, str] = {
    "formation_s": "formation",
    "reform_hard_s": "hard 1",
    "reform_hard_1pct_s": "hard 1%",
    "reform_hard_10pct_s": "hard 10%",
    "reform_leave_s": "leave 1",
    "reform_leave_1pct_s": "leave 1%",
    "reform_leave_10pct_s": "leave 10%",
    "reform_sigterm_s": "sigterm 1",
    "join_s": "join after hard 1",
}
"""Figure -> the episode it is read from (the rendezvous lab's episode labels, bench/rdzv/episodes.py)."""

STORE_WORK: dict[str, str] = {"formation": "formation", "reform_hard": "hard 1", "reform_leave": "leave 1",
                              "join": "join after hard 1"}
"""Episodes whose store work is kept: ``<key>_store_ops``, ``<key>_store_mb`` (payload), ``<key>_store_cpu_s``."""

STEADY_METRICS = ("store_ops_per_s", "store_bytes_per_s", "store_cpu", "agent_cpu")
"""Steady-state figures: store operations and payload bytes per second, the store's CPU (cores),
the harness' CPU per node (cores)."""


@dataclass(frozen=True)
class Point:
    nodes: int
    values: dict[str, float | None]
    limited: tuple[str, ...] = ()
    """Figures this machine limited (the lab's LIMITED_SHARE, bench/rdzv/records.py)."""
    load_avg: float | None = None
    dilation: float = 1.0
    """The time dilation it was measured under (bench/rdzv/clock.py): its seconds are perceived seconds."""

    def get(self, metric: str) -> float | None:
        return self.values.get(metric)


@dataclass(frozen=True)
class BackendFigures:
    backend: str
    points: tuple[Point, ...]
    fits: dict[str, Fit] = field(default_factory=dict)
    broke_at: int | None = None
    """The smallest N at which an episode did not complete (None: every size measured completed)."""
    broke_why: str | None = None

    @property
    def largest(self) -> int:
        return max((p.nodes for p in self.points), default=0)

    def measured(self, metric: str) -> list[tuple[int, float]]:
        return sorted((p.nodes, v) for p in self.points if (v := p.get(metric)) is not None)


@dataclass(frozen=True)
class Figures:
    date: str
    machine: str
    cores: int
    torch: str
    preset: str
    rdzv: dict[str, int]
    """The measured preset's keep_alive_interval, keep_alive_max_attempt, last_call_timeout, join_timeout."""
    backends: dict[str, BackendFigures]
    command: str = "python -m bench --scale-rdzv"

    def backend(self, name: str) -> BackendFigures:
        try:
            return self.backends[name]
        except KeyError:
            raise SpecError(f"no measured figures for rendezvous backend {name!r} (measured: "
                            f"{', '.join(sorted(self.backends)) or 'none'}); run `{self.command}`") from None

    def to_json(self) -> dict[str, Any]:
        return {"date": self.date, "machine": self.machine, "cores": self.cores, "torch": self.torch,
                "preset": self.preset, "rdzv": self.rdzv, "command": self.command,
                "backends": {name: {"points": [{"nodes": p.nodes, "values": p.values, "limited": list(p.limited),
                                                "load_avg": p.load_avg,
                                                **({"dilation": p.dilation} if p.dilation != 1.0 else {})}
                                               for p in b.points],
                                    "fits": {m: f.to_json() for m, f in b.fits.items()},
                                    "broke_at": b.broke_at, "broke_why": b.broke_why}
                             for name, b in self.backends.items()}}

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Figures:
        backends = {}
        for name, b in raw["backends"].items():
            points = tuple(Point(int(p["nodes"]), {k: None if v is None else float(v) for k, v in p["values"].items()},
                                 tuple(p.get("limited") or ()), p.get("load_avg"), float(p.get("dilation", 1.0)))
                           for p in b["points"])
            backends[name] = BackendFigures(name, points, {m: Fit.from_json(f) for m, f in b.get("fits", {}).items()},
                                            b.get("broke_at"), b.get("broke_why"))
        return cls(str(raw["date"]), str(raw["machine"]), int(raw["cores"]), str(raw["torch"]), str(raw["preset"]),
                   {k: int(v) for k, v in raw["rdzv"].items()}, backends, str(raw.get("command", cls.command)))


def load(path: Path | None = None) -> Figures:
    """The figures at ``path`` (default: the shipped ones). Raises SpecError saying how to measure them."""
    path = path or SHIPPED
    try:
        return Figures.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        raise SpecError(f"no measured figures at {path}: run `python -m bench --scale-rdzv` to measure them") from None
    except (OSError, ValueError, KeyError, TypeError, FitError) as exc:
        raise SpecError(f"cannot read the measured figures at {path} ({type(exc).__name__}: {exc}); "
                        "run `python -m bench --scale-rdzv` to measure them again") from None


def save(figures: Figures, path: Path | None = None) -> Path:
    path = path or SHIPPED
    path.write_text(json.dumps(figures.to_json(), indent=1) + "\n")
    return path

