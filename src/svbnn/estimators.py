"""scikit-learn estimators: :class:`SVBNNRegressor`, :class:`SVBNNPoissonRegressor` and
:class:`SVBNNClassifier`.

Both follow the scikit-learn contract: ``__init__`` only stores its arguments, fitted
attributes end in ``_``, ``random_state`` makes a fit (and every prediction after it)
reproducible. Predictions draw their posterior samples from a generator seeded from the
fit, so ``predict`` is deterministic, and each row gets the same draws whatever the other
rows (its prediction then agrees up to floating-point rounding, see ``dtype``).

Each is the spike-and-slab family (:class:`_SpikeSlabFamily`: the network, the prior's
parameters, the inclusion summaries, ``export_sparse``) on a task piece (regression or
classification) over the shared variational estimator; the baselines'
estimators (:mod:`svbnn.baselines`) are other families on the same pieces.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from numpy.typing import NDArray
from sklearn.utils.validation import check_is_fitted
from torch import Tensor, nn

from ._estimator_base import (
    _COMMON_ATTRIBUTES,
    _COMMON_PARAMETERS,
    _fill_doc,
    _held_out_rows,
    _run_falling_back,
    _subset_weights,
    _VariationalEstimator,
)
from ._estimator_checks import (
    _DTYPES,
    _UNRESOLVED_EXPORT,
    CollapseWarning,
    InputScaleWarning,
    _check_choice,
    _check_real,
    _empirical_bayes_inclusion,
    _hidden_sizes,
)
from ._estimator_tasks import (
    _CLASSIFICATION_ATTRIBUTES,
    _CLASSIFICATION_PARAMETERS,
    _MEAN_FUNCTION_ATTRIBUTES,
    _MEAN_FUNCTION_PARAMETER,
    _POISSON_ATTRIBUTES,
    _REGRESSION_ATTRIBUTES,
    _REGRESSION_PARAMETERS,
    CLASSIFIER_PREDICT_DRAWS,
    _Classification,
    _PoissonRegression,
    _Regression,
)
from ._linear_mean import MEAN_FUNCTIONS
from .export import (
    MOMENT_MIN_INCLUSION,
    PlusLinearMean,
    export_compact,
    export_draws,
    export_moments,
    export_onnx,
)
from .nn.base import Sampler, forward_mode, frozen_sample
from .nn.spike_slab import SpikeSlabMLP, check_temperature
from .prediction import _evaluation, sample_outputs
from .priors import (
    LOG_INCLUSION_MIN,
    check_prior_variance,
    mlp_log_lambda_auto,
    mlp_log_lambda_opt,
    resolve_log_inclusion,
)
from .selection import (
    ExportReport,
    density,
    export_sparse,
    feature_inclusion,
    selected_features,
    sparsity,
    spike_slab_layers,
    unresolved_fraction,
)
from .training import LikelihoodLike, check_kl_weight

__all__ = [
    "CollapseWarning",
    "InputScaleWarning",
    "SVBNNClassifier",
    "SVBNNPoissonRegressor",
    "SVBNNRegressor",
]

_SPIKE_SLAB_PARAMETERS = """\
prior_inclusion : "auto", "opt", "eb", "cv" or float, default "auto"
    Prior inclusion ``lambda``: ``"opt"`` is ``lambda_opt`` of Theorem 4.1 (about 1e-4;
    needed for variable selection; the paper's); ``"auto"`` is ``lambda_opt`` for
    networks up to the size of the default one (``hidden_layer_sizes=(50,)``) and, for
    larger ones, ``lambda_opt`` of the default network times the ratio of the numbers of
    parameters (:func:`svbnn.priors.mlp_log_lambda_auto`), at most ``INCLUSION_MAX``:
    with ``"opt"``, wider networks lose every path to the output on small tables;
    ``"eb"`` sets it during training to its empirical-Bayes value, the mean ``phi``
    (capped at 0.5: better fits on small data, but every input then reaches the output
    with high probability); ``"cv"`` chooses it on
    held-out rows, the way ``LassoCV`` chooses ``alpha``: a grid of ``INCLUSION_GRID``
    values, log-spaced from ``lambda_opt`` to ``INCLUSION_MAX`` (0.1: with a denser prior
    the gates of edges the data do not inform stay near ``lambda``, and many such edges
    add up to a selected input), is fitted on 80% of the rows as the
    replicates of one network, and the smallest ``lambda`` whose held-out log predictive
    density is within one standard error of the best is kept (the one-standard-error
    rule); the fit on all rows then starts from that replicate (``n_iter_`` and
    ``history_`` are its; with fewer than 10 rows, ``"cv"`` is ``"opt"``); or a float.
log_prior_inclusion : float, optional
    ``log(lambda)``, in ``[-1e30, 0)``; overrides ``prior_inclusion`` (use it below
    ~1e-300).
prior_variance : float, default 2.0
    Slab variance ``sigma_0^2``, in ``[1e-12, 1e30]``
    (:data:`svbnn.priors.PRIOR_VARIANCE_RANGE`).
temperature : float, default 0.5
    Gumbel-softmax temperature, in ``[1e-30, 1e30]``.
sampler : {"gumbel", "inverse_cdf", "local"}, default "gumbel" (:class:`SVBNNRegressor`: "local")
    Training reparameterisation (:class:`svbnn.nn.Sampler`). ``"local"`` draws each
    row's pre-activations from their exact mean and variance under q instead of weights:
    lower-variance gradients, so ``max_iter="auto"`` gives it half the floor of steps
    (2,000; half the budget on a table under 1,600 rows), to be taken at a larger
    ``learning_rate_init`` (the regressor's default 0.025); its regression fits were
    more accurate on most benchmark tables (user guide, "The regressor's local sampler,
    measured"). Predictions draw weights exactly whatever the sampler.
init_inclusion : float, default 0.99
    Initial ``phi``.
init_mu_range : float, optional
    Half-range of the initial means (``None``: ``1/sqrt(fan_in)``).
refit_kl_weight : float, "auto" or None, default None (the regressor and classifier: "auto")
    A second fit, at this KL weight, on the inputs the first fit selected
    (``screened_features_``): a network of the same shape, started as the first fit was
    (afresh; with ``"cv"``, from the chosen replicate), whose other inputs'
    first-layer gates start closed (``phi = 0``) and stay closed, so they are never
    selected and add nothing to a prediction. The first fit, at ``kl_weight``, selects;
    the second, rid of the inputs that carry nothing, fits the rest with less shrinkage,
    as the relaxed lasso refits the lasso's selection. With ``prior_inclusion`` "auto"
    or "opt", its ``lambda`` is that of a network on the selected inputs. It has
    ``refit_budget`` of the first's ``max_iter`` budget; ``n_iter_``, ``history_``,
    ``loss_curve_`` and ``converged_`` are its, and below 1 a regressor's noise level is
    fitted on held-out rows by a run of it on 80% of them, over half its budget
    (``noise_std``). No second fit when the first selects no input, nor, where the first
    fit is at ``kl_weight``, when it explains nothing (a regressor's training R^2 at most
    0.02: the inputs it selected are noise's, which a refit with less shrinkage would
    fit). A regressor's ``"auto"`` refit, at a KL weight below ``kl_weight``, is checked
    on its held-out noise run (``noise_std="auto"``, which makes one): where that run
    predicts the held-out rows worse than the mean of ``y`` on its own rows, by at least
    the standard error of the difference (``held_out_gain_``, ``held_out_gain_se_``),
    the refit fitted noise and the first fit replaces it; where it passes, the fit is
    the one made without the check, in the same time (on tables of 300 rows whose target
    is independent of 20 inputs, the test error fell from 1.45 to 1.01 times the
    training mean's, over six seeds; user guide, "Reading the diagnostics and warnings",
    a regression target unrelated to the inputs). ``None``: the first fit only.
    ``"auto"``: ``REFIT_AUTO_KL_WEIGHT`` (0.2), at every size (with
    ``refit_budget="auto"``, over at most 2,000 steps on 1,601-3,000 rows). Up to
    ``LARGE_TABLE_ROWS`` (3,000) rows a regressor's ``"auto"`` refits only a network
    fitted to ``y`` alone, not one on a linear mean's residuals (under
    ``mean_function="auto"`` the rule compares the linear mean with the refitted
    network). On the regression benchmark the refit at 0.2 was
    more accurate on most tables and the GP's lead on smooth ones closed or narrowed, in
    about twice a small table's fit time (user guide, "The regressor's refit on the
    selected inputs, measured", "The regressor on tables of more than 3,000 rows,
    measured", "The refit on tables of up to 1,600 rows, measured" and "The refit on
    tables of 1,600 to 3,000 rows, measured"). A classifier's ``"auto"`` selects at the stronger
    weight and predicts at ``kl_weight``: on a table of at least
    ``CLASSIFIER_SELECT_ROWS`` (500) rows and with
    ``kl_weight`` below ``SELECT_KL_WEIGHT`` (0.35), the first fit runs at 0.35 and the
    second at ``kl_weight`` (if the first selects no input, on every input); otherwise the
    classifier fits once, at ``kl_weight``. Where its final fit is at a ``kl_weight``
    below 0.35 on every input (that one fit, or the refit after a selecting fit that
    kept none), a run of it on 80% of the rows over a quarter of its budget is scored
    against the class frequencies on the other 20% (``held_out_gain_``); where it
    predicts them worse, by at least the standard error of the difference, it has fitted
    noise, and the fit at 0.35 replaces it (the selecting fit where one was made): on
    tables whose labels are independent of 20 inputs, one fit at 0.2 on 300-1,000 rows
    selected most of them and predicted new rows worse than the frequencies (user guide,
    "Reading the diagnostics and warnings", labels unrelated
    to the inputs). On 48 generated problems of 500 to 2,250 rows
    the log loss was lower on 37 and higher on 1, with 0.1-0.5 of 15 noise inputs kept
    against 1.8-8.3, at 1.5-2 times the fit time; on the benchmark's 2- and 10-class
    tables of 750 rows it kept 0 and 2.7 of 10 noise inputs against 4.3 and 10; on tables
    of 127 rows the fit at 0.35 pruned real inputs (user guide, "The classifier's
    selecting fit, measured").
refit_budget : float or "auto", default "auto"
    The refit's share of the first fit's epoch budget, in ``(0, 1]`` (and that of its
    held-out noise run); only with ``refit_kl_weight``. A shorter refit costs less time
    and keeps part of the refit's gain (user guide, "The regressor's refit on the
    selected inputs, measured"). ``"auto"``: the whole budget, except under
    ``max_iter="auto"`` on a table of more than ``SMALL_TABLE_ROWS`` (1,600) and up to
    ``LARGE_TABLE_ROWS`` (3,000) rows, where the refit takes at most
    ``REFIT_AUTO_STEPS`` (2,000) steps: the regressor's 111 of 160 epochs at 2,250 rows
    and 83 at 3,000 (on a smaller table its whole budget is about 2,000 steps), the
    classifier's half of its 4,000, which keeps a fit of 3,000 rows x 40 inputs within
    about 3 s (user guide, "The refit on tables of 1,600 to 3,000 rows, measured")."""

_SPIKE_SLAB_ATTRIBUTES = """\
module_ : SpikeSlabMLP
    The fitted network (a regressor's on standardised ``y``; ``export_sparse`` rescales).
feature_inclusion_ : ndarray of shape (p,)
    Per input, the posterior probability that it reaches the output through included
    edges (:func:`svbnn.selection.feature_inclusion`).
selected_features_ : ndarray of int
    The inputs of the median model (:meth:`export_sparse`): those with a path of edges
    of ``phi > 0.5`` to the output (:func:`svbnn.selection.selected_features` with
    ``reach=True``), and a linear mean's inputs.
unresolved_ : float
    Fraction of gates with ``phi`` in (0.1, 0.9) at the end.
inclusion_probs_ : list of ndarray, each ``(out, in)``
sparsity_ : float
    ``sum(phi) / T``.
density_ : float
    Fraction of parameters with ``phi > 0.5``.
lambda_, log_lambda_ : float
    The prior inclusion used (with ``"eb"``: its final value; with ``"cv"``: the chosen;
    with a refit, the refit's).
screened_features_ : ndarray of int or None
    After a refit (``refit_kl_weight``): the inputs the first fit selected, to which the
    refit is restricted (``selected_features_`` is a subset); ``None`` without a refit.
inclusion_grid_, inclusion_scores_ : ndarray of shape (INCLUSION_GRID,)
    With ``prior_inclusion="cv"`` only: the candidate ``log(lambda)`` and their held-out
    mean log predictive density per row (nats; standardised ``y`` for a regressor)."""

_SPIKE_SLAB_WARNS = """\
sklearn.exceptions.ConvergenceWarning
    The budget ran out before convergence (says what fraction of gates is unresolved).
CollapseWarning
    No input selected, no path from an input to the output in the median model, or a fit
    that explains nothing: a regressor's training R^2 at most 0.02; a classifier that
    predicts one class for at least 99% of the training rows while another class has at
    least 10% of them, or whose training log-loss is that of predicting the class
    frequencies (where a fit at the tempered ``kl_weight`` gave way to one at 0.35 after
    its held-out check, the warning says so). One warning lists every reason;
    ``collapsed_`` records it and ``fit_warnings_`` every warning of the fit.
    ``converged_`` keeps its meaning (the stopping rule fired): a collapsed fit can have
    converged.
InputScaleWarning
    The training inputs are far from unit scale (a column's root mean square above 5, or
    the columns' largest absolute values below 0.1 at the median): scale ``X`` first.
UserWarning
    A regressor that diverged (training R^2 below -1) or a classifier whose training
    log-loss is over 10 times a uniform prediction's; the message says "diverged"."""


# An input left out of the refit: its first-layer gates start closed. sigmoid(-200) is 0
# in float32 (1e-87 in float64), so an exact draw of its weights is 0 and it adds nothing
# to a prediction; its gate and slab gradients carry a factor phi (1 - phi) or phi, so
# no optimiser moves them (Adam's and RMSprop's steps scale by them over eps = 1e-8).
_CLOSED_LOGIT = -200.0


def _selected(model: nn.Module) -> NDArray[np.bool_]:
    """The selection rule, per input ``(p,)``: the inputs of the median model, with a path
    of edges of ``phi > 0.5`` to the output (``selected_features_``, and the inputs a
    refit keeps). Not ``feature_inclusion_ > 0.5``: a noise input's gates that training
    left at ``phi`` of about 0.01, near neither the prior nor 0.5, add up over 50 hidden
    units to a path probability of about 0.5 (the classifier's on the benchmark's
    10-class table: 2.7 of 10 noise inputs selected; user guide, "Variable selection")."""
    p = spike_slab_layers(model)[0].inclusion_probs()["weight"].shape[-1]
    mask = np.zeros(p, dtype=np.bool_)
    mask[selected_features(model, reach=True)] = True
    return mask


INCLUSION_GRID = 6  # prior_inclusion="cv": candidate values of lambda,
INCLUSION_MAX = 0.1  # log-spaced from lambda_opt to this (see the parameter)
# refit_kl_weight="auto": the refit at REFIT_AUTO_KL_WEIGHT. Up to LARGE_TABLE_ROWS rows (the
# size a fit is meant to take about 3 s at) it is not made for a linear mean's residuals.
# refit_budget="auto" gives a refit on more than SMALL_TABLE_ROWS rows, up to
# LARGE_TABLE_ROWS, at most REFIT_AUTO_STEPS steps: the regressor's whole budget on a
# smaller table (at 128 rows a batch), half the classifier's (the parameters say why).
LARGE_TABLE_ROWS = 3000
SMALL_TABLE_ROWS = 1600
REFIT_AUTO_KL_WEIGHT = 0.2
REFIT_AUTO_STEPS = 2000
# A classifier's refit_kl_weight="auto": the first fit selects at SELECT_KL_WEIGHT on a
# table of at least CLASSIFIER_SELECT_ROWS rows, the refit predicts at kl_weight (the
# parameter says why).
SELECT_KL_WEIGHT = 0.35
CLASSIFIER_SELECT_ROWS = 500
# A classifier's kl_weight="auto": SMALL_TABLE_KL_WEIGHT on a table of fewer than
# CLASSIFIER_SMALL_ROWS rows, CLASSIFIER_KL_WEIGHT from there (the class docstring says why).
CLASSIFIER_KL_WEIGHT = 0.2
SMALL_TABLE_KL_WEIGHT = 0.1
CLASSIFIER_SMALL_ROWS = 200


def _one_standard_error(
    lpd: NDArray[np.float64], w: NDArray[np.float64]
) -> tuple[NDArray[np.float64], int]:
    """The one-standard-error rule over candidates ordered from the sparsest prior.

    ``lpd`` ``(R, m)``: each candidate's held-out log predictive density per row; ``w``
    ``(m,)`` row weights summing to 1. Returns the weighted mean per candidate and the
    first (sparsest) candidate whose mean is within one standard error of the best's,
    the error of its paired difference to the best over the rows."""
    means = lpd @ w
    best = int(np.argmax(means))
    diff = lpd - lpd[best]
    m_eff = 1.0 / float(np.sum(w**2))  # Kish's effective number of rows
    var = ((diff - (diff @ w)[:, None]) ** 2) @ w
    se = np.sqrt(var / max(m_eff - 1.0, 1.0))
    ok = means >= means[best] - se
    return means, int(np.argmax(ok))


@dataclass(eq=False, repr=False, kw_only=True)
class _SpikeSlabFamily(_VariationalEstimator):
    """The paper's method: a :class:`~svbnn.nn.spike_slab.SpikeSlabMLP`, its prior's
    parameters, inclusion summaries and the median model (:meth:`export_sparse`)."""

    prior_inclusion: str | float = "auto"
    log_prior_inclusion: float | None = None
    prior_variance: float = 2.0
    temperature: float = 0.5
    sampler: str = "gumbel"
    init_inclusion: float = 0.99
    init_mu_range: float | None = None
    refit_kl_weight: float | str | None = None
    refit_budget: float | str = "auto"

    def _refit_plan(
        self,
        model: nn.Module,
        n: int,
        n_out: int,
        start: Callable[[nn.Module, nn.Module], None] | None,
        refit: bool = True,
        explains_nothing: Callable[[], bool] = lambda: False,
    ) -> tuple[Callable[[nn.Module, nn.Module], None], float, float] | None:
        """``refit_kl_weight``: a second fit, at that KL weight and over ``refit_budget`` of
        the budget, in which the inputs the first did not select start (and stay) closed
        (where its median model keeps no input, the inputs its posterior reaches with
        probability above 0.5 are the ones kept); none without such an input, after a
        first fit at ``kl_weight`` that explains nothing (its selection is noise's), or
        without ``refit``."""
        self.screened_features_: NDArray[np.intp] | None = None
        refit_kl = self._refit_kl_weight(n) if refit else None
        if refit_kl is None:
            return None
        screened = _selected(model)
        if not screened.any():
            # No path of phi > 0.5 yet, from gates not resolved: the paths the posterior
            # predicts through are the evidence left (at 300 rows, a selecting fit at 0.35
            # whose median model kept nothing, refitted on its one such input, predicted
            # better than itself; user guide, "Variable selection").
            screened = feature_inclusion(model) > 0.5
        if not screened.any():
            if self._first_kl_weight(n) is None:
                return None
            # The selecting fit kept nothing: the refit at kl_weight on every input.
            screened = np.ones_like(screened)
        elif self._first_kl_weight(n) is None and explains_nothing():
            # Inputs "selected" by a fit that explains nothing are noise: a refit with less
            # shrinkage would fit them (user guide, "Reading the diagnostics and warnings").
            return None
        self.screened_features_ = np.flatnonzero(screened)
        closed = torch.as_tensor(~screened, device=self.device)
        self._prior_for_inputs(n, len(self.screened_features_), n_out)

        def refit_start(network: nn.Module, likelihood: nn.Module) -> None:
            if start is not None:
                start(network, likelihood)
            with torch.no_grad():
                gates = spike_slab_layers(network)[0].alpha
                gates[..., : closed.numel()][..., closed] = _CLOSED_LOGIT

        return refit_start, refit_kl, self._refit_share(n)

    def _refit_share(self, n: int) -> float:
        """The refit's share of the first fit's budget on ``n`` rows; resolves ``"auto"``:
        under ``max_iter="auto"`` on a table of more than ``SMALL_TABLE_ROWS`` and up to
        ``LARGE_TABLE_ROWS`` rows, ``REFIT_AUTO_STEPS`` over the budget's steps (at most
        1), elsewhere the whole budget."""
        if self.refit_budget != "auto":
            return float(self.refit_budget)
        # Past SMALL_TABLE_ROWS the budget grows to 160 epochs (the regressor's) or stays
        # at 4,000 steps (the classifier's), and a whole refit would take a fit of 3,000
        # rows x 40 inputs past 3 s (the parameter says why).
        if self.max_iter == "auto" and SMALL_TABLE_ROWS < n <= LARGE_TABLE_ROWS:
            steps = self._epoch_budget(n) * self._steps_per_epoch(n)
            return min(1.0, REFIT_AUTO_STEPS / steps)
        return 1.0

    def _prior_for_inputs(self, n: int, p: int, n_out: int) -> None:
        # "auto" and "opt" depend on the network's inputs; "eb" and "cv" set their own.
        if self.log_prior_inclusion is None and self.prior_inclusion in ("auto", "opt"):
            self._prepare(n, p, n_out)

    def _refit_kl_weight(self, n: int) -> float | None:
        """The refit's KL weight on ``n`` rows (``None``: no refit); resolves ``"auto"``."""
        if self.refit_kl_weight == "auto":
            return REFIT_AUTO_KL_WEIGHT
        return None if self.refit_kl_weight is None else float(self.refit_kl_weight)

    def _small_table_refit(self, n: int) -> bool:
        # "auto" up to LARGE_TABLE_ROWS: not for a linear mean's residuals (the parameter
        # says why).
        return (
            self.refit_kl_weight == "auto"
            and n <= LARGE_TABLE_ROWS
            and self._refit_kl_weight(n) is not None
        )

    def _min_steps(self) -> int:
        # Local reparameterisation's gradients vary less: half the 4,000 steps, at the
        # regressor's learning rate of 0.025, moved the gates as far on the benchmark (at
        # 0.01, half the steps left noise inputs selected). Only the floor is halved: half
        # the 160 epochs of a larger table left more noise inputs selected on tables of
        # 2,800 rows and more (user guide, "The regressor on tables of more than 3,000
        # rows, measured").
        steps = super()._min_steps()
        return steps // 2 if self.sampler == Sampler.LOCAL.value else steps

    def _advise_tempering(self) -> bool:
        # Nor on the local sampler, whose tempered fit overfits (the tempered-noise test in
        # tests/test_estimators_defaults.py).
        return super()._advise_tempering() and self.sampler != Sampler.LOCAL.value

    def _check_family_params(self) -> None:
        _check_choice("sampler", self.sampler, [s.value for s in Sampler])
        if isinstance(self.prior_inclusion, str):
            if self.prior_inclusion not in ("auto", "opt", "eb", "cv"):
                raise ValueError(
                    "prior_inclusion must be 'auto', 'opt', 'eb', 'cv' or a float in (0, 1), "
                    f"got {self.prior_inclusion!r}"
                )
        else:
            _check_real("prior_inclusion", self.prior_inclusion, low=0.0, high=1.0)
        _check_real(
            "log_prior_inclusion",
            self.log_prior_inclusion,
            low=LOG_INCLUSION_MIN,
            low_inclusive=True,
            high=0.0,
            allow_none=True,
        )
        check_prior_variance(self.prior_variance)
        _check_real("temperature", self.temperature, low=0.0)
        check_temperature(self.temperature)
        _check_real("init_inclusion", self.init_inclusion, low=0.0, high=1.0)
        _check_real("init_mu_range", self.init_mu_range, low=0.0, allow_none=True)
        if isinstance(self.refit_kl_weight, str):
            if self.refit_kl_weight != "auto":
                raise ValueError(
                    "refit_kl_weight must be 'auto', None or a number, "
                    f"got {self.refit_kl_weight!r}"
                )
        else:
            _check_real("refit_kl_weight", self.refit_kl_weight, low=0.0, allow_none=True)
            if self.refit_kl_weight is not None:
                check_kl_weight(self.refit_kl_weight, "refit_kl_weight")
        if isinstance(self.refit_budget, str):
            if self.refit_budget != "auto":
                raise ValueError(
                    f"refit_budget must be 'auto' or a number, got {self.refit_budget!r}"
                )
        else:
            _check_real("refit_budget", self.refit_budget, low=0.0, high=1.0, high_inclusive=True)

    def _empirical_bayes(self) -> bool:
        return self.prior_inclusion == "eb" and self.log_prior_inclusion is None

    def _prepare(self, n: int, p: int, n_out: int) -> list[Any]:
        """The prior inclusion ``lambda`` (``"auto"`` and ``"opt"`` depend on ``n`` and the
        widths)."""
        hidden = _hidden_sizes(self.hidden_layer_sizes)
        if self.log_prior_inclusion is not None:
            log_lam = resolve_log_inclusion(log_inclusion=self.log_prior_inclusion)
        elif self.prior_inclusion == "auto":
            log_lam = mlp_log_lambda_auto(p, hidden, n_out, n, math.log(INCLUSION_MAX))
        elif self.prior_inclusion == "eb":
            log_lam = math.log(0.5)  # the starting value; fitted with the rest
        elif isinstance(self.prior_inclusion, str):
            # "opt"; and "cv" until the held-out choice (_choose_on_held_out) replaces it.
            log_lam = mlp_log_lambda_opt(p, hidden, n_out, n)
        else:
            log_lam = resolve_log_inclusion(inclusion=float(self.prior_inclusion))
        self.log_lambda_ = log_lam
        self.lambda_ = math.exp(log_lam)
        for name in ("inclusion_grid_", "inclusion_scores_"):  # a "cv" refit's, if any
            self.__dict__.pop(name, None)
        return [_empirical_bayes_inclusion] if self._empirical_bayes() else []

    def _held_out_choice(self, n: int) -> bool:
        # Too few rows to hold any out: "cv" keeps lambda_opt (documented).
        return self.prior_inclusion == "cv" and self.log_prior_inclusion is None and n >= 10

    def _choose_on_held_out(
        self,
        X: Tensor,
        target: Tensor,
        n_out: int,
        make_likelihood: Any,
        weights: NDArray[Any] | None,
        seed: int,
        kernels: str,
    ) -> Any:
        """``prior_inclusion="cv"``: the grid fitted as replicates on 80% of the rows, the
        one-standard-error rule on the other 20% (see the parameter). The fit on all rows
        starts from the chosen replicate (its network and likelihood parameters)."""
        n, p = X.shape
        fit_rows, held = _held_out_rows(target, seed)
        grid = np.linspace(self.log_lambda_, math.log(INCLUSION_MAX), INCLUSION_GRID)
        R = len(grid)
        log_lams = torch.tensor(grid, dtype=_DTYPES[self.dtype]).reshape(R, 1)
        Xf = X[fit_rows].expand(R, len(fit_rows), p)
        yf = target[fit_rows].expand(R, len(fit_rows))
        wf = _subset_weights(weights, fit_rows)
        model, lik, _, _ = _run_falling_back(
            lambda k: self._train(
                lambda gen: self._build_module(
                    p, n_out, gen, n_replicates=R, log_prior_inclusion=log_lams
                ),
                lambda: make_likelihood(R),
                Xf,
                yf,
                wf,
                self._epoch_budget(len(fit_rows)),
                [],
                seed,
                k,
                # The choice needs settled predictions, not settled gates: the fit on all
                # rows that follows settles them.
                gate_tol=1.0,
            ),
            kernels,
        )
        H = int(self.n_samples_predict)
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        with torch.no_grad():
            Xh = X[held].expand(R, len(held), p)
            out = sample_outputs(model, Xh, H, generator=gen)  # (H, R, m, out)
            lp = cast(LikelihoodLike, lik).log_prob(out, target[held].expand(H, R, len(held)))
            lpd = (torch.logsumexp(lp.double(), 0) - math.log(H)).cpu().numpy()  # (R, m)
        w = np.ones(len(held)) if weights is None else weights[held]
        self.inclusion_grid_ = grid
        self.inclusion_scores_, best = _one_standard_error(lpd, w / w.sum())
        self.log_lambda_ = float(grid[best])
        self.lambda_ = math.exp(self.log_lambda_)
        chosen = [
            {k: v.detach()[best].clone() for k, v in m.named_parameters()} for m in (model, lik)
        ]

        def start(network: nn.Module, likelihood: nn.Module) -> None:
            with torch.no_grad():
                for m, values in zip((network, likelihood), chosen, strict=True):
                    for k, v in m.named_parameters():
                        v.copy_(values[k].reshape(v.shape))

        return start

    def _build_module(
        self, n_features: int, n_out: int, gen: torch.Generator, **replicated: Any
    ) -> nn.Module:
        """The network; ``replicated``: ``n_replicates`` and a per-replicate
        ``log_prior_inclusion`` ``(R, 1)`` (the held-out choice's grid)."""
        return SpikeSlabMLP(
            n_features,
            _hidden_sizes(self.hidden_layer_sizes),
            n_out,
            activation=self.activation,
            prior_variance=self.prior_variance,
            log_prior_inclusion=replicated.pop("log_prior_inclusion", self.log_lambda_),
            sampler=self.sampler,
            temperature=self.temperature,
            init_inclusion=self.init_inclusion,
            init_mu_range=self.init_mu_range,
            generator=gen,
            device=self.device,
            dtype=_DTYPES[self.dtype],
            **replicated,
        )

    def _summarize(self, model: nn.Module) -> None:
        """Inclusion probabilities, sparsity and the selection (and the fitted ``"eb"``
        lambda)."""
        if self._empirical_bayes():
            self.log_lambda_ = float(next(b for b in model.buffers()).reshape(-1)[0])
            self.lambda_ = math.exp(self.log_lambda_)
        self.inclusion_probs_ = [
            layer.inclusion_probs()["weight"].cpu().numpy() for layer in spike_slab_layers(model)
        ]
        self.sparsity_ = float(sparsity(model))
        self.density_ = float(density(model))
        self.unresolved_ = float(unresolved_fraction(model))
        fi = feature_inclusion(model)
        selected = _selected(model)
        # A linear mean uses its inputs in every posterior draw.
        fi[self._linear_inputs()] = 1.0
        selected[self._linear_inputs()] = True
        self.feature_inclusion_ = fi
        self.selected_features_ = np.flatnonzero(selected)

    def _kept_weight_masks(self) -> list[NDArray[np.bool_]]:
        """``phi > 0.5``."""
        return [p > 0.5 for p in self.inclusion_probs_]

    def export_sparse(self, storage: str = "sparse") -> tuple[nn.Module, ExportReport]:
        """The median model: edges with ``phi > 0.5`` and weights ``mu``, as a plain module.

        It predicts like the posterior once the gates are resolved (``phi`` near 0 or 1);
        warns (``UserWarning``) when more than 1% of them are not. A regressor's module
        outputs in the units of ``y`` (the fitted network's standardised outputs, rescaled).

        Parameters
        ----------
        storage : {"sparse", "dense"}, default "sparse"
            How the kept weights are stored (:func:`svbnn.selection.export_sparse`).

        Returns
        -------
        module : torch.nn.Module
        report : ExportReport
            Sizes of the exported model.
        """
        check_is_fitted(self, "module_")
        self._warn_if_unresolved()
        module, report = export_sparse(self.module_, storage=storage)
        return self._in_user_units(self._plus_linear_mean(module, "point")), report

    def _plus_linear_mean(
        self,
        body: nn.Module,
        form: str,
        generator: torch.Generator | None = None,
        n_draws: int = 0,
    ) -> nn.Module:
        """``body`` (standardised outputs) plus the fit's linear mean where it has one
        (:class:`svbnn.export.PlusLinearMean`), in ``form``: ``"point"`` (its posterior
        mean), ``"draws"`` (``n_draws`` coefficient draws from ``generator``, as
        ``predict`` draws them) or ``"moments"``; ``body`` itself without one."""
        lin = self._linear_mean()
        if lin is None:
            return body
        device = next(self.module_.parameters()).device
        coef = torch.as_tensor(lin.coef, dtype=torch.float64, device=device)
        if form == "draws":
            coef = lin.coefficient_draws(n_draws, generator, torch.float64, device)
        cov = None
        if form == "moments":
            cov = torch.as_tensor(lin.cov, dtype=torch.float64, device=device)
        index = torch.as_tensor(lin.index, device=device)
        return PlusLinearMean(body, index, coef, lin.intercept, cov).eval()

    def _warn_if_unresolved(self) -> None:
        unresolved = float(unresolved_fraction(self.module_))
        if unresolved > _UNRESOLVED_EXPORT:
            warnings.warn(
                f"{100 * unresolved:.1f}% of the gates are unresolved (phi in (0.1, 0.9)): "
                "the exported median model may predict unlike the posterior. Fit longer "
                "(see converged_ and history_.unresolved).",
                UserWarning,
                stacklevel=3,
            )

    def export(self, storage: str = "auto", batch_size: int = 64) -> nn.Sequential:
        """The median model, compacted, as a standard module on the estimator's inputs.

        The module takes what ``predict`` takes, as a tensor: ``X`` of shape
        ``(n, n_features_in_)`` with every column, float32 or float64 (cast inside); it
        keeps the selected columns itself (:func:`svbnn.export.export_compact`: the
        inputs and units that cannot change the output are gone). It returns a
        regressor's predictions in ``y``'s units, ``(n,)``, a Poisson regressor's rates
        ``(n,)``, or a classifier's class probabilities ``(n, n_classes)`` (columns in
        ``classes_`` order). These are the
        median model's (edges with ``phi > 0.5``, weights ``mu``), not the posterior mean
        ``predict`` averages over draws; how far apart they are is measured in the user
        guide ("Exporting a fitted model"). Warns (``UserWarning``) when more than 1% of
        the gates are unresolved.

        Parameters
        ----------
        storage : {"auto", "dense", "sparse"}, default "auto"
            ``"auto"``: one :class:`svbnn.export.CompactMLP`, each layer dense or sparse
            by :func:`svbnn.export.sparse_is_faster`; ``"dense"`` / ``"sparse"``: the
            layered form, ``nn.Linear`` / CSR layers (see
            :func:`svbnn.export.export_compact`).
        batch_size : int, default 64
            The batch size the module will mostly run at (chooses the storage).

        Returns
        -------
        torch.nn.Sequential
            In eval mode, no gradients; ``torch.export`` accepts it (``"auto"``: at any
            batch size); ``torch.jit.script`` accepts the layered form only; for ONNX use
            :func:`svbnn.export.to_dense` of it (as :meth:`export_onnx` does).
        """
        check_is_fitted(self, "module_")
        self._warn_if_unresolved()
        module, _ = export_compact(self.module_, storage=storage, batch_size=batch_size)
        body = self._plus_linear_mean(module, "point")
        return nn.Sequential(*_layers(body), *self._export_head()).eval()

    def export_predictive(
        self, n_samples: int | None = None, return_std: bool = False
    ) -> nn.Sequential:
        """``predict``'s posterior draws as one standard module: the posterior predictive.

        The module holds the ``n_samples`` (default ``n_samples_predict``) weight draws
        ``predict`` / ``predict_proba`` use, batched (:func:`svbnn.export.export_draws`),
        in float64, and averages over them as they do: a regressor's posterior mean in
        ``y``'s units ``(n,)`` (with ``return_std=True``, ``(n, 2)``: the mean and the sd
        of ``predict(X, return_std=True)``, for intervals), a Poisson regressor's mean
        count ``(n,)``, a classifier's predictive probabilities ``(n, n_classes)``. It
        returns their values up to floating-point rounding, on the same inputs as
        :meth:`export`, at the cost of ``n_samples`` dense networks (the inputs no draw
        uses are dropped).
        """
        check_is_fitted(self, "module_")
        head = self._predictive_head(return_std)
        H = self._draws(n_samples)
        model = self._module64()
        assert isinstance(model, SpikeSlabMLP)
        draws: list[list[tuple[Tensor, Tensor | None]]] = []
        # The draws predict makes: the same generator, consumed in the same order (the
        # network's draws, then a linear mean's).
        gen = self._predict_generator()
        with _evaluation(model, gen), forward_mode(model, "sample"):
            for _ in range(H):
                with frozen_sample(model):
                    draws.append([_frozen_weights(layer) for layer in model.layers()])
        body = export_draws(draws, self.activation, int(self.n_features_in_))
        return nn.Sequential(*_layers(self._plus_linear_mean(body, "draws", gen, H)), *head).eval()

    def export_moments(
        self, return_std: bool = False, min_inclusion: float = MOMENT_MIN_INCLUSION
    ) -> nn.Sequential:
        """The posterior predictive as one deterministic pass of moments: a standard module
        about twice the cost of the posterior-mean network.

        Each layer's pre-activations are taken as independent normals with the mean and
        variance they have under the posterior (the local reparameterisation's
        approximation), through ReLU's exact moments (:func:`svbnn.export.export_moments`;
        edges of ``phi <= min_inclusion`` left out). It returns what
        :meth:`export_predictive` returns, on the same inputs: a regressor's predictive
        mean in ``y``'s units ``(n,)`` (with ``return_std=True``, ``(n, 2)``: the mean and
        the predictive sd, noise included), a Poisson regressor's mean rate
        ``exp(m + v / 2)`` ``(n,)``, a classifier's expected softmax ``(n, n_classes)``
        (the unscented transform of the logits' normal, :class:`svbnn.export.SoftmaxOfNormal`).
        Unlike :meth:`export`'s median model it keeps the edges of
        ``min_inclusion < phi <= 0.5`` and the weights' spread; how closely its classes
        agree with ``predict_proba``'s is measured in the user guide ("Exporting for
        deployment"). Needs ``activation`` ``"relu"`` or ``"identity"``.

        Parameters
        ----------
        return_std : bool, default False
            A regressor's predictive sd too (see above).
        min_inclusion : float, default :data:`svbnn.export.MOMENT_MIN_INCLUSION`
            Edges of ``phi`` at most this are left out (:func:`svbnn.export.export_moments`).
        """
        check_is_fitted(self, "module_")
        head = self._moments_head(return_std)
        model = self._module64()
        assert isinstance(model, SpikeSlabMLP)
        body = export_moments(model, int(self.n_features_in_), min_inclusion)
        return nn.Sequential(*_layers(self._plus_linear_mean(body, "moments")), *head).eval()

    def export_onnx(
        self,
        path: str | os.PathLike[str],
        dtype: str = "float64",
        predictive: bool | str = False,
        return_std: bool = False,
    ) -> None:
        """Write :meth:`export`'s module as an ONNX model (needs the ``export`` extra).

        The graph's input ``x`` is ``(batch, n_features_in_)`` of ``dtype`` (all columns,
        as ``predict`` takes them), its output ``y`` :meth:`export`'s. Run it with
        onnxruntime: ``InferenceSession(path).run(None, {"x": X})[0]``.

        Parameters
        ----------
        path : str or path-like
            Output file, written atomically.
        dtype : {"float64", "float32"}, default "float64"
            Element type of the input ``x``.
        predictive : bool or {"draws", "moments"}, default False
            ``True`` or ``"draws"``: write :meth:`export_predictive`'s module
            (``predict``'s posterior draws); ``"moments"``: :meth:`export_moments`'s;
            ``False``: the median model (:meth:`export`).
        return_std : bool, default False
            With a predictive export, a regressor's mean and sd, ``y`` of shape
            ``(batch, 2)`` (see :meth:`export_predictive`).
        """
        if predictive not in (False, True, "draws", "moments"):
            raise ValueError(
                f"predictive must be False, True, 'draws' or 'moments', got {predictive!r}"
            )
        if return_std and predictive is False:
            raise ValueError(
                "return_std=True needs a predictive export (predictive=True, 'draws' or 'moments')"
            )
        if predictive == "moments":
            module = self.export_moments(return_std=return_std)
        elif predictive:
            module = self.export_predictive(return_std=return_std)
        else:
            module = self.export()
        export_onnx(module, path, n_features=int(self.n_features_in_), dtype=dtype)


def _layers(module: nn.Module) -> list[nn.Module]:
    """A ``Sequential``'s layers (an export stays one flat ``Sequential``), else ``[module]``."""
    return list(module) if isinstance(module, nn.Sequential) else [module]


def _frozen_weights(layer: nn.Module) -> tuple[Tensor, Tensor | None]:
    """The weights a layer holds under :func:`~svbnn.nn.frozen_sample`."""
    frozen: tuple[Tensor, Tensor | None] | None = layer.__dict__.get("_frozen")
    if frozen is None:
        raise RuntimeError("no frozen sample on the layer")
    return frozen


_FILL = dict(
    common_parameters=_COMMON_PARAMETERS,
    common_attributes=_COMMON_ATTRIBUTES,
    family_parameters=_SPIKE_SLAB_PARAMETERS,
    family_attributes=_SPIKE_SLAB_ATTRIBUTES,
    warns=_SPIKE_SLAB_WARNS,
)


@_fill_doc(
    **_FILL,
    task_parameters=f"{_REGRESSION_PARAMETERS}\n{_MEAN_FUNCTION_PARAMETER}",
    task_attributes=f"{_REGRESSION_ATTRIBUTES}\n{_MEAN_FUNCTION_ATTRIBUTES}",
)
@dataclass(eq=False, repr=False, kw_only=True)
class SVBNNRegressor(_SpikeSlabFamily, _Regression):
    """Sparse variational BNN regressor with a spike-and-slab prior (Bai, Song & Cheng 2020).

    Fits ``y`` standardised internally (every output is in ``y``'s units) with a learned
    noise level, and stops when the ELBO and the gates have converged. Scale ``X`` in your
    pipeline (e.g. ``StandardScaler``): the prior assumes inputs of unit scale. The
    defaults were chosen on held-out evidence (user guide, "How the defaults were chosen");
    ``kl_weight=0.2`` fits smooth, low-noise tables better, noisy ones worse, and keeps
    more inputs (user guide, "When to change the defaults"). It trains with
    local reparameterisation (``sampler="local"``) at a learning rate of 0.025 over half
    the steps of the other estimators' ``max_iter="auto"`` on a table under 1,600 rows
    (2,000 steps; 160 epochs on larger ones, as theirs): in the same time, lower RMSE
    on most benchmark tables than the paper's Gumbel sampler (0.025 rather than 0.02:
    fewer noise inputs kept and more of the benchmark's targets met; user guide, "The
    regressor's learning rate, measured"). Its KL weight rises over the
    first quarter of the steps (``kl_warmup=0.25``), so the network fits the data before
    the prior prunes it: lower RMSE on 10 of the 13 benchmark tables (user guide, "The
    regressor's KL warm-up, measured"); ``kl_warmup=0.0`` is the exact objective from
    the first step. A second fit (``refit_kl_weight="auto"``) refits the selected inputs
    at KL weight 0.2, on a table of up to ``LARGE_TABLE_ROWS`` (3,000) rows where the
    network fits ``y`` alone (over the whole budget up to 1,600 rows, at most 2,000
    steps on more: ``refit_budget="auto"``), and on any larger table (user guide, "The
    refit on tables of up to 1,600 rows, measured", "The refit on tables of 1,600 to
    3,000 rows, measured" and "The regressor on tables of more than 3,000 rows,
    measured").

    Parameters
    ----------
    {common_parameters}
    {task_parameters}
    {family_parameters}

    Attributes
    ----------
    {family_attributes}
    {task_attributes}
    {common_attributes}

    Warns
    -----
    {warns}
    """

    # Local reparameterisation, larger steps, half the budget, the KL warmed up over the
    # first quarter (the class docstring).
    sampler: str = "local"
    learning_rate_init: float = 0.025
    kl_warmup: float = 0.25
    mean_function: str = "auto"
    # The tempered refit on the selected inputs (the parameter says why).
    refit_kl_weight: float | str | None = "auto"

    def _mean_function(self) -> str:
        _check_choice("mean_function", self.mean_function, list(MEAN_FUNCTIONS))
        return str(self.mean_function)

    def _signal_check_kl(self, n: int, model: nn.Module) -> float | None:
        # refit_kl_weight="auto": the tempered refit of the selected inputs is checked
        # against the training rows' mean on its held-out noise run; one that predicts the
        # held-out rows worse fitted noise, and the first fit replaces it (the parameter
        # says why).
        if self.refit_kl_weight != "auto" or self.screened_features_ is None:
            return None
        return self.kl_weight_ if REFIT_AUTO_KL_WEIGHT < self.kl_weight_ else None


@_fill_doc(
    **_FILL,
    task_parameters=_CLASSIFICATION_PARAMETERS,
    task_attributes=_CLASSIFICATION_ATTRIBUTES,
)
@dataclass(eq=False, repr=False, kw_only=True)
class SVBNNClassifier(_SpikeSlabFamily, _Classification):
    """Sparse variational BNN classifier (categorical likelihood, softmax outputs).

    The parameters are :class:`SVBNNRegressor`'s without ``noise_std`` and with
    ``class_weight``, with the same defaults except ``kl_weight="auto"``: a tempered
    posterior, at KL weight 0.2, which on the benchmark tables gives the accuracy and
    calibration of logistic regression where the exact ELBO (``kl_weight=1``) prunes real
    inputs or collapses (user guide, "How the defaults were chosen"), and at 0.1 on a
    table of fewer than 200 rows (``kl_weight_`` says which): on the benchmark's
    classification tables cut to 82-134 training rows the weight 0.2 pruned real inputs,
    and 0.1 gave a lower log loss on wine, breast cancer and digits and no collapse on the
    generated 2-class problem at 128 rows, but kept noise inputs on the 10-class one; at
    300 rows it kept 7.8 and 9.8 of 10 noise inputs on the generated problems (user
    guide, "The classifier's KL weight on small tables, measured"); and
    ``n_samples_predict=100``:
    a predicted class is the argmax of an average over draws, and with 30 draws it
    differed from that of 1,000 on up to 1.1% of digits' test rows (user guide,
    "Exporting for deployment"). On a table of 500 rows or more
    ``refit_kl_weight="auto"`` selects with a first fit at KL weight 0.35 and predicts
    with a second at ``kl_weight`` on the selected inputs: fewer noise inputs kept and a
    lower log loss on most generated problems, in 1.5-2 times the time
    (``refit_kl_weight``). Scale ``X`` in your pipeline.

    Parameters
    ----------
    {common_parameters}
    {task_parameters}
    {family_parameters}

    Attributes
    ----------
    {task_attributes}
    {family_attributes}
    {common_attributes}

    Warns
    -----
    {warns}
    """

    # A tempered posterior by default for classes, more tempered on small tables (the
    # class docstring says why).
    kl_weight: float | str = "auto"
    n_samples_predict: int = CLASSIFIER_PREDICT_DRAWS
    # The selecting fit at SELECT_KL_WEIGHT on tables of 500 rows and more (the parameter
    # says why).
    refit_kl_weight: float | str | None = "auto"

    def _auto_kl_weight(self, n: int) -> float:
        return SMALL_TABLE_KL_WEIGHT if n < CLASSIFIER_SMALL_ROWS else CLASSIFIER_KL_WEIGHT

    def _first_kl_weight(self, n: int) -> float | None:
        selects = (
            self.refit_kl_weight == "auto"
            and n >= CLASSIFIER_SELECT_ROWS
            and self._kl_weight_for(n) < SELECT_KL_WEIGHT
        )
        return SELECT_KL_WEIGHT if selects else None

    def _refit_kl_weight(self, n: int) -> float | None:
        if self.refit_kl_weight == "auto":
            return None if self._first_kl_weight(n) is None else self._kl_weight_for(n)
        return super()._refit_kl_weight(n)

    def _signal_check_kl(self, n: int, model: nn.Module) -> float | None:
        # refit_kl_weight="auto" with a tempered kl_weight: a final fit at kl_weight on
        # every input (one fit on a table under CLASSIFIER_SELECT_ROWS, or a refit after a
        # selecting fit that kept no input) is checked against the class frequencies on
        # held-out rows; one that predicts them worse fitted noise, and the fit at
        # SELECT_KL_WEIGHT replaces it (the parameter says why). A fit whose posterior
        # reaches no input (no feature_inclusion above 0.5: unlike the selection, this
        # counts the edges of small phi its predictions draw too) fitted no input's noise:
        # not checked.
        if self.refit_kl_weight != "auto" or self.kl_weight_ >= SELECT_KL_WEIGHT:
            return None
        # feature_inclusion_: the model's, set by _fit_module before it asks.
        if not (self.feature_inclusion_ > 0.5).any():
            return None
        # screened_features_: None without a refit (_refit_plan), else the refit's inputs.
        screened = self.screened_features_
        every_input = screened is None or screened.size == self.n_features_in_
        return SELECT_KL_WEIGHT if every_input else None


@_fill_doc(**_FILL, task_attributes=_POISSON_ATTRIBUTES)
@dataclass(eq=False, repr=False, kw_only=True)
class SVBNNPoissonRegressor(_SpikeSlabFamily, _PoissonRegression):
    """Sparse variational BNN for counts: a Poisson likelihood with the log link.

    As scikit-learn's ``PoissonRegressor`` with a spike-and-slab network in place of the
    linear predictor: ``y`` holds non-negative counts (a negative value is an error),
    ``predict`` returns the posterior predictive mean count, ``score`` the fraction of
    Poisson deviance explained (D^2), ``predict_interval`` integer prediction intervals
    for new counts, and ``selected_features_`` the inputs the posterior keeps. The
    parameters are :class:`SVBNNRegressor`'s without ``noise_std``. Scale ``X`` in your
    pipeline. ``export_sparse``'s module outputs the log rate.

    Parameters
    ----------
    {common_parameters}
    {family_parameters}

    Attributes
    ----------
    {task_attributes}
    {family_attributes}
    {common_attributes}

    Warns
    -----
    {warns}
    """
