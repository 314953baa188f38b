"""Classifiers of the real-data artifacts (``mnist``, ``mnist-uq``, ``fmnist-cnn``): the
networks of each method, their settings and their evaluation.

The accuracy recorded per epoch is that of the Bayesian predictive probabilities
``(1/H) sum_h softmax(f_{theta_h}(x))`` with ``H = eval_draws`` posterior draws (AGP: its
deterministic network). Test-set draws come from a generator of their own, so the number
of evaluation draws never changes the training run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
from torch import Tensor, nn

from svbnn.nn import (
    GaussianConv2d,
    GaussianLinear,
    GaussianMLP,
    SpikeSlabConv2d,
    SpikeSlabLinear,
    SpikeSlabMLP,
    VariationalDropoutConv2d,
    VariationalDropoutLinear,
    VariationalDropoutMLP,
    variational_layers,
)
from svbnn.prediction import sample_outputs
from svbnn.priors import log_lambda_opt, mlp_log_lambda_opt
from svbnn.pruning import make_mlp, mask_density
from svbnn.selection import density, sparsity, spike_slab_layers

__all__ = [
    "CNN_METHODS",
    "ClassifierSpec",
    "METHOD_CODE",
    "MLP_METHODS",
    "RandomHorizontalFlip",
    "SEED_CLS_EVAL",
    "SEED_CLS_TRAIN",
    "SEED_UQ",
    "build_classifier",
    "cnn_feature_size",
    "evaluate_classifier",
    "kept_fraction",
    "n_params",
    "paper_cnn",
    "set_flip_generator",
]

MLP_METHODS = ("svbnn", "vbnn", "vd", "agp")
"""Methods of the MNIST comparison."""
CNN_METHODS = ("svbnn", "vbnn", "vd")
"""Methods of the Fashion-MNIST CNN illustration (the paper runs svbnn and vbnn)."""

SEED_CLS_TRAIN, SEED_CLS_EVAL, SEED_UQ = 31, 32, 33
METHOD_CODE = {m: i for i, m in enumerate(MLP_METHODS)}


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
    device : str
        Where the network trains and is evaluated (``"cpu"``, ``"cuda"``, ``"cuda:N"``).
        The network is initialised on the CPU either way, so one seed gives one starting
        point; the training and evaluation draws come from generators on the device.
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
    device: str = "cpu"


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


def _build_mlp(
    spec: ClassifierSpec, n_train: int, generator: torch.Generator, info: dict[str, Any]
) -> nn.Module:
    """The 784-hidden-10 MLP of ``spec.method``; SVBNN's ``log_lambda`` goes into ``info``."""
    m = spec.method
    h = spec.hidden
    if m == "svbnn":
        log_lam = mlp_log_lambda_opt(784, h, 10, n_train)
        info["log_lambda"] = log_lam
        return SpikeSlabMLP(
            784,
            h,
            10,
            prior_variance=spec.prior_variance,
            log_prior_inclusion=log_lam,
            generator=generator,
        )
    if m == "vbnn":
        return GaussianMLP(784, h, 10, prior_variance=spec.prior_variance, generator=generator)
    if m == "vd":
        return VariationalDropoutMLP(784, h, 10, generator=generator)
    if m == "agp":
        return make_mlp(784, h, 10, generator=generator)
    raise ValueError(f"unknown method {m!r}")


def _build_cnn(
    spec: ClassifierSpec, n_train: int, generator: torch.Generator, info: dict[str, Any]
) -> nn.Module:
    """The paper's CNN of ``spec.method``; SVBNN's ``log_lambda`` goes into ``info``."""
    m = spec.method
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
            if isinstance(layer, (SpikeSlabConv2d, SpikeSlabLinear)):
                layer.log_prior_inclusion.fill_(log_lam)
        info["log_lambda"] = log_lam
        return model
    if m == "vbnn":
        kw = {"prior_variance": spec.prior_variance, "generator": generator}
        return paper_cnn(
            partial(GaussianConv2d, **kw),
            partial(GaussianLinear, **kw),
            fc,
            spec.flip,
        )
    if m == "vd":
        return paper_cnn(
            partial(VariationalDropoutConv2d, generator=generator),
            partial(VariationalDropoutLinear, generator=generator),
            fc,
            spec.flip,
        )
    raise ValueError(f"the CNN runs {', '.join(CNN_METHODS)}, got {m!r}")


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
    info: dict[str, Any] = {}
    if spec.arch == "mlp":
        model = _build_mlp(spec, n_train, generator, info)
    elif spec.arch == "cnn":
        model = _build_cnn(spec, n_train, generator, info)
    else:
        raise ValueError(f"arch must be 'mlp' or 'cnn', got {spec.arch!r}")
    info["n_params"] = n_params(model)
    return model, info


def n_params(model: nn.Module) -> int:
    layers = variational_layers(model)
    if layers:
        return sum(layer.n_params() for layer in layers)
    return sum(p.numel() for p in model.parameters())


def set_flip_generator(model: nn.Module, generator: torch.Generator | None) -> None:
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
        d = 100.0 * mask_density(model)
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
