"""A weighted fit's time: ``sample_weight`` and ``class_weight`` on the native loops.

Run ``python -m benchmarks.weighted_fits [--repeats 3] [--threads 1]``. Three tables:
scikit-learn's diabetes (regression, every row weighted by a draw from U(0.5, 2), seed 0),
breast cancer (two classes, ``class_weight="balanced"``) and a generated imbalanced table
of three classes (``make_classification(700, n_features=12, n_informative=5,
n_redundant=0, n_classes=3, weights=[0.7, 0.2], random_state=0)``, ``"balanced"``), each
split 75/25 with a fixed seed and scaled by a ``StandardScaler``. Per round and table
three fits, alternating so that machine noise hits them alike: the estimator's defaults
unweighted, weighted (the ``auto`` backend: the native loops), and weighted on the eager
kernels (``kernel_backend="eager"``, the path a weighted fit took before the native loops
took weights); one warm-up round first (it builds the native loops once per machine).
The rounds are :func:`benchmarks.timing.time_interleaved`'s (one call a block).
Printed: a Markdown table of the median fit times, the median and quartiles of the
per-round ratios (:func:`benchmarks.timing.paired_ratio`), each fit's epochs and the
held-out score (R^2 or accuracy) of the last round. The two weighted fits optimise the
same objective; they draw different noise (the two backends' draws differ), so their
scores differ by the fit's own spread.
"""

from __future__ import annotations

import argparse
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer, load_diabetes, make_classification
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from benchmarks.timing import Timing, paired_ratio, time_interleaved
from svbnn import SVBNNClassifier, SVBNNRegressor

Table = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None, bool]
ARMS = ("unweighted", "weighted", "weighted, eager")


def tables() -> dict[str, Table]:
    """``name -> (X_train, X_test, y_train, y_test, sample_weight, is_classification)``;
    a classification table is weighted by ``class_weight="balanced"`` (no sample weights)."""
    out: dict[str, Table] = {}
    generated = make_classification(
        700,
        n_features=12,
        n_informative=5,
        n_redundant=0,
        n_classes=3,
        weights=[0.7, 0.2],
        random_state=0,
    )
    for name, (X, y), clf in (
        ("diabetes", load_diabetes(return_X_y=True), False),
        ("breast cancer", load_breast_cancer(return_X_y=True), True),
        ("3 classes, 70/20/10", generated, True),
    ):
        X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, random_state=0)
        scaler = StandardScaler().fit(X_tr)
        weights = None if clf else np.random.default_rng(0).uniform(0.5, 2.0, len(y_tr))
        out[name] = (scaler.transform(X_tr), scaler.transform(X_te), y_tr, y_te, weights, clf)
    return out


def fit(table: Table, arm: str, seed: int, max_iter: int | str) -> tuple[int, float]:
    """One fit of ``arm``: its epochs and held-out score."""
    X_tr, X_te, y_tr, y_te, weights, clf = table
    weighted = arm != "unweighted"
    params: dict[str, Any] = {"random_state": seed, "max_iter": max_iter}
    if arm == "weighted, eager":
        params["kernel_backend"] = "eager"
    if clf and weighted:
        params["class_weight"] = "balanced"
    est: Any = (SVBNNClassifier if clf else SVBNNRegressor)(**params)
    fit_params = {"sample_weight": weights} if weighted and weights is not None else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a smoke test's short budget has not converged
        est.fit(X_tr, y_tr, **fit_params)
    return int(est.n_iter_), float(est.score(X_te, y_te))


def arm_fits(
    table: Table, max_iter: int | str, last: dict[str, tuple[int, float]]
) -> dict[str, Callable[[], None]]:
    """The three arms' fits of ``table``, each call seeded by the arm's count of calls
    (the warm-up 0, round ``r`` ``r``) and leaving its epochs and score in ``last``."""
    calls = dict.fromkeys(ARMS, 0)

    def call(arm: str) -> None:
        last[arm] = fit(table, arm, calls[arm], max_iter)
        calls[arm] += 1

    return {arm: partial(call, arm) for arm in ARMS}


def _ratio(num: Timing, den: Timing) -> str:
    median, q1, q3 = paired_ratio(num, den)
    return f"{median:.2f} [{q1:.2f}, {q3:.2f}]"


def run(repeats: int, max_iter: int | str = "auto") -> str:
    """The Markdown report of :func:`main`'s rounds."""
    lines = [
        f"Defaults, {torch.get_num_threads()} thread(s), {repeats} rounds after a warm-up; "
        "fit s: medians; ratios: median [quartiles] of the per-round ratios",
        "",
        "| data | n x p | unweighted, s | weighted, s | weighted, eager, s | "
        "weighted / unweighted | eager / weighted | epochs (last round) | "
        "held-out score (last round) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, table in tables().items():
        last: dict[str, tuple[int, float]] = {}
        fits = arm_fits(table, max_iter, last)
        times = time_interleaved(fits, rounds=repeats, min_block_s=0.0, warmup=1)
        lines.append(
            f"| {name} | {table[0].shape[0]} x {table[0].shape[1]} | "
            + " | ".join(f"{times[arm].median:.2f}" for arm in ARMS)
            + f" | {_ratio(times['weighted'], times['unweighted'])} | "
            f"{_ratio(times['weighted, eager'], times['weighted'])} | "
            + " / ".join(str(last[arm][0]) for arm in ARMS)
            + " | "
            + " / ".join(f"{last[arm][1]:.3f}" for arm in ARMS)
            + " |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--max-iter", type=int, default=None, help="a fixed budget (smoke tests)")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1, got {args.repeats}")
    if args.threads < 1:
        ap.error(f"--threads must be at least 1, got {args.threads}")
    torch.set_num_threads(args.threads)
    print(run(args.repeats, "auto" if args.max_iter is None else args.max_iter))


if __name__ == "__main__":
    main()
