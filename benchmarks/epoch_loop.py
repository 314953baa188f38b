"""The estimators' default fits with their epochs run whole in the native loops against the
same fits run step by step (``svbnn._engine.native_epoch``; the training loop's per-step
Python).

Run ``python -m benchmarks.epoch_loop [--repeats 5] [--threads 1] [--tables NAME ...]
[--max-iter N] [--compare spans]`` (``--max-iter``: a shorter budget than the defaults',
for a smoke run). Tables: for the regressor, scikit-learn's diabetes (442 rows, 10
inputs), ``diabetes-83`` (110 of its rows drawn at random, 83 of them for training: the
issue's smallest table; chosen by ``--tables`` only), Friedman #1 (1,000 rows, 10 inputs)
and a ``make_regression`` problem of about the issue's largest small table (4,000 rows,
3,000 of them for training, 40 inputs, 10 informative); for the classifier, breast cancer
(569 rows, 30 inputs), ``breast-cancer-83`` (110 of its rows, as above) and digits (1,797
rows, 64 inputs, 10 classes); each with 10 added N(0, 1) noise columns and split 75/25,
after a ``StandardScaler``. Each round fits ``SVBNNRegressor(random_state=r)`` (or
``SVBNNClassifier``) with its defaults both ways, alternating which goes first, after one
warm-up round (the native library's build or load and torch's first optimiser). The
step-by-step fit is the library's own loop with the whole-epoch path declined (the
benchmark replaces ``svbnn.training._native_epochs`` in its process; the library has no
switch for it, as both give the same fit). Printed: a Markdown table of the median fit
times, the median [min, max] of the per-round ratios, and whether the two fits predicted
the same numbers (regression) or probabilities (classification) bit for bit in every
round.

``--compare spans`` compares instead, both with whole native epochs, the training loop's
runs of several epochs in one native call (up to the next epoch after which the stopping
rule reads the network: :func:`svbnn.training.train`, ``epochs_until_model_read``) against
one epoch a call (the benchmark replaces ``svbnn.training._span`` by one epoch). On a small
table an epoch is one or two short steps, and the Python around each call is a large part
of it.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from sklearn.datasets import (
    load_breast_cancer,
    load_diabetes,
    load_digits,
    make_friedman1,
    make_regression,
)
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from svbnn import SVBNNClassifier, SVBNNRegressor, training

Data = tuple[np.ndarray, np.ndarray, np.ndarray, bool]
# The default tables, then the small ones (chosen by --tables).
DEFAULT_TABLES = ["diabetes", "friedman1", "regression", "breast-cancer", "digits"]
TABLES = [*DEFAULT_TABLES, "diabetes-83", "breast-cancer-83"]


def _rows(Xy: tuple[Any, Any], n: int = 110) -> tuple[np.ndarray, np.ndarray]:
    """``n`` rows of a table, drawn at random (seed 0)."""
    X, y = Xy
    keep = np.random.default_rng(0).choice(len(y), n, replace=False)
    return np.asarray(X)[keep], np.asarray(y)[keep]


def tables(names: list[str] | None = None) -> dict[str, Data]:
    """``name -> (X_train, y_train, X_test, is_classification)``: standardised inputs with
    10 noise columns; ``names``: a subset of :data:`TABLES` (:data:`DEFAULT_TABLES` by
    default)."""
    rng = np.random.default_rng(0)
    # key -> (name, loader, is_classification)
    makers: dict[str, tuple[str, Callable[[], Any], bool]] = {
        "diabetes": ("diabetes", lambda: load_diabetes(return_X_y=True), False),
        "diabetes-83": (
            "diabetes, 110 rows",
            lambda: _rows(load_diabetes(return_X_y=True)),
            False,
        ),
        "friedman1": (
            "Friedman #1",
            lambda: make_friedman1(1000, 10, noise=1.0, random_state=0),
            False,
        ),
        "regression": (
            "make_regression",
            lambda: make_regression(4000, 40, n_informative=10, noise=10.0, random_state=0),
            False,
        ),
        "breast-cancer": ("breast cancer", lambda: load_breast_cancer(return_X_y=True), True),
        "breast-cancer-83": (
            "breast cancer, 110 rows",
            lambda: _rows(load_breast_cancer(return_X_y=True)),
            True,
        ),
        "digits": ("digits", lambda: load_digits(return_X_y=True), True),
    }
    out = {}
    for key, (name, make, clf) in makers.items():
        if key not in (DEFAULT_TABLES if names is None else names):
            continue
        X, y = make()
        X = np.hstack([X, rng.standard_normal((X.shape[0], 10))])
        X_tr, X_te, y_tr, _ = train_test_split(X, y, test_size=0.25, random_state=0)
        scaler = StandardScaler().fit(X_tr)
        out[name] = (scaler.transform(X_tr), y_tr, scaler.transform(X_te), clf)
    return out


def fit(
    data: Data, seed: int, whole_epochs: bool, max_iter: int | None = None, spans: bool = False
) -> tuple[float, np.ndarray]:
    """One default fit (``max_iter``: the default budget unless given): its time in seconds
    and its test predictions (class probabilities for a classifier). ``spans``: the arms
    are the epochs a native call runs (``whole_epochs`` True: the library's; False: one),
    every epoch whole."""
    X, y, X_test, clf = data
    real: Callable[..., Any] = training._native_epochs
    real_span: Callable[..., Any] = training._span
    if spans and not whole_epochs:
        training._span = lambda *args: 1  # type: ignore[assignment]
    elif not whole_epochs:
        training._native_epochs = lambda *args: None  # type: ignore[assignment]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t0 = time.perf_counter()
            kw = {} if max_iter is None else {"max_iter": max_iter}
            cls: Any = SVBNNClassifier if clf else SVBNNRegressor
            est = cls(random_state=seed, **kw).fit(X, y)
            seconds = time.perf_counter() - t0
    finally:
        training._native_epochs = real  # type: ignore[assignment]
        training._span = real_span  # type: ignore[assignment]
    return seconds, est.predict_proba(X_test) if clf else est.predict(X_test)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--tables", nargs="+", choices=TABLES)
    ap.add_argument("--max-iter", type=int, default=None)
    ap.add_argument(
        "--compare",
        choices=["epochs", "spans"],
        default="epochs",
        help="the arms: whole epochs against step by step, or epochs a call (see above)",
    )
    args = ap.parse_args(argv)
    spans = args.compare == "spans"
    torch.set_num_threads(args.threads)
    lines = [
        f"The estimators' defaults, {args.threads} torch thread(s), {args.repeats} rounds "
        "after a warm-up; medians, [min, max] of the per-round ratios",
        "",
        (
            "| table | estimator | n x p | epochs to the stopping rule's read a call, s | "
            "one epoch a call, s | one / several | same predictions |"
            if spans
            else "| table | estimator | n x p | whole epochs, s | step by step, s | "
            "step by step / whole | same predictions |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    rows = []
    chosen = tables(args.tables)
    for name, data in chosen.items():
        times: dict[bool, list[float]] = {True: [], False: []}
        same = True
        for r in range(args.repeats + 1):
            preds = {}
            for whole in (True, False) if r % 2 else (False, True):
                seconds, preds[whole] = fit(data, r, whole, args.max_iter, spans)
                if r:
                    times[whole].append(seconds)
            same = same and np.array_equal(preds[True], preds[False])
        ratios = [b / a for a, b in zip(times[True], times[False], strict=True)]
        lines.append(
            f"| {name} | {'classifier' if data[3] else 'regressor'} | "
            f"{data[0].shape[0]} x {data[0].shape[1]} | "
            f"{statistics.median(times[True]):.2f} | {statistics.median(times[False]):.2f} | "
            f"{statistics.median(ratios):.2f} [{min(ratios):.2f}, {max(ratios):.2f}] | "
            f"{'yes' if same else 'NO'} |"
        )
        rows.append({"table": name, "times": times, "same": same})
    print("\n".join(lines))
    return rows


if __name__ == "__main__":
    main()
