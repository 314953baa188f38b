"""What the scikit-learn estimators share: argument checks, the fit (a transaction), the
stopping rule, diagnostics and warnings, prediction plumbing
(:class:`_VariationalEstimator`), and the common parameters' descriptions.

Private: the public estimators are in :mod:`svbnn.estimators` and :mod:`svbnn.baselines`;
the task pieces (regression, classification) in ``_estimator_tasks``.
"""

from __future__ import annotations

import copy
import inspect
import logging
import math
import os
import warnings
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, NamedTuple, TypeVar, cast

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator
from sklearn.exceptions import ConvergenceWarning
from sklearn.model_selection import train_test_split
from sklearn.utils.validation import _check_sample_weight, check_is_fitted, validate_data
from torch import Tensor, nn

from ._device import check_device
from ._engine import native as _native
from ._engine.kernels import AUTO_MIN_NUMEL, backend_scope
from ._estimator_checks import (
    _DTYPES,
    _KERNEL_BACKENDS,
    _UNRESOLVED_EXPORT,
    CollapseWarning,
    InputScaleWarning,
    _check_choice,
    _check_int,
    _check_numeric,
    _check_real,
    _diverged_names,
    _fitted_attributes,
    _hidden_sizes,
    _is_compile_error,
    _layer_pairs,
    _off_scale_message,
    _reaches_output,
    _SeedSource,
    _to_numpy,
)
from ._linear_mean import LinearMean
from .convergence import MIN_STEPS, ConvergenceMonitor, default_max_steps
from .nn.base import ACTIVATIONS, set_generator
from .objectives import RowWeightedLikelihood
from .training import History, LikelihoodLike, LRSchedule, Optimizer, check_kl_weight, train

logger = logging.getLogger("svbnn.estimators")  # the estimators' messages, one logger

# Fitted module -> its float64 copy for prediction (see _VariationalEstimator._module64).
_MODULE64: weakref.WeakKeyDictionary[nn.Module, nn.Module] = weakref.WeakKeyDictionary()


_COMMON_PARAMETERS = """\
hidden_layer_sizes : int or tuple of int, default (50,)
    Hidden widths; an int is one hidden layer, as in scikit-learn's MLP.
activation : {"relu", "tanh", "sigmoid", "logistic", "identity"}, default "relu"
batch_size : int, default 128
learning_rate_init : float, default 0.01 (:class:`~svbnn.SVBNNRegressor`: 0.025)
    The optimiser's learning rate.
learning_rate : {"cosine", "constant"}, default "cosine"
    Its schedule over the ``max_iter`` budget (:func:`svbnn.training.lr_factor`):
    ``"cosine"`` holds ``learning_rate_init`` for the first half and then lowers it to 1%
    along half a cosine, so a fit ends settled at the end of its budget; ``"constant"``
    keeps it (the paper's runs).
max_iter : "auto" or int, default "auto"
    Upper bound on the epochs. ``"auto"``: 4,000 optimiser steps, or 160 epochs where
    that is more, up to 20,000 steps, and at least 20 epochs
    (:func:`svbnn.convergence.default_max_steps`); under ``sampler="local"``, whose
    gates move with less noise (the regressor's default, at 2.5 times the learning
    rate), 2,000 steps or 160 epochs where that is more: half the budget on a table
    under 1,600 rows, the same from 3,200.
tol : float or None, default 1e-4
    Stopping rule (:class:`svbnn.convergence.ConvergenceMonitor`): stop when the
    per-datum loss, averaged over periods of at least 100 steps, has not improved by
    ``tol`` for ``n_iter_no_change`` periods and (spike-and-slab networks) at most 0.1% of
    the gates crossed 0.5 in the last period. ``None`` trains exactly ``max_iter`` epochs
    (no warning; with an int ``max_iter``, the paper's fixed number of epochs).
n_iter_no_change : int, default 10
kl_weight : float or "auto", default 1.0 (:class:`~svbnn.SVBNNClassifier`: "auto")
    ``w`` in ``nll + w KL / n``, in ``(0, 1e30]``; 1 is the exact ELBO. Below 1, a tempered
    posterior: the classifier's default, where it gives the accuracy and calibration of
    the usual tools; a regressor under it keeps more inputs, and its noise level is also
    fitted on held-out rows, which doubles the fit time (``noise_std``; user guide, "When
    to change the defaults"). ``"auto"``: the family's weight for the table's size
    (``kl_weight_``): the classifier's 0.1 on a table of fewer than
    ``CLASSIFIER_SMALL_ROWS`` (200) rows and 0.2 from there (its parameter says why);
    the regressors' 1.0.
kl_warmup : float, default 0.0 (:class:`~svbnn.SVBNNRegressor`: 0.25)
    The fraction of the ``max_iter`` budget's steps, in ``[0, 1)``, over which the KL
    weight rises linearly from near 0 to ``kl_weight`` (``train(kl_warmup=...)``): the
    network fits the data before the prior prunes it. The stopping rule waits for its end.
    On the regressor's local sampler, lower RMSE on most benchmark tables and a few more
    noise inputs kept; on the Gumbel sampler, more noise inputs kept (user guide, "When
    to change the defaults").
optimizer : {"adam", "rmsprop", "sgd"}, default "adam"
n_init : int, default 1
    Fits from this many initialisations (each its own seed from ``random_state``) on all
    rows; the one whose training objective ended lowest (``loss_curve_[-1]``) is kept, as
    scikit-learn's ``KMeans`` keeps its best ``n_init``. ``n_init`` times the fit time. A
    fit can settle in a worse optimum (on smooth, low-noise tables its test error varies
    several-fold between seeds), and the training objective tells which (user guide,
    "When to change the defaults").
n_mc_train : int, default 1
    Monte Carlo draws ``K`` per step.
n_samples_predict : int, default 30
    ``H`` draws for ``predict`` (the classifiers: default 100).
dtype : {"float32", "float64"}, default "float32"
    Training dtype. Predictions run in float64 on a copy of the network whatever this
    is, so a row's prediction depends on the other rows of ``X`` and their order only
    through rounding (about 1e-16 relative).
kernel_backend : {"auto", "compiled", "eager", "native"}, default "auto"
    The spike-and-slab kernels inside ``fit`` (for this fit's thread only: no other fit
    or thread sees it; the baselines' networks do not use them; see
    :class:`svbnn.KernelBackend`): ``"auto"`` compiles them with ``torch.compile`` for
    networks of at least ``AUTO_MIN_NUMEL`` parameters and fits smaller ones with
    ``"native"``: svbnn's C++ loops (built once per machine, never a compile), which
    run the whole training step, at any thread count. Where no C++ compiler is found,
    small networks run eagerly, and where compiling fails the fit runs eagerly; one
    message is logged. A seed reproduces a fit on one machine and backend.
random_state : int, RandomState, Generator or None
    Source of the torch seeds for training and prediction (an int in ``[0, 2**32)``
    seeds a RandomState, as in scikit-learn).
device : str, default "cpu"
verbose : bool, default False
    Progress bar during fit."""

_COMMON_ATTRIBUTES = """\
converged_ : bool
    Whether the stopping rule fired before the budget ran out or, under
    ``learning_rate="cosine"``, the budget ran out with the gates settled (at most 0.1%
    crossed 0.5 in the last period of at least 100 steps); it says only that the
    objective settled, not that the fit is useful (a collapsed fit can have converged:
    see ``collapsed_``).
collapsed_ : bool
    Whether the fit raised a ``CollapseWarning`` (a model that explains nothing: a
    regressor's training R^2 at most 0.02, a classifier that predicts one class for at
    least 99% of the training rows while another class has at least 10% of them, a
    posterior predictive training log-loss at least 0.98 of the class frequencies'
    entropy, or no input reaching the output).
kl_weight_ : float
    ``kl_weight`` as the fit used it, ``"auto"`` resolved for the number of rows of
    positive weight (a refit's own weight is ``refit_kl_weight``'s).
held_out_gain_, held_out_gain_se_ : float or None
    The check of a tempered fit against the family's baseline on held-out rows, made
    with ``refit_kl_weight="auto"``: how much better a run of the fit on 80% of the rows
    predicts the other 20% than the baseline, fitted on the same 80%, does (nats per
    held-out row, weighted as the fit), and its standard error over those rows. Where
    the gain is below 0 by at least its standard error (``held_out_gain_ +
    held_out_gain_se_ <= 0``), the fit predicted new rows worse than the baseline (it
    fitted noise) and was replaced; a gain below 0 by less is within the held-out rows'
    sampling error, and the fit is kept. A classifier's check is made where it fits at a
    tempered ``kl_weight`` (below 0.35) on every input (a table under 500 rows, or a
    selecting fit that kept no input), by a run over a quarter of the fit's budget,
    against the class frequencies (the difference of their log-losses); the fit at KL
    weight 0.35 replaces it (the selecting fit, where one was made). A regressor's is
    made where it refits the selected inputs at a KL weight below ``kl_weight`` with a
    learned noise level, on the refit's held-out noise run (``noise_std_held_out_``),
    against the mean of ``y`` (half the log of the ratio of their mean squared errors);
    the first fit replaces the refit. ``None`` where no check was made.
fit_warnings_ : list of str
    Every warning the last ``fit`` raised, as ``"Category: message"`` (empty for a clean
    fit).
n_iter_ : int
    Epochs run.
history_ : History
    Per epoch: loss, nll, kl (per datum); spike-and-slab networks also sparsity and
    unresolved."""

_T = TypeVar("_T", bound=type)
_R = TypeVar("_R")
_S = TypeVar("_S", bound="_VariationalEstimator")


HELD_OUT = 0.2
"""The fraction of the rows held out where a fit chooses or measures on held-out rows
(``prior_inclusion="cv"``; a tempered regressor's noise level; a classifier's check of
its fit against the class frequencies)."""
SIGNAL_SHARE = 0.25
"""The share of the final fit's budget that the run of it checked on held-out rows gets
where the fit makes no held-out run of its own (:meth:`_VariationalEstimator._fit_module`'s
``held_out``)."""


class _HeldOutScore(NamedTuple):
    """What a task's ``held_out`` callback (:meth:`_VariationalEstimator._fit_module`)
    says of a run of the final fit: ``gain``, how much better it predicts the held-out
    rows than the task's baseline (nats per row); ``se``, the standard error of ``gain``
    over those rows; ``kept``, what the task keeps of the run (``None``: nothing)."""

    gain: float
    se: float
    kept: Any = None


def _mean_and_se(x: NDArray[Any], w: NDArray[Any] | None) -> tuple[float, float]:
    """The mean of ``x`` ``(m,)`` weighted by ``w`` (``None``: equal weights) and its
    standard error, ``sqrt(sum w^2 (x - mean)^2) / sum w`` (``sd / sqrt(m)`` for equal
    weights)."""
    wt = np.ones(x.size) if w is None else np.asarray(w, dtype=np.float64)
    mean = float(np.sum(wt * x) / wt.sum())
    return mean, float(np.sqrt(np.sum(wt**2 * (x - mean) ** 2)) / wt.sum())


def _final_loss(history: History) -> float:
    """A fit's training objective at its last epoch (per datum; ``inf`` where it is
    missing or not finite), by which ``n_init`` compares fits."""
    last = float(history.loss[-1]) if history.loss else math.inf
    return last if math.isfinite(last) else math.inf


def _held_out_rows(target: Tensor, seed: int) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Rows to fit on and rows held out (a :data:`HELD_OUT` fraction, at least one each),
    stratified by class for class labels where every class has two rows or more."""
    n = target.shape[0]
    labels = target.cpu().numpy() if not target.is_floating_point() else None
    if labels is not None and np.bincount(labels).min(initial=n) < 2:
        labels = None
    n_held = min(max(1, round(HELD_OUT * n)), n - 1)
    if labels is not None and n_held < len(np.unique(labels)):
        labels = None
    fit, held = train_test_split(np.arange(n), test_size=n_held, random_state=seed, stratify=labels)
    return np.sort(fit), np.sort(held)


def _subset_weights(
    weights: NDArray[np.float64] | None, rows: NDArray[np.intp]
) -> NDArray[np.float64] | None:
    """The row weights of a fit on ``rows`` alone: renormalised to mean 1 there, as
    :func:`_row_weights` makes them for a whole fit (``None``: unweighted)."""
    if weights is None:
        return None
    part = weights[rows]
    return part / part.mean()


def _fill_doc(**pieces: str) -> Callable[[_T], _T]:
    """Class decorator: replace each ``{name}`` line of the docstring by ``pieces[name]``
    (the shared parameter and attribute descriptions, written once)."""

    def fill(cls: _T) -> _T:
        doc = inspect.cleandoc(cls.__doc__ or "")
        for name, text in pieces.items():
            doc = doc.replace("{" + name + "}", text)
        cls.__doc__ = doc
        return cls

    return fill


@dataclass(eq=False, repr=False, kw_only=True)
class _VariationalEstimator(BaseEstimator, ABC):
    """What every variational estimator shares (not for direct use).

    The common parameters (their descriptions: ``_COMMON_PARAMETERS``) are declared here
    once, as dataclass fields: each public estimator is a dataclass too, so its
    ``__init__`` has an explicit signature (what ``get_params`` reads) and only stores
    the arguments. A task piece (regression, classification) adds the likelihood, ``fit``
    and the predictions; a family piece adds the network (:meth:`_build_module`), its own
    parameters and their checks, and the fitted summaries (DESIGN section 3.3).
    """

    hidden_layer_sizes: int | tuple[int, ...] = (50,)
    activation: str = "relu"
    batch_size: int = 128
    learning_rate_init: float = 0.01
    learning_rate: str = "cosine"
    max_iter: int | str = "auto"
    tol: float | None = 1e-4
    n_iter_no_change: int = 10
    kl_weight: float | str = 1.0
    kl_warmup: float = 0.0
    optimizer: str = "adam"
    n_init: int = 1
    n_mc_train: int = 1
    n_samples_predict: int = 30
    dtype: str = "float32"
    kernel_backend: str = "auto"
    random_state: int | np.random.RandomState | np.random.Generator | None = None
    device: str = "cpu"
    verbose: bool = False

    # -- the family's part -----------------------------------------------------------------
    @abstractmethod
    def _check_family_params(self) -> None:
        """Check the family's own parameters (raise; set nothing)."""

    @abstractmethod
    def _build_module(self, n_features: int, n_out: int, gen: torch.Generator) -> nn.Module:
        """The network to fit."""

    @abstractmethod
    def _summarize(self, model: nn.Module) -> None:
        """Set the family's fitted summaries of the posterior."""

    @abstractmethod
    def _kept_weight_masks(self) -> list[NDArray[np.bool_]]:
        """Per layer, the weights the fitted network keeps (bool, ``(out, in)``)."""

    def _prepare(self, n: int, p: int, n_out: int) -> list[Any]:
        """Settings that depend on the data size; returns extra training callbacks.

        None by default (the spike-and-slab family sets its prior inclusion here).
        """
        return []

    def _in_user_units(self, module: nn.Module) -> nn.Module:
        """``module`` with outputs in the units of ``y`` (a regressor rescales)."""
        return module

    # -- saving ---------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> None:
        """Save the fitted estimator to a weights-only file (:func:`svbnn.save_estimator`).

        The file holds the parameters (JSON) and the posterior's tensors, no pickle:
        :meth:`load` runs no code from it, so a file from anyone can be loaded.

        Parameters
        ----------
        path : str or PathLike
            The file, written atomically (a reader never sees half of it).
        """
        from ._estimator_io import save_estimator

        save_estimator(self, path)

    @classmethod
    def load(cls: type[_S], path: str | os.PathLike[str], *, device: str | None = None) -> _S:
        """An estimator saved by :meth:`save`, fitted; it predicts exactly as when saved.

        Parameters
        ----------
        path : str or PathLike
            The file.
        device : str, optional
            Where to put the network (default: the ``device`` it was fitted with).

        Returns
        -------
        estimator
            An instance of this class.

        Raises
        ------
        svbnn.EstimatorFileError
            (A ``ValueError``.) The file is missing, damaged, not an estimator file, holds
            more than weights, or holds another class; the message names the file.
        """
        from ._estimator_io import load_estimator

        est: _S = load_estimator(path, device=device, expected=cls)
        return est

    def _export_head(self) -> list[nn.Module]:
        """The layers an exported network ends with (the task's)."""
        raise NotImplementedError

    def _predictive_head(self, return_std: bool = False) -> list[nn.Module]:
        """The layers after an exported batch of draws ``(K, n, out)`` (the task's)."""
        raise NotImplementedError

    def _moments_head(self, return_std: bool = False) -> list[nn.Module]:
        """The layers after an exported network's output moments ``(2, n, out)`` (the
        task's)."""
        raise NotImplementedError

    # -- helpers -------------------------------------------------------------------------
    def _check_params(self) -> None:
        """Validate every hyperparameter; sets nothing, so a refusal leaves ``self`` as it was."""
        _hidden_sizes(self.hidden_layer_sizes)
        _check_choice("activation", self.activation, sorted(ACTIVATIONS))
        _check_choice("dtype", self.dtype, sorted(_DTYPES))
        _check_choice("optimizer", self.optimizer, [o.value for o in Optimizer])
        _check_choice("learning_rate", self.learning_rate, [s.value for s in LRSchedule])
        _check_int("batch_size", self.batch_size, 1)
        if not (isinstance(self.max_iter, str) and self.max_iter == "auto"):
            # At least one epoch: 0 would train one all the same (a fit runs its first).
            _check_int("max_iter", self.max_iter, 1)
        _check_real("tol", self.tol, low=0.0, low_inclusive=True, allow_none=True)
        _check_int("n_iter_no_change", self.n_iter_no_change, 1)
        if isinstance(self.kl_weight, str):
            if self.kl_weight != "auto":
                raise TypeError(
                    f'kl_weight must be a real number or "auto", got {self.kl_weight!r} (str)'
                )
        else:
            _check_real("kl_weight", self.kl_weight, low=0.0)
            check_kl_weight(self.kl_weight)
        _check_real("kl_warmup", self.kl_warmup, low=0.0, high=1.0, low_inclusive=True)
        _check_choice("kernel_backend", self.kernel_backend, _KERNEL_BACKENDS)
        _check_int("n_init", self.n_init, 1)
        _check_int("n_mc_train", self.n_mc_train, 1)
        _check_int("n_samples_predict", self.n_samples_predict, 1)
        _check_real("learning_rate_init", self.learning_rate_init, low=0.0)
        _SeedSource(self.random_state)
        check_device(self.device)
        self._check_family_params()

    def _tensor(self, a: NDArray[Any], name: str, *, fitted: bool = False) -> Tensor:
        """``a`` as a tensor of the parameters' dtype and device.

        ``fitted``: those of ``module_`` rather than of the current ``dtype``/``device``
        settings, which ``set_params`` may have changed since the fit.
        """
        if fitted:
            # Predictions run in float64 whatever the training dtype (see _module64).
            dtype, device = torch.float64, next(self.module_.parameters()).device
        else:
            dtype, device = _DTYPES[self.dtype], torch.device(self.device)
        arr = np.asarray(a)
        # Finite float64 data can overflow to inf in float32: refuse rather than fit inf.
        # (max and -min: no |arr| temporary, a sizeable cost on MNIST-sized data; float32
        # data cannot overflow.)
        if (
            dtype == torch.float32
            and arr.dtype != np.float32
            and arr.size
            and max(float(arr.max()), -float(arr.min())) > np.finfo(np.float32).max
        ):
            raise ValueError(
                f"{name} has values beyond the float32 range (max |{name}| = "
                f"{np.abs(arr).max():.3g}); use dtype='float64' or rescale {name}"
            )
        return torch.tensor(arr, dtype=dtype, device=device)

    @contextmanager
    def _fit_transaction(self) -> Iterator[None]:
        """Keep the previous fitted state, untouched, when a (re)fit fails at any point.

        Parameters and data are validated before anything is set, but validate_data itself
        sets ``n_features_in_`` and training can fail midway (a diverging loss, Ctrl-C):
        restoring the snapshot means the estimator is never a mix of two fits.
        """
        saved = _fitted_attributes(self)
        try:
            yield
        except BaseException:
            for k in _fitted_attributes(self):
                delattr(self, k)
            self.__dict__.update(saved)
            raise

    def _epoch_budget(self, n: int) -> int:
        """``max_iter`` in epochs for a run on ``n`` rows; ``"auto"``:
        :func:`svbnn.convergence.default_max_steps` with the family's floor of steps."""
        if isinstance(self.max_iter, str):
            batch = min(int(self.batch_size), n)
            return default_max_steps(n, batch, self._min_steps()) // self._steps_per_epoch(n)
        return int(self.max_iter)

    def _steps_per_epoch(self, n: int) -> int:
        """Minibatch steps in an epoch over ``n`` rows (``min(batch_size, n)`` a step)."""
        return math.ceil(n / min(int(self.batch_size), n))

    def _min_steps(self) -> int:
        """The floor of steps of ``max_iter="auto"``'s budget (``min_steps`` of
        :func:`~svbnn.convergence.default_max_steps`)."""
        return MIN_STEPS

    def _advise_tempering(self) -> bool:
        """Whether a collapsed fit's warning names ``kl_weight=0.2``: not for a fit
        already tempered that far (the classifier's default)."""
        return self.kl_weight_ > 0.2

    def _kl_weight_for(self, n: int) -> float:
        """``kl_weight`` for a fit on ``n`` rows, ``"auto"`` resolved
        (:meth:`_auto_kl_weight`)."""
        if isinstance(self.kl_weight, str):
            return self._auto_kl_weight(n)
        return float(self.kl_weight)

    def _auto_kl_weight(self, n: int) -> float:
        """``kl_weight="auto"``'s weight on ``n`` rows (the base's: 1.0, the exact ELBO)."""
        return 1.0

    def _backend_for(self, n_params: int) -> str:
        """The kernel backend of this fit.

        ``"auto"`` compiles only networks of at least ``AUTO_MIN_NUMEL`` parameters: on a
        small one the compiled whole-network step saves about 0.3 ms, while compiling it
        costs 30 s to minutes on first use (measured on the 2-core development machine,
        1 thread: 4.5 minutes under load for a 16-50-1 network), which a fit of a
        few thousand steps never earns back. A small network is fitted by the native
        loops instead where they compile (seconds, once per machine; a fit in 0.64-0.79 of
        the eager kernels' time, ``benchmarks.small_fits``), else eagerly.
        """
        choice = self.kernel_backend
        if choice == "auto" and n_params < AUTO_MIN_NUMEL:
            # The loops serve float32 on the CPU; elsewhere native is eager, so the library
            # need not compile.
            cpu32 = torch.device(self.device).type == "cpu" and self.dtype == "float32"
            return "native" if cpu32 and _native.available() else "eager"
        return str(choice)

    def _fit_module(
        self,
        X: NDArray[Any],
        target: Tensor,
        n_out: int,
        make_likelihood: Any,
        seeds: _SeedSource,
        weights: NDArray[Any] | None = None,
        held_out: Callable[[nn.Module, NDArray[np.intp], NDArray[np.intp], int], _HeldOutScore]
        | None = None,
        held_out_share: Callable[[float], float | None] = lambda kl_weight: None,
        refit: bool = True,
    ) -> tuple[nn.Module, Any]:
        """Train; sets the fitted attributes and returns the likelihood as fitted and what
        ``held_out`` said of the model's held-out run (``None`` without one).

        ``make_likelihood()`` builds a fresh likelihood (one with a learnable noise level
        is trained with the network; ``make_likelihood(R)`` one for ``R`` replicates).
        ``weights``: per row, positive and of mean 1
        (:func:`_row_weights`), the weight of its likelihood term; ``None`` weighs every
        row alike (and keeps the model's fused step). The final fit is the refit on the
        selected inputs where the family makes one (:meth:`_refit_plan`) and ``refit``;
        without ``refit`` it is the first fit.

        ``held_out``, when given, on 10 rows or more: the final fit is run a second time
        on the rows that :func:`_held_out_rows` keeps, with a seed of its own drawn after
        the prediction seed, over ``held_out_share(kl_weight)`` of its budget
        (``kl_weight``: the final fit's); where that is ``None``, only where
        :meth:`_signal_check_kl` names a KL weight, over ``SIGNAL_SHARE`` of it.
        ``held_out(network, fit_rows, held_rows, seed)`` scores the run
        (:class:`_HeldOutScore`: its gain over the family's baseline on the held-out
        rows, the gain's standard error there, and what the family keeps of it; the
        fitted attributes are the fit on all rows'). Where :meth:`_signal_check_kl`
        names a KL weight, the gain is ``held_out_gain_``; where it is below 0 by at
        least its standard error, the final fit predicted new rows worse than the
        baseline (it fitted noise) and is replaced by one at that KL weight on every
        input (the first fit where it is one), whose own held-out run, where
        ``held_out_share`` gives it one, is the one returned.
        """
        n, p = X.shape
        self.fit_warnings_: list[str] = []
        self.collapsed_ = False
        self.kl_weight_ = self._kl_weight_for(n)
        Xt = self._tensor(X, "X")
        seed = seeds.seed()
        extra_callbacks = self._prepare(n, p, n_out)
        n_params = sum((a + 1) * b for a, b in _layer_pairs(p, self.hidden_layer_sizes, n_out))
        kernels = self._backend_for(n_params)
        start = None
        if self._held_out_choice(n):
            # Its own seed, drawn after the fit's: the fit's seed is what it was without it.
            start = self._choose_on_held_out(
                Xt, target, n_out, make_likelihood, weights, seeds.seed(), kernels
            )

        def fit_on(
            rows: NDArray[np.intp] | None,
            fit_seed: int,
            start: Any = None,
            share: float = 1.0,
            kl_weight: float | None = None,
        ) -> tuple[nn.Module, nn.Module, History, ConvergenceMonitor]:
            """This fit on ``rows`` (``None``: all; a subset's weights renormalised), over
            ``share`` of its epoch budget, at ``kl_weight`` (``None``: the estimator's)."""
            Xr, yr = (Xt, target) if rows is None else (Xt[rows], target[rows])
            wr = weights if rows is None else _subset_weights(weights, rows)
            budget = max(round(self._epoch_budget(yr.shape[0]) * share), 1)
            return _run_falling_back(
                lambda k: self._train(
                    lambda gen: self._build_module(p, n_out, gen),
                    make_likelihood,
                    Xr,
                    yr,
                    wr,
                    budget,
                    extra_callbacks,
                    fit_seed,
                    k,
                    start,
                    kl_weight=kl_weight,
                ),
                kernels,
            )

        epochs = self._epoch_budget(n)
        first_kl = self._first_kl_weight(n)
        model, lik, history, monitor = fit_on(None, seed, start, kl_weight=first_kl)
        # n_init > 1: fits from more seeds, drawn after the first's (n_init = 1 draws none,
        # so its fit and predictions are what they were without the option); the lowest
        # final training objective is kept, a diverged (non-finite) one never.
        for _ in range(int(self.n_init) - 1):
            other = fit_on(None, seeds.seed(), start, kl_weight=first_kl)
            if _final_loss(other[2]) < _final_loss(history):
                model, lik, history, monitor = other
        final_kl, final_share = self.kl_weight_, 1.0
        first_fit, first_start = (model, lik, history, monitor), start
        plan = self._refit_plan(
            model, n, n_out, start, refit, lambda: self._explains_nothing(model, X, target)
        )
        if plan is not None:
            # Its own seed, drawn after the first fit's (and n_init's).
            start, final_kl, final_share = plan
            model, lik, history, monitor = fit_on(None, seeds.seed(), start, final_share, final_kl)
            epochs = max(round(epochs * final_share), 1)
        predict_seed = seeds.seed()
        self._set_fit(model, history, monitor, epochs, predict_seed)
        self.held_out_gain_: float | None = None
        self.held_out_gain_se_: float | None = None
        check_kl = self._signal_check_kl(n, model) if refit else None
        share = held_out_share(final_kl)
        if check_kl is not None and share is None:
            share = SIGNAL_SHARE
        if held_out is None or share is None or n < 10:
            return lik, None
        scorer = held_out

        def held_out_run(
            run_start: Any, run_share: float, kl_weight: float
        ) -> tuple[_HeldOutScore, int]:
            """A fit at ``kl_weight`` from ``run_start`` on the rows :func:`_held_out_rows`
            keeps, over ``run_share`` of the budget, with a seed of its own; ``held_out``'s
            score of it and the number of held-out rows."""
            held_seed = seeds.seed()
            fit_rows, held = _held_out_rows(target, held_seed)
            part = fit_on(fit_rows, held_seed, run_start, run_share, kl_weight)[0]
            set_generator(part, None)
            return scorer(part, fit_rows, held, held_seed), held.size

        # The run's seeds are drawn after the prediction seed: a fit that passes the check
        # is the one made without it, and predicts as it. Started as the final fit only
        # where that is a refit (a "cv" start was chosen with other rows held out).
        run_start = start if plan is not None else None
        score, n_held = held_out_run(run_start, share * final_share, final_kl)
        if check_kl is None:
            return lik, score.kept
        self.held_out_gain_, self.held_out_gain_se_ = score.gain, score.se
        # Worse than the baseline by at least the held-out rows' sampling error: a few
        # dozen rows can put a refit that carries signal a little below it.
        noise = score.gain + score.se <= 0
        logger.info(
            "held-out check of the fit at KL weight %g: gain %.3g nats a row (standard "
            "error %.3g, %d rows) over the baseline: %s",
            final_kl,
            score.gain,
            score.se,
            n_held,
            f"replaced by the fit at KL weight {check_kl:g}" if noise else "kept",
        )
        if not noise:
            return lik, score.kept
        if (self.kl_weight_ if first_kl is None else first_kl) == check_kl:
            # The first fit (at check_kl, on every input) is the model.
            model, lik, history, monitor = first_fit
        else:
            model, lik, history, monitor = fit_on(
                None, seeds.seed(), first_start, kl_weight=check_kl
            )
        self.screened_features_: NDArray[np.intp] | None = None
        self._prior_for_inputs(n, p, n_out)
        self._set_fit(model, history, monitor, self._epoch_budget(n), predict_seed)
        share = held_out_share(check_kl)
        return lik, None if share is None else held_out_run(None, share, check_kl)[0].kept

    def _set_fit(
        self,
        model: nn.Module,
        history: History,
        monitor: ConvergenceMonitor,
        epochs: int,
        predict_seed: int,
    ) -> None:
        """Set the fitted attributes of ``model``, trained with ``history`` and stopped by
        ``monitor`` within a budget of ``epochs``; it predicts from ``predict_seed``."""
        # Generators are process-local state: keep the fitted estimator picklable.
        set_generator(model, None)
        self.module_ = model
        self.history_: History = history
        self.n_iter_ = len(history.epoch)
        # Under the cosine schedule the budget is the planned end: the rate has fallen to 1%,
        # and the fit is done when its gates have stopped crossing 0.5.
        scheduled_end = (
            self.learning_rate == LRSchedule.COSINE.value
            and self.n_iter_ >= epochs
            and monitor.gates_stable
        )
        self.converged_ = bool(monitor.converged or scheduled_end)
        self._budget_exhausted_ = (
            self.tol is not None and not self.converged_ and self.n_iter_ >= epochs
        )
        self.loss_curve_ = list(history.loss)
        self._predict_seed_ = predict_seed
        self._summarize(model)

    def _train(
        self,
        build: Callable[[torch.Generator], nn.Module],
        make_likelihood: Callable[[], nn.Module],
        X: Tensor,
        target: Tensor,
        weights: NDArray[Any] | None,
        epochs: int,
        extra_callbacks: list[Any],
        seed: int,
        kernels: str,
        start: Callable[[nn.Module, nn.Module], None] | None = None,
        gate_tol: float = 1e-3,
        kl_weight: float | None = None,
    ) -> tuple[nn.Module, nn.Module, History, ConvergenceMonitor]:
        """One training run: ``build(generator)`` and ``make_likelihood()`` give a fresh
        network and likelihood (``start(network, likelihood)``, when given, sets their
        starting values); ``X`` ``(n, p)`` or ``(R, n, p)`` for a replicated network,
        ``target`` and ``weights`` per row. Returns the trained network, the likelihood,
        the history and the stopping rule (``gate_tol``: its bound on the gates that
        cross 0.5 in a period, :class:`~svbnn.convergence.ConvergenceMonitor`);
        ``kl_weight``: the KL's weight (``None``: the estimator's)."""
        n = X.shape[-2]
        batch = min(int(self.batch_size), n)
        tol = self.tol
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        model = build(gen)
        lik = make_likelihood().to(self.device)
        if start is not None:
            start(model, lik)
        fit_lik, fit_target = cast(LikelihoodLike, lik), target
        if weights is not None:
            fit_lik = RowWeightedLikelihood(lik)
            w = self._tensor(weights, "sample_weight")
            if target.dim() > w.dim():  # replicated: (R, n) targets, (n,) weights
                w = w.expand(target.shape)
            fit_target = torch.stack([target.to(w.dtype), w], dim=-1)
        n_batches = self._steps_per_epoch(n)
        warmup = round(float(self.kl_warmup) * epochs * n_batches)
        monitor = ConvergenceMonitor(
            n_batches,
            tol=0.0 if tol is None else float(tol),
            n_iter_no_change=int(self.n_iter_no_change),
            gate_tol=gate_tol,
            enabled=tol is not None,
            warmup_steps=warmup,
        )
        with backend_scope(kernels), _diverged_names(self):
            history = train(
                model,
                X,
                fit_target,
                fit_lik,
                n_mc=int(self.n_mc_train),
                kl_weight=self.kl_weight_ if kl_weight is None else kl_weight,
                kl_warmup=warmup,
                epochs=epochs,
                batch_size=batch,
                lr=float(self.learning_rate_init),
                optimizer=self.optimizer,
                lr_schedule=self.learning_rate,
                generator=gen,
                verbose=bool(self.verbose),
                callbacks=[*extra_callbacks, monitor],
                track_sparsity=True,
                # The task's fit checks divergence on its own predictions and names the
                # estimator's parameters (learning_rate_init, not lr).
                warn_divergence=False,
            )
        return model, lik, history, monitor

    def _refit_plan(
        self,
        model: nn.Module,
        n: int,
        n_out: int,
        start: Callable[[nn.Module, nn.Module], None] | None,
        refit: bool = True,
        explains_nothing: Callable[[], bool] = lambda: False,
    ) -> tuple[Callable[[nn.Module, nn.Module], None], float, float] | None:
        """A second fit after the fit of ``model`` on ``n`` rows (``start``: that fit's
        starting point; ``explains_nothing()``: :meth:`_explains_nothing` of it), on all
        rows: its starting point, KL weight and share of the budget; or ``None`` (the
        default, and always without ``refit``), no second fit."""
        return None

    def _prior_for_inputs(self, n: int, p: int, n_out: int) -> None:
        """Set the prior of a network on ``p`` of the inputs, fitted on ``n`` rows, where
        it depends on them (the base's: it does not)."""

    def _explains_nothing(self, model: nn.Module, X: NDArray[Any], target: Tensor) -> bool:
        """Whether ``model``, fitted to ``target`` on the rows ``X``, explains nothing of
        it by the task's measure (the base's: never)."""
        return False

    def _first_kl_weight(self, n: int) -> float | None:
        """The first fit's KL weight on ``n`` rows (``None``, the base's: ``kl_weight``)."""
        return None

    def _signal_check_kl(self, n: int, model: nn.Module) -> float | None:
        """The KL weight of the fit that replaces ``model``, the final fit on ``n`` rows,
        where its run on part of the rows predicts the held-out rows worse than the
        family's baseline by at least the gain's standard error (:meth:`_fit_module`'s
        ``held_out``); ``None``, the base's: no check."""
        return None

    def _small_table_refit(self, n: int) -> bool:
        """Whether the refit on ``n`` rows is one that a regressor makes only for a network
        fitted to ``y`` alone (not on a linear mean's residuals): ``refit_kl_weight="auto"``
        on a table of up to ``LARGE_TABLE_ROWS`` rows (base: no refit, ``False``)."""
        return False

    def _held_out_choice(self, n: int) -> bool:
        """Whether the family chooses a setting on held-out rows before a fit on ``n``
        rows (see :meth:`_choose_on_held_out`)."""
        return False

    def _choose_on_held_out(
        self,
        X: Tensor,
        target: Tensor,
        n_out: int,
        make_likelihood: Callable[..., nn.Module],
        weights: NDArray[Any] | None,
        seed: int,
        kernels: str,
    ) -> Callable[[nn.Module, nn.Module], None] | None:
        """Set the family's held-out choice (only called when :meth:`_held_out_choice`;
        ``kernels``: the fit's kernel backend); returns the fit's starting point (see
        :meth:`_train`) or ``None``."""
        raise NotImplementedError

    def _warn(self, message: str, category: type[Warning]) -> None:
        """Raise ``message`` as ``category`` for the caller of ``fit`` and record it in
        ``fit_warnings_``. Called from a ``_warn_if_*`` method called from ``fit``."""
        self.fit_warnings_.append(f"{category.__name__}: {message}")
        warnings.warn(message, category, stacklevel=4)

    def _warn_if_off_scale(self, X: NDArray[Any]) -> None:
        """:class:`InputScaleWarning` where the training inputs ``X`` ``(n, p)`` are far
        from unit scale (``_off_scale_message``)."""
        message = _off_scale_message(X)
        if message is not None:
            self._warn(f"{type(self).__name__}: {message}", InputScaleWarning)

    def _warn_if_unconverged(self) -> None:
        """sklearn's ConvergenceWarning when the budget ran out before the fit converged."""
        if not getattr(self, "_budget_exhausted_", False):
            return
        unresolved = getattr(self, "unresolved_", None)
        gates = (
            ""
            if unresolved is None
            else f"; {100 * unresolved:.1f}% of the gates have phi in (0.1, 0.9)"
        )
        self._warn(
            f"{type(self).__name__} stopped at the budget of {self.n_iter_} epochs before the "
            f"stopping rule fired (tol={self.tol!r}, n_iter_no_change="
            f"{self.n_iter_no_change!r}){gates}. The fit and its selection "
            "(selected_features_) may still change with more training: raise max_iter or "
            "learning_rate_init.",
            ConvergenceWarning,
        )

    def _linear_mean(self) -> LinearMean | None:
        """The fit's linear mean (``SVBNNRegressor``'s ``mean_function``); none here."""
        return None

    def _linear_inputs(self) -> NDArray[np.intp]:
        """The inputs of the fit's linear mean, ``(k,)``."""
        lin = self._linear_mean()
        return np.zeros(0, dtype=np.intp) if lin is None else lin.index

    def _warn_if_collapsed(self, task_reasons: list[str]) -> None:
        """One CollapseWarning for a fit that selected nothing, keeps no path from an input
        to the output, or explains nothing by the task's measure (``task_reasons``, each a
        description; sets ``collapsed_``)."""
        reasons = []
        # With unresolved gates the posterior still predicts through edges of phi < 0.5
        # (the ConvergenceWarning says so): the median model's paths tell nothing yet.
        resolved = getattr(self, "unresolved_", 0.0) <= _UNRESOLVED_EXPORT
        # The reason reads the selection the fit reports (selected_features_: the median
        # model's inputs, and a linear mean's), so a warning never says "no input
        # selected" beside a non-empty selection.
        selected = getattr(self, "selected_features_", None)
        # A linear mean reaches the output from its inputs whatever the network keeps.
        linear = self._linear_inputs().size > 0
        if resolved and selected is not None and selected.size == 0:
            fi = getattr(self, "feature_inclusion_", None)
            largest = f"; largest feature_inclusion_ {fi.max():.2g}" if fi is not None else ""
            reasons.append(
                "no input selected (the median model keeps no path from any input to the "
                f"output{largest})"
            )
        elif resolved and not linear and not _reaches_output(self._kept_weight_masks()):
            reasons.append(
                "the median model keeps no path from any input to the output (every path "
                "has a pruned weight)"
            )
        reasons.extend(task_reasons)
        if not reasons:
            return
        lam = getattr(self, "lambda_", None)
        # The baselines have no prior inclusion: name lambda only where there is one.
        if lam is not None and math.isfinite(lam):
            # Measured (docs/guide/estimators.md, "Small data sets"): on small data the
            # exact ELBO's fit pruned every path of wine's although the data carry a strong
            # signal; a tempered posterior, "eb" or "cv" fitted.
            tempered = "kl_weight=0.2 (a tempered posterior), " if self._advise_tempering() else ""
            cause = (
                f"The prior (lambda = {lam:.3g}) pruned what the data support (on small "
                "data sets this happens even with a strong signal), learning_rate_init (now "
                f"{self.learning_rate_init!r}) is too high, or the data carry no signal; try "
                f"prior_inclusion='cv' (lambda chosen on held-out rows), {tempered}or "
                "prior_inclusion='eb' (all keep more inputs), a lower learning_rate_init, "
                "more data, or check X and y."
            )
        else:
            cause = (
                "The data carry no signal the model found, or learning_rate_init (now "
                f"{self.learning_rate_init!r}) is too high; train longer (max_iter), or "
                "check X and y."
            )
        self.collapsed_ = True
        self._warn(
            f"{type(self).__name__}: the fit collapsed: {'; '.join(reasons)}. {cause}",
            CollapseWarning,
        )

    def _warn_if_degenerate(self, bad_fit: str | None) -> None:
        """Warn about fits that return numbers but are useless (nothing silently wrong)."""
        if bad_fit is not None:
            self._warn(
                f"{type(self).__name__}: {bad_fit}; the fit diverged or did not converge. "
                f"Lower learning_rate_init (now {self.learning_rate_init!r}) or the initial "
                "weight range, raise max_iter, or standardise the data.",
                UserWarning,
            )

    def _module64(self) -> nn.Module:
        """A float64 copy of ``module_`` for prediction (cached per fit).

        Training runs in ``dtype`` (float32 by default: twice the speed); predicting in
        float64 keeps a row's prediction independent of the other rows and their order to
        ~1e-16 (float32 matrix products sum in an order that depends on the batch shape,
        ~1e-7) at a cost that is small next to training.
        """
        # Cached outside the estimator (predict must not change its __dict__, and the
        # copy is not worth pickling): keyed weakly by the fitted module itself.
        module = _MODULE64.get(self.module_)
        if module is None:
            module = copy.deepcopy(self.module_)
            if next(module.parameters()).dtype != torch.float64:
                module = module.double()
            _MODULE64[self.module_] = module
        return module

    def _predict_generator(self) -> torch.Generator:
        gen = torch.Generator(device=next(self.module_.parameters()).device)
        gen.manual_seed(self._predict_seed_)
        return gen

    def _validate_X(self, X: ArrayLike) -> Tensor:
        check_is_fitted(self, "module_")
        X = _check_numeric(_to_numpy(X), "X")
        Xv = validate_data(
            self, X, reset=False, dtype=[np.float64, np.float32], ensure_all_finite=True
        )
        return self._tensor(Xv, "X", fitted=True)

    def _draws(self, n_samples: int | None) -> int:
        return _check_int(
            "n_samples", self.n_samples_predict if n_samples is None else n_samples, 1
        )

    @staticmethod
    def _interval_args(level: float, n_samples: int) -> int:
        _check_real("level", level, low=0.0, high=1.0)
        # One draw gives lower == upper: a zero-width "interval" that claims certainty.
        return _check_int("n_samples", n_samples, 2, " (an interval needs at least 2 draws)")

    @staticmethod
    def _check_outputs(out: Tensor) -> Tensor:
        # Finite inputs far outside the training range can overflow the network (inf, then
        # NaN in softmax or quantiles): an error, not silently non-finite predictions.
        bad = ~torch.isfinite(out).reshape(out.shape[0], -1).all(dim=1)
        if bool(bad.any()):
            raise ValueError(
                f"the network's outputs overflowed for {int(bad.sum())} row(s) of X (e.g. row "
                f"{int(torch.nonzero(bad)[0])}); X is far outside the range the network "
                "can represent"
            )
        return out


def _row_weights(
    sample_weight: ArrayLike | None, X: NDArray[Any], scale: NDArray[Any] | None = None
) -> tuple[NDArray[np.bool_] | None, NDArray[np.float64] | None]:
    """Validate ``sample_weight`` (scikit-learn's checks: shape, finite, non-negative, not
    all zero) for the rows of ``X``, times ``scale`` (per row, e.g. its class weight).

    Returns
    -------
    keep : ndarray of bool, shape (n,), or None
        The rows of positive weight (``None``: every row); zero-weight rows are left out
        of the fit (they contribute nothing to the likelihood).
    weights : ndarray of shape (keep.sum(),) or None
        The kept rows' weights divided by their mean (mean 1: the objective stays per
        datum), or ``None`` when they are all equal (the unweighted fit).
    """
    if sample_weight is None and scale is None:
        return None, None
    sw = _check_sample_weight(
        None if sample_weight is None else _to_numpy(sample_weight),
        X,
        dtype=np.float64,
        ensure_non_negative=True,
    )
    if scale is not None:
        sw = sw * scale
        if not np.any(sw > 0):
            raise ValueError(
                "sample_weight and class_weight give every row a weight of zero; at least "
                "one row needs a positive weight"
            )
    keep = sw > 0
    w = sw[keep]
    if w.size and np.all(w == w[0]):
        return (None if keep.all() else keep), None
    return (None if keep.all() else keep), w / w.mean()


def _run_falling_back(run: Callable[[str], _R], kernels: str) -> _R:
    """``run(kernels)``; if the compiled kernels cannot be built, ``run("eager")``. Each
    fit tries again (nothing is remembered between fits: no process state)."""
    try:
        return run(kernels)
    except Exception as err:
        if kernels == "eager" or not _is_compile_error(err):
            raise
        logger.warning(
            "svbnn: the compiled kernels could not be built (%s: %s); this fit uses the "
            "eager kernels (kernel_backend='eager' skips the attempt)",
            type(err).__name__,
            str(err).splitlines()[0] if str(err) else "",
        )
        return run("eager")
