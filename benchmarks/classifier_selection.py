"""The classifier's selecting fit against one fit, on generated problems of 300 to 2,250 rows.

Run ``python -m benchmarks.classifier_selection --out DIR [--problems K ...]
[--arm NAME=JSON ...]`` (one thread); ``--report-only`` rewrites ``report.md`` from the
saved ``results.csv`` and ``settings.json`` (runs of several processes merged into one
``results.csv``).

Why: on the tabular-peers benchmark's generated tables of 750 rows the classifier's one
fit at ``kl_weight=0.2`` kept 4.3 and 10 of 10 noise inputs; a first fit at KL weight
0.35 selected and a second at 0.2 on the selected inputs kept none on the 2-class table
and was more accurate on both, but on tables of 127 rows it pruned real inputs. Three
tables say little about where such a rule should start; these problems are many, of
known informative inputs, and outside that benchmark.

What: ``PROBLEMS``, 60 ``make_classification`` problems: 300, 500, 900, 1,500 or 2,250
training rows; 2, 3 or 5 classes; ``class_sep`` 0.7, 1.0 or 1.5; the binary ones also with classes
85/15; 10 features of which the first 5 informative (``shuffle=False``, the rows then
permuted), ``n_clusters_per_class=1``, scikit-learn's default 1% flipped labels, 10 added
N(0, 1) columns: 5 informative inputs and 15 noise ones. 2,000 test rows each; seed
``100 + k`` for problem ``k``. Inputs ``StandardScaler``-ed on the training rows.

Arms (``--arm NAME=JSON``, each an ``SVBNNClassifier(random_state=k, **JSON)``; the
first is the one the others are read against): ``one-fit``
(``refit_kl_weight=None``: one fit at ``kl_weight=0.2``) and ``select-refit``
(``kl_weight=0.35, refit_kl_weight=0.2``: the first fit selects at 0.35, the second fits
the selected inputs at 0.2), explicit settings that do not depend on the defaults; and
``LogisticRegression(max_iter=2000)`` as a reference.

Reported: per problem, each arm's accuracy, log loss, ECE (15 bins), informative and noise
inputs kept (``selected_features_``), fit time and ``collapsed_``; per training size, the
means, how many problems each arm's log loss is below / above the first arm's by more than
0.005, and the median fit time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from benchmarks.tabular_peers import (
    NOISE_COLUMNS,
    ece,
    lead_provenance,
    lead_settings,
    log_loss,
    parse_variants,
    rewrite_report,
    save_run,
)
from svbnn import SVBNNClassifier

INFORMATIVE = 5
FEATURES = 10
TEST_ROWS = 2000
PROBLEMS = [  # (training rows, classes, class_sep, majority share or None) of problem k
    (n, c, sep, w)
    for n, c, sep, w in itertools.product(
        (300, 500, 900, 1500, 2250), (2, 3, 5), (0.7, 1.0, 1.5), (None, 0.85)
    )
    if w is None or c == 2
]
ARMS: dict[str, dict[str, Any]] = {
    "one-fit": {"refit_kl_weight": None},
    "select-refit": {"kl_weight": 0.35, "refit_kl_weight": 0.2},
}
REFERENCE = "LogisticRegression"
SAME = 0.005  # log losses closer than this count as neither lower nor higher
FIELDS = [
    "dataset",
    "rows",
    "arm",
    "accuracy",
    "log_loss",
    "ece",
    "true_kept",
    "noise_kept",
    "fit_s",
    "collapsed",
]


def problem(k: int) -> dict[str, Any]:
    """Problem ``k``'s scaled training and test rows (``PROBLEMS[k]``)."""
    from sklearn.datasets import make_classification

    n, classes, sep, major = PROBLEMS[k]
    X, y = make_classification(
        n + TEST_ROWS,
        n_features=FEATURES,
        n_informative=INFORMATIVE,
        n_redundant=0,
        n_classes=classes,
        n_clusters_per_class=1,
        class_sep=sep,
        weights=None if major is None else [major],
        shuffle=False,
        random_state=100 + k,
    )
    rng = np.random.default_rng(100 + k)
    X = np.hstack([X, rng.standard_normal((len(X), NOISE_COLUMNS))])
    # shuffle=False orders the rows by class: permute them (the columns keep their order).
    perm = rng.permutation(len(X))
    X, y = X[perm], y[perm]
    scaler = StandardScaler().fit(X[:n])
    return dict(Xtr=scaler.transform(X[:n]), ytr=y[:n], Xte=scaler.transform(X[n:]), yte=y[n:])


def problem_name(k: int) -> str:
    n, classes, sep, major = PROBLEMS[k]
    share = "" if major is None else f", {round(100 * major)}/{round(100 * (1 - major))}"
    return f"p{k} ({classes} classes, sep {sep}{share})"


def fit_problem(
    d: dict[str, Any], seed: int, arms: dict[str, dict[str, Any]], max_iter: Any = "auto"
) -> list[dict[str, Any]]:
    """Each arm's row of metrics on one problem, and the reference's."""
    rows = []
    yte = d["yte"]
    for arm, kwargs in arms.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # collapsed_ records the one warning read here
            t0 = time.perf_counter()
            est = SVBNNClassifier(random_state=seed, max_iter=max_iter, **kwargs)
            est.fit(d["Xtr"], d["ytr"])
            fit_s = time.perf_counter() - t0
        proba: NDArray[np.float64] = est.predict_proba(d["Xte"]).astype(np.float64)
        sel = np.asarray(est.selected_features_)
        rows.append(
            dict(
                arm=arm,
                accuracy=float(np.mean(proba.argmax(1) == yte)),
                log_loss=log_loss(proba, yte),
                ece=ece(proba, yte),
                true_kept=int(np.sum(sel < INFORMATIVE)),
                noise_kept=int(np.sum(sel >= INFORMATIVE)),
                fit_s=fit_s,
                collapsed=bool(est.collapsed_),
            )
        )
    t0 = time.perf_counter()
    ref = LogisticRegression(max_iter=2000).fit(d["Xtr"], d["ytr"])
    fit_s = time.perf_counter() - t0
    proba = ref.predict_proba(d["Xte"]).astype(np.float64)
    rows.append(
        dict(
            arm=REFERENCE,
            accuracy=float(np.mean(proba.argmax(1) == yte)),
            log_loss=log_loss(proba, yte),
            ece=ece(proba, yte),
            true_kept="",
            noise_kept="",
            fit_s=fit_s,
            collapsed="",
        )
    )
    return rows


def report(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    arms = [*settings["arms"], REFERENCE]
    base = arms[0]
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    by = {(r["dataset"], r["arm"]): r for r in rows}

    def f(name: str, arm: str, key: str) -> float:
        return float(by[(name, arm)][key])

    lines = [
        "# The classifier's selecting fit against one fit, on generated problems",
        "",
        lead_provenance(settings)
        + ". Arms: "
        + "; ".join(f"`{a}` = `{json.dumps(settings['arms'][a])}`" for a in settings["arms"])
        + f"; `{REFERENCE}` for reference. The protocol is in the docstring of "
        "`benchmarks/classifier_selection.py`.",
        "",
        "## By training rows",
        "",
        "| training rows | problems | arm | accuracy | log loss | lower / higher log loss "
        f"than `{base}` | informative kept (of 5) | noise kept (of 15) | collapsed | fit s "
        "(median) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    sizes = sorted({int(r["rows"]) for r in rows})
    for n in sizes:
        group = [m for m in names if int(by[(m, base)]["rows"]) == n and (m, base) in by]
        for arm in arms:
            have = [m for m in group if (m, arm) in by]
            if not have:
                continue

            def mean(key: str, arm: str = arm, have: list[str] = have) -> str:
                return f"{statistics.mean(f(m, arm, key) for m in have):.3f}"

            if arm == REFERENCE:
                kept = ["", "", ""]
                versus = ""
            else:
                kept = [
                    mean("true_kept"),
                    mean("noise_kept"),
                    str(sum(by[(m, arm)]["collapsed"] in (True, "True") for m in have)),
                ]
                lower = sum(f(m, arm, "log_loss") < f(m, base, "log_loss") - SAME for m in have)
                higher = sum(f(m, arm, "log_loss") > f(m, base, "log_loss") + SAME for m in have)
                versus = "" if arm == base else f"{lower} / {higher}"
            fit = statistics.median(f(m, arm, "fit_s") for m in have)
            lines.append(
                f"| {n} | {len(have)} | {arm} | {mean('accuracy')} | {mean('log_loss')} | "
                f"{versus} | {' | '.join(kept)} | {fit:.2f} |"
            )
    lines += [
        "",
        f"Lower / higher: problems where the arm's log loss is below / above `{base}`'s by "
        f"more than {SAME}.",
        "",
        "## By problem",
        "",
        "| problem (training rows) | arm | accuracy | log loss | ECE | informative kept | "
        "noise kept | fit s | collapsed |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        for arm in arms:
            if (name, arm) not in by:
                continue
            r = by[(name, arm)]
            lines.append(
                f"| {name} ({r['rows']}) | {arm} | {float(r['accuracy']):.3f} | "
                f"{float(r['log_loss']):.4f} | {float(r['ece']):.4f} | {r['true_kept']} | "
                f"{r['noise_kept']} | {float(r['fit_s']):.2f} | {r['collapsed']} |"
            )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument(
        "--problems",
        nargs="+",
        type=int,
        default=None,
        choices=range(len(PROBLEMS)),
        metavar="K",
        help=f"these problems (0-{len(PROBLEMS) - 1}; default: all)",
    )
    ap.add_argument("--arm", action="append", default=None, metavar="NAME=JSON")
    ap.add_argument("--max-iter", type=int, default=None, help="a fixed budget (smoke tests)")
    ap.add_argument("--report-only", action="store_true")
    args = ap.parse_args(argv)
    try:
        arms = parse_variants(args.arm, ARMS)
    except ValueError as err:
        ap.error(f"--arm {err}")
    if args.report_only:
        rewrite_report(args.out, None, report)
        return
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = lead_settings(
        "benchmarks.classifier_selection", argv if argv is not None else sys.argv[1:]
    )
    settings["arms"] = arms
    rows: list[dict[str, Any]] = []
    for k in args.problems if args.problems is not None else range(len(PROBLEMS)):
        name, n = problem_name(k), PROBLEMS[k][0]
        settings["train_rows"][name] = n
        got = fit_problem(problem(k), k, arms, args.max_iter or "auto")
        rows.extend(dict(dataset=name, rows=n, **r) for r in got)
        print(
            f"{name} ({n} rows): log loss "
            + " / ".join(f"{r['arm']} {r['log_loss']:.4f}" for r in got),
            flush=True,
        )
        save_run(args.out, FIELDS, rows, settings, report)


if __name__ == "__main__":
    main()
