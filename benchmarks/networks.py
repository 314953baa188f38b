"""The benchmarked networks and implementations, and one training step of each.

Four implementations of the same network are compared (:data:`IMPL_LABELS`): plain dense
layers, svbnn's spike-and-slab layers, the paper's Algorithm 1 written with plain autograd
(``benchmarks/reference.py``) and bayesian-torch's Gaussian mean-field layers. Every step
closure uses the same optimiser, so the differences come from the layers and the losses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from svbnn.nn.base import set_generator
from svbnn.nn.spike_slab import SpikeSlabConv2d, SpikeSlabLinear, SpikeSlabMLP
from svbnn.objectives import CategoricalLikelihood, GaussianLikelihood
from svbnn.priors import log_lambda_opt, mlp_log_lambda_opt
from svbnn.training import make_optimizer, negative_elbo
from svbnn_experiments.classifiers import paper_cnn

from .reference import reference_cnn, reference_kl, reference_mlp

DENSE, SVBNN, REFERENCE, BAYESIAN_TORCH = "dense", "svbnn", "reference", "bayesian-torch"
IMPL_LABELS = {
    DENSE: "dense",
    SVBNN: "SVBNN",
    REFERENCE: "reference",
    BAYESIAN_TORCH: "bayesian-torch",
}
BT_INSTALL = "pip install bayesian-torch"
N_REPLICATES = 30


@dataclass(frozen=True)
class NetSpec:
    """One benchmarked network: architecture, task, minibatch size, training-set size."""

    key: str
    label: str
    kind: str  # "mlp" or "cnn"
    in_features: int
    hidden: tuple[int, ...]
    out_features: int
    task: str  # "regression" or "classification"
    batch: int
    n_train: int
    lr: float

    def n_params(self) -> int:
        if self.kind == "cnn":
            h = self.hidden[0]
            return (1 * 25 + 1) * 32 + (32 * 9 + 1) * 64 + (4096 + 1) * h + (h + 1) * 10
        sizes = [self.in_features, *self.hidden, self.out_features]
        return sum((sizes[i] + 1) * sizes[i + 1] for i in range(len(sizes) - 1))

    def arch(self) -> str:
        if self.kind == "cnn":
            return f"conv32(5x5)-pool-conv64(3x3)-pool-{4096}-{self.hidden[0]}-10"
        return "-".join(str(s) for s in (self.in_features, *self.hidden, self.out_features))

    def log_lambda(self) -> float:
        if self.kind == "cnn":
            return log_lambda_opt(self.n_params(), 3, 4096, self.n_train, 784)
        return mlp_log_lambda_opt(self.in_features, self.hidden, self.out_features, self.n_train)


def network_specs(cnn_hidden: int, cnn_batch: int) -> dict[str, NetSpec]:
    """The paper's networks (Simulation II, UCI, MNIST, Fashion-MNIST CNN)."""
    return {
        "sim2": NetSpec(
            "sim2", "Simulation II", "mlp", 200, (7, 7, 7), 1, "regression", 512, 3000, 5e-3
        ),
        "uci": NetSpec("uci", "UCI", "mlp", 8, (50,), 1, "regression", 128, 8192, 1e-3),
        "mnist": NetSpec(
            "mnist", "MNIST", "mlp", 784, (512, 512), 10, "classification", 256, 60000, 5e-3
        ),
        "cnn": NetSpec(
            "cnn",
            "Fashion-MNIST CNN",
            "cnn",
            784,
            (cnn_hidden,),
            10,
            "classification",
            cnn_batch,
            60000,
            1e-3,
        ),
    }


def bayesian_torch_available() -> tuple[bool, str]:
    """Whether ``bayesian_torch`` imports, and its version or the reason it does not."""
    try:
        from importlib.metadata import version

        import bayesian_torch.layers  # noqa: F401

        return True, version("bayesian-torch")
    except Exception as exc:  # any import failure means: skip the column
        return False, f"{type(exc).__name__}: {exc}"


def _mlp(net: NetSpec, lin: Callable[[int, int], nn.Module]) -> list[nn.Module]:
    """The fully connected network of ``net`` from a layer factory, ReLU between layers."""
    sizes = [net.in_features, *net.hidden, net.out_features]
    mods: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        mods.append(lin(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            mods.append(nn.ReLU())
    return mods


def dense_model(net: NetSpec) -> nn.Module:
    """The network with plain ``nn.Linear`` / ``nn.Conv2d`` layers."""
    if net.kind == "cnn":
        return paper_cnn(nn.Conv2d, nn.Linear, net.hidden[0])
    return nn.Sequential(*_mlp(net, nn.Linear))


def svbnn_model(net: NetSpec, gen: torch.Generator, n_replicates: int | None = None) -> nn.Module:
    """The network with svbnn's spike-and-slab layers (``n_replicates`` for a batched MLP)."""
    kw: dict[str, Any] = {"log_prior_inclusion": net.log_lambda(), "generator": gen}
    if net.kind == "cnn":
        model: nn.Module = paper_cnn(
            partial(SpikeSlabConv2d, **kw), partial(SpikeSlabLinear, **kw), net.hidden[0]
        )
    else:
        model = SpikeSlabMLP(
            net.in_features, net.hidden, net.out_features, n_replicates=n_replicates, **kw
        )
    set_generator(model, gen)
    return model


class _BayesianTorchNet(nn.Module):
    """Sequential container that sums the KL each bayesian-torch layer returns (their idiom)."""

    def __init__(self, layers: Sequence[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        from bayesian_torch.layers.base_variational_layer import BaseVariationalLayer_

        kl = torch.zeros(())
        for layer in self.layers:
            if isinstance(layer, BaseVariationalLayer_):
                x, k = layer(x)
                kl = kl + k
            else:
                x = layer(x)
        return x, kl


def _bayesian_torch_model(net: NetSpec) -> nn.Module:
    from bayesian_torch.layers import Conv2dReparameterization, LinearReparameterization

    if net.kind == "cnn":
        cnn = paper_cnn(Conv2dReparameterization, LinearReparameterization, net.hidden[0])
        return _BayesianTorchNet(list(cnn))
    return _BayesianTorchNet(_mlp(net, LinearReparameterization))


def synthetic_batch(net: NetSpec, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """One random minibatch of ``net``'s shape (timing does not depend on the values)."""
    shape = (net.batch, 1, 28, 28) if net.kind == "cnn" else (net.batch, net.in_features)
    x = torch.randn(shape, generator=gen)
    if net.task == "regression":
        return x, torch.randn(net.batch, generator=gen)
    return x, torch.randint(0, net.out_features, (net.batch,), generator=gen)


def _plain_nll(net: NetSpec, out: Tensor, y: Tensor) -> Tensor:
    """Per-datum negative log-likelihood (Gaussian with unit noise, or categorical)."""
    if net.task == "regression":
        return 0.5 * math.log(2 * math.pi) + 0.5 * F.mse_loss(out.squeeze(-1), y)
    return F.cross_entropy(out, y)


def plain_loss(net: NetSpec, out: Tensor, y: Tensor) -> Tensor:
    """The dense network's loss: mean squared error or cross-entropy."""
    if net.task == "regression":
        return F.mse_loss(out.squeeze(-1), y)
    return F.cross_entropy(out, y)


Step = Callable[[], None]


def _dense_step(net: NetSpec, x: Tensor, y: Tensor, gen: torch.Generator) -> tuple[Step, nn.Module]:
    model = dense_model(net)
    opt = make_optimizer(model.parameters(), "adam", net.lr)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = plain_loss(net, model(x), y)
        loss.backward()
        opt.step()

    return step, model


def _svbnn_step(net: NetSpec, x: Tensor, y: Tensor, gen: torch.Generator) -> tuple[Step, nn.Module]:
    model = svbnn_model(net, gen)
    lik: nn.Module = (
        GaussianLikelihood(1.0) if net.task == "regression" else CategoricalLikelihood()
    )
    opt = make_optimizer(model.parameters(), "adam", net.lr)

    def step() -> None:  # as svbnn.training.train steps
        opt.zero_grad(set_to_none=True)
        loss, _, _ = negative_elbo(model, lik, x, y, net.n_train)
        loss.backward()
        opt.step()

    return step, model


def _reference_step(
    net: NetSpec, x: Tensor, y: Tensor, gen: torch.Generator
) -> tuple[Step, nn.Module]:
    if net.kind == "cnn":
        model = reference_cnn(net.hidden[0], log_prior_inclusion=net.log_lambda())
    else:
        model = reference_mlp(
            net.in_features, net.hidden, net.out_features, log_prior_inclusion=net.log_lambda()
        )
    opt = make_optimizer(model.parameters(), "adam", net.lr)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = _plain_nll(net, model(x), y) + reference_kl(model) / net.n_train
        loss.backward()
        opt.step()

    return step, model


def _bayesian_torch_step(
    net: NetSpec, x: Tensor, y: Tensor, gen: torch.Generator
) -> tuple[Step, nn.Module]:
    model = _bayesian_torch_model(net)
    opt = make_optimizer(model.parameters(), "adam", net.lr)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        out, kl = model(x)
        loss = _plain_nll(net, out, y) + kl / net.n_train
        loss.backward()
        opt.step()

    return step, model


_STEP_BUILDERS: dict[
    str, Callable[[NetSpec, Tensor, Tensor, torch.Generator], tuple[Step, nn.Module]]
] = {
    DENSE: _dense_step,
    SVBNN: _svbnn_step,
    REFERENCE: _reference_step,
    BAYESIAN_TORCH: _bayesian_torch_step,
}


def build_step(
    net: NetSpec, impl: str, seed: int = 0, device: torch.device | str = "cpu"
) -> tuple[Step, nn.Module]:
    """A closure running one full training step of ``impl`` on ``net``, and its model.

    Every implementation uses the same optimiser (``svbnn.training.make_optimizer``: Adam,
    torch's fused implementation), so differences come from the layers and losses.
    On another ``device`` the model is built on the CPU (the same initialisation), moved
    there with its batch, and its variational layers draw from a generator on the device.
    """
    device = torch.device(device)
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # reference and bayesian-torch draw from the default generator
    x, y = synthetic_batch(net, gen)
    if impl not in _STEP_BUILDERS:
        raise ValueError(f"unknown implementation {impl!r}")
    if device.type == "cpu":
        return _STEP_BUILDERS[impl](net, x, y, gen)
    if impl in (REFERENCE, BAYESIAN_TORCH):
        raise ValueError(f"{impl} is timed on the CPU only")
    # The optimiser holds the parameters themselves, which .to() moves in place.
    step, model = _STEP_BUILDERS[impl](net, x.to(device), y.to(device), gen)
    model.to(device)
    set_generator(model, torch.Generator(device=device).manual_seed(seed))
    return step, model


def build_replicate_step(
    net: NetSpec, n_replicates: int | None, seed: int = 0
) -> tuple[Callable[[], None], nn.Module]:
    """One training step on the Simulation II network, on fixed minibatch rows (the peak
    memory section's step; the timings use :func:`build_replicate_training`).

    With ``n_replicates = R`` the data are ``(R, n, p)`` and each replicate gets its own
    minibatch rows, gathered inside the step; otherwise ``(n, p)``.
    """
    gen = torch.Generator().manual_seed(seed)
    model = svbnn_model(net, gen, n_replicates)
    lik = GaussianLikelihood(1.0)
    opt = make_optimizer(model.parameters(), "adam", net.lr)
    n, m = net.n_train, net.batch
    if n_replicates is None:
        X = torch.randn(n, net.in_features, generator=gen)
        y = torch.randn(n, generator=gen)
        idx = torch.randperm(n, generator=gen)[:m]

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            loss, _, _ = negative_elbo(model, lik, X[idx], y[idx], n)
            loss.backward()
            opt.step()

    else:
        R = n_replicates
        X = torch.randn(R, n, net.in_features, generator=gen)
        y = torch.randn(R, n, generator=gen)
        idx = torch.argsort(torch.rand(R, n, generator=gen), dim=1)[:, :m]
        # train's gather: one index_select on the (R n, p) view.
        flat_idx = (idx + n * torch.arange(R).unsqueeze(1)).reshape(-1)
        X_rows, y_rows = X.view(R * n, -1), y.view(R * n)

        def step() -> None:
            xb = X_rows.index_select(0, flat_idx).view(R, m, -1)
            yb = y_rows.index_select(0, flat_idx).view(R, m)
            opt.zero_grad(set_to_none=True)
            loss, _, _ = negative_elbo(model, lik, xb, yb, n)
            loss.sum().backward()
            opt.step()

    return step, model
