"""Prior settings for the spike-and-slab prior, in particular the theoretical ``lambda_opt``.

All inclusion probabilities are handled in log space: the paper sweeps the prior inclusion
probability down to 1e-200, which underflows float32, and the library accepts log-lambda
down to -1000 (below float64's range) everywhere.
"""

from __future__ import annotations

import math
import numbers

import torch
from torch import Tensor

__all__ = [
    "LOG_INCLUSION_MIN",
    "PRIOR_VARIANCE_RANGE",
    "check_prior_variance",
    "lambda_opt",
    "log1mexp",
    "log_lambda_opt",
    "REFERENCE_HIDDEN",
    "mlp_log_lambda_auto",
    "mlp_log_lambda_opt",
    "resolve_log_inclusion",
]


LOG_INCLUSION_MIN = -1e30
"""The smallest ``log(lambda)`` accepted: below it the value leaves float32's range (at
-1e38 a fit's loss becomes infinite at the first epoch)."""

PRIOR_VARIANCE_RANGE: tuple[float, float] = (1e-12, 1e30)
"""The slab (or Gaussian prior) variances ``sigma_0^2`` the layers and estimators accept.

The KL term scales with ``1 / sigma_0^2``: below the range it swamps the likelihood beyond
what float32 training resolves (measured on a 4-50-1 network and 200 rows: at 1e-30 the
per-datum loss sits at 5e28 and does not move in 100 epochs, at 1e-40 it overflows and the
fit reports a divergence); above it, ``sigma_0^2`` itself leaves float32's range (3.4e38)."""


def check_prior_variance(value: object, name: str = "prior_variance") -> float:
    """``value`` as a float if it is a prior variance in :data:`PRIOR_VARIANCE_RANGE`.

    Parameters
    ----------
    value : object
        The candidate.
    name : str
        The argument's name, for the message.

    Returns
    -------
    float

    Raises
    ------
    TypeError
        Not a real number.
    ValueError
        Not finite, or outside the range (the message names ``name`` and the range).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    v = float(value)
    low, high = PRIOR_VARIANCE_RANGE
    if not (math.isfinite(v) and low <= v <= high):
        raise ValueError(
            f"{name} must lie in [{low:g}, {high:g}], got {value!r}: outside it the KL "
            "term's 1/prior_variance makes float32 training, its loss and the reported "
            "statistics meaningless (the fit freezes or overflows)"
        )
    return v


def log1mexp(x: Tensor) -> Tensor:
    """Compute ``log(1 - exp(x))`` for ``x < 0`` without cancellation.

    Uses ``log(-expm1(x))`` near zero and ``log1p(-exp(x))`` far from it (Maechler, 2012).

    Parameters
    ----------
    x : Tensor
        Any shape, values in ``(-inf, 0)``.

    Returns
    -------
    Tensor
        Same shape as ``x``.
    """
    return torch.where(
        x > -math.log(2.0),
        torch.log(-torch.expm1(x)),
        torch.log1p(-torch.exp(x)),
    )


def log_lambda_opt(
    n_params: int,
    n_hidden_layers: int,
    width: int,
    n_train: int,
    n_features: int,
    delta: float = 0.1,
) -> float:
    """Log of the theoretically chosen prior inclusion probability (Theorem 4.1).

    ``log(1/lambda) = log(T) + delta * [(L + 1) log(N) + log(sqrt(n) * p)]``.

    Parameters
    ----------
    n_params : int
        ``T``, the number of weights and biases of the network.
    n_hidden_layers : int
        ``L``, the number of hidden layers.
    width : int
        ``N``, the hidden width. For unequal widths pass the largest one (the theory
        assumes equal widths; the largest width gives the most conservative prior).
    n_train : int
        ``n``, the training-set size.
    n_features : int
        ``p``, the input dimension.
    delta : float
        The constant ``delta`` of Theorem 4.1; the paper uses 0.1 in every experiment.

    Returns
    -------
    float
        ``log(lambda_opt)``, always finite and negative.
    """
    for name, value in [
        ("n_params", n_params),
        ("width", width),
        ("n_train", n_train),
        ("n_features", n_features),
    ]:
        if value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value}")
    if n_hidden_layers < 0:
        raise ValueError(f"n_hidden_layers must be >= 0, got {n_hidden_layers}")
    if delta < 0:
        raise ValueError(f"delta must be >= 0, got {delta}")
    log_inv = math.log(n_params) + delta * (
        (n_hidden_layers + 1) * math.log(width) + 0.5 * math.log(n_train) + math.log(n_features)
    )
    return -log_inv


def lambda_opt(
    n_params: int,
    n_hidden_layers: int,
    width: int,
    n_train: int,
    n_features: int,
    delta: float = 0.1,
) -> float:
    """Theoretically chosen prior inclusion probability ``lambda_opt`` (Theorem 4.1).

    See :func:`log_lambda_opt` for the parameters; this returns ``exp`` of it.
    """
    return math.exp(log_lambda_opt(n_params, n_hidden_layers, width, n_train, n_features, delta))


def resolve_log_inclusion(
    inclusion: float | None = None, log_inclusion: float | None = None
) -> float:
    """Turn a prior inclusion given as lambda or as log-lambda into log-lambda.

    Exactly one of the two must be given. ``inclusion`` must lie in ``(0, 1)``;
    ``log_inclusion`` in ``[LOG_INCLUSION_MIN, 0)`` (e.g. ``-1000``, which no float can hold
    as lambda).
    """
    if (inclusion is None) == (log_inclusion is None):
        raise ValueError("give exactly one of inclusion (lambda) and log_inclusion (log-lambda)")
    if inclusion is not None:
        if not (0.0 < float(inclusion) < 1.0):
            raise ValueError(f"prior inclusion lambda must lie in (0, 1), got {inclusion}")
        return math.log(float(inclusion))
    assert log_inclusion is not None
    value = float(log_inclusion)
    if not (math.isfinite(value) and LOG_INCLUSION_MIN <= value < 0.0):
        raise ValueError(
            f"log prior inclusion (log_prior_inclusion) must lie in [{LOG_INCLUSION_MIN:g}, 0), "
            f"got {log_inclusion}"
        )
    return value


def mlp_log_lambda_opt(
    in_features: int,
    hidden_sizes: tuple[int, ...] | list[int],
    out_features: int,
    n_train: int,
    delta: float = 0.1,
) -> float:
    """``log(lambda_opt)`` for a fully connected network with biases.

    ``T`` counts all weights and biases, ``L = len(hidden_sizes)``, ``N = max(hidden_sizes)``
    (the largest width when widths differ), ``p = in_features``. For the Simulation II
    network 200-7-7-7-1 and ``n = 3000`` this is
    ``-log(1527) - 0.1 (4 log 7 + log(sqrt(3000) 200))``.
    """
    n_params = _mlp_n_params(in_features, hidden_sizes, out_features)
    width = max(hidden_sizes) if len(hidden_sizes) else in_features
    return log_lambda_opt(n_params, len(hidden_sizes), width, n_train, in_features, delta)


def _mlp_n_params(
    in_features: int, hidden_sizes: tuple[int, ...] | list[int], out_features: int
) -> int:
    """``T``: the weights and biases of a fully connected network."""
    sizes = [in_features, *hidden_sizes, out_features]
    return sum((sizes[i] + 1) * sizes[i + 1] for i in range(len(sizes) - 1))


REFERENCE_HIDDEN: tuple[int, ...] = (50,)
"""The hidden layers :func:`mlp_log_lambda_auto` scales from: the estimators' default
network, the one their defaults were measured at."""


def mlp_log_lambda_auto(
    in_features: int,
    hidden_sizes: tuple[int, ...] | list[int],
    out_features: int,
    n_train: int,
    max_log_inclusion: float = math.log(0.1),
) -> float:
    """``log(lambda)`` of the estimators' default prior (``prior_inclusion="auto"``).

    ``lambda_opt`` (:func:`mlp_log_lambda_opt`) is a rate: it falls like ``1 / T`` as the
    network grows, while each edge's share of the fit falls too, and on a table of a few
    hundred rows a wider or deeper network then loses every path from the inputs to the
    output (measured in the user guide, "When to change the defaults"). So, with ``T``
    and ``T_ref`` the weights and biases of the network and of the reference network
    :data:`REFERENCE_HIDDEN` on the same inputs and outputs:

    * ``T <= T_ref``: ``log lambda_opt`` itself (the default network and any smaller
      one);
    * ``T > T_ref``: ``log lambda_opt(reference) + log(T / T_ref)``, the reference's
      ``lambda_opt`` times the ratio of the sizes, at most ``max_log_inclusion`` and at
      least ``log lambda_opt``.

    For one hidden layer this is continuous in the width (equal to ``lambda_opt`` at 50
    units); with two or more, ``log lambda`` rises by a fraction of a nat where ``T``
    passes ``T_ref`` (``lambda_opt``'s depth term; e.g. 0.2 from ``(23, 23)`` to
    ``(24, 24)`` on 20 inputs).

    Parameters
    ----------
    in_features, out_features : int
        ``p`` and the outputs.
    hidden_sizes : sequence of int
        The hidden widths (may be empty).
    n_train : int
        ``n``, the training rows.
    max_log_inclusion : float, default log(0.1)
        The cap, in ``(-inf, 0)``.

    Returns
    -------
    float
        ``log(lambda)``.
    """
    if not (math.isfinite(max_log_inclusion) and max_log_inclusion < 0.0):
        raise ValueError(f"max_log_inclusion must be finite and < 0, got {max_log_inclusion}")
    hidden = tuple(hidden_sizes)
    opt = mlp_log_lambda_opt(in_features, hidden, out_features, n_train)
    ratio = _mlp_n_params(in_features, hidden, out_features) / _mlp_n_params(
        in_features, REFERENCE_HIDDEN, out_features
    )
    if ratio <= 1.0:
        return opt
    base = mlp_log_lambda_opt(in_features, REFERENCE_HIDDEN, out_features, n_train)
    base += math.log(ratio)
    return max(opt, min(base, max_log_inclusion))
