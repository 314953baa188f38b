"""scikit-learn estimators: :class:`SVBNNRegressor` and :class:`SVBNNClassifier`.

Both follow the scikit-learn contract: ``__init__`` only stores its arguments, fitted
attributes end in ``_``, ``random_state`` makes a fit (and every prediction after it)
reproducible. Predictions draw their posterior samples from a generator seeded from the
fit, so ``predict`` is deterministic, and each row gets the same draws whatever the other
rows (its prediction then agrees up to floating-point rounding, see ``dtype``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from sklearn.base import ClassifierMixin, RegressorMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data
from torch import Tensor

from ._estimator_base import _SVBNNBase
from ._estimator_checks import (
    _DTYPES,
    _NOISE_INIT,
    CollapseWarning,
    _check_numeric,
    _check_real,
    _OutputScale,
    _SeedSource,
    _to_numpy,
)
from .objectives import CategoricalLikelihood, GaussianLikelihood
from .prediction import (
    credible_interval,
    predict_proba,
    prediction_interval,
    predictive_mean,
    sample_outputs,
)
from .selection import (
    ExportReport,
)

__all__ = ["CollapseWarning", "SVBNNClassifier", "SVBNNRegressor"]


class SVBNNRegressor(RegressorMixin, _SVBNNBase):
    """Sparse variational BNN regressor with a spike-and-slab prior (Bai, Song & Cheng 2020).

    Fits ``y`` standardised internally (every output is in ``y``'s units) with a learned
    noise level, and stops when the ELBO and the gates have converged. Scale ``X`` in your
    pipeline (e.g. ``StandardScaler``): the prior assumes inputs of unit scale. The
    defaults were chosen on held-out evidence (user guide, "How the defaults were chosen").

    Parameters
    ----------
    hidden_layer_sizes : int or tuple of int, default (50,)
        Hidden widths; an int is one hidden layer, as in scikit-learn's MLP.
    activation : {"relu", "tanh", "sigmoid", "logistic", "identity"}, default "relu"
    prior_inclusion : "opt", "eb" or float, default "opt"
        Prior inclusion ``lambda``: ``"opt"`` is ``lambda_opt`` of Theorem 4.1 (about
        1e-4; needed for variable selection); ``"eb"`` sets it during training to its
        empirical-Bayes value, the mean ``phi`` (capped at 0.5: better fits on small data,
        but every input then reaches the output with high probability); or a float.
    log_prior_inclusion : float, optional
        ``log(lambda)``; overrides ``prior_inclusion`` (use it below ~1e-300).
    prior_variance : float, default 2.0
        Slab variance ``sigma_0^2``.
    noise_std : "auto" or float, default "auto"
        ``"auto"``: the noise sd is learned (a type-II point estimate trained with the
        variational parameters, started at 0.1 sd of y), then set to the value that
        maximises the training rows' posterior-predictive likelihood (``noise_std_``). A
        float is a known noise sd in ``y``'s units (the paper's setting).
    temperature : float, default 0.5
        Gumbel-softmax temperature.
    sampler : {"gumbel", "inverse_cdf"}, default "gumbel"
    batch_size : int, default 128
    learning_rate_init : float, default 3e-3
        Adam's learning rate.
    max_iter : "auto" or int, default "auto"
        Upper bound on the epochs. ``"auto"``: 20,000 optimiser steps and at least 20 epochs
        (:func:`svbnn.convergence.default_max_steps`).
    tol : float or None, default 1e-4
        Stopping rule (:class:`svbnn.convergence.ConvergenceMonitor`): stop when the
        per-datum loss, averaged over periods of at least 100 steps, has not improved by
        ``tol`` for ``n_iter_no_change`` periods and at most 0.1% of the gates crossed 0.5
        in the last period. ``None`` trains exactly ``max_iter`` epochs (no warning).
    n_iter_no_change : int, default 10
    kl_weight : float, default 1.0
        ``w`` in ``nll + w KL / n``; 1 is the exact ELBO. ``0.2`` fits better on small data
        and selects less cleanly (user guide).
    optimizer : {"adam", "rmsprop", "sgd"}, default "adam"
    n_mc_train : int, default 1
        Monte Carlo draws ``K`` per step.
    n_samples_predict : int, default 30
        ``H`` draws for :meth:`predict`.
    init_inclusion, init_mu_range : float, default 0.99 and None
        Initial ``phi`` and half-range of the initial means (``None``: ``1/sqrt(fan_in)``).
    dtype : {"float32", "float64"}, default "float32"
        Training dtype. Predictions run in float64 on a copy of the network whatever this
        is, so a row's prediction depends on the other rows of ``X`` and their order only
        through rounding (about 1e-16 relative).
    kernel_backend : {"auto", "compiled", "eager"}, default "auto"
        The spike-and-slab kernels inside ``fit`` (the process-wide setting is restored
        after it): ``"auto"`` compiles them with ``torch.compile`` for networks of at least
        ``AUTO_MIN_NUMEL`` parameters and runs smaller ones eagerly. Where compiling fails
        (no C++ compiler), the fit runs eagerly and one message is logged.
    random_state : int, RandomState, Generator or None
        Source of the torch seeds for training and prediction (an int in ``[0, 2**32)``
        seeds a RandomState, as in scikit-learn).
    device : str, default "cpu"
    verbose : bool, default False
        Progress bar during fit.

    Attributes
    ----------
    module_ : SpikeSlabMLP
        Fitted on standardised ``y`` (``export_sparse`` rescales).
    noise_std_ : float
        Noise sd used by the prediction intervals, ``y``'s units (learned or given).
    noise_std_elbo_ : float
        With ``noise_std="auto"``: the ELBO's own estimate (includes the posterior spread
        of ``f``, so it is larger).
    feature_inclusion_ : ndarray of shape (p,)
        Per input, the posterior probability that it reaches the output through included
        edges (:func:`svbnn.selection.feature_inclusion`).
    selected_features_ : ndarray of int
        Inputs with ``feature_inclusion_ > 0.5``.
    converged_ : bool
        Whether the stopping rule fired before the budget ran out.
    n_iter_ : int
        Epochs run.
    unresolved_ : float
        Fraction of gates with ``phi`` in (0.1, 0.9) at the end.
    inclusion_probs_ : list of ndarray, each ``(out, in)``
    sparsity_ : float
        ``sum(phi) / T``.
    density_ : float
        Fraction of parameters with ``phi > 0.5``.
    lambda_, log_lambda_ : float
    history_ : History
        Per epoch: loss, nll, kl (per datum), sparsity, unresolved.

    Warns
    -----
    sklearn.exceptions.ConvergenceWarning
        The budget ran out before convergence (says what fraction of gates is unresolved).
    CollapseWarning
        No input selected, or constant predictions on the training rows.
    """

    def __init__(
        self,
        hidden_layer_sizes: int | tuple[int, ...] = (50,),
        activation: str = "relu",
        prior_inclusion: str | float = "opt",
        log_prior_inclusion: float | None = None,
        prior_variance: float = 2.0,
        noise_std: float | str = "auto",
        temperature: float = 0.5,
        sampler: str = "gumbel",
        batch_size: int = 128,
        learning_rate_init: float = 3e-3,
        max_iter: int | str = "auto",
        tol: float | None = 1e-4,
        n_iter_no_change: int = 10,
        kl_weight: float = 1.0,
        optimizer: str = "adam",
        n_mc_train: int = 1,
        n_samples_predict: int = 30,
        init_inclusion: float = 0.99,
        init_mu_range: float | None = None,
        dtype: str = "float32",
        kernel_backend: str = "auto",
        random_state: int | np.random.RandomState | np.random.Generator | None = None,
        device: str = "cpu",
        verbose: bool = False,
    ) -> None:
        super().__init__(
            hidden_layer_sizes=hidden_layer_sizes,
            activation=activation,
            prior_inclusion=prior_inclusion,
            log_prior_inclusion=log_prior_inclusion,
            prior_variance=prior_variance,
            temperature=temperature,
            sampler=sampler,
            batch_size=batch_size,
            learning_rate_init=learning_rate_init,
            max_iter=max_iter,
            tol=tol,
            n_iter_no_change=n_iter_no_change,
            kl_weight=kl_weight,
            optimizer=optimizer,
            n_mc_train=n_mc_train,
            n_samples_predict=n_samples_predict,
            init_inclusion=init_inclusion,
            init_mu_range=init_mu_range,
            dtype=dtype,
            kernel_backend=kernel_backend,
            random_state=random_state,
            device=device,
            verbose=verbose,
        )
        self.noise_std = noise_std

    def fit(self, X: ArrayLike, y: ArrayLike) -> SVBNNRegressor:
        """Fit the variational posterior.

        Every parameter and the data are checked first; if the fit fails at any point, a
        previously fitted estimator keeps its previous fit, unchanged.

        Parameters
        ----------
        X : array-like or Tensor, shape (n, p)
        y : array-like or Tensor, shape (n,)

        Returns
        -------
        self

        Warns
        -----
        UserWarning
            When the fit is useless though finite: the training error is far above that of
            a constant, or no kept weights connect the inputs to the output.
        """
        self._check_params()
        if not (isinstance(self.noise_std, str) and self.noise_std == "auto"):
            _check_real("noise_std", self.noise_std, low=0.0)
        seeds = _SeedSource(self.random_state)
        X, y = _to_numpy(X), _to_numpy(y)
        X, y = _check_numeric(X, "X"), _check_numeric(y, "y")
        with self._fit_transaction():
            Xv, yv = validate_data(
                self,
                X,
                y,
                reset=True,
                dtype=[np.float64, np.float32],
                y_numeric=True,
                ensure_all_finite=True,
            )
            yv = column_or_1d(yv, warn=True)
            # The network fits the standardised target (its prior and learning rate are
            # set for responses of unit scale); every output is mapped back to y's units.
            if self._scales_target:
                sd = float(np.std(yv))
                self._y_mean_ = float(np.mean(yv))
                self._y_scale_ = sd if sd > 0 and math.isfinite(sd) else 1.0
            else:
                self._y_mean_, self._y_scale_ = 0.0, 1.0
            z = (np.asarray(yv, dtype=np.float64) - self._y_mean_) / self._y_scale_
            learn = isinstance(self.noise_std, str)
            noise0 = _NOISE_INIT if learn else float(self.noise_std) / self._y_scale_
            lik = self._fit_module(
                Xv,
                self._tensor(z, "y"),
                1,
                lambda: GaussianLikelihood(noise0, learn_noise=learn).to(_DTYPES[self.dtype]),
                seeds,
            )
            if learn:
                self.noise_std_elbo_ = (
                    float(torch.as_tensor(lik.noise_std).detach()) * self._y_scale_
                )
                self.noise_std_ = self._predictive_noise(Xv, z) * self._y_scale_
            else:
                self.noise_std_ = float(self.noise_std)
        self._warn_if_degenerate(self._fit_problem(z))
        self._warn_if_unconverged()
        if self._scales_target:
            rows = Xv[: min(len(Xv), 512)]
            pred = self.predict(rows, n_samples=5) if len(rows) else np.zeros(0)
            self._warn_if_collapsed(
                bool(np.std(pred) <= 1e-3 * self._y_scale_),
                "the predictions on the training rows are constant "
                f"(sd {np.std(pred):.3g}, sd of y {self._y_scale_:.3g})",
            )
        return self

    _scales_target = True

    def _predictive_noise(self, X: NDArray[Any], z: NDArray[Any]) -> float:
        """The noise sd (standardised units) that maximises the training rows' log
        posterior predictive density, ``sum_i log N(z_i; m_i, v_i + s^2)`` with ``m_i``,
        ``v_i`` the mean and variance of the H draws of ``f(x_i)``.

        The ELBO's own optimum, ``s^2 = mean_i E_q[(z_i - f(x_i))^2]``, counts the
        posterior spread of ``f`` twice once intervals add that spread back (measured on
        the tabular benchmark: 95% intervals covering 98-100%); this is the value that
        makes the predictive distribution fit the data, the one intervals use.
        """
        rows = slice(0, min(len(X), 5000))
        Xt = self._tensor(X[rows], "X", fitted=True)
        draws = sample_outputs(
            self._module64(), Xt, self._draws(None), generator=self._predict_generator()
        )[..., 0].double()
        draws = draws.cpu()  # z and the grid of s below are CPU tensors
        m, v = draws.mean(0), draws.var(0, unbiased=False)
        r2 = (torch.as_tensor(z[rows], dtype=torch.float64) - m) ** 2
        # A grid over log s, refined once: the 1-D objective is smooth and unimodal in
        # practice, and a grid cannot diverge.
        s = torch.logspace(-4, 0.5, 181, dtype=torch.float64)
        for _ in range(2):
            tot = v[None, :] + s[:, None] ** 2
            ll = -(torch.log(tot) + r2[None, :] / tot).sum(1)
            k = int(torch.argmax(ll))
            lo, hi = s[max(k - 1, 0)], s[min(k + 1, len(s) - 1)]
            s = torch.logspace(math.log10(lo), math.log10(hi), 41, dtype=torch.float64)
        return float(s[20])

    def _fit_problem(self, y: NDArray[Any]) -> str | None:
        if not self.history_.nll:
            return None
        # The Gaussian per-datum NLL is log(2 pi s^2)/2 + MSE/(2 s^2): recover the MSE
        # (all in the standardised units the network was fitted in).
        s2 = (self.noise_std_ / self._y_scale_) ** 2
        mse = 2.0 * s2 * (float(self.history_.nll[-1]) - 0.5 * math.log(2.0 * math.pi * s2))
        var = float(np.var(y))
        # 100x the variance (training R^2 below -99): far beyond an unconverged but sane fit.
        if var > 0 and mse > 100.0 * var:
            return (
                f"the final training mean squared error ({mse:.3g}) is {mse / var:.3g} times "
                "the variance of y (a constant predictor's)"
            )
        return None

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
        H = self._draws(n_samples)
        if not return_std:
            out = predictive_mean(self._module64(), Xt, H, generator=self._predict_generator())
            return self._to_user(out)
        draws = self._check_outputs(
            sample_outputs(self._module64(), Xt, H, generator=self._predict_generator())
        )[..., 0]
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
        lo, hi = credible_interval(
            self._module64(), Xt, level, n_draws, generator=self._predict_generator()
        )
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
        lo, hi = prediction_interval(
            self._module64(),
            Xt,
            self.noise_std_ / self._y_scale_,
            level,
            n_draws,
            generator=self._predict_generator(),
        )
        return self._to_user(lo), self._to_user(hi)

    def export_sparse(self, storage: str = "sparse") -> tuple[torch.nn.Module, ExportReport]:
        """The median model (see :meth:`SVBNNClassifier.export_sparse`), whose outputs are
        in the units of y (the fitted network's standardised outputs, rescaled)."""
        module, report = super().export_sparse(storage)
        if self._y_scale_ != 1.0 or self._y_mean_ != 0.0:
            module = _OutputScale(module, self._y_scale_, self._y_mean_).eval()
        return module, report


class SVBNNClassifier(ClassifierMixin, _SVBNNBase):
    """Sparse variational BNN classifier (categorical likelihood, softmax outputs).

    Parameters are those of :class:`SVBNNRegressor` without ``noise_std``, with the same
    defaults: one hidden layer of 50 ReLU units, ``prior_inclusion="opt"`` (Theorem 4.1),
    Adam with ``learning_rate_init=3e-3`` on minibatches of 128, ``max_iter="auto"`` (at
    most 20,000 steps and at least 20 epochs) with the stopping rule ``tol=1e-4``,
    ``n_iter_no_change=10``, ``kl_weight=1`` (the exact ELBO), ``dtype="float32"`` training
    (float64 prediction), ``kernel_backend="auto"``, ``n_samples_predict=30``. Where
    accuracy matters more than selection, ``kl_weight=0.2`` fits much better on small
    data (2,000 MNIST images: accuracy 0.83 against 0.74-0.77; user guide). Scale ``X``
    in your pipeline.

    Attributes
    ----------
    classes_ : ndarray
        Labels seen at fit time.
    module_, feature_inclusion_, selected_features_, converged_, n_iter_, unresolved_,
    inclusion_probs_, sparsity_, density_, lambda_, history_ :
        As for :class:`SVBNNRegressor`.

    Warns
    -----
    sklearn.exceptions.ConvergenceWarning
        As for :class:`SVBNNRegressor`.
    CollapseWarning
        No input selected, or a training log-loss equal to that of predicting the class
        frequencies (the majority class for every row).
    """

    def fit(self, X: ArrayLike, y: ArrayLike) -> SVBNNClassifier:
        """Fit the variational posterior; ``y`` holds class labels, shape ``(n,)``.

        Checks and failure behaviour as :meth:`SVBNNRegressor.fit`; the warning for a
        useless fit compares the training log-loss with a uniform prediction's.
        """
        self._check_params()
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
            check_classification_targets(yv)
            enc = LabelEncoder().fit(yv)
            if len(enc.classes_) < 2:
                raise ValueError(
                    "the classifier needs samples of at least 2 classes in y, "
                    f"got 1 class: {enc.classes_[0]!r}"
                )
            self.classes_ = enc.classes_
            codes = enc.transform(yv)
            target = torch.tensor(codes, dtype=torch.long, device=self.device)
            self._fit_module(Xv, target, len(self.classes_), CategoricalLikelihood, seeds)
        self._warn_if_degenerate(self._fit_problem())
        self._warn_if_unconverged()
        # Collapse to the class frequencies (the majority class's predictor): the training
        # log-loss is then the entropy of those frequencies. Read from the history, not from
        # a prediction pass, which would cost a sizeable share of a short fit of a large net.
        freq = np.bincount(codes) / len(codes)
        entropy = float(-np.sum(freq[freq > 0] * np.log(freq[freq > 0])))
        nll = float(self.history_.nll[-1]) if self.history_.nll else 0.0
        self._warn_if_collapsed(
            nll >= 0.98 * entropy,
            f"its training log-loss ({nll:.3g}) is that of predicting the class frequencies "
            f"({entropy:.3g}), i.e. the majority class {self.classes_[int(np.argmax(freq))]!r} "
            "for every row",
        )
        return self

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
