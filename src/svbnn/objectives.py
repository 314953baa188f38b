"""ELBO terms: the exact log-space spike-and-slab KL, likelihoods and the per-datum objective.

The KL of one parameter (DESIGN section 1) is

``phi log(phi/lambda) + (1-phi) log((1-phi)/(1-lambda))
+ phi [log(sigma_0/sigma) + (sigma^2 + mu^2) / (2 sigma_0^2) - 1/2]``

with ``phi = sigmoid(alpha)`` and ``sigma = softplus(rho)``. It is evaluated from
``log phi = logsigmoid(alpha)``, ``log(1 - phi) = logsigmoid(-alpha)``, ``log lambda`` and
``log(1 - lambda) = log1mexp(log lambda)``, so it is finite for every alpha and every
lambda in (0, 1), including log-lambda = -1000. Its gradient is written in closed form
(one fused pass instead of an autograd graph of a dozen elementwise nodes).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ._kernels import (
    kernels,
    kl_backward_saved,
    kl_forward,
    kl_forward_saving,
    log_softplus,
    use_compiled,
)
from .priors import log1mexp

__all__ = [
    "CategoricalLikelihood",
    "GaussianLikelihood",
    "log_softplus",
    "spike_slab_kl",
    "spike_slab_kl_reference",
]


class _SpikeSlabKL(torch.autograd.Function):
    """KL summed over the last dimension, with an analytic (fused) backward pass.

    Eager, the forward also evaluates the three elementwise derivatives (they share every
    intermediate with the KL); compiled, the backward recomputes them in one fused loop.
    """

    @staticmethod
    def forward(
        ctx: Any,
        mu: Tensor,
        rho: Tensor,
        alpha: Tensor,
        log_lam: Tensor,
        log_sigma0: float,
    ) -> Tensor:
        log_1mlam = log1mexp(log_lam)
        prec0 = math.exp(-2.0 * log_sigma0)  # the kernels take 1 / sigma_0^2
        ctx.compiled = use_compiled(mu.numel())
        if ctx.compiled:
            ctx.save_for_backward(mu, rho, alpha, log_lam, log_1mlam)
            ctx.consts = (log_sigma0, prec0)
            out: Tensor = kernels(True)["kl_sum_forward"](
                mu, rho, alpha, log_lam, log_1mlam, log_sigma0, prec0
            )
            return out
        kl, derivs = kl_forward_saving(mu, rho, alpha, log_lam, log_1mlam, log_sigma0, prec0)
        ctx.save_for_backward(*derivs)
        return kl

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        if ctx.compiled:
            mu, rho, alpha, log_lam, log_1mlam = ctx.saved_tensors
            log_sigma0, prec0 = ctx.consts
            g_mu, g_rho, g_alpha = kernels(True)["kl_backward"](
                grad.unsqueeze(-1), mu, rho, alpha, log_lam, log_1mlam, log_sigma0, prec0
            )
        else:
            g_mu, g_rho, g_alpha = kl_backward_saved(grad.unsqueeze(-1), ctx.saved_tensors)
        return g_mu, g_rho, g_alpha, None, None


def spike_slab_kl(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    log_inclusion: Tensor | float,
    prior_variance: float,
    batch_dims: int = 0,
) -> Tensor:
    """Exact KL(q || pi) of independent spike-and-slab parameters, summed.

    Parameters
    ----------
    mu, rho, alpha : Tensor
        Variational parameters, all of one shape ``(*B, *S)``; ``sigma = softplus(rho)``,
        ``phi = sigmoid(alpha)``.
    log_inclusion : Tensor or float
        ``log(lambda)``, finite and negative: a scalar, or one value per batch index
        (shape ``B``, e.g. one per replicate).
    prior_variance : float
        Slab variance ``sigma_0^2``.
    batch_dims : int
        Number of leading dimensions ``B`` that are kept (0: one scalar total).

    Returns
    -------
    Tensor
        KL summed over ``S``: shape ``B``.
    """
    batch = mu.shape[:batch_dims]
    log_lam = torch.as_tensor(log_inclusion, dtype=mu.dtype, device=mu.device)
    log_lam = log_lam.reshape(*batch, 1) if log_lam.numel() > 1 else log_lam.reshape(())
    flat = [t.reshape(*batch, -1) for t in (mu, rho, alpha)]
    out: Tensor = _SpikeSlabKL.apply(*flat, log_lam, 0.5 * math.log(prior_variance))
    return out


def spike_slab_kl_reference(
    mu: Tensor, rho: Tensor, alpha: Tensor, log_inclusion: Tensor | float, prior_variance: float
) -> Tensor:
    """Elementwise KL through plain autograd; the reference the fused version is tested against."""
    log_lam = torch.as_tensor(log_inclusion, dtype=mu.dtype, device=mu.device)
    return kl_forward(
        mu,
        rho,
        alpha,
        log_lam,
        log1mexp(log_lam),
        0.5 * math.log(prior_variance),
        1.0 / prior_variance,
    )


NOISE_STD_RANGE: tuple[float, float] = (1e-18, 1e18)
"""Noise standard deviations :class:`GaussianLikelihood` accepts (``noise_std^2`` and its
reciprocal stay inside float32's range)."""


class GaussianLikelihood(torch.nn.Module):
    """``y ~ N(f(x), noise_std^2)`` with a known or a learned noise standard deviation.

    Parameters
    ----------
    noise_std : float or Tensor
        ``sigma_eps``, known (the paper fixes it to 1 in the simulations and grid-searches
        it on UCI data), or the starting value of a learned one. A tensor of shape
        ``(R, 1)`` gives each replicate of a replicated model its own known noise level
        (e.g. a grid search trained as one net).
    learn_noise : bool
        Learn ``sigma_eps``: a parameter ``log_noise_std`` (of ``noise_std``'s shape, a
        scalar or one per replicate, started at ``log(noise_std)``) that the optimiser
        trains with the variational parameters (:func:`svbnn.training.train` does so),
        i.e. a type-II (empirical-Bayes) point estimate maximising the ELBO. The model's
        fused ELBO path does not apply (it takes a fixed noise level); the general path
        computes the same objective.

    Attributes
    ----------
    noise_std : float or Tensor
        The known value, or, when learned, ``exp(log_noise_std)`` (a tensor of the
        starting value's shape that carries the gradient).
    """

    def __init__(self, noise_std: float | Tensor = 1.0, learn_noise: bool = False) -> None:
        super().__init__()
        std = torch.as_tensor(noise_std, dtype=torch.float64)
        low, high = NOISE_STD_RANGE
        if not bool(torch.all(torch.isfinite(std) & (std >= low) & (std <= high))):
            raise ValueError(
                f"noise_std must lie in [{low:g}, {high:g}], got {noise_std}: outside it the "
                "likelihood's 1/noise_std^2 leaves float32's range"
            )
        self.learn_noise = bool(learn_noise)
        if self.learn_noise:
            # Parametrised on the log scale: positive, and Adam's steps are relative.
            # A tensor start value keeps its float dtype; a number takes torch's default.
            dtype = torch.get_default_dtype()
            if isinstance(noise_std, Tensor) and noise_std.is_floating_point():
                dtype = noise_std.dtype
            log_std = std.log().to(dtype)
            self.log_noise_std = torch.nn.Parameter(log_std)
        self._noise_std: float | Tensor = (
            float(std) if std.dim() == 0 else torch.as_tensor(noise_std).detach().clone()
        )

    @property
    def noise_std(self) -> float | Tensor:
        """The noise sd (see the class attributes)."""
        if self.__dict__.get("learn_noise", False):
            return self.log_noise_std.exp()
        return self._noise_std

    @noise_std.setter
    def noise_std(self, value: float | Tensor) -> None:
        if self.__dict__.get("learn_noise", False):
            raise AttributeError("a learned noise_std is set through log_noise_std")
        self._noise_std = value

    def log_prob(self, output: Tensor, target: Tensor) -> Tensor:
        """Log density per datum.

        Parameters
        ----------
        output : Tensor
            ``(..., m, 1)`` or ``(..., m)`` network outputs.
        target : Tensor
            ``(..., m)`` responses.

        Returns
        -------
        Tensor
            ``(..., m)``.
        """
        if output.dim() == target.dim() + 1:
            output = output.squeeze(-1)
        if isinstance(self.noise_std, Tensor):
            var = self.noise_std.to(output) ** 2
            return -0.5 * (torch.log(2 * math.pi * var) + (target - output) ** 2 / var)
        var_f = self.noise_std**2
        # Two autograd operations (each costs microseconds on a small network's step).
        diff = target - output
        const = diff.new_full((), -0.5 * math.log(2 * math.pi * var_f))
        return torch.addcmul(const, diff, diff, value=-0.5 / var_f)

    def fused_spec(self, out_features: int) -> tuple[str, float] | None:
        """What a model's fused ELBO path needs to know of this likelihood.

        Parameters
        ----------
        out_features : int
            The model's output width.

        Returns
        -------
        (str, float) or None
            ``("gaussian", noise variance)`` for one output and a float noise level;
            ``None`` otherwise (a per-replicate noise tensor, several outputs) and in a
            subclass that overrides :meth:`log_prob` (the fused path would not compute
            it): the model then runs its general path (see
            :meth:`svbnn.nn.VariationalContainer.fused_negative_elbo`).
        """
        noise = self.noise_std
        if (
            type(self).log_prob is not GaussianLikelihood.log_prob
            or out_features != 1
            or not isinstance(noise, float)
        ):
            return None
        return "gaussian", noise * noise


class CategoricalLikelihood(torch.nn.Module):
    """``y ~ Categorical(softmax(f(x)))``."""

    def log_prob(self, output: Tensor, target: Tensor) -> Tensor:
        """Log probability per datum: ``output`` ``(..., m, C)`` logits, ``target`` ``(..., m)``."""
        logp = F.log_softmax(output, dim=-1)
        return logp.gather(-1, target.long().unsqueeze(-1)).squeeze(-1)

    def fused_spec(self, out_features: int) -> tuple[str, float] | None:
        """``("categorical", 1.0)`` for a model's fused ELBO path (see
        :meth:`GaussianLikelihood.fused_spec`); ``None`` in a subclass that overrides
        :meth:`log_prob`. ``out_features``: the number of classes (any)."""
        if type(self).log_prob is not CategoricalLikelihood.log_prob:
            return None
        return "categorical", 1.0
