"""One place for each variational family's KL(q || prior), in the style of
:mod:`torch.distributions.kl`.

A family is a pair of a posterior and a prior, each a small record of the tensors (or
numbers) that define it: :class:`SpikeSlab` against :class:`SpikeSlabPrior` (the paper's
method), :class:`MeanFieldGaussian` against :class:`GaussianPrior` (VBNN),
:class:`Horseshoe` against :class:`HorseshoePrior` (HS-BNN) and :class:`AdditiveNoise`
against :class:`LogUniformPrior` (variational dropout). :func:`register_kl` registers the
KL of a pair once; :func:`kl_divergence` looks it up (the most specific registered pair
along the two types' method resolution orders) and every layer calls it. A new prior
family registers its own pair::

    @register_kl(MyPosterior, MyPrior)
    def _kl_mine(q: MyPosterior, p: MyPrior, batch_dims: int) -> Tensor: ...

Each function returns the KL summed over the parameters, keeping the first ``batch_dims``
dimensions (one value per replicate of a replicated layer).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import torch
import torch.nn.functional as F
from torch import Tensor

from ._engine.kernels import log_softplus
from .objectives import spike_slab_kl

__all__ = [
    "VD_K1",
    "VD_K2",
    "VD_K3",
    "AdditiveNoise",
    "GaussianPrior",
    "Horseshoe",
    "HorseshoePrior",
    "LogUniformPrior",
    "MeanFieldGaussian",
    "SpikeSlab",
    "SpikeSlabPrior",
    "half_cauchy_scale_kl",
    "kl_divergence",
    "matrix_normal_kl",
    "register_kl",
    "vd_kl_approximation",
]

KLFunction = Callable[[Any, Any, int], Tensor]
_F = TypeVar("_F", bound=KLFunction)
_KL_REGISTRY: dict[tuple[type, type], KLFunction] = {}


def register_kl(posterior: type, prior: type) -> Callable[[_F], _F]:
    """Decorator: register ``fn(q, p, batch_dims) -> Tensor`` as the KL of the pair.

    Parameters
    ----------
    posterior, prior : type
        The records' classes. Registering a pair twice is an error (one definition each).
    """

    def register(fn: _F) -> _F:
        key = (posterior, prior)
        if key in _KL_REGISTRY:
            raise ValueError(
                f"a KL of ({posterior.__name__}, {prior.__name__}) is already registered"
            )
        _KL_REGISTRY[key] = fn
        return fn

    return register


def _lookup(q_type: type, p_type: type) -> KLFunction:
    fn = _KL_REGISTRY.get((q_type, p_type))
    if fn is not None:
        return fn
    for q_base in q_type.__mro__:  # the most specific registered pair, posterior first
        for p_base in p_type.__mro__:
            fn = _KL_REGISTRY.get((q_base, p_base))
            if fn is not None:
                return fn
    raise NotImplementedError(
        f"no KL registered for posterior {q_type.__name__} against prior {p_type.__name__} "
        "(register one with svbnn.kl.register_kl)"
    )


def kl_divergence(q: object, p: object, batch_dims: int = 0) -> Tensor:
    """``KL(q || p)`` summed over the parameters, by the function registered for the pair.

    Parameters
    ----------
    q, p : object
        A posterior record and a prior record (e.g. :class:`SpikeSlab`,
        :class:`SpikeSlabPrior`).
    batch_dims : int
        Leading dimensions kept (1 for a replicated layer's ``(R, ...)`` parameters).

    Returns
    -------
    Tensor
        Shape of the first ``batch_dims`` dimensions (a scalar for 0).

    Raises
    ------
    NotImplementedError
        When no KL is registered for the pair.
    """
    return _lookup(type(q), type(p))(q, p, batch_dims)


def _keep(kl: Tensor, batch_dims: int) -> Tensor:
    """An elementwise KL summed over all but its first ``batch_dims`` dimensions."""
    if batch_dims == 0:
        return kl.sum()
    return kl.sum(dim=tuple(range(batch_dims, kl.dim())))


# -- spike-and-slab (the paper's method) -------------------------------------------------------
@dataclass(slots=True)
class SpikeSlab:
    """``q(theta) = phi N(mu, sigma^2) + (1 - phi) delta_0`` per parameter, with
    ``sigma = softplus(rho)`` and ``phi = sigmoid(alpha)``; all of one shape."""

    mu: Tensor
    rho: Tensor
    alpha: Tensor


@dataclass(slots=True)
class SpikeSlabPrior:
    """``lambda N(0, variance) + (1 - lambda) delta_0``; ``log_inclusion = log(lambda)``, a
    number or one value per replicate."""

    log_inclusion: Tensor | float
    variance: float


@register_kl(SpikeSlab, SpikeSlabPrior)
def _kl_spike_slab(q: SpikeSlab, p: SpikeSlabPrior, batch_dims: int) -> Tensor:
    """:func:`svbnn.objectives.spike_slab_kl` (the exact log-space KL and its fused
    gradient)."""
    return spike_slab_kl(q.mu, q.rho, q.alpha, p.log_inclusion, p.variance, batch_dims)


# -- mean-field Gaussian (VBNN) ----------------------------------------------------------------
@dataclass(slots=True)
class MeanFieldGaussian:
    """``q(theta) = N(mu, sigma^2)`` per parameter, ``sigma = softplus(rho)``."""

    mu: Tensor
    rho: Tensor


@dataclass(slots=True)
class GaussianPrior:
    """``N(0, variance)`` per parameter."""

    variance: float


@register_kl(MeanFieldGaussian, GaussianPrior)
def _kl_gaussian(q: MeanFieldGaussian, p: GaussianPrior, batch_dims: int) -> Tensor:
    """Exact ``sum_i KL(N(mu_i, sigma_i^2) || N(0, sigma_0^2))``:
    ``KL_i = log(sigma_0 / sigma_i) + (sigma_i^2 + mu_i^2) / (2 sigma_0^2) - 1/2``, with
    ``log sigma_i`` from :func:`svbnn.objectives.log_softplus` (finite where ``sigma``
    underflows)."""
    sigma = F.softplus(q.rho)
    kl = (
        0.5 * math.log(p.variance)
        - log_softplus(q.rho)
        + (sigma * sigma + q.mu * q.mu) / (2.0 * p.variance)
        - 0.5
    )
    return _keep(kl, batch_dims)


# -- horseshoe (HS-BNN) ------------------------------------------------------------------------
_HALF_LOG_HALF_PI = 0.5 * math.log(math.pi / 2.0)


def half_cauchy_scale_kl(loc: Tensor, rho: Tensor, scale: float) -> Tensor:
    """KL of a log-normal scale posterior against a half-Cauchy prior (auxiliary form).

    For ``q(log a) = N(loc, s^2)``, ``s = softplus(rho)``, and the prior
    ``a^2 | l ~ IG(1/2, 1/l)``, ``l ~ IG(1/2, 1/b^2)`` (so ``a ~ C+(0, b)``), returns
    ``KL(q(a^2) q*(l) || p(a^2 | l) p(l))`` with the optimal
    ``q*(l) = IG(1, E_q[1/a^2] + 1/b^2)``, elementwise.

    Parameters
    ----------
    loc, rho : Tensor
        Same shape.
    scale : float
        ``b > 0``.

    Returns
    -------
    Tensor
        Same shape as ``loc``.
    """
    log_s = log_softplus(rho)
    s = F.softplus(rho)
    log_b = math.log(scale)
    # log(rate of q*(l)) = log(E[1/a^2] + 1/b^2), E[1/a^2] = exp(-2 loc + 2 s^2).
    log_rate = torch.logaddexp(-2.0 * loc + 2.0 * s * s, torch.full_like(loc, -2.0 * log_b))
    return loc + log_rate - (math.log(2.0) + log_s) + log_b + _HALF_LOG_HALF_PI - 0.5


def matrix_normal_kl(mean: Tensor, row_rho: Tensor, row_factor: Tensor, col_rho: Tensor) -> Tensor:
    """``KL(MN(M, U, V) || N(0, I))`` with ``U = diag(a^2) + h h^T`` and ``V = diag(c^2)``.

    Parameters
    ----------
    mean : Tensor
        ``M`` transposed, ``(..., out, d)``.
    row_rho, row_factor : Tensor
        ``(..., d)``: ``a = softplus(row_rho)`` and ``h``.
    col_rho : Tensor
        ``(..., out)``: ``c = softplus(col_rho)``.

    Returns
    -------
    Tensor
        ``(...)``: ``0.5 [tr(V) tr(U) + ||M||^2 - d out - out log|U| - d log|V|]``.
    """
    d = mean.shape[-1]
    out = mean.shape[-2]
    a2 = F.softplus(row_rho) ** 2
    c2 = F.softplus(col_rho) ** 2
    h2 = row_factor * row_factor
    tr_u = a2.sum(-1) + h2.sum(-1)
    tr_v = c2.sum(-1)
    # Matrix determinant lemma: |diag(a^2) + h h^T| = prod(a^2) (1 + sum h^2 / a^2).
    logdet_u = 2.0 * log_softplus(row_rho).sum(-1) + torch.log1p((h2 / a2).sum(-1))
    logdet_v = 2.0 * log_softplus(col_rho).sum(-1)
    sq = (mean * mean).sum(dim=(-2, -1))
    return 0.5 * (tr_v * tr_u + sq - d * out - out * logdet_u - d * logdet_v)


@dataclass(slots=True)
class Horseshoe:
    """HS-BNN's structured posterior of one layer (:class:`svbnn.nn.HorseshoeLinear`): the
    matrix normal ``q(B)`` (``weight_mu`` ``(..., out, d)``, ``row_rho``/``row_factor``
    ``(..., d)``, ``col_rho`` ``(..., out)``) and the log-normal scales, one layer-wide
    (``layer_loc``/``layer_rho`` ``(..., 1)``) and, with node scales, one per node
    (``node_loc``/``node_rho`` ``(..., out)``)."""

    weight_mu: Tensor
    row_rho: Tensor
    row_factor: Tensor
    col_rho: Tensor
    layer_loc: Tensor
    layer_rho: Tensor
    node_loc: Tensor | None
    node_rho: Tensor | None


@dataclass(slots=True)
class HorseshoePrior:
    """``beta ~ N(0, I)``, the layer scale ``~ C+(0, global_scale)``, each node scale
    ``~ C+(0, local_scale)``."""

    global_scale: float
    local_scale: float


@register_kl(Horseshoe, HorseshoePrior)
def _kl_horseshoe(q: Horseshoe, p: HorseshoePrior, batch_dims: int) -> Tensor:
    """Exact KL of the weights (:func:`matrix_normal_kl`) and the scales
    (:func:`half_cauchy_scale_kl`, auxiliaries profiled). The parameters' leading
    dimensions before the matrix (replicates) are kept whatever ``batch_dims``."""
    kl = matrix_normal_kl(q.weight_mu, q.row_rho, q.row_factor, q.col_rho)
    kl = kl + half_cauchy_scale_kl(q.layer_loc, q.layer_rho, p.global_scale).sum(-1)
    if q.node_loc is not None and q.node_rho is not None:
        kl = kl + half_cauchy_scale_kl(q.node_loc, q.node_rho, p.local_scale).sum(-1)
    return kl


# -- variational dropout (VD) ------------------------------------------------------------------
VD_K1 = 0.63576
VD_K2 = 1.87320
VD_K3 = 1.48695


def vd_kl_approximation(log_alpha: Tensor) -> Tensor:
    """Molchanov et al.'s approximation of ``KL(q(w | theta, alpha) || log-uniform)``, elementwise.

    ``KL ~ k1 - k1 sigmoid(k2 + k3 log alpha) + 0.5 log1p(1/alpha)``; ``log1p(exp(-log alpha))``
    is computed as ``softplus(-log alpha)``.

    Parameters
    ----------
    log_alpha : Tensor
        Any shape.

    Returns
    -------
    Tensor
        Same shape; nonnegative, 0 in the limit ``alpha -> inf``.
    """
    neg_kl = VD_K1 * torch.sigmoid(VD_K2 + VD_K3 * log_alpha) - 0.5 * F.softplus(-log_alpha) - VD_K1
    return -neg_kl


@dataclass(slots=True)
class AdditiveNoise:
    """Variational dropout's ``w = theta + sigma eps`` per weight, through its dropout
    rate ``log_alpha = log(sigma^2 / theta^2)``."""

    log_alpha: Tensor


@dataclass(slots=True)
class LogUniformPrior:
    """The improper log-uniform prior ``p(|w|) ~ 1/|w|``."""


@register_kl(AdditiveNoise, LogUniformPrior)
def _kl_dropout(q: AdditiveNoise, p: LogUniformPrior, batch_dims: int) -> Tensor:
    """Sum of :func:`vd_kl_approximation` over the weights."""
    kl = vd_kl_approximation(q.log_alpha)
    if batch_dims == 0:
        return kl.sum()
    return kl.flatten(batch_dims).sum(dim=batch_dims)
