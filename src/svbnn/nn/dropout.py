"""Sparse variational dropout layers (VD; Molchanov, Ashukha & Vetrov, 2017).

Every weight has the variational law ``w = theta + sigma * eps``, ``eps ~ N(0, 1)`` (the
*additive noise reparameterisation*: ``theta`` and ``log sigma^2`` are the free parameters,
so the noise does not multiply ``theta`` and the gradient of ``theta`` has low variance).
The dropout rate is ``alpha = sigma^2 / theta^2``, kept as
``log_alpha = clamp(log sigma^2 - log theta^2, -8, 8)``. The prior is the improper
log-uniform ``p(|w|) ~ 1/|w|``, whose KL has no closed form; the layers return the
authors' approximation

``-KL(alpha) ~ k1 sigmoid(k2 + k3 log alpha) - 0.5 log(1 + 1/alpha) - k1``,
``k1 = 0.63576, k2 = 1.87320, k3 = 1.48695``

summed over the weights (it is 0 as ``alpha -> inf``). Biases are ordinary (point-estimated)
parameters, as in the authors' code, and carry no KL.

Training (``"sample"`` mode, no frozen draw) uses the local reparameterisation trick: the
pre-activations of a minibatch are drawn directly, ``b ~ N(x theta^T + bias, x^2 (sigma^2)^T)``,
independently per datum. Posterior draws for prediction (``frozen_sample``) sample the
weights themselves, shared by all rows. ``"mean"``/``"median"`` use ``theta`` with the
weights of ``log_alpha > 3`` set to zero (the authors' pruning rule and test-time network).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..kl import (
    VD_K1,
    VD_K2,
    VD_K3,
    AdditiveNoise,
    LogUniformPrior,
    kl_divergence,
    vd_kl_approximation,
)
from .base import ForwardMode, VariationalLayer, conv_geometry
from .gaussian import VariationalMLP, _check_sizes, replicated_linear

__all__ = [
    "VD_K1",
    "VD_K2",
    "VD_K3",
    "VariationalDropoutConv2d",
    "VariationalDropoutLinear",
    "VariationalDropoutMLP",
    "vd_kl_approximation",
]


class _VDLayer(VariationalLayer):
    """Parameters, KL, masks and weight draws shared by the linear and convolutional VD layers."""

    def __init__(
        self,
        weight_shape: tuple[int, ...],
        out_features: int,
        fan_in: int,
        bias: bool,
        *,
        threshold: float = 3.0,
        log_alpha_min: float = -8.0,
        log_alpha_max: float = 8.0,
        init_log_sigma2: float = -10.0,
        init_theta_range: float | None = None,
        prune_samples: bool = True,
        n_replicates: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _check_sizes(out_features, fan_in, n_replicates)
        if not (log_alpha_min < threshold < log_alpha_max):
            raise ValueError(
                "need log_alpha_min < threshold < log_alpha_max, got "
                f"{log_alpha_min}, {threshold}, {log_alpha_max}"
            )
        self.threshold = float(threshold)
        self.log_alpha_min = float(log_alpha_min)
        self.log_alpha_max = float(log_alpha_max)
        self.prune_samples = bool(prune_samples)
        self.n_replicates = n_replicates
        self.generator = generator
        self.has_bias = bias
        self.fan_in = fan_in
        self.out_features = out_features
        lead: tuple[int, ...] = () if n_replicates is None else (n_replicates,)
        factory: dict[str, Any] = {"device": device, "dtype": dtype}
        self.theta = nn.Parameter(torch.empty((*lead, *weight_shape), **factory))
        self.log_sigma2 = nn.Parameter(torch.empty((*lead, *weight_shape), **factory))
        if bias:
            self.bias = nn.Parameter(torch.empty((*lead, out_features), **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters(init_log_sigma2, init_theta_range)

    def reset_parameters(
        self, init_log_sigma2: float = -10.0, init_theta_range: float | None = None
    ) -> None:
        """``theta`` and the bias ``~ U(-r, r)`` (``r = 1/sqrt(fan_in)``, PyTorch's default
        scale, when ``None``) and ``log sigma^2 = init_log_sigma2`` (the authors' -10: the
        net starts as a nearly deterministic one). Draws from ``self.generator``.
        """
        r = 1.0 / math.sqrt(self.fan_in) if init_theta_range is None else float(init_theta_range)
        with torch.no_grad():
            self.theta.uniform_(-r, r, generator=self.generator)
            self.log_sigma2.fill_(init_log_sigma2)
            if self.bias is not None:
                self.bias.uniform_(-r, r, generator=self.generator)

    def n_params(self) -> int:
        return self.out_features * (self.fan_in + int(self.has_bias))

    def log_alpha(self) -> Tensor:
        """``clamp(log sigma^2 - log theta^2, min, max)``, weight-shaped.

        ``log theta^2`` is taken as ``2 log(|theta| + 1e-8)`` (finite at ``theta = 0``).
        """
        la = self.log_sigma2 - 2.0 * torch.log(self.theta.abs() + 1e-8)
        return la.clamp(self.log_alpha_min, self.log_alpha_max)

    def kept_mask(self) -> Tensor:
        """Weights kept by the pruning rule ``log_alpha <= threshold`` (weight-shaped bool)."""
        with torch.no_grad():
            return self.log_alpha() <= self.threshold

    def kept_bias_mask(self) -> Tensor | None:
        """Biases are never pruned: all ``True``; ``None`` without bias."""
        return None if self.bias is None else torch.ones_like(self.bias, dtype=torch.bool)

    def kl_divergence(self) -> Tensor:
        """Sum of :func:`~svbnn.kl.vd_kl_approximation` over the weights (registered in
        :mod:`svbnn.kl`); ``(R,)`` when replicated."""
        q, p = AdditiveNoise(self.log_alpha()), LogUniformPrior()
        return kl_divergence(q, p, batch_dims=0 if self.n_replicates is None else 1)

    def sample_weights(self) -> tuple[Tensor, Tensor | None]:
        """Weights under the current mode and the (deterministic) bias.

        ``"mean"``/``"median"``: ``theta`` masked by :meth:`kept_mask`. ``"sample"``:
        ``theta + sigma * eps``, masked too when ``prune_samples`` (the sparse network the
        method reports; without it the pruned weights add their large noise).
        """
        mask = self.log_alpha() <= self.threshold
        if self.mode is not ForwardMode.SAMPLE:
            return self.theta * mask, self.bias
        eps = torch.randn(
            self.theta.shape,
            generator=self.generator,
            dtype=self.theta.dtype,
            device=self.theta.device,
        )
        w = torch.addcmul(self.theta, torch.exp(0.5 * self.log_sigma2), eps)
        return (w * mask if self.prune_samples else w), self.bias

    def _lrt_noise(self, mean: Tensor, var: Tensor) -> Tensor:
        eps = torch.randn(
            mean.shape, generator=self.generator, dtype=mean.dtype, device=mean.device
        )
        # The small constant keeps the square root differentiable where var = 0.
        return torch.addcmul(mean, torch.sqrt(var + 1e-8), eps)

    def _local_reparam(self) -> bool:
        return self._frozen is None and self.mode is ForwardMode.SAMPLE

    def extra_repr(self) -> str:
        rep = f", n_replicates={self.n_replicates}" if self.n_replicates is not None else ""
        return (
            f"fan_in={self.fan_in}, out={self.out_features}, bias={self.has_bias}, "
            f"threshold={self.threshold}{rep}"
        )


class VariationalDropoutLinear(_VDLayer):
    """Fully connected sparse-VD layer.

    Parameters
    ----------
    in_features, out_features : int
        Layer sizes.
    bias : bool
        Whether the layer has a (deterministic) bias.

    Other Parameters
    ----------------
    threshold : float
        Prune weights with ``log_alpha > threshold`` (default 3, the authors').
    log_alpha_min, log_alpha_max : float
        Clamp of ``log_alpha`` (default ``[-8, 8]``, the authors' code).
    init_log_sigma2, init_theta_range : float
        Initial ``log sigma^2`` and half-range of the uniform initial ``theta``.
    prune_samples : bool
        Whether posterior weight draws zero the pruned weights.
    n_replicates : int, optional
        Hold ``R`` independent copies; inputs ``(R, m, in)`` map to ``(R, m, out)``.
    generator : torch.Generator, optional
        Source of the layer's randomness.

    Notes
    -----
    Shapes: input ``(..., in)`` (``(R, m, in)`` replicated), output ``(..., out)``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, **kwargs: Any):
        super().__init__((out_features, in_features), out_features, in_features, bias, **kwargs)
        self.in_features = in_features

    def forward(self, x: Tensor) -> Tensor:
        if self._local_reparam():
            mean = replicated_linear(x, self.theta, self.bias, self.n_replicates)
            var = replicated_linear(x * x, torch.exp(self.log_sigma2), None, self.n_replicates)
            return self._lrt_noise(mean, var)
        w, b = self._weights()
        return replicated_linear(x, w, b, self.n_replicates)


class VariationalDropoutConv2d(_VDLayer):
    """2-D convolution with sparse variational dropout on every kernel entry.

    Parameters follow :class:`torch.nn.Conv2d` plus the options of
    :class:`VariationalDropoutLinear` (no replicates). Training uses the local
    reparameterisation trick on the output feature maps: mean ``conv(x, theta)``, variance
    ``conv(x^2, sigma^2)``.

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
            raise ValueError("VariationalDropoutConv2d does not support n_replicates")
        shape, fan_in = conv_geometry(in_channels, out_channels, kernel_size, groups)
        super().__init__(shape, out_channels, fan_in, bias, **kwargs)
        self.kernel_shape = shape
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = shape[2:]
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.groups = groups

    def _conv(self, x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        return F.conv2d(x, w, b, self.stride, self.padding, self.dilation, self.groups)

    def forward(self, x: Tensor) -> Tensor:
        if self._local_reparam():
            mean = self._conv(x, self.theta, self.bias)
            var = self._conv(x * x, torch.exp(self.log_sigma2), None)
            return self._lrt_noise(mean, var)
        w, b = self._weights()
        return self._conv(x, w, b)


class VariationalDropoutMLP(VariationalMLP):
    """An MLP of :class:`VariationalDropoutLinear` layers (``**layer_kwargs`` to every layer)."""

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
            layer_cls=VariationalDropoutLinear,
            **layer_kwargs,
        )
