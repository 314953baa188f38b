"""The estimators' defaults on small data sets shipped with scikit-learn, against a
tempered posterior (``kl_weight=0.2``), the empirical-Bayes prior (``prior_inclusion="eb"``),
for the regressor its previous training (the Gumbel sampler at learning rate 0.01) and a
linear model, and (``--climb``) how training moves the exact objective there.

Run ``python -m benchmarks.small_data [--seeds 0 1] [--data ...] [--max-iter auto]
[--train-rows N] [--noise-columns K] [--climb STEPS]``. Data (no download): wine (178 x
13, 3 classes), breast cancer (569 x 30, 2 classes), digits (1,797 x 64, 10 classes), iris
(150 x 4, 3 classes; not among the data the defaults were chosen on) and diabetes (442 x
10, regression); ``--noise-columns K`` appends K N(0, 1) columns drawn by the seed; each
split 75/25 by the seed (stratified for the classifiers); ``--train-rows N`` keeps N rows
of the training part, drawn by the seed (the test part stays whole); inputs standardised
on the training rows. Printed per data set, seed and setting: the held-out score
(accuracy; for diabetes the RMSE in sd of the test responses), a classifier's test log
loss, inputs selected, whether the fit raised a ``CollapseWarning``, and the fit time;
then each setting's means over the seeds.

``--climb STEPS`` (seed 0 of ``--climb-data``, a classification set, default wine): fits
``kl_weight=0.2``, then trains copies of that
network on the exact objective (``kl_weight=1``, the defaults' batch) for ``STEPS`` more
steps each (:data:`CLIMB_VARIANTS`: all parameters; the gate logits or the means frozen;
the inverse-CDF sampler at the defaults' learning rate and at a tenth of it), printing
the per-datum negative ELBO (4 x 50 posterior draws on all training rows, float64) every
quarter, next to the value of the defaults' fit. It shows whether the defaults' collapse
is the objective's optimum or where the optimiser ends, and which updates take it there.
"""

from __future__ import annotations

import argparse
import copy
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, load_iris, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, RidgeCV
from sklearn.metrics import log_loss
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from svbnn import SVBNNClassifier, SVBNNRegressor
from svbnn.estimators import CollapseWarning
from svbnn.nn.base import Sampler, variational_layers
from svbnn.objectives import CategoricalLikelihood
from svbnn.training import negative_elbo, train

LOADERS: dict[str, tuple[Callable[..., Any], bool]] = {
    "wine": (load_wine, True),
    "breast cancer": (load_breast_cancer, True),
    "digits": (load_digits, True),
    "iris": (load_iris, True),
    "diabetes": (load_diabetes, False),
}
SETTINGS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "kl_weight=0.2": {"kl_weight": 0.2},
    "prior_inclusion='eb'": {"prior_inclusion": "eb"},
    "sampler='gumbel'": {"sampler": "gumbel", "learning_rate_init": 0.01},
}
# The classifier's defaults are this setting already.
REGRESSION_ONLY = {"sampler='gumbel'"}


def split(
    name: str, seed: int, train_rows: int | None = None, noise_columns: int = 0
) -> tuple[np.ndarray, ...]:
    """Standardised ``X_train, X_test, y_train, y_test`` of ``name`` for ``seed``
    (``train_rows``: that many of the training rows, drawn by the seed; ``noise_columns``
    N(0, 1) columns appended, drawn by the seed)."""
    load, clf = LOADERS[name]
    X, y = load(return_X_y=True)
    if noise_columns:
        noise = np.random.default_rng([seed, noise_columns]).standard_normal(
            (len(X), noise_columns)
        )
        X = np.hstack([X, noise])
    Xtr, Xte, ytr, yte = train_test_split(
        X, y, test_size=0.25, random_state=seed, stratify=y if clf else None
    )
    if train_rows is not None:
        if not 2 <= train_rows <= len(ytr):
            raise ValueError(f"--train-rows must lie in [2, {len(ytr)}] for {name}")
        keep = np.random.default_rng(seed).permutation(len(ytr))[:train_rows]
        Xtr, ytr = Xtr[keep], ytr[keep]
    scaler = StandardScaler().fit(Xtr)
    return scaler.transform(Xtr), scaler.transform(Xte), ytr, yte


def fit_one(
    name: str,
    seed: int,
    setting: str,
    max_iter: int | str,
    train_rows: int | None = None,
    noise_columns: int = 0,
) -> dict[str, Any]:
    """One fit: score, a classifier's log loss, inputs selected, collapse warning, seconds."""
    Xtr, Xte, ytr, yte = split(name, seed, train_rows, noise_columns)
    clf = LOADERS[name][1]
    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if setting == "linear":
            model: Any = LogisticRegression(max_iter=5000) if clf else RidgeCV()
        else:
            est = SVBNNClassifier if clf else SVBNNRegressor
            model = est(random_state=seed, max_iter=max_iter, **SETTINGS[setting])
        model.fit(Xtr, ytr)
    secs = time.perf_counter() - t0
    pred = model.predict(Xte)
    loss = None
    if clf:
        score = float(np.mean(pred == yte))
        loss = float(log_loss(yte, model.predict_proba(Xte), labels=np.unique(ytr)))
    else:
        score = float(np.sqrt(np.mean((pred - yte) ** 2)) / np.std(yte))
    selected = getattr(model, "selected_features_", None)
    return {
        "data": name,
        "seed": seed,
        "setting": setting,
        "score": score,
        "log_loss": loss,
        "selected": f"{len(selected)}/{Xtr.shape[1]}" if selected is not None else "-",
        "collapse": any(issubclass(w.category, CollapseWarning) for w in caught),
        "unconverged": any(issubclass(w.category, ConvergenceWarning) for w in caught),
        "seconds": secs,
    }


# What the continuation on the exact objective trains: every parameter; all but the gate
# logits (alpha); all but the means (mu); every parameter with the inverse-CDF sampler, at
# the defaults' learning rate and at a tenth of it.
CLIMB_VARIANTS: dict[str, tuple[str | None, Sampler, float]] = {
    "exact": (None, Sampler.GUMBEL, 1.0),
    "exact, alpha frozen": ("alpha", Sampler.GUMBEL, 1.0),
    "exact, mu frozen": ("mu", Sampler.GUMBEL, 1.0),
    "exact, inverse-CDF sampler": (None, Sampler.INVERSE_CDF, 1.0),
    "exact, inverse-CDF sampler, lr / 10": (None, Sampler.INVERSE_CDF, 0.1),
}


def climb(
    steps: int, max_iter: int | str, data: str = "wine"
) -> list[tuple[str, float, float, float]]:
    """``data`` (a classification set), seed 0: ``(state, negative ELBO, its nll, its
    KL)`` per datum, for the
    defaults' fit, the tempered fit and, for each of :data:`CLIMB_VARIANTS`, a copy of the
    tempered network after each quarter of ``steps`` more steps on the exact objective."""
    Xtr, _, ytr, _ = split(data, 0)
    X = torch.tensor(Xtr, dtype=torch.float32)
    y = torch.tensor(ytr)
    lik = CategoricalLikelihood()

    def objective(module: torch.nn.Module) -> tuple[float, float, float]:
        module.double()
        with torch.no_grad():
            parts = [
                [float(t) for t in negative_elbo(module, lik, X.double(), y, len(y), n_mc=50)]
                for _ in range(4)
            ]
        module.float()
        loss, nll, kl = np.mean(parts, axis=0)
        return float(loss), float(nll), float(kl)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        default = SVBNNClassifier(random_state=0, max_iter=max_iter).fit(Xtr, ytr)
        tempered = SVBNNClassifier(random_state=0, max_iter=max_iter, kl_weight=0.2)
        tempered.fit(Xtr, ytr)
    rows = [("defaults' fit", *objective(default.module_))]
    rows.append(("kl_weight=0.2 fit", *objective(tempered.module_)))
    per_epoch = -(-len(y) // tempered.batch_size)
    quarter = max(1, steps // 4 // per_epoch)
    for variant, (frozen, sampler, lr_factor) in CLIMB_VARIANTS.items():
        module = copy.deepcopy(tempered.module_)
        for name, p in module.named_parameters():
            p.requires_grad_(name != frozen)
        for layer in variational_layers(module):
            layer.sampler = sampler
        for k in range(1, 5):
            train(
                module,
                X,
                y,
                lik,
                epochs=quarter,
                batch_size=tempered.batch_size,
                lr=tempered.learning_rate_init * lr_factor,
                generator=torch.Generator().manual_seed(k),
            )
            rows.append((f"+{k * quarter * per_epoch} steps, {variant}", *objective(module)))
    return rows


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--data", nargs="+", choices=list(LOADERS), default=list(LOADERS))
    ap.add_argument("--max-iter", default="auto", help="the estimators' max_iter (default auto)")
    ap.add_argument("--train-rows", type=int, default=None, metavar="N")
    ap.add_argument("--noise-columns", type=int, default=0, metavar="K")
    ap.add_argument("--climb", type=int, default=0, metavar="STEPS")
    ap.add_argument(
        "--climb-data", choices=[k for k, (_, clf) in LOADERS.items() if clf], default="wine"
    )
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    max_iter = args.max_iter if args.max_iter == "auto" else int(args.max_iter)
    if args.noise_columns < 0:
        ap.error(f"--noise-columns must be >= 0, got {args.noise_columns}")
    rows = []
    print(
        "| data | seed | setting | score | log loss | inputs selected | collapse | converged | s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.data:
        for seed in args.seeds:
            clf = LOADERS[name][1]
            for setting in [*SETTINGS, "linear"]:
                if clf and setting in REGRESSION_ONLY:
                    continue
                r = fit_one(name, seed, setting, max_iter, args.train_rows, args.noise_columns)
                rows.append(r)
                conv = "-" if setting == "linear" else ("no" if r["unconverged"] else "yes")
                loss = "-" if r["log_loss"] is None else f"{r['log_loss']:.3f}"
                print(
                    f"| {name} | {seed} | {setting} | {r['score']:.3f} | {loss} | "
                    f"{r['selected']} | {'yes' if r['collapse'] else 'no'} | {conv} | "
                    f"{r['seconds']:.1f} |",
                    flush=True,
                )
    print("\nscore: accuracy; diabetes: test RMSE / sd of the test responses (lower is better)")
    print("\n| data | setting | seeds | mean score | mean log loss | collapsed |")
    print("|---|---|---|---|---|---|")
    for name in args.data:
        for setting in dict.fromkeys(r["setting"] for r in rows if r["data"] == name):
            mine = [r for r in rows if r["data"] == name and r["setting"] == setting]
            losses = [r["log_loss"] for r in mine if r["log_loss"] is not None]
            loss = f"{np.mean(losses):.3f}" if losses else "-"
            print(
                f"| {name} | {setting} | {len(mine)} | {np.mean([r['score'] for r in mine]):.3f} "
                f"| {loss} | {sum(r['collapse'] for r in mine)} |"
            )
    if args.climb:
        print(f"\n| {args.climb_data}, seed 0 | negative ELBO / n | nll / n | KL / n |")
        print("|---|---|---|---|")
        for state, loss, nll, kl in climb(args.climb, max_iter, args.climb_data):
            print(f"| {state} | {loss:.4f} | {nll:.4f} | {kl:.4f} |", flush=True)
    return rows


if __name__ == "__main__":
    main()
