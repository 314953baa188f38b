"""The paper's simulated data sets, each seeded and returning train/test sets and the truth.

* Simulation I (A): dense teacher 20-6-6-1, sigmoid, weights and biases iid U(0, 1),
  ``x ~ U(-1, 1)^20``, ``n = 3000``, ``eps ~ N(0, 1)``.
* Simulation I (B): sparse teacher 100-2-2-1 on inputs x1, x2 (the rest irrelevant), tanh,
  the fixed weights of supplement B.5, ``x ~ U(-1, 1)^100``, ``n = 500``.
* Simulation II: ``f0 = 7 x2 / (1 + x1^2) + 5 sin(x3 x4) + 2 x5`` with 200 covariates,
  ``n = 3000``; covariates N(0, 1) (the paper's text) or U(-1, 1) (the authors' code).
* The supplement's linear toy: ``n = 1000``, ``p = 200``, beta_50 = beta_100 = beta_150 = 10,
  beta_75 = beta_125 = -10 (1-based, so 0-based indices 49, 74, 99, 124, 149).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np
from numpy.typing import NDArray

__all__ = [
    "Covariates",
    "SimulatedData",
    "dense_teacher",
    "dense_teacher_moments",
    "linear_toy",
    "sim2_function",
    "simulation2",
    "sparse_teacher",
    "sparse_teacher_function",
]


class Covariates(str, Enum):
    """Covariate law of Simulation II."""

    NORMAL = "normal"  # iid N(0, 1): what the paper's text says
    UNIFORM = "uniform"  # iid U(-1, 1): what the authors' code draws


@dataclass
class SimulatedData:
    """A simulated regression problem.

    Attributes
    ----------
    X_train : ndarray, shape (n, p)
    y_train : ndarray, shape (n,)
    X_test : ndarray, shape (n_test, p)
    y_test : ndarray, shape (n_test,)
        Noisy test responses.
    f_test : ndarray, shape (n_test,)
        Noise-free regression function at the test points.
    relevant : ndarray of int
        0-based indices of the truly relevant inputs.
    noise_std : float
        Standard deviation of the additive noise.
    params : dict
        Whatever else defines the truth (e.g. the teacher's weights).
    """

    X_train: NDArray[np.float64]
    y_train: NDArray[np.float64]
    X_test: NDArray[np.float64]
    y_test: NDArray[np.float64]
    f_test: NDArray[np.float64]
    relevant: NDArray[np.int64]
    noise_std: float = 1.0
    params: dict[str, NDArray[np.float64]] = field(default_factory=dict)


def _sigmoid(z: NDArray[np.float64]) -> NDArray[np.float64]:
    out: NDArray[np.float64] = 0.5 * (1.0 + np.tanh(0.5 * z))
    return out


def _teacher_forward(
    x: NDArray[np.float64], layers: list[tuple[NDArray[np.float64], NDArray[np.float64]]], act: str
) -> NDArray[np.float64]:
    h = x
    for i, (w, b) in enumerate(layers):
        h = h @ w.T + b
        if i < len(layers) - 1:
            h = np.tanh(h) if act == "tanh" else _sigmoid(h)
    out: NDArray[np.float64] = h[:, 0]
    return out


def _make(
    f: object,
    rng: np.random.Generator,
    n: int,
    n_test: int,
    p: int,
    draw: str,
    noise_std: float,
) -> tuple[NDArray[np.float64], ...]:
    def covariates(m: int) -> NDArray[np.float64]:
        if draw == Covariates.NORMAL:
            return rng.standard_normal((m, p))
        return rng.uniform(-1.0, 1.0, size=(m, p))

    X = covariates(n)
    Xt = covariates(n_test)
    fx = f(X)  # type: ignore[operator]
    ft = f(Xt)  # type: ignore[operator]
    y = fx + noise_std * rng.standard_normal(n)
    yt = ft + noise_std * rng.standard_normal(n_test)
    return X, y, Xt, yt, ft


def _check_sizes(n: int, n_test: int) -> None:
    if n < 1 or n_test < 1:
        raise ValueError(f"n and n_test must be positive, got {n}, {n_test}")


_SIGNAL_REFERENCE_SEED = 20200
_SIGNAL_REFERENCE_SIZE = 2**17


def dense_teacher_moments(
    layers: list[tuple[NDArray[np.float64], NDArray[np.float64]]],
) -> tuple[float, float]:
    """Mean and sd of a dense sigmoid teacher's output under ``x ~ U(-1, 1)^p``.

    Estimated on a fixed reference sample of 131072 points (its own seed, so that the
    estimate is deterministic and draws nothing from the caller's random stream; the
    Monte Carlo error of the sd is about 0.2% of the sd).

    Parameters
    ----------
    layers : list of (W, b)
        The teacher's layers, ``W`` of shape ``(out, in)``.

    Returns
    -------
    mean, sd : float
    """
    p = layers[0][0].shape[1]
    ref = np.random.default_rng(_SIGNAL_REFERENCE_SEED).uniform(
        -1.0, 1.0, size=(_SIGNAL_REFERENCE_SIZE, p)
    )
    f = _teacher_forward(ref, layers, "sigmoid")
    return float(f.mean()), float(f.std())


def _scale_signal(
    layers: list[tuple[NDArray[np.float64], NDArray[np.float64]]], signal_sd: float
) -> dict[str, NDArray[np.float64]]:
    """Rescale the teacher's output layer in place so that f0 has sd ``signal_sd`` about its
    mean (under its covariate law); returns the original mean and sd of f0 and the factor.
    """
    mean, sd = dense_teacher_moments(layers)
    k = signal_sd / sd
    w3, b3 = layers[2]
    layers[2] = (k * w3, k * b3 + (1.0 - k) * mean)
    return {"f_mean": np.array(mean), "f_sd": np.array(sd), "scale": np.array(k)}


def dense_teacher(
    n: int = 3000,
    n_test: int = 1000,
    random_state: int | np.random.Generator | None = None,
    *,
    signal_sd: float | None = None,
) -> SimulatedData:
    """Simulation I (A): a dense 20-6-6-1 sigmoid teacher with parameters iid U(0, 1).

    Parameters
    ----------
    n, n_test : int
        Training and test sizes.
    random_state : int, Generator or None
        Draws the teacher's parameters, then the data (one stream).
    signal_sd : float, optional
        Rescale the teacher's output about its mean so that the sd of ``f0(x)`` under the
        covariate law is ``signal_sd`` (the mean is kept). The paper's U(0, 1) teacher has
        a weak signal (sd about 0.2 against the noise sd 1: ``Var f0`` about 0.04), so a
        fitted network can hardly tell it from a constant; this option makes the signal
        comparable with the noise. The rescaled teacher is still a 20-6-6-1 sigmoid
        network: only the output layer changes, ``W3 <- k W3`` and
        ``b3 <- k b3 + (1 - k) mean`` with ``k = signal_sd / sd``. ``None`` (default): the
        paper's teacher, unchanged. With a value, ``params`` also holds the unscaled
        teacher's ``f_mean`` and ``f_sd`` and the factor ``scale``.

    Returns
    -------
    SimulatedData
        ``params`` holds the teacher's ``W1..W3``, ``b1..b3``.
    """
    _check_sizes(n, n_test)
    if signal_sd is not None and not (np.isfinite(signal_sd) and signal_sd > 0):
        raise ValueError(f"signal_sd must be a positive number, got {signal_sd}")
    rng = np.random.default_rng(random_state)
    sizes = [20, 6, 6, 1]
    layers = [
        (rng.uniform(0, 1, (sizes[i + 1], sizes[i])), rng.uniform(0, 1, sizes[i + 1]))
        for i in range(3)
    ]
    extra = _scale_signal(layers, signal_sd) if signal_sd is not None else {}

    def f(x: NDArray[np.float64]) -> NDArray[np.float64]:
        return _teacher_forward(x, layers, "sigmoid")

    X, y, Xt, yt, ft = _make(f, rng, n, n_test, 20, Covariates.UNIFORM, 1.0)
    params = {f"W{i + 1}": w for i, (w, _) in enumerate(layers)}
    params.update({f"b{i + 1}": b for i, (_, b) in enumerate(layers)})
    params.update(extra)
    return SimulatedData(X, y, Xt, yt, ft, np.arange(20), 1.0, params)


def _sparse_teacher_layers() -> list[tuple[NDArray[np.float64], NDArray[np.float64]]]:
    # Supplement B.5 lists W_{l,jk}. Only the reading "from node j to node k" is consistent
    # with the output layer (W_{3,11} = 3 and W_{3,21} = 2 feed one output node), so it is
    # used for every layer. Arrays below are (to, from), as in torch.nn.Linear.
    w1 = np.zeros((2, 100))
    w1[:, 0] = 2.5  # W_{1,11} = W_{1,12} = 2.5: x1 -> both hidden nodes
    w1[:, 1] = 1.5  # W_{1,21} = W_{1,22} = 1.5: x2 -> both hidden nodes
    w2 = np.array([[2.5, 1.5], [2.5, 1.5]])
    w3 = np.array([[3.0, 2.0]])
    return [
        (w1, np.array([1.0, -1.0])),
        (w2, np.array([1.0, -1.0])),
        (w3, np.array([1.0])),
    ]


def sparse_teacher_function(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """The sparse teacher network (B) of Simulation I, ``(m, 100) -> (m,)``."""
    return _teacher_forward(x, _sparse_teacher_layers(), "tanh")


def sparse_teacher(
    n: int = 500, n_test: int = 1000, random_state: int | np.random.Generator | None = None
) -> SimulatedData:
    """Simulation I (B): the sparse 100-2-2-1 tanh teacher of supplement B.5 (inputs x1, x2)."""
    _check_sizes(n, n_test)
    rng = np.random.default_rng(random_state)
    X, y, Xt, yt, ft = _make(sparse_teacher_function, rng, n, n_test, 100, Covariates.UNIFORM, 1.0)
    layers = _sparse_teacher_layers()
    params = {f"W{i + 1}": w for i, (w, _) in enumerate(layers)}
    params.update({f"b{i + 1}": b for i, (_, b) in enumerate(layers)})
    return SimulatedData(X, y, Xt, yt, ft, np.array([0, 1]), 1.0, params)


def sim2_function(x: NDArray[np.float64]) -> NDArray[np.float64]:
    """Simulation II's ``f0(x) = 7 x2 / (1 + x1^2) + 5 sin(x3 x4) + 2 x5``, ``(m, >=5) -> (m,)``."""
    out: NDArray[np.float64] = (
        7 * x[:, 1] / (1 + x[:, 0] ** 2) + 5 * np.sin(x[:, 2] * x[:, 3]) + 2 * x[:, 4]
    )
    return out


def simulation2(
    n: int = 3000,
    n_test: int = 10000,
    p: int = 200,
    covariates: Covariates | str = Covariates.UNIFORM,
    random_state: int | np.random.Generator | None = None,
) -> SimulatedData:
    """Simulation II: the sparse nonlinear function with ``p`` covariates (relevant: x1..x5).

    ``covariates="uniform"`` draws U(-1, 1) as the authors' code does (the default, because
    only that law reproduces Table 2; see the simulation report); ``"normal"`` draws N(0, 1)
    as the paper's text says.
    """
    _check_sizes(n, n_test)
    if p < 5:
        raise ValueError(f"Simulation II needs p >= 5, got {p}")
    rng = np.random.default_rng(random_state)
    X, y, Xt, yt, ft = _make(sim2_function, rng, n, n_test, p, Covariates(covariates), 1.0)
    return SimulatedData(X, y, Xt, yt, ft, np.arange(5), 1.0)


def linear_toy(
    n: int = 1000,
    n_test: int = 1000,
    p: int = 200,
    random_state: int | np.random.Generator | None = None,
) -> SimulatedData:
    """The supplement's linear toy: ``y = X beta + N(0, 1)``, five coefficients of +-10.

    Covariates are iid N(0, 1) (the supplement does not say; this is the usual choice).
    ``params["beta"]`` holds the true coefficients.
    """
    _check_sizes(n, n_test)
    if p < 150:
        raise ValueError(f"the linear toy needs p >= 150, got {p}")
    rng = np.random.default_rng(random_state)
    beta = np.zeros(p)
    beta[[49, 99, 149]] = 10.0
    beta[[74, 124]] = -10.0

    def f(x: NDArray[np.float64]) -> NDArray[np.float64]:
        out: NDArray[np.float64] = x @ beta
        return out

    X, y, Xt, yt, ft = _make(f, rng, n, n_test, p, Covariates.NORMAL, 1.0)
    return SimulatedData(X, y, Xt, yt, ft, np.flatnonzero(beta), 1.0, {"beta": beta})
