"""scikit-learn estimators: :class:`SVBNNRegressor` and :class:`SVBNNClassifier`.

Both follow the scikit-learn contract: ``__init__`` only stores its arguments, fitted
attributes end in ``_``, ``random_state`` makes a fit (and every prediction after it)
reproducible. Predictions draw their posterior samples from a generator seeded from the
fit, so ``predict`` is deterministic and row-wise consistent.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data
from torch import Tensor

from .nn.base import Sampler, set_generator
from .nn.spike_slab import SpikeSlabMLP
from .objectives import CategoricalLikelihood, GaussianLikelihood
from .prediction import credible_interval, predict_proba, prediction_interval, predictive_mean
from .priors import mlp_log_lambda_opt, resolve_log_inclusion
from .selection import (
    ExportReport,
    density,
    export_sparse,
    selected_features,
    sparsity,
    spike_slab_layers,
)
from .training import History, Optimizer, train

__all__ = ["SVBNNClassifier", "SVBNNRegressor"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def _to_numpy(a: Any) -> Any:
    if isinstance(a, Tensor):
        return a.detach().cpu().numpy()
    return a


class _SVBNNBase(BaseEstimator):
    """Shared fitting logic (not for direct use)."""

    _likelihood_name = ""

    def __init__(
        self,
        hidden_layer_sizes: tuple[int, ...] = (7, 7, 7),
        activation: str = "relu",
        prior_inclusion: str | float = "opt",
        log_prior_inclusion: float | None = None,
        prior_variance: float = 2.0,
        temperature: float = 0.5,
        sampler: str = "gumbel",
        batch_size: int = 512,
        learning_rate_init: float = 5e-3,
        max_iter: int = 7000,
        optimizer: str = "adam",
        n_mc_train: int = 1,
        n_samples_predict: int = 30,
        init_inclusion: float = 0.99,
        init_mu_range: float | None = None,
        dtype: str = "float64",
        random_state: int | np.random.RandomState | None = None,
        device: str = "cpu",
        verbose: bool = False,
    ) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.prior_inclusion = prior_inclusion
        self.log_prior_inclusion = log_prior_inclusion
        self.prior_variance = prior_variance
        self.temperature = temperature
        self.sampler = sampler
        self.batch_size = batch_size
        self.learning_rate_init = learning_rate_init
        self.max_iter = max_iter
        self.optimizer = optimizer
        self.n_mc_train = n_mc_train
        self.n_samples_predict = n_samples_predict
        self.init_inclusion = init_inclusion
        self.init_mu_range = init_mu_range
        self.dtype = dtype
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    # -- helpers -------------------------------------------------------------------------
    def _check_params(self) -> None:
        sizes = tuple(self.hidden_layer_sizes)
        if any(int(h) != h or h < 1 for h in sizes):
            raise ValueError(f"hidden_layer_sizes must be positive integers, got {sizes}")
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
        Optimizer(self.optimizer)
        for name in ("batch_size", "max_iter", "n_mc_train", "n_samples_predict"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < (0 if name == "max_iter" else 1):
                raise ValueError(f"{name} must be a positive integer, got {v!r}")

    def _tensor(self, a: NDArray[Any]) -> Tensor:
        # fit() converts y before _fit_module runs: check the dtype here for a clear error.
        if self.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {sorted(_DTYPES)}, got {self.dtype!r}")
        return torch.tensor(np.asarray(a), dtype=_DTYPES[self.dtype], device=self.device)

    def _resolve_log_lambda(self, n: int, p: int, n_out: int) -> float:
        if self.log_prior_inclusion is not None:
            return resolve_log_inclusion(log_inclusion=self.log_prior_inclusion)
        if isinstance(self.prior_inclusion, str):
            return mlp_log_lambda_opt(p, tuple(self.hidden_layer_sizes), n_out, n)
        return resolve_log_inclusion(inclusion=float(self.prior_inclusion))

    def _build_module(self, n_features: int, n_out: int, gen: torch.Generator) -> torch.nn.Module:
        """The network to fit; subclasses (the baselines' estimators) override this."""
        return SpikeSlabMLP(
            n_features,
            tuple(int(h) for h in self.hidden_layer_sizes),
            n_out,
            activation=self.activation,
            prior_variance=self.prior_variance,
            log_prior_inclusion=self.log_lambda_,
            sampler=self.sampler,
            temperature=self.temperature,
            init_inclusion=self.init_inclusion,
            init_mu_range=self.init_mu_range,
            generator=gen,
            device=self.device,
            dtype=_DTYPES[self.dtype],
        )

    def _prepare(self, n: int, p: int, n_out: int) -> None:
        """Settings that depend on the data size (SVBNN: the prior inclusion lambda)."""
        Sampler(self.sampler)
        if isinstance(self.prior_inclusion, str) and self.prior_inclusion != "opt":
            raise ValueError(
                f"prior_inclusion must be 'opt' or a float in (0, 1), got {self.prior_inclusion!r}"
            )
        self.log_lambda_ = self._resolve_log_lambda(n, p, n_out)
        self.lambda_ = math.exp(self.log_lambda_)

    def _summarize(self, model: torch.nn.Module) -> None:
        """Fitted summaries of the posterior (SVBNN: inclusion probabilities, selection)."""
        self.inclusion_probs_ = [
            layer.inclusion_probs()["weight"].cpu().numpy() for layer in spike_slab_layers(model)
        ]
        self.sparsity_ = float(sparsity(model))
        self.density_ = float(density(model))
        sel = selected_features(model)
        assert isinstance(sel, np.ndarray)
        self.selected_features_ = sel

    def _fit_module(self, X: NDArray[Any], target: Tensor, n_out: int, likelihood: Any) -> None:
        self._check_params()
        n, p = X.shape
        rs = check_random_state(self.random_state)
        seed = int(rs.randint(0, 2**31 - 1))
        gen = torch.Generator(device=self.device)
        gen.manual_seed(seed)
        self._prepare(n, p, n_out)
        model = self._build_module(p, n_out, gen)
        self.history_: History = train(
            model,
            self._tensor(X),
            target,
            likelihood,
            epochs=int(self.max_iter),
            batch_size=int(self.batch_size),
            lr=float(self.learning_rate_init),
            optimizer=self.optimizer,
            n_mc=int(self.n_mc_train),
            generator=gen,
            verbose=bool(self.verbose),
            track_sparsity=False,
        )
        # Generators are process-local state: keep the fitted estimator picklable.
        set_generator(model, None)
        self.module_ = model
        self.n_iter_ = int(self.max_iter)
        self.loss_curve_ = list(self.history_.loss)
        self._predict_seed_ = int(rs.randint(0, 2**31 - 1))
        self._summarize(model)

    def _predict_generator(self) -> torch.Generator:
        gen = torch.Generator(device=self.device)
        gen.manual_seed(self._predict_seed_)
        return gen

    def _validate_X(self, X: ArrayLike) -> Tensor:
        check_is_fitted(self, "module_")
        Xv = validate_data(
            self, _to_numpy(X), reset=False, dtype=[np.float64, np.float32], ensure_all_finite=True
        )
        return self._tensor(Xv)

    def _draws(self, n_samples: int | None) -> int:
        n = self.n_samples_predict if n_samples is None else n_samples
        if n < 1:
            raise ValueError(f"n_samples must be positive, got {n}")
        return int(n)

    def export_sparse(self, storage: str = "sparse") -> tuple[torch.nn.Module, ExportReport]:
        """The selected network (edges with ``phi > 0.5``, weights ``mu``) as a plain module."""
        check_is_fitted(self, "module_")
        return export_sparse(self.module_, storage=storage)


class SVBNNRegressor(RegressorMixin, _SVBNNBase):
    """Sparse variational BNN regressor with a spike-and-slab prior (Bai, Song & Cheng 2020).

    Parameters
    ----------
    hidden_layer_sizes : tuple of int
        Hidden widths (default: Simulation II's three layers of 7).
    activation : {"relu", "tanh", "sigmoid", "logistic", "identity"}
    prior_inclusion : "opt" or float
        Prior inclusion ``lambda``; ``"opt"`` is ``lambda_opt`` of Theorem 4.1.
    log_prior_inclusion : float, optional
        ``log(lambda)``; overrides ``prior_inclusion`` (use it below ~1e-300).
    prior_variance : float
        Slab variance ``sigma_0^2``.
    noise_std : float
        Known noise standard deviation ``sigma_eps`` of the Gaussian likelihood.
    temperature : float
        Gumbel-softmax temperature.
    sampler : {"gumbel", "inverse_cdf"}
    batch_size, learning_rate_init, max_iter : int, float, int
        Minibatch size, learning rate, epochs.
    optimizer : {"adam", "rmsprop", "sgd"}
    n_mc_train : int
        Monte Carlo draws ``K`` per step.
    n_samples_predict : int
        ``H`` draws for :meth:`predict`.
    init_inclusion, init_mu_range : float
        Initial ``phi`` and half-range of the initial means (``None``: ``1/sqrt(fan_in)``).
    dtype : {"float64", "float32"}
        Parameter dtype. float64 (the default, as in the authors' code) makes predictions
        independent of row order and batch composition to the last bit; float32 is faster.
    random_state : int, RandomState or None
    device : str
    verbose : bool
        Progress bar during fit.

    Attributes
    ----------
    module_ : SpikeSlabMLP
    selected_features_ : ndarray of int
    inclusion_probs_ : list of ndarray, each ``(out, in)``
    sparsity_ : float
        ``sum(phi) / T``.
    density_ : float
        Fraction of parameters with ``phi > 0.5``.
    lambda_, log_lambda_ : float
    history_ : History
    """

    def __init__(
        self,
        hidden_layer_sizes: tuple[int, ...] = (7, 7, 7),
        activation: str = "relu",
        prior_inclusion: str | float = "opt",
        log_prior_inclusion: float | None = None,
        prior_variance: float = 2.0,
        noise_std: float = 1.0,
        temperature: float = 0.5,
        sampler: str = "gumbel",
        batch_size: int = 512,
        learning_rate_init: float = 5e-3,
        max_iter: int = 7000,
        optimizer: str = "adam",
        n_mc_train: int = 1,
        n_samples_predict: int = 30,
        init_inclusion: float = 0.99,
        init_mu_range: float | None = None,
        dtype: str = "float64",
        random_state: int | np.random.RandomState | None = None,
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
            optimizer=optimizer,
            n_mc_train=n_mc_train,
            n_samples_predict=n_samples_predict,
            init_inclusion=init_inclusion,
            init_mu_range=init_mu_range,
            dtype=dtype,
            random_state=random_state,
            device=device,
            verbose=verbose,
        )
        self.noise_std = noise_std

    def fit(self, X: ArrayLike, y: ArrayLike) -> SVBNNRegressor:
        """Fit the variational posterior.

        Parameters
        ----------
        X : array-like or Tensor, shape (n, p)
        y : array-like or Tensor, shape (n,)

        Returns
        -------
        self
        """
        Xv, yv = validate_data(
            self,
            _to_numpy(X),
            _to_numpy(y),
            reset=True,
            dtype=[np.float64, np.float32],
            y_numeric=True,
            ensure_all_finite=True,
        )
        yv = column_or_1d(yv, warn=True)
        lik = GaussianLikelihood(float(self.noise_std))
        self._fit_module(Xv, self._tensor(yv), 1, lik)
        return self

    def predict(self, X: ArrayLike, n_samples: int | None = None) -> NDArray[np.floating[Any]]:
        """Posterior mean estimator ``f_H(x)``, shape ``(n,)``."""
        Xt = self._validate_X(X)
        out = predictive_mean(
            self.module_, Xt, self._draws(n_samples), generator=self._predict_generator()
        )
        return out[:, 0].cpu().numpy()

    def predict_interval(
        self, X: ArrayLike, level: float = 0.95, n_samples: int = 600
    ) -> tuple[NDArray[np.floating[Any]], NDArray[np.floating[Any]]]:
        """Credible interval of the response mean ``E[y | x]`` at ``level`` (each ``(n,)``)."""
        Xt = self._validate_X(X)
        lo, hi = credible_interval(
            self.module_, Xt, level, self._draws(n_samples), generator=self._predict_generator()
        )
        return lo[:, 0].cpu().numpy(), hi[:, 0].cpu().numpy()

    def predict_prediction_interval(
        self, X: ArrayLike, level: float = 0.95, n_samples: int = 600
    ) -> tuple[NDArray[np.floating[Any]], NDArray[np.floating[Any]]]:
        """Interval for a new response ``y`` (adds the ``noise_std`` noise), each ``(n,)``."""
        Xt = self._validate_X(X)
        lo, hi = prediction_interval(
            self.module_,
            Xt,
            float(self.noise_std),
            level,
            self._draws(n_samples),
            generator=self._predict_generator(),
        )
        return lo[:, 0].cpu().numpy(), hi[:, 0].cpu().numpy()


class SVBNNClassifier(ClassifierMixin, _SVBNNBase):
    """Sparse variational BNN classifier (categorical likelihood, softmax outputs).

    Parameters are those of :class:`SVBNNRegressor` without ``noise_std``. Defaults
    follow the paper's MNIST setting where it has one (RMSprop is chosen with
    ``optimizer="rmsprop"``).

    Attributes
    ----------
    classes_ : ndarray
        Labels seen at fit time.
    module_, selected_features_, inclusion_probs_, sparsity_, density_, lambda_ :
        As for :class:`SVBNNRegressor`.
    """

    def fit(self, X: ArrayLike, y: ArrayLike) -> SVBNNClassifier:
        """Fit the variational posterior; ``y`` holds class labels, shape ``(n,)``."""
        Xv, yv = validate_data(
            self,
            _to_numpy(X),
            _to_numpy(y),
            reset=True,
            dtype=[np.float64, np.float32],
            ensure_all_finite=True,
        )
        yv = column_or_1d(yv, warn=True)
        check_classification_targets(yv)
        enc = LabelEncoder().fit(yv)
        self.classes_ = enc.classes_
        if len(self.classes_) < 2:
            raise ValueError(
                "the classifier needs samples of at least 2 classes, "
                f"got 1 class: {self.classes_[0]!r}"
            )
        target = torch.tensor(enc.transform(yv), dtype=torch.long, device=self.device)
        self._fit_module(Xv, target, len(self.classes_), CategoricalLikelihood())
        return self

    def predict_proba(
        self, X: ArrayLike, n_samples: int | None = None
    ) -> NDArray[np.floating[Any]]:
        """Bayesian predictive probabilities, the average softmax over H draws, ``(n, C)``."""
        Xt = self._validate_X(X)
        out = predict_proba(
            self.module_, Xt, self._draws(n_samples), generator=self._predict_generator()
        )
        return out.cpu().numpy()

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
