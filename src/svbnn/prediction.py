"""Monte Carlo prediction from the variational posterior.

``f_H(x) = (1/H) sum_h f_{theta_h}(x)`` with ``theta_h ~ q`` drawn with exact Bernoulli
gates. One draw ``theta_h`` is applied to every row (rows are processed in chunks to bound
memory), so the H curves are genuine posterior function draws.

Under any likelihood (:class:`svbnn.objectives.Likelihood`), :func:`response_mean` and
:func:`response_interval` give the posterior predictive mean of a response and an interval
for a new one through the likelihood's inverse link and sampler (e.g. counts under
:class:`~svbnn.objectives.PoissonLikelihood`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from .nn.base import ForwardMode, forward_mode, frozen_sample, set_generator, variational_layers
from .objectives import Likelihood

__all__ = [
    "credible_interval",
    "interval_of_draws",
    "predict_proba",
    "prediction_interval",
    "predictive_mean",
    "response_interval",
    "response_mean",
    "sample_outputs",
]


def _check_level(level: float) -> None:
    if not (0.0 < level < 1.0):
        raise ValueError(f"level must lie in (0, 1), got {level}")


@contextmanager
def _evaluation(model: nn.Module, generator: torch.Generator | None) -> Iterator[None]:
    """Put ``model`` in eval mode with its layers drawing from ``generator`` (when given);
    on exit, restore its training mode and its layers' own generators."""
    was_training = model.training
    previous = [layer.generator for layer in variational_layers(model)]
    model.eval()
    if generator is not None:
        set_generator(model, generator)
    try:
        yield
    finally:
        model.train(was_training)
        for layer, gen in zip(variational_layers(model), previous, strict=True):
            layer.generator = gen


@torch.no_grad()
def sample_outputs(
    model: nn.Module,
    X: Tensor,
    n_samples: int = 30,
    *,
    generator: torch.Generator | None = None,
    chunk_size: int = 8192,
    transform: str | None = None,
    mode: ForwardMode | str = ForwardMode.SAMPLE,
) -> Tensor:
    """Network outputs under ``n_samples`` posterior draws.

    Parameters
    ----------
    model : nn.Module
    X : Tensor
        ``(n, ...)`` inputs (``(R, n, ...)`` for replicated models).
    n_samples : int
        ``H``.
    generator : torch.Generator, optional
        Source of the weight draws (used for this call only: the layers' own generators
        are restored afterwards, so prediction never changes a training run's stream).
    chunk_size : int
        Rows per forward pass.
    transform : {None, "softmax"}
        Applied to each draw's output (class probabilities for classifiers).
    mode : ForwardMode
        ``"sample"`` for posterior draws; ``"mean"``/``"median"`` give one deterministic pass
        (then ``n_samples`` is ignored).

    Returns
    -------
    Tensor
        ``(H, n, out)`` (``(H, R, n, out)`` replicated).
    """
    if n_samples < 1:
        raise ValueError(f"n_samples must be positive, got {n_samples}")
    mode = ForwardMode(mode)
    if mode is not ForwardMode.SAMPLE:
        n_samples = 1
    outs = []
    with _evaluation(model, generator), forward_mode(model, mode):
        for _ in range(n_samples):
            with frozen_sample(model):
                parts = [model(xc) for xc in _chunks(model, X, chunk_size)]
            out = torch.cat(parts, dim=_row_dim(model))
            if transform == "softmax":
                out = torch.softmax(out, dim=-1)
            outs.append(out)
    return torch.stack(outs)


def _row_dim(model: nn.Module) -> int:
    return 1 if any(m.n_replicates is not None for m in variational_layers(model)) else 0


def _chunks(model: nn.Module, X: Tensor, chunk_size: int) -> tuple[Tensor, ...]:
    return torch.split(X, chunk_size, dim=_row_dim(model))


def predictive_mean(
    model: nn.Module,
    X: Tensor,
    n_samples: int = 30,
    *,
    generator: torch.Generator | None = None,
    chunk_size: int = 8192,
) -> Tensor:
    """Posterior mean estimator ``f_H``: ``(n, out)`` (``(R, n, out)`` replicated)."""
    return sample_outputs(model, X, n_samples, generator=generator, chunk_size=chunk_size).mean(0)


def credible_interval(
    model: nn.Module,
    X: Tensor,
    level: float = 0.95,
    n_samples: int = 600,
    *,
    generator: torch.Generator | None = None,
    chunk_size: int = 8192,
) -> tuple[Tensor, Tensor]:
    """Equal-tailed credible interval of the response mean ``E[y | x] = f_theta(x)``.

    The ``(1-level)/2`` and ``(1+level)/2`` empirical quantiles of ``{f_{theta_h}(x)}``
    over ``n_samples`` draws (the paper uses 600).

    Returns
    -------
    lower, upper : Tensor
        Each ``(n, out)``.
    """
    _check_level(level)
    draws = sample_outputs(model, X, n_samples, generator=generator, chunk_size=chunk_size)
    return interval_of_draws(draws, level)


def prediction_interval(
    model: nn.Module,
    X: Tensor,
    noise_std: float,
    level: float = 0.95,
    n_samples: int = 600,
    *,
    generator: torch.Generator | None = None,
    chunk_size: int = 8192,
) -> tuple[Tensor, Tensor]:
    """Equal-tailed interval for a new response ``y = f_theta(x) + N(0, noise_std^2)``.

    Each posterior draw gets one Gaussian noise draw; the quantiles of those simulated
    responses bound the interval (posterior predictive, not the mean's credible interval).
    """
    _check_level(level)
    if not noise_std > 0:
        raise ValueError(f"noise_std must be positive, got {noise_std}")
    draws = sample_outputs(model, X, n_samples, generator=generator, chunk_size=chunk_size)
    return interval_of_draws(draws, level, noise_std, generator=generator)


def interval_of_draws(
    draws: Tensor,
    level: float = 0.95,
    noise_std: float | None = None,
    *,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """The equal-tailed interval of ``draws`` ``(H, ...)`` over their first dimension:
    :func:`credible_interval`'s, or with ``noise_std``, :func:`prediction_interval`'s
    (each draw plus one Gaussian noise draw from ``generator``). Each bound ``(...)``."""
    _check_level(level)
    if noise_std is not None:
        noise = torch.randn(
            draws.shape, generator=generator, dtype=draws.dtype, device=draws.device
        )
        draws = draws + noise_std * noise
    a = (1.0 - level) / 2.0
    q = torch.tensor([a, 1.0 - a], dtype=draws.dtype, device=draws.device)
    lo, hi = torch.quantile(draws, q, dim=0)
    return lo, hi


def predict_proba(
    model: nn.Module,
    X: Tensor,
    n_samples: int = 30,
    *,
    generator: torch.Generator | None = None,
    chunk_size: int = 8192,
) -> Tensor:
    """Bayesian predictive class probabilities: the average of the H softmax vectors, ``(n, C)``."""
    draws = sample_outputs(
        model, X, n_samples, generator=generator, chunk_size=chunk_size, transform="softmax"
    )
    return draws.mean(0)


@torch.no_grad()
def response_mean(
    model: nn.Module,
    X: Tensor,
    likelihood: Likelihood,
    n_samples: int = 30,
    *,
    generator: torch.Generator | None = None,
    chunk_size: int = 8192,
) -> Tensor:
    """Posterior predictive mean of the response, ``(1/H) sum_h E[y | f_{theta_h}(x)]``.

    Parameters
    ----------
    model : nn.Module
    X : Tensor
        ``(n, ...)`` inputs (``(R, n, ...)`` replicated).
    likelihood : Likelihood
        Its :meth:`~svbnn.objectives.Likelihood.mean` (the inverse link) maps each draw's
        output to the response mean (a Poisson rate, class probabilities, ``f`` itself).
    n_samples : int
        ``H`` posterior draws.
    generator : torch.Generator, optional
        As :func:`sample_outputs`.
    chunk_size : int
        Rows per forward pass.

    Returns
    -------
    Tensor
        ``(n, out)`` (``(R, n, out)`` replicated).
    """
    draws = sample_outputs(model, X, n_samples, generator=generator, chunk_size=chunk_size)
    return likelihood.mean(draws).mean(0)


@torch.no_grad()
def response_interval(
    model: nn.Module,
    X: Tensor,
    likelihood: Likelihood,
    level: float = 0.95,
    n_samples: int = 600,
    *,
    generator: torch.Generator | None = None,
    chunk_size: int = 8192,
) -> tuple[Tensor, Tensor]:
    """Equal-tailed interval for a new response from the posterior predictive mixture.

    Each of ``n_samples`` posterior draws ``theta_h`` gives one response drawn from
    ``p(y | f_{theta_h}(x))`` (:meth:`~svbnn.objectives.Likelihood.sample`); the bounds
    are the ``(1-level)/2`` and ``(1+level)/2`` quantiles of those responses, taken as
    drawn values (the lower one rounded down to a draw, the upper one up): whole numbers
    for counts, and at least ``level`` of the mixture's mass up to Monte Carlo error.

    Parameters
    ----------
    model : nn.Module
    X : Tensor
        ``(n, ...)`` inputs (``(R, n, ...)`` replicated).
    likelihood : Likelihood
    level : float
        In ``(0, 1)``.
    n_samples : int
        ``H`` posterior draws (one response each).
    generator : torch.Generator, optional
        Source of the weight and the response draws.
    chunk_size : int
        Rows per forward pass.

    Returns
    -------
    lower, upper : Tensor
        Each ``(n,)`` (``(R, n)`` replicated), the responses' dtype.
    """
    _check_level(level)
    draws = sample_outputs(model, X, n_samples, generator=generator, chunk_size=chunk_size)
    ys = likelihood.sample(draws, generator=generator)
    a = (1.0 - level) / 2.0
    lo = torch.quantile(ys, a, dim=0, interpolation="lower")
    hi = torch.quantile(ys, 1.0 - a, dim=0, interpolation="higher")
    return lo, hi
