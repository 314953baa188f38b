"""Tabular benchmark: the estimators with default settings against scikit-learn.

Run ``python -m benchmarks.tabular --out docs/results/tabular [--quick] [--datasets ...]
[--splits K] [--seed S] [--noise-columns k]`` (data via ``SVBNN_DATA``).
``python -m benchmarks.tabular --peers ...`` runs the protocol of issue 31 instead: more
tables, the usual tools as peers, cached peer results
(:mod:`benchmarks.tabular_peers`).

Every task gets ``k`` added pure-noise columns (standard normal; uniform on [0, 1] for
images, like pixels) so that variable selection can be scored. Inputs are standardised
with the training part's mean and sd, as a user's pipeline would (images: pixels / 255).

Tasks
-----
* Regression: the nine UCI sets of Hernandez-Lobato & Adams (2015), their first ``K``
  standard splits. The GP is fitted on at most ``--gp-rows`` training rows (a random
  subset: its cost is cubic in n); every other method sees all rows.
* Classification: MNIST and Fashion-MNIST subsets (``--image-train`` training images, the
  first 5,000 test images), and two generated problems (``make_classification``, 10
  informative inputs: binary and 10 classes, 1,000 training rows).

Methods: ``SVBNNRegressor`` / ``SVBNNClassifier`` with ``random_state`` only, and
scikit-learn's ``BayesianRidge``, ``GaussianProcessRegressor`` (ARD RBF + WhiteKernel),
``MLPRegressor`` / ``MLPClassifier``, ``LogisticRegression`` and, for selection,
``LassoCV`` (regression) and L1 ``LogisticRegressionCV`` (generated classification).

Metrics: test RMSE (original units) / accuracy; Gaussian NLL per test point (predictive
mean and sd, the sd including the noise) / log loss; coverage and mean width (in units of
the training sd of y) of the central 95% prediction interval; ECE with 10 equal-width
bins of the top-class probability; inputs selected (true / noise; for UCI every original
input counts as "true", since which of them matter is unknown); fit time in seconds.

The targets of issue 13 are checked in ``report.md``; ``results.csv`` has one row per
(task, split, method) and ``settings.json`` the arguments, versions and the estimator
parameters. Files are written atomically, after every task, so an interrupted run
leaves a consistent partial report.
"""

from __future__ import annotations

import argparse
import csv
import inspect
import io
import json
import math
import platform
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import sklearn
import torch
from numpy.typing import NDArray
from scipy import stats
from sklearn.compose import TransformedTargetRegressor
from sklearn.datasets import make_classification
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import RBF, ConstantKernel, WhiteKernel
from sklearn.linear_model import BayesianRidge, LassoCV, LogisticRegression, LogisticRegressionCV
from sklearn.neural_network import MLPClassifier, MLPRegressor
from sklearn.preprocessing import StandardScaler
from tqdm.auto import tqdm

import svbnn
from svbnn import SVBNNClassifier, SVBNNRegressor
from svbnn.checkpoint import atomic_write_bytes
from svbnn.data import UCI_INFO, load_mnist, load_uci

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
CLF_SETS = ("generated-binary", "generated-10class", "mnist", "fashion-mnist")
QUICK_SETS = ("yacht", "bostonHousing", "energy", "generated-binary")
Z95 = float(stats.norm.ppf(0.975))


# -- data ---------------------------------------------------------------------------------
class Task:
    """One train/test problem with ``k`` added noise columns (the last ``k`` inputs)."""

    def __init__(
        self, name: str, kind: str, Xtr: Array, ytr: Any, Xte: Array, yte: Any, n_true: int | None
    ) -> None:
        self.name, self.kind = name, kind
        self.Xtr, self.ytr, self.Xte, self.yte = Xtr, ytr, Xte, yte
        self.n_true = n_true  # inputs that matter (None: unknown, e.g. pixels)


def _standardise(Xtr: Array, Xte: Array) -> tuple[Array, Array]:
    m, s = Xtr.mean(0), Xtr.std(0)
    s[s == 0] = 1.0  # constant columns (naval has two)
    return (Xtr - m) / s, (Xte - m) / s


def make_task(name: str, split: int, k: int, rng: np.random.Generator, args: Any) -> Task:
    """Load (or generate) ``name``'s split ``split`` and append ``k`` noise columns."""
    if name in UCI_SETS:
        s = load_uci(name, split)
        Xtr, Xte = s.X_train, s.X_test
        Xtr = np.hstack([Xtr, rng.standard_normal((len(Xtr), k))])
        Xte = np.hstack([Xte, rng.standard_normal((len(Xte), k))])
        Xtr, Xte = _standardise(Xtr, Xte)
        return Task(name, "regression", Xtr, s.y_train, Xte, s.y_test, s.n_features)
    if name.startswith("generated"):
        classes = 2 if name.endswith("binary") else 10
        X, y = make_classification(
            n_samples=1000 + 5000,
            n_features=10 + k,
            n_informative=10,
            n_redundant=0,
            n_classes=classes,
            n_clusters_per_class=2 if classes == 2 else 1,
            flip_y=0.02,
            shuffle=False,  # informative columns first, then the noise columns
            random_state=int(rng.integers(2**31 - 1)),
        )
        rows = rng.permutation(len(y))  # make_classification orders the rows by class
        X, y = X[rows], y[rows]
        Xtr, Xte = _standardise(X[:1000], X[1000:])
        return Task(name, "classification", Xtr, y[:1000], Xte, y[1000:], 10)
    data = load_mnist(fashion=name == "fashion-mnist")
    rows = rng.choice(len(data.y_train), args.image_train, replace=False)
    Xtr = data.x_train[rows].reshape(len(rows), -1) / 255.0
    Xte = data.x_test[:5000].reshape(5000, -1) / 255.0
    Xtr = np.hstack([Xtr, rng.uniform(size=(len(Xtr), k))])
    Xte = np.hstack([Xte, rng.uniform(size=(len(Xte), k))])
    return Task(
        name,
        "classification",
        Xtr,
        data.y_train[rows].astype(int),
        Xte,
        data.y_test[:5000].astype(int),
        None,
    )


# -- methods ------------------------------------------------------------------------------
def _normal_predictive(est: Any, X: Array) -> tuple[Array, Array]:
    """Predictive mean and sd (noise included) of a regressor with ``return_std``, or of
    SVBNN's 95% prediction interval (sd = half-width / 1.96) where it has no such option."""
    if "return_std" in inspect.signature(est.predict).parameters:
        mean, sd = est.predict(X, return_std=True)
        return np.asarray(mean, float), np.asarray(sd, float)
    lo, hi = est.predict_prediction_interval(X, level=0.95)
    return est.predict(X), (hi - lo) / (2 * Z95)


def _gp(n_features: int) -> GaussianProcessRegressor:
    kernel = ConstantKernel() * RBF(np.ones(n_features), (1e-2, 1e3)) + WhiteKernel(
        0.1, (1e-6, 1e1)
    )
    return GaussianProcessRegressor(kernel, normalize_y=True, n_restarts_optimizer=0)


def regression_methods(seed: int) -> dict[str, Callable[[int], Any]]:
    return {
        "SVBNN": lambda p: SVBNNRegressor(random_state=seed),
        "BayesianRidge": lambda p: BayesianRidge(),
        "GP": _gp,
        # sklearn's MLP does not scale y: a pipeline would (yacht's raw target: 3x the RMSE).
        "MLP": lambda p: TransformedTargetRegressor(
            MLPRegressor(
                hidden_layer_sizes=(50,), max_iter=1000, early_stopping=True, random_state=seed
            ),
            transformer=StandardScaler(),
        ),
        "LassoCV": lambda p: LassoCV(cv=5, random_state=seed, n_jobs=1),
    }


def classification_methods(seed: int, selection: bool) -> dict[str, Callable[[int], Any]]:
    out: dict[str, Callable[[int], Any]] = {
        "SVBNN": lambda p: SVBNNClassifier(random_state=seed),
        "LogisticRegression": lambda p: LogisticRegression(max_iter=2000),
        "MLP": lambda p: MLPClassifier(max_iter=500, early_stopping=True, random_state=seed),
    }
    if selection:
        out["L1-LogisticCV"] = lambda p: LogisticRegressionCV(
            Cs=8, cv=5, penalty="l1", solver="saga", max_iter=2000, random_state=seed
        )
    return out


def _selected(est: Any, p: int) -> NDArray[np.int64] | None:
    if hasattr(est, "selected_features_"):
        return np.asarray(est.selected_features_, dtype=np.int64)
    coef = getattr(est, "coef_", None)
    if (
        coef is None
        or isinstance(est, (BayesianRidge, LogisticRegression))
        and not isinstance(est, LogisticRegressionCV)
    ):
        return None
    return np.flatnonzero(np.any(np.abs(np.atleast_2d(coef)) > 1e-10, axis=0))


def ece(proba: Array, y: NDArray[np.int64], bins: int = 10) -> float:
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


def _fit_recorded(est: Any, X: Any, y: Any, method: str) -> tuple[float, list[str]]:
    """Fit ``est``; return the fit time and the categories of the warnings it raised
    (scikit-learn's ``ConvergenceWarning`` counted for SVBNN only)."""
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        est.fit(X, y)
    fit_time = time.perf_counter() - t0
    caught = sorted(
        {
            f"{w.category.__name__}"
            for w in record
            if method == "SVBNN" or w.category is not ConvergenceWarning
        }
    )
    return fit_time, caught


def _regression_metrics(task: Task, method: str, est: Any) -> dict[str, Any]:
    """Test RMSE; for predictive distributions also NLL, 95% coverage and interval width
    (in units of the training sd of ``y``); SVBNN's noise sd (same units)."""
    row: dict[str, Any] = {}
    sd_y = float(np.std(task.ytr))
    if method in ("MLP", "LassoCV"):
        mean, sd = est.predict(task.Xte), None
    else:
        mean, sd = _normal_predictive(est, task.Xte)
    row["rmse"] = float(np.sqrt(np.mean((mean - task.yte) ** 2)))
    if sd is not None:
        z = (task.yte - mean) / sd
        row["nll"] = float(np.mean(0.5 * np.log(2 * np.pi * sd**2) + 0.5 * z**2))
        row["coverage"] = float(np.mean(np.abs(z) <= Z95))
        row["width"] = float(np.mean(2 * Z95 * sd) / sd_y)
    if method == "SVBNN" and hasattr(est, "noise_std_"):
        row["noise_std"] = float(est.noise_std_) / sd_y
    return row


def _classification_metrics(task: Task, est: Any) -> dict[str, Any]:
    """Test accuracy, log loss and expected calibration error."""
    proba = est.predict_proba(task.Xte)
    y = np.searchsorted(est.classes_, task.yte)
    return {
        "accuracy": float(np.mean(proba.argmax(1) == y)),
        "log_loss": float(-np.mean(np.log(np.clip(proba[np.arange(len(y)), y], 1e-15, 1)))),
        "ece": ece(proba, y),
    }


def evaluate(task: Task, method: str, est: Any, k: int, seed: int, gp_rows: int) -> dict[str, Any]:
    """Fit ``est`` on the task and return one row of metrics."""
    Xtr, ytr = task.Xtr, task.ytr
    if method == "GP" and len(ytr) > gp_rows:
        rows = np.random.default_rng(seed).choice(len(ytr), gp_rows, replace=False)
        Xtr, ytr = Xtr[rows], ytr[rows]
    p = task.Xtr.shape[1]
    fit_time, caught = _fit_recorded(est, Xtr, ytr, method)
    row: dict[str, Any] = {
        "method": method,
        "fit_s": fit_time,
        "n_train": len(ytr),
        "warnings": ";".join(caught),
    }
    if task.kind == "regression":
        row.update(_regression_metrics(task, method, est))
    else:
        row.update(_classification_metrics(task, est))
    if hasattr(est, "converged_"):
        row["epochs"], row["converged"] = int(est.n_iter_), bool(est.converged_)
    sel = _selected(est, p)
    if sel is not None:
        n_orig = p - k
        row["sel_true"] = int(np.sum(sel < n_orig))
        row["sel_noise"] = int(np.sum(sel >= n_orig))
        row["n_orig"], row["k"] = n_orig, k
    return row


# -- report -------------------------------------------------------------------------------
def _atomic_write(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def _mean(rows: list[dict[str, Any]], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None and r.get(key) == r.get(key)]
    return float(np.mean(vals)) if vals else None


def _fmt(v: float | None, digits: int = 3) -> str:
    if v is None:
        return ""
    return f"{v:.{digits}g}" if abs(v) < 1e4 else f"{v:.0f}"


def targets(task: str, kind: str, by: dict[str, list[dict[str, Any]]]) -> list[str]:
    """The issue's targets for SVBNN on one task: ``"target: value (pass/miss)"``."""
    sv = by["SVBNN"]
    out = []

    def mark(ok: bool) -> str:
        return "**pass**" if ok else "**miss**"

    if kind == "regression":
        best_v = min(
            _mean(by[m], "rmse") or math.inf for m in ("BayesianRidge", "GP", "MLP") if m in by
        )
        rmse = _mean(sv, "rmse") or math.inf
        out.append(
            f"RMSE within 5% of the best baseline ({best_v:.4g}): {rmse:.4g} = "
            f"{rmse / best_v:.3f}x {mark(rmse <= 1.05 * best_v)}"
        )
        cov = _mean(sv, "coverage")
        if cov is not None:
            out.append(f"95% PI coverage in [0.92, 0.98]: {cov:.3f} {mark(0.92 <= cov <= 0.98)}")
    else:
        acc = _mean(sv, "accuracy") or 0.0
        lr = _mean(by["LogisticRegression"], "accuracy") or 0.0
        mlp = _mean(by["MLP"], "accuracy") or 0.0
        out.append(f"accuracy >= logistic regression ({lr:.4f}): {acc:.4f} {mark(acc >= lr)}")
        out.append(
            f"accuracy within 0.5 points of the MLP ({mlp:.4f}): {acc:.4f} "
            f"{mark(acc >= mlp - 0.005)}"
        )
        e = _mean(sv, "ece") or math.inf
        out.append(f"ECE <= 0.03: {e:.4f} {mark(e <= 0.03)}")
    noise = [r["sel_noise"] / r["k"] for r in sv if r.get("k")]
    if noise:
        rate = float(np.mean(noise))
        out.append(f"noise columns selected <= 5%: {100 * rate:.1f}% {mark(rate <= 0.05)}")
        kept = [r["sel_true"] / r["n_orig"] for r in sv if r.get("k")]
        out.append(f"original inputs kept: {100 * float(np.mean(kept)):.1f}%")
    return out


COLUMNS = [
    ("rmse", "RMSE", 4),
    ("nll", "NLL", 3),
    ("coverage", "cover 95%", 3),
    ("width", "width (sd_y)", 3),
    ("accuracy", "accuracy", 4),
    ("log_loss", "log loss", 3),
    ("ece", "ECE", 3),
    ("sel_true", "sel. true", 3),
    ("sel_noise", "sel. noise", 3),
    ("noise_std", "noise_std_ (sd_y)", 3),
    ("fit_s", "fit s", 3),
]


def report(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    out = io.StringIO()
    out.write("# Tabular benchmark: the estimators with default settings\n\n")
    out.write(
        f"Generated by `python -m benchmarks.tabular {settings['argv']}` (svbnn "
        f"{settings['versions']['svbnn']}, torch {settings['versions']['torch']}, "
        f"scikit-learn {settings['versions']['sklearn']}; {settings['threads']} thread). "
        "Means over splits; SVBNN uses `random_state` only. Every task has "
        f"{settings['noise_columns']} added pure-noise inputs. See the docstring of "
        "`benchmarks/tabular.py` for the protocol and the metric definitions.\n\n"
    )
    summary: list[str] = []
    for task in dict.fromkeys(r["task"] for r in rows):
        trows = [r for r in rows if r["task"] == task]
        kind = trows[0]["kind"]
        by: dict[str, list[dict[str, Any]]] = {}
        for r in trows:
            by.setdefault(r["method"], []).append(r)
        cols = [c for c in COLUMNS if any(r.get(c[0]) is not None for r in trows)]
        n_splits = len(by["SVBNN"])
        out.write(
            f"## {task} (n = {trows[0]['n_total']}, p = {trows[0]['p']}, "
            f"{n_splits} split{'s' if n_splits > 1 else ''})\n\n"
        )
        out.write("| method | " + " | ".join(c[1] for c in cols) + " |\n")
        out.write("|---" * (len(cols) + 1) + "|\n")
        for m, mrows in by.items():
            vals = [_fmt(_mean(mrows, c[0]), c[2]) for c in cols]
            gp = " (subset)" if m == "GP" and mrows[0]["n_train"] < trows[0]["n_total"] else ""
            out.write(f"| {m}{gp} | " + " | ".join(vals) + " |\n")
        warn = sorted({w for r in by["SVBNN"] for w in r["warnings"].split(";") if w})
        out.write("\n")
        if warn:
            out.write(f"SVBNN warnings: {', '.join(warn)}.\n\n")
        for t in targets(task, kind, by):
            out.write(f"- {t}\n")
            summary.append(f"| {task} | {t.split(':')[0]} | {t.split(':', 1)[1].strip()} |")
        out.write("\n")
    out.write("## Summary of the targets (SVBNN)\n\n| task | target | result |\n|---|---|---|\n")
    out.write("\n".join(summary) + "\n")
    return out.getvalue()


def _git_commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m benchmarks.tabular``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=Path("results/tabular"))
    ap.add_argument("--datasets", nargs="+", default=None)
    ap.add_argument("--splits", type=int, default=2, help="first K standard splits (UCI)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--noise-columns", type=int, default=10)
    ap.add_argument("--gp-rows", type=int, default=600)
    ap.add_argument("--image-train", type=int, default=3000)
    ap.add_argument("--quick", action="store_true", help="4 small tasks, 1 split")
    ap.add_argument("--threads", type=int, default=1)
    return ap


def _settings(
    args: argparse.Namespace, argv: list[str] | None, names: list[str], splits: int
) -> dict[str, Any]:
    """The run's ``settings.json``: options, git commit, versions, estimator defaults."""
    return {
        "argv": " ".join(argv if argv is not None else sys.argv[1:]),
        "datasets": names,
        "splits": splits,
        "seed": args.seed,
        "noise_columns": args.noise_columns,
        "gp_rows": args.gp_rows,
        "image_train": args.image_train,
        "threads": args.threads,
        "git_commit": _git_commit(),
        "versions": {
            "svbnn": svbnn.__version__,
            "torch": torch.__version__,
            "sklearn": sklearn.__version__,
            "numpy": np.__version__,
            "python": platform.python_version(),
        },
        "estimators": {
            "SVBNNRegressor": SVBNNRegressor().get_params(),
            "SVBNNClassifier": SVBNNClassifier().get_params(),
        },
    }


def _run_task(name: str, split: int, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Every method on one task (data set and split): one row of metrics per method."""
    rng = np.random.default_rng([args.seed, split, sum(map(ord, name))])
    task = make_task(name, split, args.noise_columns, rng, args)
    seed = args.seed * 1000 + split
    p = task.Xtr.shape[1]
    methods = (
        regression_methods(seed)
        if task.kind == "regression"
        else classification_methods(seed, task.n_true is not None)
    )
    rows = []
    for method, build in methods.items():
        row = evaluate(task, method, build(p), args.noise_columns, seed, args.gp_rows)
        row.update(
            task=name,
            kind=task.kind,
            split=split,
            p=p,
            n_total=len(task.ytr),
            n_test=len(task.yte),
        )
        rows.append(row)
    return rows


def _write_results(out: Path, rows: list[dict[str, Any]], settings: dict[str, Any]) -> None:
    """``results.csv`` (columns sorted) and ``report.md`` of the rows so far."""
    fields = sorted({k for r in rows for k in r})
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields)
    w.writeheader()
    w.writerows(rows)
    _atomic_write(out / "results.csv", buf.getvalue())
    _atomic_write(out / "report.md", report(rows, settings))


def main(argv: list[str] | None = None) -> None:
    raw = sys.argv[1:] if argv is None else argv
    if "--peers" in raw:
        # The protocol of issue 31 (the usual tools as peers): benchmarks/tabular_peers.py.
        from benchmarks import tabular_peers

        tabular_peers.main([a for a in raw if a != "--peers"])
        return
    args = _parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    names = args.datasets or (list(QUICK_SETS) if args.quick else [*UCI_SETS, *CLF_SETS])
    splits = 1 if args.quick else args.splits
    args.out.mkdir(parents=True, exist_ok=True)
    settings = _settings(args, argv, names, splits)
    _atomic_write(args.out / "settings.json", json.dumps(settings, indent=2, default=str))
    jobs = [(n, s) for n in names for s in range(splits if n in UCI_INFO else 1)]
    rows: list[dict[str, Any]] = []
    for name, split in tqdm(jobs, desc="tasks"):
        rows += _run_task(name, split, args)
        _write_results(args.out, rows, settings)


if __name__ == "__main__":
    main()
