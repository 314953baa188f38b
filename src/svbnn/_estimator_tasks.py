"""The task pieces of the estimators: regression (:class:`_Regression`, a Gaussian
likelihood), count regression (:class:`_PoissonRegression`, a Poisson one) and
classification (:class:`_Classification`, a categorical one).

Each adds to :class:`~svbnn._estimator_base._VariationalEstimator` its likelihood, ``fit``
(the data checks, the target's encoding) and its predictions; the family pieces (the
network) are in :mod:`svbnn.estimators` and :mod:`svbnn.baselines`. Private.
"""

from __future__ import annotations

import copy
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.metrics import d2_tweedie_score
from sklearn.preprocessing import LabelEncoder
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data
from torch import Tensor, nn

from ._estimator_base import (
    _HeldOutScore,
    _mean_and_se,
    _row_weights,
    _VariationalEstimator,
    logger,
)
from ._estimator_checks import (
    _DTYPES,
    _NOISE_INIT,
    _NOISE_RATIO,
    _check_numeric,
    _check_real,
    _OutputScale,
    _SeedSource,
    _to_numpy,
)
from ._linear_mean import (
    AUTO_MAX_WORK,
    AUTO_RATIO,
    CV_FOLDS,
    LinearMean,
    cv_rmse,
    fit_linear_mean,
)
from .export import (
    ExpOutput,
    LogNormalRate,
    MeanDraws,
    NormalMoments,
    NormalPredictive,
    OutputAffine,
    SoftmaxOfNormal,
)
from .objectives import CategoricalLikelihood, GaussianLikelihood, PoissonLikelihood
from .prediction import (
    interval_of_draws,
    predict_proba,
    response_interval,
    response_mean,
    sample_outputs,
)
from .training import DIVERGED_R2

# The fit-quality checks after fit (issue 31): a regressor whose training R^2 is at most
# _COLLAPSED_R2 explains nothing (CollapseWarning); below DIVERGED_R2 (the training
# loop's threshold) it diverged. A classifier collapsed when it predicts one class for
# _COLLAPSED_SHARE of the training rows while another class has _MINORITY_SHARE of them.
# Checked on up to _CHECK_ROWS evenly spaced training rows (any order of the rows, e.g.
# sorted by class, is sampled evenly) with _CHECK_DRAWS posterior draws.
_COLLAPSED_R2 = 0.02
_COLLAPSED_SHARE = 0.99
_COLLAPSED_LOG_LOSS = 0.98  # of the class frequencies' entropy
_MINORITY_SHARE = 0.10
_CHECK_ROWS = 1000
_CHECK_DRAWS = 10

# The learned noise level from held-out rows (see noise_std): a tempered fit's, over
# _TEMPERED_SHARE of the budget, which with the held-out coverage floor kept the small
# tables' refits within 3 s at their intervals' coverage (user guide, "The refit on tables
# of up to 1,600 rows, measured"); a fit on fewer than _FEW_ROWS rows, whose training
# residuals understate the noise too, over _FEW_ROWS_SHARE of the budget, which kept
# small tables' fits within 3 s (user guide, "The noise level of small tables").
_TEMPERED_SHARE = 0.5
_FEW_ROWS = 1000
_FEW_ROWS_SHARE = 0.3


def _no_std(return_std: bool, est: object) -> None:
    """``return_std`` of ``export_predictive`` refused by a task without a Gaussian
    predictive (the classifier, the Poisson regressor)."""
    if return_std:
        raise ValueError(
            f"return_std=True is for SVBNNRegressor's Gaussian predictive; "
            f"{type(est).__name__}'s export returns its predictive mean"
        )


def _check_rows(n: int) -> NDArray[np.intp]:
    """Up to ``_CHECK_ROWS`` evenly spaced row indices of ``n`` rows."""
    if n <= _CHECK_ROWS:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, _CHECK_ROWS).round().astype(np.intp))


def _r_squared(z: NDArray[Any], predict: Callable[[], NDArray[Any]]) -> float | None:
    """R^2 of the predictions ``predict()`` of ``z`` (both ``(m,)``; not called for a
    constant ``z``, whose R^2 is ``None``); ``-inf`` for non-finite predictions or
    squared errors."""
    var = float(np.var(z)) if z.size else 0.0
    if not var > 0:
        return None
    pred = predict()
    if not np.all(np.isfinite(pred)):
        return -math.inf
    with np.errstate(over="ignore"):
        mse = float(np.mean((z - pred) ** 2))
    return 1.0 - mse / var if math.isfinite(mse) else -math.inf


def _explains_nothing_r2(r2: float | None) -> bool:
    """The collapse rule of a regressor's training R^2: in ``[DIVERGED_R2,
    _COLLAPSED_R2]`` (below, it diverged; ``None``, a constant ``y``, says nothing)."""
    return r2 is not None and DIVERGED_R2 <= r2 <= _COLLAPSED_R2


def _row_log_loss(proba: NDArray[Any], y: NDArray[np.intp]) -> NDArray[np.float64]:
    """``-log proba[i, y_i]`` per row ``(m,)``; ``proba`` ``(m, C)``, probabilities
    clipped at the smallest positive float64."""
    picked = np.clip(proba[np.arange(y.size), y], np.finfo(np.float64).tiny, None)
    return np.asarray(-np.log(picked), dtype=np.float64)


def _log_loss(proba: NDArray[Any], y: NDArray[np.intp], w: NDArray[Any]) -> float:
    """The mean of :func:`_row_log_loss` over the rows, weighted by ``w``."""
    return float(np.sum(w * _row_log_loss(proba, y)) / w.sum())


def _gain_over_the_mean(
    m: NDArray[Any],
    z: NDArray[Any],
    w: NDArray[Any] | None,
    fit_rows: NDArray[np.intp],
    held: NDArray[np.intp],
) -> tuple[float, float]:
    """How much better the predictions ``m`` of the ``held`` rows, by a network fitted on
    ``fit_rows``, are than the mean of ``z`` over ``fit_rows``: half the log of the ratio
    of their mean squared errors there (nats per row: the Gaussian log-likelihood gain at
    each one's own noise level), and its standard error over those rows (the delta
    method's); ``w``: the rows' weights, ``None`` for equal, weighing the mean, the
    errors and the standard error alike."""
    w_fit = None if w is None else np.asarray(w, float)[fit_rows]
    w_held = None if w is None else np.asarray(w, float)[held]
    mean = float(np.average(z[fit_rows], weights=w_fit))
    sq_mean = (z[held] - mean) ** 2
    sq = (z[held] - np.asarray(m, float).reshape(-1)) ** 2
    mse_mean = float(np.average(sq_mean, weights=w_held))
    mse = float(np.average(sq, weights=w_held))
    if not math.isfinite(mse) or mse_mean == 0.0:
        return -math.inf, 0.0  # a diverged run; or a constant target, which the mean predicts
    if mse == 0.0:
        return math.inf, 0.0
    # gain = (log mse_mean - log mse) / 2, linearised in the rows' squared errors.
    se = _mean_and_se(0.5 * (sq_mean / mse_mean - sq / mse), w_held)[1]
    return 0.5 * math.log(mse_mean / mse), se


def _check_class_weight(class_weight: Any) -> None:
    """``class_weight`` is None, ``"balanced"`` or a dict of finite non-negative weights
    (its labels are checked against ``y`` in ``fit``)."""
    if class_weight is None or (isinstance(class_weight, str) and class_weight == "balanced"):
        return
    if not isinstance(class_weight, dict):
        raise ValueError(
            "class_weight must be None, 'balanced' or a dict {label: weight}, got "
            f"{class_weight!r}"
        )
    for label, weight in class_weight.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float, np.number)):
            raise TypeError(
                f"class_weight[{label!r}] must be a number, got {type(weight).__name__}"
            )
        if not (math.isfinite(float(weight)) and float(weight) >= 0):
            raise ValueError(
                f"class_weight[{label!r}] must be finite and non-negative, got {weight!r}"
            )


def _label(c: Any) -> Any:
    """A class label as a Python scalar (``1``, not ``np.int64(1)``, in messages)."""
    return c.item() if isinstance(c, np.generic) else c


_R = TypeVar("_R", bound="_Regression")
_C = TypeVar("_C", bound="_Classification")
_P = TypeVar("_P", bound="_PoissonRegression")

_REGRESSION_PARAMETERS = """\
noise_std : "auto" or float, default "auto"
    ``"auto"``: the noise sd is learned (a type-II point estimate trained with the
    variational parameters, started at 0.1 sd of y), then set to the value that maximises
    the training rows' posterior-predictive likelihood (``noise_std_``). A tempered fit
    (``kl_weight < 1``, or a refit with ``refit_kl_weight < 1``: the final fit's weight
    counts) overfits its training rows, whose residuals then understate the
    noise: it is also fitted a second time on 80% of the rows, over half its step
    budget, whose network's posterior-predictive likelihood on the other 20% gives
    ``noise_std_held_out_``, and ``noise_std_`` is the larger of the two values (a fit
    then takes about 1.4 times as long). A fit on fewer than 1,000 rows, whose residuals
    understate the noise too, is fitted that second time over 0.3 of its step budget
    (about 1.25 times the fit time).
    Where such a held-out fit is made, ``noise_std_`` is also at least
    ``noise_std_covering_``, the level whose 95% intervals hold 95% of new rows as the
    held-out rows say (a Gaussian likelihood fits
    its level to the bulk of the residuals; where their tails are heavier, its intervals
    hold fewer new rows); the linear-mean rule (``mean_function``) reads the likelihood's
    level, without that floor. Before it meets the floor, that level is multiplied by
    ``sqrt(m / (m - 2))``, ``m`` the held-out rows (their effective number
    ``(sum w)^2 / sum w^2`` under ``sample_weight``; at most ``sqrt(3)``): the sd of a
    Student-t with ``m`` degrees of freedom over its scale, the predictive of a level
    estimated from ``m`` rows, whose intervals with the estimate plugged in cover fewer
    new rows than their level (1.069 at the 16 held-out rows of an 82-row table, 1.005
    at 200).
    A float is a known noise sd in ``y``'s units (the paper's setting), between 1e-8 and
    1e8 times the sd of ``y``."""

_REGRESSION_ATTRIBUTES = """\
noise_std_ : float
    Noise sd used by the prediction intervals, ``y``'s units (learned or given; where
    ``noise_std_held_out_`` is set, including the held-out rows' factor, see
    ``noise_std``).
noise_std_elbo_ : float
    With ``noise_std="auto"``: the ELBO's own estimate (includes the posterior spread of
    ``f``, so it is larger).
noise_std_held_out_ : float or None
    With ``noise_std="auto"``, 10 rows or more and the final fit's KL weight below 1 or
    fewer than 1,000 rows: the noise sd fitted on the held-out rows (see ``noise_std``),
    ``y``'s units; else ``None``.
noise_std_covering_ : float or None
    With ``noise_std_held_out_``: the noise sd whose 95% prediction intervals hold 95% of
    new rows as those held-out rows say (the 0.95 quantile of the level each row needs,
    at position ``0.95 (k + 1)`` of ``k``), ``y``'s units, a floor of ``noise_std_``;
    else ``None``."""

_MEAN_FUNCTION_PARAMETER = """\
mean_function : {"auto", "linear", "zero"}, default "auto"
    What the network fits relative to. ``"zero"``: ``y`` itself (the paper's model).
    ``"linear"``: the residuals of a sparse linear mean ``m(x)``, fitted first by
    automatic relevance determination (scikit-learn's ``ARDRegression``; the inputs whose
    coefficient is more than 2.5 posterior sds from 0, refitted alone); the model is
    ``m(x) + f(x)``, and every prediction, interval and export includes ``m`` and its
    coefficients' posterior. On a table of many linear effects the network reaches each
    effect only through ReLU units whose edges the prior prunes; the linear mean keeps
    them. ``"auto"``: the network alone first, as ``"zero"`` fits it (its refit
    included), then the linear mean's 5-fold cross-validated RMSE (the mean fitted in
    each fold as above) over that network's noise sd (``linear_mean_ratio_``); at most
    1, the linear mean predicts new rows within the noise the network estimates, and
    the network is fitted again on its residuals (one fit more; where the rule declines,
    the fit is ``"zero"``'s). Not tried on fewer than 10 rows or more than 2e8 rows x
    inputs^2. The user guide ("The regressor's linear mean, measured") has the
    measurements."""

_MEAN_FUNCTION_ATTRIBUTES = """\
mean_function_ : {"linear", "zero"}
    The mean the fit used (``"auto"`` resolved; ``"zero"`` where no input passed).
linear_features_ : ndarray of shape (k,)
    The linear mean's inputs (empty without one); in ``selected_features_`` too, with
    ``feature_inclusion_`` 1.
linear_coef_ : ndarray of shape (n_features_in_,)
    The linear mean's posterior mean coefficients, ``y``'s units per unit of each input
    (0 outside ``linear_features_``).
linear_mean_ratio_ : float or None
    ``mean_function="auto"``: the linear mean's cross-validated RMSE over the noise sd of
    the network fitted without it (the linear mean is fitted where it is at most 1);
    else ``None``."""

_POISSON_ATTRIBUTES = """\
log_offset_ : float
    ``log`` of the training rows' mean count (of 1e-8 where every count is 0): the
    network's output is the log rate relative to it (``log rate = output + log_offset_``)."""

_CLASSIFICATION_PARAMETERS = """\
class_weight : "balanced", dict or None, default None
    Weight of each class's rows in the likelihood (times ``fit``'s ``sample_weight``;
    normalised to mean 1 with it): ``{label: weight}`` (labels left out weigh 1), or
    ``"balanced"``, ``n / (n_classes * count(class))`` as in scikit-learn. For
    imbalanced classes where the minority class matters: the unweighted fit may predict
    the majority class for every row (a ``CollapseWarning``)."""

_CLASSIFICATION_ATTRIBUTES = """\
classes_ : ndarray
    Labels seen at fit time."""


def _numeric_fit_data(est: Any, X: Any, y: Any) -> tuple[NDArray[Any], NDArray[Any]]:
    """``fit``'s checked data for a numeric target: ``X`` ``(n, p)`` and ``y`` ``(n,)``,
    float64 or float32, finite (scikit-learn's ``validate_data``, which also records the
    input features)."""
    Xv, yv = validate_data(
        est,
        X,
        y,
        reset=True,
        dtype=[np.float64, np.float32],
        y_numeric=True,
        ensure_all_finite=True,
    )
    return Xv, column_or_1d(yv, warn=True)


_NOISE_ROWS = 5000  # the rows a noise level is fitted on (the first ones)
COVER_LEVEL = 0.95  # the held-out rows' share inside the intervals the noise floor gives


def _estimated_level_factor(weights: NDArray[Any] | None, k: int) -> float:
    """``sqrt(m / (m - 2))``: the sd of a Student-t with ``m`` degrees of freedom over its
    scale, ``m`` the ``k`` held-out rows a noise level was estimated from (under
    ``weights``, their effective number ``(sum w)^2 / sum w^2``); at most ``sqrt(3)``,
    its value at 3 rows (below, the t's variance is infinite).

    A level estimated from ``m`` rows carries their sampling error, and Gaussian intervals
    with an estimated level cover fewer new rows than their level on average (coverage
    is concave in the level). The predictive that accounts for it is a Student-t with
    ``m`` degrees of freedom; the Gaussian of its variance stands in for it, so the
    predictive sd, the NLL's and the intervals' scale alike, is the estimate times this
    factor (1.069 at 16 rows, the held-out rows of an 82-row table; 1.005 at 200).
    """
    if weights is None:
        m = float(k)
    else:
        w = np.asarray(weights, dtype=np.float64)
        m = float(w.sum() ** 2 / (w**2).sum())
    return math.sqrt(m / (m - 2.0)) if m > 3.0 else math.sqrt(3.0)


def _likelihood_noise(m: Tensor, v: Tensor, z: NDArray[Any], weights: NDArray[Any] | None) -> float:
    """The noise sd (standardised units) that maximises the rows' log posterior
    predictive density, ``sum_i w_i log N(z_i; m_i, v_i + s^2)``; ``m``, ``v`` ``(m,)``:
    the mean and variance of the draws of ``f(x_i)``, ``w_i`` the rows' weights (1
    without ``weights``).

    The ELBO's own optimum, ``s^2 = mean_i E_q[(z_i - f(x_i))^2]``, counts the posterior
    spread of ``f`` twice once intervals add that spread back (measured on the tabular
    benchmark: 95% intervals covering 98-100%); this is the value that makes the
    predictive distribution fit the data, the one intervals use.
    """
    r2 = (torch.as_tensor(z, dtype=torch.float64) - m) ** 2
    wt = torch.ones_like(r2) if weights is None else torch.as_tensor(weights, dtype=torch.float64)
    # A grid over log s, refined once: the 1-D objective is smooth and unimodal in
    # practice, and a grid cannot diverge.
    s = torch.logspace(-4, 0.5, 181, dtype=torch.float64)
    for _ in range(2):
        tot = v[None, :] + s[:, None] ** 2
        ll = -(wt[None, :] * (torch.log(tot) + r2[None, :] / tot)).sum(1)
        k = int(torch.argmax(ll))
        lo, hi = s[max(k - 1, 0)], s[min(k + 1, len(s) - 1)]
        s = torch.logspace(math.log10(lo), math.log10(hi), 41, dtype=torch.float64)
    return float(s[20])


def _covering_noise(
    m: Tensor, v: Tensor, z: NDArray[Any], weights: NDArray[Any] | None, level: float
) -> float:
    """The noise sd ``s`` (standardised units) whose central ``level`` intervals,
    ``m_i +- q sqrt(v_i + s^2)`` with ``q`` the normal quantile, hold a ``level`` share
    of new rows as the held-out rows say: the ``level`` quantile of the ``s`` each row
    needs, read at position ``level (k + 1)`` of the ``k`` sorted needs and interpolated
    between its neighbours (with ``weights``, positions in cumulative weight, the weights
    scaled to sum ``k``); the largest where that position is past the last.

    A Gaussian likelihood fits its noise to the bulk of the residuals; where their tails
    are heavier, its intervals hold fewer than ``level`` of new rows. Held-out residuals
    measure the tails of rows the network was not fitted to, so this floor keeps the
    intervals' coverage at ``level`` with heavy tails too. The ``j``-th smallest of ``k``
    needs holds a new row with probability ``j / (k + 1)``, so position ``level (k + 1)``
    holds ``level`` of them on average; split conformal prediction's count, the next
    whole position up, holds at least ``level`` but up to ``1 / (k + 1)`` more, and on
    30 held-out rows takes the largest need (``30 / 31`` = 0.968 of new rows), which a
    single outlier sets.
    """
    q = statistics.NormalDist().inv_cdf(0.5 + level / 2)
    r2 = (torch.as_tensor(z, dtype=torch.float64) - m) ** 2
    need = torch.sqrt(torch.clamp(r2 / q**2 - v, min=0.0)).numpy()
    wt = np.ones(len(need)) if weights is None else np.asarray(weights, dtype=np.float64)
    # Rows of weight 0 count for nothing (nor may their need be an end of the range).
    need, wt = need[wt > 0], wt[wt > 0]
    k = len(need)
    order = np.argsort(need, kind="stable")
    position = np.cumsum(wt[order]) * (k / wt.sum())  # 1, 2, ..., k for equal weights
    return float(np.interp(level * (k + 1), position, need[order]))


@dataclass(eq=False, repr=False, kw_only=True)
class _Regression(RegressorMixin, _VariationalEstimator):
    """Gaussian likelihood, known or learned noise; ``y`` standardised for the fit.

    The network fits the standardised target (its prior and learning rate are set for
    responses of unit scale); every output, ``export_sparse``'s module included, is in
    ``y``'s units.
    """

    noise_std: float | str = "auto"

    def fit(self: _R, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> _R:
        """Fit the variational posterior.

        Every parameter and the data are checked first; if the fit fails at any point, a
        previously fitted estimator keeps its previous fit, unchanged.

        Parameters
        ----------
        X : array-like or Tensor, shape (n, p)
        y : array-like or Tensor, shape (n,)
        sample_weight : array-like of shape (n,) or float, optional
            Non-negative weight of each row's likelihood term. The weights are divided
            by their mean over the rows of positive weight, so the objective stays per
            datum (the likelihood/KL balance of the unweighted fit): they say how much
            rows count relative to each other, not how many rows there are (a weight of
            2 is not a duplicated row). Rows of weight 0 are left out; equal weights are
            the unweighted fit. The target's standardisation and the learned noise level
            are weighted alike.

        Returns
        -------
        self

        Warns
        -----
        UserWarning
            The fit diverged: its training R^2 is below -1 (the message says "diverged").
        CollapseWarning
            The fit explains nothing: its training R^2 is at most 0.02, or no kept weights
            connect the inputs to the output (``collapsed_`` is then True).
        """
        self._check_params()
        if not (isinstance(self.noise_std, str) and self.noise_std == "auto"):
            _check_real("noise_std", self.noise_std, low=0.0)
        self._mean_function()  # checks the parameter
        seeds = _SeedSource(self.random_state)
        X, y = _to_numpy(X), _to_numpy(y)
        X, y = _check_numeric(X, "X"), _check_numeric(y, "y")
        with self._fit_transaction():
            Xv, yv = _numeric_fit_data(self, X, y)
            keep, w = _row_weights(sample_weight, Xv)
            if keep is not None:
                Xv, yv = Xv[keep], yv[keep]
            # The network fits the standardised target (its prior and learning rate are
            # set for responses of unit scale); every output is mapped back to y's units.
            yd = np.asarray(yv, dtype=np.float64)
            self._y_mean_ = float(np.average(yd, weights=w))
            sd = float(np.sqrt(np.average((yd - self._y_mean_) ** 2, weights=w)))
            self._y_scale_ = sd if sd > 0 and math.isfinite(sd) else 1.0
            z = (yd - self._y_mean_) / self._y_scale_
            learn = isinstance(self.noise_std, str)
            noise0 = _NOISE_INIT if learn else float(self.noise_std) / self._y_scale_
            if not learn and not (_NOISE_RATIO[0] <= noise0 <= _NOISE_RATIO[1]):
                raise ValueError(
                    f"noise_std={self.noise_std!r} is {noise0:.3g} times the sd of y "
                    f"({self._y_scale_:.3g}); it must lie within [{_NOISE_RATIO[0]:g}, "
                    f"{_NOISE_RATIO[1]:g}] times it (below, the fit stops resolving the "
                    "data in float32; above, the data no longer inform it), or use "
                    "noise_std='auto'"
                )
            few = len(Xv) < _FEW_ROWS

            def fit_network(target: NDArray[np.float64], refit: bool = True) -> None:
                """The network on ``target`` (z, or z less the linear mean), noise included
                (``refit``: :meth:`_fit_module`'s)."""

                def score_held_out(
                    part: nn.Module, fit_rows: NDArray[np.intp], held: NDArray[np.intp], seed: int
                ) -> _HeldOutScore:
                    gen = torch.Generator(device=next(part.parameters()).device)
                    gen.manual_seed(seed)
                    held = held[:_NOISE_ROWS]
                    wh = None if w is None else w[held]
                    m, v = self._output_moments(Xv[held], part, gen)
                    fit = _likelihood_noise(m, v, target[held], wh)
                    # The floor is for the fitted network's intervals, m +- q sqrt(v + s^2):
                    # the held-out network's errors, the fitted network's spread there (a
                    # shorter or smaller fit's spread, larger, would lower it).
                    v_fitted = self._output_moments(Xv[held])[1]
                    cover = _covering_noise(m, v_fitted, target[held], wh, COVER_LEVEL)
                    gain, se = _gain_over_the_mean(m.numpy(), target, w, fit_rows, held)
                    factor = _estimated_level_factor(wh, held.size)
                    return _HeldOutScore(gain, se, (fit, cover, factor))

                lik, held_noise = self._fit_module(
                    Xv,
                    self._tensor(target, "y"),
                    1,
                    # R replicates (a held-out choice) learn a noise level each.
                    lambda r=None: GaussianLikelihood(
                        noise0 if r is None else torch.full((r, 1), noise0), learn_noise=learn
                    ).to(_DTYPES[self.dtype]),
                    seeds,
                    w,
                    # A tempered fit's training rows understate the noise, and so do few
                    # rows (noise_std_held_out_); the tempered refit's run is also its
                    # check against the mean (held_out_gain_).
                    held_out=score_held_out if learn else None,
                    held_out_share=lambda kl_weight: (
                        _TEMPERED_SHARE if kl_weight < 1 else _FEW_ROWS_SHARE if few else None
                    ),
                    refit=refit,
                )
                scale = self._y_scale_
                self.noise_std_held_out_ = held_noise[0] * scale if held_noise else None
                self.noise_std_covering_ = held_noise[1] * scale if held_noise else None
                if learn:
                    self.noise_std_elbo_ = float(torch.as_tensor(lik.noise_std).detach()) * scale
                    self._noise_std_fitted_ = max(
                        self._predictive_noise(Xv, target, w) * scale,
                        self.noise_std_held_out_ or 0.0,
                    )
                    # The likelihood's level, where held-out rows estimate it, widens to
                    # the Student-t's sd of their number (_estimated_level_factor); the
                    # covering floor, a quantile read where it holds `level` of new rows
                    # on average (_covering_noise), needs no such factor.
                    factor = held_noise[2] if held_noise else 1.0
                    self.noise_std_ = max(
                        factor * self._noise_std_fitted_, self.noise_std_covering_ or 0.0
                    )
                else:
                    self.noise_std_ = self._noise_std_fitted_ = float(self.noise_std)

            self._fit_mean_and_network(Xv, z, w, seeds, fit_network)
        r2 = self._training_r2(Xv, z)
        self._warn_if_off_scale(Xv)
        self._warn_if_degenerate(
            None
            if r2 is None or r2 >= DIVERGED_R2
            else f"its training R^2 is {r2:.3g} (below {DIVERGED_R2:g}: far worse than "
            "predicting the mean of y)"
        )
        self._warn_if_unconverged()
        self._warn_if_collapsed(
            []
            if not _explains_nothing_r2(r2)
            else [
                f"its training R^2 is {r2:.3g} (at most {_COLLAPSED_R2:g}: the predictions "
                "explain next to none of the variance of y, as a constant would)"
            ]
        )
        return self

    def _mean_function(self) -> str:
        """What the network's target is taken relative to: ``"zero"`` (the task's
        default; ``SVBNNRegressor`` has the ``mean_function`` parameter)."""
        return "zero"

    def _fit_mean_and_network(
        self,
        X: NDArray[Any],
        z: NDArray[np.float64],
        w: NDArray[Any] | None,
        seeds: _SeedSource,
        fit_network: Callable[[NDArray[np.float64], bool], None],
    ) -> None:
        """The linear mean (by :meth:`_mean_function`) and ``fit_network`` on ``z``
        ``(n,)`` less it; sets the ``mean_function_`` and linear-mean attributes (the
        linear mean is set before the network is fitted, whose summary counts its inputs
        as selected).

        ``"auto"`` fits the network on ``z`` as ``"zero"`` does (its refit included),
        then the linear mean's cross-validated RMSE over that network's noise sd
        (``linear_mean_ratio_``, folds shuffled by a seed drawn after the fit's: where
        the rule declines, the fit is what ``"zero"`` makes); at most ``AUTO_RATIO``,
        the linear mean, and the network again on its residuals. Where
        :meth:`_small_table_refit`, the network on a linear mean's residuals is not
        refitted.
        """
        mode = self._mean_function()
        n, p = X.shape
        small = self._small_table_refit(n)
        tries = mode == "auto" and n >= 2 * CV_FOLDS and n * p * p <= AUTO_MAX_WORK

        def fit_with(lin: LinearMean | None) -> None:
            """The linear mean ``lin`` (``None`` or no inputs: none) and the network on
            ``z`` less it (refitted only on ``z`` itself where :meth:`_small_table_refit`)."""
            self._set_linear_mean(lin)
            if lin is not None and lin.index.size:
                fit_network(z - lin.predict(X), not small)
            else:
                fit_network(z, True)

        fit_with(fit_linear_mean(X, z, w) if mode == "linear" else None)
        self.linear_mean_ratio_: float | None = None
        if tries:
            # The likelihood's noise level of the network the rule would keep (after its
            # refit), without the held-out coverage floor: the rule asks whether the
            # linear mean it would fit predicts new rows within that noise.
            noise = self._noise_std_fitted_ / self._y_scale_
            self.linear_mean_ratio_ = cv_rmse(X, z, w, seeds.seed()) / noise
            if self.linear_mean_ratio_ <= AUTO_RATIO:
                lin = fit_linear_mean(X, z, w)
                if lin.index.size:
                    fit_with(lin)
        elif mode == "auto":
            logger.info(
                "mean_function='auto': no linear mean tried on %d rows x %d inputs (fewer "
                "than %d rows, or rows x inputs^2 above %.0e)",
                n,
                p,
                2 * CV_FOLDS,
                AUTO_MAX_WORK,
            )
        self.mean_function_ = "linear" if self.linear_features_.size else "zero"

    def _set_linear_mean(self, lin: LinearMean | None) -> None:
        """Store ``lin`` (``None`` or no inputs: none) as fitted attributes."""
        p = int(self.n_features_in_)
        self.linear_coef_ = np.zeros(p)
        if lin is None or lin.index.size == 0:
            self.linear_features_ = np.zeros(0, dtype=np.intp)
            self._linear_coef_ = np.zeros(0)
            self._linear_intercept_ = 0.0
            self._linear_cov_ = np.zeros((0, 0))
            return
        self.linear_features_ = lin.index
        self._linear_coef_ = lin.coef
        self._linear_intercept_ = lin.intercept
        self._linear_cov_ = lin.cov
        self.linear_coef_[lin.index] = lin.coef * self._y_scale_

    def _linear_mean(self) -> LinearMean | None:
        """The fitted linear mean (standardised units), ``None`` where there is none (a
        file saved without one included)."""
        index = getattr(self, "linear_features_", None)
        if index is None or len(index) == 0:
            return None
        return LinearMean(
            np.asarray(index, dtype=np.intp),
            np.asarray(self._linear_coef_, dtype=np.float64),
            float(self._linear_intercept_),
            np.asarray(self._linear_cov_, dtype=np.float64),
        )

    def _output_draws(
        self, Xt: Tensor, n_draws: int, gen: torch.Generator, check: bool = True
    ) -> Tensor:
        """``n_draws`` posterior draws of ``f(x)`` (the network's and, after them from
        ``gen``, the linear mean's), standardised units, ``(H, n)`` float64; non-finite
        network outputs raise (``check``) or pass through."""
        draws = sample_outputs(self._module64(), Xt, n_draws, generator=gen)
        draws = (self._check_outputs(draws) if check else draws)[..., 0]
        lin = self._linear_mean()
        if lin is None:
            return draws
        return draws + lin.draws(Xt.to(draws.dtype), n_draws, gen)

    def _explains_nothing(self, model: nn.Module, X: NDArray[Any], target: Tensor) -> bool:
        # The collapse warning's measure: a training R^2 in [DIVERGED_R2, _COLLAPSED_R2],
        # of the mean of _CHECK_DRAWS draws on up to _CHECK_ROWS rows (a generator of its
        # own: the fit's seeds are untouched).
        idx = _check_rows(len(X))
        gen = torch.Generator(device=self.device)
        gen.manual_seed(0)

        def predict() -> NDArray[Any]:
            Xt = self._tensor(X[idx], "X")
            draws = sample_outputs(model, Xt, _CHECK_DRAWS, generator=gen)
            return draws[..., 0].mean(0).double().cpu().numpy()

        z = target.detach().cpu().double().numpy()[idx]
        return _explains_nothing_r2(_r_squared(z, predict))

    def _training_r2(self, X: NDArray[Any], z: NDArray[Any]) -> float | None:
        """R^2 of the posterior mean on (up to ``_CHECK_ROWS`` evenly spaced) training rows,
        in the standardised units; ``-inf`` for non-finite outputs, ``None`` for a
        constant ``y``."""
        idx = _check_rows(len(X))

        def predict() -> NDArray[Any]:
            Xt = self._tensor(X[idx], "X", fitted=True)
            draws = self._output_draws(Xt, _CHECK_DRAWS, self._predict_generator(), check=False)
            return draws.mean(0).double().cpu().numpy()

        return _r_squared(z[idx], predict)

    def _output_moments(
        self,
        X: NDArray[Any],
        model: nn.Module | None = None,
        generator: torch.Generator | None = None,
    ) -> tuple[Tensor, Tensor]:
        """The mean and variance of the H draws of ``f(x_i)`` (standardised units, float64,
        on the CPU) over the first 5,000 rows of ``X``: the fitted network's draws, or
        ``model``'s drawn with ``generator``."""
        rows = slice(0, min(len(X), _NOISE_ROWS))
        Xt = self._tensor(X[rows], "X", fitted=True)
        net = self._module64() if model is None else copy.deepcopy(model).double()
        gen = self._predict_generator() if generator is None else generator
        draws = sample_outputs(net, Xt, self._draws(None), generator=gen)[..., 0].double()
        draws = draws.cpu()  # z and the grid of s below are CPU tensors
        return draws.mean(0), draws.var(0, unbiased=False)

    def _predictive_noise(
        self,
        X: NDArray[Any],
        z: NDArray[Any],
        weights: NDArray[Any] | None = None,
        model: nn.Module | None = None,
        generator: torch.Generator | None = None,
    ) -> float:
        """:func:`_likelihood_noise` of the rows ``(X, z)`` (the first 5,000) under the
        fitted network's draws, or ``model``'s drawn with ``generator``."""
        m, v = self._output_moments(X, model, generator)
        return _likelihood_noise(m, v, z[: len(m)], None if weights is None else weights[: len(m)])

    def _to_user(self, out: Tensor) -> NDArray[np.floating[Any]]:
        """``(n, 1)`` standardised outputs -> ``(n,)`` in the units of y."""
        arr = self._check_outputs(out)[:, 0].cpu().numpy()
        return arr * self._y_scale_ + self._y_mean_

    def predict(self, X: ArrayLike, n_samples: int | None = None, return_std: bool = False) -> Any:
        """Posterior mean estimator ``f_H(x)``, shape ``(n,)``, in the units of y.

        ``n_samples`` (an int >= 1) overrides ``n_samples_predict``. Every row gets the same
        posterior draws whatever the other rows and their order, so a row's prediction is
        the same up to floating-point rounding (see ``dtype``), not to the last bit.

        With ``return_std=True`` (as scikit-learn's ``BayesianRidge`` and Gaussian
        process), also the sd of the posterior predictive of a new response: the sd of the
        H draws of ``f(x)`` and the noise ``noise_std_`` combined, ``(n,)``.
        """
        Xt = self._validate_X(X)
        draws = self._output_draws(Xt, self._draws(n_samples), self._predict_generator())
        if not return_std:
            return self._to_user(draws.mean(0)[:, None])
        noise = self.noise_std_ / self._y_scale_
        var = draws.var(0, unbiased=False) + noise**2
        sd = var.sqrt().cpu().numpy() * self._y_scale_
        return self._to_user(draws.mean(0)[:, None]), sd

    def predict_interval(
        self, X: ArrayLike, level: float = 0.95, n_samples: int = 600
    ) -> tuple[NDArray[np.floating[Any]], NDArray[np.floating[Any]]]:
        """Credible interval of the response mean ``E[y | x]`` at ``level`` (each ``(n,)``).

        ``level`` must lie in ``(0, 1)`` and ``n_samples`` (posterior draws) be an int >= 2.
        """
        n_draws = self._interval_args(level, n_samples)
        Xt = self._validate_X(X)
        draws = self._output_draws(Xt, n_draws, self._predict_generator())
        lo, hi = interval_of_draws(draws[..., None], level)
        return self._to_user(lo), self._to_user(hi)

    def predict_prediction_interval(
        self, X: ArrayLike, level: float = 0.95, n_samples: int = 600
    ) -> tuple[NDArray[np.floating[Any]], NDArray[np.floating[Any]]]:
        """Prediction interval for a new response ``y``, each ``(n,)``, in y's units.

        Quantiles of the posterior predictive: the posterior draws of ``f(x)`` plus
        Gaussian noise of sd ``noise_std_`` (learned, or the given ``noise_std``). This is
        the interval that should contain new responses at rate ``level``;
        :meth:`predict_interval` is the narrower credible interval of their mean.

        ``level`` must lie in ``(0, 1)`` and ``n_samples`` (posterior draws) be an int >= 2.
        """
        n_draws = self._interval_args(level, n_samples)
        Xt = self._validate_X(X)
        gen = self._predict_generator()
        draws = self._output_draws(Xt, n_draws, gen)
        lo, hi = interval_of_draws(
            draws[..., None], level, self.noise_std_ / self._y_scale_, generator=gen
        )
        return self._to_user(lo), self._to_user(hi)

    def _export_head(self) -> list[nn.Module]:
        """The layers after an exported network: its output in ``y``'s units, ``(n,)``."""
        return [OutputAffine(self._y_scale_, self._y_mean_)]

    def _predictive_head(self, return_std: bool = False) -> list[nn.Module]:
        """After the batched draws: their mean, in ``y``'s units, ``(n,)``; with
        ``return_std``, the mean and ``predict(return_std=True)``'s sd, ``(n, 2)``."""
        if return_std:
            noise = self.noise_std_ / self._y_scale_
            return [NormalPredictive(self._y_scale_, self._y_mean_, noise)]
        return [MeanDraws(), OutputAffine(self._y_scale_, self._y_mean_)]

    def _moments_head(self, return_std: bool = False) -> list[nn.Module]:
        """After the output's moments ``(2, n, 1)``: the predictive mean in ``y``'s units,
        ``(n,)``; with ``return_std``, the mean and the predictive sd, ``(n, 2)``."""
        noise = self.noise_std_ / self._y_scale_
        return [NormalMoments(self._y_scale_, self._y_mean_, noise, return_std)]

    def _in_user_units(self, module: nn.Module) -> nn.Module:
        if self._y_scale_ != 1.0 or self._y_mean_ != 0.0:
            return _OutputScale(module, self._y_scale_, self._y_mean_).eval()
        return module


CLASSIFIER_PREDICT_DRAWS = 100
"""Every classifier's default ``n_samples_predict`` (each declares it: a dataclass field's
default comes from the first base in the MRO that declares it, the family's). A class is
the argmax of an average over draws, which Monte Carlo error near a tie flips; 100 draws
flip fewer than the regressors' 30 (``SVBNNClassifier``'s docstring)."""


@dataclass(eq=False, repr=False, kw_only=True)
class _Classification(ClassifierMixin, _VariationalEstimator):
    """Categorical likelihood (softmax outputs); any labels, at least two classes."""

    class_weight: dict[Any, float] | str | None = None

    def fit(self: _C, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> _C:
        """Fit the variational posterior; ``y`` holds class labels, shape ``(n,)``.

        Checks and failure behaviour as the regressor's ``fit``; the warning for a
        useless fit compares the training log-loss with a uniform prediction's.
        ``sample_weight`` (array-like of shape (n,) or float, optional) weighs each row's
        likelihood term as in the regressor's ``fit`` (normalised to mean 1 over the rows
        of positive weight, zero-weight rows left out), multiplied by the row's
        ``class_weight``.
        """
        self._check_params()
        _check_class_weight(self.class_weight)
        seeds = _SeedSource(self.random_state)
        X, y = _check_numeric(_to_numpy(X), "X"), _to_numpy(y)
        with self._fit_transaction():
            Xv, yv = validate_data(
                self,
                X,
                y,
                reset=True,
                dtype=[np.float64, np.float32],
                ensure_all_finite=True,
            )
            yv = column_or_1d(yv, warn=True)
            try:
                check_classification_targets(yv)
                enc = LabelEncoder().fit(yv)
            except (TypeError, ValueError) as err:
                # e.g. labels of mixed types (sorting them fails) or rows of lists (sklearn's
                # "legacy multi-label" error): name y and keep sklearn's words.
                raise ValueError(
                    f"y must hold one class label of one type (numbers or strings) per row: {err}"
                ) from None
            if len(enc.classes_) < 2:
                raise ValueError(
                    "the classifier needs samples of at least 2 classes in y, "
                    f"got 1 class: {enc.classes_[0]!r}"
                )
            self.classes_ = enc.classes_
            codes = enc.transform(yv)
            keep, w = _row_weights(sample_weight, Xv, self._class_weights(codes))
            if keep is not None:
                Xv, codes = Xv[keep], codes[keep]
                if np.unique(codes).size < 2:
                    raise ValueError(
                        "the classifier needs samples of at least 2 classes with a positive "
                        "weight (sample_weight times class_weight), got 1 class: "
                        f"{_label(self.classes_[codes[0]])!r}"
                    )
            target = torch.tensor(codes, dtype=torch.long, device=self.device)
            self._fit_module(
                Xv,
                target,
                len(self.classes_),
                lambda r=None: CategoricalLikelihood(),
                seeds,
                w,
                held_out=lambda part, fit_rows, held, seed: _HeldOutScore(
                    *self._held_out_gain(part, Xv, codes, w, fit_rows, held, seed)
                ),
            )
        self._warn_if_off_scale(Xv)
        self._warn_if_degenerate(self._fit_problem())
        self._warn_if_unconverged()
        # Collapse to the class frequencies (the majority class's predictor): the posterior
        # predictive's training log-loss is then the entropy of those frequencies; and a
        # fit that predicts one class for (nearly) every row though another is common. One
        # prediction pass on at most _CHECK_ROWS rows. Not the history's log-loss: that is
        # the expected log-loss under q, above the predictive's (Jensen), so a fit whose
        # predictions carry a signal could read as collapsed.
        reasons = self._collapse_reasons(Xv, codes, w)
        # Set by _fit_module: None where no check was made.
        gain, se = self.held_out_gain_, self.held_out_gain_se_
        if reasons and gain is not None and se is not None and gain + se <= 0:
            reasons.append(
                f"a fit at KL weight {self.kl_weight_:g} on every input predicted held-out "
                f"rows worse than the class frequencies (by {-gain:.3g} nats a row, "
                f"standard error {se:.3g}), so the fit at KL weight 0.35 replaced it "
                "(held_out_gain_)"
            )
        self._warn_if_collapsed(reasons)
        return self

    def _class_weights(self, codes: NDArray[np.intp]) -> NDArray[np.float64] | None:
        """Each row's ``class_weight`` (``codes``: the rows' class indices into
        ``classes_``); ``None`` without class weights. ``"balanced"`` is
        ``n / (n_classes * count(class))``, from the rows' counts (as scikit-learn)."""
        if self.class_weight is None:
            return None
        if isinstance(self.class_weight, str):
            counts = np.bincount(codes, minlength=len(self.classes_))
            per_class = len(codes) / (len(self.classes_) * counts)
        else:
            labels = {_label(c) for c in self.classes_}
            unknown = [k for k in self.class_weight if _label(k) not in labels]
            if unknown:
                raise ValueError(
                    f"class_weight has labels not in y: {unknown!r}; the classes are "
                    f"{[_label(c) for c in self.classes_]!r}"
                )
            given = {_label(k): float(v) for k, v in self.class_weight.items()}
            per_class = np.array([given.get(_label(c), 1.0) for c in self.classes_])
        return np.asarray(per_class[codes], dtype=np.float64)

    def _held_out_gain(
        self,
        part: nn.Module,
        X: NDArray[Any],
        codes: NDArray[np.intp],
        w: NDArray[Any] | None,
        fit_rows: NDArray[np.intp],
        held: NDArray[np.intp],
        seed: int,
    ) -> tuple[float, float]:
        """How much better ``part``, a network fitted on ``fit_rows``, predicts the
        ``held`` rows than the class frequencies of ``fit_rows`` do: the difference of
        their log-losses there, nats per row, and its standard error over those rows
        (``codes``: the rows' classes; ``w``: their weights, ``None`` for equal; the
        frequencies, the losses and the standard error weighted by them). Its posterior
        predictive takes ``n_samples_predict`` draws, from a generator seeded by
        ``seed``."""
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        proba = predict_proba(
            part, self._tensor(X[held], "X"), int(self.n_samples_predict), generator=gen
        )
        p = proba.cpu().numpy().astype(np.float64)
        k = len(self.classes_)
        w_fit = np.ones(fit_rows.size) if w is None else np.asarray(w, float)[fit_rows]
        w_held = None if w is None else np.asarray(w, float)[held]
        freq = np.bincount(codes[fit_rows], w_fit, k) / w_fit.sum()
        y = codes[held]
        frequencies = np.broadcast_to(freq, (held.size, k))
        return _mean_and_se(_row_log_loss(frequencies, y) - _row_log_loss(p, y), w_held)

    def _collapse_reasons(
        self, X: NDArray[Any], codes: NDArray[np.intp], w: NDArray[Any] | None
    ) -> list[str]:
        """Why the fit collapsed, on up to ``_CHECK_ROWS`` evenly spaced training rows
        (``codes``: their classes, ``w``: their weights, ``None`` for equal): its posterior
        predictive log-loss is at least ``_COLLAPSED_LOG_LOSS`` of the entropy of the
        (weighted) class frequencies, or it predicts one class for at least
        ``_COLLAPSED_SHARE`` of the rows while another class has at least
        ``_MINORITY_SHARE`` of them. Empty when neither."""
        idx = _check_rows(len(X))
        if not idx.size:
            return []
        Xt = self._tensor(X[idx], "X", fitted=True)
        proba = predict_proba(
            self._module64(), Xt, _CHECK_DRAWS, generator=self._predict_generator()
        )
        p = proba.cpu().numpy()
        y = codes[idx]
        k = len(self.classes_)
        rw = np.ones(idx.size) if w is None else np.asarray(w, float)[idx]
        wfreq = np.bincount(y, rw, k) / rw.sum()
        entropy = float(-np.sum(wfreq[wfreq > 0] * np.log(wfreq[wfreq > 0])))
        log_loss = _log_loss(p, y, rw)
        reasons = []
        if log_loss >= _COLLAPSED_LOG_LOSS * entropy:
            reasons.append(
                f"its training log-loss ({log_loss:.3g}) is that of predicting the class "
                f"frequencies ({entropy:.3g}), i.e. the majority class "
                f"{_label(self.classes_[int(np.argmax(wfreq))])!r} for every row"
            )
        freq = np.bincount(y, minlength=k) / y.size
        share = np.bincount(np.argmax(p, axis=1), minlength=k) / y.size
        top = int(np.argmax(share))
        others = np.delete(freq, top)
        if share[top] >= _COLLAPSED_SHARE and others.size and others.max() >= _MINORITY_SHARE:
            reasons.append(
                f"it predicts class {_label(self.classes_[top])!r} for {100 * share[top]:.1f}% "
                f"of the training rows, while another class has {100 * others.max():.0f}% of "
                "them"
            )
        return reasons

    def _fit_problem(self) -> str | None:
        if not self.history_.nll:
            return None
        nll, uniform = float(self.history_.nll[-1]), math.log(len(self.classes_))
        if nll > 10.0 * uniform:
            return (
                f"the final training log-loss ({nll:.3g}) is over 10 times that of predicting "
                f"every class with equal probability ({uniform:.3g})"
            )
        return None

    def _export_head(self) -> list[nn.Module]:
        """The layers after an exported network: class probabilities, ``(n, C)``."""
        return [nn.Softmax(dim=-1)]

    def _predictive_head(self, return_std: bool = False) -> list[nn.Module]:
        """After the batched draws: the average of their softmax vectors, ``(n, C)``."""
        _no_std(return_std, self)
        return [nn.Softmax(dim=-1), MeanDraws()]

    def _moments_head(self, return_std: bool = False) -> list[nn.Module]:
        """After the logits' moments ``(2, n, C)``: the expected softmax, ``(n, C)``."""
        _no_std(return_std, self)
        device = next(self.module_.parameters()).device
        like = torch.empty(0, dtype=torch.float64, device=device)  # export_moments' dtype
        return [SoftmaxOfNormal(len(self.classes_), like)]

    def predict_proba(
        self, X: ArrayLike, n_samples: int | None = None
    ) -> NDArray[np.floating[Any]]:
        """Bayesian predictive probabilities, the average softmax over H draws, ``(n, C)``.

        ``n_samples`` (an int >= 1) overrides ``n_samples_predict``.
        """
        Xt = self._validate_X(X)
        out = predict_proba(
            self._module64(), Xt, self._draws(n_samples), generator=self._predict_generator()
        )
        return self._check_outputs(out).cpu().numpy()

    def predict_log_proba(
        self, X: ArrayLike, n_samples: int | None = None
    ) -> NDArray[np.floating[Any]]:
        """The log of :meth:`predict_proba` (the same draws), ``(n, C)``; ``-inf`` where a
        probability is 0, as scikit-learn's classifiers give it."""
        proba = self.predict_proba(X, n_samples)
        with np.errstate(divide="ignore"):
            return np.log(proba)

    def predict(self, X: ArrayLike) -> NDArray[Any]:
        """Most probable class under the predictive probabilities, ``(n,)``."""
        proba = self.predict_proba(X)
        return self.classes_[np.argmax(proba, axis=1)]

    def score(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
        """Accuracy; labels not seen at fit time are an error, not a silent miss."""
        check_is_fitted(self, "classes_")
        yv = np.asarray(_to_numpy(y))
        unseen = np.setdiff1d(np.unique(yv), self.classes_)
        if unseen.size:
            raise ValueError(
                f"y contains labels not seen at fit time: {unseen.tolist()}; "
                f"known classes are {self.classes_.tolist()}"
            )
        return float(super().score(X, y, sample_weight))


_MIN_RATE = 1e-8
"""The base rate of a training set of zero counts only (a log offset must be finite)."""


def _check_counts(y: NDArray[Any], name: str = "y") -> NDArray[np.float64]:
    """``y`` as float64 counts; negative values are an error naming ``name``."""
    arr = np.asarray(y, dtype=np.float64)
    if arr.size and float(arr.min()) < 0:
        raise ValueError(
            f"{name} must be non-negative counts for a Poisson regression, got a minimum of "
            f"{float(arr.min()):.6g} ({int(np.sum(arr < 0))} negative value(s))"
        )
    return arr


@dataclass(eq=False, repr=False, kw_only=True)
class _PoissonRegression(RegressorMixin, _VariationalEstimator):
    """Poisson likelihood with the log link for counts (non-negative ``y``).

    The network's output is the log rate relative to the training rows' mean count
    (``log_offset_``), so a network started near 0 starts at that rate.
    """

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.target_tags.positive_only = True
        return tags

    def fit(self: _P, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> _P:
        """Fit the variational posterior; ``y`` holds non-negative counts, shape ``(n,)``.

        Checks, failure behaviour and ``sample_weight`` (relative weights of the rows'
        likelihood terms, normalised to mean 1; the log offset is their weighted mean
        count) as the regressor's ``fit``.

        Raises
        ------
        ValueError
            When ``y`` has a negative value (or any other bad input).
        """
        self._check_params()
        seeds = _SeedSource(self.random_state)
        X, y = _to_numpy(X), _to_numpy(y)
        X, y = _check_numeric(X, "X"), _check_numeric(y, "y")
        with self._fit_transaction():
            Xv, yv = _numeric_fit_data(self, X, y)
            counts = _check_counts(yv)
            keep, w = _row_weights(sample_weight, Xv)
            if keep is not None:
                Xv, counts = Xv[keep], counts[keep]
            mean = float(np.average(counts, weights=w))
            self.log_offset_ = math.log(mean if mean > 0 else _MIN_RATE)
            offset = self.log_offset_
            self._fit_module(
                Xv,
                self._tensor(counts, "y"),
                1,
                lambda r=None: PoissonLikelihood(offset),
                seeds,
                w,
            )
        self._warn_if_off_scale(Xv)
        self._warn_if_unconverged()
        rows = Xv[: min(len(Xv), 512)]
        pred = self.predict(rows, n_samples=5) if len(rows) else np.zeros(0)
        constant = bool(np.std(pred) <= 1e-3 * max(mean, _MIN_RATE))
        self._warn_if_collapsed(
            [
                f"the predicted mean counts on the training rows are constant (sd "
                f"{np.std(pred):.3g}, mean count {mean:.3g})"
            ]
            if constant
            else []
        )
        return self

    def _likelihood(self) -> PoissonLikelihood:
        return PoissonLikelihood(self.log_offset_)

    def predict(self, X: ArrayLike, n_samples: int | None = None) -> NDArray[np.floating[Any]]:
        """Posterior predictive mean count ``(1/H) sum_h exp(eta_h(x))``, shape ``(n,)``.

        ``n_samples`` (an int >= 1) overrides ``n_samples_predict``.
        """
        Xt = self._validate_X(X)
        rate = response_mean(
            self._module64(),
            Xt,
            self._likelihood(),
            self._draws(n_samples),
            generator=self._predict_generator(),
        )
        return self._check_outputs(rate)[:, 0].cpu().numpy()

    def predict_interval(
        self, X: ArrayLike, level: float = 0.95, n_samples: int = 600
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Prediction interval for a new count, each ``(n,)`` integers.

        Quantiles of the posterior predictive mixture: one Poisson count drawn at each of
        ``n_samples`` posterior draws of the rate (:func:`svbnn.prediction.response_interval`);
        the lower bound is rounded down to a drawn count and the upper one up, so the
        interval holds at least ``level`` of the mixture up to Monte Carlo error.

        ``level`` must lie in ``(0, 1)`` and ``n_samples`` (posterior draws) be an int >= 2.
        """
        n_draws = self._interval_args(level, n_samples)
        Xt = self._validate_X(X)
        lo, hi = response_interval(
            self._module64(),
            Xt,
            self._likelihood(),
            level,
            n_draws,
            generator=self._predict_generator(),
        )
        hi = self._check_outputs(hi[:, None])[:, 0]
        return lo.cpu().numpy().astype(np.int64), hi.cpu().numpy().astype(np.int64)

    def score(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
        """D^2, the fraction of Poisson deviance explained (as scikit-learn's
        ``PoissonRegressor.score``): ``1 - D(y, predict(X)) / D(y, mean(y))``, at most 1."""
        pred = self.predict(X)
        counts = _check_counts(column_or_1d(_to_numpy(y)))
        return float(d2_tweedie_score(counts, pred, sample_weight=sample_weight, power=1))

    def _export_head(self) -> list[nn.Module]:
        """The layers after an exported network: the median model's rate, ``(n,)``."""
        return [ExpOutput(self.log_offset_)]

    def _predictive_head(self, return_std: bool = False) -> list[nn.Module]:
        """After the batched draws: the mean of their rates (``predict``'s), ``(n,)``."""
        _no_std(return_std, self)
        return [ExpOutput(self.log_offset_), MeanDraws()]

    def _moments_head(self, return_std: bool = False) -> list[nn.Module]:
        """After the log rate's moments ``(2, n, 1)``: the mean rate, ``(n,)``."""
        _no_std(return_std, self)
        return [LogNormalRate(self.log_offset_)]

    def _in_user_units(self, module: nn.Module) -> nn.Module:
        """The exported module outputs the log rate ``eta`` (the offset added)."""
        if self.log_offset_ != 0.0:
            return _OutputScale(module, 1.0, self.log_offset_).eval()
        return module
