"""scikit-learn estimators: :class:`SVBNNRegressor` and :class:`SVBNNClassifier`.

Both follow the scikit-learn contract: ``__init__`` only stores its arguments, fitted
attributes end in ``_``, ``random_state`` makes a fit (and every prediction after it)
reproducible. Predictions draw their posterior samples from a generator seeded from the
fit, so ``predict`` is deterministic, and each row gets the same draws whatever the other
rows (its prediction then agrees up to floating-point rounding, see ``dtype``).
"""

from __future__ import annotations

import copy
import logging
import math
import numbers
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from numpy.typing import ArrayLike, NDArray
from scipy import sparse
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import ConvergenceWarning
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, column_or_1d, validate_data
from torch import Tensor, nn

from ._kernels import AUTO_MIN_NUMEL, backend_scope
from .convergence import ConvergenceMonitor, default_max_steps
from .nn.base import ACTIVATIONS, Sampler, set_generator
from .nn.spike_slab import SpikeSlabMLP
from .objectives import CategoricalLikelihood, GaussianLikelihood
from .prediction import (
    credible_interval,
    predict_proba,
    prediction_interval,
    predictive_mean,
    sample_outputs,
)
from .priors import mlp_log_lambda_opt, resolve_log_inclusion
from .selection import (
    ExportReport,
    density,
    export_sparse,
    feature_inclusion,
    sparsity,
    spike_slab_layers,
    unresolved_fraction,
)
from .training import History, Objective, Optimizer, elbo_objective, negative_elbo, train

__all__ = ["CollapseWarning", "SVBNNClassifier", "SVBNNRegressor"]

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "float64": torch.float64}
_KERNEL_BACKENDS = ["auto", "compiled", "eager"]
_NOISE_INIT = 0.1  # initial learned noise sd, in units of the training sd of y
_UNRESOLVED_EXPORT = 0.01  # export_sparse warns above this fraction of unresolved gates
_compile_failed = False  # set once the compiled kernels failed to build in this process
# Fitted module -> its float64 copy for prediction (see _SVBNNBase._module64).
_MODULE64: weakref.WeakKeyDictionary[nn.Module, nn.Module] = weakref.WeakKeyDictionary()


class CollapseWarning(UserWarning):
    """A fit that returns numbers but explains nothing: no input selected, a constant
    predictor, or a classifier that predicts one class for every training row."""


def _is_compile_error(err: BaseException) -> bool:
    """Whether ``err`` comes from building the compiled kernels (torch.compile, inductor,
    the C++ compiler) rather than from the fit itself."""
    mod = type(err).__module__
    return mod.startswith(("torch._dynamo", "torch._inductor")) or isinstance(
        err, (OSError, ImportError)
    )


class _OutputScale(nn.Module):
    """``out * scale + shift``: a network fitted on the standardised target, in user units."""

    def __init__(self, module: nn.Module, scale: float, shift: float) -> None:
        super().__init__()
        self.module = module
        self.scale, self.shift = scale, shift

    def forward(self, x: Tensor) -> Tensor:
        return self.module(x) * self.scale + self.shift


def _to_numpy(a: Any) -> Any:
    if isinstance(a, Tensor):
        return a.detach().cpu().numpy()
    return a


# -- parameter checks --------------------------------------------------------------------
# Each raises TypeError for a value of the wrong kind and ValueError for one out of range,
# and names the parameter, so a bad setting never surfaces as a raw torch/numpy error.
def _check_int(name: str, value: Any, minimum: int, reason: str = "") -> int:
    # bool is an int subclass, but max_iter=True is a mistake, not a count; 2.5 draws is
    # refused rather than silently truncated.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}{reason}, got {value!r}")
    return int(value)


def _check_real(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = False,
    allow_none: bool = False,
) -> None:
    """A finite real number in ``(low, high)`` (``[low, high)`` with ``low_inclusive``)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    v = float(value)
    below = low is not None and (v < low if low_inclusive else v <= low)
    above = high is not None and v >= high
    if not math.isfinite(v) or below or above:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        rng = f"{'[' if low_inclusive else '('}{lo}, {hi})"
        raise ValueError(f"{name} must be a finite number in {rng}, got {value!r}")


def _check_choice(name: str, value: Any, choices: list[str]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _hidden_sizes(value: Any) -> tuple[int, ...]:
    """``hidden_layer_sizes`` as a tuple; an int is one hidden layer (as sklearn's MLP)."""
    sizes = (value,) if isinstance(value, numbers.Integral) else value
    try:
        sizes = tuple(sizes)
    except TypeError:
        raise TypeError(
            f"hidden_layer_sizes must be an int or a sequence of ints, got {value!r}"
        ) from None
    for h in sizes:
        if isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1:
            raise ValueError(f"hidden_layer_sizes must be positive integers, got {value!r}")
    return tuple(int(h) for h in sizes)


def _check_device(value: Any) -> torch.device:
    try:
        dev = torch.device(value)
    except (RuntimeError, TypeError, ValueError) as e:
        raise ValueError(f"device must be a torch device such as 'cpu', got {value!r}") from e
    # Checked here so a missing backend is a clear error, not torch's AssertionError.
    if dev.type == "cuda":
        if not torch.backends.cuda.is_built():
            raise ValueError("CUDA is not available in this PyTorch build; use device='cpu'")
        if not torch.cuda.is_available():
            raise ValueError(
                "no CUDA device is available (torch.cuda.is_available() is False); use device='cpu'"
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"device={value!r}: only {torch.cuda.device_count()} CUDA device(s) available"
            )
    elif dev.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError("MPS is not available on this machine; use device='cpu'")
    elif dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'mps', got {value!r}")
    return dev


class _SeedSource:
    """Draws torch seeds from ``random_state``: int, None, RandomState or Generator."""

    def __init__(self, random_state: Any) -> None:
        self._gen: np.random.Generator | None = None
        self._rs: np.random.RandomState | None = None
        if isinstance(random_state, np.random.Generator):
            self._gen = random_state
        elif isinstance(random_state, bool):
            raise TypeError(f"random_state must be an int, not a bool, got {random_state!r}")
        elif isinstance(random_state, numbers.Integral) and not 0 <= int(random_state) < 2**32:
            raise ValueError(f"random_state must lie in [0, 2**32), got {random_state!r}")
        else:
            try:
                self._rs = check_random_state(random_state)
            except ValueError:
                raise TypeError(
                    "random_state must be an int, None, a numpy RandomState or a numpy "
                    f"Generator, got {random_state!r}"
                ) from None

    def seed(self) -> int:
        # RandomState.randint keeps the seeds (and so the fits) of earlier versions.
        if self._rs is not None:
            return int(self._rs.randint(0, 2**31 - 1))
        assert self._gen is not None
        return int(self._gen.integers(0, 2**31 - 1))


def _check_numeric(a: Any, name: str) -> Any:
    """Refuse string (or non-numeric object) data with a message naming ``a``.

    Returns ``a``, with object arrays converted to float64 here so that sklearn's later
    messages (NaN, infinity) name the argument too.
    """
    if a is None or sparse.issparse(a) or hasattr(a, "dtypes"):
        return a  # sklearn's own checks give clear messages for these (and DataFrames)
    arr = a if isinstance(a, np.ndarray) else np.asarray(a, dtype=object)
    if arr.dtype.kind in "USV":
        raise ValueError(f"{name} must be numeric, got an array of dtype {arr.dtype}")
    if arr.dtype.kind != "O":
        return a
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError) as e:
        # Same type as numpy's error (sklearn's checks expect TypeError for dicts).
        raise type(e)(f"{name} must be numeric; it holds values that are not: {e}") from e


def _fitted_attributes(est: BaseEstimator) -> dict[str, Any]:
    # sklearn's convention (check_is_fitted): fitted state lives in attributes ending in
    # "_"; that includes private ones such as _predict_seed_.
    return {k: v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("__")}


def _reaches_output(masks: list[NDArray[np.bool_]]) -> bool:
    """Whether kept weights (per layer, ``(out, in)``) connect some input to some output."""
    if not masks or any(m.ndim != 2 for m in masks):
        return True  # not an MLP of linear layers: no claim
    reach: NDArray[np.bool_] = np.ones(masks[0].shape[1], dtype=bool)
    for m in masks:
        if m.shape[1] != reach.size:
            return True
        reach = np.asarray(m[:, reach].any(axis=1), dtype=bool)
    return bool(reach.any())


def _layer_pairs(p: int, hidden: Any, n_out: int) -> list[tuple[int, int]]:
    sizes = [p, *_hidden_sizes(hidden), n_out]
    return list(zip(sizes[:-1], sizes[1:], strict=True))


@contextmanager
def _diverged_names(est: Any) -> Iterator[None]:
    """A loss that overflowed during fit names the estimator's settings to change."""
    try:
        yield
    except FloatingPointError as err:
        raise FloatingPointError(
            f"{type(est).__name__}: training diverged ({err}); lower learning_rate_init "
            f"(now {est.learning_rate_init!r}) or init_mu_range, or standardise X"
        ) from None


@contextmanager
def _no_scope() -> Iterator[None]:
    yield


def _empirical_bayes_inclusion(epoch: int, model: nn.Module, history: History) -> None:
    """Training callback: set ``lambda`` to the mean ``phi`` (its ELBO maximiser given the
    gates: ``d KL / d lambda = 0`` there), capped at 0.5 so that the prior never favours
    keeping a weight."""
    with torch.no_grad():
        phi = torch.cat(
            [torch.sigmoid(layer.alpha).reshape(-1) for layer in spike_slab_layers(model)]
        )
        log_lam = math.log(min(max(float(phi.mean()), 1e-6), 0.5))
        for m in model.modules():
            buf = m._buffers.get("log_prior_inclusion")
            if buf is not None:
                buf.fill_(log_lam)


class _SVBNNBase(BaseEstimator):
    """Shared fitting logic (not for direct use)."""

    _likelihood_name = ""

    def __init__(
        self,
        hidden_layer_sizes: int | tuple[int, ...] = (50,),
        activation: str = "relu",
        prior_inclusion: str | float = "opt",
        log_prior_inclusion: float | None = None,
        prior_variance: float = 2.0,
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
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.kl_weight = kl_weight
        self.optimizer = optimizer
        self.n_mc_train = n_mc_train
        self.n_samples_predict = n_samples_predict
        self.init_inclusion = init_inclusion
        self.init_mu_range = init_mu_range
        self.dtype = dtype
        self.kernel_backend = kernel_backend
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    # -- helpers -------------------------------------------------------------------------
    def _check_params(self) -> None:
        """Validate every hyperparameter; sets nothing, so a refusal leaves ``self`` as it was."""
        _hidden_sizes(self.hidden_layer_sizes)
        _check_choice("activation", self.activation, sorted(ACTIVATIONS))
        _check_choice("dtype", self.dtype, sorted(_DTYPES))
        _check_choice("optimizer", self.optimizer, [o.value for o in Optimizer])
        _check_int("batch_size", self.batch_size, 1)
        if not (isinstance(self.max_iter, str) and self.max_iter == "auto"):
            _check_int("max_iter", self.max_iter, 0)
        _check_real("tol", getattr(self, "tol", None), low=0.0, low_inclusive=True, allow_none=True)
        _check_int("n_iter_no_change", getattr(self, "n_iter_no_change", 10), 1)
        _check_real("kl_weight", getattr(self, "kl_weight", 1.0), low=0.0)
        _check_choice("kernel_backend", getattr(self, "kernel_backend", "eager"), _KERNEL_BACKENDS)
        _check_int("n_mc_train", self.n_mc_train, 1)
        _check_int("n_samples_predict", self.n_samples_predict, 1)
        _check_real("learning_rate_init", self.learning_rate_init, low=0.0)
        _SeedSource(self.random_state)
        _check_device(self.device)
        self._check_model_params()

    def _check_model_params(self) -> None:
        """The prior's and the variational family's settings (the baselines override this)."""
        _check_choice("sampler", self.sampler, [s.value for s in Sampler])
        if isinstance(self.prior_inclusion, str):
            if self.prior_inclusion not in ("opt", "eb"):
                raise ValueError(
                    "prior_inclusion must be 'opt', 'eb' or a float in (0, 1), "
                    f"got {self.prior_inclusion!r}"
                )
        else:
            _check_real("prior_inclusion", self.prior_inclusion, low=0.0, high=1.0)
        _check_real("log_prior_inclusion", self.log_prior_inclusion, high=0.0, allow_none=True)
        _check_real("prior_variance", self.prior_variance, low=0.0)
        _check_real("temperature", self.temperature, low=0.0)
        _check_real("init_inclusion", self.init_inclusion, low=0.0, high=1.0)
        _check_real("init_mu_range", self.init_mu_range, low=0.0, allow_none=True)

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

    def _resolve_log_lambda(self, n: int, p: int, n_out: int) -> float:
        if self.log_prior_inclusion is not None:
            return resolve_log_inclusion(log_inclusion=self.log_prior_inclusion)
        if self.prior_inclusion == "eb":
            return math.log(0.5)  # the starting value; fitted with the rest
        if isinstance(self.prior_inclusion, str):
            return mlp_log_lambda_opt(p, _hidden_sizes(self.hidden_layer_sizes), n_out, n)
        return resolve_log_inclusion(inclusion=float(self.prior_inclusion))

    def _build_module(self, n_features: int, n_out: int, gen: torch.Generator) -> torch.nn.Module:
        """The network to fit; subclasses (the baselines' estimators) override this."""
        return SpikeSlabMLP(
            n_features,
            _hidden_sizes(self.hidden_layer_sizes),
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
        self.log_lambda_ = self._resolve_log_lambda(n, p, n_out)
        self.lambda_ = math.exp(self.log_lambda_)

    def _summarize(self, model: torch.nn.Module) -> None:
        """Fitted summaries of the posterior (SVBNN: inclusion probabilities, selection)."""
        self.inclusion_probs_ = [
            layer.inclusion_probs()["weight"].cpu().numpy() for layer in spike_slab_layers(model)
        ]
        self.sparsity_ = float(sparsity(model))
        self.density_ = float(density(model))
        self.unresolved_ = float(unresolved_fraction(model))
        self.feature_inclusion_ = feature_inclusion(model)
        # Selection from the same posterior the predictions use (see feature_inclusion).
        self.selected_features_ = np.flatnonzero(self.feature_inclusion_ > 0.5)

    def _kept_weight_masks(self) -> list[NDArray[np.bool_]]:
        """Per layer, the weights the fitted network keeps (SVBNN: ``phi > 0.5``)."""
        return [p > 0.5 for p in self.inclusion_probs_]

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
        """``max_iter`` in epochs; ``"auto"``: :func:`svbnn.convergence.default_max_steps`."""
        if isinstance(self.max_iter, str):
            batch = min(int(self.batch_size), n)
            return default_max_steps(n, batch) // math.ceil(n / batch)
        return int(self.max_iter)

    def _backend_for(self, n_params: int) -> str | None:
        """The kernel backend of this fit (``None``: leave the process's as it is).

        ``"auto"`` compiles only networks of at least ``AUTO_MIN_NUMEL`` parameters: on a
        small one the compiled whole-network step saves about 0.3 ms, while compiling it
        costs 30 s to minutes on first use (measured on the 2-core development machine,
        1 thread: 4.5 minutes under load for a 16-50-1 network), which a fit of a
        few thousand steps never earns back.
        """
        choice = getattr(self, "kernel_backend", None)
        if choice is None:
            return None
        if _compile_failed or choice == "eager":
            return "eager"
        if choice == "auto" and n_params < AUTO_MIN_NUMEL:
            return "eager"
        return str(choice)

    def _fit_module(
        self,
        X: NDArray[Any],
        target: Tensor,
        n_out: int,
        make_likelihood: Any,
        seeds: _SeedSource,
    ) -> nn.Module:
        """Train; sets the fitted attributes and returns the likelihood as fitted.

        ``make_likelihood()`` builds a fresh likelihood (one with a learnable noise level
        is trained with the network).
        """
        global _compile_failed
        n, p = X.shape
        Xt = self._tensor(X, "X")
        seed = seeds.seed()
        self._prepare(n, p, n_out)
        batch = min(int(self.batch_size), n)
        n_batches = math.ceil(n / batch)
        epochs = self._epoch_budget(n)
        tol = getattr(self, "tol", None)
        eb = getattr(self, "prior_inclusion", None) == "eb" and self.log_prior_inclusion is None

        def run(kernels: str | None) -> tuple[nn.Module, nn.Module, History, ConvergenceMonitor]:
            gen = torch.Generator(device=self.device)
            gen.manual_seed(seed)
            model = self._build_module(p, n_out, gen)
            lik = make_likelihood()
            monitor = ConvergenceMonitor(
                n_batches,
                tol=0.0 if tol is None else float(tol),
                n_iter_no_change=int(getattr(self, "n_iter_no_change", 10)),
                enabled=tol is not None,
            )
            callbacks: list[Any] = [monitor]
            if eb:
                callbacks.insert(0, _empirical_bayes_inclusion)
            fitted: nn.Module = model
            w = float(getattr(self, "kl_weight", 1.0))
            objective: Objective = elbo_objective(lik, n, int(self.n_mc_train), w)
            if any(q.requires_grad for q in lik.parameters()):
                # A learned noise level is one more parameter of the same optimiser.
                fitted = nn.ModuleDict({"net": model, "likelihood": lik})

                def learned(m: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
                    return negative_elbo(model, lik, x, y, n, int(self.n_mc_train), w)

                objective = learned

            scope = backend_scope(kernels) if kernels is not None else _no_scope()
            with scope, _diverged_names(self):
                history = train(
                    fitted,
                    Xt,
                    target,
                    objective=objective,
                    epochs=epochs,
                    batch_size=batch,
                    lr=float(self.learning_rate_init),
                    optimizer=self.optimizer,
                    generator=gen,
                    verbose=bool(self.verbose),
                    callbacks=callbacks,
                    track_sparsity=True,
                )
            return model, lik, history, monitor

        n_params = sum((a + 1) * b for a, b in _layer_pairs(p, self.hidden_layer_sizes, n_out))
        kernels = self._backend_for(n_params)
        try:
            model, lik, history, monitor = run(kernels)
        except Exception as err:
            if kernels in (None, "eager") or not _is_compile_error(err):
                raise
            _compile_failed = True
            logger.warning(
                "svbnn: the compiled kernels could not be built (%s: %s); using the eager "
                "kernels from now on in this process",
                type(err).__name__,
                str(err).splitlines()[0] if str(err) else "",
            )
            model, lik, history, monitor = run("eager")
        # Generators are process-local state: keep the fitted estimator picklable.
        set_generator(model, None)
        self.module_ = model
        self.history_: History = history
        self.n_iter_ = len(history.epoch)
        self.converged_ = bool(monitor.converged)
        self._budget_exhausted_ = (
            tol is not None and not monitor.converged and self.n_iter_ >= epochs
        )
        self.loss_curve_ = list(history.loss)
        self._predict_seed_ = seeds.seed()
        if eb:
            self.log_lambda_ = float(next(b for b in model.buffers()).reshape(-1)[0])
            self.lambda_ = math.exp(self.log_lambda_)
        self._summarize(model)
        return lik

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
        warnings.warn(
            f"{type(self).__name__} stopped at the budget of {self.n_iter_} epochs before the "
            f"ELBO and the gates converged (tol={self.tol!r}, n_iter_no_change="
            f"{self.n_iter_no_change!r}){gates}. The selection (selected_features_, "
            "export_sparse) may still change with more training: raise max_iter or "
            "learning_rate_init.",
            ConvergenceWarning,
            stacklevel=3,
        )

    def _warn_if_collapsed(self, constant: bool, what: str) -> None:
        """CollapseWarning for a fit that selected nothing or predicts a constant."""
        reasons = []
        fi = getattr(self, "feature_inclusion_", None)
        resolved = getattr(self, "unresolved_", 0.0) <= _UNRESOLVED_EXPORT
        if resolved and fi is not None and fi.size and not np.any(fi > 0.5):
            reasons.append(f"no input selected (largest feature_inclusion_ {fi.max():.2g})")
        if constant:
            reasons.append(what)
        if reasons:
            lam = getattr(self, "lambda_", None)
            # The baselines have no prior inclusion: name lambda only where there is one.
            cause = (
                f"The prior (lambda = {lam:.3g}) pruned what the data support, or the data "
                "carry no signal; try prior_inclusion='eb' or a larger prior_inclusion, more "
                "data, or check X and y."
                if lam is not None and math.isfinite(lam)
                else "The data carry no signal the model found; train longer (max_iter), or "
                "check X and y."
            )
            warnings.warn(
                f"{type(self).__name__}: the fit collapsed: {'; '.join(reasons)}. {cause}",
                CollapseWarning,
                stacklevel=3,
            )

    def _warn_if_degenerate(self, bad_fit: str | None) -> None:
        """Warn about fits that return numbers but are useless (nothing silently wrong)."""
        if bad_fit is not None:
            warnings.warn(
                f"{type(self).__name__}: {bad_fit}; the fit diverged or did not converge. "
                f"Lower learning_rate_init (now {self.learning_rate_init!r}) or the initial "
                "weight range, raise max_iter, or standardise the data.",
                UserWarning,
                stacklevel=3,
            )
        # With unresolved gates the posterior still predicts through edges of phi < 0.5
        # (the ConvergenceWarning says so): the median model's paths tell nothing yet.
        resolved = getattr(self, "unresolved_", 0.0) <= _UNRESOLVED_EXPORT
        if resolved and not _reaches_output(self._kept_weight_masks()):
            warnings.warn(
                f"{type(self).__name__}: the fitted network keeps no path from any input to "
                "the output (every path has a pruned weight), so it predicts a constant. "
                f"learning_rate_init (now {self.learning_rate_init!r}) is likely too high; "
                "otherwise the data may carry no signal the prior lets through.",
                CollapseWarning,
                stacklevel=3,
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

    def export_sparse(self, storage: str = "sparse") -> tuple[torch.nn.Module, ExportReport]:
        """The median model: edges with ``phi > 0.5`` and weights ``mu``, as a plain module.

        It predicts like the posterior once the gates are resolved (``phi`` near 0 or 1);
        warns (``UserWarning``) when more than 1% of them are not. A regressor's module
        outputs in the units of ``y``.
        """
        check_is_fitted(self, "module_")
        unresolved = float(unresolved_fraction(self.module_))
        if unresolved > _UNRESOLVED_EXPORT:
            warnings.warn(
                f"{100 * unresolved:.1f}% of the gates are unresolved (phi in (0.1, 0.9)): "
                "the exported median model may predict unlike the posterior. Fit longer "
                "(see converged_ and history_.unresolved).",
                UserWarning,
                stacklevel=2,
            )
        return export_sparse(self.module_, storage=storage)


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
