"""The regressor's sparse linear mean function (``SVBNNRegressor(mean_function=...)``).

On a table of many linear effects the network reaches each effect only through ReLU units,
two or more included edges each paying the prior's price, and the prior prunes the weaker
effects (the user guide, "The regressor's linear mean, measured"). A Gaussian
process handles such a table with a linear mean function; the regressor gets one: a sparse
linear model fitted by automatic relevance determination (scikit-learn's
``ARDRegression``), and the network fitted to its residuals.

The linear mean lives in the network's standardised units (``z``, see
:class:`~svbnn._estimator_tasks._Regression`): ``m(x) = intercept + x[index] @ coef``, its
coefficients' posterior ``N(coef, cov)``. Private.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

MEAN_FUNCTIONS = ("auto", "linear", "zero")
"""``SVBNNRegressor``'s ``mean_function`` values."""

Z_KEEP = 2.5
"""An input joins the linear mean when ARD's posterior mean coefficient is more than this
many posterior sds from 0 (among the inputs ARD keeps)."""

AUTO_RATIO = 1.0
"""``mean_function="auto"`` fits the linear mean when its cross-validated RMSE (the linear
mean fitted in each fold, :func:`cv_rmse`) is at most this many times the noise sd of the
network fitted without it (``linear_mean_ratio_``): the linear model predicts new rows
within the noise the network itself estimates."""

AUTO_MAX_WORK = 2e8
"""``mean_function="auto"`` is skipped (the network alone) above this many rows x inputs^2:
one ARD iteration costs about that many operations, and the rule's cross-validation runs
up to ten ARD fits (two in each of five folds, :func:`fit_linear_mean`) of up to 300
iterations each."""

CV_FOLDS = 5


@dataclass(frozen=True)
class LinearMean:
    """``m(x) = intercept + x[:, index] @ coef`` with coefficient posterior ``N(coef, cov)``.

    ``index`` ``(k,)`` the inputs it uses (sorted), ``coef`` ``(k,)``, ``cov`` ``(k, k)``;
    ``k = 0`` is no linear mean (the constant ``intercept``).
    """

    index: NDArray[np.intp]
    coef: NDArray[np.float64]
    intercept: float
    cov: NDArray[np.float64]

    def predict(self, X: NDArray[Any]) -> NDArray[np.float64]:
        """``m(X)``, ``(n,)``, for ``X`` ``(n, p)``."""
        return self.intercept + np.asarray(X, dtype=np.float64)[:, self.index] @ self.coef

    def draws(self, X: Tensor, n_draws: int, generator: torch.Generator | None) -> Tensor:
        """``n_draws`` posterior draws of ``m(X)``, ``(n_draws, n)`` in ``X``'s dtype and
        device: coefficients ``coef + L eps`` (``L L^T = cov``, ``eps`` standard normal
        from ``generator``, ``(n_draws, k)`` drawn in one call)."""
        b = self.coefficient_draws(n_draws, generator, X.dtype, X.device)
        return self.intercept + b @ X[:, torch.as_tensor(self.index, device=X.device)].T

    def coefficient_draws(
        self,
        n_draws: int,
        generator: torch.Generator | None,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str = "cpu",
    ) -> Tensor:
        """``(n_draws, k)`` draws of the coefficients (see :meth:`draws`)."""
        k = self.index.size
        chol = torch.as_tensor(_cholesky(self.cov), dtype=dtype, device=device)
        mu = torch.as_tensor(self.coef, dtype=dtype, device=device)
        eps = torch.randn((n_draws, k), generator=generator, dtype=dtype, device=device)
        return mu + eps @ chol.T


def _cholesky(cov: NDArray[np.float64]) -> NDArray[np.float64]:
    """A lower-triangular ``L`` with ``L L^T = cov`` (symmetrised; a jitter of 1e-12 of
    its diagonal's scale where rounding left it not quite positive definite)."""
    sym = (cov + cov.T) / 2
    try:
        return np.asarray(np.linalg.cholesky(sym), dtype=np.float64)
    except np.linalg.LinAlgError:
        jitter = 1e-12 * max(float(np.max(np.abs(np.diag(sym)), initial=0.0)), 1e-300)
        return np.asarray(np.linalg.cholesky(sym + jitter * np.eye(len(sym))), np.float64)


def _weighted_ard(
    X: NDArray[Any], z: NDArray[Any], w: NDArray[Any] | None
) -> tuple[Any, NDArray[np.float64], float]:
    """ARD on the rows weighted by ``w`` (``None``: alike): the centred rows scaled by
    ``sqrt(w)``, the weighted least-squares form (scikit-learn's ``ARDRegression`` takes no
    weights). Returns the fitted model and the weighted means of ``X`` ``(p,)`` and ``z``."""
    from sklearn.linear_model import ARDRegression

    wt = np.ones(len(z)) if w is None else np.asarray(w, dtype=np.float64)
    xm = np.average(X, axis=0, weights=wt)
    zm = float(np.average(z, weights=wt))
    s = np.sqrt(wt)
    ard = ARDRegression(fit_intercept=False).fit(s[:, None] * (X - xm), s * (z - zm))
    return ard, xm, zm


def fit_linear_mean(X: NDArray[Any], z: NDArray[Any], w: NDArray[Any] | None) -> LinearMean:
    """The sparse linear mean of ``z`` ``(n,)`` on ``X`` ``(n, p)``, rows weighted by ``w``.

    ARD on all inputs; those whose posterior mean coefficient is more than ``Z_KEEP``
    posterior sds from 0 are refitted by ARD alone (the inputs it keeps then make the
    mean). None passing: ``k = 0``, the weighted mean of ``z``.
    """
    ard, _, zm = _weighted_ard(X, z, w)
    active = np.flatnonzero(ard.lambda_ < ard.threshold_lambda)
    # sigma_ is the posterior covariance of the active coefficients only.
    sd = np.sqrt(np.diag(ard.sigma_)) if active.size else np.zeros(0)
    cols = active[np.abs(ard.coef_[active]) > Z_KEEP * sd]
    empty = LinearMean(np.zeros(0, np.intp), np.zeros(0), zm, np.zeros((0, 0)))
    if cols.size == 0:
        return empty
    ard, xm, zm = _weighted_ard(X[:, cols], z, w)
    keep = np.flatnonzero(ard.lambda_ < ard.threshold_lambda)
    if keep.size == 0:
        return empty
    coef = np.asarray(ard.coef_[keep], dtype=np.float64)
    index = cols[keep].astype(np.intp)
    return LinearMean(
        index, coef, float(zm - xm[keep] @ coef), np.asarray(ard.sigma_, dtype=np.float64)
    )


def cv_rmse(X: NDArray[Any], z: NDArray[Any], w: NDArray[Any] | None, seed: int) -> float:
    """The ``CV_FOLDS``-fold cross-validated RMSE of :func:`fit_linear_mean` on ``z``
    (weighted by ``w``), folds shuffled by ``seed``: how well the linear mean that would
    be fitted predicts new rows (each fold's mean chooses its own inputs)."""
    from sklearn.model_selection import KFold

    pred = np.empty(len(z))
    for fit_rows, held in KFold(CV_FOLDS, shuffle=True, random_state=seed).split(X):
        lin = fit_linear_mean(X[fit_rows], z[fit_rows], None if w is None else w[fit_rows])
        pred[held] = lin.predict(X[held])
    wt = np.ones(len(z)) if w is None else w
    return float(np.sqrt(np.average((z - pred) ** 2, weights=wt)))
