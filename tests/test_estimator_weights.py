"""``sample_weight`` and ``class_weight`` in the estimators' ``fit`` (issue 31): the
weights scale each row's likelihood term, normalised to mean 1 (the objective stays per
datum); zero-weight rows are left out; equal weights are the unweighted fit. Fast, seeded."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from sklearn.exceptions import ConvergenceWarning

from svbnn import SVBNNClassifier, SVBNNPoissonRegressor, SVBNNRegressor

SMALL = dict(
    hidden_layer_sizes=(8,),
    max_iter=30,
    batch_size=64,
    learning_rate_init=0.02,
    n_samples_predict=5,
    random_state=0,
    tol=None,
)


def _reg_data(n: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 3))
    return X, 2 * X[:, 0] - X[:, 1] + 0.1 * rng.standard_normal(n)


def _clf_data(n: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, 3))
    return X, np.where(X[:, 0] + X[:, 1] > 0, "yes", "no")


def _count_data(n: int = 200, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 3))
    return X, rng.poisson(np.exp(1.0 + X[:, 0]))


CASES = [
    (SVBNNRegressor, _reg_data),
    (SVBNNClassifier, _clf_data),
    (SVBNNPoissonRegressor, _count_data),
]


def _out(est: object, X: np.ndarray) -> np.ndarray:
    if isinstance(est, SVBNNClassifier):
        return est.predict_proba(X)
    return est.predict(X)  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("cls, data", CASES)
def test_equal_zero_and_scaled_weights_are_exact(cls: type, data: object) -> None:
    X, y = data()  # type: ignore[operator]
    base = _out(cls(**SMALL).fit(X, y), X)
    # Equal weights (any constant) are the unweighted fit, bit for bit.
    np.testing.assert_array_equal(_out(cls(**SMALL).fit(X, y, sample_weight=3.0), X), base)
    np.testing.assert_array_equal(
        _out(cls(**SMALL).fit(X, y, sample_weight=np.full(len(y), 0.5)), X), base
    )
    # Zero-weight rows are left out: the fit on the other rows.
    w = np.ones(len(y))
    w[::3] = 0
    kept = _out(cls(**SMALL).fit(X[w > 0], y[w > 0]), X)
    np.testing.assert_array_equal(_out(cls(**SMALL).fit(X, y, sample_weight=w), X), kept)
    # Only relative weights count (normalised to mean 1; w / mean(w) and 7w / mean(7w)
    # differ by float64 rounding, 1e-16, which the float32 fit carries to ~1e-7 at most).
    w = np.random.default_rng(1).uniform(0.5, 2.0, len(y))
    a = _out(cls(**SMALL).fit(X, y, sample_weight=w), X)
    scaled = _out(cls(**SMALL).fit(X, y, sample_weight=7 * w), X)
    np.testing.assert_allclose(scaled, a, rtol=1e-5, atol=1e-6)
    assert not np.array_equal(a, base)


def test_weighted_regression_fits_the_weighted_target() -> None:
    # Two groups with the same inputs and offsets +1 / -1: weighting the first 9:1 moves
    # the fitted offset to the weighted mean 0.8; unweighted it is 0. The offset is
    # averaged over 400 rows (noise sd 0.1): its MC error is far below the 0.15 allowed.
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (200, 2))
    X = np.vstack([x, x])
    group = np.repeat([1.0, -1.0], 200)
    y = 2 * X[:, 0] + group + 0.1 * rng.standard_normal(400)
    params = {**SMALL, "max_iter": 200}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        plain = SVBNNRegressor(**params).fit(X, y)
        weighted = SVBNNRegressor(**params).fit(X, y, sample_weight=np.where(group > 0, 9, 1))
    assert abs(np.mean(plain.predict(x) - 2 * x[:, 0])) < 0.15
    assert abs(np.mean(weighted.predict(x) - 2 * x[:, 0]) - 0.8) < 0.15


def test_poisson_offset_is_the_weighted_mean_count() -> None:
    X, y = _count_data()
    w = np.random.default_rng(3).uniform(0.2, 3.0, len(y))
    est = SVBNNPoissonRegressor(**{**SMALL, "max_iter": 1}).fit(X, y, sample_weight=w)
    assert est.log_offset_ == np.log(np.average(y, weights=w))
    assert est.log_offset_ != np.log(np.mean(y))


def test_class_weight_is_a_per_class_sample_weight() -> None:
    X, y = _clf_data()
    by_class = SVBNNClassifier(**SMALL, class_weight={"yes": 5.0}).fit(X, y)
    by_row = SVBNNClassifier(**SMALL).fit(X, y, sample_weight=np.where(y == "yes", 5.0, 1.0))
    np.testing.assert_array_equal(by_class.predict_proba(X), by_row.predict_proba(X))
    # Both multiply.
    both = SVBNNClassifier(**SMALL, class_weight={"yes": 5.0}).fit(X, y, sample_weight=2.0)
    np.testing.assert_array_equal(both.predict_proba(X), by_row.predict_proba(X))


def test_balanced_class_weight_undoes_the_majority_collapse() -> None:
    # The imbalanced case of test_estimators_defaults (12% positives, weak signal): the
    # defaults predict the majority class for every row; "balanced" weighs the positives
    # (n / (2 * count)) so that rows with a high P(y=1) are predicted positive.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 5))
    y = (rng.random(600) < 1 / (1 + np.exp(2.3 - X[:, 0]))).astype(int)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        clf = SVBNNClassifier(max_iter=60, random_state=0, class_weight="balanced").fit(X, y)
    assert not clf.collapsed_
    pred = clf.predict(X)
    assert 0.1 < np.mean(pred == 1) < 0.6
    # The positives found are mostly those with a large x0 (the signal).
    assert np.mean(X[pred == 1, 0]) > np.mean(X[pred == 0, 0]) + 1.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(class_weight="balance"), "class_weight must be None, 'balanced' or a dict"),
        (dict(class_weight=[1, 2]), "class_weight must be None"),
        (dict(class_weight={"maybe": 2.0}), "class_weight has labels not in y"),
        (dict(class_weight={"yes": -1.0}), r"class_weight\['yes'\] must be finite"),
        (dict(class_weight={"yes": float("nan")}), r"class_weight\['yes'\] must be finite"),
        (dict(class_weight={"yes": 0, "no": 0}), "every row a weight of zero"),
    ],
)
def test_class_weight_errors(kwargs: dict, match: str) -> None:
    X, y = _clf_data(40)
    est = SVBNNClassifier(**{**SMALL, "max_iter": 1}, **kwargs)
    with pytest.raises(ValueError, match=match):
        est.fit(X, y)
    assert not hasattr(est, "classes_")


@pytest.mark.parametrize("cls, data", CASES)
def test_sample_weight_errors(cls: type, data: object) -> None:
    X, y = data(40)  # type: ignore[operator]
    est = cls(**{**SMALL, "max_iter": 1})
    bad = [
        (np.ones(39), "sample_weight"),
        (np.ones((40, 2)), "1D array"),
        (-np.ones(40), "sample_weight"),
        (np.full(40, np.nan), "sample_weight|NaN"),
        (np.zeros(40), "weight.*zero|zero.*weight"),
    ]
    for w, match in bad:
        with pytest.raises(ValueError, match=match):
            est.fit(X, y, sample_weight=w)
    assert not hasattr(est, "module_")


def test_one_class_left_by_the_weights_is_an_error() -> None:
    X, y = _clf_data(40)
    with pytest.raises(ValueError, match=r"at least 2 classes with a positive weight"):
        SVBNNClassifier(**SMALL).fit(X, y, sample_weight=(y == "yes").astype(float))
