"""``prior_inclusion="cv"``: the held-out choice of the prior inclusion (issue 31)."""

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.utils.estimator_checks import check_estimator

from svbnn import SVBNNClassifier, SVBNNRegressor
from svbnn._estimator_base import _held_out_rows, _subset_weights
from svbnn.estimators import INCLUSION_GRID, INCLUSION_MAX, _one_standard_error

SMALL = dict(
    hidden_layer_sizes=(8,),
    max_iter=40,
    batch_size=256,
    learning_rate_init=0.02,
    n_samples_predict=5,
    random_state=0,
    prior_inclusion="cv",
)


def test_one_standard_error_rule_exactly() -> None:
    # Candidate 2 is best; candidate 1 lies within one standard error of it, candidate 0
    # far below: the rule keeps candidate 1 (the sparsest within one error).
    rng = np.random.default_rng(0)
    base = rng.standard_normal(400)
    e = rng.standard_normal(400)
    e -= e.mean()  # candidate 1 is 0.01 below the best on average, with spread 0.5
    lpd = np.stack([base - 1.0, base - 0.01 + 0.5 * e, base])
    w = np.full(400, 1 / 400)
    means, chosen = _one_standard_error(lpd, w)
    np.testing.assert_allclose(means, lpd.mean(1), rtol=1e-12)
    se1 = np.std(lpd[1] - lpd[2], ddof=1) / math.sqrt(400)
    assert means[1] >= means[2] - se1  # the premise of the case
    assert chosen == 1
    # Equal candidates: the sparsest (first) is kept.
    assert _one_standard_error(np.stack([base, base]), w)[1] == 0
    # A clearly better dense candidate is kept over a worse sparse one.
    assert _one_standard_error(np.stack([base - 1.0, base]), w)[1] == 1


def test_held_out_rows_partition_and_stratify() -> None:
    y = torch.tensor([0] * 80 + [1] * 20)
    fit, held = _held_out_rows(y, seed=3)
    assert len(held) == 20 and len(fit) == 80
    assert sorted(np.concatenate([fit, held]).tolist()) == list(range(100))
    assert int((y[held] == 1).sum()) == 4  # stratified: 20% of each class
    fit2, held2 = _held_out_rows(y, seed=3)
    assert np.array_equal(held, held2)  # a seed gives one split
    # Regression targets (floating) are split without strata.
    fit, held = _held_out_rows(torch.randn(11, dtype=torch.float64), seed=0)
    assert len(held) == 2 and len(fit) == 9


def test_a_held_out_fit_keeps_its_rows_weights_at_mean_one() -> None:
    # The fit on 80% of the rows is per datum like the whole fit (_row_weights).
    w = np.array([1.0, 2.0, 3.0, 4.0, 0.5])
    part = _subset_weights(w, np.array([1, 3, 4]))
    assert part is not None
    np.testing.assert_allclose(part, np.array([2.0, 4.0, 0.5]) / (6.5 / 3), rtol=1e-15)
    assert part.mean() == pytest.approx(1.0, abs=1e-15)
    assert _subset_weights(None, np.array([0, 1])) is None


def _sparse_problem(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 8))
    return X, X[:, 0] - X[:, 1] + 0.3 * rng.standard_normal(n)


def test_cv_regressor_records_its_choice_and_reproduces() -> None:
    X, y = _sparse_problem(150)
    a = SVBNNRegressor(**SMALL).fit(X, y)
    assert a.inclusion_grid_.shape == (INCLUSION_GRID,)
    assert a.inclusion_scores_.shape == (INCLUSION_GRID,)
    assert np.all(np.isfinite(a.inclusion_scores_))
    assert np.all(np.diff(a.inclusion_grid_) > 0)
    assert a.inclusion_grid_[-1] == math.log(INCLUSION_MAX)
    assert a.log_lambda_ in a.inclusion_grid_.tolist()
    assert a.lambda_ == pytest.approx(math.exp(a.log_lambda_))
    b = SVBNNRegressor(**SMALL).fit(X, y)
    assert a.log_lambda_ == b.log_lambda_
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
    # A refit with another prior leaves no stale choice behind.
    a.set_params(prior_inclusion="opt").fit(X, y)
    assert not hasattr(a, "inclusion_grid_") and not hasattr(a, "inclusion_scores_")


def test_cv_classifier_with_weights() -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((160, 5))
    y = (X[:, 0] + 0.3 * rng.standard_normal(160) > 0).astype(int)
    w = rng.uniform(0.5, 2.0, 160)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SVBNNClassifier(**SMALL).fit(X, y, sample_weight=w)
    assert est.log_lambda_ in est.inclusion_grid_.tolist()
    assert est.predict_proba(X).shape == (160, 2)


def test_cv_with_too_few_rows_is_lambda_opt() -> None:
    X, y = _sparse_problem(8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cv = SVBNNRegressor(**SMALL).fit(X, y)
        opt = SVBNNRegressor(**{**SMALL, "prior_inclusion": "opt"}).fit(X, y)
    assert cv.log_lambda_ == opt.log_lambda_ and not hasattr(cv, "inclusion_grid_")


@pytest.mark.slow  # about a minute: the scikit-learn checks fit the grid dozens of times
@pytest.mark.parametrize("cls", [SVBNNRegressor, SVBNNClassifier], ids=lambda c: c.__name__)
def test_sklearn_checks_with_cv(cls: type) -> None:
    from test_estimators import _SAMPLE_WEIGHT_XFAIL

    check_estimator(cls(**SMALL), expected_failed_checks=_SAMPLE_WEIGHT_XFAIL)


def test_cv_poisson_regressor() -> None:
    from svbnn import SVBNNPoissonRegressor

    rng = np.random.default_rng(2)
    X = rng.standard_normal((150, 4))
    y = rng.poisson(np.exp(0.5 + 0.8 * X[:, 0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = SVBNNPoissonRegressor(**SMALL).fit(X, y)
    assert est.log_lambda_ in est.inclusion_grid_.tolist()
    assert np.all(np.isfinite(est.inclusion_scores_))
    assert np.all(est.predict(X) > 0)


def test_cv_choice_survives_save_and_load(tmp_path) -> None:  # type: ignore[no-untyped-def]
    X, y = _sparse_problem(120)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = SVBNNRegressor(**SMALL).fit(X, y)
    path = tmp_path / "m.svbnn"
    a.save(path)
    b = SVBNNRegressor.load(path)
    np.testing.assert_array_equal(a.inclusion_grid_, b.inclusion_grid_)
    np.testing.assert_array_equal(a.inclusion_scores_, b.inclusion_scores_)
    assert a.log_lambda_ == b.log_lambda_
    np.testing.assert_array_equal(a.predict(X), b.predict(X))
