"""The regressor's refit on tables of 1,600 to 3,000 rows: its time and its test error.

Run ``python -m benchmarks.refit_band [--sizes 2250 3000] [--seeds 5] [--inputs 40]
[--threads 1]``. Each table is ``make_friedman1`` with ``--inputs`` inputs (5 of them
informative), noise sd 1, ``n`` training rows and 2,000 test rows (generator seed
``seed``), scaled by a ``StandardScaler`` fitted on the training rows. Two arms, fitted in
turn on each table in one process: the regressor's defaults
(``SVBNNRegressor(random_state=seed)``: the refit of the selected inputs at KL weight
0.2, over at most 2,000 steps on these tables, ``refit_budget="auto"``) and ``no refit``
(``refit_kl_weight=None``: the defaults on tables of 1,601-3,000 rows before the refit
was made there). One warm-up fit of each arm comes first (it loads the native loops).

Printed: a Markdown table, per size, of each arm's median fit time and mean test RMSE
over the seeds, the median of the per-seed time ratios (defaults / no refit), and the
epochs of the defaults' final fit. The issue's time target: a table of up to 3,000 rows x
40 columns fits in at most 3 s (median) on one core.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any

import numpy as np
import torch
from sklearn.datasets import make_friedman1
from sklearn.preprocessing import StandardScaler

from svbnn import SVBNNRegressor

ARMS: dict[str, dict[str, Any]] = {"defaults": {}, "no refit": {"refit_kl_weight": None}}
N_TEST = 2000


def table(n: int, p: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(X_train, y_train, X_test, y_test)``: ``make_friedman1`` with ``p`` inputs, ``n``
    and ``N_TEST`` rows, the inputs scaled on the training rows."""
    X, y = make_friedman1(n + N_TEST, n_features=p, noise=1.0, random_state=seed)
    scaler = StandardScaler().fit(X[:n])
    return scaler.transform(X[:n]), y[:n], scaler.transform(X[n:]), y[n:]


def fit_arm(
    kwargs: dict[str, Any], data: tuple[np.ndarray, ...], seed: int, max_iter: Any
) -> tuple[float, float, int]:
    """One fit: its time (s), test RMSE and epochs."""
    X_tr, y_tr, X_te, y_te = data
    est = SVBNNRegressor(random_state=seed, max_iter=max_iter, **kwargs)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convergence notes; the table reports the fits
        est.fit(X_tr, y_tr)
    seconds = time.perf_counter() - start
    rmse = float(np.sqrt(np.mean((est.predict(X_te) - y_te) ** 2)))
    return seconds, rmse, int(est.n_iter_)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[2250, 3000])
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--inputs", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-iter", type=int, default=None, help="a fixed budget (smoke tests)")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    if args.inputs < 5:
        ap.error("--inputs must be at least 5 (make_friedman1's informative inputs)")
    if min(args.sizes) < 20:
        ap.error("--sizes must be at least 20 rows each")
    torch.set_num_threads(args.threads)
    max_iter = "auto" if args.max_iter is None else args.max_iter
    warm = table(200, args.inputs, 0)
    for kwargs in ARMS.values():
        fit_arm(kwargs, warm, 0, max_iter)
    print(
        "| rows | inputs | defaults: fit s (median) | no refit: fit s (median) "
        "| time ratio (median) | defaults: RMSE | no refit: RMSE | defaults' epochs |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        fits: dict[str, list[tuple[float, float, int]]] = {name: [] for name in ARMS}
        for seed in range(args.seeds):
            data = table(n, args.inputs, seed)
            for name, kwargs in ARMS.items():
                fits[name].append(fit_arm(kwargs, data, seed, max_iter))
        t = {name: [f[0] for f in fs] for name, fs in fits.items()}
        ratio = statistics.median(a / b for a, b in zip(t["defaults"], t["no refit"], strict=True))
        rmse = {name: statistics.fmean(f[1] for f in fs) for name, fs in fits.items()}
        epochs = statistics.median(f[2] for f in fits["defaults"])
        print(
            f"| {n} | {args.inputs} | {statistics.median(t['defaults']):.2f} "
            f"| {statistics.median(t['no refit']):.2f} | {ratio:.2f} "
            f"| {rmse['defaults']:.3f} | {rmse['no refit']:.3f} | {epochs:g} |"
        )


if __name__ == "__main__":
    main()
