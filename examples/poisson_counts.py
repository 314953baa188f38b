"""Fit counts: SVBNNPoissonRegressor against scikit-learn's PoissonRegressor.

Generated counts with a non-linear log rate that depends on 3 of 10 inputs,
``log rate = 1 + sin(2 x0) + 0.8 x1 x2``. The script reports the fraction of Poisson
deviance explained on test rows (D^2: the fitted network's, a linear Poisson GLM's and the
true rates'), the coverage of 90% prediction intervals for new counts (and what the same
interval rule at the true rates holds), and the inputs the posterior selected.

    python examples/poisson_counts.py            # about a minute
    python examples/poisson_counts.py --quick    # a few seconds (smoke test)
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from scipy.stats import poisson
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import PoissonRegressor
from sklearn.metrics import d2_tweedie_score

from svbnn import SVBNNPoissonRegressor


def counts(n: int, rng: np.random.Generator, p: int = 10) -> tuple[np.ndarray, ...]:
    """``(X, y, rate)``: inputs uniform on [-1.5, 1.5] (unit-scale already), Poisson counts."""
    X = rng.uniform(-1.5, 1.5, (n, p))
    rate = np.exp(1.0 + np.sin(2 * X[:, 0]) + 0.8 * X[:, 1] * X[:, 2])
    return X, rng.poisson(rate), rate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="half the training rows (smoke test)")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    X, y, _ = counts(1500 if args.quick else 3000, rng)
    X_test, y_test, rate_test = counts(2000, rng)

    model = SVBNNPoissonRegressor(
        hidden_layer_sizes=(20,),
        random_state=args.seed,
    )
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        model.fit(X, y)
    secs = time.perf_counter() - start
    status = "converged" if model.converged_ else f"not converged ({len(caught)} warning)"
    print(f"fitted {model.n_iter_} epochs in {secs:.1f} s, {status}")

    glm = PoissonRegressor().fit(X, y)
    truth = d2_tweedie_score(y_test, rate_test, power=1)
    print(
        f"test D^2: SVBNN {model.score(X_test, y_test):.3f}, PoissonRegressor "
        f"{glm.score(X_test, y_test):.3f}, true rates {truth:.3f}"
    )
    lo, hi = model.predict_interval(X_test, level=0.9)
    covered = float(np.mean((lo <= y_test) & (y_test <= hi)))
    # Counts are discrete: an equal-tailed interval of whole numbers holds more than its
    # level. The same rule at the true rates gives the coverage to compare with.
    t_lo, t_hi = poisson.ppf(0.05, rate_test), poisson.ppf(0.95, rate_test)
    oracle = float(np.mean(poisson.cdf(t_hi, rate_test) - poisson.cdf(t_lo - 1, rate_test)))
    print(
        f"90% prediction intervals cover {covered:.1%} of test counts "
        f"(integer bounds, median width {np.median(hi - lo):.0f}; the true rates' own "
        f"intervals hold {oracle:.1%})"
    )
    print(f"selected inputs {model.selected_features_.tolist()} (relevant: [0, 1, 2])")


if __name__ == "__main__":
    main()
