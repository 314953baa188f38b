"""An ensemble of the regressor's default fits from other seeds, measured as a lead (not a
library feature).

Run ``python -m benchmarks.seed_ensemble --out docs/results/seed-ensemble [--datasets ...]
[--members 2] [--max-splits K] [--rows N] [--max-iter E]`` (UCI data via ``SVBNN_DATA``; one
thread; ``--rows N``: N rows of each table, drawn for each split as ``tabular_peers
--rows``; ``--max-iter E``: every member's ``max_iter``, E epochs, instead of ``"auto"``).

Why: on the benchmark's regression tables one default fit's test error moves by several
per cent with its seed (Boston housing, 10 splits: mean RMSE 3.61 with one seed, 3.79
with another), the variance that an ensemble of networks averages away.

What: on the tables and splits of :mod:`benchmarks.tabular_peers` (10 added noise
columns, random 75/25 splits, a ``StandardScaler`` in the pipeline), ``--members`` fits
of ``SVBNNRegressor(random_state=seed)`` on the same rows, member ``k`` at seed
``1000 * split + 7 + k`` (member 0 is the benchmark's ``SVBNN`` row's fit), and their
equal-weight mixture: its mean is the members' mean prediction, its density the mean
of their Gaussian predictive densities (the NLL's), and its 95% interval runs from the
2.5% to the 97.5% quantile of that mixture (a member's: its mean +- 1.96 predictive sd).
Rows of ``results.csv``: each member (``arm`` ``member k``) and the mixture (``arm``
``ensemble``, ``fit_s`` the members' total, ``noise_kept`` / ``true_kept`` the union of
their ``selected_features_``).

Reported per table, means over splits: the members' mean test RMSE and the ensemble's,
their ratio and on how many splits the ensemble's RMSE is below the members' mean; the
NLL and 95% coverage of both; the noise columns kept; and the median fit time of one
member and of all of them.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from scipy.optimize import brentq
from scipy.stats import norm

from benchmarks.tabular_peers import (
    DATASETS,
    LEAD_FIELDS,
    NOISE_COLUMNS,
    REGRESSION_TABLES,
    SIZES,
    Z95,
    lead_parser,
    lead_provenance,
    lead_settings,
    regression_splits,
    save_run,
)

# The regression tables of fewer than 1,600 rows (at most 1,199 training rows).
DEFAULT_SETS = tuple(n for n in REGRESSION_TABLES if SIZES[n] < 1600)
FIELDS = LEAD_FIELDS
ENSEMBLE = "ensemble"


def _mixture_interval(mean: Any, sd: Any, level: float = 0.95) -> tuple[Any, Any]:
    """Per row, the central ``level`` interval of the equal-weight mixture of the Gaussians
    ``N(mean[k], sd[k]^2)`` (``mean``, ``sd``: ``(K, n)``)."""
    lo, hi = np.empty(mean.shape[1]), np.empty(mean.shape[1])
    for i in range(mean.shape[1]):
        m, s = mean[:, i], sd[:, i]

        def cdf(x: float, q: float, m: Any = m, s: Any = s) -> float:
            return float(np.mean(norm.cdf((x - m) / s))) - q

        a, b = float((m - 10 * s).min()), float((m + 10 * s).max())
        lo[i] = brentq(cdf, a, b, args=((1 - level) / 2,))
        hi[i] = brentq(cdf, a, b, args=((1 + level) / 2,))
    return lo, hi


def _kept(selected: set[int], p: int, n_true: int) -> dict[str, int]:
    return dict(
        noise_kept=sum(j >= p - NOISE_COLUMNS for j in selected),
        true_kept=sum(j < n_true for j in selected),
    )


def fit_split(
    d: dict[str, Any], split: int, members: int, max_iter: int | str = "auto"
) -> list[dict[str, Any]]:
    """The members' and the ensemble's rows of one split (``max_iter``: every member's)."""
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from svbnn import SVBNNRegressor

    y = d["yte"]
    p = d["p"]
    n_true = d["n_true"] if d["n_true"] is not None else p - NOISE_COLUMNS
    means, sds, rows, union = [], [], [], set()
    for k in range(members):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            t = time.perf_counter()
            pipe = make_pipeline(
                StandardScaler(),
                SVBNNRegressor(random_state=1000 * split + 7 + k, max_iter=max_iter),
            ).fit(d["Xtr"], d["ytr"])
            fit_s = time.perf_counter() - t
        est = pipe[-1]
        mean, sd = est.predict(pipe[:-1].transform(d["Xte"]), return_std=True)
        selected = {int(j) for j in est.selected_features_}
        union |= selected
        means.append(mean)
        sds.append(sd)
        rows.append(
            dict(
                arm=f"member {k}",
                rmse=float(np.sqrt(np.mean((mean - y) ** 2))),
                nll=float(-np.mean(norm.logpdf(y, mean, sd))),
                coverage=float(np.mean(np.abs(y - mean) <= Z95 * sd)),
                fit_s=fit_s,
                **_kept(selected, p, n_true),
            )
        )
    M, S = np.array(means), np.array(sds)
    density = np.mean(norm.pdf(y, M, S), axis=0)
    lo, hi = _mixture_interval(M, S)
    rows.append(
        dict(
            arm=ENSEMBLE,
            rmse=float(np.sqrt(np.mean((M.mean(axis=0) - y) ** 2))),
            nll=float(-np.mean(np.log(density))),
            coverage=float(np.mean((lo <= y) & (y <= hi))),
            fit_s=sum(r["fit_s"] for r in rows),
            **_kept(union, p, n_true),
        )
    )
    return rows


def report(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    lines = [
        "# An ensemble of the regressor's default fits from other seeds (a lead)",
        "",
        lead_provenance(settings)
        + ". The protocol is in the docstring of `benchmarks/seed_ensemble.py`. Means over splits; "
        "`members` is the mean over the members.",
        "",
        "| table (train rows) | splits | RMSE members | RMSE ensemble | ratio | "
        "ensemble lower | NLL (members / ensemble) | 95% coverage (members / ensemble) | "
        "noise kept (members / ensemble) | fit s (median: one member / all) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == name]
        splits = sorted({int(r["split"]) for r in mine})
        by_split = {s: [r for r in mine if int(r["split"]) == s] for s in splits}
        if not all(any(r["arm"] == ENSEMBLE for r in v) for v in by_split.values()):
            continue
        members = [r for r in mine if r["arm"] != ENSEMBLE]
        ensemble = [r for r in mine if r["arm"] == ENSEMBLE]

        def mean(rs: list[dict[str, Any]], key: str) -> float:
            return statistics.mean(float(r[key]) for r in rs)

        member_rmse = [
            mean([r for r in v if r["arm"] != ENSEMBLE], "rmse") for v in by_split.values()
        ]
        ens_rmse = [float(r["rmse"]) for r in ensemble]
        lower = sum(e < m for e, m in zip(ens_rmse, member_rmse, strict=True))
        a, b = statistics.mean(member_rmse), statistics.mean(ens_rmse)
        n_train = settings["train_rows"].get(name, "")
        lines.append(
            f"| {name} ({n_train}) | {len(splits)} | {a:.4g} | {b:.4g} | {b / a:.3f} | "
            f"{lower} of {len(splits)} | {mean(members, 'nll'):.3f} / "
            f"{mean(ensemble, 'nll'):.3f} | {mean(members, 'coverage'):.3f} / "
            f"{mean(ensemble, 'coverage'):.3f} | {mean(members, 'noise_kept'):.1f} / "
            f"{mean(ensemble, 'noise_kept'):.1f} | "
            f"{statistics.median(float(r['fit_s']) for r in members):.1f} / "
            f"{statistics.median(float(r['fit_s']) for r in ensemble):.1f} |"
        )
    return "\n".join(lines) + "\n"


def _splits(ap: Any, args: Any) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """:func:`regression_splits` of the command line; a table shorter than ``--rows`` is
    a usage error (one line, status 2)."""
    try:
        yield from regression_splits(args.datasets, args.max_splits, args.rows)
    except ValueError as err:
        ap.error(str(err))


def main(argv: list[str] | None = None) -> None:
    import sys

    import torch

    ap = lead_parser(__doc__, dict(default=list(DEFAULT_SETS), choices=DATASETS))
    ap.add_argument("--members", type=int, default=2)
    ap.add_argument(
        "--rows", type=int, default=None, metavar="N", help="N rows a table, as tabular_peers"
    )
    ap.add_argument(
        "--max-iter",
        type=int,
        default=None,
        metavar="E",
        help="every member's max_iter in epochs (on 82 rows, a step an epoch, 1000 is half "
        "the default's 2,000 steps)",
    )
    args = ap.parse_args(argv)
    if args.members < 2:
        ap.error("--members must be at least 2")
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = lead_settings("benchmarks.seed_ensemble", argv or sys.argv[1:])
    max_iter = "auto" if args.max_iter is None else args.max_iter
    rows: list[dict[str, Any]] = []
    for name, split, d in _splits(ap, args):
        settings["train_rows"][name] = len(d["ytr"])
        for r in fit_split(d, split, args.members, max_iter):
            rows.append(dict(dataset=name, split=split, **r))
        print(f"{name} split {split}: ensemble RMSE {rows[-1]['rmse']:.4g}", flush=True)
        save_run(args.out, FIELDS, rows, settings, report)


if __name__ == "__main__":
    main()
