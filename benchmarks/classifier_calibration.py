"""The classifier's calibration by table size, beside logistic regression and an MLP.

Run ``python -m benchmarks.classifier_calibration [--sizes 750 2250 3000] [--classes 2
10] [--seeds 3] [--threads 1]``.

Each table is :func:`benchmarks.refit_band.table` with ``K`` classes: ``make_classification``
with 30 columns (8 informative, 4 redundant; 10% of the labels flipped at random), 10
N(0, 1) columns appended, ``n`` training rows and 2,000 test rows, the inputs scaled on
the training rows; seeds ``0 .. --seeds - 1``. Methods: ``SVBNNClassifier`` with the
defaults (``random_state`` = the seed), its median model (``export_sparse()``: the edges
of ``phi > 0.5`` at their slab means, the same fit, no draws), and the issue's peers
``LogisticRegression(max_iter=2000)`` and ``MLPClassifier(max_iter=2000,
early_stopping=True)``. Printed per table size: each method's mean test accuracy, log
loss, ECE (15 equal-width bins of the top-class probability) and mean top-class
probability (``confidence``: below the accuracy, the probabilities are underconfident),
and its median fit time. For ``SVBNN``, also the oracle temperature of
:mod:`benchmarks.temperature` (``fit_temperature`` on the test rows themselves: the ``T``
of its log grid, 0.1 to 10, whose probabilities, every draw's logits divided by ``T``,
have the least log loss there; a diagnostic, not a method: ``T`` near 1 says no one
temperature improves the log loss), with that log loss and ECE.
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
from sklearn.linear_model import LogisticRegression
from sklearn.neural_network import MLPClassifier

from benchmarks.refit_band import table
from benchmarks.tabular_peers import ece, log_loss
from benchmarks.temperature import fit_temperature, logit_draws, tempered
from svbnn import SVBNNClassifier

METHODS = ("SVBNN", "SVBNN median model", "LogisticRegression", "MLP")


def _median_model_proba(est: SVBNNClassifier, X: np.ndarray) -> np.ndarray:
    """The class probabilities of ``est``'s median model (``export_sparse``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # unresolved gates: the table reports the model
        module, _ = est.export_sparse()
    with torch.no_grad():
        logits = module(torch.as_tensor(X, dtype=torch.float32))
    return torch.softmax(logits, -1).double().numpy()


def fits(data: tuple[np.ndarray, ...], seed: int, max_iter: Any) -> dict[str, dict[str, float]]:
    """Every method's scores on one table: accuracy, log loss, ECE, confidence, seconds."""
    X_tr, y_tr, X_te, y_te = data
    y_tr, y_te = y_tr.astype(np.int64), y_te.astype(np.int64)
    out: dict[str, dict[str, float]] = {}

    def score(name: str, proba: np.ndarray, seconds: float) -> None:
        out[name] = dict(
            accuracy=float(np.mean(proba.argmax(1) == y_te)),
            log_loss=log_loss(proba, y_te),
            ece=ece(proba, y_te),
            confidence=float(proba.max(1).mean()),
            seconds=seconds,
        )

    makers: dict[str, Callable[[], Any]] = {
        "SVBNN": lambda: SVBNNClassifier(random_state=seed, max_iter=max_iter),
        "LogisticRegression": lambda: LogisticRegression(max_iter=2000),
        "MLP": lambda: MLPClassifier(max_iter=2000, early_stopping=True, random_state=seed),
    }
    for name, make in makers.items():
        est = make()
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence notes; the table reports the fits
            est.fit(X_tr, y_tr)
        seconds = time.perf_counter() - start
        score(name, est.predict_proba(X_te), seconds)
        if name == "SVBNN":
            logits = logit_draws(est, X_te)  # the draws predict_proba averages
            t = fit_temperature(logits, y_te)
            q = tempered(logits, t)
            out[name].update(oracle_t=t, oracle_log_loss=log_loss(q, y_te), oracle_ece=ece(q, y_te))
            score("SVBNN median model", _median_model_proba(est, X_te), seconds)
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[750, 2250, 3000])
    ap.add_argument("--classes", type=int, nargs="+", default=[2, 10])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--inputs", type=int, default=40)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-iter", type=int, default=None, help="a fixed budget (smoke tests)")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error("--seeds must be at least 1")
    if min(args.classes) < 2:
        ap.error("--classes must be at least 2 each")
    if args.inputs < 22:
        ap.error("--inputs must be at least 22 (12 informative and redundant + 10 noise)")
    if min(args.sizes) < 20:
        ap.error("--sizes must be at least 20 rows each")
    torch.set_num_threads(args.threads)
    max_iter = "auto" if args.max_iter is None else args.max_iter
    fits(table(200, args.inputs, 0, 2), 0, max_iter)  # warm-up: loads the native loops
    head = ["classes", "rows", "method", "accuracy", "log loss", "ECE", "confidence", "fit s"]
    head += ["oracle T", "log loss at T", "ECE at T"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for k in args.classes:
        for n in args.sizes:
            runs = [fits(table(n, args.inputs, s, k), s, max_iter) for s in range(args.seeds)]
            for method in METHODS:
                rs = [r[method] for r in runs]
                cells = [str(k), str(n), method]
                for key in ("accuracy", "log_loss", "ece", "confidence"):
                    cells.append(f"{statistics.fmean(r[key] for r in rs):.3f}")
                cells.append(f"{statistics.median(r['seconds'] for r in rs):.2f}")
                for key in ("oracle_t", "oracle_log_loss", "oracle_ece"):
                    cells.append(
                        f"{statistics.fmean(r[key] for r in rs):.3f}" if key in rs[0] else ""
                    )
                print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
