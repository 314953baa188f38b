"""The estimators against the tools a user already has, on tables from many sources.

Run ``python -m benchmarks.tabular_peers --out docs/results/tabular-peers [--datasets ...]
[--svbnn NAME=JSON ...] [--refit NAME ...] [--max-splits K]`` (UCI data via ``SVBNN_DATA``;
``python -m benchmarks.tabular --peers ...`` is the same command).

Protocol (issue 31)
-------------------
* Data: scikit-learn's diabetes, breast cancer, wine and digits; Friedman #1-#3
  (``make_friedman1/2/3``, 1,000 rows, noise sd 1, 125 and 0.1); ``make_classification``
  with 2 and 10 classes (1,000 rows, 10 informative inputs); ``make_regression`` with 20
  informative inputs (``regression-20``: 500 rows, a linear target, coefficients 5 to 82,
  noise sd 80 against a signal sd of about 200); the nine UCI regression sets of
  Hernandez-Lobato & Adams (all rows of the first standard split, train and test
  together). Every table gets 10 added N(0, 1) columns (the last 10 inputs).
* Splits: random 75/25, 10 of them when the table has fewer than 1,000 rows, else 3.
  Data sets run in order of size; each in a fresh process (``torch.set_num_threads(1)``,
  one BLAS/OpenMP thread). svbnn's one-time native build is triggered before the first
  fit and timed apart (``native_build_s`` in ``settings.json``).
* Methods, each after a ``StandardScaler`` (a pipeline): the svbnn estimators with
  ``random_state`` only (or the parameters a ``--svbnn NAME=JSON`` variant gives);
  regression peers ``BayesianRidge()``, a GP (``ConstantKernel() * RBF(ARD) +
  WhiteKernel()``, ``normalize_y=True``, on at most 1,000 training rows),
  ``MLPRegressor(max_iter=2000, early_stopping=True)`` with a standardised target,
  ``NGBRegressor()``, ``LassoCV()``; classification peers
  ``LogisticRegression(max_iter=2000)``, ``MLPClassifier(max_iter=2000,
  early_stopping=True)``, ``NGBClassifier`` (Bernoulli / k_categorical) and L1-logistic
  ``LogisticRegressionCV(penalty="l1", solver="saga")``.
* Metrics on the test part: RMSE, Gaussian NLL per datum (predictive mean and sd, noise
  included), coverage of the 95% prediction interval (svbnn: its
  ``predict_prediction_interval``; peers: mean +- 1.96 sd), accuracy, log loss, ECE (15
  equal-width bins of the top-class probability), inputs kept (``selected_features_``,
  nonzero L1 coefficients) split into the original and the added noise columns, fit
  time (wall clock of ``fit``), and whether the fit raised a ``CollapseWarning``.
  A peer that raises on a split (NGBoost's categorical fit can meet an infinite
  gradient) is recorded as failed there (``warnings``: ``failed: ...``; no metrics) and
  named in the report; the best peer is then taken over its other splits.
* Targets (svbnn against the best peer per data set, means over splits): RMSE <= 1.05x;
  NLL <= best + 0.05 nats; coverage within max(0.03, 2 binomial sd of the pooled test
  rows) of 0.95; accuracy >= best - 1 point; log loss <= best + 0.02; ECE <= max(0.03,
  best peer's + 0.01); <= 1 of 10 noise columns kept on average; no collapse; median fit
  time <= 3 s for tables up to 3,000 training rows x 40 columns.

``--rows N`` runs the same protocol on small tables: each split draws N rows of its table
at random (seeded by the table, the split and N) before the noise columns and the 75/25
split (10 splits below 1,000 rows). ``results.csv`` holds one row per (data set, split,
method) and is the cache: a rerun
fits only the rows it lacks (``--refit NAME`` refits a method), so a rerun of svbnn alone
does not refit the peers. It is rewritten atomically after every split, with
``report.md`` (first, one line per data set for the first ``--svbnn`` variant: its
targets met and the gaps of those missed; then each data set's rows and every
variant's targets, and the missing data sets). Where ``notes.md`` sits beside it (how
rows that several runs merged were made, in words), its text follows the command line.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

Array = NDArray[np.float64]

UCI_SETS = (
    "bostonHousing",
    "concrete",
    "energy",
    "kin8nm",
    "naval-propulsion-plant",
    "power-plant",
    "protein-tertiary-structure",
    "wine-quality-red",
    "yacht",
)
# Total rows of each table (the order of the run: smallest first).
SIZES = {
    "wine": 178,
    "yacht": 308,
    "diabetes": 442,
    "regression-20": 500,
    "bostonHousing": 506,
    "breast-cancer": 569,
    "energy": 768,
    "friedman1": 1000,
    "friedman2": 1000,
    "friedman3": 1000,
    "classification-2": 1000,
    "classification-10": 1000,
    "concrete": 1030,
    "wine-quality-red": 1599,
    "digits": 1797,
    "kin8nm": 8192,
    "power-plant": 9568,
    "naval-propulsion-plant": 11934,
    "protein-tertiary-structure": 45730,
}
DATASETS = tuple(sorted(SIZES, key=lambda k: (SIZES[k], k)))
CLASSIFICATION_TABLES = ("wine", "breast-cancer", "classification-2", "classification-10", "digits")
REGRESSION_TABLES = tuple(n for n in DATASETS if n not in CLASSIFICATION_TABLES)
NOISE_COLUMNS = 10
GP_ROWS = 1000
Z95 = 1.959963984540054
REG_PEERS = ("BayesianRidge", "GP", "MLP", "NGBoost", "LassoCV")
CLF_PEERS = ("LogisticRegression", "MLP", "NGBoost", "L1-LogisticCV")


# -- data ---------------------------------------------------------------------------------
def load_table(name: str) -> tuple[Array, Any, str, int | None]:
    """``(X, y, kind, n_true)`` of a table before the noise columns; ``n_true`` is the
    number of leading inputs that matter where known (Friedman #1: 5 of its 10), else
    ``None`` (every original input counts as true)."""
    from sklearn import datasets as D

    if name in UCI_SETS:
        from svbnn.data import load_uci

        s = load_uci(name, 0)
        X = np.vstack([s.X_train, s.X_test])
        return X, np.concatenate([s.y_train, s.y_test]), "regression", None
    loaders: dict[str, Callable[[], tuple[Any, Any]]] = {
        "diabetes": lambda: D.load_diabetes(return_X_y=True),
        "breast-cancer": lambda: D.load_breast_cancer(return_X_y=True),
        "wine": lambda: D.load_wine(return_X_y=True),
        "digits": lambda: D.load_digits(return_X_y=True),
        "friedman1": lambda: D.make_friedman1(1000, noise=1.0, random_state=0),
        "friedman2": lambda: D.make_friedman2(1000, noise=125.0, random_state=0),
        "friedman3": lambda: D.make_friedman3(1000, noise=0.1, random_state=0),
    }
    if name in loaders:
        X, y = loaders[name]()
        kind = "classification" if name in CLASSIFICATION_TABLES else "regression"
        return np.asarray(X, float), y, kind, 5 if name == "friedman1" else None
    if name.startswith("regression-"):
        k = int(name.split("-")[1])
        X, y = D.make_regression(500, n_features=k, n_informative=k, noise=80.0, random_state=0)
        return np.asarray(X, float), y, "regression", None
    if name.startswith("classification-"):
        classes = int(name.split("-")[1])
        X, y = D.make_classification(
            n_samples=1000,
            n_features=10,
            n_informative=10,
            n_redundant=0,
            n_classes=classes,
            n_clusters_per_class=2 if classes == 2 else 1,
            flip_y=0.02,
            random_state=0,
        )
        return X, y, "classification", None
    raise ValueError(f"unknown data set {name!r}; known: {', '.join(DATASETS)}")


def n_splits(name: str, rows: int | None = None) -> int:
    """The protocol's splits of a table (``rows``: of that many of its rows)."""
    return 10 if (SIZES[name] if rows is None else rows) < 1000 else 3


def make_split(name: str, split: int, rows: int | None = None) -> dict[str, Any]:
    """The table with its noise columns, split 75/25 at random (seeded by name and split);
    given ``rows``, the table is first cut to that many of its rows, drawn at random
    (seeded by name, split and ``rows``: each split its own draw)."""
    X, y, kind, n_true = load_table(name)
    if rows is not None:
        if not 8 <= rows <= len(y):
            raise ValueError(f"--rows must be in [8, {len(y)}] for {name}, got {rows}")
        keep = np.random.default_rng([split, sum(map(ord, name)), rows]).choice(
            len(y), rows, replace=False
        )
        X, y = X[keep], np.asarray(y)[keep]
    rng = np.random.default_rng([split, sum(map(ord, name))])
    X = np.hstack([X, rng.standard_normal((len(X), NOISE_COLUMNS))])
    order = rng.permutation(len(X))
    cut = int(round(0.75 * len(X)))
    tr, te = order[:cut], order[cut:]
    return dict(Xtr=X[tr], ytr=y[tr], Xte=X[te], yte=y[te], kind=kind, n_true=n_true, p=X.shape[1])


# -- methods ------------------------------------------------------------------------------
def _pipe(est: Any) -> Any:
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    return make_pipeline(StandardScaler(), est)


def peer_builders(
    kind: str, seed: int, n_classes: int, smoke: bool = False
) -> dict[str, Callable[[int], Any]]:
    """The issue's peers, each a pipeline after a ``StandardScaler`` (``smoke``: tiny
    budgets, for the smoke test only)."""
    from ngboost import NGBClassifier, NGBRegressor
    from ngboost.distns import Bernoulli, k_categorical
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
    from sklearn.linear_model import (
        BayesianRidge,
        LassoCV,
        LogisticRegression,
        LogisticRegressionCV,
    )
    from sklearn.neural_network import MLPClassifier, MLPRegressor
    from sklearn.preprocessing import StandardScaler

    it = 2000 if not smoke else 20
    ngb: dict[str, Any] = {"n_estimators": 10} if smoke else {}
    cv: dict[str, Any] = {"Cs": 2, "cv": 2, "max_iter": 20} if smoke else {}
    if kind == "regression":
        return {
            "BayesianRidge": lambda p: _pipe(BayesianRidge()),
            "GP": lambda p: _pipe(
                GaussianProcessRegressor(
                    ConstantKernel() * RBF(np.ones(p)) + WhiteKernel(),
                    normalize_y=True,
                    random_state=seed,
                    **({"optimizer": None} if smoke else {}),
                )
            ),
            "MLP": lambda p: _pipe(
                TransformedTargetRegressor(
                    MLPRegressor(max_iter=it, early_stopping=True, random_state=seed),
                    transformer=StandardScaler(),
                )
            ),
            "NGBoost": lambda p: _pipe(NGBRegressor(verbose=False, random_state=seed, **ngb)),
            "LassoCV": lambda p: _pipe(LassoCV(random_state=seed, cv=cv.get("cv", 5))),
        }
    dist = Bernoulli if n_classes == 2 else k_categorical(n_classes)
    return {
        "LogisticRegression": lambda p: _pipe(LogisticRegression(max_iter=it)),
        "MLP": lambda p: _pipe(MLPClassifier(max_iter=it, early_stopping=True, random_state=seed)),
        "NGBoost": lambda p: _pipe(
            NGBClassifier(Dist=dist, verbose=False, random_state=seed, **ngb)
        ),
        "L1-LogisticCV": lambda p: _pipe(
            LogisticRegressionCV(penalty="l1", solver="saga", random_state=seed, **cv)
        ),
    }


def _svbnn_class(kind: str) -> Any:
    from svbnn import SVBNNClassifier, SVBNNRegressor

    return SVBNNRegressor if kind == "regression" else SVBNNClassifier


def svbnn_applies(kind: str, params: dict[str, Any]) -> bool:
    """Whether a variant's parameters are all the task's estimator's (a regressor-only
    parameter, e.g. ``mean_function``, makes a variant of the regression tables only)."""
    return set(params) <= set(_svbnn_class(kind)().get_params())


def svbnn_builder(kind: str, seed: int, params: dict[str, Any]) -> Callable[[int], Any]:
    cls = _svbnn_class(kind)
    return lambda p: _pipe(cls(random_state=seed, **params))


def log_loss(proba: Array, y: NDArray[np.int64]) -> float:
    """Mean negative log probability of the true classes (probabilities clipped at 1e-15)."""
    return float(-np.mean(np.log(np.clip(proba[np.arange(len(y)), y], 1e-15, 1))))


def ece(proba: Array, y: NDArray[np.int64], bins: int = 15) -> float:
    """Expected calibration error of the top-class probability, equal-width bins."""
    conf, pred = proba.max(1), proba.argmax(1)
    idx = np.minimum((conf * bins).astype(int), bins - 1)
    return float(
        sum(
            abs(np.mean(pred[idx == b] == y[idx == b]) - conf[idx == b].mean()) * np.mean(idx == b)
            for b in range(bins)
            if np.any(idx == b)
        )
    )


def _predictive(pipe: Any, X: Array) -> tuple[Array, Array | None]:
    """Predictive mean and sd (noise included) where the method has them."""
    est = pipe[-1]
    Xs = pipe[:-1].transform(X)
    if hasattr(est, "pred_dist"):  # NGBoost
        d = est.pred_dist(Xs)
        return np.asarray(d.params["loc"], float), np.asarray(d.params["scale"], float)
    if type(est).__name__ in ("BayesianRidge", "GaussianProcessRegressor", "SVBNNRegressor"):
        mean, sd = est.predict(Xs, return_std=True)
        return np.asarray(mean, float), np.asarray(sd, float)
    return np.asarray(est.predict(Xs), float), None


def _selected(pipe: Any) -> NDArray[np.int64] | None:
    est = pipe[-1]
    if hasattr(est, "selected_features_"):
        return np.asarray(est.selected_features_, dtype=np.int64)
    if type(est).__name__ in ("LassoCV", "LogisticRegressionCV"):
        coef = np.atleast_2d(est.coef_)
        return np.flatnonzero(np.any(np.abs(coef) > 1e-10, axis=0))
    return None


def evaluate(data: dict[str, Any], method: str, pipe: Any, seed: int) -> dict[str, Any]:
    """Fit one method on one split; its row of metrics."""
    from svbnn.estimators import CollapseWarning

    Xtr, ytr = data["Xtr"], data["ytr"]
    if method == "GP" and len(ytr) > GP_ROWS:
        rows = np.random.default_rng(seed).choice(len(ytr), GP_ROWS, replace=False)
        Xtr, ytr = Xtr[rows], ytr[rows]
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pipe.fit(Xtr, ytr)
    fit_s = time.perf_counter() - t0
    row: dict[str, Any] = {
        "method": method,
        "fit_s": fit_s,
        "n_train": len(ytr),
        "collapse": any(issubclass(w.category, CollapseWarning) for w in caught),
        "warnings": ";".join(sorted({w.category.__name__ for w in caught})),
    }
    Xte, yte = data["Xte"], data["yte"]
    if data["kind"] == "regression":
        mean, sd = _predictive(pipe, Xte)
        row["rmse"] = float(np.sqrt(np.mean((mean - yte) ** 2)))
        row["rmse_sd"] = row["rmse"] / float(np.std(data["ytr"]))
        if sd is not None:
            z = (yte - mean) / sd
            row["nll"] = float(np.mean(0.5 * np.log(2 * np.pi * sd**2) + 0.5 * z**2))
            if hasattr(pipe[-1], "predict_prediction_interval"):
                lo, hi = pipe[-1].predict_prediction_interval(pipe[:-1].transform(Xte))
                row["coverage"] = float(np.mean((yte >= lo) & (yte <= hi)))
            else:
                row["coverage"] = float(np.mean(np.abs(z) <= Z95))
    else:
        # The steps by hand: Pipeline's fitted check does not know NGBoost's estimators.
        est = pipe[-1]
        proba = np.asarray(est.predict_proba(pipe[:-1].transform(Xte)), float)
        classes = np.asarray(getattr(est, "classes_", np.unique(data["ytr"])))
        y = np.searchsorted(classes, yte)
        row["accuracy"] = float(np.mean(proba.argmax(1) == y))
        row["log_loss"] = log_loss(proba, y)
        row["ece"] = ece(proba, y)
    est = pipe[-1]
    if hasattr(est, "converged_"):
        row["epochs"], row["converged"] = int(est.n_iter_), bool(est.converged_)
    if hasattr(est, "mean_function_"):
        row["mean_function"] = est.mean_function_
        row["linear_mean_ratio"] = est.linear_mean_ratio_
    sel = _selected(pipe)
    if sel is not None:
        n_orig = data["p"] - NOISE_COLUMNS
        n_true = data["n_true"] if data["n_true"] is not None else n_orig
        row["sel_true"] = int(np.sum(sel < n_true))
        row["sel_noise"] = int(np.sum(sel >= n_orig))
    return row


# -- the run ------------------------------------------------------------------------------
FIELDS = [
    "dataset",
    "kind",
    "split",
    "method",
    "params",
    "n_train",
    "n_test",
    "p",
    "rmse",
    "rmse_sd",
    "nll",
    "coverage",
    "accuracy",
    "log_loss",
    "ece",
    "sel_true",
    "sel_noise",
    "fit_s",
    "collapse",
    "epochs",
    "converged",
    "mean_function",
    "linear_mean_ratio",
    "warnings",
]


def read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return [_parse(r) for r in csv.DictReader(f)]


def _parse(r: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in r.items():
        if v == "" or k in ("dataset", "kind", "method", "params", "mean_function", "warnings"):
            out[k] = v if v != "" or k in ("params", "warnings") else None
        elif v in ("True", "False"):
            out[k] = v == "True"
        else:
            out[k] = float(v) if any(c in v for c in ".en") else int(v)
    return out


def csv_text(fields: list[str], rows: list[dict[str, Any]]) -> str:
    """``rows`` as CSV with the columns ``fields`` (other keys left out)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, extrasaction="ignore")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    from svbnn.checkpoint import atomic_write_bytes

    order = sorted(rows, key=lambda r: (DATASETS.index(r["dataset"]), r["split"], r["method"]))
    atomic_write_bytes(path, csv_text(FIELDS, order).encode())


def run_dataset(name: str, args: argparse.Namespace, variants: dict[str, dict[str, Any]]) -> None:
    """Every missing (split, method) row of one data set; the cache is rewritten after each
    split. Runs in its own process (see :func:`main`)."""
    import torch

    torch.set_num_threads(1)
    path = args.out / "results.csv"
    all_splits = n_splits(name, args.rows)
    splits = min(all_splits, args.max_splits) if args.max_splits else all_splits
    for split in range(splits):
        rows = read_rows(path)
        have = {
            (r["method"], r["params"]) for r in rows if r["dataset"] == name and r["split"] == split
        }
        data = make_split(name, split, args.rows)
        seed = 1000 * split + 7
        n_classes = len(np.unique(data["ytr"])) if data["kind"] == "classification" else 0
        todo: dict[str, tuple[str, Callable[[int], Any]]] = {}
        if not args.no_peers:
            for m, b in peer_builders(data["kind"], seed, n_classes, args.smoke).items():
                todo[m] = ("", b)
        for m, params in variants.items():
            if not svbnn_applies(data["kind"], params):
                continue
            spec = json.dumps(params, sort_keys=True)
            todo[m] = (spec, svbnn_builder(data["kind"], seed, params))
        new = []
        for method, (spec, build) in todo.items():
            if (method, spec) in have and method not in args.refit:
                continue
            try:
                row = evaluate(data, method, build(data["p"]), seed)
            except Exception as err:  # a peer that fails on a split is a result, not a crash
                if spec:  # an svbnn variant's failure is ours: let it show
                    raise
                row = {"method": method, "fit_s": math.nan, "n_train": len(data["ytr"])}
                row["warnings"] = f"failed: {type(err).__name__}: {err}".replace(";", ",")
            row.update(
                dataset=name,
                kind=data["kind"],
                split=split,
                params=spec,
                n_test=len(data["yte"]),
                p=data["p"],
            )
            new.append(row)
            print(f"{name} split {split} {method}: {row['fit_s']:.2f} s", flush=True)
        if new:
            # A method fitted now replaces its old rows of this split (a refit, new params).
            done = {n["method"] for n in new}
            keep = [
                r
                for r in read_rows(path)
                if not (r["dataset"] == name and r["split"] == split and r["method"] in done)
            ]
            write_rows(path, keep + new)


# -- report -------------------------------------------------------------------------------
def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [float(r[key]) for r in rows if r.get(key) is not None]
    return float(np.mean(vals)) if vals else None


def _fmt(v: float | None, digits: int = 3) -> str:
    if v is None:
        return ""
    return f"{v:.{digits}g}" if abs(v) < 1e4 else f"{v:.0f}"


def targets(rows: list[dict[str, Any]], method: str) -> list[tuple[str, str, bool]]:
    """``(target, value and gap, met)`` for ``method`` on one data set's rows."""
    by: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by.setdefault(r["method"], []).append(r)
    sv = by[method]
    kind = sv[0]["kind"]
    peers = [m for m in (REG_PEERS if kind == "regression" else CLF_PEERS) if m in by]
    out: list[tuple[str, str, bool]] = []

    def best(key: str, low: bool = True) -> tuple[float, str] | None:
        vals = [(v, m) for m in peers if (v := _mean(by[m], key)) is not None]
        if not vals:
            return None
        return min(vals) if low else max(vals)

    if kind == "regression":
        b = best("rmse")
        v = _mean(sv, "rmse")
        if b and v is not None:
            out.append((f"RMSE <= 1.05x best ({b[1]})", f"{v / b[0]:.3f}x", v <= 1.05 * b[0]))
        b = best("nll")
        v = _mean(sv, "nll")
        if b and v is not None:
            out.append((f"NLL <= best ({b[1]}) + 0.05", f"{v - b[0]:+.3f} nats", v <= b[0] + 0.05))
        v = _mean(sv, "coverage")
        if v is not None:
            n = sum(int(r["n_test"]) for r in sv)
            tol = max(0.03, 2 * math.sqrt(0.95 * 0.05 / n))
            out.append((f"coverage within {tol:.3f} of 0.95", f"{v:.3f}", abs(v - 0.95) <= tol))
    else:
        b = best("accuracy", low=False)
        v = _mean(sv, "accuracy")
        if b and v is not None:
            gap = 100 * (v - b[0])
            out.append((f"accuracy >= best ({b[1]}) - 1 point", f"{gap:+.1f} points", gap >= -1))
        b = best("log_loss")
        v = _mean(sv, "log_loss")
        if b and v is not None:
            out.append((f"log loss <= best ({b[1]}) + 0.02", f"{v - b[0]:+.3f}", v <= b[0] + 0.02))
        b = best("ece")
        v = _mean(sv, "ece")
        if b and v is not None:
            lim = max(0.03, b[0] + 0.01)
            out.append((f"ECE <= {lim:.3f}", f"{v:.3f}", v <= lim))
    v = _mean(sv, "sel_noise")
    if v is not None:
        out.append(("<= 1 noise column kept", f"{v:.1f}", v <= 1.0))
    collapsed = sum(bool(r["collapse"]) for r in sv)
    out.append(("no collapse", f"{collapsed} of {len(sv)} fits", collapsed == 0))
    n_tr, p = int(sv[0]["n_train"]), int(sv[0]["p"])
    if n_tr <= 3000 and p <= 40:
        med = float(np.median([float(r["fit_s"]) for r in sv]))
        out.append(("median fit <= 3 s", f"{med:.1f} s", med <= 3.0))
    return out


COLUMNS = [
    ("rmse", "RMSE", 4),
    ("rmse_sd", "RMSE/sd(y)", 3),
    ("nll", "NLL", 3),
    ("coverage", "cover 95%", 3),
    ("accuracy", "accuracy", 4),
    ("log_loss", "log loss", 3),
    ("ece", "ECE", 3),
    ("sel_true", "kept true", 3),
    ("sel_noise", "kept noise", 3),
    ("fit_s", "fit s (median)", 3),
]


def _at_a_glance(
    rows: list[dict[str, Any]],
    checked: dict[tuple[str, str], list[tuple[str, str, bool]]],
    done: list[str],
    method: str,
) -> str:
    """One line per data set for ``method`` (the first variant: the defaults): the targets
    met and the gaps of those missed; ``checked``: :func:`targets` per (data set,
    variant)."""
    lines = [
        f"## At a glance: `{method}`\n",
        "| data set | kind | training rows | targets met | missed (value) |",
        "|---|---|---|---|---|",
    ]
    met_all = n_all = every = 0
    for d in done:
        if (d, method) not in checked:
            continue
        drows = [r for r in rows if r["dataset"] == d]
        res = checked[d, method]
        met = sum(ok for _, _, ok in res)
        met_all, n_all, every = met_all + met, n_all + len(res), every + (met == len(res))
        misses = "; ".join(f"{t}: {val}" for t, val, ok in res if not ok)
        n_train = max(int(r["n_train"]) for r in drows)
        lines.append(f"| {d} | {drows[0]['kind']} | {n_train} | {met} of {len(res)} | {misses} |")
    lines.append("")
    lines.append(
        f"`{method}` meets {met_all} of {n_all} targets, every target on {every} of "
        f"{len(done)} data sets. Each data set's section below has every method's rows "
        "and every variant's targets.\n\n"
    )
    return "\n".join(lines)


def report(rows: list[dict[str, Any]], settings: dict[str, Any], notes: str = "") -> str:
    """``report.md``'s text; ``notes`` (``notes.md``'s, may be empty) after the command."""
    out = io.StringIO()
    out.write("# The estimators against the usual tools (issue 31)\n\n")
    out.write(
        f"Command: `python -m benchmarks.tabular_peers {settings['argv']}`; "
        f"CPU: {settings['cpu']}; {settings['date']}; git {settings['git_commit']}; "
        f"svbnn {settings['versions']['svbnn']}, torch {settings['versions']['torch']}, "
        f"scikit-learn {settings['versions']['sklearn']}, ngboost "
        f"{settings['versions']['ngboost']}. One thread per fit, each data set in a fresh "
        "process; the protocol, the metrics and the targets are in the docstring of "
        "`benchmarks/tabular_peers.py`. Means over splits (fit time: median). svbnn's "
        "one-time native build, excluded from the fit times: "
        f"{settings.get('native_build_s', 'not measured')}.\n\n"
    )
    if settings.get("rows"):
        out.write(
            f"Each split is of {settings['rows']} rows of its table, drawn at random for that "
            "split (`--rows`), then split 75/25.\n\n"
        )
    if notes.strip():
        out.write(notes.strip() + "\n\n")
    done = [d for d in DATASETS if any(r["dataset"] == d for r in rows)]
    missing = [d for d in settings["datasets"] if d not in done]
    variants = list(settings["variants"])
    checked = {
        (d, v): targets([r for r in rows if r["dataset"] == d], v)
        for d in done
        for v in variants
        if any(r["dataset"] == d and r["method"] == v for r in rows)
    }
    out.write(_at_a_glance(rows, checked, done, variants[0]))
    summary = []
    for d in done:
        drows = [r for r in rows if r["dataset"] == d]
        by: dict[str, list[dict[str, Any]]] = {}
        for r in drows:
            by.setdefault(r["method"], []).append(r)
        cols = [c for c in COLUMNS if any(r.get(c[0]) is not None for r in drows)]
        splits = sorted({int(r["split"]) for r in drows})
        out.write(
            f"## {d} ({drows[0]['kind']}, {max(int(r['n_train']) for r in drows)} training "
            f"rows, p = {int(drows[0]['p'])}; {len(splits)} of "
            f"{n_splits(d, settings.get('rows'))} splits)\n\n"
        )
        out.write("| method | " + " | ".join(c[1] for c in cols) + " |\n")
        out.write("|---" * (len(cols) + 1) + "|\n")
        for m, mrows in by.items():
            vals = []
            for key, _, digits in cols:
                if key == "fit_s":
                    vals.append(_fmt(float(np.nanmedian([r["fit_s"] for r in mrows])), digits))
                else:
                    vals.append(_fmt(_mean(mrows, key), digits))
            out.write(f"| {m} | " + " | ".join(vals) + " |\n")
        failed = [r for r in drows if str(r["warnings"] or "").startswith("failed")]
        for r in failed:
            out.write(f"- {r['method']} failed on split {int(r['split'])}: {r['warnings'][8:]}\n")
        out.write("\n")
        for v in variants:
            if v not in by:
                continue
            res = checked[d, v]
            met = sum(ok for _, _, ok in res)
            out.write(f"{v}: {met} of {len(res)} targets met.\n\n")
            for t, val, ok in res:
                out.write(f"- {t}: {val} {'pass' if ok else '**miss**'}\n")
                summary.append(f"| {d} | {v} | {t} | {val} | {'pass' if ok else '**miss**'} |")
            linear = [r for r in by[v] if r.get("mean_function") == "linear"]
            if linear:
                out.write(f"- a linear mean on {len(linear)} of {len(by[v])} splits\n")
            warns = sorted({w for r in by[v] for w in str(r["warnings"] or "").split(";") if w})
            if warns:
                out.write(f"- warnings raised: {', '.join(warns)}\n")
            out.write("\n")
    out.write("## Summary of the targets\n\n| data set | svbnn | target | value | met |\n")
    out.write("|---|---|---|---|---|\n" + "\n".join(summary) + "\n\n")
    out.write("Missing data sets (not run): " + (", ".join(missing) if missing else "none") + ".\n")
    return out.getvalue()


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _cpu() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return platform.processor() or "unknown"
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


# -- the lead harnesses' runs (benchmarks.linear_path, benchmarks.linear_mean) ------------
LEAD_FIELDS = [
    "dataset",
    "split",
    "arm",
    "rmse",
    "nll",
    "coverage",
    "noise_kept",
    "true_kept",
    "fit_s",
]
"""The leading columns of a lead harness's ``results.csv`` (each adds its own after them)."""


def lead_settings(module: str, argv: list[str]) -> dict[str, Any]:
    """A lead harness's ``settings.json``: its command, the CPU, date, git commit and torch
    version, and ``train_rows`` per table (filled by :func:`regression_splits`' caller)."""
    import torch

    return dict(
        command=f"python -m {module} " + " ".join(argv),
        cpu=_cpu(),
        date=datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        git=_git_commit(),
        torch=torch.__version__,
        train_rows={},
    )


def lead_provenance(settings: dict[str, Any]) -> str:
    """The opening words of a lead harness's report, from its :func:`lead_settings`: the
    command, CPU, date, git commit and torch version, and "One thread" (no full stop)."""
    return (
        f"Command: `{settings['command']}`; CPU: {settings['cpu']}; {settings['date']}; "
        f"git {settings['git']}; torch {settings['torch']}. One thread"
    )


def lead_parser(doc: str, datasets: dict[str, Any]) -> argparse.ArgumentParser:
    """A lead harness's command line: ``--out``, ``--datasets`` (``datasets``: its
    ``add_argument`` keywords), ``--max-splits``; the description is ``doc``'s first line."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--datasets", nargs="+", **datasets)
    ap.add_argument("--max-splits", type=int, default=None)
    return ap


def regression_splits(
    names: list[str], max_splits: int | None, rows: int | None = None
) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """``(name, split, data)`` for each split of each table (:func:`make_split`; ``rows``:
    of that many of its rows, as ``--rows``), at most ``max_splits`` a table; a
    classification table is a ``--datasets`` error."""
    for name in names:
        all_splits = n_splits(name, rows)
        splits = all_splits if max_splits is None else min(all_splits, max_splits)
        for split in range(splits):
            d = make_split(name, split, rows)
            if d["kind"] != "regression":
                raise SystemExit(f"--datasets: {name} is not a regression table")
            yield name, split, d


def _write_report(out: Path, settings: dict[str, Any]) -> None:
    """``out/report.md`` from ``out/results.csv``, ``settings`` and ``out/notes.md`` (where
    there is one), written atomically."""
    from svbnn.checkpoint import atomic_write_bytes

    notes = out / "notes.md"
    text = report(
        read_rows(out / "results.csv"), settings, notes.read_text() if notes.is_file() else ""
    )
    atomic_write_bytes(out / "report.md", text.encode())


def save_run(
    out: Path,
    fields: list[str],
    rows: list[dict[str, Any]],
    settings: dict[str, Any],
    report: Callable[[list[dict[str, Any]], dict[str, Any]], str],
) -> None:
    """A lead harness's run so far: ``results.csv`` (columns ``fields``), ``settings.json``
    and ``report.md``, each written atomically."""
    from svbnn_experiments.files import atomic_write_text

    atomic_write_text(out / "results.csv", csv_text(fields, rows))
    atomic_write_text(out / "settings.json", json.dumps(settings, indent=1) + "\n")
    atomic_write_text(out / "report.md", report(rows, settings))


def best_peers(
    path: str, name: str, splits: set[int], keys: tuple[str, ...]
) -> list[tuple[str, float]] | None:
    """For each metric of ``keys``, the best peer's ``(method, mean)`` on ``name``'s
    ``splits`` in a tabular-peers ``results.csv`` (lowest mean; a peer counts where it
    has the metric on every one of the splits); ``None`` where a metric has no peer."""
    with open(path) as f:
        peers = [
            r
            for r in csv.DictReader(f)
            if r["dataset"] == name
            and int(r["split"]) in splits
            and not r["method"].startswith("SVBNN")
        ]
    best: list[tuple[str, float]] = []
    for key in keys:
        by: dict[str, list[float]] = {}
        for r in peers:
            if r[key]:
                by.setdefault(r["method"], []).append(float(r[key]))
        full = {m: statistics.mean(v) for m, v in by.items() if len(v) == len(splits)}
        if not full:
            return None
        best.append(min(full.items(), key=lambda kv: kv[1]))
    return best


def rewrite_report(
    out: Path,
    peers: Path | None,
    report: Callable[[list[dict[str, Any]], dict[str, Any]], str],
) -> None:
    """A lead harness's ``--report-only``: ``report.md`` rewritten from the saved
    ``results.csv`` and ``settings.json`` (``peers``, when given, the tabular-peers
    ``results.csv`` its report compares with, in place of the saved one)."""
    from svbnn_experiments.files import atomic_write_text

    with open(out / "results.csv") as f:
        saved = list(csv.DictReader(f))
    kept = json.loads((out / "settings.json").read_text())
    if peers is not None:
        kept["peers"] = str(peers)
    atomic_write_text(out / "report.md", report(saved, kept))


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results/tabular-peers"))
    ap.add_argument("--datasets", nargs="+", default=None, choices=DATASETS)
    ap.add_argument(
        "--svbnn",
        action="append",
        default=None,
        metavar="NAME=JSON",
        help='an svbnn variant, e.g. SVBNN-eb=\'{"prior_inclusion": "eb"}\' (default SVBNN={})',
    )
    ap.add_argument("--refit", nargs="*", default=[], help="methods to refit despite the cache")
    ap.add_argument("--no-peers", action="store_true", help="fit only the svbnn variants")
    ap.add_argument("--max-splits", type=int, default=0, help="at most K splits (smoke tests)")
    ap.add_argument(
        "--rows",
        type=int,
        default=None,
        metavar="N",
        help="N rows of each table, drawn at random for each split (small tables)",
    )
    ap.add_argument("--smoke", action="store_true", help="tiny peer budgets (smoke test)")
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="rewrite report.md from the saved results.csv and settings.json",
    )
    ap.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    ap.add_argument(
        "--in-process", action="store_true", help="no fresh process per data set (tests)"
    )
    return ap


def parse_variants(
    specs: list[str] | None, default: dict[str, dict[str, Any]]
) -> dict[str, dict[str, Any]]:
    """``NAME=JSON`` command-line variants (``NAME`` alone: ``{}``) as ``{name: params}``;
    ``default`` without any. A ``ValueError`` names a malformed one (for ``ap.error``)."""
    if not specs:
        return dict(default)
    out: dict[str, dict[str, Any]] = {}
    for spec in specs:
        name, _, params = spec.partition("=")
        try:
            value = json.loads(params or "{}")
        except json.JSONDecodeError as err:
            raise ValueError(f"{spec!r}: the parameters are not JSON ({err.msg})") from None
        if not name or not isinstance(value, dict):
            raise ValueError(f"{spec!r}: expected NAME=JSON, the JSON an object of parameters")
        out[name] = value
    return out


def _native_build_s() -> float | None:
    from svbnn._engine import native as _native

    t0 = time.perf_counter()
    ok = _native.available()
    return time.perf_counter() - t0 if ok else None


def main(argv: list[str] | None = None) -> None:
    args = _parser().parse_args(argv)
    smallest = min(SIZES[n] for n in args.datasets or DATASETS)
    if args.rows is not None and not 8 <= args.rows <= smallest:
        _parser().error(
            f"--rows must be in [8, {smallest}] (the smallest chosen table's rows), got {args.rows}"
        )
    try:
        variants = parse_variants(args.svbnn, {"SVBNN": {}})
    except ValueError as err:
        _parser().error(f"--svbnn {err}")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.worker is not None:
        run_dataset(args.worker, args, variants)
        return
    if args.report_only:
        _write_report(args.out, json.loads((args.out / "settings.json").read_text()))
        return
    import sklearn
    import torch

    import svbnn

    try:
        import ngboost

        ngb = ngboost.__version__
    except ImportError:
        ngb = "not installed"
    names = args.datasets or list(DATASETS)
    names = sorted(names, key=DATASETS.index)
    argv_s = " ".join(argv if argv is not None else sys.argv[1:])
    settings: dict[str, Any] = {
        "argv": argv_s,
        "datasets": names,
        "rows": args.rows,
        "variants": variants,
        "cpu": _cpu(),
        "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
        "git_commit": _git_commit(),
        "versions": {
            "svbnn": svbnn.__version__,
            "torch": torch.__version__,
            "sklearn": sklearn.__version__,
            "ngboost": ngb,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
    }
    build = _native_build_s()
    settings["native_build_s"] = (
        "native loops unavailable"
        if build is None
        else f"{build:.1f} s to build or load them (a build already on disk only loads)"
    )
    from svbnn.checkpoint import atomic_write_bytes

    atomic_write_bytes(args.out / "settings.json", json.dumps(settings, indent=2).encode())
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
    }
    worker_args = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--in-process"]
    for name in names:
        if args.in_process:
            run_dataset(name, args, variants)
        else:
            # A fresh process per data set: fit times include no warm state of earlier sets.
            cmd = [sys.executable, "-m", "benchmarks.tabular_peers", *worker_args]
            subprocess.run([*cmd, "--worker", name], env=env, check=True)
        _write_report(args.out, settings)


if __name__ == "__main__":
    main()
