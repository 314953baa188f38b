"""Tables without signal: does an estimator fit noise, and say so?

Run ``python -m benchmarks.noise_tables [--regression] [--sizes 110 300 600 1000] [--seeds
3] [--arm NAME=JSON ...]``. Each
table is ``n`` training rows and 2,000 test rows of 20 independent N(0, 1) inputs and a
label drawn uniformly from 2 or 3 classes, independent of the inputs (``numpy``'s
``default_rng(seed)``), scaled by a ``StandardScaler`` fitted on the training rows. Two
arms, one thread, each fitted on every table: the classifier's defaults
(``SVBNNClassifier(random_state=seed)``: below 500 rows one fit, at KL weight 0.1 under
200 rows and 0.2 from there, checked against the class frequencies on held-out rows; from
500 rows a selecting fit at 0.35 and a refit at 0.2), and ``one fit at 0.2``
(``kl_weight=0.2, refit_kl_weight=None``: the fit the defaults made below 500 rows before
that check and before the weight 0.1 under 200 rows). The best model of such a table predicts the
training rows' class frequencies. ``--arm NAME=JSON`` (repeatable) replaces the two arms
by ``SVBNNClassifier(random_state=seed, **JSON)`` each.

Printed: a Markdown table, per size and number of classes, of the mean over seeds of the
test log-loss less that of the training rows' class frequencies (nats a row; above 0:
worse than predicting the frequencies), the inputs selected (of 20), the share of fits
that raised a ``CollapseWarning`` (for these tables the right verdict), the defaults'
``held_out_gain_`` and the median fit time.

``--regression``: the regressor instead, on a target drawn from N(0, 1) independently of
the inputs; the arms are its defaults (``SVBNNRegressor(random_state=seed)``: no refit
after a first fit that explains nothing, and a refit checked against the mean on held-out
rows) and ``first fit alone`` (``refit_kl_weight=None``), and the error column is the test
mean squared error over that of the training rows' mean, less 1 (above 0: worse than the
mean).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any

import numpy as np
import torch
from sklearn.metrics import log_loss
from sklearn.preprocessing import StandardScaler

from benchmarks.tabular_peers import parse_variants
from svbnn import SVBNNClassifier, SVBNNRegressor
from svbnn.estimators import CollapseWarning

ARMS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "one fit at 0.2": {"kl_weight": 0.2, "refit_kl_weight": None},
}
REGRESSION_ARMS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "first fit alone": {"refit_kl_weight": None},
}
N_FEATURES = 20
N_TEST = 2000


def table(n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(X_train, y_train, X_test, y_test)``: ``n`` and ``N_TEST`` rows of noise inputs,
    scaled on the training rows, and labels uniform over ``k`` classes (``k = 0``: a
    target drawn from N(0, 1))."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n + N_TEST, N_FEATURES))
    y = rng.integers(0, k, n + N_TEST) if k else rng.normal(size=n + N_TEST)
    scaler = StandardScaler().fit(X[:n])
    return scaler.transform(X[:n]), y[:n], scaler.transform(X[n:]), y[n:]


def fit_arm(
    kwargs: dict[str, Any], data: tuple[np.ndarray, ...], k: int, seed: int, max_iter: Any
) -> dict[str, float]:
    """One fit of an arm (``k = 0``: the regressor): its excess test error, inputs kept,
    collapse and time."""
    X_tr, y_tr, X_te, y_te = data
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if k:
            est: Any = SVBNNClassifier(random_state=seed, max_iter=max_iter, **kwargs)
        else:
            est = SVBNNRegressor(random_state=seed, max_iter=max_iter, **kwargs)
        est.fit(X_tr, y_tr)
    seconds = time.perf_counter() - start
    if k:
        freq = np.bincount(y_tr, minlength=k) / y_tr.size
        baseline = log_loss(y_te, np.tile(freq, (y_te.size, 1)), labels=range(k))
        excess = log_loss(y_te, est.predict_proba(X_te), labels=range(k)) - baseline
    else:
        mse = np.mean((y_te - est.predict(X_te)) ** 2)
        excess = mse / np.mean((y_te - y_tr.mean()) ** 2) - 1.0
    gain = getattr(est, "held_out_gain_", None)  # None where the library predates it
    return {
        "excess": float(excess),
        "kept": float(len(est.selected_features_)),
        "collapsed": float(any(issubclass(w.category, CollapseWarning) for w in caught)),
        "gain": float("nan") if gain is None else float(gain),
        "seconds": seconds,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[110, 300, 600, 1000])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-iter", type=int, default=None, help="a fixed budget (smoke tests)")
    ap.add_argument("--arm", action="append", default=None, metavar="NAME=JSON")
    ap.add_argument("--regression", action="store_true", help="the regressor, a N(0, 1) target")
    args = ap.parse_args(argv)
    try:
        arms = parse_variants(args.arm, REGRESSION_ARMS if args.regression else ARMS)
    except ValueError as err:
        ap.error(f"--arm {err}")
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    if min(args.sizes) < 20:
        ap.error("--sizes must be at least 20 rows each")
    torch.set_num_threads(args.threads)
    max_iter = "auto" if args.max_iter is None else args.max_iter
    error = "test MSE / the mean's - 1" if args.regression else "test log-loss - frequencies'"
    print(
        f"| rows | classes | arm | {error} | inputs kept (of 20) "
        "| collapse warned | held_out_gain_ | fit s (median) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        for k in (0,) if args.regression else (2, 3):
            for name, kwargs in arms.items():
                fits = [
                    fit_arm(kwargs, table(n, k, seed), k, seed, max_iter)
                    for seed in range(args.seeds)
                ]
                mean = {key: statistics.fmean(f[key] for f in fits) for key in fits[0]}
                gains = [f["gain"] for f in fits if not np.isnan(f["gain"])]
                gain = f"{statistics.fmean(gains):+.3f}" if gains else "-"
                print(
                    f"| {n} | {k or '-'} | {name} | {mean['excess']:+.3f} | {mean['kept']:.1f} "
                    f"| {mean['collapsed']:.2f} | {gain} "
                    f"| {statistics.median(f['seconds'] for f in fits):.2f} |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
