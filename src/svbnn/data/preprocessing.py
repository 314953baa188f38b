"""Preprocessing of a regression split: HL&A standardisation and a validation split."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from .uci import UCISplit

__all__ = ["Standardization", "standardize", "validation_split"]

# A column whose training std is below this (relative to its magnitude) is treated as constant
# (naval has two); HL&A set such stds to 1 so the column maps to 0 rather than to inf/nan.
_STD_RTOL = 1e-12


@dataclass(frozen=True)
class Standardization:
    """Training-split statistics used to standardise a regression problem (HL&A).

    Attributes
    ----------
    x_mean, x_std : ndarray of float64, shape (p,)
        Per-column training mean and std (ddof 0); a constant column's std is set to 1.
    y_mean, y_std : float
        Training response mean and std (ddof 0; 1 if constant).
    """

    x_mean: NDArray[np.float64]
    x_std: NDArray[np.float64]
    y_mean: float
    y_std: float

    @classmethod
    def fit(cls, X: NDArray[np.floating], y: NDArray[np.floating]) -> Standardization:
        """Statistics of ``X`` (n, p) and ``y`` (n,)."""
        if X.ndim != 2 or y.ndim != 1 or len(X) != len(y) or len(X) == 0:
            raise ValueError(f"need X (n, p) and y (n,) with n > 0, got {X.shape}, {y.shape}")
        x_mean = X.mean(axis=0, dtype=np.float64)
        x_std = _guard_std(X.std(axis=0, dtype=np.float64), x_mean)
        y_mean = float(y.mean(dtype=np.float64))
        y_std = float(_guard_std(np.asarray([y.std(dtype=np.float64)]), np.asarray([y_mean]))[0])
        return cls(x_mean=x_mean, x_std=x_std, y_mean=y_mean, y_std=y_std)

    def transform_X(self, X: NDArray[np.floating]) -> NDArray[np.float64]:
        """``(X - x_mean) / x_std``, shape (n, p)."""
        return np.asarray((X - self.x_mean) / self.x_std, dtype=np.float64)

    def transform_y(self, y: NDArray[np.floating]) -> NDArray[np.float64]:
        """``(y - y_mean) / y_std``, shape (n,)."""
        return np.asarray((y - self.y_mean) / self.y_std, dtype=np.float64)

    def inverse_y(self, y: NDArray[np.floating]) -> NDArray[np.float64]:
        """Map standardised responses or predictions back to original units."""
        return np.asarray(y * self.y_std + self.y_mean, dtype=np.float64)

    def inverse_scale(self, s: NDArray[np.floating] | float) -> NDArray[np.float64]:
        """Map a scale (a noise std, a predictive std, an RMSE) back to original units."""
        return np.asarray(np.asarray(s) * self.y_std, dtype=np.float64)


def _guard_std(std: NDArray[np.float64], mean: NDArray[np.float64]) -> NDArray[np.float64]:
    # Exact zeros are what HL&A guard; the relative tolerance also catches a constant column
    # whose floating-point std comes out as round-off instead of 0.
    constant = std <= _STD_RTOL * np.maximum(1.0, np.abs(mean))
    return np.where(constant, 1.0, std)


def standardize(split: UCISplit) -> tuple[UCISplit, Standardization]:
    """Standardise inputs and responses of both parts with the training part's statistics.

    Parameters
    ----------
    split : UCISplit
        In original units.

    Returns
    -------
    standardized : UCISplit
        Same rows; ``X`` and ``y`` (train and test) standardised. Metrics in original units
        need :meth:`Standardization.inverse_y` on predictions (compare with the original
        ``split.y_test``) or :meth:`Standardization.inverse_scale` on an RMSE / noise std.
    stats : Standardization
    """
    stats = Standardization.fit(split.X_train, split.y_train)
    standardized = dataclasses.replace(
        split,
        X_train=stats.transform_X(split.X_train),
        y_train=stats.transform_y(split.y_train),
        X_test=stats.transform_X(split.X_test),
        y_test=stats.transform_y(split.y_test),
    )
    return standardized, stats


def validation_split(
    split: UCISplit,
    fraction: float = 0.2,
    random_state: int | np.random.Generator | None = None,
) -> UCISplit:
    """Carve a random validation part off a split's training part (e.g. for the sigma_eps grid).

    Parameters
    ----------
    split : UCISplit
        Only its training part is used; its test part is left out entirely.
    fraction : float
        Share of the training rows that go to validation, in (0, 1).
    random_state : int, numpy Generator or None
        Seed or generator for the row permutation (``None``: fresh entropy, not reproducible).

    Returns
    -------
    UCISplit
        ``X_train``/``y_train``: the remaining training rows; ``X_test``/``y_test``: the
        ``round(fraction * n_train)`` validation rows. Both keep the original row order, and
        ``train_index``/``test_index`` are rows of the data file.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction}")
    n = split.n_train
    n_val = int(round(fraction * n))
    if not 1 <= n_val < n:
        raise ValueError(
            f"fraction={fraction} of {n} training rows leaves an empty train or validation part"
        )
    rng = np.random.default_rng(random_state)
    perm = rng.permutation(n)
    val, train = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    return dataclasses.replace(
        split,
        X_train=split.X_train[train],
        y_train=split.y_train[train],
        X_test=split.X_train[val],
        y_test=split.y_train[val],
        train_index=split.train_index[train],
        test_index=split.train_index[val],
    )
