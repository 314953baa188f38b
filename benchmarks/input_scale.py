"""Inputs at other scales than the unit scale the estimators assume: what a fit loses, and
whether ``InputScaleWarning`` says so.

Run ``python -m benchmarks.input_scale [--scales 1 3 10 30 0.3 0.1 0.03] [--seeds 2]``.
The table is Friedman #1 (``make_friedman1(1000, noise=1.0, random_state=0)``: 5 of its
10 inputs matter), split 75/25 by ``train_test_split(random_state=0)``; its inputs are
standardised on the training rows and then multiplied by each scale, the form a user's
table takes when a ``StandardScaler`` is left out of the pipeline (columns in other
units). The regressor's defaults (``SVBNNRegressor(random_state=seed)``, one thread) fit
each scale's table once per seed.

Printed: a Markdown table, per scale, of the test RMSE of each seed's fit, the inputs
selected (of 10; 5 are real), the largest column root mean square and the median of the
columns' largest absolute values (the two statistics the warning reads, with its bounds
``INPUT_RMS_MAX`` and ``INPUT_MAX_ABS_MIN``), and whether every fit raised
``InputScaleWarning``.
"""

from __future__ import annotations

import argparse
import warnings

import numpy as np
import torch
from sklearn.datasets import make_friedman1
from sklearn.model_selection import train_test_split

from svbnn import SVBNNRegressor
from svbnn.estimators import InputScaleWarning


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scales", type=float, nargs="+", default=[1, 3, 10, 30, 0.3, 0.1, 0.03])
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--max-iter", type=int, default=None, help="a fixed budget (smoke tests)")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    if min(args.scales) <= 0:
        ap.error("--scales must be positive")
    torch.set_num_threads(1)
    X, y = make_friedman1(1000, noise=1.0, random_state=0)
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, random_state=0)
    mean, sd = X_tr.mean(axis=0), X_tr.std(axis=0)
    max_iter = "auto" if args.max_iter is None else args.max_iter
    print(
        "| scale | test RMSE per seed | inputs selected | largest column RMS "
        "| median largest abs | InputScaleWarning |"
    )
    print("|---|---|---|---|---|---|")
    for scale in args.scales:
        train, test = (X_tr - mean) / sd * scale, (X_te - mean) / sd * scale
        rmse, kept, warned = [], [], []
        for seed in range(args.seeds):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                est = SVBNNRegressor(random_state=seed, max_iter=max_iter).fit(train, y_tr)
            rmse.append(float(np.sqrt(np.mean((est.predict(test) - y_te) ** 2))))
            kept.append(len(est.selected_features_))
            warned.append(any(w.category is InputScaleWarning for w in caught))
        rms = float(np.sqrt(np.mean(train**2, axis=0)).max())
        top = float(np.median(np.abs(train).max(axis=0)))
        print(
            f"| {scale:g} | {', '.join(f'{r:.3f}' for r in rmse)} "
            f"| {', '.join(map(str, kept))} | {rms:.3g} | {top:.3g} "
            f"| {'yes' if all(warned) else 'no' if not any(warned) else 'some'} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
