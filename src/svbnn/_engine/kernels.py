"""Elementwise kernels of the spike-and-slab layer, eager or compiled.

Each function is one fused pass over the parameters when compiled with ``torch.compile``
(inductor generates a single vectorised C++/Triton loop): the per-weight work of a
spike-and-slab layer is elementwise and memory-bound, so fusing the dozen eager passes
into one is where the speed comes from (DESIGN section 6). The formulas have one definition,
:func:`kl_terms` for the KL and its derivatives (DESIGN section 1.2). Eager is the default;
the caller chooses another backend with :func:`backend_scope` (the ``kernel_backend``
argument of :func:`svbnn.training.train` and of the estimators), for its own thread only,
or ``SVBNN_KERNELS`` (read at each use). Both compute the same formulas; the compiled one may
differ in the last bits (different operation order), so a seed reproduces a run within one
backend.

Eager, every operation is a separate pass, so the forward saves its intermediates for the
backward. Compiled, the per-layer kernels recompute the intermediates from the saved inputs
(``mu, rho, alpha, u, eps``) in the backward's fused loop and see 1-D views (one compiled
graph serves every layer shape). A :class:`~svbnn.nn.SpikeSlabMLP` training step instead
draws every weight of the network and computes the KL and the elementwise factors of both
gradients in one function, :func:`fused_forward` (compiled, counter-based noise) or
:func:`fused_forward_given_noise` (eager, torch's generator), and applies them in
:func:`fused_backward`. The compiled kernels are always inductor's: the same two loops as
built by the C++ compiler itself (:mod:`svbnn._engine.native`), which give inductor's
outputs bit for bit, run only where the caller asks for them (:func:`native_kernels`: the
``native`` backend, and ``auto`` on the small networks of narrow layers that the native
loops run whole).
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from enum import Enum
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from . import native as _native
from .fused_math import _log, _softplus_parts, counter_noise

__all__ = [
    "AUTO_MIN_NUMEL",
    "Backend",
    "backend",
    "backend_scope",
    "kernels",
    "local_moments_kl_backward",
    "local_moments_kl_forward",
    "parse_backend",
    "log_softplus",
    "native_kernels",
    "softplus",
    "set_backend",
    "spike_slab_moments",
    "use_compiled",
    "use_whole_network",
]

logger = logging.getLogger(__name__)


class Backend(str, Enum):
    """How the elementwise kernels run.

    ``AUTO`` compiles the kernels of tensors with at least :data:`AUTO_MIN_NUMEL` elements
    and runs smaller ones eagerly: a compiled call has a fixed Python-side overhead
    (guards, wrapper) that outweighs the eager operations it replaces on small tensors.
    Off the CPU it runs the eager kernels (its thresholds were measured on CPUs). The training
    step of a small :class:`~svbnn.nn.SpikeSlabMLP` (one network on ``(m, p)`` inputs, or
    R replicates on ``(R, m, p)``) instead runs as one compiled graph with its layers and,
    through :func:`svbnn.training.negative_elbo` with a Gaussian or categorical likelihood,
    the loss (:func:`~svbnn._engine.graphs.mlp_negative_elbo`; otherwise the forward
    alone, :func:`~svbnn._engine.graphs.mlp_draw_forward`), which pays that overhead once
    for the whole network (timings: ``docs/performance.md``, "Where the thresholds and
    layouts come from").

    ``NATIVE`` never calls ``torch.compile``: svbnn's own C++ loops (:mod:`svbnn._engine.native`,
    built by the C++ compiler, see ``SECURITY.md``) run where they serve, at any
    thread count, and the eager kernels elsewhere. They serve the draw + KL of float32 CPU
    parameters, and the whole training step of an MLP of ReLU (or no) activations under a
    Gaussian (known or learned noise) or categorical likelihood, where the network is small
    (one network of fewer than :data:`AUTO_MIN_NUMEL` parameters) or its layers narrow
    (:mod:`svbnn._engine.native_step`; ``auto`` takes that step for narrow layers only).
    Without a C++ compiler it is the eager backend. The estimators' ``auto`` fits small
    networks with it: compiling a graph for them costs more than such a fit.
    """

    EAGER = "eager"
    COMPILED = "compiled"
    AUTO = "auto"
    NATIVE = "native"


COMPILE_OPTIONS: dict[str, Any] = {"size_asserts": False}
"""Inductor options of every graph compiled here. ``size_asserts`` off: the generated
code would check the size and stride of every graph input and BLAS output on each call,
which dynamo's guards on the inputs and the fixed layouts of these graphs make redundant,
and which cost a small network's step a few percent (``docs/performance.md``)."""

AUTO_MIN_NUMEL = 12_288
"""Size from which the ``auto`` backend compiles the per-parameter kernels, and below which
a :class:`~svbnn.nn.SpikeSlabMLP`'s step is one whole-network graph: where the two
approaches' step times cross on CPUs (``docs/performance.md``, "Where the thresholds and
layouts come from")."""


def softplus(rho: Tensor) -> Tensor:
    """``sigma = log(1 + exp(rho))``, exact to rounding in float32 and float64.

    Torch's own returns ``rho`` itself above 20, which is exact in float32 only (the missing
    ``exp(-rho)`` is below half an ulp there, but 7.6e-10 at ``rho = 21`` is 1e-11 relative
    in float64); above 40 it is below half an ulp in both."""
    return F.softplus(rho, threshold=40.0)


def spike_slab_moments(mu: Tensor, rho: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor]:
    """Mean and variance of spike-and-slab weights under q.

    For ``theta ~ phi N(mu, sigma^2) + (1 - phi) delta_0`` with ``sigma = softplus(rho)``
    and ``phi = sigmoid(alpha)``: ``E[theta] = phi mu`` and, by the law of total variance,
    ``Var[theta] = phi sigma^2 + phi (1 - phi) mu^2`` (a sum of nonnegative terms, so no
    cancellation). The one definition that local reparameterisation
    (:attr:`svbnn.nn.Sampler.LOCAL`) draws pre-activations from.

    Parameters
    ----------
    mu, rho, alpha : Tensor
        Variational parameters of shape ``S``.

    Returns
    -------
    mean, var : Tensor
        Each of shape ``S``.
    """
    return _moments(mu, softplus(rho), torch.sigmoid(alpha), torch.sigmoid(-alpha))


def _moments(mu: Tensor, sigma: Tensor, phi: Tensor, one_m_phi: Tensor) -> tuple[Tensor, Tensor]:
    # spike_slab_moments from sigma = softplus(rho), phi and 1 - phi (as sigmoid(-alpha)).
    return phi * mu, phi * (sigma * sigma + one_m_phi * mu * mu)


def local_moments_kl_forward(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    log_sigma0: float,
    prec0: float,
) -> tuple[Tensor, Tensor, Tensor, tuple[Tensor, ...]]:
    """:func:`spike_slab_moments` and the KL (:func:`kl_terms`) summed over the last
    dimension in one pass, with the seven elementwise factors that
    :func:`local_moments_kl_backward` turns into the gradients: what a training step under
    local reparameterisation needs of the parameters.

    The moments' derivatives, with ``q = phi (1 - phi)``: ``d mean = (phi, 0, q mu)`` and
    ``d var = (2 q mu, 2 phi sigma sigmoid(rho), q (sigma^2 + (1 - 2 phi) mu^2))`` in
    ``(mu, rho, alpha)``. Saved: ``phi``, ``q mu``, ``2 phi sigma sigmoid(rho)``,
    ``q (sigma^2 + (1 - 2 phi) mu^2)`` and the KL's three derivatives.

    Shapes: ``mu, rho, alpha`` ``S``; ``mean, var`` ``S``; ``kl`` ``S[:-1]``.
    """
    sigma = softplus(rho)
    d_sigma = torch.sigmoid(rho)
    phi = torch.sigmoid(alpha)
    one_m_phi = torch.sigmoid(-alpha)
    mean, var = _moments(mu, sigma, phi, one_m_phi)
    kl, d_mu, d_rho, d_alpha = kl_terms(
        mu, rho, alpha, log_lam, log_1mlam, log_sigma0, prec0, sigma, d_sigma
    )
    q = phi * one_m_phi
    q_mu = q * mu
    var_rho = 2.0 * phi * sigma * d_sigma
    var_alpha = q * (sigma * sigma + (one_m_phi - phi) * mu * mu)
    return mean, var, kl.sum(-1), (phi, q_mu, var_rho, var_alpha, d_mu, d_rho, d_alpha)


def local_moments_kl_backward(
    g_mean: Tensor, g_var: Tensor, g_kl: Tensor, saved: tuple[Tensor, ...]
) -> tuple[Tensor, Tensor, Tensor]:
    """The gradients in ``(mu, rho, alpha)`` of ``<g_mean, mean> + <g_var, var> + g_kl kl``
    from :func:`local_moments_kl_forward`'s factors (``g_kl`` broadcastable over the last
    dimension, e.g. ``(..., 1)``)."""
    phi, q_mu, var_rho, var_alpha, d_mu, d_rho, d_alpha = saved
    g_mu = phi * g_mean + 2.0 * q_mu * g_var + g_kl * d_mu
    g_rho = var_rho * g_var + g_kl * d_rho
    g_alpha = q_mu * g_mean + var_alpha * g_var + g_kl * d_alpha
    return g_mu, g_rho, g_alpha


def log_softplus(rho: Tensor, sigma: Tensor | None = None) -> Tensor:
    """``log(softplus(rho))``, accurate also where ``softplus(rho)`` underflows.

    Parameters
    ----------
    rho : Tensor
        Any shape ``S``.
    sigma : Tensor, optional
        ``softplus(rho)`` (shape ``S``) where the caller has it already, as the kernels do.

    Returns
    -------
    Tensor
        Shape ``S``; ``rho`` itself below ``-20``, where
        ``softplus(rho) = exp(rho)(1 + O(exp(rho)))``.
    """
    if sigma is None:
        sigma = softplus(rho)
    # The unused branch's log stays finite (sigma underflows to 0 far below -20), so that
    # autograd through this where does not multiply a zero by an infinity.
    tiny = rho < -20.0
    return torch.where(tiny, rho, torch.log(torch.where(tiny, 1.0, sigma)))


def gumbel_forward(mu: Tensor, rho: Tensor, alpha: Tensor, u: Tensor, eps: Tensor) -> Tensor:
    """``1[alpha + logit(u) > 0] * (mu + softplus(rho) eps)``."""
    slab = mu + softplus(rho) * eps
    return torch.where(alpha + (torch.log(u) - torch.log1p(-u)) > 0, slab, torch.zeros_like(slab))


def gumbel_forward_saving(
    mu: Tensor, rho: Tensor, alpha: Tensor, u: Tensor, eps: Tensor, inv_tau: float
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """Eager forward that also returns what :func:`gumbel_backward_saved` needs
    (``inv_tau = 1 / tau``)."""
    slab = torch.addcmul(mu, softplus(rho), eps)
    eta = alpha + torch.logit(u)
    hard = eta > 0
    soft = torch.sigmoid(eta * inv_tau)
    return slab * hard, (hard, slab, eps * torch.sigmoid(rho), soft * (1.0 - soft) * inv_tau)


def gumbel_backward_saved(grad: Tensor, saved: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """Eager straight-through gradients from the saved intermediates."""
    hard, slab, deps, dsoft = saved
    g_mu = grad * hard
    return g_mu, g_mu * deps, grad * slab * dsoft


def gumbel_backward(
    grad: Tensor, mu: Tensor, rho: Tensor, alpha: Tensor, u: Tensor, eps: Tensor, inv_tau: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Straight-through gradients: hard gate forward, ``sigmoid(eta / tau)`` backward
    (``inv_tau = 1 / tau``)."""
    eta = alpha + (torch.log(u) - torch.log1p(-u))
    hard = (eta > 0).to(grad.dtype)
    soft = torch.sigmoid(eta * inv_tau)
    slab = mu + softplus(rho) * eps
    g_mu = grad * hard
    g_rho = g_mu * eps * torch.sigmoid(rho)
    g_alpha = grad * slab * soft * (1.0 - soft) * inv_tau
    return g_mu, g_rho, g_alpha


def sigma_ratio(rho: Tensor, sigma: Tensor, d_sigma: Tensor) -> Tensor:
    """``sigmoid(rho) / softplus(rho)`` (``d log sigma / d rho``), finite for every ``rho``.

    Below ``rho = -20`` the series ``1 - exp(rho) / 2`` (error < 1e-17; ``exp(rho)`` is
    ``d_sigma`` there to 2e-9 relative): where ``sigma`` underflows (float32 below -87,
    float64 below -745) the quotient would be ``0 / 0`` or ``0 * inf``.

    Parameters
    ----------
    rho, sigma, d_sigma : Tensor
        One shape ``S``; ``sigma = softplus(rho)``, ``d_sigma = sigmoid(rho)``.
    """
    tiny = rho < -20.0
    return torch.where(tiny, 1.0 - 0.5 * d_sigma, d_sigma / torch.where(tiny, 1.0, sigma))


def kl_terms(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    log_sigma0: float,
    prec0: float,
    sigma: Tensor | None = None,
    d_sigma: Tensor | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The elementwise spike-and-slab KL (DESIGN section 1) and its three derivatives: the
    one definition that the eager and compiled kernels evaluate.

    ``KL = phi log(phi/lambda) + (1-phi) log((1-phi)/(1-lambda)) + phi s``, with the slab
    term ``s = log(sigma_0/sigma) + (sigma^2 + mu^2) / (2 sigma_0^2) - 1/2``, computed from
    ``log phi = logsigmoid(alpha)``, ``log(1-phi) = logsigmoid(-alpha)``, ``log lambda``,
    ``log(1-lambda)`` and :func:`log_softplus`, so that it is finite for every ``alpha``,
    every ``rho`` and ``log lambda`` down to -1000 (and below). Derivatives:
    ``d/dmu = phi mu / sigma_0^2``, ``d/drho = phi (sigma / sigma_0^2 - 1 / sigma)
    sigmoid(rho)`` (through :func:`sigma_ratio`), ``d/dalpha = phi (1 - phi) (alpha -
    logit(lambda) + s)``. ``tests/test_engine_reference.py`` checks these and every other
    path against an independent 60-digit evaluation over the whole legal domain.

    ``prec0`` is the slab prior's precision ``1 / sigma_0^2`` (a product per element rather
    than a division; ``1 / tau`` likewise in the draw kernels).

    Parameters
    ----------
    mu, rho, alpha : Tensor
        Variational parameters, one shape ``S``.
    log_lam, log_1mlam : Tensor
        ``log lambda`` and ``log(1 - lambda)``, broadcastable to ``S``.
    log_sigma0, prec0 : float
        ``log sigma_0`` and ``1 / sigma_0^2``.
    sigma, d_sigma : Tensor, optional
        ``softplus(rho)`` and ``sigmoid(rho)`` (shape ``S``) where the caller has them
        already (the fused draw does).

    Returns
    -------
    kl, d_mu, d_rho, d_alpha : Tensor
        Shape ``S``.
    """
    sigma = softplus(rho) if sigma is None else sigma
    d_sigma = torch.sigmoid(rho) if d_sigma is None else d_sigma
    phi = torch.sigmoid(alpha)
    # 1 - phi as sigmoid(-alpha): accurate where phi rounds to 1
    one_m_phi = torch.sigmoid(-alpha)
    slab = _slab_kl(mu, sigma, log_softplus(rho, sigma), log_sigma0, prec0)
    kl = (
        phi * (F.logsigmoid(alpha) - log_lam)
        + one_m_phi * (F.logsigmoid(-alpha) - log_1mlam)
        + phi * slab
    )
    d_mu = phi * mu * prec0
    d_rho = phi * (sigma * d_sigma * prec0 - sigma_ratio(rho, sigma, d_sigma))
    d_alpha = phi * one_m_phi * (alpha - log_lam + log_1mlam + slab)
    return kl, d_mu, d_rho, d_alpha


def kl_forward(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    log_sigma0: float,
    prec0: float,
) -> Tensor:
    """Elementwise spike-and-slab KL: the value of :func:`kl_terms`, differentiable by
    autograd (a path that needs no closed-form gradient: the whole-network graphs)."""
    return kl_terms(mu, rho, alpha, log_lam, log_1mlam, log_sigma0, prec0)[0]


def kl_sum_forward(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    log_sigma0: float,
    prec0: float,
) -> Tensor:
    """KL summed over the last dimension (callers pass ``(-1,)`` or ``(R, -1)`` views)."""
    return kl_forward(mu, rho, alpha, log_lam, log_1mlam, log_sigma0, prec0).sum(-1)


def kl_forward_saving(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    log_sigma0: float,
    prec0: float,
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """Eager KL summed over the last dimension, plus what :func:`kl_backward_saved` needs."""
    kl, *derivs = kl_terms(mu, rho, alpha, log_lam, log_1mlam, log_sigma0, prec0)
    return kl.sum(-1), tuple(derivs)


def kl_backward_saved(grad: Tensor, saved: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """Eager KL gradients: the saved elementwise derivatives times ``grad``."""
    return tuple(grad * d for d in saved)


def kl_backward(
    grad: Tensor,
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    log_sigma0: float,
    prec0: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradient of the elementwise KL times ``grad`` (broadcastable), recomputed from the
    parameters (compiled: one loop; the unused value is eliminated)."""
    _, d_mu, d_rho, d_alpha = kl_terms(mu, rho, alpha, log_lam, log_1mlam, log_sigma0, prec0)
    return grad * d_mu, grad * d_rho, grad * d_alpha


# ------------------------------------------------------------------ fused draw + KL
def _slab_kl(
    mu: Tensor, sigma: Tensor, log_sigma: Tensor, log_sigma0: float, prec0: float
) -> Tensor:
    return log_sigma0 - log_sigma + (sigma * sigma + mu * mu) * (0.5 * prec0) - 0.5


def fused_forward(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    seed: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    log_sigma0: float,
    prec0: float,
    inv_tau: float,
) -> tuple[Tensor, ...]:
    """One loop: Gumbel straight-through weights, the KL summed over dim -1, and the
    elementwise factors of both gradients.

    ``prec0 = 1 / sigma_0^2`` and ``inv_tau = 1 / tau``, as every kernel here takes them
    (see :func:`kl_forward`).

    Returns ``(theta, kl, a_fac, r_fac, kl_mu, kl_rho, kl_alpha)``:
    ``theta = 1[alpha + logit(u) > 0] (mu + sigma eps)`` with the counter noise, ``kl`` of
    shape ``mu.shape[:-1]``, and what :func:`fused_backward` multiplies the incoming
    gradients with. The gate is evaluated as ``u > 1 - phi``, the same event as
    ``alpha + logit(u) > 0`` without two logarithms, and is not returned: the backward reads
    it as ``theta != 0`` (a drawn slab value of exactly 0 has probability 0, except where
    ``mu = 0`` and ``sigma`` underflows: there ``d/dmu`` is 0), because a boolean output
    slows the compiled loop down (``docs/performance.md``). Saving the factors (five
    numbers per parameter) is cheaper than recomputing noise and transcendentals in the
    backward.
    """
    u, eps = counter_noise(mu, seed)
    sigma, _, d_sigma, _ = _softplus_parts(rho)
    sp_alpha, log_phi, phi, one_m_phi = _softplus_parts(alpha)
    slab_w = mu + sigma * eps
    theta = torch.where(u > one_m_phi, slab_w, torch.zeros_like(mu))
    # log(sigma) as in log_softplus. d_sigma / sigma = sigmoid(rho) / softplus(rho): below
    # -20 its series 1 - exp(rho) / 2 (error < 1e-17, exp(rho) = d_sigma to 2e-9
    # relative), so that a sigma underflowing to 0 (float32: rho < -87) gives the limit 1
    # instead of 0 * inf.
    tiny = rho < -20.0
    sigma_or_1 = torch.where(tiny, 1.0, sigma)
    slab = _slab_kl(mu, sigma, torch.where(tiny, rho, _log(sigma_or_1)), log_sigma0, prec0)
    # log(1 - phi) = log sigmoid(-alpha) = -softplus(alpha)
    kl = phi * (log_phi - log_lam) + one_m_phi * (-sp_alpha - log_1mlam) + phi * slab
    # Straight-through: d theta / d alpha through the relaxed gate s = sigmoid(eta / tau),
    # s (1 - s) / tau. With exp(eta) = a / b, a = phi u and b = (1 - phi)(1 - u), and
    # k = 1 / tau: s (1 - s) = a^k b^k / (a^k + b^k)^2, one division and no log or exp for
    # k = 1 or 2 (the paper's tau = 0.5). a, b <= 1 and one of them is >= 2^-25 (phi or
    # 1 - phi is >= 1/2, u and 1 - u >= 2^-24), so nothing overflows or becomes 0/0.
    # Other k: the same from r = min(a, b) / max(a, b), q = r^k, as q / (1 + q)^2.
    a = phi * u
    b = one_m_phi * (1.0 - u)
    k = inv_tau
    if k == 2.0:
        ab = (a * b) / (a * a + b * b)
        s1ms = ab * ab
    elif k == 1.0:
        s1ms = (a * b) / ((a + b) * (a + b))
    else:
        q = (torch.minimum(a, b) / torch.maximum(a, b)) ** k
        s1ms = q / ((1.0 + q) * (1.0 + q))
    a_fac = slab_w * s1ms * k
    # KL derivatives; d/dalpha = phi (1 - phi) [alpha - logit(lambda) + slab].
    phi_v = phi * prec0
    kl_mu = phi_v * mu
    kl_rho = phi_v * sigma * d_sigma - phi * sigma_ratio(rho, sigma, d_sigma)
    kl_alpha = phi * one_m_phi * (alpha - log_lam + log_1mlam + slab)
    return theta, kl.sum(-1), a_fac, eps * d_sigma, kl_mu, kl_rho, kl_alpha


def fused_backward(
    g_theta: Tensor,
    g_kl: Tensor,
    theta: Tensor,
    a_fac: Tensor,
    r_fac: Tensor,
    kl_mu: Tensor,
    kl_rho: Tensor,
    kl_alpha: Tensor,
    into_factors: bool = False,
) -> tuple[Tensor, Tensor, Tensor]:
    """Gradients of ``<g_theta, theta> + <g_kl, kl>`` w.r.t. ``mu, rho, alpha`` in one loop
    from the draw and the factors :func:`fused_forward` returned; ``g_kl`` broadcasts
    (``()`` or ``(R, 1)``).

    ``into_factors``: write the three gradients over ``kl_mu, kl_rho, kl_alpha`` and
    return those, for a caller that reads the factors no more. Compiled, the loop then
    stores into the cache lines it has just read instead of into three fresh arrays
    (``docs/performance.md``, "Memory traffic of the compiled step"). Eager it costs one
    more pass over the three.
    """
    g_gate = torch.where(theta != 0, g_theta, 0.0)
    g_mu = torch.addcmul(g_gate, g_kl, kl_mu)
    g_rho = torch.addcmul(g_gate * r_fac, g_kl, kl_rho)
    g_alpha = torch.addcmul(g_theta * a_fac, g_kl, kl_alpha)
    if into_factors:
        return kl_mu.copy_(g_mu), kl_rho.copy_(g_rho), kl_alpha.copy_(g_alpha)
    return g_mu, g_rho, g_alpha


def fused_forward_given_noise(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    u: Tensor,
    eps: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    log_sigma0: float,
    prec0: float,
    inv_tau: float,
) -> tuple[Tensor, ...]:
    """:func:`fused_forward` for given noise ``u``, ``eps`` (torch's generator), evaluated
    eagerly: the Gumbel straight-through draw and :func:`kl_terms`. Same outputs; the gate is
    ``alpha + logit(u) > 0``, as in :func:`gumbel_forward`."""
    sigma = softplus(rho)
    d_sigma = torch.sigmoid(rho)
    eta = alpha + torch.logit(u)
    slab_w = torch.addcmul(mu, sigma, eps)
    theta = slab_w * (eta > 0)
    soft = torch.sigmoid(eta * inv_tau)
    a_fac = slab_w * (soft - soft * soft) * inv_tau
    kl, kl_mu, kl_rho, kl_alpha = kl_terms(
        mu, rho, alpha, log_lam, log_1mlam, log_sigma0, prec0, sigma, d_sigma
    )
    return theta, kl.sum(-1), a_fac, eps * d_sigma, kl_mu, kl_rho, kl_alpha


_EAGER: dict[str, Callable[..., Any]] = {
    "gumbel_forward": gumbel_forward,
    "gumbel_backward": gumbel_backward,
    "kl_sum_forward": kl_sum_forward,
    "kl_backward": kl_backward,
    "fused_forward": fused_forward,
    "fused_forward_given_noise": fused_forward_given_noise,
    "fused_backward": fused_backward,
}
_COMPILED: dict[str, Callable[..., Any]] = {}


def parse_backend(name: Backend | str, source: str = "kernel_backend") -> Backend:
    """The backend named, or a ValueError naming ``source`` and the choices."""
    try:
        return Backend(name)
    except ValueError:
        choices = ", ".join(b.value for b in Backend)
        raise ValueError(f"unknown {source} {name!r}; choose from {choices}") from None


ENV_VAR = "SVBNN_KERNELS"
"""The environment variable that names the backend where no call chose one: read at each
use, never stored, so that a bad value is a clear error where it is used."""

# The backend chosen by the innermost enclosing backend_scope of this thread (a context
# variable: each thread, and each asyncio task, has its own), None outside any.
_scoped: contextvars.ContextVar[Backend | None] = contextvars.ContextVar(
    "svbnn_kernel_backend", default=None
)
_compile_lock = threading.Lock()


def backend() -> Backend:
    """The backend in use here: the innermost :func:`backend_scope` of this thread (the
    ``kernel_backend`` argument of :func:`svbnn.training.train` and of the estimators opens
    one, and the deprecated :func:`set_backend` sets it for the thread), else
    ``SVBNN_KERNELS``'s, else ``eager``.

    Raises
    ------
    ValueError
        ``SVBNN_KERNELS`` names no backend (the message names the variable and the choices).
    """
    scoped = _scoped.get()
    if scoped is not None:
        return scoped
    return parse_backend(os.environ.get(ENV_VAR, Backend.EAGER.value), ENV_VAR)


@contextlib.contextmanager
def backend_scope(name: Backend | str | None) -> Iterator[Backend]:
    """``with backend_scope("auto"): ...`` runs the block with that backend, in this thread
    only, and restores the previous one after it (also on error). ``None`` keeps the
    backend in use. Yields the backend in force inside.

    Threads do not share a scope: two fits made at the same time in two threads, each in
    its own scope, each run with their own backend. ``torch.compile`` is not thread-safe
    upstream: run compiled fits (``compiled``, and ``auto`` on networks it compiles) one at
    a time; ``eager`` and ``native`` fits may run concurrently.
    """
    if name is None:
        yield backend()
        return
    token = _scoped.set(parse_backend(name))
    try:
        yield _scoped.get() or backend()
    finally:
        _scoped.reset(token)


def set_backend(name: Backend | str) -> Backend:
    """Deprecated: set the backend of the calling thread from now on (until the enclosing
    :func:`backend_scope`, if any, ends); returns the one in use before.

    It used to set a process-wide default, which let one caller change another's numbers
    (two fits in two threads); other threads no longer see it. Pass ``kernel_backend=`` to
    :func:`svbnn.training.train` or to the estimators, or use ``with
    svbnn.kernel_backend(name):`` instead (see ``CHANGELOG.md``).
    """
    warnings.warn(
        "svbnn.set_kernel_backend is deprecated: pass kernel_backend= to train or to the "
        "estimator, or use `with svbnn.kernel_backend(name):`",
        DeprecationWarning,
        stacklevel=2,
    )
    previous = backend()
    _scoped.set(parse_backend(name))
    return previous


def _on_cpu(device: torch.device | None) -> bool:
    return device is None or device.type == "cpu"


def use_compiled(numel: int, device: torch.device | None = None) -> bool:
    """Whether the kernels for a tensor of ``numel`` elements on ``device`` run compiled.
    ``auto``'s size threshold was chosen on CPUs: on another device ``auto`` runs the eager
    kernels."""
    mode = backend()
    if mode is Backend.AUTO:
        return numel >= AUTO_MIN_NUMEL and _on_cpu(device)
    return mode is Backend.COMPILED


def use_whole_network(numel: int, device: torch.device | None = None) -> bool:
    """Whether a small MLP's training forward runs as one compiled graph
    (:func:`~svbnn._engine.graphs.mlp_draw_forward`): the ``auto`` backend, below
    :data:`AUTO_MIN_NUMEL` parameters (of all replicates, for a replicated network), on the
    CPU."""
    return backend() is Backend.AUTO and numel < AUTO_MIN_NUMEL and _on_cpu(device)


def kernels(compiled: bool | None = None) -> dict[str, Callable[..., Any]]:
    """The kernel functions: compiled by inductor or eager (``None``: as the backend says,
    ``auto`` counting as compiled). Under the ``native`` backend the compiled table is
    :func:`native_kernels`: that backend never compiles."""
    mode = backend()
    if compiled is None:
        compiled = mode in (Backend.COMPILED, Backend.AUTO)
    if not compiled:
        return _EAGER
    if mode is Backend.NATIVE:
        return _NATIVE_KERNELS
    with _compile_lock:
        if not _COMPILED:
            logger.info("compiling spike-and-slab kernels with torch.compile")
            # One symbolic-shape graph per kernel serves every layer and network size.
            _COMPILED.update(
                {
                    name: torch.compile(fn, dynamic=True, options=COMPILE_OPTIONS)
                    for name, fn in _EAGER.items()
                }
            )
    return _COMPILED


def native_kernels() -> dict[str, Callable[..., Any]]:
    """The kernel functions with the fused draw + KL pair on svbnn's C++ loops
    (:mod:`svbnn._engine.native`) where they serve the call, at any thread count, else
    the eager kernels; never a compile. The loops give inductor's :func:`fused_forward`
    and :func:`fused_backward` outputs bit for bit. The ``native`` backend's table, and
    the one ``auto`` draws with on a network the native loops run whole
    (:func:`~svbnn._engine.paths.native_network`) below :data:`AUTO_MIN_NUMEL`
    parameters, where the eager kernels would run. Where ``auto`` and ``compiled`` run
    inductor's kernels, the loops stand in for nothing: they gain too little against them
    (``docs/performance.md``, "Fast paths of a training step")."""
    return _NATIVE_KERNELS


def _with_native(eager_kernel: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`fused_forward` on the native loops where they serve the call (float32 CPU
    parameters of one network or of R replicates with one prior, ``tau`` = 1/2 or 1), with
    inductor's outputs bit for bit, else ``eager_kernel``. ``SVBNN_NATIVE=0`` keeps the
    eager kernel everywhere."""

    def fused_forward_native(*args: Any) -> tuple[Tensor, ...]:
        # fused_forward's arguments: mu, rho, alpha, seed, log_lam, ..., inv_tau
        mu, rho, alpha, _, log_lam = args[:5]
        if _native.usable(mu, rho, alpha, log_lam, args[-1], any_threads=True):
            return _native.fused_forward(*args)
        return tuple(eager_kernel(*args))

    return fused_forward_native


def _with_native_backward(eager_kernel: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`fused_backward` on the native loop where it serves the call (as
    :func:`_with_native`), else ``eager_kernel``, with inductor's gradients bit for bit.
    The loop writes the gradients over the three KL factors: without ``into_factors`` (a
    graph kept for another backward reads them again) it writes over copies of them."""

    def fused_backward_native(*args: Any) -> tuple[Tensor, Tensor, Tensor]:
        # fused_backward's arguments: g_theta, g_kl, the six saved arrays, into_factors
        g_theta, g_kl, *saved = args[:8]
        if not _native.backward_usable(g_theta, g_kl, tuple(saved), any_threads=True):
            return eager_kernel(*args)
        if not (args[8:] and args[8]):
            saved = [*saved[:3], *(t.clone() for t in saved[3:])]
        return _native.fused_backward(g_theta, g_kl, *saved)

    return fused_backward_native


# The native kernels: the native loops where they serve, else the eager kernels, never a
# compile.
_NATIVE_KERNELS: dict[str, Callable[..., Any]] = {
    **_EAGER,
    "fused_forward": _with_native(_EAGER["fused_forward"]),
    "fused_backward": _with_native_backward(_EAGER["fused_backward"]),
}
