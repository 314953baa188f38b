"""What every variational layer of the library shares: forward modes, generators, KL sums,
activations."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from typing import Protocol, TypeGuard, runtime_checkable

import torch
from torch import Tensor, nn

__all__ = [
    "ACTIVATIONS",
    "activation_module",
    "conv_geometry",
    "ForwardMode",
    "GatedLayer",
    "Sampler",
    "is_gated_layer",
    "VariationalContainer",
    "VariationalLayer",
    "forward_mode",
    "frozen_sample",
    "kl_divergence",
    "set_generator",
    "variational_layers",
]


def conv_geometry(
    in_channels: int, out_channels: int, kernel_size: int | tuple[int, int], groups: int
) -> tuple[tuple[int, int, int, int], int]:
    """Kernel shape ``(out, in/groups, kh, kw)`` and fan-in of a 2-D convolution."""
    ks = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
    if len(ks) != 2 or min(ks) < 1:
        raise ValueError(f"kernel_size must be a positive int or pair, got {kernel_size}")
    if groups < 1 or in_channels % groups or out_channels % groups:
        raise ValueError("in_channels and out_channels must be divisible by groups")
    shape = (out_channels, in_channels // groups, int(ks[0]), int(ks[1]))
    return shape, shape[1] * shape[2] * shape[3]


ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "logistic": nn.Sigmoid,
    "identity": nn.Identity,
}
"""The hidden activations the networks know, by name."""


def activation_module(name: str) -> nn.Module:
    """The activation module for a name: relu, tanh, sigmoid/logistic or identity."""
    try:
        return ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(
            f"unknown activation {name!r}; choose from {sorted(ACTIVATIONS)}"
        ) from None


class ForwardMode(str, Enum):
    """How a variational layer turns its parameters into weights in ``forward``.

    ``SAMPLE`` draws fresh weights from q at every call (with the layer's training sampler,
    whose forward value is an exact draw from q); ``MEAN`` uses the posterior mean
    ``E_q[theta]``; ``MEDIAN`` uses the median model (spike-and-slab: ``mu`` where
    ``phi > 0.5``, else 0; Gaussian layers: ``mu``).
    """

    SAMPLE = "sample"
    MEAN = "mean"
    MEDIAN = "median"


class Sampler(str, Enum):
    """Reparameterisation used to draw spike-and-slab weights during training.

    ``GUMBEL``: straight-through Gumbel-softmax gates (the paper's); ``INVERSE_CDF``: the
    exact inverse-CDF draw of each weight. ``LOCAL``: local reparameterisation, which draws
    no weights in training: each row's pre-activations are drawn from the Gaussian with
    their exact mean and variance under q (:func:`svbnn.nn.spike_slab_moments`), with
    noise independent across rows, so the gates get gradients without Gumbel noise. It
    approximates the pre-activations' law (a sum of spike-and-slab terms is not Gaussian);
    outside training (no gradients, or a frozen draw) a ``LOCAL`` layer draws its weights
    exactly, as ``INVERSE_CDF`` does.
    """

    GUMBEL = "gumbel"
    INVERSE_CDF = "inverse_cdf"
    LOCAL = "local"


class VariationalLayer(nn.Module):
    """Base class of the library's Bayesian layers.

    Subclasses implement :meth:`kl_divergence` and :meth:`sample_weights`. A layer draws
    its random numbers from ``self.generator`` (``None`` means torch's default generator);
    :func:`set_generator` sets it for a whole model. With ``n_replicates = R`` the layer
    holds ``R`` independent copies of its parameters (leading dimension ``R``) and maps
    inputs ``(R, m, in)`` to ``(R, m, out)``: R replications trained as one network.
    """

    mode: ForwardMode
    generator: torch.Generator | None
    n_replicates: int | None

    def __init__(self) -> None:
        super().__init__()
        self.mode = ForwardMode.SAMPLE
        self.generator = None
        self.n_replicates = None
        self._frozen: tuple[Tensor, Tensor | None] | None = None

    def kl_divergence(self) -> Tensor:
        """KL(q || prior) of the layer: a scalar, or ``(R,)`` for replicated layers."""
        raise NotImplementedError

    def sample_weights(self) -> tuple[Tensor, Tensor | None]:
        """Weights and bias to use in the next forward pass under the current mode."""
        raise NotImplementedError

    def n_params(self) -> int:
        """Number of weights and biases (per replicate)."""
        raise NotImplementedError

    def _weights(self) -> tuple[Tensor, Tensor | None]:
        if self._frozen is not None:
            return self._frozen
        return self.sample_weights()


@runtime_checkable
class GatedLayer(Protocol):
    """A layer whose every parameter has a variational inclusion gate (e.g. spike-and-slab).

    Selection (:mod:`svbnn.selection`), training's sparsity record and the sparse export
    find a model's gated layers by this protocol (:func:`is_gated_layer`), so a new prior
    family with gates plugs in by providing the members (or by subclassing the protocol,
    as :class:`~svbnn.nn.SpikeSlabLinear` and :class:`~svbnn.nn.SpikeSlabConv2d` do).

    Attributes
    ----------
    alpha : Tensor
        Gate logits, ``phi = sigmoid(alpha)``: ``(out, fan_in + bias)`` (with a leading
        ``R`` when replicated), the bias column last.
    n_replicates : int or None
        ``R`` independent copies, or ``None``.
    """

    alpha: Tensor
    n_replicates: int | None

    def inclusion_probs(self) -> dict[str, Tensor]:
        """``phi`` per parameter: ``{"weight": weight-shaped, "bias": (out,)}`` (``"bias"``
        when the layer has one; a leading ``R`` when replicated)."""
        ...

    def kl_divergence(self) -> Tensor:
        """KL(q || prior) of the layer: a scalar, or ``(R,)`` when replicated."""
        ...

    def n_params(self) -> int:
        """Number of gated parameters (weights and biases, per replicate)."""
        ...

    def mean_weights(self) -> tuple[Tensor, Tensor | None]:
        """Posterior mean weights ``E_q[theta]`` and bias (``None`` without one)."""
        ...

    def median_weights(self, threshold: float = 0.5) -> tuple[Tensor, Tensor | None]:
        """The median model's weights and bias: the slab's centre where
        ``phi > threshold``, zero elsewhere."""
        ...


_GATED_METHODS = ("inclusion_probs", "kl_divergence", "n_params", "mean_weights", "median_weights")


def is_gated_layer(module: object) -> TypeGuard[GatedLayer]:
    """Whether ``module`` is a :class:`GatedLayer`: it subclasses the protocol (as
    svbnn's spike-and-slab layers do: one look at its class), or it has every member.

    Use this rather than ``isinstance(module, GatedLayer)``: from Python 3.12 a runtime
    protocol's ``isinstance`` looks members up statically, which misses a module's
    parameters (they live in ``module._parameters``), and before 3.12 it evaluates every
    member on every call.
    """
    cls = type(module)
    if GatedLayer in cls.__mro__:
        return True
    return (
        all(callable(getattr(cls, name, None)) for name in _GATED_METHODS)
        and hasattr(module, "n_replicates")
        and hasattr(module, "alpha")
    )


class VariationalContainer(nn.Module):
    """A module that computes the KL of all its variational layers itself (e.g. fused).

    It may also offer a faster route to the whole per-datum negative ELBO of a minibatch
    through :meth:`fused_negative_elbo`, which :func:`svbnn.training.negative_elbo` asks
    first; the model, the likelihood and the objective stay separate pieces otherwise.
    """

    def kl_divergence(self) -> Tensor:
        """KL(q || prior) of every variational layer inside: scalar or ``(R,)``."""
        raise NotImplementedError

    def fused_negative_elbo(
        self, likelihood: object, x: Tensor, y: Tensor, n_train: float
    ) -> tuple[Tensor, Tensor, Tensor] | None:
        """The one-draw per-datum negative ELBO by a fused path of this model, or ``None``.

        :func:`svbnn.training.negative_elbo` calls this (with one Monte Carlo draw) before
        its general path (forward, ``likelihood.log_prob``, :meth:`kl_divergence`). An
        override returns what that general path returns for the same draw, up to
        rounding, and consumes the model's random numbers as it would; it returns ``None``
        wherever it does not apply (an unknown likelihood, a shape or mode it does not
        handle), and the general path runs instead. A likelihood tells a fused path what
        it is through ``likelihood.fused_spec(out_features)``, which a fused path reads
        only through :func:`svbnn.objectives.fast_path_spec` (a closed set of kinds; any
        other likelihood takes the general path).

        Parameters
        ----------
        likelihood : object
            The likelihood (``log_prob(output, target) -> (..., m)``).
        x : Tensor
            ``(m, ...)`` inputs, or ``(R, m, ...)`` for a replicated model.
        y : Tensor
            ``(m,)`` targets, or ``(R, m)``.
        n_train : float
            The training-set size the KL is spread over (``n / w`` for a KL weight ``w``).

        Returns
        -------
        (loss, nll, kl) : tuple of Tensor, or None
            Scalars (``(R,)`` for R replicates): ``loss = nll + KL / n_train``
            (differentiable), ``nll`` and ``KL / n_train`` detached. ``None`` (the
            default): no fused path, use the general one.
        """
        return None


def variational_layers(model: nn.Module) -> list[VariationalLayer]:
    """All :class:`VariationalLayer` submodules of ``model`` in registration order."""
    return [m for m in model.modules() if isinstance(m, VariationalLayer)]


def kl_divergence(model: nn.Module) -> Tensor:
    """Sum of the KL terms of every variational layer of ``model``.

    A :class:`VariationalContainer` contributes its own (fused) KL for everything inside it.
    Returns a scalar, or ``(R,)`` for replicated models.
    """
    terms: list[Tensor] = []

    def visit(module: nn.Module) -> None:
        if isinstance(module, (VariationalLayer, VariationalContainer)):
            terms.append(module.kl_divergence())
            return
        for child in module.children():
            visit(child)

    visit(model)
    if not terms:
        raise ValueError("model has no variational layers")
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def set_generator(model: nn.Module, generator: torch.Generator | None) -> None:
    """Make every variational layer of ``model`` draw from ``generator``."""
    for layer in variational_layers(model):
        layer.generator = generator


@contextmanager
def forward_mode(model: nn.Module, mode: ForwardMode | str) -> Iterator[nn.Module]:
    """Temporarily set the forward mode of every variational layer of ``model``."""
    mode = ForwardMode(mode)
    layers = variational_layers(model)
    old = [layer.mode for layer in layers]
    try:
        for layer in layers:
            layer.mode = mode
        yield model
    finally:
        for layer, m in zip(layers, old, strict=True):
            layer.mode = m


@contextmanager
def frozen_sample(model: nn.Module) -> Iterator[nn.Module]:
    """Draw one set of weights (under the current mode) and reuse it for every forward call.

    Used at prediction time so that one posterior draw ``theta_h`` is applied to all row
    chunks of a large input. Draws without gradient.
    """
    layers = variational_layers(model)
    try:
        with torch.no_grad():
            for layer in layers:
                layer._frozen = layer.sample_weights()
        yield model
    finally:
        for layer in layers:
            layer._frozen = None
