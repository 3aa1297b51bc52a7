"""Fit a figure over the job size N by least squares, and say which model fits and how well.

Candidates (:data:`MODELS`): ``a + b*N``, ``a + b*N + c*N*log2(N)``, ``a + b*N + c*N^2``,
``a + b*N^2 + c*N^3`` (bytes through one key when every node rewrites it N times). Each is
fitted by ordinary least squares (normal equations, solved here: no numpy in the toolkit's core).
The one chosen has the smallest leave-one-out error -- each point predicted by a fit of the
others -- which favours the model that extrapolates, not the one with most terms; with too few
points for that, the smallest residual error decides. Pure functions; nothing is measured here.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Basis = tuple[Callable[[float], float], ...]

MODELS: dict[str, Basis] = {
    "a + b*N": (lambda n: 1.0, lambda n: n),
    "a + b*N + c*N*log2(N)": (lambda n: 1.0, lambda n: n, lambda n: n * math.log2(max(n, 1.0))),
    "a + b*N + c*N^2": (lambda n: 1.0, lambda n: n, lambda n: n * n),
    "a + b*N^2 + c*N^3": (lambda n: 1.0, lambda n: n * n, lambda n: n * n * n),
}


class FitError(ValueError):
    """Too few points (or all at one N) to fit a model."""


@dataclass(frozen=True)
class Fit:
    model: str
    coef: tuple[float, ...]
    rms: float
    """Root-mean-square residual over the points (in the figure's unit)."""
    max_error: float
    loo_rms: float | None
    """Root-mean-square leave-one-out error; None with too few points."""
    n_min: float
    n_max: float
    """The range of N it was fitted on: beyond n_max a prediction is an extrapolation."""
    note: str = ""
    """What the points were (e.g. that some were limited by the measuring machine)."""

    def __call__(self, n: float) -> float:
        return sum(c * f(n) for c, f in zip(self.coef, MODELS[self.model], strict=True))

    def formula(self) -> str:
        names = "abc"
        return self.model + " with " + ", ".join(f"{names[i]}={c:.4g}" for i, c in enumerate(self.coef))

    def to_json(self) -> dict[str, object]:
        return {"model": self.model, "coef": list(self.coef), "rms": self.rms, "max_error": self.max_error,
                "loo_rms": self.loo_rms, "n_min": self.n_min, "n_max": self.n_max, "note": self.note}

    @classmethod
    def from_json(cls, raw: dict[str, object]) -> Fit:
        model = str(raw["model"])
        if model not in MODELS:
            raise FitError(f"unknown model {model!r}; known: {', '.join(MODELS)}")
        loo = raw.get("loo_rms")
        return cls(model, tuple(float(c) for c in raw["coef"]),  # type: ignore[attr-defined]
                   float(raw["rms"]), float(raw["max_error"]),  # type: ignore[arg-type]
                   None if loo is None else float(loo), float(raw["n_min"]), float(raw["n_max"]),  # type: ignore[arg-type]
                   str(raw.get("note") or ""))


def _solve(a: list[list[float]], b: list[float]) -> list[float]:
    """Gaussian elimination with partial pivoting; FitError for a singular system."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for col in range(n):
        pivot = max(range(col, n), key=lambda r: abs(m[r][col]))
        if abs(m[pivot][col]) < 1e-300:
            raise FitError("the points do not determine the model (too few distinct N)")
        m[col], m[pivot] = m[pivot], m[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for c in range(col, n + 1):
                m[r][c] -= f * m[col][c]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (m[r][n] - sum(m[r][c] * x[c] for c in range(r + 1, n))) / m[r][r]
    return x


def least_squares(model: str, ns: Sequence[float], ys: Sequence[float]) -> tuple[float, ...]:
    """The coefficients of ``model`` minimising the squared error over the points. Columns are scaled
    to unit size before solving (N^2 and 1 differ by 10^7 at N = 4096)."""
    basis = MODELS[model]
    if len(ns) < len(basis) or len(set(ns)) < len(basis):
        raise FitError(f"{model} needs {len(basis)} distinct N, got {sorted(set(ns))}")
    rows = [[f(n) for f in basis] for n in ns]
    scale = [max(abs(r[j]) for r in rows) or 1.0 for j in range(len(basis))]
    rows = [[v / scale[j] for j, v in enumerate(r)] for r in rows]
    k = len(basis)
    ata = [[sum(r[i] * r[j] for r in rows) for j in range(k)] for i in range(k)]
    aty = [sum(r[i] * y for r, y in zip(rows, ys, strict=True)) for i in range(k)]
    return tuple(c / s for c, s in zip(_solve(ata, aty), scale, strict=True))


def fit(model: str, ns: Sequence[float], ys: Sequence[float]) -> Fit:
    coef = least_squares(model, ns, ys)
    probe = Fit(model, coef, 0.0, 0.0, None, min(ns), max(ns))
    residuals = [probe(n) - y for n, y in zip(ns, ys, strict=True)]
    loo = []
    k = len(MODELS[model])
    if len(set(ns)) >= k + 2:
        for i in range(len(ns)):
            rest_n, rest_y = [*ns[:i], *ns[i + 1:]], [*ys[:i], *ys[i + 1:]]
            try:
                loo.append(Fit(model, least_squares(model, rest_n, rest_y), 0, 0, None, 0, 0)(ns[i]) - ys[i])
            except FitError:
                loo = []
                break
    return Fit(model, coef, _rms(residuals), max(abs(r) for r in residuals), _rms(loo) if loo else None,
               min(ns), max(ns))


def best_fit(ns: Sequence[float], ys: Sequence[float]) -> Fit:
    """The candidate with the smallest leave-one-out error (the smallest residual where none could be
    computed). A model is a candidate only with two distinct N more than its terms -- fewer, and it
    passes through every point whatever the truth -- except the straight line, which needs two.
    Raises FitError when no candidate can be fitted."""
    fits = []
    distinct = len(set(ns))
    for model, basis in MODELS.items():
        if len(basis) > 2 and distinct < len(basis) + 2:
            continue
        try:
            fits.append(fit(model, ns, ys))
        except FitError:
            continue
    if not fits:
        raise FitError(f"cannot fit {len(ns)} point(s): at least 2 distinct N are needed")
    with_loo = [f for f in fits if f.loo_rms is not None]
    if with_loo:
        return min(with_loo, key=lambda f: (f.loo_rms or 0.0, len(MODELS[f.model])))
    return min(fits, key=lambda f: (f.rms, len(MODELS[f.model])))


def _rms(values: Sequence[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else 0.0
