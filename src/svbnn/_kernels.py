"""Elementwise kernels of the spike-and-slab layer, eager or compiled.

Each function is one fused pass over the parameters when compiled with ``torch.compile``
(inductor generates a single vectorised C++/Triton loop): the per-weight work of a
spike-and-slab layer is elementwise and memory-bound, so fusing the dozen eager passes
into one is where the speed comes from (DESIGN section 6). Eager is the default; switch
with :func:`set_backend` or ``SVBNN_KERNELS=compiled``. Both backends compute the same
formulas; the compiled one may differ in the last bits (different operation order), so a
seed reproduces a run within one backend.

Eager, every operation is a separate pass, so the forward saves its intermediates for the
backward. Compiled, a pass is cheap and bytes are what cost, so the backward recomputes the
intermediates from the saved inputs (``mu, rho, alpha, u, eps``) in the same fused loop;
the compiled kernels see 1-D views (one compiled graph serves every layer shape).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from enum import Enum
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["Backend", "backend", "kernels", "set_backend"]

logger = logging.getLogger(__name__)


class Backend(str, Enum):
    """How the elementwise kernels run."""

    EAGER = "eager"
    COMPILED = "compiled"


def _log_sigma(rho: Tensor, sigma: Tensor) -> Tensor:
    # log(softplus(rho)); softplus(rho) = exp(rho)(1 + O(exp(rho))) below -20.
    return torch.where(rho < -20.0, rho, torch.log(sigma))


def gumbel_forward(mu: Tensor, rho: Tensor, alpha: Tensor, u: Tensor, eps: Tensor) -> Tensor:
    """``1[alpha + logit(u) > 0] * (mu + softplus(rho) eps)``."""
    slab = mu + F.softplus(rho) * eps
    return torch.where(alpha + (torch.log(u) - torch.log1p(-u)) > 0, slab, torch.zeros_like(slab))


def gumbel_forward_saving(
    mu: Tensor, rho: Tensor, alpha: Tensor, u: Tensor, eps: Tensor, tau: float
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """Eager forward that also returns what :func:`gumbel_backward_saved` needs."""
    slab = torch.addcmul(mu, F.softplus(rho), eps)
    eta = alpha + torch.logit(u)
    hard = eta > 0
    soft = torch.sigmoid(eta / tau)
    return slab * hard, (hard, slab, eps * torch.sigmoid(rho), soft * (1.0 - soft) / tau)


def gumbel_backward_saved(grad: Tensor, saved: tuple[Tensor, ...]) -> tuple[Tensor, ...]:
    """Eager straight-through gradients from the saved intermediates."""
    hard, slab, deps, dsoft = saved
    g_mu = grad * hard
    return g_mu, g_mu * deps, grad * slab * dsoft


def gumbel_backward(
    grad: Tensor, mu: Tensor, rho: Tensor, alpha: Tensor, u: Tensor, eps: Tensor, tau: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Straight-through gradients: hard gate forward, ``sigmoid(eta / tau)`` backward."""
    eta = alpha + (torch.log(u) - torch.log1p(-u))
    hard = (eta > 0).to(grad.dtype)
    soft = torch.sigmoid(eta / tau)
    slab = mu + F.softplus(rho) * eps
    g_mu = grad * hard
    g_rho = g_mu * eps * torch.sigmoid(rho)
    g_alpha = grad * slab * soft * (1.0 - soft) / tau
    return g_mu, g_rho, g_alpha


def kl_forward(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    log_sigma0: float,
    var0: float,
) -> Tensor:
    """Elementwise spike-and-slab KL (DESIGN section 1), in log space."""
    sigma = F.softplus(rho)
    phi = torch.sigmoid(alpha)
    log_phi = F.logsigmoid(alpha)
    log_1mphi = F.logsigmoid(-alpha)
    slab = log_sigma0 - _log_sigma(rho, sigma) + (sigma * sigma + mu * mu) / (2.0 * var0) - 0.5
    return phi * (log_phi - log_lam) + (1.0 - phi) * (log_1mphi - log_1mlam) + phi * slab


def kl_sum_forward(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    log_sigma0: float,
    var0: float,
) -> Tensor:
    """KL summed over the last dimension (callers pass ``(-1,)`` or ``(R, -1)`` views)."""
    return kl_forward(mu, rho, alpha, log_lam, log_1mlam, log_sigma0, var0).sum(-1)


def kl_forward_saving(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    log_sigma0: float,
    var0: float,
) -> tuple[Tensor, tuple[Tensor, ...]]:
    """Eager KL summed over the last dimension, plus what :func:`kl_backward_saved` needs."""
    sigma = F.softplus(rho)
    phi = torch.sigmoid(alpha)
    slab = log_sigma0 - _log_sigma(rho, sigma) + (sigma * sigma + mu * mu) / (2.0 * var0) - 0.5
    kl = (
        phi * (F.logsigmoid(alpha) - log_lam)
        + (1.0 - phi) * (F.logsigmoid(-alpha) - log_1mlam)
        + phi * slab
    )
    # d/dalpha = phi (1 - phi) [alpha - logit(lambda) + slab]
    d_alpha = phi * (1.0 - phi) * (alpha + (slab - log_lam + log_1mlam))
    d_mu = phi * mu / var0
    d_rho = phi * (sigma / var0 - 1.0 / sigma) * torch.sigmoid(rho)
    return kl.sum(-1), (d_mu, d_rho, d_alpha)


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
    var0: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """Analytic gradient of the elementwise KL times ``grad`` (broadcastable)."""
    sigma = F.softplus(rho)
    phi = torch.sigmoid(alpha)
    slab = log_sigma0 - _log_sigma(rho, sigma) + (sigma * sigma + mu * mu) / (2.0 * var0) - 0.5
    g_phi = grad * phi
    # d/dalpha: phi (1 - phi) [logit(phi) - logit(lambda) + slab]
    g_alpha = g_phi * (1.0 - phi) * (alpha - log_lam + log_1mlam + slab)
    g_mu = g_phi * mu / var0
    g_rho = g_phi * (sigma / var0 - 1.0 / sigma) * torch.sigmoid(rho)
    return g_mu, g_rho, g_alpha


_EAGER: dict[str, Callable[..., Any]] = {
    "gumbel_forward": gumbel_forward,
    "gumbel_backward": gumbel_backward,
    "kl_sum_forward": kl_sum_forward,
    "kl_backward": kl_backward,
}
_COMPILED: dict[str, Callable[..., Any]] = {}
_backend = Backend(os.environ.get("SVBNN_KERNELS", Backend.EAGER.value))


def set_backend(name: Backend | str) -> None:
    """Run the spike-and-slab kernels eagerly (default) or compiled with ``torch.compile``.

    The compiled backend needs a C/C++ compiler (CPU) or Triton (CUDA); the first call of
    each kernel compiles it (seconds), later calls reuse it.
    """
    global _backend
    _backend = Backend(name)


def backend() -> Backend:
    """The backend in use."""
    return _backend


def kernels() -> dict[str, Callable[..., Any]]:
    """The kernel functions of the current backend."""
    if _backend is Backend.EAGER:
        return _EAGER
    if not _COMPILED:
        logger.info("compiling spike-and-slab kernels with torch.compile")
        for name, fn in _EAGER.items():
            _COMPILED[name] = torch.compile(fn, dynamic=True)
    return _COMPILED
