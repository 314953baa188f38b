"""Classification on MNIST and Fashion-MNIST (main text section 6, supplement sections on
MNIST and Fashion-MNIST).

* ``mnist``: 784-512-512-10 ReLU network, inputs normalised with mean 0.1306 and sd 0.3081,
  RMSprop, minibatch 256, learning rate 5e-3 for SVBNN and 3e-3 for the baselines (VBNN,
  VD, AGP at 5% density), 400 epochs in the paper; test accuracy after every epoch and the
  final sparsity (paper: SVBNN 5.06%, AGP 5.00%, VD 2.28%).
* ``mnist-uq``: three ambiguous images, each the pixel average of two test images (digits
  5+6, 2+3, 2+7), and their predictive distributions: SVBNN's average of the softmax
  vectors of 100 posterior draws against AGP's softmax.
* ``fmnist-cnn``: a 2-Conv-2-FC network on Fashion-MNIST with random horizontal flips, Adam,
  minibatch 1024, learning rate 1e-3 (150 epochs in the paper), SVBNN against VBNN; test
  accuracy and sparsity per epoch.

Every method trains with a checkpoint written after each epoch into
``<out>/checkpoints/<method>.pt``; a rerun into the same folder resumes from it (the
continued run is the uninterrupted one, bit for bit, for the Bayesian methods) and
``results.csv`` keeps one row per method and finished epoch.

The accuracy recorded per epoch is that of the Bayesian predictive probabilities
``(1/H) sum_h softmax(f_{theta_h}(x))`` with ``H = eval_draws`` posterior draws (AGP: its
deterministic network). Test-set draws come from a generator of their own, so the number
of evaluation draws never changes the training run.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray
from torch import Tensor, nn
from tqdm.auto import tqdm

from ..checkpoint import load_checkpoint
from ..data import FASHION_MNIST_CLASSES, MNIST_MEAN, MNIST_STD, load_mnist
from ..nn import (
    GaussianConv2d,
    GaussianLinear,
    GaussianMLP,
    SpikeSlabConv2d,
    SpikeSlabLinear,
    SpikeSlabMLP,
    VariationalDropoutConv2d,
    VariationalDropoutLinear,
    VariationalDropoutMLP,
    set_generator,
    variational_layers,
)
from ..objectives import CategoricalLikelihood
from ..prediction import sample_outputs
from ..priors import log_lambda_opt, mlp_log_lambda_opt
from ..pruning import AGPPruner, agp_schedule, apply_masks, ensure_masks, make_mlp
from ..pruning import density as pruned_density
from ..selection import density, sparsity, spike_slab_layers
from ..training import History, loss_objective, train
from .common import RunConfig, derive_seed, read_csv, read_settings, write_csv
from .paper_values import METHOD_LABELS
from .plotting import pyplot
from .realdata import (
    MNIST_PAPER_SPARSITY,
    EpochBook,
    check_real_methods,
    checkpoint_epoch,
    data_dir_param,
)
from .registry import Timing, register_artifact
from .report import markdown_table, settings_section, write_report

__all__ = [
    "CNN_METHODS",
    "MLP_METHODS",
    "ClassifierSpec",
    "RandomHorizontalFlip",
    "build_classifier",
    "cnn_feature_size",
    "evaluate_classifier",
    "fit_classifier",
    "kept_fraction",
    "overlay_images",
    "paper_cnn",
]

MLP_METHODS = ("svbnn", "vbnn", "vd", "agp")
"""Methods of the MNIST comparison."""
CNN_METHODS = ("svbnn", "vbnn", "vd")
"""Methods of the Fashion-MNIST CNN illustration (the paper runs svbnn and vbnn)."""

SEED_CLS_TRAIN, SEED_CLS_EVAL, SEED_UQ = 31, 32, 33
_METHOD_CODE = {m: i for i, m in enumerate(MLP_METHODS)}

UQ_PAIRS: tuple[tuple[int, int], ...] = ((5, 6), (2, 3), (2, 7))
"""Digit pairs of the supplement's overlaid images (top to bottom)."""


# ------------------------------------------------------------------------------ models
class RandomHorizontalFlip(nn.Module):
    """Flip each image left-right with probability ``p``, in training mode only.

    Draws from ``self.generator`` (set it to the training generator so that a checkpoint's
    generator state covers the flips too). Shapes: ``(m, C, H, W) -> (m, C, H, W)``.
    """

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must lie in [0, 1], got {p}")
        self.p = p
        self.generator: torch.Generator | None = None

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        flip = torch.rand(x.shape[0], generator=self.generator, device=x.device) < self.p
        return torch.where(flip.view(-1, *([1] * (x.dim() - 1))), x.flip(-1), x)


def cnn_feature_size(side: int = 28) -> int:
    """Side of the feature maps entering the FC part: conv 5x5 pad 2, pool 2, conv 3x3 pad 2,
    pool 2. For 28x28 inputs: 28 -> 28 -> 14 -> 16 -> 8, so 64 x 8 x 8 = 4096 features, the
    paper's "64 x 8 x 8"."""
    s = side + 2 * 2 - 5 + 1  # conv1
    s //= 2  # pool
    s = s + 2 * 2 - 3 + 1  # conv2
    return s // 2


@dataclass(frozen=True)
class ClassifierSpec:
    """One method's network and training settings.

    Attributes
    ----------
    method : {"svbnn", "vbnn", "vd", "agp"}
    arch : {"mlp", "cnn"}
    hidden : tuple of int
        MLP hidden widths, or ``(fc_hidden,)`` for the CNN.
    epochs, batch_size : int
    lr : float
    optimizer : {"rmsprop", "adam"}
    prior_variance : float
        ``sigma_0^2`` of SVBNN and VBNN.
    kl_weight : float
        SVBNN's weight ``w`` of ``KL / n`` in the objective (1: the exact negative ELBO).
    eval_draws : int
        Posterior draws for the per-epoch test accuracy.
    flip : bool
        Random horizontal flips (CNN).
    agp_density : float
        AGP's final kept fraction.
    agp_end_fraction : float
        AGP prunes from the first step to this fraction of the planned steps.
    agp_frequency : int
        Steps between AGP mask updates (at most; fewer for very short runs).
    seed : int
        Training generator seed.
    eval_seed : int
        Seed of the evaluation draws (one stream per epoch derives from it).
    progress : bool
    """

    method: str
    arch: str
    hidden: tuple[int, ...]
    epochs: int
    batch_size: int
    lr: float
    optimizer: str
    prior_variance: float = 2.0
    kl_weight: float = 1.0
    eval_draws: int = 10
    flip: bool = False
    agp_density: float = 0.05
    agp_end_fraction: float = 0.5
    agp_frequency: int = 100
    seed: int = 0
    eval_seed: int = 1
    progress: bool = False


def paper_cnn(
    conv: Callable[..., nn.Module],
    lin: Callable[..., nn.Module],
    fc_hidden: int,
    flip: bool = False,
    side: int = 28,
) -> nn.Sequential:
    """The supplement's 2-Conv-2-FC network built from ``conv`` and ``lin`` layer factories
    (``conv(in, out, k, padding=p)``, ``lin(in, out)``): logits ``(m, 10)`` for
    ``(m, 1, side, side)`` images, random horizontal flips first when ``flip``."""
    f = cnn_feature_size(side)
    mods: list[nn.Module] = [RandomHorizontalFlip()] if flip else []
    mods += [
        conv(1, 32, 5, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        conv(32, 64, 3, padding=2),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        lin(64 * f * f, fc_hidden),
        nn.ReLU(),
        lin(fc_hidden, 10),
    ]
    return nn.Sequential(*mods)


def build_classifier(
    spec: ClassifierSpec, n_train: int, generator: torch.Generator
) -> tuple[nn.Module, dict[str, Any]]:
    """The network of ``spec`` (logits ``(m, 10)``) and a record of its prior settings.

    MLP inputs are ``(m, 784)``; CNN inputs ``(m, 1, 28, 28)``. SVBNN uses ``lambda_opt``:
    for the MLP as :func:`svbnn.priors.mlp_log_lambda_opt`; for the CNN with ``T`` all
    weights and biases, ``L = 3`` hidden layers (two convolutions, one FC), ``N`` the
    largest of 32, 64 and the FC width, ``p = 784`` (the theory covers MLPs only; this is
    the natural transcription).
    """
    m = spec.method
    info: dict[str, Any] = {}
    if spec.arch == "mlp":
        h = spec.hidden
        if m == "svbnn":
            log_lam = mlp_log_lambda_opt(784, h, 10, n_train)
            info["log_lambda"] = log_lam
            model: nn.Module = SpikeSlabMLP(
                784,
                h,
                10,
                prior_variance=spec.prior_variance,
                log_prior_inclusion=log_lam,
                generator=generator,
            )
        elif m == "vbnn":
            model = GaussianMLP(784, h, 10, prior_variance=spec.prior_variance, generator=generator)
        elif m == "vd":
            model = VariationalDropoutMLP(784, h, 10, generator=generator)
        elif m == "agp":
            model = make_mlp(784, h, 10, generator=generator)
        else:
            raise ValueError(f"unknown method {m!r}")
    elif spec.arch == "cnn":
        fc = spec.hidden[0]
        if m == "svbnn":
            kw: dict[str, Any] = {
                "prior_variance": spec.prior_variance,
                "generator": generator,
            }
            model = paper_cnn(
                partial(SpikeSlabConv2d, **kw),
                partial(SpikeSlabLinear, **kw),
                fc,
                spec.flip,
            )
            layers = spike_slab_layers(model)
            T = sum(layer.n_params() for layer in layers)
            log_lam = log_lambda_opt(T, 3, max(32, 64, fc), n_train, 784)
            for layer in layers:
                layer.log_prior_inclusion.fill_(log_lam)
            info["log_lambda"] = log_lam
        elif m == "vbnn":
            kw = {"prior_variance": spec.prior_variance, "generator": generator}
            model = paper_cnn(
                partial(GaussianConv2d, **kw),
                partial(GaussianLinear, **kw),
                fc,
                spec.flip,
            )
        elif m == "vd":
            model = paper_cnn(
                partial(VariationalDropoutConv2d, generator=generator),
                partial(VariationalDropoutLinear, generator=generator),
                fc,
                spec.flip,
            )
        else:
            raise ValueError(f"the CNN runs {', '.join(CNN_METHODS)}, got {m!r}")
    else:
        raise ValueError(f"arch must be 'mlp' or 'cnn', got {spec.arch!r}")
    info["n_params"] = _n_params(model)
    return model, info


def _n_params(model: nn.Module) -> int:
    layers = variational_layers(model)
    if layers:
        return sum(layer.n_params() for layer in layers)
    return sum(p.numel() for p in model.parameters())


def _set_flip_generator(model: nn.Module, generator: torch.Generator | None) -> None:
    for mod in model.modules():
        if isinstance(mod, RandomHorizontalFlip):
            mod.generator = generator


def kept_fraction(model: nn.Module, method: str) -> tuple[float, float]:
    """``(sparsity, density)`` in percent, each method's own notion of what is kept.

    SVBNN: ``sum(phi)/T`` and the fraction with ``phi > 0.5`` (weights and biases).
    VBNN: 100 (dense). VD: weights with ``log alpha <= 3`` (its pruning rule) among all
    weights. AGP: weights its masks keep. Biases are never pruned by VD and AGP and are not
    counted for them (as for AGP's target density).
    """
    if method == "svbnn":
        return 100.0 * float(sparsity(model)), 100.0 * float(density(model, 0.5))
    if method == "agp":
        d = 100.0 * pruned_density(model)
        return d, d
    kept = total = 0
    for layer in variational_layers(model):
        mask = getattr(layer, "kept_mask", None)
        if mask is None:
            continue
        k = mask()
        kept += int(k.sum())
        total += k.numel()
    frac = 100.0 * kept / total if total else 100.0
    return frac, frac


@torch.no_grad()
def evaluate_classifier(
    model: nn.Module,
    method: str,
    X: Tensor,
    y: Tensor,
    draws: int,
    generator: torch.Generator,
    chunk_size: int = 2000,
) -> dict[str, float]:
    """Test accuracy (percent) and mean NLL of the predictive probabilities.

    Bayesian methods: ``(1/H) sum_h softmax(f_{theta_h}(x))`` with ``H = draws``; AGP: the
    softmax of its (pruned) network. Leaves the model's training mode as it was.
    """
    if method == "agp":
        was = model.training
        model.eval()
        try:
            probs = torch.cat([torch.softmax(model(xc), -1) for xc in X.split(chunk_size)])
        finally:
            model.train(was)
    else:
        probs = sample_outputs(
            model, X, draws, generator=generator, chunk_size=chunk_size, transform="softmax"
        ).mean(0)
    acc = float((probs.argmax(-1) == y).double().mean())
    p_true = probs.gather(-1, y.long().unsqueeze(-1)).squeeze(-1).clamp_min(1e-12)
    return {"test_acc": 100.0 * acc, "test_nll": float(-p_true.log().double().mean())}


def _agp_schedule(spec: ClassifierSpec, steps_per_epoch: int) -> dict[str, int]:
    """AGP's steps (:func:`svbnn.pruning.agp_schedule`): from the first step to
    ``agp_end_fraction`` of the run, a mask update every ``agp_frequency`` steps."""
    total = spec.epochs * steps_per_epoch
    n_updates = max(1, math.floor(spec.agp_end_fraction * total) // max(1, spec.agp_frequency))
    t0, n, dt = agp_schedule(total, 0.0, spec.agp_end_fraction, n_updates)
    return {"begin_step": t0, "frequency": dt, "n_updates": n}


def _fit_agp(
    spec: ClassifierSpec,
    model: nn.Module,
    X: Tensor,
    y: Tensor,
    ckpt: Path,
    on_epoch: Callable[[int, nn.Module, dict[str, float]], None],
) -> None:
    """AGP training (cross-entropy, masks recomputed on Zhu & Gupta's cubic schedule) with a
    checkpoint after every epoch, resumed from ``ckpt`` when it exists."""
    n = int(X.shape[0])
    n_batches = math.ceil(n / min(spec.batch_size, n))
    ensure_masks(model)
    schedule = _agp_schedule(spec, n_batches)
    extra: dict[str, Any] = {}
    if ckpt.exists():
        extra = dict(load_checkpoint(ckpt).get("extra", {}))
        # The schedule of the original run is kept, so a resumed run prunes as it would have.
        schedule = dict(extra.get("schedule", schedule))
    pruner = AGPPruner(
        model,
        spec.agp_density,
        begin_step=schedule["begin_step"],
        n_updates=schedule["n_updates"],
        frequency=schedule["frequency"],
    )
    if "current_sparsity" in extra:
        pruner.current_sparsity = float(extra["current_sparsity"])

    def callback(epoch: int, model: nn.Module, history: History) -> None:
        on_epoch(epoch, model, {"train_loss": float(history.loss[-1])})

    train(
        model,
        X,
        y,
        objective=loss_objective(F.cross_entropy),
        epochs=spec.epochs,
        batch_size=spec.batch_size,
        lr=spec.lr,
        optimizer=spec.optimizer,
        generator=torch.Generator().manual_seed(spec.seed),
        verbose=spec.progress,
        checkpoint_path=ckpt,
        checkpoint_every=1,
        resume=True,
        callbacks=[callback],
        track_sparsity=False,
        on_step=pruner.step,
        replicated=False,
        checkpoint_extra=lambda: {
            "schedule": schedule,
            "current_sparsity": pruner.current_sparsity,
        },
    )
    apply_masks(model)


def fit_classifier(
    spec: ClassifierSpec,
    model: nn.Module,
    data: tuple[Tensor, Tensor, Tensor, Tensor],
    ckpt: Path,
    book: EpochBook,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Train ``model`` (resuming from ``ckpt``), recording test metrics after every epoch.

    Parameters
    ----------
    spec : ClassifierSpec
    model : nn.Module
        From :func:`build_classifier` with a generator seeded by ``spec.seed``.
    data : tuple
        ``X_train, y_train, X_test, y_test``.
    ckpt : Path
        Checkpoint file (written after every epoch; resumed from if present).
    book : EpochBook
        Receives one row per epoch (``method``, ``epoch``, accuracy, sparsity, ...).
    extra : dict, optional
        Columns added to every row.

    Returns
    -------
    dict
        ``resumed_from`` (epoch), ``epochs_done``, ``train_s`` (this call).
    """
    X, y, X_test, y_test = data
    method = spec.method
    start = checkpoint_epoch(ckpt)
    book.truncate(method, start)
    book.save()
    clock = [time.perf_counter()]
    t_start = clock[0]
    gen = torch.Generator().manual_seed(spec.seed)
    chunk = 1000 if spec.arch == "cnn" else 2000

    def record(epoch: int, model: nn.Module, losses: dict[str, float]) -> None:
        train_s = time.perf_counter() - clock[0]
        egen = torch.Generator().manual_seed(derive_seed(spec.eval_seed, epoch))
        t0 = time.perf_counter()
        metrics = evaluate_classifier(
            model, method, X_test, y_test, spec.eval_draws, egen, chunk_size=chunk
        )
        # sample_outputs re-pointed the layers at the evaluation generator: restore.
        if method != "agp":
            set_generator(model, gen)
        sp, de = kept_fraction(model, method)
        row = {
            "method": method,
            "epoch": epoch,
            **metrics,
            "sparsity_pct": sp,
            "density_pct": de,
            **losses,
            "epoch_train_s": train_s,
            "eval_s": time.perf_counter() - t0,
            "eval_draws": spec.eval_draws if method != "agp" else 0,
            **(extra or {}),
        }
        book.add(row)
        book.save()
        clock[0] = time.perf_counter()

    if method == "agp":
        _fit_agp(spec, model, X, y, ckpt, record)
    else:
        _set_flip_generator(model, gen)

        def callback(epoch: int, model: nn.Module, history: History) -> None:
            losses = {
                "train_loss": float(history.loss[-1]),
                "train_nll": float(history.nll[-1]),
                "kl_per_datum": float(history.kl[-1]),
            }
            record(epoch, model, losses)

        train(
            model,
            X,
            y,
            CategoricalLikelihood(),
            epochs=spec.epochs,
            batch_size=spec.batch_size,
            lr=spec.lr,
            optimizer=spec.optimizer,
            generator=gen,
            verbose=spec.progress,
            checkpoint_path=ckpt,
            checkpoint_every=1,
            resume=True,
            callbacks=[callback],
            track_sparsity=False,
            kl_weight=spec.kl_weight if method == "svbnn" else 1.0,
        )
        _set_flip_generator(model, None)
    return {
        "resumed_from": start,
        "epochs_done": max(spec.epochs, start),
        "train_s": time.perf_counter() - t_start,
    }


def load_trained(folder: Path, method: str) -> tuple[nn.Module, dict[str, Any]] | None:
    """A classifier trained by the ``mnist`` artifact in ``folder`` (``None`` if absent)."""
    ckpt = folder / "checkpoints" / f"{method}.pt"
    meta_path = folder / "checkpoints" / "meta.json"
    if not (ckpt.exists() and meta_path.exists()):
        return None
    meta = json.loads(meta_path.read_text())
    if meta.get("arch") != "mlp" or method not in meta.get("methods", {}):
        return None
    spec = ClassifierSpec(
        method=method,
        arch="mlp",
        hidden=tuple(meta["hidden"]),
        epochs=0,
        batch_size=1,
        lr=1.0,
        optimizer="rmsprop",
    )
    model, _ = build_classifier(spec, int(meta["n_train"]), torch.Generator().manual_seed(0))
    state = load_checkpoint(ckpt)
    if method == "agp":
        ensure_masks(model)
    model.load_state_dict(state["model"])
    return model, {"checkpoint": str(ckpt), "epoch": int(state["epoch"]), **meta}


# ------------------------------------------------------------------------------- data
def _subset(X: Tensor, y: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """The first ``n`` rows (``n <= 0``: all). The official files are in random order."""
    if n <= 0 or n >= X.shape[0]:
        return X, y
    return X[:n], y[:n]


def _load(
    cfg: RunConfig, *, fashion: bool, flatten: bool
) -> tuple[tuple[Tensor, Tensor, Tensor, Tensor], dict[str, Any]]:
    P = cfg.params
    raw = load_mnist(data_dir_param(P), fashion=fashion)
    mean = MNIST_MEAN if not fashion else raw.default_mean
    std = MNIST_STD if not fashion else raw.default_std
    X, y, Xt, yt = raw.to_tensors(mean, std, flatten=flatten)
    X, y = _subset(X, y, int(P.get("n_train", 0)))
    Xt, yt = _subset(Xt, yt, int(P.get("n_test", 0)))
    info = {
        "dataset": raw.name,
        "n_train": int(X.shape[0]),
        "n_test": int(Xt.shape[0]),
        "normalisation": [mean, std],
    }
    return (X, y, Xt, yt), info


def _spec(cfg: RunConfig, method: str, arch: str) -> ClassifierSpec:
    P = cfg.params
    code = _METHOD_CODE.get(method, 9)
    art = 1 if arch == "mlp" else 2
    lr = float(P["lr_svbnn"] if method == "svbnn" else P["lr_baselines"])
    hidden = tuple(int(h) for h in P["hidden"]) if arch == "mlp" else (int(P["fc_hidden"]),)
    return ClassifierSpec(
        method=method,
        arch=arch,
        hidden=hidden,
        epochs=cfg.epochs,
        batch_size=int(P["batch_size"]),
        lr=lr,
        optimizer=str(P["optimizer"]),
        prior_variance=float(P.get("prior_variance", 2.0)),
        kl_weight=float(P.get("kl_weight", 1.0)),
        eval_draws=int(P["eval_draws"]),
        flip=bool(P.get("flip", False)),
        agp_density=float(P.get("agp_density", 0.05)),
        agp_end_fraction=float(P.get("agp_end_fraction", 0.5)),
        agp_frequency=int(P.get("agp_frequency", 100)),
        seed=derive_seed(cfg.seed, SEED_CLS_TRAIN, art, code),
        eval_seed=derive_seed(cfg.seed, SEED_CLS_EVAL, art, code),
        progress=cfg.progress,
    )


def _run_comparison(
    cfg: RunConfig, *, arch: str, allowed: Sequence[str], fashion: bool
) -> dict[str, Any]:
    methods = check_real_methods(cfg.methods, allowed, cfg.artifact)
    if cfg.epochs < 1:
        raise ValueError("--epochs must be at least 1")
    data, data_info = _load(cfg, fashion=fashion, flatten=arch == "mlp")
    ckpt_dir = cfg.out / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    meta_path = ckpt_dir / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    hidden = (
        [int(h) for h in cfg.params["hidden"]] if arch == "mlp" else [int(cfg.params["fc_hidden"])]
    )
    if meta and (meta.get("hidden") != hidden or meta.get("arch") != arch):
        raise ValueError(
            f"{ckpt_dir} holds checkpoints of another network ({meta.get('arch')} "
            f"{meta.get('hidden')}); use another --out or delete the folder"
        )
    meta.update({"arch": arch, "hidden": hidden, "n_train": data_info["n_train"]})
    meta.setdefault("methods", {})
    book = EpochBook(cfg.out / "results.csv")
    runs: dict[str, Any] = {}
    for method in methods:
        spec = _spec(cfg, method, arch)
        model, info = build_classifier(
            spec, data_info["n_train"], torch.Generator().manual_seed(spec.seed)
        )
        if cfg.progress:
            tqdm.write(
                f"{cfg.artifact}: {METHOD_LABELS.get(method, method)}, {spec.epochs} epochs, "
                f"lr {spec.lr:g}, T = {info['n_params']}"
            )
        old = meta["methods"].get(method, {})
        if (ckpt_dir / f"{method}.pt").exists() and (
            old.get("lr", spec.lr) != spec.lr
            or (method == "svbnn" and old.get("kl_weight", 1.0) != spec.kl_weight)
        ):
            raise ValueError(
                f"--out {cfg.out}: the {method} checkpoint there was trained with other settings "
                f"({old}); resume with them or use another --out"
            )
        meta["methods"][method] = {"lr": spec.lr, "epochs_planned": spec.epochs}
        if method == "svbnn":
            meta["methods"][method]["kl_weight"] = spec.kl_weight
        meta_path.write_text(json.dumps(meta, indent=2) + "\n")
        fit = fit_classifier(spec, model, data, ckpt_dir / f"{method}.pt", book)
        runs[method] = {**info, **fit, "lr": spec.lr, "seed": spec.seed}
    return {"data": data_info, "runs": runs, "checkpoints": str(ckpt_dir)}


# ------------------------------------------------------------------------ mnist artifact
MNIST_DEFAULTS: dict[str, Any] = {
    "epochs": 400,
    "methods": ("svbnn",),
    "hidden": [512, 512],
    "batch_size": 256,
    "optimizer": "rmsprop",
    "lr_svbnn": 5e-3,
    "lr_baselines": 3e-3,
    "prior_variance": 2.0,
    "kl_weight": 1.0,
    "eval_draws": 10,
    "agp_density": 0.05,
    "agp_end_fraction": 0.5,
    "agp_frequency": 100,
    "n_train": 0,
    "n_test": 0,
    "data_dir": "",
}
"""Settings of ``mnist`` (paper: 400 epochs; ``n_train``/``n_test`` = 0 use all images)."""

MNIST_QUICK: dict[str, Any] = {"epochs": 1, "n_train": 512, "n_test": 500, "eval_draws": 2}


def _plot_curves(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    plt = pyplot()
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for m in methods:
        mr = sorted((r for r in rows if r["method"] == m), key=lambda r: int(r["epoch"]))
        ep = [int(r["epoch"]) for r in mr]
        label = METHOD_LABELS.get(m, m)
        ax1.plot(
            ep,
            [float(r["test_acc"]) for r in mr],
            marker="." if len(ep) < 40 else None,
            label=label,
        )
        ax2.plot(
            ep,
            [float(r["sparsity_pct"]) for r in mr],
            marker="." if len(ep) < 40 else None,
            label=label,
        )
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("test accuracy (%)")
    ax1.set_title("Test accuracy")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("kept (%)")
    ax2.set_yscale("log")
    ax2.set_title("Sparsity (SVBNN: sum(phi)/T)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _curve_table(rows: list[dict[str, Any]], paper: dict[str, Any] | None) -> str:
    methods = list(dict.fromkeys(r["method"] for r in rows))
    headers = [
        "Method",
        "epochs",
        "final test acc. (%)",
        "best test acc. (%) [epoch]",
        "final sparsity (%)",
    ]
    if paper is not None:
        headers.append("final sparsity (paper, 400 epochs)")
    headers += ["density phi>0.5 (%)", "s/epoch (train)", "eval draws"]
    table = []
    for m in methods:
        mr = sorted((r for r in rows if r["method"] == m), key=lambda r: int(r["epoch"]))
        last = mr[-1]
        best = max(mr, key=lambda r: float(r["test_acc"]))
        line = [
            METHOD_LABELS.get(m, m),
            str(last["epoch"]),
            f"{float(last['test_acc']):.2f}",
            f"{float(best['test_acc']):.2f} [{best['epoch']}]",
            f"{float(last['sparsity_pct']):.2f}",
        ]
        if paper is not None:
            v = paper.get(m)
            line.append("-" if v is None else f"{v[0]:.2f}")
        line += [
            f"{float(last['density_pct']):.2f}" if m == "svbnn" else "-",
            f"{np.median([float(r['epoch_train_s']) for r in mr]):.1f}",
            str(last.get("eval_draws", "")),
        ]
        table.append(line)
    return markdown_table(headers, table)


def _per_epoch_table(rows: list[dict[str, Any]], max_rows: int = 60) -> str:
    methods = list(dict.fromkeys(r["method"] for r in rows))
    epochs = sorted({int(r["epoch"]) for r in rows})
    if len(epochs) > max_rows:
        step = math.ceil(len(epochs) / max_rows)
        keep = set(epochs[::step]) | {epochs[-1]}
        epochs = [e for e in epochs if e in keep]
    by = {(r["method"], int(r["epoch"])): r for r in rows}
    headers = ["epoch"]
    for m in methods:
        lab = METHOD_LABELS.get(m, m)
        headers += [f"{lab} acc. (%)", f"{lab} sparsity (%)"]
    table = []
    for e in epochs:
        line = [str(e)]
        for m in methods:
            r = by.get((m, e))
            line += (
                [f"{float(r['test_acc']):.2f}", f"{float(r['sparsity_pct']):.2f}"]
                if r
                else ["", ""]
            )
        table.append(line)
    return markdown_table(headers, table)


def report_mnist(out: Path) -> None:
    """``report.md`` and ``accuracy_by_epoch.png`` of the ``mnist`` artifact."""
    rows = read_csv(out / "results.csv")
    settings = read_settings(out)
    _plot_curves(rows, out / "accuracy_by_epoch.png", "MNIST, 784-512-512-10 ReLU")
    runs = settings.get("runs", {})
    notes = []
    for m, info in runs.items():
        lam = info.get("log_lambda")
        notes.append(
            f"- {METHOD_LABELS.get(m, m)}: lr {info.get('lr')}, T = {info.get('n_params')}, "
            f"resumed from epoch {info.get('resumed_from')}, trained to epoch "
            f"{info.get('epochs_done')} ({info.get('train_s', math.nan):.0f} s this run)"
            + (f", log lambda_opt = {lam:.3f}" if lam is not None else "")
        )
    write_report(
        out,
        "MNIST: test accuracy by epoch and final sparsity (main text, MNIST figure)",
        [
            "Reproduction of the MNIST comparison of Bai, Song & Cheng (NeurIPS 2020): "
            "784-512-512-10 ReLU network, RMSprop, minibatch 256, learning rate 5e-3 (SVBNN) "
            "and 3e-3 (baselines), inputs normalised with mean 0.1306 and sd 0.3081. The paper "
            "trains 400 epochs and reports the final sparsities below (its accuracy curves "
            "are only plotted); the epochs run here are in the table.",
            _curve_table(rows, MNIST_PAPER_SPARSITY),
            "![accuracy and sparsity by epoch](accuracy_by_epoch.png)",
            "## By epoch\n\n" + _per_epoch_table(rows),
            _elbo_section(rows),
            "## Notes\n\n"
            "- Test accuracy: argmax of the Bayesian predictive probabilities (average of "
            "the softmax of `eval draws` posterior draws; AGP: its pruned network).\n"
            "- Sparsity: SVBNN sum(phi)/T over weights and biases (the paper's); VD the "
            "fraction of weights with log alpha <= 3; AGP the fraction its masks keep "
            "(target 5%, reached at half of the planned steps); VBNN 100 (dense).\n"
            "- Checkpoints after every epoch are in `checkpoints/`; rerunning with the same "
            "`--out` and a larger `--epochs` continues from them.\n" + "\n".join(notes),
            "## Settings\n\n" + _settings(settings),
        ],
    )


def _elbo_section(rows: list[dict[str, Any]]) -> str:
    """The negative ELBO's two parts by epoch for SVBNN: why it prunes as far as it does."""
    srows = [r for r in rows if r.get("method") == "svbnn" and r.get("kl_per_datum")]
    if not srows:
        return ""
    srows.sort(key=lambda r: int(r["epoch"]))
    epochs = {int(srows[0]["epoch"]), int(srows[-1]["epoch"])}
    for target in (20.0, 10.0, 5.0, 1.0):
        hit = next((r for r in srows if float(r["sparsity_pct"]) <= target), None)
        if hit is not None:
            epochs.add(int(hit["epoch"]))
    table = markdown_table(
        ["epoch", "test acc. (%)", "sum(phi)/T (%)", "train NLL / datum", "KL / n", "sum"],
        [
            [
                r["epoch"],
                f"{float(r['test_acc']):.2f}",
                f"{float(r['sparsity_pct']):.2f}",
                f"{float(r['train_nll']):.3f}",
                f"{float(r['kl_per_datum']):.3f}",
                f"{float(r['train_nll']) + float(r['kl_per_datum']):.3f}",
            ]
            for r in srows
            if int(r["epoch"]) in epochs
        ],
    )
    return (
        "## SVBNN: the two parts of the objective\n\n"
        "The per-datum negative ELBO is the training NLL plus KL / n (n = 60000). With "
        "lambda_opt (log lambda of about -16.5 for T = 669,706) every kept parameter costs "
        "about 16.5 nats for its inclusion plus its slab's KL, so a network keeping 5% of "
        "its parameters carries several nats of KL per datum, while the NLL of any "
        "classifier of 10 classes is at most about 2.3 (chance). The objective therefore "
        "keeps pruning long after 5%, trading a little NLL for a large fall in KL:\n\n" + table
    )


def _settings(settings: dict[str, Any]) -> str:
    return settings_section(
        settings,
        [
            ("config.methods", "methods"),
            ("config.epochs", "epochs"),
            ("data.dataset", "data"),
            ("data.n_train", "training images"),
            ("data.n_test", "test images"),
            ("config.params.hidden", "hidden layers"),
            ("config.params.fc_hidden", "FC hidden width"),
            ("config.params.batch_size", "minibatch"),
            ("config.params.optimizer", "optimizer"),
            ("config.params.lr_svbnn", "learning rate SVBNN"),
            ("config.params.lr_baselines", "learning rate baselines"),
            ("config.params.prior_variance", "prior variance sigma_0^2"),
            ("config.params.eval_draws", "posterior draws per evaluation"),
            ("config.params.agp_density", "AGP final density"),
            ("config.seed", "base seed"),
            ("config.threads", "torch threads"),
            ("config.quick", "quick mode"),
            ("wall_time_s", "wall time (s)"),
            ("environment.git.commit", "git commit"),
            ("environment.command", "command"),
        ],
    )


@register_artifact(
    "mnist",
    description="MNIST 784-512-512-10: test accuracy per epoch, final sparsity (SVBNN, baselines)",
    report=report_mnist,
    defaults=MNIST_DEFAULTS,
    quick=MNIST_QUICK,
    options=("methods",),
    group="real-data",
    # SVBNN (the default) measured at 17.1 s per epoch (14.6 s training + 2.6 s evaluation)
    # over 51 epochs; 400 epochs estimated. VBNN, VD and AGP add about 9, 10 and 5 s/epoch.
    timing=Timing(quick_s=8.0, full_s=6850.0),
)
def mnist(cfg: RunConfig) -> dict[str, Any]:
    return _run_comparison(cfg, arch="mlp", allowed=MLP_METHODS, fashion=False)


# --------------------------------------------------------------------- mnist-uq artifact
def overlay_images(
    images: NDArray[np.uint8],
    labels: NDArray[Any],
    pairs: Sequence[tuple[int, int]] = UQ_PAIRS,
    occurrence: int = 0,
) -> tuple[NDArray[np.float64], list[tuple[int, int]]]:
    """Pixel averages of two test images per digit pair.

    Parameters
    ----------
    images : ndarray, shape (n, 28, 28)
        0..255.
    labels : ndarray, shape (n,)
    pairs : sequence of (int, int)
    occurrence : int
        Use the ``occurrence``-th image (0-based) of each digit in test-set order.

    Returns
    -------
    overlays : ndarray, shape (len(pairs), 28, 28)
        On the 0..255 scale.
    indices : list of (int, int)
        Test-set indices of the two images of each pair.
    """
    out, idx = [], []
    for a, b in pairs:
        ia, ib = np.flatnonzero(labels == a), np.flatnonzero(labels == b)
        if len(ia) <= occurrence or len(ib) <= occurrence:
            raise ValueError(f"the test set has too few images of digits {a} and {b}")
        i, j = int(ia[occurrence]), int(ib[occurrence])
        out.append((images[i].astype(np.float64) + images[j].astype(np.float64)) / 2.0)
        idx.append((i, j))
    return np.stack(out), idx


def _normalise(img: NDArray[np.float64]) -> Tensor:
    x = (img / 255.0 - MNIST_MEAN) / MNIST_STD
    return torch.tensor(x.reshape(len(img), -1), dtype=torch.float32)


UQ_DEFAULTS: dict[str, Any] = {
    **MNIST_DEFAULTS,
    "epochs": 400,
    "source": "",
    "uq_draws": 100,
    "occurrence": 0,
}
"""``source``: folder of a finished ``mnist`` run whose checkpoints are reused, named
explicitly (``--set source=results/mnist``); without it, SVBNN and AGP are trained here.
Nothing is loaded from a folder the user did not name."""


@register_artifact(
    "mnist-uq",
    description="Supplement MNIST UQ figure: predictive distributions of overlaid digits vs AGP",
    report=lambda out: report_mnist_uq(out),
    defaults=UQ_DEFAULTS,
    quick={**MNIST_QUICK, "uq_draws": 10},
    group="real-data",
    # With the mnist artifact's SVBNN checkpoint in place: AGP, 400 epochs at 5.0 s.
    timing=Timing(quick_s=8.4, full_s=2000.0),
)
def mnist_uq(cfg: RunConfig) -> dict[str, Any]:
    P = cfg.params
    source = Path(P["source"]) if P.get("source") else None
    if source is not None and not (source / "checkpoints" / "meta.json").exists():
        raise ValueError(f"--set source={source}: no mnist run there (no checkpoints/meta.json)")
    raw = load_mnist(data_dir_param(P))
    origins: dict[str, Any] = {}
    models: dict[str, nn.Module] = {}
    data: tuple[Tensor, Tensor, Tensor, Tensor] | None = None
    book: EpochBook | None = None
    for method in ("svbnn", "agp"):
        found = (
            load_trained(source, method)
            if source is not None and source.resolve() != cfg.out.resolve()
            else None
        )
        if found is not None:
            models[method], origins[method] = found
            origins[method]["origin"] = "reused"
            continue
        if data is None:
            data, data_info = _load(cfg, fashion=False, flatten=True)
            book = EpochBook(cfg.out / "training.csv")
        assert book is not None
        spec = _spec(cfg, method, "mlp")
        model, info = build_classifier(
            spec, int(data[0].shape[0]), torch.Generator().manual_seed(spec.seed)
        )
        ckpt_dir = cfg.out / "checkpoints"
        fit = fit_classifier(spec, model, data, ckpt_dir / f"{method}.pt", book)
        meta = {
            "arch": "mlp",
            "hidden": list(spec.hidden),
            "n_train": int(data[0].shape[0]),
            "methods": {method: {"lr": spec.lr}},
        }
        models[method] = model
        origins[method] = {
            "origin": "trained here",
            **info,
            **fit,
            **meta,
            "checkpoint": str(ckpt_dir / f"{method}.pt"),
        }
    overlays, idx = overlay_images(raw.x_test, raw.y_test, UQ_PAIRS, int(P["occurrence"]))
    X = _normalise(overlays)
    gen = torch.Generator().manual_seed(derive_seed(cfg.seed, SEED_UQ))
    H = int(P["uq_draws"])
    draws = sample_outputs(models["svbnn"], X, H, generator=gen, transform="softmax")  # (H, 3, 10)
    svbnn_p, svbnn_sd = draws.mean(0).double().numpy(), draws.std(0).double().numpy()
    with torch.no_grad():
        models["agp"].eval()
        agp_p = torch.softmax(models["agp"](X), -1).double().numpy()
    rows = []
    for k, ((a, b), (i, j)) in enumerate(zip(UQ_PAIRS, idx, strict=True)):
        for method, probs, sds in (("svbnn", svbnn_p, svbnn_sd), ("agp", agp_p, None)):
            p = probs[k]
            row: dict[str, Any] = {
                "pair": f"{a}+{b}",
                "digit_a": a,
                "digit_b": b,
                "index_a": i,
                "index_b": j,
                "method": method,
                "top_class": int(p.argmax()),
                "top_prob": float(p.max()),
                "entropy": float(-(p * np.log(np.clip(p, 1e-300, None))).sum()),
            }
            for c in range(10):
                row[f"p{c}"] = float(p[c])
            if sds is not None:
                for c in range(10):
                    row[f"sd{c}"] = float(sds[k, c])
            rows.append(row)
    write_csv(cfg.out / "results.csv", rows)
    np.savez_compressed(
        cfg.out / "overlays.npz",
        first=np.stack([raw.x_test[i] for i, _ in idx]),
        second=np.stack([raw.x_test[j] for _, j in idx]),
        overlay=overlays,
    )
    return {
        "source": str(source) if source is not None else "",
        "models": origins,
        "pairs": [list(p) for p in UQ_PAIRS],
        "indices": [list(t) for t in idx],
    }


def _plot_uq(
    rows: list[dict[str, Any]], images: dict[str, NDArray[Any]], path: Path, draws: Any
) -> None:
    plt = pyplot()
    pairs = list(dict.fromkeys(r["pair"] for r in rows))
    fig, axes = plt.subplots(
        len(pairs),
        4,
        figsize=(11, 2.4 * len(pairs)),
        gridspec_kw={"width_ratios": [1, 1, 1, 3.2]},
        squeeze=False,
    )
    for k, pair in enumerate(pairs):
        for c, key in enumerate(("first", "second", "overlay")):
            ax = axes[k, c]
            ax.imshow(images[key][k], cmap="gray_r", vmin=0, vmax=255)
            ax.set_xticks([])
            ax.set_yticks([])
            if k == 0:
                ax.set_title({"first": "image 1", "second": "image 2", "overlay": "overlaid"}[key])
        ax = axes[k, 3]
        width = 0.4
        cls = np.arange(10)
        for off, method, colour in ((-width / 2, "svbnn", "C0"), (width / 2, "agp", "C3")):
            r = next(x for x in rows if x["pair"] == pair and x["method"] == method)
            p = [float(r[f"p{c}"]) for c in cls]
            err = [float(r[f"sd{c}"]) for c in cls] if method == "svbnn" else None
            ax.bar(
                cls + off,
                p,
                width,
                color=colour,
                yerr=err,
                capsize=2,
                label=f"SVBNN ({draws} draws)" if method == "svbnn" else "AGP (softmax)",
            )
        ax.set_xticks(cls)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(f"P(class), {pair}")
        if k == 0:
            ax.legend(loc="upper right", fontsize=8)
    axes[-1, 3].set_xlabel("digit")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def report_mnist_uq(out: Path) -> None:
    """``report.md`` and ``mnist_uq.png`` of the ``mnist-uq`` artifact."""
    rows = read_csv(out / "results.csv")
    settings = read_settings(out)
    with np.load(out / "overlays.npz") as z:
        images = {k: z[k] for k in ("first", "second", "overlay")}
    draws = settings.get("config", {}).get("params", {}).get("uq_draws", "?")
    _plot_uq(rows, images, out / "mnist_uq.png", draws)
    headers = ["pair", "test indices", "method", "top class (prob.)", "entropy (nats)"] + [
        str(c) for c in range(10)
    ]
    table = []
    for r in rows:
        table.append(
            [
                r["pair"],
                f"{r['index_a']}, {r['index_b']}",
                METHOD_LABELS.get(r["method"], r["method"]),
                f"{r['top_class']} ({float(r['top_prob']):.3f})",
                f"{float(r['entropy']):.3f}",
                *[f"{float(r[f'p{c}']):.3f}" for c in range(10)],
            ]
        )
    models = settings.get("models", {})
    origin = []
    for m, info in models.items():
        origin.append(
            f"- {METHOD_LABELS.get(m, m)}: {info.get('origin')} "
            f"({info.get('checkpoint')}, epoch {info.get('epoch', info.get('epochs_done'))})"
        )
    write_report(
        out,
        "MNIST uncertainty quantification on overlaid digits (supplement figure)",
        [
            "Each ambiguous input is the pixel average of two MNIST test images (the first "
            "test image of each digit unless `occurrence` says otherwise). SVBNN's predictive "
            "distribution is the average of the softmax vectors of `uq_draws` posterior draws "
            "(error bars: their sd across draws); AGP's is the softmax of its pruned network. "
            "The paper's point: AGP is nearly certain of one digit, SVBNN spreads its "
            "probability over the two digits.",
            "![overlaid digits and predictive distributions](mnist_uq.png)",
            markdown_table(headers, table),
            "## Models\n\n" + "\n".join(origin),
            "## Settings\n\n"
            + settings_section(
                settings,
                [
                    ("config.params.uq_draws", "posterior draws"),
                    ("source", "checkpoint folder looked up"),
                    ("config.epochs", "epochs (if trained here)"),
                    ("config.seed", "base seed"),
                    ("config.quick", "quick mode"),
                    ("wall_time_s", "wall time (s)"),
                    ("environment.git.commit", "git commit"),
                ],
            ),
        ],
    )


# ------------------------------------------------------------------- fmnist-cnn artifact
FMNIST_DEFAULTS: dict[str, Any] = {
    "epochs": 150,
    "methods": ("svbnn",),
    "fc_hidden": 512,
    "batch_size": 1024,
    "optimizer": "adam",
    "lr_svbnn": 1e-3,
    "lr_baselines": 1e-3,
    "prior_variance": 2.0,
    "eval_draws": 5,
    "flip": True,
    "n_train": 0,
    "n_test": 0,
    "data_dir": "",
}
"""Settings of ``fmnist-cnn`` (paper: 150 epochs). ``fc_hidden`` is the width of the hidden
FC layer, which the paper does not state."""


def report_fmnist(out: Path) -> None:
    """``report.md`` and ``fmnist_accuracy.png`` of the ``fmnist-cnn`` artifact."""
    rows = read_csv(out / "results.csv")
    settings = read_settings(out)
    _plot_curves(rows, out / "fmnist_accuracy.png", "Fashion-MNIST, 2-Conv-2-FC")
    runs = settings.get("runs", {})
    notes = [
        f"- {METHOD_LABELS.get(m, m)}: T = {info.get('n_params')}, resumed from epoch "
        f"{info.get('resumed_from')}, trained to epoch {info.get('epochs_done')}"
        + (
            f", log lambda_opt = {info['log_lambda']:.3f}"
            if info.get("log_lambda") is not None
            else ""
        )
        for m, info in runs.items()
    ]
    fc = settings.get("config", {}).get("params", {}).get("fc_hidden", "?")
    write_report(
        out,
        "Fashion-MNIST with a 2-Conv-2-FC network (supplement figure)",
        [
            "Reproduction of the supplement's CNN illustration: conv 32 5x5 (padding 2) + "
            "ReLU + 2x2 max pool, conv 64 3x3 (padding 2) + ReLU + 2x2 max pool, then "
            f"FC 4096 -> {fc} -> 10 with ReLU; random horizontal flips; Adam, minibatch 1024, "
            "learning rate 1e-3 (150 epochs in the paper). SVBNN uses spike-and-slab "
            "convolutions; VBNN Gaussian ones. The paper shows curves only: SVBNN's accuracy "
            "rises as its sparsity falls, VBNN overfits after about 80 epochs.",
            _curve_table(rows, None),
            "![accuracy and sparsity by epoch](fmnist_accuracy.png)",
            "## By epoch\n\n" + _per_epoch_table(rows),
            "## Network sizes\n\n"
            "With 28x28 inputs: conv1 (5x5, padding 2) keeps 28x28, pooling gives 14x14; conv2 "
            "(3x3, padding 2) gives 16x16, pooling 8x8; so the FC part receives 64 x 8 x 8 = "
            '4096 features, the paper\'s "64 x 8 x 8". The paper does not give the width of '
            f"the hidden FC layer; `fc_hidden` = {fc} here. lambda_opt for the CNN: T = all "
            "weights and biases, L = 3, N = the largest of 32, 64 and the FC width, p = 784.\n\n"
            + "\n".join(notes),
            "## Settings\n\n" + _settings(settings),
        ],
    )


@register_artifact(
    "fmnist-cnn",
    description="Supplement Fashion-MNIST CNN (2 conv + 2 FC): accuracy and sparsity per epoch",
    report=report_fmnist,
    defaults=FMNIST_DEFAULTS,
    quick={"epochs": 1, "n_train": 256, "n_test": 200, "eval_draws": 2, "fc_hidden": 64},
    options=("methods",),
    group="real-data",
    # SVBNN measured at about 120 s per epoch (94 s training + 26 s evaluation, 2 epochs);
    # 150 epochs estimated. VBNN adds about 112 s per epoch.
    timing=Timing(quick_s=8.1, full_s=18000.0),
)
def fmnist_cnn(cfg: RunConfig) -> dict[str, Any]:
    out = _run_comparison(cfg, arch="cnn", allowed=CNN_METHODS, fashion=True)
    out["classes"] = list(FASHION_MNIST_CLASSES)
    return out
