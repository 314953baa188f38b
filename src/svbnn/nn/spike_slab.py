"""Spike-and-slab variational layers (linear and 2-D convolution).

Every weight and bias ``theta_i`` has the variational law
``gamma_i N(mu_i, sigma_i^2) + (1 - gamma_i) delta_0``, ``gamma_i ~ Bern(phi_i)`` with
``sigma = softplus(rho)`` and ``phi = sigmoid(alpha)``.

Storage: a layer keeps its weights and bias in *one* matrix per variational parameter,
``(out, fan_in + 1)`` with the bias in the last column (``(R, out, fan_in + 1)`` when
replicated). One random draw, one fused sampling kernel and one fused KL per layer per
step, instead of two of each, halves the per-operation overhead that dominates small nets.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._kernels import (
    activate,
    gumbel_backward_saved,
    gumbel_forward_saving,
    kernels,
    mlp_draw_forward,
    mlp_negative_elbo,
    use_compiled,
    use_whole_network,
    whole_network_kernel,
)
from ..objectives import CategoricalLikelihood, GaussianLikelihood, spike_slab_kl
from ..priors import log1mexp, resolve_log_inclusion
from .base import ForwardMode, Sampler, VariationalContainer, VariationalLayer, conv_geometry

__all__ = [
    "SpikeSlabConv2d",
    "SpikeSlabLinear",
    "SpikeSlabMLP",
    "gumbel_spike_slab",
    "inverse_cdf_spike_slab",
]


class _GumbelSpikeSlab(torch.autograd.Function):
    """Straight-through Gumbel-softmax spike-and-slab draw with a fused backward pass.

    Forward: ``theta = 1[eta > 0] (mu + sigma eps)``, ``eta = alpha + logit(u)``.
    Backward uses the relaxed gate ``g~ = sigmoid(eta / tau)`` (Algorithm 1), i.e. the same
    gradients as autograd through ``gate = g + g~ - g~.detach()``.
    """

    @staticmethod
    def forward(
        ctx: Any, mu: Tensor, rho: Tensor, alpha: Tensor, u: Tensor, eps: Tensor, tau: float
    ) -> Tensor:
        ctx.tau = tau
        ctx.compiled = use_compiled(mu.numel())
        if ctx.compiled:
            # Fused kernels on 1-D views; the backward recomputes from the inputs.
            flat = [t.reshape(-1) for t in (mu, rho, alpha, u, eps)]
            ctx.save_for_backward(*flat)
            out: Tensor = kernels(True)["gumbel_forward"](*flat).view(mu.shape)
            return out
        w, saved = gumbel_forward_saving(mu, rho, alpha, u, eps, tau)
        ctx.save_for_backward(*saved)
        return w

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        if ctx.compiled:
            shape = grad.shape
            grads = kernels(True)["gumbel_backward"](grad.reshape(-1), *ctx.saved_tensors, ctx.tau)
            g_mu, g_rho, g_alpha = (g.view(shape) for g in grads)
        else:
            g_mu, g_rho, g_alpha = gumbel_backward_saved(grad, ctx.saved_tensors)
        return g_mu, g_rho, g_alpha, None, None, None


class _FusedGumbelKL(torch.autograd.Function):
    """Gumbel straight-through draw and exact KL of flat parameters in one fused pass.

    Forward returns ``(theta, kl)``; the backward takes both incoming gradients and returns
    ``d/dmu, d/drho, d/dalpha`` of ``<g_theta, theta> + <g_kl, kl>`` in one more pass from
    elementwise factors the forward saved. Noise: either ``u, eps`` (drawn from torch's
    generator, eager kernels) or a two-word ``seed`` for the counter-based noise of the
    compiled kernel (:func:`svbnn._kernels.counter_noise`).
    """

    @staticmethod
    def forward(
        ctx: Any,
        mu: Tensor,
        rho: Tensor,
        alpha: Tensor,
        log_lam: Tensor,
        log_1mlam: Tensor,
        noise: tuple[Tensor, ...],
        tau: float,
        log_sigma0: float,
        compiled: bool,
    ) -> tuple[Tensor, Tensor]:
        var0 = math.exp(2.0 * log_sigma0)
        consts = (log_lam, log_1mlam, log_sigma0, var0, tau)
        if len(noise) == 1:
            out = kernels(compiled)["fused_forward"](mu, rho, alpha, noise[0], *consts)
        else:
            compiled = False
            out = kernels(False)["fused_forward_given_noise"](mu, rho, alpha, *noise, *consts)
        ctx.compiled = compiled
        theta, kl, *saved = out
        ctx.save_for_backward(theta, *saved)
        return theta, kl

    @staticmethod
    def backward(
        ctx: Any, g_theta: Tensor | None, g_kl: Tensor | None
    ) -> tuple[Tensor | None, ...]:
        saved = ctx.saved_tensors
        shape = saved[0].shape
        if g_theta is None:
            g_theta = torch.zeros(shape, dtype=saved[0].dtype, device=saved[0].device)
        if g_kl is None:
            g_kl = torch.zeros(shape[:-1], dtype=saved[0].dtype, device=saved[0].device)
        grads = kernels(ctx.compiled)["fused_backward"](g_theta, g_kl.unsqueeze(-1), *saved)
        return (*grads, None, None, None, None, None, None)


def _activation_grad(g: Tensor, out: Tensor, name: str) -> Tensor:
    """``g * act'(pre)`` from the activation's output ``out``."""
    if name == "relu":
        return torch.ops.aten.threshold_backward(g, out, 0.0)
    if name == "tanh":
        return g * (1.0 - out * out)
    if name in ("sigmoid", "logistic"):
        return g * (out * (1.0 - out))
    return g


class _FlatMLP(torch.autograd.Function):
    """A whole fully connected network on flat weights ``theta``: its gradient is written
    straight into one flat buffer.

    Layer ``i`` reads ``theta[start_i:end_i]`` as an ``(out, in + 1)`` matrix (bias in the
    last column) without copying (BLAS takes the row stride ``in + 1``); the backward
    writes each layer's weight gradient into its rows of the flat gradient with
    ``mm(out=...)``. Through ``split`` and per-layer views, autograd would instead zero-fill
    a padded copy of every weight gradient and concatenate them (three extra passes over
    the parameters; about 3 ms of a profiled MNIST step).
    """

    @staticmethod
    def forward(
        ctx: Any,
        theta: Tensor,
        x: Tensor,
        shapes: tuple[tuple[int, int], ...],
        activation: str,
    ) -> Tensor:
        hs = [x]
        weights = []
        start = 0
        for i, (n_out, n_in) in enumerate(shapes):
            wb = theta[start : start + n_out * (n_in + 1)].view(n_out, n_in + 1)
            start += n_out * (n_in + 1)
            weights.append(wb[:, :n_in])
            h = torch.addmm(wb[:, n_in], hs[-1], weights[-1].t())
            hs.append(activate(h, activation) if i < len(shapes) - 1 else h)
        ctx.shapes = shapes
        ctx.activation = activation
        ctx.weights = weights  # views of theta, which nothing modifies in place
        ctx.save_for_backward(theta, *hs[:-1])
        return hs[-1]

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        theta, *hs = ctx.saved_tensors  # theta: its version is checked, not read
        shapes = ctx.shapes
        grad = torch.empty_like(theta)
        ends = []
        end = 0
        for n_out, n_in in shapes:
            end += n_out * (n_in + 1)
            ends.append(end)
        g_x = None
        for i in range(len(shapes) - 1, -1, -1):
            n_out, n_in = shapes[i]
            gwb = grad[ends[i] - n_out * (n_in + 1) : ends[i]].view(n_out, n_in + 1)
            torch.mm(g.t(), hs[i], out=gwb[:, :n_in])
            torch.sum(g, 0, out=gwb[:, n_in])
            if i > 0 or ctx.needs_input_grad[1]:
                g = g @ ctx.weights[i]
                if i > 0:
                    g = _activation_grad(g, hs[i], ctx.activation)
                else:
                    g_x = g
        return grad, g_x, None, None


def gumbel_spike_slab(
    mu: Tensor, rho: Tensor, alpha: Tensor, u: Tensor, eps: Tensor, temperature: float
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

    Returns
    -------
    Tensor
        Weights of shape ``S``; ``P(theta != 0) = phi`` exactly.
    """
    out: Tensor = _GumbelSpikeSlab.apply(mu, rho, alpha, u, eps, float(temperature))
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
    sigma = F.softplus(rho)
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
) -> Tensor:
    """Weights under a forward mode, ``mu``-shaped (shared by layers and fused networks)."""
    if mode is ForwardMode.MEAN:
        return torch.sigmoid(alpha) * mu
    if mode is ForwardMode.MEDIAN:
        return mu * (alpha > 0)
    u = torch.rand(mu.shape, generator=generator, dtype=mu.dtype, device=mu.device)
    if sampler is Sampler.GUMBEL:
        eps = torch.randn(mu.shape, generator=generator, dtype=mu.dtype, device=mu.device)
        return gumbel_spike_slab(mu, rho, alpha, u, eps, temperature)
    return inverse_cdf_spike_slab(mu, rho, alpha, u)


_SHARED_PARAMS = ("mu", "rho", "alpha")

# SpikeSlabMLP's draw + KL uses the counter-based noise and the compiled kernel where the
# kernels run compiled (a name of its own so that tests can run that path eagerly).
_fused_path = use_compiled


class _SpikeSlabLayer(VariationalLayer):
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
        if out_features < 1 or fan_in < 1:
            raise ValueError("layer sizes must be positive")
        if not (temperature > 0 and math.isfinite(temperature)):
            raise ValueError(f"temperature must be positive, got {temperature}")
        if not (0.0 < init_inclusion < 1.0):
            raise ValueError(f"init_inclusion must lie in (0, 1), got {init_inclusion}")
        if n_replicates is not None and n_replicates < 1:
            raise ValueError(f"n_replicates must be positive, got {n_replicates}")
        if not (math.isfinite(prior_variance) and prior_variance > 0):
            raise ValueError(f"prior_variance must be positive, got {prior_variance}")
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

    def kl_divergence(self) -> Tensor:
        batch_dims = 0 if self.n_replicates is None else 1
        return spike_slab_kl(
            self.mu,
            self.rho,
            self.alpha,
            self.log_prior_inclusion,
            self.prior_variance,
            batch_dims=batch_dims,
        )

    # -- sampling ----------------------------------------------------------------------
    def sample_flat(self) -> Tensor:
        """Weights (bias column included) under the current forward mode, ``mu``-shaped."""
        return _draw(
            self.mu, self.rho, self.alpha, self.mode, self.sampler, self.temperature, self.generator
        )

    def sample_weights(self) -> tuple[Tensor, Tensor | None]:
        return self._weights_from_flat(self.sample_flat())

    def _weights_from_flat(self, flat: Tensor) -> tuple[Tensor, Tensor | None]:
        w, b = self._split(flat)
        return self._shape_weight(w), b

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
    prior_variance : float
        Slab variance ``sigma_0^2`` of the prior (paper: 2).
    prior_inclusion, log_prior_inclusion : float, optional
        Prior inclusion ``lambda`` or its log (give one; log-lambda may be ``-1000``, or a
        ``(R,)`` tensor with one value per replicate). Usually set for the whole model from
        :func:`svbnn.lambda_opt`.
    sampler : {"gumbel", "inverse_cdf"}
        Training reparameterisation.
    temperature : float
        Gumbel-softmax temperature ``tau`` (paper: 0.5).
    init_inclusion, init_rho, init_mu_range : float
        Initial ``phi``, ``rho`` and half-range of ``mu`` (see ``reset_parameters``).
    n_replicates : int, optional
        Hold ``R`` independent copies; inputs ``(R, m, in)`` map to ``(R, m, out)``.
    generator : torch.Generator, optional
        Source of the layer's randomness (initialisation and draws).

    Shapes: input ``(..., in)`` (``(R, m, in)`` replicated), output ``(..., out)``.
    """

    def __init__(self, in_features: int, out_features: int, bias: bool = True, **kwargs: Any):
        super().__init__(out_features, in_features, bias, **kwargs)
        self.in_features = in_features

    def forward(self, x: Tensor) -> Tensor:
        w, b = self._weights()
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

    def forward(self, x: Tensor) -> Tensor:
        w, b = self._weights()
        return F.conv2d(x, w, b, self.stride, self.padding, self.dilation, self.groups)


_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "sigmoid": nn.Sigmoid,
    "logistic": nn.Sigmoid,
    "identity": nn.Identity,
}


def activation_module(name: str) -> nn.Module:
    """The activation module for a name: relu, tanh, sigmoid/logistic or identity."""
    try:
        return _ACTIVATIONS[name]()
    except KeyError:
        raise ValueError(
            f"unknown activation {name!r}; choose from {sorted(_ACTIVATIONS)}"
        ) from None


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
        self._kl_cache: tuple[Tensor, tuple[Any, ...]] | None = None
        self._log_lam_cache: tuple[tuple[Any, ...], Tensor, Tensor] | None = None
        self._scales_cache: tuple[tuple[Any, ...], Tensor] | None = None

    def layers(self) -> list[SpikeSlabLinear]:
        """The spike-and-slab layers, input to output."""
        return [m for m in self.net if isinstance(m, SpikeSlabLinear)]

    def _fused_draw_ok(self, layers: list[SpikeSlabLinear]) -> bool:
        if not (self.fused and layers and "mu" in self._parameters):
            return False
        first = layers[0]
        return first.mode is ForwardMode.SAMPLE and all(
            layer._flat is not None
            and layer._frozen is None
            and layer.mode is first.mode
            and layer.sampler is first.sampler
            and layer.temperature == first.temperature
            for layer in layers
        )

    def _run(self, x: Tensor) -> Tensor:
        if x.dim() != 3 or not self.layers() or self.layers()[0].n_replicates is None:
            out: Tensor = self.net(x)
            return out
        # Replicated: run feature-major, h = W h with h of shape (R, features, m). BLAS is
        # several times faster on (R, out, in) @ (R, in, m) than on (R, m, in) @ (R, in, out)
        # for the narrow layers of these networks (measured: 0.04 vs 0.39 ms for 7x7, m=512).
        h = x.transpose(1, 2)
        for module in self.net:
            if isinstance(module, SpikeSlabLinear):
                if h.shape[0] != module.n_replicates:
                    raise ValueError(
                        f"replicated network expects input (R={module.n_replicates}, m, in), "
                        f"got {tuple(x.shape)}"
                    )
                w, b = module._weights()
                h = torch.bmm(w, h) if b is None else torch.baddbmm(b.unsqueeze(-1), w, h)
            else:
                h = module(h)
        return h.transpose(1, 2)

    def forward(self, x: Tensor) -> Tensor:
        layers = self.layers()
        if not self._fused_draw_ok(layers):
            return self._run(x)
        first = layers[0]
        self._kl_cache = None
        if self._whole_network_ok(x, layers):
            # Small network, training step: draw, KL and layers as one compiled graph.
            key = self._kl_key()
            tensors, static = self._whole_network_inputs(first, layers, key)
            out, kl = whole_network_kernel(mlp_draw_forward, *static)(x, *tensors)
            self._kl_cache = (kl, key)
            return out
        if self._fused_kl_ok(layers):
            # Training step: draw and KL in one fused pass; kl_divergence() picks the KL up
            # (as long as the parameters are unchanged), so its gradient joins the draw's.
            key = self._kl_key()
            flat, kl = self._draw_with_kl(first, key)
            self._kl_cache = (kl, key)
        else:
            flat = _draw(
                self.mu,
                self.rho,
                self.alpha,
                first.mode,
                first.sampler,
                first.temperature,
                first.generator,
            )
        if self._flat_mlp_ok(x, layers):
            shapes = tuple((layer.out_features, layer.fan_in) for layer in layers)
            out_flat: Tensor = _FlatMLP.apply(flat, x, shapes, self.activation)
            return out_flat
        widths = [layer.n_params() for layer in layers]
        try:
            for layer, chunk in zip(layers, flat.split(widths, dim=-1), strict=True):
                layer._frozen = layer._weights_from_flat(chunk.view(layer._param_shape))
            out = self._run(x)
        finally:
            for layer in layers:
                layer._frozen = None
        return out

    def _whole_network_ok(self, x: Tensor, layers: list[SpikeSlabLinear]) -> bool:
        return (
            use_whole_network(self.mu.numel())
            and self._fused_kl_ok(layers)
            and self._flat_mlp_ok(x, layers)
        )

    def _whole_network_inputs(
        self, first: SpikeSlabLinear, layers: list[SpikeSlabLinear], key: tuple[Any, ...]
    ) -> tuple[tuple[Tensor, ...], tuple[Any, ...]]:
        """The tensors ``(mu, rho, alpha, seed, log_lam, log_1mlam)`` and the static
        arguments ``(shapes, activation, log_sigma0, var0, tau)`` of
        :func:`~svbnn._kernels.mlp_draw_forward`; draws the seed."""
        log_lam, log_1mlam = self._log_lams(key)
        seed = self._counter_seed(first)
        shapes = tuple((layer.out_features, layer.fan_in) for layer in layers)
        static = (
            shapes,
            self.activation,
            0.5 * math.log(first.prior_variance),
            float(first.prior_variance),
            float(first.temperature),
        )
        return (self.mu, self.rho, self.alpha, seed, log_lam, log_1mlam), static

    def _whole_network_elbo(
        self, likelihood: object, x: Tensor, y: Tensor, n_train: float
    ) -> tuple[Tensor, Tensor, Tensor] | None:
        """:func:`svbnn.training.negative_elbo` (one draw) as one compiled graph with the
        likelihood, where the ``auto`` backend runs this network's training forward as one
        graph: ``(loss, nll, kl / n)``. ``None`` where that does not apply (then the caller
        runs the general path, which gives the same values)."""
        mu = self._parameters.get("mu")
        if mu is None or not use_whole_network(mu.numel()):
            return None  # every step off the auto backend or of a large net: decide first
        if type(likelihood) is GaussianLikelihood and self.out_features == 1:
            noise = likelihood.noise_std
            if not isinstance(noise, float):
                return None
            kind, var = "gaussian", noise * noise
        elif type(likelihood) is CategoricalLikelihood:
            kind, var = "categorical", 1.0
        else:
            return None
        layers = self.layers()
        if not (
            y.dim() == 1
            and x.dim() == 2
            and y.shape[0] == x.shape[0]
            and self._fused_draw_ok(layers)
            and self._whole_network_ok(x, layers)
        ):
            return None
        self._kl_cache = None
        tensors, static = self._whole_network_inputs(layers[0], layers, self._kl_key())
        scales_key = (n_train, var, mu.dtype, mu.device)
        cache = getattr(self, "_scales_cache", None)  # absent in modules pickled before it
        if cache is None or cache[0] != scales_key:
            scales = torch.tensor([1.0 / n_train, var], dtype=mu.dtype, device=mu.device)
            cache = self._scales_cache = (scales_key, scales)
        shapes, activation, *prior = static
        kernel = whole_network_kernel(mlp_negative_elbo, shapes, activation, kind, *prior)
        elbo: tuple[Tensor, Tensor, Tensor] = kernel(x, y, *tensors, cache[1])
        return elbo

    def _draw_with_kl(
        self, first: SpikeSlabLinear, key: tuple[Any, ...] | None = None
    ) -> tuple[Tensor, Tensor]:
        """One training draw of all weights and the exact KL, as one fused function:
        ``(theta, kl)``, flat ``(T,)`` or ``(R, T)`` and ``()`` or ``(R,)``. ``key``: the
        current :meth:`_kl_key`, if the caller has it."""
        gen = first.generator
        compiled = use_compiled(self.mu.numel())
        if _fused_path(self.mu.numel()):
            noise: tuple[Tensor, ...] = (self._counter_seed(first),)
        else:  # torch's generator, in the order of the unfused draw (u, then eps)
            dt, dev = self.mu.dtype, self.mu.device
            u = torch.rand(self.mu.shape, generator=gen, dtype=dt, device=dev)
            noise = (u, torch.randn(self.mu.shape, generator=gen, dtype=dt, device=dev))
        log_lam, log_1mlam = self._log_lams(self._kl_key() if key is None else key)
        flat, kl = _FusedGumbelKL.apply(
            self.mu,
            self.rho,
            self.alpha,
            log_lam,
            log_1mlam,
            noise,
            float(first.temperature),
            0.5 * math.log(first.prior_variance),
            compiled,
        )
        return flat, kl

    def _counter_seed(self, first: SpikeSlabLinear) -> Tensor:
        """The two seed words of one counter-based draw, from the layers' generator."""
        seed = torch.randint(
            -(2**31), 2**31 - 1, (2,), generator=first.generator, dtype=torch.int32
        )
        return seed.to(self.mu.device)

    def _log_lams(self, key: tuple[Any, ...]) -> tuple[Tensor, Tensor]:
        """``log(lambda)`` as ``(R, 1)`` or ``()``, and ``log(1 - lambda)``: recomputed only
        when the prior changes (``key``: the current :meth:`_kl_key`)."""
        if self._log_lam_cache is None or self._log_lam_cache[0] != key[-2:]:
            lam = self.log_prior_inclusion
            lam = lam.reshape(-1, 1) if lam.dim() > 0 else lam
            self._log_lam_cache = (key[-2:], lam, log1mexp(lam))
        return self._log_lam_cache[1], self._log_lam_cache[2]

    def _flat_mlp_ok(self, x: Tensor, layers: list[SpikeSlabLinear]) -> bool:
        # One matrix input, every layer with a bias, a known activation, and no hooks that
        # running the modules one by one would have called.
        return (
            x.dim() == 2
            and layers[0].n_replicates is None
            and self.activation in _ACTIVATIONS
            and all(layer.has_bias for layer in layers)
            and not any(
                m._forward_hooks or m._forward_pre_hooks or m._backward_hooks
                for m in (self.net, *self.net)
            )
            and not nn.modules.module._global_forward_hooks
            and not nn.modules.module._global_forward_pre_hooks
        )

    def __getstate__(self) -> dict[str, Any]:
        # A cached KL holds an autograd graph (not copyable, not worth pickling).
        state = dict(self.__dict__)
        state["_kl_cache"] = None
        state["_log_lam_cache"] = None
        return state

    def _fused_kl_ok(self, layers: list[SpikeSlabLinear]) -> bool:
        # The one-pass draw + KL: Gumbel sampler, training (grad enabled), one prior
        # variance.
        first = layers[0]
        return (
            first.sampler is Sampler.GUMBEL
            and torch.is_grad_enabled()
            and all(layer.prior_variance == first.prior_variance for layer in layers)
        )

    def _kl_key(self) -> tuple[Any, ...]:
        # Identity and version of everything the KL depends on: a cached KL is valid only
        # while none of them changed (an optimiser step bumps the parameters' versions).
        # (The caches hold the tensors they were computed from, so an id is never reused
        # while a cache refers to it.) Read through the module dictionaries: this runs twice
        # a step, and nn.Module's attribute lookup is most of its cost on small networks.
        params = self._parameters
        mu = params["mu"]
        lam = self._buffers["log_prior_inclusion"]
        assert mu is not None and lam is not None
        return (
            mu._version,
            params["rho"]._version,  # type: ignore[union-attr]
            params["alpha"]._version,  # type: ignore[union-attr]
            id(mu),
            next(iter(self.net._modules.values())).prior_variance,
            id(lam),
            lam._version,
        )

    def kl_divergence(self) -> Tensor:
        """KL of all layers: one fused call on the flat parameters when ``fused``.

        After a compiled training forward (see :func:`svbnn._kernels.set_backend`), the KL
        computed in the same loop as the draw is returned once, if the parameters have not
        changed since.
        """
        cache, self._kl_cache = self._kl_cache, None
        if cache is not None and cache[1] == self._kl_key() and torch.is_grad_enabled():
            kl: Tensor = cache[0]
            return kl
        layers = self.layers()
        if not (self.fused and "mu" in self._parameters) or any(
            layer.prior_variance != layers[0].prior_variance for layer in layers
        ):
            total = layers[0].kl_divergence()
            for layer in layers[1:]:
                total = total + layer.kl_divergence()
            return total
        batch_dims = 0 if layers[0].n_replicates is None else 1
        return spike_slab_kl(
            self.mu,
            self.rho,
            self.alpha,
            self.log_prior_inclusion,
            layers[0].prior_variance,
            batch_dims=batch_dims,
        )

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
