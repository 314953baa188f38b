"""Property tests of the estimators' input validation (issue 15).

The invariant, for any data and hyperparameters: ``fit``/``predict`` either raise a clear
``ValueError``/``TypeError`` (its message names the argument, or is one of scikit-learn's
standard data-validation messages, which users know), or return finite numbers. Training
that overflows raises ``FloatingPointError`` saying so (the documented behaviour of
:func:`svbnn.training.train`). Fits are tiny (one or two epochs of a two-unit network).
"""

from __future__ import annotations

import re
import warnings
from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svbnn import SVBNNClassifier, SVBNNRegressor

FAST = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,  # seeded: the same examples every run (found bugs get their own tests)
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
BASE = dict(hidden_layer_sizes=(2,), max_iter=1, batch_size=8, n_samples_predict=2)

# Names a clear message may name, and scikit-learn's own data-validation messages.
_NAMES = set(SVBNNRegressor().get_params()) | {"X", "y", "n_samples", "level"}
_SKLEARN = (
    "Expected 2D array",
    "Found array with dim",
    "Expected a 2-dimensional",
    "inconsistent numbers of samples",
    r"0 sample\(s\)",
    r"0 feature\(s\)",
    "Unknown label type",
    "at least 2 classes",
    "features, but",
    "Complex data not supported",
    "dtype='numeric' is not compatible",
)


def _is_clear(e: BaseException) -> bool:
    msg = str(e)
    if isinstance(e, FloatingPointError):
        return "loss became" in msg and "learning rate" in msg
    if not isinstance(e, (ValueError, TypeError)):
        return False
    named = any(re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", msg) for n in _NAMES)
    return named or any(re.search(p, msg) for p in _SKLEARN)


def _check_finite(out: Any) -> None:
    for a in out if isinstance(out, tuple) else (out,):
        a = np.asarray(a)
        if a.dtype.kind in "fc":
            assert np.all(np.isfinite(a)), a


def _outcome(fn: Any) -> Any:
    """Run ``fn``: its result, or None after a clear error (anything else fails the test)."""
    try:
        with warnings.catch_warnings():
            # Warnings about useless fits are allowed; they are tested elsewhere.
            warnings.simplefilter("ignore")
            out = fn()
    except Exception as e:  # noqa: BLE001 - the property is about which exceptions
        assert _is_clear(e), f"unclear {type(e).__name__}: {e}"
        return None
    _check_finite(out)
    return out


# -- strategies ---------------------------------------------------------------------------
_FLOATS = st.one_of(
    st.floats(-3, 3),
    st.sampled_from([0.0, np.nan, np.inf, -np.inf, 1e300, -1e300, 1e-300, 1e30, 3.4e38]),
)


@st.composite
def arrays(draw: st.DrawFn, n: int | None = None) -> Any:
    """Data of random shape, dtype and values (often bad)."""
    n = draw(st.integers(0, 12)) if n is None else n
    ndim = draw(st.sampled_from([1, 2, 2, 2, 2, 3]))
    shape = (n,) if ndim == 1 else (n, draw(st.integers(0, 4)), *([2] if ndim == 3 else []))
    size = int(np.prod(shape))
    kind = draw(st.sampled_from(["float64", "float32", "int64", "bool", "object", "str"]))
    vals = np.array(draw(st.lists(_FLOATS, min_size=size, max_size=size)), dtype=np.float64)
    vals = vals.reshape(shape)
    if kind in ("float64", "float32"):
        with np.errstate(over="ignore"):
            return vals.astype(kind)
    if kind == "int64":
        return np.nan_to_num(vals, posinf=5, neginf=-5).clip(-1e6, 1e6).astype(np.int64)
    if kind == "bool":
        return vals > 0
    if kind == "object":
        obj = vals.astype(object)
        if size and draw(st.booleans()):
            obj.flat[0] = draw(st.sampled_from(["a", None, {"k": 1}, [1, 2]]))
        return obj
    return vals.astype(str)


def _good_data(draw: st.DrawFn, classifier: bool) -> tuple[Any, Any]:
    n = draw(st.integers(2, 12))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    X = rng.standard_normal((n, draw(st.integers(1, 3))))
    y = (np.arange(n) % 2).astype(str) if classifier else rng.standard_normal(n)
    return X, y


_PARAMS: dict[str, st.SearchStrategy[Any]] = {
    "hidden_layer_sizes": st.sampled_from([2, (2,), (), (2, 2), (0,), "a", 2.5, (True,), None]),
    "learning_rate_init": st.sampled_from([1e-3, 0.1, 1e6, 0.0, -1.0, np.nan, np.inf, "1"]),
    "kl_warmup": st.sampled_from([0.0, 0.5, 0.99, 1.0, -0.1, np.nan, "0.2", True]),
    "init_mu_range": st.sampled_from([None, 0.5, 1e3, 0.0, -1.0, np.inf, "x"]),
    "refit_kl_weight": st.sampled_from(
        [None, "auto", 0.2, 1.0, 0.0, -1.0, np.nan, 1e31, "0.2", True]
    ),
    "refit_budget": st.sampled_from(["auto", 1.0, 0.3, 0.01, 0.0, 1.5, -0.5, np.nan, "0.5", True]),
    "batch_size": st.sampled_from([1, 4, 0, -1, 2.5, True, np.int64(3)]),
    "max_iter": st.sampled_from([0, 1, 2, -1, 1.5, "2"]),
    "n_samples_predict": st.sampled_from([1, 3, 0, 2.5]),
    "n_mc_train": st.sampled_from([1, 2, 0]),
    "n_init": st.sampled_from([1, 2, 0, -1, 1.5, True]),
    "temperature": st.sampled_from([0.5, 0.0, -1.0, np.nan]),
    "prior_inclusion": st.sampled_from(["opt", 0.5, 0.0, 1.0, "x", np.nan]),
    "log_prior_inclusion": st.sampled_from([None, -5.0, -1e4, 0.0, np.inf]),
    "prior_variance": st.sampled_from([2.0, 0.0, -1.0, 1e300]),
    "init_inclusion": st.sampled_from([0.99, 0.5, 0.0, 1.0, 2.0]),
    "noise_std": st.sampled_from([1.0, 1e-3, 0.0, -1.0, np.nan]),
    "sampler": st.sampled_from(["gumbel", "inverse_cdf", "x", None]),
    "optimizer": st.sampled_from(["adam", "sgd", "rmsprop", "lbfgs", 3]),
    "activation": st.sampled_from(["relu", "tanh", "identity", "gelu", None]),
    "dtype": st.sampled_from(["float64", "float32", "float16", np.float64]),
    "random_state": st.sampled_from(
        [0, None, -1, 2**40, "s", 1.5, True, np.random.RandomState(0), np.random.default_rng(0)]
    ),
    "device": st.sampled_from(["cpu", "nope", "cuda:7", 3.5]),
}


@st.composite
def params(draw: st.DrawFn, classifier: bool) -> dict[str, Any]:
    names = sorted(set(_PARAMS) - ({"noise_std"} if classifier else set()))
    chosen = draw(st.lists(st.sampled_from(names), max_size=3, unique=True))
    return {**BASE, **{k: draw(_PARAMS[k]) for k in chosen}}


def _cls(classifier: bool) -> type:
    return SVBNNClassifier if classifier else SVBNNRegressor


# -- properties ---------------------------------------------------------------------------
@FAST
@given(data=st.data(), classifier=st.booleans())
def test_fit_on_random_data(data: st.DataObject, classifier: bool) -> None:
    X = data.draw(arrays())
    n = len(X) if X.ndim else 0
    y = data.draw(st.one_of(arrays(n=n), arrays(), st.just(np.arange(n) % 2)))
    if y.ndim > 1 and data.draw(st.booleans()):
        y = y[:, 0] if y.shape[1] else y[:, :1]  # a 1-D y, or an (n, 1) one
    est = _cls(classifier)(**BASE, random_state=0)
    if _outcome(lambda: est.fit(X, y)) is not None:
        _outcome(lambda: est.predict(X))


@FAST
@given(data=st.data(), classifier=st.booleans())
def test_fit_with_random_hyperparameters(data: st.DataObject, classifier: bool) -> None:
    X, y = _good_data(data.draw, classifier)
    est = _cls(classifier)(**data.draw(params(classifier)))
    if _outcome(lambda: est.fit(X, y)) is not None:
        _outcome(lambda: est.predict(X))


@cache
def _fitted(classifier: bool) -> Any:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((20, 3))
    y = (X[:, 0] > 0).astype(int) if classifier else X[:, 0]
    return _cls(classifier)(**BASE, random_state=0).fit(X, y)


@FAST
@given(X=arrays(), classifier=st.booleans(), n_samples=st.sampled_from([None, 1, 3, 0, 2.5]))
def test_predict_on_random_data(X: Any, classifier: bool, n_samples: Any) -> None:
    est = _fitted(classifier)
    if classifier:
        out = _outcome(lambda: est.predict_proba(X, n_samples=n_samples))
        if out is not None:
            np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-6)
    else:
        _outcome(lambda: est.predict(X, n_samples=n_samples))


@FAST
@given(
    X=arrays(n=4),
    level=st.one_of(st.floats(allow_nan=True), st.sampled_from([0.5, 0.95, "x", None])),
    n_samples=st.sampled_from([1, 2, 5, 0, 2.5, "5"]),
)
def test_intervals_on_random_input(X: Any, level: Any, n_samples: Any) -> None:
    est = _fitted(False)
    for method in (est.predict_interval, est.predict_prediction_interval):
        out = _outcome(lambda m=method: m(X, level=level, n_samples=n_samples))
        if out is not None:
            assert np.all(out[0] <= out[1])


@pytest.mark.parametrize("classifier", [False, True])
def test_clear_error_helper_rejects_raw_errors(classifier: bool) -> None:
    # The property's yardstick itself: raw messages from torch/numpy are not "clear".
    assert not _is_clear(TypeError("'int' object is not iterable"))
    assert not _is_clear(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not _is_clear(AssertionError("Torch not compiled with CUDA enabled"))
    assert _is_clear(ValueError("init_mu_range must be a finite number in (0, inf), got -1"))
    assert _fitted(classifier).n_features_in_ == 3


@pytest.mark.parametrize(
    "y",
    [
        np.array([1.0, "a", 2.0, "b"], dtype=object),  # mixed types: sorting them failed
        np.array([[1, 2], [3], [1], [2, 3]], dtype=object),  # rows of lists: "legacy multi-label"
    ],
    ids=["mixed-types", "rows-of-lists"],
)
def test_classifier_labels_that_hypothesis_found(y: Any) -> None:
    X = np.zeros((4, 2))
    with pytest.raises(ValueError) as info:
        SVBNNClassifier(**BASE).fit(X, y)
    assert _is_clear(info.value), info.value
