"""The classifier's probabilities with a temperature fitted on held-out rows, measured as a
lead (not in the library): ``SVBNNClassifier``'s defaults against the same fit's
predictive probabilities with every posterior draw's logits divided by ``T``.

Run ``python -m benchmarks.temperature --out DIR [--datasets ...] [--max-splits K]
[--share S] [--peers CSV]`` (one thread), or ``--generated [--problems K ...]`` for the
generated problems below instead of the tables; ``--report-only`` rewrites ``report.md``
from the saved ``results.csv`` and ``settings.json`` (runs of several processes merged
into one ``results.csv``).

Why: on the tabular-peers benchmark the defaults' ECE on the generated 10-class table is
0.129 against the target 0.093, and wine's log loss is 0.031 above logistic regression's.
The 10-class fit is overconfident on new rows but underconfident on its training rows, so
only held-out rows can say which way to correct.

What: on the classification tables and splits of :mod:`benchmarks.tabular_peers` (10
added noise columns, random 75/25 splits, ``StandardScaler``-ed inputs, seeds ``1000 *
split + 7``):

* ``defaults``: ``SVBNNClassifier(random_state=seed)``, its ``predict_proba`` (100 draws);
* ``temperature``: a second fit, ``SVBNNClassifier(random_state=seed + 1)`` on 80% of the
  training rows (stratified) over ``--share`` of the first fit's epoch budget (as the
  regressor's noise run on small tables); ``T`` minimises the log loss of its predictive
  probabilities, with every draw's logits divided by ``T``, on the other 20% (a log grid
  from 0.1 to 10 of ``GRID`` points); the test probabilities are the first fit's draws
  (the same draws ``predict_proba`` makes) with their logits divided by ``T``. Its fit
  time is both fits'.

* ``oracle`` (not a method: the bound on what any one temperature can do): the ``T`` of
  the same grid that minimises the log loss of the first fit's probabilities on the test
  rows themselves.

``--generated``: twelve ``make_classification`` problems (``GENERATED``: 200, 400 or 800
training rows, 2, 3 or 5 classes, ``class_sep`` 0.7 to 2; 10 features of which 5
informative, ``n_clusters_per_class=1``, scikit-learn's default 1% flipped labels, 10
added N(0, 1) noise columns), 1,000 test rows each, seed ``k`` for problem ``k``: a check
outside the benchmark's tables of whether the held-out temperature carries over.

Reported per table, means over splits: accuracy, log loss, ECE (15 bins), ``T``'s range,
fit times (median); with ``--peers CSV`` (the tabular-peers benchmark's ``results.csv``),
each arm's log loss above the best peer's and its ECE against the benchmark's bound
``max(0.03, best peer's + 0.01)``, the peers' means taken over the same splits.
"""

from __future__ import annotations

import statistics
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from benchmarks.tabular_peers import (
    CLASSIFICATION_TABLES,
    NOISE_COLUMNS,
    best_peers,
    ece,
    lead_parser,
    lead_provenance,
    lead_settings,
    log_loss,
    make_split,
    n_splits,
    rewrite_report,
    save_run,
)
from svbnn import SVBNNClassifier
from svbnn.prediction import sample_outputs

ARMS = ("defaults", "temperature", "oracle")
GENERATED = [  # (training rows, classes, class_sep) of generated problem k
    ((200, 400, 800)[k % 3], (2, 3, 5)[(k // 3) % 3], (0.7, 1.0, 1.5, 2.0)[k % 4])
    for k in range(12)
]
SHARE = 0.3
GRID = 201
FIELDS = [
    "dataset",
    "split",
    "arm",
    "accuracy",
    "log_loss",
    "ece",
    "noise_kept",
    "true_kept",
    "temperature",
    "fit_s",
]


def logit_draws(est: SVBNNClassifier, X: NDArray[Any]) -> torch.Tensor:
    """The fitted classifier's ``n_samples_predict`` draws of the logits, ``(H, n, C)``: the
    draws ``predict_proba`` averages the softmax of (its network and generator)."""
    Xt = est._validate_X(X)
    draws = sample_outputs(
        est._module64(), Xt, est._draws(None), generator=est._predict_generator()
    )
    return draws.double().cpu()


def tempered(logits: torch.Tensor, T: float) -> NDArray[np.float64]:
    """The average over draws of ``softmax(logits / T)``, ``(n, C)``."""
    out: NDArray[np.float64] = torch.softmax(logits / T, dim=-1).mean(0).numpy()
    return out


def fit_temperature(logits: torch.Tensor, y: NDArray[np.intp]) -> float:
    """The ``T`` of the grid (log-spaced, 0.1 to 10) of least held-out log loss."""
    grid = np.exp(np.linspace(np.log(0.1), np.log(10.0), GRID))
    losses = [log_loss(tempered(logits, float(t)), y) for t in grid]
    return float(grid[int(np.argmin(losses))])


def generated_split(k: int) -> dict[str, Any]:
    """Generated problem ``k`` (``GENERATED[k]``) as :func:`make_split` gives a table."""
    from sklearn.datasets import make_classification

    n, classes, sep = GENERATED[k]
    X, y = make_classification(
        n + 1000,
        n_features=10,
        n_informative=5,
        n_redundant=0,
        n_classes=classes,
        n_clusters_per_class=1,
        class_sep=sep,
        random_state=k,
    )
    X = np.hstack([X, np.random.default_rng(k).standard_normal((len(X), NOISE_COLUMNS))])
    # The informative features sit among the first 10 (shuffled): kept counts are of all 10.
    return dict(Xtr=X[:n], ytr=y[:n], Xte=X[n:], yte=y[n:], n_true=None, p=X.shape[1])


def generated_name(k: int) -> str:
    n, classes, sep = GENERATED[k]
    return f"generated-{k} ({classes} classes, sep {sep})"


def fit_split(
    d: dict[str, Any], seed: int, share: float, max_iter: Any = "auto"
) -> list[dict[str, Any]]:
    """The arms on one split: their rows of metrics."""
    scaler = StandardScaler().fit(d["Xtr"])
    Xtr, Xte = scaler.transform(d["Xtr"]), scaler.transform(d["Xte"])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the benchmark reports warnings; this lead does not
        t0 = time.perf_counter()
        full = SVBNNClassifier(random_state=seed, max_iter=max_iter).fit(Xtr, d["ytr"])
        fit_s = time.perf_counter() - t0
        classes = full.classes_
        y = np.searchsorted(classes, d["ytr"])
        fit_rows, held = train_test_split(
            np.arange(len(y)), test_size=0.2, random_state=seed, stratify=y
        )
        budget = full._epoch_budget(len(y)) if max_iter == "auto" else int(max_iter)
        t0 = time.perf_counter()
        part = SVBNNClassifier(random_state=seed + 1, max_iter=max(1, round(share * budget)))
        part.fit(Xtr[fit_rows], d["ytr"][fit_rows])
        T = fit_temperature(logit_draws(part, Xtr[held]), y[held])
        part_s = time.perf_counter() - t0
    yte = np.searchsorted(classes, d["yte"])
    logits = logit_draws(full, Xte)
    sel = np.asarray(full.selected_features_)
    n_orig = d["p"] - NOISE_COLUMNS
    n_true = d["n_true"] if d["n_true"] is not None else n_orig
    kept = dict(noise_kept=int(np.sum(sel >= n_orig)), true_kept=int(np.sum(sel < n_true)))
    oracle = fit_temperature(logits, yte)
    rows = []
    for arm, t, s in (
        ("defaults", 1.0, fit_s),
        ("temperature", T, fit_s + part_s),
        ("oracle", oracle, fit_s),
    ):
        proba = tempered(logits, t)
        rows.append(
            dict(
                arm=arm,
                accuracy=float(np.mean(proba.argmax(1) == yte)),
                log_loss=log_loss(proba, yte),
                ece=ece(proba, yte),
                temperature=t,
                fit_s=s,
                **kept,
            )
        )
    return rows


def report(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    peers = settings.get("peers")
    # Runs saved before the oracle arm have the first two arms only.
    arms = [a for a in ARMS if any(r["arm"] == a for r in rows)]
    lines = [
        "# The classifier with a held-out temperature (a lead)",
        "",
        lead_provenance(settings) + "; second fit over "
        f"{settings['share']} of the budget. Means over splits (fit time: median). The "
        "protocol is in the docstring of `benchmarks/temperature.py`.",
        "",
        "| table (training rows) | splits | accuracy | log loss | ECE | T (min-max) | fit s |"
        + (" log loss - best peer | ECE against its bound |" if peers else ""),
        "|---|---|---|---|---|---|---|" + ("---|---|" if peers else ""),
    ]
    lower = 0
    names = list(dict.fromkeys(r["dataset"] for r in rows))
    for name in names:
        by = {a: [r for r in rows if r["dataset"] == name and r["arm"] == a] for a in arms}

        def cell(key: str, by: dict[str, list[dict[str, Any]]] = by) -> str:
            return " / ".join(f"{statistics.mean(float(r[key]) for r in by[a]):.4f}" for a in arms)

        def mean(arm: str, key: str, by: dict[str, list[dict[str, Any]]] = by) -> float:
            return statistics.mean(float(r[key]) for r in by[arm])

        lower += mean("temperature", "log_loss") < mean("defaults", "log_loss")
        ts = [float(r["temperature"]) for r in by["temperature"]]
        tcell = f"{min(ts):.2f}-{max(ts):.2f}"
        if "oracle" in by:
            to = [float(r["temperature"]) for r in by["oracle"]]
            tcell += f" (oracle {min(to):.2f}-{max(to):.2f})"
        line = (
            f"| {name} ({settings['train_rows'].get(name, '')}) | {len(by['defaults'])} | "
            f"{cell('accuracy')} | {cell('log_loss')} | {cell('ece')} | "
            f"{tcell} | "
            + " / ".join(
                f"{statistics.median(float(r['fit_s']) for r in by[a]):.2f}" for a in arms[:2]
            )
            + " |"
        )
        if peers:
            best = best_peers(
                peers, name, {int(r["split"]) for r in by["defaults"]}, ("log_loss", "ece")
            )
            if best is None:
                line += " | |"
            else:
                bound = max(0.03, best[1][1] + 0.01)
                line += (
                    " "
                    + " / ".join(f"{mean(a, 'log_loss') - best[0][1]:+.4f}" for a in arms)
                    + f" ({best[0][0]}) | "
                    + " / ".join(f"{mean(a, 'ece'):.4f}" for a in arms)
                    + f" <= {bound:.4f} |"
                )
        lines.append(line)
    lines += [
        "",
        "Each cell: "
        + " / ".join(arms)
        + " (fit s: defaults / temperature; T: the temperature arm's"
        + (", in brackets the oracle's" if "oracle" in arms else "")
        + "). The held-out temperature lowered the mean log loss on "
        f"{lower} of {len(names)}.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    ap = lead_parser(
        __doc__,
        dict(default=None, choices=CLASSIFICATION_TABLES, help="default: all five"),
    )
    ap.add_argument("--share", type=float, default=SHARE, help="the second fit's budget share")
    ap.add_argument("--max-iter", type=int, default=None, help="a fixed budget (smoke tests)")
    ap.add_argument("--peers", type=Path, default=None, help="tabular-peers results.csv")
    ap.add_argument("--report-only", action="store_true")
    ap.add_argument("--generated", action="store_true", help="the generated problems")
    ap.add_argument(
        "--problems",
        nargs="+",
        type=int,
        default=None,
        choices=range(len(GENERATED)),
        help="with --generated: these problems (default: all)",
    )
    args = ap.parse_args(argv)
    if args.generated and (args.datasets or args.peers):
        ap.error("--generated: no --datasets or --peers (the problems are not the tables)")
    if args.problems is not None and not args.generated:
        ap.error("--problems: only with --generated")
    if not 0.0 < args.share <= 1.0:
        ap.error(f"--share must be in (0, 1], got {args.share}")
    if args.report_only:
        rewrite_report(args.out, args.peers, report)
        return
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = lead_settings("benchmarks.temperature", argv if argv is not None else sys.argv[1:])
    settings["share"] = args.share
    settings["peers"] = None if args.peers is None else str(args.peers)
    rows: list[dict[str, Any]] = []
    for name, split, seed, d in _runs(args):
        settings["train_rows"][name] = len(d["ytr"])
        got = fit_split(d, seed, args.share, args.max_iter or "auto")
        rows.extend(dict(dataset=name, split=split, **r) for r in got)
        print(
            f"{name} split {split}: log loss "
            + " / ".join(f"{r['log_loss']:.4f}" for r in got)
            + ", ECE "
            + " / ".join(f"{r['ece']:.4f}" for r in got)
            + f", T {got[1]['temperature']:.3f} (oracle {got[2]['temperature']:.3f})",
            flush=True,
        )
        save_run(args.out, FIELDS, rows, settings, report)


def _runs(args: Any) -> Iterator[tuple[str, int, int, dict[str, Any]]]:
    """``(name, split, seed, data)`` of each run the command line asks for."""
    if args.generated:
        for k in args.problems if args.problems is not None else range(len(GENERATED)):
            yield generated_name(k), 0, k, generated_split(k)
        return
    for name in args.datasets or list(CLASSIFICATION_TABLES):
        splits = n_splits(name) if args.max_splits is None else min(n_splits(name), args.max_splits)
        for split in range(splits):
            yield name, split, 1000 * split + 7, make_split(name, split)


if __name__ == "__main__":
    main()
