"""Credible intervals of the regression function against prediction intervals of new data.

On the paper's sparse teacher (Simulation I (B): a 100-2-2-1 tanh network, noise sd 1):

* ``predict_interval`` gives the credible interval of the response *mean* ``E[y | x]``:
  the quantiles of ``f_theta(x)`` over posterior draws ``theta ~ q``. Its coverage is
  measured against the true function ``f0(x)``.
* ``predict_prediction_interval`` gives an interval for a *new response*
  ``y = f_theta(x) + eps``: each posterior draw plus Gaussian noise of sd ``noise_std``.
  Its coverage is measured against noisy test responses.

The credible interval is much narrower; its coverage of f0 depends on how well the
variational posterior captures the uncertainty (the paper's supplement Table 5 reports
it); the prediction interval is dominated by the noise.

    python examples/intervals.py
    python examples/intervals.py --quick
"""

from __future__ import annotations

import argparse

import numpy as np

from svbnn import SVBNNRegressor
from svbnn.data import sparse_teacher


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="few epochs and draws (smoke test)")
    args = parser.parse_args()
    epochs, draws = (1200, 100) if args.quick else (10000, 600)

    d = sparse_teacher(n=500, n_test=1000, random_state=args.seed)
    reg = SVBNNRegressor(
        hidden_layer_sizes=(6, 6),  # a student of the teacher's depth (see docs/design.md)
        activation="tanh",
        noise_std=d.noise_std,  # known noise level: 1
        max_iter=epochs,
        batch_size=500,
        learning_rate_init=1e-2 if args.quick else 5e-3,
        tol=None,  # the paper's fixed number of epochs
        dtype="float64",
        random_state=args.seed,
        mean_function="zero",  # the paper's model: the network alone
    )
    reg.fit(d.X_train, d.y_train)
    rmse = float(np.sqrt(np.mean((reg.predict(d.X_test) - d.f_test) ** 2)))
    print(
        f"fit: {epochs} epochs; test RMSE against f0 {rmse:.3f}; "
        f"selected inputs {reg.selected_features_.tolist()} (relevant {d.relevant.tolist()})"
    )

    print(f"{'level':>6} {'interval':>11} {'mean width':>10} {'covers':>7}")
    for level in (0.90, 0.95):
        lo, hi = reg.predict_interval(d.X_test, level=level, n_samples=draws)
        cover_f = np.mean((lo <= d.f_test) & (d.f_test <= hi))
        print(f"{level:6.0%} {'credible':>11} {np.mean(hi - lo):10.3f} {cover_f:7.1%}  (of f0(x))")
        lo, hi = reg.predict_prediction_interval(d.X_test, level=level, n_samples=draws)
        cover_y = np.mean((lo <= d.y_test) & (d.y_test <= hi))
        print(f"{level:6.0%} {'prediction':>11} {np.mean(hi - lo):10.3f} {cover_y:7.1%}  (of y)")


if __name__ == "__main__":
    main()
