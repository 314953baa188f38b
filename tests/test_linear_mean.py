"""The regressor's sparse linear mean (``SVBNNRegressor(mean_function=...)``): the ARD fit,
its posterior draws, the export module that adds it, and the estimator with it (choice,
predictions, intervals, exports and files agreeing). Seeded; tolerances from the Monte
Carlo error of the quantity checked."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning

from svbnn import SVBNNRegressor
from svbnn._linear_mean import AUTO_RATIO, CV_FOLDS, cv_rmse, fit_linear_mean
from svbnn.estimators import CollapseWarning
from svbnn.export import PlusLinearMean
from svbnn.prediction import credible_interval, interval_of_draws, prediction_interval

FAST = dict(max_iter=300, random_state=0)


def _linear_table(n: int, seed: int, p: int = 16, k: int = 10, noise: float = 0.5):
    """``k`` linear effects (coefficients 0.2 to 1.0) among ``p`` N(0, 1) inputs."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, p))
    beta = np.zeros(p)
    beta[:k] = np.linspace(0.2, 1.0, k)
    return X, X @ beta + 3.0 + noise * rng.standard_normal(n), beta


def test_fit_linear_mean_keeps_the_effects_and_their_posterior() -> None:
    X, y, beta = _linear_table(2000, 0, noise=0.5)
    lin = fit_linear_mean(X, y, None)
    np.testing.assert_array_equal(lin.index, np.arange(10))
    # The least-squares sd of a coefficient here is about noise / sqrt(n) = 0.011; the
    # posterior sd ARD reports is that, and the estimate lies within 4 of them.
    sd = np.sqrt(np.diag(lin.cov))
    assert np.all((sd > 0.008) & (sd < 0.016))
    assert np.all(np.abs(lin.coef - beta[:10]) < 4 * sd)
    assert abs(lin.intercept - 3.0) < 4 * 0.5 / math.sqrt(2000)
    np.testing.assert_allclose(lin.predict(X), lin.intercept + X[:, :10] @ lin.coef)


def test_fit_linear_mean_weights() -> None:
    X, y, _ = _linear_table(300, 1)
    plain = fit_linear_mean(X, y, None)
    equal = fit_linear_mean(X, y, np.ones(len(y)))
    np.testing.assert_array_equal(plain.index, equal.index)
    np.testing.assert_allclose(plain.coef, equal.coef, rtol=1e-10)
    # Rows of a tiny weight hardly count: contaminating them leaves the fit within a
    # quarter of a posterior sd of the clean rows' (ARD's hyperparameters still count the
    # rows, so not equal).
    w = np.ones(len(y))
    w[:100] = 1e-12
    y2 = y.copy()
    y2[:100] += 50 * np.random.default_rng(2).standard_normal(100)
    down = fit_linear_mean(X, y2, w / w.mean())
    rest = fit_linear_mean(X[100:], y[100:], None)
    np.testing.assert_array_equal(down.index, rest.index)
    assert np.all(np.abs(down.coef - rest.coef) < 0.25 * np.sqrt(np.diag(rest.cov)))


def test_cv_rmse_cross_validates_the_linear_mean_that_is_fitted() -> None:
    """The rule's numerator is the cross-validated RMSE of fit_linear_mean itself (its
    2.5-sd screen in each fold), weighted as the fit, exactly, here on collinear inputs
    (where the screen and ARD on every input part ways)."""
    from sklearn.model_selection import KFold

    rng = np.random.default_rng(5)
    base = rng.standard_normal((150, 3))
    # Six inputs, pairs of nearly equal columns: each coefficient's posterior sd is large.
    X = np.repeat(base, 2, axis=1) + 0.01 * rng.standard_normal((150, 6))
    z = base @ np.array([1.0, -0.5, 0.3]) + 0.3 * rng.standard_normal(150)
    w = rng.uniform(0.5, 1.5, 150)
    w /= w.mean()
    pred = np.empty(150)
    for fit_rows, held in KFold(CV_FOLDS, shuffle=True, random_state=7).split(X):
        pred[held] = fit_linear_mean(X[fit_rows], z[fit_rows], w[fit_rows]).predict(X[held])
    expected = math.sqrt(np.average((z - pred) ** 2, weights=w))
    assert cv_rmse(X, z, w, 7) == pytest.approx(expected, rel=1e-12)


def test_no_linear_effect_gives_no_linear_mean() -> None:
    rng = np.random.default_rng(3)
    X = rng.standard_normal((400, 8))
    lin = fit_linear_mean(X, rng.standard_normal(400), None)
    # Pure noise: an input passes the 2.5-sd screen with probability about 0.012 each.
    assert lin.index.size <= 1


def test_coefficient_draws_follow_the_posterior() -> None:
    X, y, _ = _linear_table(200, 4)
    lin = fit_linear_mean(X, y, None)
    gen = torch.Generator().manual_seed(0)
    n = 20000
    b = lin.coefficient_draws(n, gen).numpy()
    sd = np.sqrt(np.diag(lin.cov))
    # Each mean within 4 Monte Carlo sds; each variance within 4 sds of its estimate
    # (sd of a sample variance: var * sqrt(2 / n)).
    assert np.all(np.abs(b.mean(0) - lin.coef) < 4 * sd / math.sqrt(n))
    ratio = b.var(0) / sd**2
    assert np.all(np.abs(ratio - 1) < 4 * math.sqrt(2 / n))
    # The draws of m(x) are the draws of the coefficients applied to the rows.
    Xt = torch.as_tensor(X[:5])
    gen = torch.Generator().manual_seed(1)
    m = lin.draws(Xt, 7, gen)
    b = lin.coefficient_draws(7, torch.Generator().manual_seed(1))
    np.testing.assert_allclose(m.numpy(), lin.intercept + b.numpy() @ X[:5, lin.index].T)


def test_plus_linear_mean_forms_are_exact() -> None:
    rng = np.random.default_rng(5)
    x = torch.as_tensor(rng.standard_normal((6, 4)))
    index = torch.tensor([0, 3])
    coef = torch.tensor([0.5, -2.0], dtype=torch.float64)
    cov = torch.tensor([[0.2, 0.05], [0.05, 0.1]], dtype=torch.float64)
    xs = x[:, index]
    m = xs @ coef + 1.5

    class Const(torch.nn.Module):
        def __init__(self, shape: tuple[int, ...]) -> None:
            super().__init__()
            self.shape = shape

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.ones(self.shape, dtype=torch.float64)

    point = PlusLinearMean(Const((6, 1)), index, coef, 1.5, None)(x)
    np.testing.assert_allclose(point[:, 0].numpy(), (1 + m).numpy())
    draws = torch.as_tensor(rng.standard_normal((3, 2)))
    out = PlusLinearMean(Const((3, 6, 1)), index, draws, 1.5, None)(x)
    np.testing.assert_allclose(out[..., 0].numpy(), (1 + draws @ xs.T + 1.5).numpy())
    mom = PlusLinearMean(Const((2, 6, 1)), index, coef, 1.5, cov)(x)
    np.testing.assert_allclose(mom[0, :, 0].numpy(), (1 + m).numpy())
    quad = torch.stack([xs[i] @ cov @ xs[i] for i in range(6)])
    np.testing.assert_allclose(mom[1, :, 0].numpy(), (1 + quad).numpy())
    with pytest.raises(ValueError, match="cov"):
        PlusLinearMean(Const((2, 6, 1)), index, draws, 1.5, cov)


def test_interval_of_draws_is_the_intervals_definition() -> None:
    from svbnn.nn import SpikeSlabMLP

    torch.manual_seed(0)
    model = SpikeSlabMLP(3, [8], 1).double()
    X = torch.randn(20, 3, dtype=torch.float64)
    from svbnn.prediction import sample_outputs

    draws = sample_outputs(model, X, 50, generator=torch.Generator().manual_seed(7))
    for got, want in zip(
        credible_interval(model, X, 0.9, 50, generator=torch.Generator().manual_seed(7)),
        interval_of_draws(draws, 0.9),
        strict=True,
    ):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    gen = torch.Generator().manual_seed(7)
    draws = sample_outputs(model, X, 50, generator=gen)
    want = interval_of_draws(draws, 0.9, 0.3, generator=gen)
    got = prediction_interval(model, X, 0.3, 0.9, 50, generator=torch.Generator().manual_seed(7))
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=0, atol=0)


def _fit(X, y, **kw):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return SVBNNRegressor(**{**FAST, **kw}).fit(X, y)


@pytest.fixture(scope="module")
def linear_fits():  # type: ignore[no-untyped-def]
    X, y, beta = _linear_table(300, 6)
    Xte, yte, _ = _linear_table(2000, 7)
    return X, y, Xte, yte, _fit(X, y, mean_function="zero"), _fit(X, y)


def test_auto_takes_the_linear_mean_on_linear_effects(linear_fits) -> None:  # type: ignore[no-untyped-def]
    X, y, Xte, yte, zero, auto = linear_fits
    assert zero.mean_function_ == "zero" and zero.linear_mean_ratio_ is None
    assert zero.linear_features_.size == 0 and not np.any(zero.linear_coef_)
    assert auto.mean_function_ == "linear" and auto.linear_mean_ratio_ <= AUTO_RATIO
    # All 10 effects (the weakest 0.2, about 7 least-squares sds) and no noise input.
    np.testing.assert_array_equal(auto.linear_features_, np.arange(10))
    assert set(auto.linear_features_) <= set(auto.selected_features_)
    assert np.all(auto.feature_inclusion_[auto.linear_features_] == 1.0)
    assert not set(auto.selected_features_) & set(range(10, 16))
    # Nearer the noise (0.5) than the network alone: on 2,000 test rows the RMSE's
    # sampling error is about 0.5 / sqrt(4000) = 0.008.
    rmse = [np.sqrt(np.mean((e.predict(Xte) - yte) ** 2)) for e in (zero, auto)]
    assert rmse[1] < 0.56 and rmse[1] < rmse[0] - 0.03
    assert abs(auto.noise_std_ - 0.5) < 0.1
    lo, hi = auto.predict_prediction_interval(Xte)
    # 95% coverage within 4 binomial sds (0.005 each at 2,000 rows) plus the noise
    # estimate's error.
    assert abs(np.mean((yte >= lo) & (yte <= hi)) - 0.95) < 0.04


def test_predictions_exports_and_files_agree_with_a_linear_mean(linear_fits, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, _, Xte, _, _, auto = linear_fits
    Xt = torch.as_tensor(Xte[:50])
    m, sd = auto.predict(Xte[:50], return_std=True)
    with torch.no_grad():
        both = auto.export_predictive(return_std=True)(Xt).numpy()
        mean = auto.export_predictive()(Xt).numpy()
        moments = auto.export_moments(return_std=True)(Xt).numpy()
        median = auto.export()(Xt).numpy()
    np.testing.assert_allclose(both[:, 0], m, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(both[:, 1], sd, rtol=1e-12)
    np.testing.assert_allclose(mean, m, rtol=1e-12, atol=1e-12)
    # The moment and median models approximate the posterior (their gaps measured in the
    # user guide, "Exporting for deployment"; here within 0.11 of the predictive sd).
    assert np.max(np.abs(moments[:, 0] - m) / sd) < 0.25
    assert np.max(np.abs(moments[:, 1] / sd - 1)) < 0.25
    assert np.max(np.abs(median - m) / sd) < 0.25
    # The linear term is in every export: without it they would be off by m(x).
    lin_part = Xte[:50] @ auto.linear_coef_
    assert np.std(lin_part) > 1.0
    path = tmp_path / "reg.svbnn"
    auto.save(path)
    back = SVBNNRegressor.load(path)
    assert back.mean_function_ == "linear"
    np.testing.assert_array_equal(back.predict(Xte[:50]), auto.predict(Xte[:50]))
    for a, b in zip(
        back.predict_prediction_interval(Xte[:50]),
        auto.predict_prediction_interval(Xte[:50]),
        strict=True,
    ):
        np.testing.assert_array_equal(a, b)


def test_auto_declining_is_the_zero_fit() -> None:
    rng = np.random.default_rng(8)
    X = rng.uniform(-2, 2, (200, 4))
    y = np.sin(2 * X[:, 0]) * 3 + np.abs(X[:, 1]) * 2 + 0.1 * rng.standard_normal(200)
    auto, zero = _fit(X, y), _fit(X, y, mean_function="zero")
    # No linear model predicts this (ARD's CV RMSE is near y's sd, 20 times the noise).
    assert auto.linear_mean_ratio_ > AUTO_RATIO and auto.mean_function_ == "zero"
    np.testing.assert_array_equal(auto.predict(X), zero.predict(X))
    assert auto.noise_std_ == zero.noise_std_


def test_forced_linear_mean_and_a_collapsed_network_do_not_warn_collapse() -> None:
    X, y, _ = _linear_table(300, 9, p=8, k=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        est = SVBNNRegressor(**FAST, mean_function="linear").fit(X, y)
    assert est.mean_function_ == "linear" and est.linear_mean_ratio_ is None
    # The residuals are noise: the network may explain none of them, the model does.
    assert not est.collapsed_
    assert not [w for w in caught if issubclass(w.category, CollapseWarning)]
    assert est.score(X, y) > 0.8


def test_bad_mean_function_is_refused_before_fitting() -> None:
    X, y, _ = _linear_table(50, 10)
    with pytest.raises(ValueError, match="mean_function"):
        SVBNNRegressor(mean_function="quadratic").fit(X, y)
