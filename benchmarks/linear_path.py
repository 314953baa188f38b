"""A gated linear path beside the network, measured as a lead (not a library feature).

Run ``python -m benchmarks.linear_path --out docs/results/linear-path [--datasets ...]
[--max-splits K]`` (UCI data via ``SVBNN_DATA``; one thread).

Why: the regressor reaches a linear effect of an input only through ReLU units, with at
least two included edges (into a unit and out of it), each paying the prior's price
under ``lambda_opt``; with many weak linear effects the fit keeps a few edges, prunes the
rest and attributes what they would explain to noise. A spike-and-slab linear layer
from the inputs straight to the output gives each input a one-edge path.

What: on the tables and splits of :mod:`benchmarks.tabular_peers` (10 added noise
columns, random 75/25 splits, ``StandardScaler``-ed inputs, a standardised target), one
training run of the regressor's default recipe, twice on the same seed and the same
rows, side by side:

* ``network``: a :class:`~svbnn.nn.SpikeSlabMLP` with one hidden layer of 50 units;
* ``network + linear``: the same network plus a :class:`~svbnn.nn.SpikeSlabLinear` from
  the inputs to the output, the two outputs summed (the same prior, ``lambda_opt`` of
  the network).

Recipe of both (the regressor's defaults): local reparameterisation, Adam at 0.025 on
the cosine schedule over half of :func:`svbnn.convergence.default_max_steps`, minibatches
of 128, the KL's weight rising over the first quarter of the steps, a learned noise
level, ``prior_variance=2``, initial ``phi`` 0.99; trained by
:func:`svbnn.training.train` on the eager kernels (svbnn's native loops run a chain of
layers, not a sum of two; each layer holds its own parameters, ``fused=False``), no
stopping rule, no held-out noise run. Predictions: the mean
of 30 exact posterior draws (:func:`svbnn.prediction.sample_outputs`), the predictive sd
from their spread and the learned noise level. Reported per table, means over splits:
the test RMSE of each, their ratio and the paired differences' sign count, the Gaussian
NLL per datum and the coverage of the 95% interval (mean +- 1.96 sd), the added noise
columns kept, and the mean RMSE of the arm whose training objective (the last epoch's
negative ELBO per datum) ended lower on each split: what a choice of the architecture
by the ELBO would give. Inputs kept (an input counts as kept when its
``feature_inclusion`` through the network or its linear gate's ``phi`` is above 0.5).
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any

import numpy as np

from benchmarks.tabular_peers import (
    DATASETS,
    LEAD_FIELDS,
    NOISE_COLUMNS,
    Z95,
    lead_parser,
    lead_provenance,
    lead_settings,
    regression_splits,
    save_run,
)

DEFAULT_SETS = (
    "regression-20",
    "yacht",
    "diabetes",
    "bostonHousing",
    "energy",
    "friedman1",
    "friedman3",
    "concrete",
    "wine-quality-red",
    "kin8nm",
    "power-plant",
    "naval-propulsion-plant",
    "protein-tertiary-structure",
)
ARMS = ("network", "network + linear")
FIELDS = [*LEAD_FIELDS, "final_loss"]


def _model(p: int, n: int, linear: bool, gen: Any) -> Any:
    import torch
    from torch import nn

    from svbnn import mlp_log_lambda_opt
    from svbnn.nn import SpikeSlabLinear, SpikeSlabMLP

    kw: dict[str, Any] = dict(
        prior_variance=2.0,
        log_prior_inclusion=mlp_log_lambda_opt(p, (50,), 1, n),
        sampler="local",
        init_inclusion=0.99,
        generator=gen,
    )

    class NetworkPlusLinear(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.network = SpikeSlabMLP(p, (50,), 1, fused=False, **kw)
            self.linear = SpikeSlabLinear(p, 1, **kw) if linear else None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.network(x)
            return out if self.linear is None else out + self.linear(x)

    return NetworkPlusLinear()


def fit_one(
    d: dict[str, Any], linear: bool, seed: int, max_epochs: int | None = None
) -> dict[str, Any]:
    """One run of one arm on one split (at most ``max_epochs``: smoke tests); RMSE in the
    target's units."""
    import torch
    from sklearn.preprocessing import StandardScaler

    from svbnn.convergence import default_max_steps
    from svbnn.objectives import GaussianLikelihood
    from svbnn.prediction import sample_outputs
    from svbnn.selection import feature_inclusion
    from svbnn.training import train

    # StandardScaler, as the estimators' pipelines: a constant column (naval propulsion
    # has two) is centred, not divided by 0.
    scaler = StandardScaler().fit(d["Xtr"])
    y = d["ytr"].astype(float)
    ym, ys = y.mean(), y.std()
    X = torch.tensor(scaler.transform(d["Xtr"]), dtype=torch.float32)
    Y = torch.tensor((y - ym) / ys, dtype=torch.float32)
    n, p = X.shape
    gen = torch.Generator().manual_seed(seed)
    model = _model(p, n, linear, gen)
    batch = min(128, n)
    n_batches = math.ceil(n / batch)
    epochs = max(round(default_max_steps(n, batch) * 0.5 / n_batches), 20)
    if max_epochs is not None:
        epochs = min(epochs, max_epochs)
    t = time.perf_counter()
    likelihood = GaussianLikelihood(learn_noise=True)
    history = train(
        model,
        X,
        Y,
        likelihood,
        epochs=epochs,
        batch_size=batch,
        lr=0.025,
        lr_schedule="cosine",
        generator=gen,
        kl_warmup=round(0.25 * epochs * n_batches),
        kernel_backend="eager",
        warn_divergence=False,
    )
    fit_s = time.perf_counter() - t
    Xt = torch.tensor(scaler.transform(d["Xte"]), dtype=torch.float32)
    pred_gen = torch.Generator().manual_seed(seed + 1)
    draws = sample_outputs(model, Xt, 30, generator=pred_gen).squeeze(-1).double().numpy()
    mean = draws.mean(0) * ys + ym
    # The predictive sd: the draws' spread and the learned noise, in the target's units.
    noise = float(torch.as_tensor(likelihood.noise_std).detach())
    sd = np.sqrt(draws.var(0) + noise**2) * ys
    err = d["yte"] - mean
    rmse = float(np.sqrt(np.mean(err**2)))
    nll = float(np.mean(0.5 * np.log(2 * np.pi * sd**2) + 0.5 * (err / sd) ** 2))
    coverage = float(np.mean(np.abs(err) <= Z95 * sd))
    kept = feature_inclusion(model.network) > 0.5
    if model.linear is not None:
        kept |= model.linear.inclusion_probs()["weight"].detach().reshape(-1).numpy() > 0.5
    n_true = d["n_true"] if d["n_true"] is not None else p - NOISE_COLUMNS
    return dict(
        rmse=rmse,
        nll=nll,
        coverage=coverage,
        noise_kept=int(kept[p - NOISE_COLUMNS :].sum()),
        true_kept=int(kept[:n_true].sum()),
        fit_s=fit_s,
        final_loss=float(history.loss[-1]),
    )


def report(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    lines = [
        "# A gated linear path beside the network (a lead)",
        "",
        lead_provenance(settings) + ". The protocol is in the docstring of "
        "`benchmarks/linear_path.py`; both arms share each split's "
        "rows and seed. Means over splits.",
        "",
        "| table (train rows) | splits | RMSE network | RMSE network + linear | ratio | "
        "linear better | NLL (network / + linear) | 95% coverage (network / + linear) | "
        "noise kept (network / + linear) | fit s (median, each) | "
        "the lower objective's RMSE (linear chosen) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["dataset"] for r in rows):
        by = {a: [r for r in rows if r["dataset"] == name and r["arm"] == a] for a in ARMS}
        if not all(by.values()) or len(by[ARMS[0]]) != len(by[ARMS[1]]):
            continue
        a, b = ([float(r["rmse"]) for r in by[arm]] for arm in ARMS)
        better = sum(y < x for x, y in zip(a, b, strict=True))
        noise = [statistics.mean(int(r["noise_kept"]) for r in by[arm]) for arm in ARMS]
        nll = [statistics.mean(float(r["nll"]) for r in by[arm]) for arm in ARMS]
        cover = [statistics.mean(float(r["coverage"]) for r in by[arm]) for arm in ARMS]
        fit = [statistics.median(float(r["fit_s"]) for r in by[arm]) for arm in ARMS]
        # Per split, the arm whose training objective (the last epoch's negative ELBO per
        # datum) ended lower: what choosing the architecture by the ELBO would give.
        pairs = list(zip(by[ARMS[0]], by[ARMS[1]], strict=True))
        lower = [y if float(y["final_loss"]) < float(x["final_loss"]) else x for x, y in pairs]
        chosen = statistics.mean(float(r["rmse"]) for r in lower)
        picked = sum(r["arm"] == ARMS[1] for r in lower)
        n_train = settings["train_rows"].get(name, "")
        lines.append(
            f"| {name} ({n_train}) | {len(a)} | {statistics.mean(a):.4g} | "
            f"{statistics.mean(b):.4g} | {statistics.mean(b) / statistics.mean(a):.3f} | "
            f"{better} of {len(a)} | {nll[0]:.3f} / {nll[1]:.3f} | "
            f"{cover[0]:.3f} / {cover[1]:.3f} | {noise[0]:.1f} / {noise[1]:.1f} | "
            f"{fit[0]:.1f} / {fit[1]:.1f} | {chosen:.4g} ({picked} of {len(a)}) |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    import sys

    import torch

    ap = lead_parser(__doc__, dict(default=list(DEFAULT_SETS), choices=DATASETS))
    ap.add_argument("--max-epochs", type=int, default=None, help="cap (smoke tests)")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    settings = lead_settings("benchmarks.linear_path", argv or sys.argv[1:])
    rows: list[dict[str, Any]] = []
    for name, split, d in regression_splits(args.datasets, args.max_splits):
        settings["train_rows"][name] = len(d["ytr"])
        for arm in ARMS:
            r = fit_one(d, arm != "network", 1000 * split + 7, args.max_epochs)
            rows.append(dict(dataset=name, split=split, arm=arm, **r))
            print(f"{name} split {split} {arm}: RMSE {r['rmse']:.4g}", flush=True)
        save_run(args.out, FIELDS, rows, settings, report)


if __name__ == "__main__":
    main()
