"""elastic_chaos.scale.model: least squares and the choice of model, on synthetic points (nothing measured)."""
from __future__ import annotations

import math

import pytest

from elastic_chaos.scale.model import MODELS, Fit, FitError, best_fit, fit, least_squares

SIZES = [8, 16, 32, 64, 128, 256, 512, 1024]


def test_exact_points_give_back_their_coefficients():
    ys = [2.0 + 0.01 * n + 0.0005 * n * math.log2(n) for n in SIZES]
    a, b, c = least_squares("a + b*N + c*N*log2(N)", SIZES, ys)
    assert a == pytest.approx(2.0, abs=1e-6) and b == pytest.approx(0.01, rel=1e-6)
    assert c == pytest.approx(0.0005, rel=1e-6)


def test_n_log_n_growth_chooses_the_n_log_n_model():
    ys = [1.0 + 0.002 * n + 0.003 * n * math.log2(n) + (0.05 if i % 2 else -0.05) for i, n in enumerate(SIZES)]
    chosen = best_fit(SIZES, ys)
    assert chosen.model == "a + b*N + c*N*log2(N)"
    assert chosen.loo_rms is not None and chosen.rms < 0.1


def test_quadratic_growth_chooses_the_quadratic_model():
    ys = [0.5 + 3.0 * n + 0.02 * n * n for n in SIZES]
    assert best_fit(SIZES, ys).model == "a + b*N + c*N^2"


def test_a_straight_line_is_not_bent_by_a_third_term():
    ys = [4.0 + 0.25 * n + (0.01 if i % 3 == 0 else -0.01) for i, n in enumerate(SIZES)]
    chosen = best_fit(SIZES, ys)
    assert chosen.model == "a + b*N"
    assert chosen(2048) == pytest.approx(4.0 + 0.25 * 2048, rel=0.01)


def test_the_fit_reports_its_residuals_and_range():
    ys = [1.0, 2.0, 3.5, 3.9]
    f = fit("a + b*N", [1, 2, 3, 4], ys)
    residuals = [f(n) - y for n, y in zip([1, 2, 3, 4], ys, strict=True)]
    assert f.max_error == pytest.approx(max(abs(r) for r in residuals))
    assert f.rms == pytest.approx(math.sqrt(sum(r * r for r in residuals) / 4))
    assert (f.n_min, f.n_max) == (1, 4)


def test_too_few_points_are_refused():
    with pytest.raises(FitError, match="at least 2 distinct N"):
        best_fit([8], [1.0])
    with pytest.raises(FitError, match="needs 3 distinct N"):
        least_squares("a + b*N + c*N^2", [8, 8, 16], [1.0, 1.0, 2.0])


def test_three_points_get_a_straight_line_not_a_curve_through_all_of_them():
    chosen = best_fit([8, 16, 32], [1.0, 2.0, 5.0])
    assert chosen.model == "a + b*N" and chosen.rms > 0


def test_with_too_few_points_for_leave_one_out_the_residual_decides():
    chosen = best_fit([8, 16], [1.0, 2.0])
    assert chosen.loo_rms is None and chosen.model in MODELS


def test_a_fit_survives_its_json():
    f = best_fit(SIZES, [0.1 * n for n in SIZES])
    assert Fit.from_json(f.to_json()) == f
    with pytest.raises(FitError, match="unknown model"):
        Fit.from_json({**f.to_json(), "model": "a*exp(N)"})
