"""Mean-field Gaussian variational layers: Bayes by Backprop (VBNN; Blundell et al., 2015).

Every weight and bias ``theta_i`` has the variational law ``N(mu_i, sigma_i^2)`` with
``sigma = softplus(rho)`` and the prior ``N(0, sigma_0^2)`` (default ``sigma_0^2 = 2``, the
paper's slab variance, so that VBNN differs from the spike-and-slab method only by the
spike). The KL is exact and closed form; training draws one weight sample per forward pass,
shared by the minibatch (the reparameterisation ``theta = mu + sigma * eps``), as the paper's
own method does.

Storage follows :mod:`svbnn.nn.spike_slab`: one ``(out, fan_in + 1)`` matrix per variational
parameter with the bias in the last column (``(R, out, fan_in + 1)`` with ``n_replicates``).

This module also holds :func:`replicated_linear` and :class:`VariationalMLP`, shared by the
other baselines' layers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..kl import GaussianPrior, MeanFieldGaussian, kl_divergence
from ..priors import check_prior_variance
from .base import ForwardMode, VariationalLayer, activation_module, conv_geometry

__all__ = [
    "GaussianConv2d",
    "GaussianLinear",
    "GaussianMLP",
    "VariationalMLP",
    "replicated_linear",
]


def replicated_linear(
    x: Tensor, weight: Tensor, bias: Tensor | None, n_replicates: int | None
) -> Tensor:
    """Affine map for plain or replicated layers.

    Parameters
    ----------
    x : Tensor
        ``(..., in)``, or ``(R, m, in)`` when ``n_replicates = R``.
    weight : Tensor
        ``(out, in)`` or ``(R, out, in)``.
    bias : Tensor or None
        ``(out,)`` or ``(R, out)``.
    n_replicates : int or None

    Returns
    -------
    Tensor
        ``(..., out)`` or ``(R, m, out)``.
    """
    if n_replicates is None:
        return F.linear(x, weight, bias)
    if x.dim() != 3 or x.shape[0] != n_replicates:
        raise ValueError(
            f"replicated layer expects input (R={n_replicates}, m, in), got {tuple(x.shape)}"
        )
    if bias is None:
        return torch.bmm(x, weight.transpose(1, 2))
    return torch.baddbmm(bias.unsqueeze(1), x, weight.transpose(1, 2))


def _check_sizes(out_features: int, fan_in: int, n_replicates: int | None) -> None:
    if out_features < 1 or fan_in < 1:
        raise ValueError("layer sizes must be positive")
    if n_replicates is not None and n_replicates < 1:
        raise ValueError(f"n_replicates must be positive, got {n_replicates}")


class _GaussianLayer(VariationalLayer):
    """Storage, sampling and exact KL shared by the Gaussian linear and convolutional layers."""

    def __init__(
        self,
        out_features: int,
        fan_in: int,
        bias: bool,
        *,
        prior_variance: float = 2.0,
        init_rho: float = -6.0,
        init_mu_range: float | None = None,
        n_replicates: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _check_sizes(out_features, fan_in, n_replicates)
        self.prior_variance = check_prior_variance(prior_variance)
        self.n_replicates = n_replicates
        self.generator = generator
        self.has_bias = bias
        self.fan_in = fan_in
        self.out_features = out_features
        shape: tuple[int, ...] = (out_features, fan_in + int(bias))
        if n_replicates is not None:
            shape = (n_replicates, *shape)
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.mu = nn.Parameter(torch.empty(shape, **factory))
        self.rho = nn.Parameter(torch.empty(shape, **factory))
        self.reset_parameters(init_rho, init_mu_range)

    def reset_parameters(self, init_rho: float = -6.0, init_mu_range: float | None = None) -> None:
        """``mu ~ U(-r, r)`` (``r = 1/sqrt(fan_in)`` when ``None``) and ``rho = init_rho``.

        The same initialisation as the spike-and-slab layers, so that the two methods start
        from the same network. Draws from ``self.generator``.
        """
        r = 1.0 / math.sqrt(self.fan_in) if init_mu_range is None else float(init_mu_range)
        with torch.no_grad():
            self.mu.uniform_(-r, r, generator=self.generator)
            self.rho.fill_(init_rho)

    # -- summaries ---------------------------------------------------------------------
    def n_params(self) -> int:
        return self.out_features * (self.fan_in + int(self.has_bias))

    def _split(self, t: Tensor) -> tuple[Tensor, Tensor | None]:
        if self.has_bias:
            return t[..., : self.fan_in], t[..., self.fan_in]
        return t, None

    def _shape_weight(self, w: Tensor) -> Tensor:
        return w

    def kept_mask(self) -> Tensor:
        """Weights the method keeps: all of them (VBNN does not sparsify), weight-shaped bool."""
        w, _ = self._split(self.mu.detach())
        return torch.ones_like(self._shape_weight(w), dtype=torch.bool)

    def kept_bias_mask(self) -> Tensor | None:
        """Biases kept: all, ``(out,)`` or ``(R, out)``; ``None`` without bias."""
        _, b = self._split(self.mu.detach())
        return None if b is None else torch.ones_like(b, dtype=torch.bool)

    def kl_divergence(self) -> Tensor:
        """Exact ``sum_i KL(N(mu_i, sigma_i^2) || N(0, sigma_0^2))`` (registered in
        :mod:`svbnn.kl`); ``(R,)`` when replicated."""
        q, p = MeanFieldGaussian(self.mu, self.rho), GaussianPrior(self.prior_variance)
        return kl_divergence(q, p, batch_dims=0 if self.n_replicates is None else 1)

    # -- sampling ----------------------------------------------------------------------
    def sample_flat(self) -> Tensor:
        """Weights (bias column included) under the current mode, ``mu``-shaped.

        ``"mean"`` and ``"median"`` both give ``mu`` (a Gaussian's mean and median).
        """
        if self.mode is not ForwardMode.SAMPLE:
            return self.mu
        eps = torch.randn(
            self.mu.shape, generator=self.generator, dtype=self.mu.dtype, device=self.mu.device
        )
        return torch.addcmul(self.mu, F.softplus(self.rho), eps)

    def sample_weights(self) -> tuple[Tensor, Tensor | None]:
        w, b = self._split(self.sample_flat())
        return self._shape_weight(w), b

    def extra_repr(self) -> str:
        rep = f", n_replicates={self.n_replicates}" if self.n_replicates is not None else ""
        return (
            f"fan_in={self.fan_in}, out={self.out_features}, bias={self.has_bias}, "
            f"prior_variance={self.prior_variance}{rep}"
        )


class GaussianLinear(_GaussianLayer):
    """Fully connected Bayes-by-Backprop layer (mean-field Gaussian posterior and prior).

    Parameters
    ----------
    in_features, out_features : int
        Layer sizes.
    bias : bool
        Whether the layer has (variational) biases.

    Other Parameters
    ----------------
    prior_variance : float
        ``sigma_0^2`` of the ``N(0, sigma_0^2)`` prior on every weight and bias (default 2).
    init_rho, init_mu_range : float
        Initial ``rho`` (``sigma = softplus(rho)``) and half-range of the uniform initial
        means (``None``: ``1/sqrt(fan_in)``).
    n_replicates : int, optional
        Hold ``R`` independent copies; inputs ``(R, m, in)`` map to ``(R, m, out)``.
    generator : torch.Generator, optional
        Source of the layer's randomness (initialisation and draws).

    Notes
    -----
    Shapes: input ``(..., in)`` (``(R, m, in)`` replicated), output ``(..., out)``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, **kwargs: Any):
        super().__init__(out_features, in_features, bias, **kwargs)
        self.in_features = in_features

    def forward(self, x: Tensor) -> Tensor:
        w, b = self._weights()
        return replicated_linear(x, w, b, self.n_replicates)


class GaussianConv2d(_GaussianLayer):
    """2-D convolution with a mean-field Gaussian posterior on every kernel entry and bias.

    Parameters follow :class:`torch.nn.Conv2d` plus the variational options of
    :class:`GaussianLinear` (no replicates).

    Notes
    -----
    Shapes: input ``(m, C_in, H, W)``, output ``(m, C_out, H', W')``.
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        **kwargs: Any,
    ) -> None:
        if kwargs.get("n_replicates") is not None:
            raise ValueError("GaussianConv2d does not support n_replicates")
        self.kernel_shape, fan_in = conv_geometry(in_channels, out_channels, kernel_size, groups)
        super().__init__(out_channels, fan_in, bias, **kwargs)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = self.kernel_shape[2:]
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.groups = groups

    def _shape_weight(self, w: Tensor) -> Tensor:
        return w.reshape(self.kernel_shape)

    def forward(self, x: Tensor) -> Tensor:
        w, b = self._weights()
        return F.conv2d(x, w, b, self.stride, self.padding, self.dilation, self.groups)


class VariationalMLP(nn.Module):
    """Feed-forward network of variational linear layers of one kind.

    Parameters
    ----------
    in_features : int
        Input dimension ``p``.
    hidden_sizes : sequence of int
        Hidden widths.
    out_features : int
        Output dimension.
    activation : str
        Hidden activation (``relu``, ``tanh``, ``sigmoid``/``logistic``, ``identity``).
    layer_cls : callable
        The layer class (or factory), called as ``layer_cls(in, out, **kwargs)``.
    output_kwargs : dict, optional
        Keyword arguments that replace ``layer_kwargs`` entries for the output layer only.
    **layer_kwargs
        Passed to every layer.

    Notes
    -----
    Shapes: ``(m, p) -> (m, out)``; replicated ``(R, m, p) -> (R, m, out)``.
    """

    def __init__(
        self,
        in_features: int,
        hidden_sizes: tuple[int, ...] | list[int],
        out_features: int,
        activation: str = "relu",
        *,
        layer_cls: Callable[..., VariationalLayer],
        output_kwargs: dict[str, Any] | None = None,
        **layer_kwargs: Any,
    ) -> None:
        super().__init__()
        sizes = [in_features, *hidden_sizes, out_features]
        if any(int(s) != s or s < 1 for s in sizes):
            raise ValueError(f"layer sizes must be positive integers, got {sizes}")
        self.in_features = in_features
        self.hidden_sizes = tuple(hidden_sizes)
        self.out_features = out_features
        self.activation = activation
        mods: list[nn.Module] = []
        for i in range(len(sizes) - 1):
            last = i == len(sizes) - 2
            kwargs = {**layer_kwargs, **(output_kwargs or {})} if last else layer_kwargs
            mods.append(layer_cls(sizes[i], sizes[i + 1], **kwargs))
            if not last:
                mods.append(activation_module(activation))
        self.net = nn.Sequential(*mods)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.net(x)
        return out

    def layers(self) -> list[VariationalLayer]:
        """The variational layers, input to output."""
        return [m for m in self.net if isinstance(m, VariationalLayer)]

    def n_params(self) -> int:
        """``T``: weights and biases (per replicate)."""
        return sum(m.n_params() for m in self.layers())


class GaussianMLP(VariationalMLP):
    """VBNN: an MLP of :class:`GaussianLinear` layers (``**layer_kwargs`` go to every layer)."""

    def __init__(
        self,
        in_features: int,
        hidden_sizes: tuple[int, ...] | list[int],
        out_features: int,
        activation: str = "relu",
        **layer_kwargs: Any,
    ) -> None:
        super().__init__(
            in_features,
            hidden_sizes,
            out_features,
            activation,
            layer_cls=GaussianLinear,
            **layer_kwargs,
        )
