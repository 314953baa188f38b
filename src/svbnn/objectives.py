"""ELBO terms: the exact log-space spike-and-slab KL, likelihoods and the per-datum objective.

Likelihoods follow the :class:`Likelihood` protocol: ``log_prob`` per row, the inverse
link (``mean``) and a sampler of responses (``sample``), which prediction intervals use.
A fast path of a model (a fused or native training step) computes the likelihood's
formula itself; it runs only for a likelihood that declares one of the closed set of
kinds in :class:`FastPath` and whose ``log_prob`` is that kind's own
(:func:`fast_path_spec`). Any other likelihood takes the general autograd path.

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
from enum import Enum
from typing import Any, Protocol, cast, runtime_checkable

import torch
import torch.nn.functional as F
from torch import Tensor

from ._engine.kernels import (
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
    "FastPath",
    "GaussianLikelihood",
    "Likelihood",
    "PoissonLikelihood",
    "RowWeightedLikelihood",
    "fast_path_spec",
    "gaussian_nll",
    "log_softplus",
    "spike_slab_kl",
    "spike_slab_kl_reference",
]


def gaussian_nll(sq_residual: Tensor, var: Tensor | float) -> Tensor:
    """The Gaussian negative log-likelihood ``(log(2 pi var) + r^2 / var) / 2``: the one
    definition that :class:`GaussianLikelihood` and the fast paths' whole-step formulas use.

    Parameters
    ----------
    sq_residual : Tensor
        Squared residuals ``r^2`` (any shape), or their mean (the per-datum NLL).
    var : Tensor or float
        The noise variance, broadcastable to ``sq_residual``.

    Returns
    -------
    Tensor
        Shaped like ``sq_residual`` (broadcast with ``var``).
    """
    log_term = (
        torch.log(2 * math.pi * var) if isinstance(var, Tensor) else math.log(2 * math.pi * var)
    )
    return 0.5 * (log_term + sq_residual / var)


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
        ctx.compiled = use_compiled(mu.numel(), mu.device)
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


class FastPath(str, Enum):
    """The closed set of likelihood kinds that a model's fast paths compute themselves.

    A likelihood declares one through an optional ``fused_spec(out_features)`` method
    returning ``(kind, scale)`` (see :meth:`GaussianLikelihood.fused_spec`); the fast
    paths accept it only as :func:`fast_path_spec` validates it. Each kind names the one
    class whose ``log_prob`` the fast formula reproduces.

    ``GAUSSIAN``: :class:`GaussianLikelihood` of one output, ``scale`` its noise variance.
    ``CATEGORICAL``: :class:`CategoricalLikelihood`, ``scale`` unused (1).
    """

    GAUSSIAN = "gaussian"
    CATEGORICAL = "categorical"


@runtime_checkable
class Likelihood(Protocol):
    """What a likelihood of svbnn provides: the training objective's term and the
    predictive distribution of a response given the network's output.

    ``train`` needs only :meth:`log_prob`; prediction (:func:`svbnn.prediction.response_mean`,
    :func:`svbnn.prediction.response_interval`) uses :meth:`mean` and :meth:`sample`.
    A likelihood may also declare a fast-path kind (an optional
    ``fused_spec(out_features) -> (FastPath, float) | None``); one that does not, or
    declares a kind whose ``log_prob`` it does not share, is trained by the general
    autograd path (:func:`fast_path_spec`).
    """

    def log_prob(self, output: Tensor, target: Tensor) -> Tensor:
        """``log p(y | f(x))`` per row: ``output`` ``(..., m, k)``, ``target`` ``(..., m)``;
        returns ``(..., m)``."""
        ...

    def mean(self, output: Tensor) -> Tensor:
        """The inverse link: ``E[y | f(x)]`` from outputs ``(..., m, k)`` (same shape)."""
        ...

    def sample(self, output: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """One response per row drawn from ``p(y | f(x))``: ``(..., m)`` from ``(..., m, k)``."""
        ...


_FAST_PATH_OWNERS: dict[FastPath, type[Any]] = {}  # kind -> the class it computes


def fast_path_spec(likelihood: object, out_features: int) -> tuple[FastPath, float] | None:
    """The fast-path kind a likelihood declares, validated against the closed set.

    Parameters
    ----------
    likelihood : object
        Any likelihood.
    out_features : int
        The model's output width.

    Returns
    -------
    (FastPath, float) or None
        ``(kind, scale)`` when ``likelihood.fused_spec(out_features)`` names a member of
        :class:`FastPath` and ``likelihood``'s ``log_prob`` is that kind's own (the
        class's, not overridden); ``None`` otherwise: no declaration, an unknown kind, or a
        likelihood (a subclass, a copy of the method) whose ``log_prob`` differs from the
        formula the fast path computes. ``None`` sends the model to its general path.
    """
    declare = getattr(likelihood, "fused_spec", None)
    spec = declare(out_features) if callable(declare) else None
    if spec is None:
        return None
    kind = spec[0]
    if not isinstance(kind, FastPath):
        try:
            kind = FastPath(kind)
        except ValueError:
            return None
    if getattr(type(likelihood), "log_prob", None) is not _FAST_PATH_OWNERS[kind].log_prob:
        return None
    return kind, float(spec[1])


def _rows(output: Tensor, target_dims: int) -> Tensor:
    """Outputs ``(..., m, 1)`` against targets ``(..., m)`` as ``(..., m)``."""
    return output.squeeze(-1) if output.dim() == target_dims + 1 else output


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
        output = _rows(output, target.dim())
        if isinstance(self.noise_std, Tensor):
            var = self.noise_std.to(output) ** 2
            return -gaussian_nll((target - output) ** 2, var)
        var_f = self.noise_std**2
        # gaussian_nll in two autograd operations (each costs microseconds on a small
        # network's step): const - r^2 / (2 var).
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
        (FastPath, float) or None
            ``(FastPath.GAUSSIAN, noise variance)`` for one output and a float noise level;
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
        return FastPath.GAUSSIAN, noise * noise

    def mean(self, output: Tensor) -> Tensor:
        """The identity link: ``E[y | f] = f``, ``output`` unchanged."""
        return output

    def sample(self, output: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """``f + noise_std * N(0, 1)`` per row: ``(..., m)`` from ``(..., m, 1)`` outputs."""
        f = output.squeeze(-1) if output.shape[-1:] == (1,) else output
        noise = torch.randn(f.shape, generator=generator, dtype=f.dtype, device=f.device)
        std = self.noise_std
        if isinstance(std, Tensor):  # one level per replicate, (R, 1), against f (R, m)
            std = std.detach().to(f)
        return f + std * noise


class CategoricalLikelihood(torch.nn.Module):
    """``y ~ Categorical(softmax(f(x)))``."""

    def log_prob(self, output: Tensor, target: Tensor) -> Tensor:
        """Log probability per datum: ``output`` ``(..., m, C)`` logits, ``target`` ``(..., m)``."""
        logp = F.log_softmax(output, dim=-1)
        return logp.gather(-1, target.long().unsqueeze(-1)).squeeze(-1)

    def fused_spec(self, out_features: int) -> tuple[str, float] | None:
        """``(FastPath.CATEGORICAL, 1.0)`` for a model's fused ELBO path (see
        :meth:`GaussianLikelihood.fused_spec`); ``None`` in a subclass that overrides
        :meth:`log_prob`. ``out_features``: the number of classes (any)."""
        if type(self).log_prob is not CategoricalLikelihood.log_prob:
            return None
        return FastPath.CATEGORICAL, 1.0

    def mean(self, output: Tensor) -> Tensor:
        """Class probabilities ``softmax(f)``, ``(..., m, C)``."""
        return torch.softmax(output, dim=-1)

    def sample(self, output: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """One class index per row, ``(..., m)`` int64, from logits ``(..., m, C)``."""
        probs = torch.softmax(output, dim=-1)
        flat = probs.reshape(-1, probs.shape[-1])
        draws = torch.multinomial(flat, 1, generator=generator)
        return draws.reshape(probs.shape[:-1])


class RowWeightedLikelihood(torch.nn.Module):
    """A likelihood whose log density of row ``i`` is weighted by ``w_i``.

    The targets carry the weights: ``target[..., 0]`` is the response (or the class code)
    and ``target[..., 1]`` its weight, so that minibatches (:func:`svbnn.training.train`)
    draw each weight with its row. With weights of mean 1 the per-datum objective
    ``-mean_i w_i log p(y_i | f(x_i)) + KL / n`` keeps the likelihood/KL balance of the
    unweighted ELBO (the estimators' ``sample_weight`` and ``class_weight``). The base
    likelihood is a submodule: its parameters (a learned noise level) train with the
    network. The native training step and epochs compute this weighting for a
    :class:`GaussianLikelihood` with a learned noise level under the local sampler and for a
    :class:`CategoricalLikelihood` under the Gumbel sampler
    (:mod:`svbnn._engine.native_step`); any other base trains on the autograd path.

    Parameters
    ----------
    base : torch.nn.Module
        The likelihood of each row (a :class:`Likelihood`).
    """

    def __init__(self, base: torch.nn.Module) -> None:
        super().__init__()
        self.base = base

    def log_prob(self, output: Tensor, target: Tensor) -> Tensor:
        """``w * base.log_prob(output, y)``, shape ``(..., m)``; ``target`` ``(..., m, 2)``."""
        base = cast(Likelihood, self.base)  # a likelihood module (nn.Module's attr type)
        return target[..., 1] * base.log_prob(output, target[..., 0])


class PoissonLikelihood(torch.nn.Module):
    """``y ~ Poisson(exp(eta))`` with ``eta = f(x) + log_offset``: counts, log link.

    ``log p(y | eta) = y eta - exp(eta) - log(y!)``. The network's one output is the log
    rate relative to ``exp(log_offset)`` (a base rate, e.g. the training rows' mean count,
    so that a network started near 0 starts at that rate). It declares no fast path:
    models train it through the general autograd path.

    Parameters
    ----------
    log_offset : float
        Added to every output before the link; 0 makes the output the log rate itself.
    """

    def __init__(self, log_offset: float = 0.0) -> None:
        super().__init__()
        if not math.isfinite(log_offset):
            raise ValueError(f"log_offset must be finite, got {log_offset}")
        self.log_offset = float(log_offset)

    def log_rate(self, output: Tensor) -> Tensor:
        """``eta = output + log_offset``, ``output``'s shape."""
        return output + self.log_offset if self.log_offset != 0.0 else output

    def log_prob(self, output: Tensor, target: Tensor) -> Tensor:
        """Log probability per datum.

        Parameters
        ----------
        output : Tensor
            ``(..., m, 1)`` or ``(..., m)`` network outputs.
        target : Tensor
            ``(..., m)`` counts (non-negative; float or integer).

        Returns
        -------
        Tensor
            ``(..., m)``.
        """
        eta = self.log_rate(_rows(output, target.dim()))
        y = target.to(eta.dtype)
        return y * eta - torch.exp(eta) - torch.lgamma(y + 1.0)

    def mean(self, output: Tensor) -> Tensor:
        """The inverse link: the rate ``exp(eta)``, ``output``'s shape."""
        return torch.exp(self.log_rate(output))

    def sample(self, output: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """One count per row, ``(..., m)`` (float, integer-valued), from outputs
        ``(..., m, 1)``."""
        f = output.squeeze(-1) if output.shape[-1:] == (1,) else output
        return torch.poisson(self.mean(f), generator=generator)

    def extra_repr(self) -> str:
        return f"log_offset={self.log_offset}"


_FAST_PATH_OWNERS.update(
    {FastPath.GAUSSIAN: GaussianLikelihood, FastPath.CATEGORICAL: CategoricalLikelihood}
)
