"""scikit-learn contract, reproducibility and input validation of the estimators."""

import numpy as np
import pytest
import torch
from sklearn.base import clone
from sklearn.utils.estimator_checks import check_estimator

from svbnn import SVBNNClassifier, SVBNNRegressor

SMALL = dict(
    hidden_layer_sizes=(8,),
    max_iter=30,
    batch_size=64,
    learning_rate_init=0.02,
    n_samples_predict=5,
    random_state=0,
)


def _reg_data(n: int = 120, p: int = 4, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, p))
    return X, 2 * X[:, 0] - X[:, 1] + 0.1 * rng.standard_normal(n)


def _clf_data(n: int = 150, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    y = np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")
    return X, y


@pytest.mark.parametrize(
    "est", [SVBNNRegressor(**SMALL), SVBNNClassifier(**SMALL)], ids=["regressor", "classifier"]
)
def test_sklearn_estimator_checks(est: object) -> None:
    check_estimator(est)


def test_same_random_state_same_predictions_and_torch_input() -> None:
    X, y = _reg_data()
    a = SVBNNRegressor(**SMALL).fit(X, y)
    b = SVBNNRegressor(**SMALL).fit(torch.tensor(X), torch.tensor(y))
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    np.testing.assert_array_equal(a.predict(X), a.predict(X))
    lo, hi = a.predict_interval(X[:10], level=0.9, n_samples=50)
    assert np.all(lo <= hi)
    plo, phi = a.predict_prediction_interval(X[:10], level=0.9, n_samples=50)
    assert np.all(phi - plo > hi - lo)  # noise widens the interval
    c = SVBNNRegressor(**{**SMALL, "random_state": 1}).fit(X, y)
    assert not np.array_equal(a.predict(X), c.predict(X))


def test_clone_get_set_params_round_trip() -> None:
    est = SVBNNRegressor(**SMALL)
    params = est.get_params()
    twin = clone(est)
    assert twin.get_params() == params
    twin.set_params(max_iter=7, sampler="inverse_cdf")
    assert twin.max_iter == 7 and twin.sampler == "inverse_cdf"
    assert est.max_iter == 30
    assert SVBNNRegressor(**twin.get_params()).get_params() == twin.get_params()


def test_fitted_attributes() -> None:
    X, y = _reg_data()
    est = SVBNNRegressor(**SMALL).fit(X, y)
    assert est.n_features_in_ == 4
    assert [a.shape for a in est.inclusion_probs_] == [(8, 4), (1, 8)]
    assert 0 < est.sparsity_ <= 1 and 0 <= est.density_ <= 1
    assert est.lambda_ > 0 and np.isclose(np.log(est.lambda_), est.log_lambda_)
    assert set(est.selected_features_) <= set(range(4))
    module, report = est.export_sparse()
    assert report.n_total == 8 * 5 + 9
    assert 0 < report.n_nonzero <= report.n_total and report.size_bytes > 0
    assert len(est.history_.loss) == 30


def test_log_prior_inclusion_below_float_range() -> None:
    X, y = _reg_data()
    est = SVBNNRegressor(**{**SMALL, "log_prior_inclusion": -1000.0}).fit(X, y)
    assert est.lambda_ == 0.0 and est.log_lambda_ == -1000.0
    assert np.all(np.isfinite(est.predict(X)))


@pytest.mark.parametrize(
    "make_X, match",
    [
        (lambda X: X[:, 0], "2D array"),
        (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 5, np.nan, X), "NaN"),
        (lambda X: np.where(np.arange(X.size).reshape(X.shape) == 5, np.inf, X), "infinity"),
        (lambda X: X[:0], "0 sample"),
        (lambda X: X.astype(complex), "[Cc]omplex"),
        (lambda X: np.full(X.shape, "a", dtype=object), "could not convert|must be numeric|string"),
    ],
)
def test_bad_input_gives_clear_errors(make_X, match: str) -> None:  # type: ignore[no-untyped-def]
    X, y = _reg_data()
    with pytest.raises(ValueError, match=match):
        SVBNNRegressor(**SMALL).fit(make_X(X), y[: len(make_X(X))] if make_X(X).ndim else y)


def test_predict_checks_features_and_fit() -> None:
    X, y = _reg_data()
    est = SVBNNRegressor(**SMALL)
    with pytest.raises(Exception, match="not fitted"):
        est.predict(X)
    est.fit(X, y)
    with pytest.raises(ValueError, match="features"):
        est.predict(X[:, :3])
    with pytest.raises(ValueError):
        est.fit(X, y[:-1])
    with pytest.raises(ValueError, match="hidden_layer_sizes"):
        SVBNNRegressor(hidden_layer_sizes=(0,)).fit(X, y)
    with pytest.raises(ValueError, match="prior_inclusion"):
        SVBNNRegressor(prior_inclusion="large").fit(X, y)


def test_classifier_probabilities_and_unseen_labels() -> None:
    X, y = _clf_data()
    clf = SVBNNClassifier(**{**SMALL, "max_iter": 60}).fit(X, y)
    proba = clf.predict_proba(X)
    assert proba.shape == (150, 2)
    np.testing.assert_allclose(proba.sum(1), 1.0, rtol=1e-5)
    assert set(clf.predict(X)) <= {"no", "yes"}
    assert clf.score(X, y) > 0.8
    with pytest.raises(ValueError, match="not seen at fit time"):
        clf.score(X, np.where(y == "yes", "maybe", y))
    with pytest.raises(ValueError, match="class"):
        SVBNNClassifier(**SMALL).fit(X, np.full(150, "yes"))
