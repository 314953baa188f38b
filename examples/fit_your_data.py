"""Fit SVBNN to your own data: a regressor and a classifier with the scikit-learn API.

The regressor learns Friedman's function #1 (10 inputs, of which only the first 5 matter)
and reports its test RMSE, 95% prediction intervals and the inputs it selected. The
classifier learns scikit-learn's breast-cancer data (30 inputs, bundled with scikit-learn).

    python examples/fit_your_data.py            # a few tens of seconds
    python examples/fit_your_data.py --quick    # a few seconds (smoke test)
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import load_breast_cancer, make_friedman1
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from svbnn import SVBNNClassifier, SVBNNRegressor


def regression(seed: int, epochs: int | str) -> None:
    X, y = make_friedman1(n_samples=1500, n_features=10, noise=1.0, random_state=seed)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=500, random_state=seed)
    # Scale the inputs in the pipeline (the prior assumes inputs of unit scale); the
    # estimator standardises y itself, learns the noise level and stops when converged.
    model = make_pipeline(StandardScaler(), SVBNNRegressor(max_iter=epochs, random_state=seed))
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(X_train, y_train)
    secs = time.perf_counter() - start
    reg = model[-1]

    pred = model.predict(X_test)  # in y's units
    lo, hi = reg.predict_prediction_interval(model[0].transform(X_test), level=0.95)
    rmse = float(np.sqrt(np.mean((pred - y_test) ** 2)))
    covered = float(np.mean((lo <= y_test) & (y_test <= hi)))
    status = "converged" if reg.converged_ else f"not converged ({len(caught)} warning)"
    print(f"regression: fitted {reg.n_iter_} epochs in {secs:.1f} s, {status}")
    print(
        f"regression: test RMSE {rmse:.2f} (noise sd 1.0), learned noise_std_ {reg.noise_std_:.2f}"
    )
    print(f"regression: 95% prediction intervals cover {covered:.0%} of test responses")
    print(f"regression: selected inputs {reg.selected_features_.tolist()} (relevant: 0-4)")
    print(f"regression: posterior density sum(phi)/T {reg.sparsity_:.3f}, lambda {reg.lambda_:.2e}")


def classification(seed: int, epochs: int) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(
        X, y, test_size=0.3, random_state=seed, stratify=y
    )
    sx = StandardScaler().fit(X_train)
    clf = SVBNNClassifier(
        hidden_layer_sizes=(16,),
        max_iter=epochs,
        batch_size=128,
        learning_rate_init=1e-2,
        random_state=seed,
    )
    clf.fit(sx.transform(X_train), y_train)
    proba = clf.predict_proba(sx.transform(X_test))
    acc = clf.score(sx.transform(X_test), y_test)
    print(f"classification: test accuracy {acc:.3f}, classes {clf.classes_.tolist()}")
    print(f"classification: mean max-probability {proba.max(axis=1).mean():.3f}")
    print(
        f"classification: {len(clf.selected_features_)} of {X.shape[1]} inputs selected, "
        f"density {clf.sparsity_:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="few epochs (smoke test)")
    args = parser.parse_args()
    regression(args.seed, 400 if args.quick else "auto")
    classification(args.seed, 300 if args.quick else 1000)


if __name__ == "__main__":
    main()
