"""The refit on tables of 1,600 to 3,000 rows: its time, test error and calibration.

Run ``python -m benchmarks.refit_band [--sizes 2250 3000] [--seeds 5] [--inputs 40]
[--classes K] [--threads 1]``.

Regression (the default, ``--classes 0``): each table is ``make_friedman1`` with
``--inputs`` inputs (5 of them informative), noise sd 1, ``n`` training rows and 2,000
test rows (generator seed ``seed``). Two arms: the regressor's defaults
(``SVBNNRegressor(random_state=seed)``: the refit of the selected inputs at KL weight
0.2, over at most 2,000 steps on these tables, ``refit_budget="auto"``) and ``no refit``
(``refit_kl_weight=None``: the defaults on tables of 1,601-3,000 rows before the refit
was made there). Printed per size: each arm's median fit time and mean test RMSE over the
seeds, the median of the per-seed time ratios (defaults / no refit), and the epochs of
the defaults' final fit.

Classification (``--classes K``, K >= 2): each table is ``make_classification`` with
``K`` classes, ``--inputs`` - 10 columns (8 informative, 4 redundant, the rest useless;
10% of the labels flipped at random) and 10 N(0, 1) columns appended, ``n`` training
rows and 2,000 test rows. Two arms: the classifier's defaults
(``SVBNNClassifier(random_state=seed)``: a selecting fit at KL weight 0.35, then the
refit at 0.2 over at most 2,000 steps, ``refit_budget="auto"``) and ``whole refit``
(``refit_budget=1.0``: the refit over the whole budget of 4,000 steps, the defaults
before). Printed per size: median fit times, their ratio (defaults / whole refit), and
each arm's mean test accuracy, log loss and ECE (15 bins) and appended noise columns kept.

The inputs are scaled by a ``StandardScaler`` fitted on the training rows; the two arms
are fitted in turn on each table in one process, after one warm-up fit of each (it loads
the native loops). The issue's time target: a table of up to 3,000 rows x 40 columns
fits in at most 3 s (median) on one core.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any

import numpy as np
import torch
from sklearn.datasets import make_classification, make_friedman1
from sklearn.preprocessing import StandardScaler

from benchmarks.tabular_peers import ece, log_loss
from svbnn import SVBNNClassifier, SVBNNRegressor

ARMS: dict[str, dict[str, Any]] = {"defaults": {}, "no refit": {"refit_kl_weight": None}}
CLASSIFIER_ARMS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "whole refit": {"refit_budget": 1.0},
}
N_TEST = 2000
NOISE_COLUMNS = 10  # appended to a classification table


def table(
    n: int, p: int, seed: int, classes: int = 0
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(X_train, y_train, X_test, y_test)`` with ``p`` inputs, ``n`` and ``N_TEST`` rows,
    the inputs scaled on the training rows: ``make_friedman1`` (``classes`` 0) or
    ``make_classification`` with ``classes`` classes and ``NOISE_COLUMNS`` of the ``p``
    appended N(0, 1) columns (the last ones)."""
    rows = n + N_TEST
    if classes == 0:
        X, y = make_friedman1(rows, n_features=p, noise=1.0, random_state=seed)
    else:
        X, y = make_classification(
            rows,
            n_features=p - NOISE_COLUMNS,
            n_informative=8,
            n_redundant=4,
            n_classes=classes,
            n_clusters_per_class=2 if classes == 2 else 1,
            flip_y=0.1,
            random_state=seed,
        )
        noise = np.random.default_rng(seed).standard_normal((rows, NOISE_COLUMNS))
        X = np.hstack([X, noise])
    scaler = StandardScaler().fit(X[:n])
    return scaler.transform(X[:n]), y[:n], scaler.transform(X[n:]), y[n:]


def fit_arm(
    kwargs: dict[str, Any], data: tuple[np.ndarray, ...], seed: int, max_iter: Any, classes: int
) -> dict[str, float]:
    """One fit: its time (s), epochs and test scores (RMSE; or accuracy, log loss, ECE
    and the appended noise columns kept)."""
    X_tr, y_tr, X_te, y_te = data
    est: Any = (SVBNNClassifier if classes else SVBNNRegressor)(
        random_state=seed, max_iter=max_iter, **kwargs
    )
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence notes; the table reports the fits
        est.fit(X_tr, y_tr)
    out = {"seconds": time.perf_counter() - start, "epochs": float(est.n_iter_)}
    if not classes:
        out["rmse"] = float(np.sqrt(np.mean((est.predict(X_te) - y_te) ** 2)))
        return out
    proba = est.predict_proba(X_te)
    noise = est.selected_features_ >= X_tr.shape[1] - NOISE_COLUMNS
    out.update(
        accuracy=float(np.mean(proba.argmax(1) == y_te)),
        log_loss=log_loss(proba, y_te),
        ece=ece(proba, y_te),
        noise=float(noise.sum()),
    )
    return out


def _row(n: int, args: argparse.Namespace, fits: dict[str, list[dict[str, float]]]) -> str:
    """One size's Markdown row."""
    (a, fa), (b, fb) = fits.items()
    ta, tb = [f["seconds"] for f in fa], [f["seconds"] for f in fb]
    ratio = statistics.median(x / y for x, y in zip(ta, tb, strict=True))

    def mean(fs: list[dict[str, float]], key: str) -> float:
        return statistics.fmean(f[key] for f in fs)

    cells = [str(n), str(args.inputs)]
    cells += [f"{statistics.median(ta):.2f}", f"{statistics.median(tb):.2f}", f"{ratio:.2f}"]
    keys = ["accuracy", "log_loss", "ece", "noise"] if args.classes else ["rmse"]
    for key in keys:
        digits = 1 if key == "noise" else 3
        cells += [f"{mean(fa, key):.{digits}f}", f"{mean(fb, key):.{digits}f}"]
    cells.append(f"{statistics.median(f['epochs'] for f in fa):g}")
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2250, 3000])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--inputs", type=int, default=40)
    ap.add_argument("--classes", type=int, default=0, help="0: regression (default)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-iter", type=int, default=None, help="a fixed budget (smoke tests)")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    if args.classes == 1 or args.classes < 0:
        ap.error("--classes must be 0 (regression) or at least 2")
    least = 22 if args.classes else 5  # 12 informative and redundant + 10 noise columns
    if args.inputs < least:
        ap.error(f"--inputs must be at least {least} for this task")
    if min(args.sizes) < 20:
        ap.error("--sizes must be at least 20 rows each")
    torch.set_num_threads(args.threads)
    max_iter = "auto" if args.max_iter is None else args.max_iter
    arms = CLASSIFIER_ARMS if args.classes else ARMS
    warm = table(200, args.inputs, 0, args.classes)
    for kwargs in arms.values():
        fit_arm(kwargs, warm, 0, max_iter, args.classes)
    a, b = arms
    head = ["rows", "inputs", f"{a}: fit s (median)", f"{b}: fit s (median)"]
    head.append("time ratio (median)")
    metrics = ["accuracy", "log loss", "ECE", "noise kept"] if args.classes else ["RMSE"]
    for metric in metrics:
        head += [f"{a}: {metric}", f"{b}: {metric}"]
    head.append(f"{a}' epochs")
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for n in args.sizes:
        fits: dict[str, list[dict[str, float]]] = {name: [] for name in arms}
        for seed in range(args.seeds):
            data = table(n, args.inputs, seed, args.classes)
            for name, kwargs in arms.items():
                fits[name].append(fit_arm(kwargs, data, seed, max_iter, args.classes))
        print(_row(n, args, fits))


if __name__ == "__main__":
    main()
