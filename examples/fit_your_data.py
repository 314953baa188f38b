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

import numpy as np
from sklearn.datasets import load_breast_cancer, make_friedman1
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from svbnn import SVBNNClassifier, SVBNNRegressor


def regression(seed: int, epochs: int) -> None:
    X, y = make_friedman1(n_samples=1500, n_features=10, noise=1.0, random_state=seed)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=500, random_state=seed)
    # Standardise inputs and response: the prior's scale (sigma_0^2 = 2) and the known noise
    # level assume data of unit scale. noise_std is then the noise in standardised units.
    sx, sy = StandardScaler().fit(X_train), StandardScaler().fit(y_train[:, None])
    Xs, ys = sx.transform(X_train), sy.transform(y_train[:, None]).ravel()
    reg = SVBNNRegressor(
        hidden_layer_sizes=(16, 16),
        noise_std=0.2,  # sd(noise) / sd(y), about 1 / 4.9 here; a hyperparameter: grid-search it
        max_iter=epochs,
        batch_size=256,
        learning_rate_init=1e-2,
        random_state=seed,
    )
    start = time.perf_counter()
    reg.fit(Xs, ys)
    secs = time.perf_counter() - start

    Xt = sx.transform(X_test)
    pred = sy.inverse_transform(reg.predict(Xt)[:, None]).ravel()
    lo, hi = reg.predict_prediction_interval(Xt, level=0.95)
    lo = sy.inverse_transform(lo[:, None]).ravel()
    hi = sy.inverse_transform(hi[:, None]).ravel()
    rmse = float(np.sqrt(np.mean((pred - y_test) ** 2)))
    covered = float(np.mean((lo <= y_test) & (y_test <= hi)))
    print(f"regression: fitted {epochs} epochs in {secs:.1f} s")
    print(f"regression: test RMSE {rmse:.2f} (noise sd 1.0)")
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
    regression(args.seed, 400 if args.quick else 1500)
    classification(args.seed, 300 if args.quick else 1000)


if __name__ == "__main__":
    main()
