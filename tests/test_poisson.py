"""The Poisson likelihood end to end: the ELBO's likelihood term against a dense reference,
prediction with integer intervals, and ``SVBNNPoissonRegressor`` on generated counts."""

import math
import warnings

import numpy as np
import pytest
import torch
from scipy.stats import poisson
from sklearn.linear_model import PoissonRegressor
from sklearn.metrics import d2_tweedie_score
from sklearn.utils.estimator_checks import check_estimator

from svbnn import SVBNNPoissonRegressor
from svbnn.nn import SpikeSlabMLP, set_generator
from svbnn.objectives import Likelihood, PoissonLikelihood
from svbnn.prediction import response_interval, response_mean, sample_outputs
from svbnn.training import loss_objective, negative_elbo, train


def _counts(n: int, seed: int, p: int = 8) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Counts whose log rate depends on inputs 0, 1 and 2 only, non-linearly:
    ``1 + sin(2 x0) + 0.8 x1 x2``; returns ``(X, y, rate)``."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.5, 1.5, (n, p))
    rate = np.exp(1.0 + np.sin(2 * X[:, 0]) + 0.8 * X[:, 1] * X[:, 2])
    return X, rng.poisson(rate), rate


def test_log_prob_mean_and_sample_follow_the_poisson_law() -> None:
    lik = PoissonLikelihood(log_offset=0.5)
    assert isinstance(lik, Likelihood)
    out = torch.linspace(-2, 2, 7, dtype=torch.float64).reshape(7, 1)
    y = torch.tensor([0, 1, 2, 3, 5, 8, 13], dtype=torch.float64)
    ref = torch.distributions.Poisson((out[:, 0] + 0.5).exp()).log_prob(y)
    torch.testing.assert_close(lik.log_prob(out, y), ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(lik.mean(out), (out + 0.5).exp())
    # Draws: whole numbers, reproducible from the generator, mean within 4 standard errors.
    big = torch.full((20000, 1), math.log(3.0) - 0.5, dtype=torch.float64)
    draws = lik.sample(big, torch.Generator().manual_seed(0))
    assert draws.shape == (20000,) and bool(torch.all(draws == draws.round()))
    assert torch.equal(draws, lik.sample(big, torch.Generator().manual_seed(0)))
    assert abs(float(draws.mean()) - 3.0) < 4 * math.sqrt(3.0 / 20000)
    with pytest.raises(ValueError, match="log_offset"):
        PoissonLikelihood(math.inf)


def test_the_elbo_likelihood_term_equals_the_dense_reference() -> None:
    # Gates forced on (alpha = 30: phi = 1 - 1e-13) and sigma tiny (rho = -40): every
    # training draw is the dense network of weights mu, to float64 rounding.
    g = torch.Generator().manual_seed(0)
    model = SpikeSlabMLP(4, (6,), 1, generator=g, dtype=torch.float64)
    with torch.no_grad():
        model.alpha.fill_(30.0)
        model.rho.fill_(-40.0)
    set_generator(model, torch.Generator().manual_seed(1))
    f64 = {"dtype": torch.float64}
    dense = torch.nn.Sequential(
        torch.nn.Linear(4, 6, **f64), torch.nn.ReLU(), torch.nn.Linear(6, 1, **f64)
    )
    with torch.no_grad():
        for layer, plain in zip(model.layers(), (dense[0], dense[2]), strict=True):
            w, b = layer.median_weights()
            plain.weight.copy_(w)
            plain.bias.copy_(b)
    x = torch.randn(32, 4, generator=g, dtype=torch.float64)
    y = torch.poisson(torch.full((32,), 2.0, dtype=torch.float64), generator=g)
    lik = PoissonLikelihood(log_offset=0.3)
    _, nll, _ = negative_elbo(model, lik, x, y, n_train=100)
    ref = torch.distributions.Poisson((dense(x)[:, 0] + 0.3).exp()).log_prob(y).sum()
    torch.testing.assert_close(-nll * 32, ref.detach(), rtol=1e-10, atol=1e-10)


def test_train_and_prediction_take_any_likelihood() -> None:
    # train() with the Poisson likelihood on a small network, then the posterior mean rate
    # and integer intervals from the predictive mixture.
    X, y, _ = _counts(200, 0, p=3)
    Xt, yt = torch.tensor(X, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    model = SpikeSlabMLP(3, (8,), 1, generator=torch.Generator().manual_seed(0))
    lik = PoissonLikelihood(float(np.log(y.mean())))
    history = train(model, Xt, yt, lik, epochs=3, batch_size=50, lr=1e-2)
    assert len(history.loss) == 3 and all(np.isfinite(history.loss))
    rate = response_mean(model, Xt, lik, 20, generator=torch.Generator().manual_seed(1))
    assert rate.shape == (200, 1) and bool(torch.all(rate > 0))
    lo, hi = response_interval(model, Xt, lik, 0.9, 50, generator=torch.Generator().manual_seed(2))
    assert lo.shape == hi.shape == (200,)
    assert bool(torch.all((lo == lo.round()) & (hi == hi.round()) & (lo <= hi) & (lo >= 0)))


def test_negative_counts_are_refused_by_name() -> None:
    X = np.random.default_rng(0).standard_normal((10, 2))
    est = SVBNNPoissonRegressor(max_iter=1)
    with pytest.raises(ValueError, match=r"y must be non-negative counts.*-1"):
        est.fit(X, np.array([0, 1, 2, 3, 4, 5, 6, 7, 8, -1]))
    assert not hasattr(est, "module_")


def test_sklearn_estimator_checks() -> None:
    from test_estimators import _SAMPLE_WEIGHT_XFAIL

    check_estimator(
        SVBNNPoissonRegressor(
            hidden_layer_sizes=(8,),
            max_iter=30,
            batch_size=64,
            learning_rate_init=0.02,
            n_samples_predict=5,
            random_state=0,
        ),
        expected_failed_checks=_SAMPLE_WEIGHT_XFAIL,
    )


@pytest.fixture(scope="module")
def count_fit() -> tuple[SVBNNPoissonRegressor, np.ndarray, np.ndarray, np.ndarray]:
    X, y, _ = _counts(1500, 0)
    est = SVBNNPoissonRegressor(hidden_layer_sizes=(20,), random_state=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the fit's result is the one-thread run's
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the default fit converges, no warning
            est.fit(X, y)
    finally:
        torch.set_num_threads(threads)
    return (est, *_counts(2000, 1))


def test_counts_recover_the_relevant_inputs(count_fit: tuple) -> None:
    est = count_fit[0]
    assert est.selected_features_.tolist() == [0, 1, 2]


def _dense_d2(X: np.ndarray, y: np.ndarray, X_test: np.ndarray, y_test: np.ndarray) -> float:
    """D^2 of a plain network of the same widths (no prior: maximum likelihood), trained
    by ``train`` on the Poisson negative log-likelihood for the same 200 epochs."""
    torch.manual_seed(0)
    dense = torch.nn.Sequential(torch.nn.Linear(8, 20), torch.nn.ReLU(), torch.nn.Linear(20, 1))
    lik = PoissonLikelihood(float(np.log(y.mean())))
    train(
        dense,
        torch.tensor(X, dtype=torch.float32),
        torch.tensor(y, dtype=torch.float32),
        objective=loss_objective(lambda out, t: -lik.log_prob(out, t).mean()),
        epochs=200,
        batch_size=128,
        lr=1e-2,
        generator=torch.Generator().manual_seed(0),
    )
    with torch.no_grad():
        rate = lik.mean(dense(torch.tensor(X_test, dtype=torch.float32)))[:, 0]
    return float(d2_tweedie_score(y_test, rate.double().numpy(), power=1))


def test_counts_deviance_explained_beats_the_glm_and_nears_the_truth(count_fit: tuple) -> None:
    est, X, y, rate = count_fit
    train_X, train_y, _ = _counts(1500, 0)
    d2 = est.score(X, y)
    truth = d2_tweedie_score(y, rate, power=1)  # the true rates' D^2 on these counts
    glm = PoissonRegressor().fit(train_X, train_y).score(X, y)
    # A non-linear log rate: the linear GLM explains little of it (about 0.26).
    assert glm + 0.3 < d2 <= truth
    assert d2 > truth - 0.1
    # As much as a dense network of the same widths (about 0.66 here).
    assert d2 > _dense_d2(train_X, train_y, X, y) - 0.05
    pred = est.predict(X)
    assert pred.shape == (2000,) and bool(np.all(pred > 0))


def test_count_intervals_cover_as_nominal_within_monte_carlo_error(count_fit: tuple) -> None:
    est, X, y, rate = count_fit
    level = 0.9
    lo, hi = est.predict_interval(X, level)
    assert lo.dtype == hi.dtype == np.int64 and bool(np.all(lo <= hi))
    cover = float(np.mean((y >= lo) & (y <= hi)))
    # Counts are discrete: an equal-tailed interval of whole numbers holds at least the
    # level, and the true law's own interval (the same rule at the true rates) holds
    # `oracle` of it. The fitted intervals lie between, within 3 binomial standard errors.
    a = (1 - level) / 2
    olo, ohi = poisson.ppf(a, rate), poisson.ppf(1 - a, rate)
    oracle = float(np.mean(poisson.cdf(ohi, rate) - poisson.cdf(olo - 1, rate)))
    se = math.sqrt(level * (1 - level) / len(y))
    assert level - 3 * se <= cover <= oracle + 3 * se


def test_the_exported_median_model_outputs_the_log_rate(count_fit: tuple) -> None:
    est, X, _, _ = count_fit
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (unresolved gates would warn)
        module, report = est.export_sparse(storage="dense")
    Xt = torch.tensor(X[:50], dtype=torch.float32)
    with torch.no_grad():
        exported = module(Xt)[:, 0].double()
        median = sample_outputs(est.module_, Xt, mode="median")[0, :, 0].double()
    torch.testing.assert_close(exported, median + est.log_offset_, rtol=1e-5, atol=1e-5)
    assert report.n_nonzero < report.n_total


def test_exports_give_the_rate_and_predict(count_fit: tuple) -> None:
    # export() ends with the rate of the median model, exp(eta + log_offset_);
    # export_predictive() with the mean rate of predict's draws.
    est, X, _, _ = count_fit
    x = torch.from_numpy(X[:50])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (unresolved gates would warn)
        rate = est.export()(x).double()
    median = sample_outputs(est._module64(), x, mode="median")[0, :, 0]
    # The export computes in the fit's float32 (u = 6e-8; a few roundings per layer).
    torch.testing.assert_close(rate, torch.exp(median + est.log_offset_), rtol=1e-5, atol=0)
    got = est.export_predictive()(x).numpy()
    np.testing.assert_allclose(got, est.predict(X[:50]), rtol=1e-12, atol=0)
    with pytest.raises(ValueError, match="return_std"):
        est.export_predictive(return_std=True)
    # export_moments(): the mean rate exp(m + v / 2) of the log rate's moments. The
    # approximation and predict's 30-draw Monte Carlo error (sd ~ rate's posterior sd /
    # sqrt(30)) leave a median gap of 1.8% at this fit; 5% is the bound.
    moments = est.export_moments()(x).numpy()
    assert float(np.median(np.abs(moments / est.predict(X[:50]) - 1))) < 0.05
    with pytest.raises(ValueError, match="return_std"):
        est.export_moments(return_std=True)
