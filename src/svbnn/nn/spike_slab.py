"""Spike-and-slab variational layers (linear and 2-D convolution).

Every weight and bias ``theta_i`` has the variational law
``gamma_i N(mu_i, sigma_i^2) + (1 - gamma_i) delta_0``, ``gamma_i ~ Bern(phi_i)`` with
``sigma = softplus(rho)`` and ``phi = sigmoid(alpha)``.

Storage: a layer keeps its weights and bias in *one* matrix per variational parameter,
``(out, fan_in + 1)`` with the bias in the last column (``(R, out, fan_in + 1)`` when
replicated). One random draw, one fused sampling kernel and one fused KL per layer per
step, instead of two of each, halves the per-operation overhead that dominates small nets.
:class:`SpikeSlabMLP` goes further (all layers in one flat tensor, one draw + KL for the
network): that speed path lives in :mod:`svbnn._engine.fused`.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._engine import native as _native
from .._engine.fused import FusedEngine, GumbelSpikeSlab, run_feature_major
from .._engine.kernels import Backend, backend, softplus, spike_slab_moments
from .._engine.paths import native_network
from ..kl import SpikeSlab, SpikeSlabPrior, kl_divergence
from ..priors import check_prior_variance, resolve_log_inclusion
from .base import (
    ForwardMode,
    GatedLayer,
    Sampler,
    VariationalContainer,
    VariationalLayer,
    activation_module,
    conv_geometry,
)

__all__ = [
    "SpikeSlabConv2d",
    "SpikeSlabLinear",
    "SpikeSlabMLP",
    "gumbel_spike_slab",
    "inverse_cdf_spike_slab",
    "spike_slab_moments",
]


def gumbel_spike_slab(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    u: Tensor,
    eps: Tensor,
    temperature: float,
    compiled: bool | None = None,
) -> Tensor:
    """Draw spike-and-slab weights with the straight-through Gumbel-softmax sampler.

    Parameters
    ----------
    mu, rho, alpha : Tensor
        Variational parameters of shape ``S``.
    u : Tensor
        ``U(0, 1)`` draws of shape ``S``.
    eps : Tensor
        ``N(0, 1)`` draws of shape ``S``.
    temperature : float
        ``tau > 0``; shapes only the surrogate gradient, the forward value is an exact draw.
    compiled : bool, optional
        ``False`` runs the eager kernels whatever the backend; ``None`` (default) as the
        kernel backend says for this size.

    Returns
    -------
    Tensor
        Weights of shape ``S``; ``P(theta != 0) = phi`` exactly.
    """
    out: Tensor = GumbelSpikeSlab.apply(mu, rho, alpha, u, eps, float(temperature), compiled)
    return out


def inverse_cdf_spike_slab(mu: Tensor, rho: Tensor, alpha: Tensor, u: Tensor) -> Tensor:
    """Exact inverse-CDF draw of spike-and-slab weights (pathwise differentiable).

    The mixture ``phi N(mu, sigma^2) + (1 - phi) delta_0`` has a quantile function that is
    continuous in ``u``. With ``a = phi Phi(-mu / sigma)``: below ``a`` it is the slab's
    quantile at ``u / phi``, on ``[a, a + 1 - phi)`` it is 0, above it is the slab's quantile
    at ``(u - 1 + phi) / phi``.

    Parameters
    ----------
    mu, rho, alpha, u : Tensor
        Same shape ``S``; ``u ~ U(0, 1)``.

    Returns
    -------
    Tensor
        Weights of shape ``S``.
    """
    sigma = softplus(rho)
    phi = torch.sigmoid(alpha)
    a = phi * torch.special.ndtr(-mu / sigma)
    lower = u < a
    upper = u >= a + (1.0 - phi)
    tiny = torch.finfo(u.dtype).eps
    v = torch.where(lower, u / phi, (u - 1.0 + phi) / phi)
    v = torch.where(lower | upper, v, torch.full_like(v, 0.5)).clamp(tiny, 1.0 - tiny)
    theta = mu + sigma * torch.special.ndtri(v)
    return torch.where(lower | upper, theta, torch.zeros_like(theta))


def _log_prior_tensor(
    prior_inclusion: float | None,
    log_prior_inclusion: float | Tensor | None,
    factory: dict[str, Any],
) -> Tensor:
    """log-lambda as a tensor: a scalar, or one value per replicate (default lambda = 0.5)."""
    if log_prior_inclusion is None and prior_inclusion is None:
        log_lam = torch.tensor(math.log(0.5))
    elif isinstance(log_prior_inclusion, Tensor):
        log_lam = log_prior_inclusion.detach().clone()
        if not bool(torch.all(torch.isfinite(log_lam) & (log_lam < 0))):
            raise ValueError("log_prior_inclusion must be finite and < 0")
    else:
        log_lam = torch.tensor(resolve_log_inclusion(prior_inclusion, log_prior_inclusion))
    return log_lam.to(**factory)


def _draw(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    mode: ForwardMode,
    sampler: Sampler,
    temperature: float,
    generator: torch.Generator | None,
    compiled: bool | None = None,
) -> Tensor:
    """Weights under a forward mode, ``mu``-shaped (shared by layers and fused networks);
    ``compiled`` as :func:`gumbel_spike_slab` takes it."""
    if mode is ForwardMode.MEAN:
        return torch.sigmoid(alpha) * mu
    if mode is ForwardMode.MEDIAN:
        return mu * (alpha > 0)
    u = torch.rand(mu.shape, generator=generator, dtype=mu.dtype, device=mu.device)
    if sampler is Sampler.GUMBEL:
        eps = torch.randn(mu.shape, generator=generator, dtype=mu.dtype, device=mu.device)
        return gumbel_spike_slab(mu, rho, alpha, u, eps, temperature, compiled)
    return inverse_cdf_spike_slab(mu, rho, alpha, u)


def _eager_draws(layer: _SpikeSlabLayer) -> bool | None:
    """``False`` (eager kernels) for a layer of a network the native loops train under
    ``auto`` (a replicated float32 CPU layer of at most ``NARROW_MAX_OUT`` outputs): its
    draws outside training (predictions, frozen samples) are a few elementwise operations,
    not worth compiling a kernel for. ``None`` otherwise: as the backend says."""
    mu = layer.mu
    narrow = (
        backend() is Backend.AUTO
        and layer.n_replicates is not None
        and layer.out_features <= _native.NARROW_MAX_OUT
        and mu.device.type == "cpu"
        and mu.dtype == torch.float32
    )
    return False if narrow else None


TEMPERATURE_RANGE: tuple[float, float] = (1e-30, 1e30)
"""Gumbel-softmax temperatures the layers accept (measured: 1e-30 and 1e30 fit, 1e-300 gives
NaN gates at the first step)."""


def check_temperature(value: float) -> float:
    """``value`` if it is a temperature in :data:`TEMPERATURE_RANGE`, else a ``ValueError``
    naming ``temperature``."""
    low, high = TEMPERATURE_RANGE
    if not (math.isfinite(value) and low <= value <= high):
        raise ValueError(
            f"temperature must lie in [{low:g}, {high:g}], got {value}: outside it the "
            "relaxed gates' logits / temperature leave float32's range (NaN gates)"
        )
    return value


def _check_layer_args(
    out_features: int,
    fan_in: int,
    temperature: float,
    init_inclusion: float,
    n_replicates: int | None,
    prior_variance: float,
) -> None:
    """Raise ``ValueError`` for a layer argument out of its range."""
    if out_features < 1 or fan_in < 1:
        raise ValueError("layer sizes must be positive")
    check_temperature(temperature)
    if not (0.0 < init_inclusion < 1.0):
        raise ValueError(f"init_inclusion must lie in (0, 1), got {init_inclusion}")
    if n_replicates is not None and n_replicates < 1:
        raise ValueError(f"n_replicates must be positive, got {n_replicates}")
    check_prior_variance(prior_variance)


_SHARED_PARAMS = ("mu", "rho", "alpha")


class _SpikeSlabLayer(VariationalLayer, GatedLayer):
    """Storage, sampling and KL shared by the linear and convolutional layers.

    A layer owns its parameters ``mu``, ``rho``, ``alpha`` (and buffer
    ``log_prior_inclusion``), unless a :class:`SpikeSlabMLP` built it on shared storage:
    then the three are views of the network's flat parameters (``_flat`` holds the
    network's parameter and buffer dicts and this layer's column range) and the network
    draws all layers' weights in one fused call.
    """

    mu: Tensor
    rho: Tensor
    alpha: Tensor
    log_prior_inclusion: Tensor

    def __init__(
        self,
        out_features: int,
        fan_in: int,
        bias: bool,
        *,
        prior_variance: float = 2.0,
        prior_inclusion: float | None = None,
        log_prior_inclusion: float | Tensor | None = None,
        sampler: Sampler | str = Sampler.GUMBEL,
        temperature: float = 0.5,
        init_inclusion: float = 0.99,
        init_rho: float = -6.0,
        init_mu_range: float | None = None,
        n_replicates: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        _flat: tuple[dict[str, Any], dict[str, Any], int, int] | None = None,
    ) -> None:
        super().__init__()
        _check_layer_args(
            out_features, fan_in, temperature, init_inclusion, n_replicates, prior_variance
        )
        self.sampler = Sampler(sampler)
        self.temperature = float(temperature)
        self.prior_variance = float(prior_variance)
        self.n_replicates = n_replicates
        self.generator = generator
        self.has_bias = bias
        self.fan_in = fan_in
        self.out_features = out_features
        shape: tuple[int, ...] = (out_features, fan_in + int(bias))
        if n_replicates is not None:
            shape = (n_replicates, *shape)
        self._param_shape = shape
        self._flat = _flat
        if _flat is None:
            factory: dict[str, Any] = {"device": device, "dtype": dtype}
            self.mu = nn.Parameter(torch.empty(shape, **factory))
            self.rho = nn.Parameter(torch.empty(shape, **factory))
            self.alpha = nn.Parameter(torch.empty(shape, **factory))
            # log-lambda: a scalar, or one value per replicate (e.g. a lambda sweep).
            self.register_buffer(
                "log_prior_inclusion",
                _log_prior_tensor(prior_inclusion, log_prior_inclusion, factory),
            )
        self.reset_parameters(init_inclusion, init_rho, init_mu_range)

    def __getattr__(self, name: str) -> Any:
        # Views of the owning network's flat storage (only reached when the layer does not
        # hold the attribute itself, i.e. when it was built on shared storage).
        flat = self.__dict__.get("_flat")
        if flat is not None:
            params, buffers, start, stop = flat
            if name in _SHARED_PARAMS:
                return params[name][..., start:stop].view(self._param_shape)
            if name == "log_prior_inclusion":
                return buffers[name]
        return super().__getattr__(name)

    def reset_parameters(
        self,
        init_inclusion: float = 0.99,
        init_rho: float = -6.0,
        init_mu_range: float | None = None,
    ) -> None:
        """Start from a fully connected net (supplement B.2).

        ``phi = init_inclusion`` (close to 1), ``rho = init_rho`` and
        ``mu ~ U(-r, r)`` with ``r = init_mu_range``, or PyTorch's default
        ``r = 1 / sqrt(fan_in)`` when ``None``. The authors' code uses ``r = 0.6``.
        Draws from ``self.generator``.
        """
        r = 1.0 / math.sqrt(self.fan_in) if init_mu_range is None else float(init_mu_range)
        with torch.no_grad():
            self.mu.uniform_(-r, r, generator=self.generator)
            self.rho.fill_(init_rho)
            self.alpha.fill_(math.log(init_inclusion) - math.log1p(-init_inclusion))

    # -- summaries ---------------------------------------------------------------------
    def n_params(self) -> int:
        return self.out_features * (self.fan_in + int(self.has_bias))

    def _split(self, t: Tensor) -> tuple[Tensor, Tensor | None]:
        if self.has_bias:
            return t[..., : self.fan_in], t[..., self.fan_in]
        return t, None

    def inclusion_probs(self) -> dict[str, Tensor]:
        """Posterior inclusion probabilities ``phi``.

        Returns
        -------
        dict
            ``"weight"``: weight-shaped (with a leading ``R`` when replicated);
            ``"bias"``: ``(out,)`` or ``(R, out)``, present when the layer has a bias.
        """
        w, b = self._split(torch.sigmoid(self.alpha.detach()))
        out = {"weight": self._shape_weight(w)}
        if b is not None:
            out["bias"] = b
        return out

    def _shape_weight(self, w: Tensor) -> Tensor:
        return w

    def mean_weights(self) -> tuple[Tensor, Tensor | None]:
        """Posterior mean ``phi mu`` (no gradient): weight (weight-shaped) and bias."""
        with torch.no_grad():
            flat = _draw(self.mu, self.rho, self.alpha, ForwardMode.MEAN, self.sampler, 1.0, None)
        return self._weights_from_flat(flat)

    def median_weights(self, threshold: float = 0.5) -> tuple[Tensor, Tensor | None]:
        """The median model (no gradient): ``mu`` where ``phi > threshold``, else 0 (as
        :func:`svbnn.selection.export_sparse` keeps them)."""
        with torch.no_grad():
            flat = self.mu * (torch.sigmoid(self.alpha) > threshold)
        return self._weights_from_flat(flat)

    def kl_divergence(self) -> Tensor:
        """The exact spike-and-slab KL (registered in :mod:`svbnn.kl`); ``(R,)`` when
        replicated."""
        q = SpikeSlab(self.mu, self.rho, self.alpha)
        p = SpikeSlabPrior(self.log_prior_inclusion, self.prior_variance)
        return kl_divergence(q, p, batch_dims=0 if self.n_replicates is None else 1)

    # -- sampling ----------------------------------------------------------------------
    def sample_flat(self) -> Tensor:
        """Weights (bias column included) under the current forward mode, ``mu``-shaped."""
        args = (self.mode, self.sampler, self.temperature, self.generator)
        return _draw(self.mu, self.rho, self.alpha, *args, _eager_draws(self))

    def sample_weights(self) -> tuple[Tensor, Tensor | None]:
        return self._weights_from_flat(self.sample_flat())

    def _weights_from_flat(self, flat: Tensor) -> tuple[Tensor, Tensor | None]:
        w, b = self._split(flat)
        return self._shape_weight(w), b

    def _local_step(self) -> bool:
        """Whether this forward draws pre-activations, not weights: the ``LOCAL`` sampler
        in training (sampling, gradients on, no frozen draw)."""
        return (
            self.sampler is Sampler.LOCAL
            and self.mode is ForwardMode.SAMPLE
            and self._frozen is None
            and torch.is_grad_enabled()
        )

    def _product(self, x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        """The layer's map of ``x`` with weights ``w`` and bias ``b``."""
        raise NotImplementedError

    def forward(self, x: Tensor) -> Tensor:
        if not self._local_step():
            return self._product(x, *self._weights())
        # Local reparameterisation: each output entry is a sum of independent terms
        # x_i theta_i, whose mean and variance are the product's with the weights' means
        # and variances (x squared); one Gaussian draw per entry.
        mean, var = spike_slab_moments(self.mu, self.rho, self.alpha)
        m = self._product(x, *self._weights_from_flat(mean))
        v = self._product(x * x, *self._weights_from_flat(var))
        eps = torch.randn(m.shape, generator=self.generator, dtype=m.dtype, device=m.device)
        # (clamped: a variance that underflows to 0 would give sqrt an infinite gradient)
        return m + v.clamp_min(torch.finfo(v.dtype).tiny).sqrt() * eps

    def extra_repr(self) -> str:
        rep = f", n_replicates={self.n_replicates}" if self.n_replicates is not None else ""
        return (
            f"fan_in={self.fan_in}, out={self.out_features}, bias={self.has_bias}, "
            f"sampler={self.sampler.value}, temperature={self.temperature}, "
            f"prior_variance={self.prior_variance}{rep}"
        )


class SpikeSlabLinear(_SpikeSlabLayer):
    """Fully connected layer with a spike-and-slab variational posterior on every parameter.

    Parameters
    ----------
    in_features, out_features : int
        Layer sizes.
    bias : bool
        Whether the layer has biases (each with its own spike-and-slab law).

    Other Parameters
    ----------------
    prior_variance : float
        Slab variance ``sigma_0^2`` of the prior (paper: 2).
    prior_inclusion, log_prior_inclusion : float, optional
        Prior inclusion ``lambda`` or its log (give one; log-lambda may be ``-1000``, or a
        ``(R,)`` tensor with one value per replicate). Usually set for the whole model from
        :func:`svbnn.lambda_opt`.
    sampler : {"gumbel", "inverse_cdf", "local"}
        Training reparameterisation (:class:`~svbnn.nn.base.Sampler`; ``"local"`` draws
        each row's pre-activations, not weights, in training).
    temperature : float
        Gumbel-softmax temperature ``tau`` (paper: 0.5).
    init_inclusion, init_rho, init_mu_range : float
        Initial ``phi``, ``rho`` and half-range of ``mu`` (see ``reset_parameters``).
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

    def _product(self, x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        if self.n_replicates is None:
            return F.linear(x, w, b)
        if x.dim() != 3 or x.shape[0] != self.n_replicates:
            raise ValueError(
                f"replicated layer expects input (R={self.n_replicates}, m, in), "
                f"got {tuple(x.shape)}"
            )
        if b is None:
            return torch.bmm(x, w.transpose(1, 2))
        return torch.baddbmm(b.unsqueeze(1), x, w.transpose(1, 2))


class SpikeSlabConv2d(_SpikeSlabLayer):
    """2-D convolution with a spike-and-slab variational posterior on every kernel entry and bias.

    Parameters follow :class:`torch.nn.Conv2d` (``in_channels``, ``out_channels``,
    ``kernel_size``, ``stride``, ``padding``, ``dilation``, ``groups``, ``bias``) plus the
    variational options of :class:`SpikeSlabLinear` (no replicates).

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
            raise ValueError("SpikeSlabConv2d does not support n_replicates")
        self.kernel_shape, fan_in = conv_geometry(in_channels, out_channels, kernel_size, groups)
        ks = (self.kernel_shape[2], self.kernel_shape[3])
        super().__init__(out_channels, fan_in, bias, **kwargs)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = ks
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.groups = groups

    def _shape_weight(self, w: Tensor) -> Tensor:
        return w.reshape(self.kernel_shape)

    def _product(self, x: Tensor, w: Tensor, b: Tensor | None) -> Tensor:
        return F.conv2d(x, w, b, self.stride, self.padding, self.dilation, self.groups)


class SpikeSlabMLP(VariationalContainer):
    """Feed-forward network of :class:`SpikeSlabLinear` layers.

    Parameters
    ----------
    in_features : int
        Input dimension ``p``.
    hidden_sizes : sequence of int
        Widths of the hidden layers (``L = len(hidden_sizes)``).
    out_features : int
        Output dimension.
    activation : str
        Hidden activation.
    fused : bool
        Keep every layer's ``mu``, ``rho``, ``alpha`` in one flat parameter each (the
        layers hold views) and, in sampling mode, draw all weights with one random call and
        one fused kernel, and the KL with one more: a constant number of operations per
        step whatever the depth. Same distributions as ``fused=False``, but a different
        order of random draws, so a seed gives a different (equally valid) run.
    **layer_kwargs
        Passed to every :class:`SpikeSlabLinear` (prior, sampler, init, replicates, ...).

    Notes
    -----
    Shapes: ``(m, p) -> (m, out)``; replicated ``(R, m, p) -> (R, m, out)``.
    """

    mu: Tensor
    rho: Tensor
    alpha: Tensor
    log_prior_inclusion: Tensor

    def __init__(
        self,
        in_features: int,
        hidden_sizes: tuple[int, ...] | list[int],
        out_features: int,
        activation: str = "relu",
        fused: bool = True,
        **layer_kwargs: Any,
    ) -> None:
        super().__init__()
        sizes = [in_features, *hidden_sizes, out_features]
        self.in_features = in_features
        self.hidden_sizes = tuple(hidden_sizes)
        self.out_features = out_features
        self.activation = activation
        self.fused = fused
        widths = [(sizes[i] + 1) * sizes[i + 1] for i in range(len(sizes) - 1)]
        if fused:
            factory: dict[str, Any] = {
                "device": layer_kwargs.get("device"),
                "dtype": layer_kwargs.get("dtype"),
            }
            R = layer_kwargs.get("n_replicates")
            shape = (sum(widths),) if R is None else (R, sum(widths))
            for name in _SHARED_PARAMS:
                self.register_parameter(name, nn.Parameter(torch.empty(shape, **factory)))
            self.register_buffer(
                "log_prior_inclusion",
                _log_prior_tensor(
                    layer_kwargs.pop("prior_inclusion", None),
                    layer_kwargs.pop("log_prior_inclusion", None),
                    factory,
                ),
            )
        mods: list[nn.Module] = []
        start = 0
        for i in range(len(sizes) - 1):
            flat = None
            if fused:
                flat = (self._parameters, self._buffers, start, start + widths[i])
                start += widths[i]
            mods.append(SpikeSlabLinear(sizes[i], sizes[i + 1], _flat=flat, **layer_kwargs))
            if i < len(sizes) - 2:
                mods.append(activation_module(activation))
        self.net = nn.Sequential(*mods)
        # The fused training path (svbnn/_engine/fused.py) and its caches.
        self._fused = FusedEngine()

    def layers(self) -> list[SpikeSlabLinear]:
        """The spike-and-slab layers, input to output."""
        return [m for m in self.net if isinstance(m, SpikeSlabLinear)]

    def _run(self, x: Tensor) -> Tensor:
        # The layers one by one (each draws its own weights unless frozen).
        layers = self.layers()
        if x.dim() == 3 and layers and layers[0].n_replicates is not None:
            if not layers[0]._local_step():  # (local reparameterisation: each layer's own)
                return run_feature_major(self.net, x)
        out: Tensor = self.net(x)
        return out

    def forward(self, x: Tensor) -> Tensor:
        """Sampling and fused: every weight drawn at once (with the KL, when training), then
        the network on the flat weights; otherwise the layers one by one.

        Notes
        -----
        Shapes: ``(m, p) -> (m, out)``; replicated ``(R, m, p) -> (R, m, out)``.
        """
        out = self._fused.forward(self, x)
        return self._run(x) if out is None else out

    def _draw_flat(self, first: SpikeSlabLinear) -> Tensor:
        """All weights at once from the flat storage with the layers' sampler (``first``
        holds its settings): ``(T,)`` or ``(R, T)``."""
        args = (first.mode, first.sampler, first.temperature, first.generator)
        # A network the native loops train (auto) draws its other samples (predictions,
        # frozen draws) with the eager kernels too: nothing compiled for it, and those
        # draws are a few elementwise operations.
        compiled = False if native_network(self, self.layers()) else None
        return _draw(self.mu, self.rho, self.alpha, *args, compiled)

    def kl_divergence(self) -> Tensor:
        """KL of all layers: one fused call on the flat parameters when ``fused``.

        After a fused training forward, the KL computed in the same pass as the draw is
        returned once, if the parameters have not changed since.
        """
        kl = self._fused.kl_divergence(self)
        if kl is not None:
            return kl
        layers = self.layers()
        total = layers[0].kl_divergence()
        for layer in layers[1:]:
            total = total + layer.kl_divergence()
        return total

    def fused_negative_elbo(
        self, likelihood: object, x: Tensor, y: Tensor, n_train: float
    ) -> tuple[Tensor, Tensor, Tensor] | None:
        """The whole one-draw negative ELBO in one piece, under the ``auto`` kernel backend
        (:func:`svbnn.kernel_backend`), sampling with the Gumbel sampler, gradients on,
        ``x`` ``(m, p)`` and ``y`` ``(m,)`` (replicated: ``(R, m, p)`` and ``(R, m)``),
        and a likelihood whose ``fused_spec`` knows it: on svbnn's native loops as one
        autograd node where they run the network whole (narrow layers, float32 on the CPU,
        one thread) under a Gaussian likelihood with a float noise, else as one compiled
        graph for a small network (Gaussian with a float noise and one output, or
        categorical). ``None`` otherwise. See :meth:`VariationalContainer.fused_negative_elbo`.
        """
        return self._fused.negative_elbo(self, likelihood, x, y, n_train)

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Modules pickled before the engine held the caches in attributes of their own.
        for name in ("_kl_cache", "_log_lam_cache", "_scales_cache"):
            state.pop(name, None)
        state.setdefault("_fused", FusedEngine())
        super().__setstate__(state)

    def n_params(self) -> int:
        """``T``: weights and biases (per replicate)."""
        return sum(m.n_params() for m in self.layers())

    def set_log_prior_inclusion(self, log_inclusion: float | Tensor) -> None:
        """Set log-lambda in every layer (a float, or a ``(R,)`` tensor for replicates)."""
        for owner in [self] if self.fused else self.layers():
            old = owner.log_prior_inclusion
            value = torch.as_tensor(log_inclusion, dtype=old.dtype, device=old.device)
            if not bool(torch.all(torch.isfinite(value) & (value < 0))):
                raise ValueError("log prior inclusion must be finite and < 0")
            owner._buffers["log_prior_inclusion"] = value.clone()

    def _release_flat_storage(self) -> None:
        """Drop the flat parameters once no layer uses them (after a sparse export)."""
        if not any(isinstance(m, _SpikeSlabLayer) for m in self.net):
            for name in (*_SHARED_PARAMS, "log_prior_inclusion"):
                self._parameters.pop(name, None)
                self._buffers.pop(name, None)
