"""The regressor on the residuals of a sparse linear mean, measured as the lead that became
``SVBNNRegressor(mean_function=...)`` (whose measurements are the tabular-peers
benchmark's ``SVBNN`` against ``SVBNN-zero`` rows). The arms here are the lead's, kept to
re-measure its reports: the network alone (``mean_function="zero"``, the regressor's
defaults when the lead was measured) and the lead's own two-stage fit.

Run ``python -m benchmarks.linear_mean --out docs/results/linear-mean [--datasets ...]
[--max-splits K] [--peers CSV] [--generated]`` (UCI data via ``SVBNN_DATA``; one
thread); ``--report-only`` rewrites ``report.md`` from the saved ``results.csv`` and
``settings.json`` (runs of several processes merged into one ``results.csv``).

Why: on a table of many linear effects the regressor's network reaches each effect only
through ReLU units, two or more included edges each paying the prior's price, and the
prior prunes the weaker effects (``regression-20``: RMSE 1.33x LassoCV's). A Gaussian
process handles such a table with a linear mean function; here the network gets one.

What: on the tables and splits of :mod:`benchmarks.tabular_peers` (10 added noise
columns, random 75/25 splits, ``StandardScaler``-ed inputs, seeds ``1000 * split + 7``),
side by side on the same rows and seed:

* ``defaults``: ``SVBNNRegressor(random_state=seed, mean_function="zero")``;
* ``linear mean``: the library's screen (:func:`svbnn._linear_mean.fit_linear_mean`: the
  inputs whose ARD posterior mean coefficient is more than 2.5 posterior sds from 0) makes
  the linear mean, ``ARDRegression`` refitted on them alone; then
  ``SVBNNRegressor(random_state=seed, mean_function="zero")`` fits ``y`` minus that
  mean. Prediction: the linear mean plus the network's; the predictive sd from the
  network's (noise included) and the linear mean's posterior variance (its
  ``return_std`` less its noise ``1 / alpha_``). Inputs kept: the linear mean's and the network's
  ``selected_features_``. Where the network explains nothing of the residuals (training
  R^2 at most ``NETWORK_R2``, the regressor's ``CollapseWarning`` threshold: on a linear
  table they are noise, and the inputs such a fit keeps are chance), the model is the
  linear mean alone: its prediction, its predictive sd (noise included) and its inputs.

* ``library``: the library's own ``SVBNNRegressor(random_state=seed)``
  (``mean_function="auto"``, the lead in the library), reported in a table of its own.

And a rule that chooses between them per split from what a fit of the defaults already
knows: ``q``, ``ARDRegression``'s 5-fold cross-validated RMSE on the training rows over
the defaults' ``noise_std_``; the linear mean where ``q <= RULE`` (a linear model whose
held-out error is within the noise the network itself estimates). Its fit time is the
defaults', the cross-validation's and, where chosen, the linear-mean arm's.

With ``--peers CSV`` (the tabular-peers benchmark's ``results.csv``) the report adds the
defaults' and the rule's RMSE as multiples of the best peer's and their NLL above the best
peer's, each peer's mean taken over the same splits.

``--generated`` runs generated tables outside the benchmark instead (``GENERATED``, four:
20 linear effects on 227 training rows, the shape of the issue's hidden table A;
``make_sparse_uncorrelated``; Friedman #1 on 300 training rows; linear effects with two
nonlinear terms), 10 added N(0, 1) columns, 3 random 75/25 splits each (``--max-splits``
fewer), with the tabular-peers benchmark's five regression peers fitted on the same
splits into ``peers.csv``, the report's peer columns.

Reported per table, means over splits: each arm's test RMSE, their ratio, the Gaussian
NLL per datum and the coverage of the 95% interval (mean +- 1.96 predictive sd, for both
arms; the tabular-peers report's ``SVBNN`` coverage is the regressor's
``predict_prediction_interval``, from posterior draws), the added noise columns and the
real inputs kept, the range of ``q``, the rule's choices, RMSE, NLL and noise columns
kept, and median fit times.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from benchmarks.tabular_peers import (
    DATASETS,
    LEAD_FIELDS,
    NOISE_COLUMNS,
    REGRESSION_TABLES,
    Z95,
    best_peers,
    csv_text,
    evaluate,
    lead_parser,
    lead_provenance,
    lead_settings,
    peer_builders,
    regression_splits,
    rewrite_report,
    save_run,
)
from benchmarks.tabular_peers import (
    FIELDS as PEER_FIELDS,
)

# The linear mean stands alone where the network's training R^2 on its residuals is at most
# the regressor's CollapseWarning threshold, imported from its one definition.
from svbnn._estimator_tasks import _COLLAPSED_R2 as NETWORK_R2
from svbnn._linear_mean import cv_rmse, fit_linear_mean
from svbnn_experiments.files import atomic_write_text

ARMS = ("defaults", "linear mean", "library")
RULE = 1.0
"""The rule takes the linear mean where ``q`` (ARD's cross-validated RMSE over the
defaults' ``noise_std_``) is at most this."""
FIELDS = [
    *LEAD_FIELDS,
    "q",
    "cv_s",
    "network_dropped",
    "mean_function",
]


def sparse_linear_mean(X: NDArray[Any], y: NDArray[Any]) -> tuple[NDArray[np.intp], Any]:
    """The linear mean's inputs (the library's :func:`svbnn._linear_mean.fit_linear_mean`,
    the one definition of the screen) and ``ARDRegression`` fitted on them, whose
    ``predict(return_std=True)`` gives this arm's predictive sd (``None`` where no input
    passes). ``X`` ``(n, p)`` standardised, ``y`` ``(n,)``."""
    from sklearn.linear_model import ARDRegression

    cols = fit_linear_mean(X, y, None).index
    if cols.size == 0:
        return cols, None
    return cols, ARDRegression().fit(X[:, cols], y)


def _metrics(
    d: dict[str, Any], mean: NDArray[Any], sd: NDArray[Any], kept: NDArray[np.intp]
) -> dict[str, Any]:
    err = d["yte"] - mean
    p = d["p"]
    n_true = d["n_true"] if d["n_true"] is not None else p - NOISE_COLUMNS
    return dict(
        rmse=float(np.sqrt(np.mean(err**2))),
        nll=float(np.mean(0.5 * np.log(2 * np.pi * sd**2) + 0.5 * (err / sd) ** 2)),
        coverage=float(np.mean(np.abs(err) <= Z95 * sd)),
        noise_kept=int(np.sum(kept >= p - NOISE_COLUMNS)),
        true_kept=int(np.sum(kept < n_true)),
    )


def fit_split(d: dict[str, Any], seed: int, max_iter: Any = "auto") -> list[dict[str, Any]]:
    """Both arms on one split (``max_iter``: the regressor's, for smoke tests); a row each."""
    from sklearn.preprocessing import StandardScaler

    from svbnn import SVBNNRegressor

    scaler = StandardScaler().fit(d["Xtr"])
    X, Xt, y = scaler.transform(d["Xtr"]), scaler.transform(d["Xte"]), d["ytr"]
    rows = []
    with warnings.catch_warnings():
        # Both arms raise what the defaults raise; the tabular-peers report counts those.
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        est = SVBNNRegressor(random_state=seed, max_iter=max_iter, mean_function="zero").fit(X, y)
        fit_s = time.perf_counter() - t
        mean, sd = est.predict(Xt, return_std=True)
        t = time.perf_counter()
        # ARD's 5-fold CV RMSE: the library's definition (folds shuffled by the seed).
        q = cv_rmse(X, np.asarray(y, dtype=np.float64), None, seed) / est.noise_std_
        cv_s = time.perf_counter() - t
        kept = np.asarray(est.selected_features_)
        first = dict(arm=ARMS[0], fit_s=fit_s, q=q, cv_s=cv_s, network_dropped=False)
        rows.append({**first, **_metrics(d, mean, sd, kept)})

        t = time.perf_counter()
        cols, lin = sparse_linear_mean(X, y)
        base, base_t, s = np.zeros(len(y)), np.zeros(len(Xt)), np.zeros(len(Xt))
        if lin is not None:
            base = lin.predict(X[:, cols])
            base_t, s = lin.predict(Xt[:, cols], return_std=True)
        net = SVBNNRegressor(random_state=seed, max_iter=max_iter, mean_function="zero").fit(
            X, y - base
        )
        fit_s = time.perf_counter() - t
        dropped = lin is not None and net.score(X, y - base) <= NETWORK_R2
        if dropped:
            mean, sd, kept = base_t, s, cols
        else:
            mean, sd = net.predict(Xt, return_std=True)
            epi = 0.0 if lin is None else np.maximum(s**2 - 1.0 / lin.alpha_, 0.0)
            mean, sd = base_t + mean, np.sqrt(sd**2 + epi)
            kept = np.union1d(cols, net.selected_features_)
        second = dict(arm=ARMS[1], fit_s=fit_s, q=q, cv_s=cv_s, network_dropped=dropped)
        rows.append({**second, **_metrics(d, mean, sd, kept)})

        # The library's own: mean_function="auto", its q its linear_mean_ratio_.
        t = time.perf_counter()
        lib = SVBNNRegressor(random_state=seed, max_iter=max_iter).fit(X, y)
        fit_s = time.perf_counter() - t
        mean, sd = lib.predict(Xt, return_std=True)
        third = dict(
            arm=ARMS[2],
            fit_s=fit_s,
            q=lib.linear_mean_ratio_,
            cv_s=0.0,
            network_dropped=False,
            mean_function=lib.mean_function_,
        )
        rows.append({**third, **_metrics(d, mean, sd, np.asarray(lib.selected_features_))})
    return rows


def _mixed(seed: int) -> tuple[NDArray[Any], NDArray[Any], int]:
    """8 linear effects (coefficients 0.3 to 1.5), ``sin(2 x8)`` and ``x9 x10``, noise sd
    0.7; 400 rows, 12 inputs, the first 11 real."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((400, 12))
    y = X[:, :8] @ np.linspace(0.3, 1.5, 8) + np.sin(2 * X[:, 8]) + X[:, 9] * X[:, 10]
    return X, y + 0.7 * rng.standard_normal(400), 11


def _generated() -> dict[str, Any]:
    from sklearn.datasets import make_friedman1, make_regression, make_sparse_uncorrelated

    return {
        "regression-20-of-303": lambda seed: (
            *make_regression(303, 20, n_informative=20, noise=50, random_state=seed),
            20,
        ),
        "sparse-uncorrelated-300": lambda seed: (
            *make_sparse_uncorrelated(300, 10, random_state=seed),
            4,
        ),
        "friedman1-400": lambda seed: (*make_friedman1(400, 10, noise=1.0, random_state=seed), 5),
        "mixed-400": _mixed,
    }


GENERATED = ("regression-20-of-303", "sparse-uncorrelated-300", "friedman1-400", "mixed-400")
"""The ``--generated`` tables (their generators in :func:`_generated`)."""


def generated_splits(
    names: list[str], max_splits: int | None
) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """``(name, split, data)`` of ``--generated`` tables: split ``s`` draws the table with
    seed ``100 + s``, appends ``NOISE_COLUMNS`` N(0, 1) columns and splits 75/25, both
    from ``numpy.random.default_rng(s)``; 3 splits a table, at most ``max_splits``."""
    makers = _generated()
    for name in names:
        if name not in makers:
            raise SystemExit(f"--datasets: {name} is not a generated table ({GENERATED})")
        for split in range(3 if max_splits is None else min(3, max_splits)):
            X, y, n_true = makers[name](100 + split)
            rng = np.random.default_rng(split)
            X = np.hstack([X, rng.standard_normal((len(X), NOISE_COLUMNS))])
            rows = rng.permutation(len(X))
            cut = int(0.75 * len(X))
            tr, te = rows[:cut], rows[cut:]
            yield (
                name,
                split,
                dict(
                    Xtr=X[tr],
                    ytr=y[tr],
                    Xte=X[te],
                    yte=y[te],
                    kind="regression",
                    n_true=n_true,
                    p=X.shape[1],
                ),
            )


def peer_rows(d: dict[str, Any], seed: int, smoke: bool = False) -> list[dict[str, Any]]:
    """The tabular-peers benchmark's regression peers on one split (its metrics' rows;
    ``smoke``: their tiny budgets)."""
    return [
        evaluate(d, method, build(d["p"]), seed)
        for method, build in peer_builders("regression", seed, 0, smoke).items()
    ]


def report(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    peers = settings.get("peers")
    lines = [
        "# The regressor on the residuals of a sparse linear mean (a lead)",
        "",
        lead_provenance(settings) + ". The protocol is in the docstring of "
        "`benchmarks/linear_mean.py`; both arms share each split's "
        f"rows and seed. Means over splits; the rule takes the linear mean where q <= {RULE:g}.",
        "",
        "| table (train rows) | splits | RMSE defaults | RMSE linear mean | ratio | "
        "NLL (defaults / linear mean) | 95% coverage (defaults / linear mean) | "
        "noise kept (defaults / linear mean) | real inputs kept (defaults / linear mean) | "
        "linear mean alone | "
        "q (min-max) | rule: linear mean chosen, RMSE, NLL, noise kept | "
        "fit s, median (defaults / linear mean / rule) |"
        + (
            " RMSE x best peer (defaults / rule) | NLL - best peer (defaults / rule) |"
            if peers
            else ""
        ),
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|---|" if peers else ""),
    ]
    for name in dict.fromkeys(r["dataset"] for r in rows):
        by = {a: _arm(rows, name, a) for a in ARMS}
        if not (by[ARMS[0]] and by[ARMS[1]]) or len(by[ARMS[0]]) != len(by[ARMS[1]]):
            continue

        def mean(arm: str, key: str, by: dict[str, list[dict[str, Any]]] = by) -> float:
            return statistics.mean(float(r[key]) for r in by[arm])

        pairs = list(zip(by[ARMS[0]], by[ARMS[1]], strict=True))
        qs = [float(a["q"]) for a, _ in pairs]
        chosen = [b if float(a["q"]) <= RULE else a for a, b in pairs]
        rule_rmse = statistics.mean(float(r["rmse"]) for r in chosen)
        rule_nll = statistics.mean(float(r["nll"]) for r in chosen)
        rule_s = [
            float(a["fit_s"]) + float(a["cv_s"]) + (float(b["fit_s"]) * (float(a["q"]) <= RULE))
            for a, b in pairs
        ]
        n_lin = sum(float(a["q"]) <= RULE for a, _ in pairs)
        fit = [statistics.median(float(r["fit_s"]) for r in by[a]) for a in ARMS[:2]]
        ra, rb = mean(ARMS[0], "rmse"), mean(ARMS[1], "rmse")
        lines.append(
            f"| {name} ({settings['train_rows'].get(name, '')}) | {len(pairs)} | {ra:.4g} | "
            f"{rb:.4g} | {rb / ra:.3f} | {mean(ARMS[0], 'nll'):.3f} / {mean(ARMS[1], 'nll'):.3f} | "
            f"{mean(ARMS[0], 'coverage'):.3f} / {mean(ARMS[1], 'coverage'):.3f} | "
            f"{mean(ARMS[0], 'noise_kept'):.1f} / {mean(ARMS[1], 'noise_kept'):.1f} | "
            f"{mean(ARMS[0], 'true_kept'):.1f} / {mean(ARMS[1], 'true_kept'):.1f} | "
            f"{sum(str(b['network_dropped']) == 'True' for _, b in pairs)} of {len(pairs)} | "
            f"{min(qs):.2f}-{max(qs):.2f} | {n_lin} of {len(pairs)}, "
            f"{rule_rmse:.4g}, {rule_nll:.3f}, "
            f"{statistics.mean(int(r['noise_kept']) for r in chosen):.1f} | "
            f"{fit[0]:.1f} / {fit[1]:.1f} / {statistics.median(rule_s):.1f} |"
        )
        best = (
            best_peers(peers, name, {int(a["split"]) for a, _ in pairs}, ("rmse", "nll"))
            if peers
            else None
        )
        if peers:
            lines[-1] += (
                " | |"
                if best is None
                else f" {ra / best[0][1]:.3f} / {rule_rmse / best[0][1]:.3f} ({best[0][0]}) | "
                f"{mean(ARMS[0], 'nll') - best[1][1]:+.3f} / {rule_nll - best[1][1]:+.3f} "
                f"({best[1][0]}) |"
            )
    return "\n".join(lines) + "\n" + _library_table(rows, settings)


def _library_table(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    """The library's ``mean_function="auto"`` (arm ``library``) beside the lead's rule, on
    the tables that have its rows (runs before the arm existed have none)."""
    names = [n for n in dict.fromkeys(r["dataset"] for r in rows) if _arm(rows, n, ARMS[2])]
    if not names:
        return ""
    peers = settings.get("peers")
    lines = [
        "",
        'The library\'s `SVBNNRegressor(random_state=seed)` (`mean_function="auto"`; arm '
        "`library`, its q its `linear_mean_ratio_`), on the same splits:",
        "",
        "| table | splits | linear mean on | q (min-max) | RMSE | NLL | 95% coverage | "
        "noise / real inputs kept | fit s, median |"
        + (" RMSE x best peer | NLL - best peer |" if peers else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if peers else ""),
    ]
    for name in names:
        lib = _arm(rows, name, ARMS[2])
        qs = [float(r["q"]) for r in lib if r["q"] not in ("", None)]

        def mean(key: str, lib: list[dict[str, Any]] = lib) -> float:
            return statistics.mean(float(r[key]) for r in lib)

        line = (
            f"| {name} | {len(lib)} | "
            f"{sum(r['mean_function'] == 'linear' for r in lib)} of {len(lib)} | "
            + (f"{min(qs):.2f}-{max(qs):.2f}" if qs else "-")
            + f" | {mean('rmse'):.4g} | {mean('nll'):.3f} | {mean('coverage'):.3f} | "
            f"{mean('noise_kept'):.1f} / {mean('true_kept'):.1f} | "
            f"{statistics.median(float(r['fit_s']) for r in lib):.1f} |"
        )
        best = (
            best_peers(peers, name, {int(r["split"]) for r in lib}, ("rmse", "nll"))
            if peers
            else None
        )
        if peers:
            line += (
                " | |"
                if best is None
                else f" {mean('rmse') / best[0][1]:.3f} ({best[0][0]}) | "
                f"{mean('nll') - best[1][1]:+.3f} ({best[1][0]}) |"
            )
        lines.append(line)
    return "\n".join(lines) + "\n"


def _arm(rows: list[dict[str, Any]], name: str, arm: str) -> list[dict[str, Any]]:
    return sorted(
        (r for r in rows if r["dataset"] == name and r["arm"] == arm),
        key=lambda r: int(r["split"]),
    )


def main(argv: list[str] | None = None) -> None:
    import sys

    import torch

    ap = lead_parser(
        __doc__,
        dict(
            default=None,
            choices=DATASETS + GENERATED,
            help="default: every regression table, or with --generated every generated one",
        ),
    )
    ap.add_argument(
        "--max-iter", type=int, default=None, help="the regressor's; the peers' tiny budgets"
    )
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--peers", type=Path, default=None, help="tabular-peers results.csv")
    ap.add_argument("--generated", action="store_true", help="the GENERATED tables, with peers")
    args = ap.parse_args(argv)
    if args.report_only:
        rewrite_report(args.out, args.peers, report)
        return
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = lead_settings("benchmarks.linear_mean", argv or sys.argv[1:])
    settings["peers"] = None if args.peers is None else str(args.peers)
    if args.generated:
        settings["peers"] = str(args.out / "peers.csv")
    splits = (
        generated_splits(args.datasets or list(GENERATED), args.max_splits)
        if args.generated
        else regression_splits(args.datasets or list(REGRESSION_TABLES), args.max_splits)
    )
    rows: list[dict[str, Any]] = []
    peers: list[dict[str, Any]] = []
    for name, split, d in splits:
        settings["train_rows"][name] = len(d["ytr"])
        if args.generated:
            peers.extend(
                dict(dataset=name, kind="regression", split=split, **r)
                for r in peer_rows(d, 1000 * split + 7, smoke=args.max_iter is not None)
            )
            atomic_write_text(args.out / "peers.csv", csv_text(PEER_FIELDS, peers))
        got = fit_split(d, 1000 * split + 7, args.max_iter or "auto")
        rows.extend(dict(dataset=name, split=split, **r) for r in got)
        print(
            f"{name} split {split}: RMSE {got[0]['rmse']:.4g} / {got[1]['rmse']:.4g} / "
            f"{got[2]['rmse']:.4g}, q {got[0]['q']:.3f}",
            flush=True,
        )
        save_run(args.out, FIELDS, rows, settings, report)


if __name__ == "__main__":
    main()
