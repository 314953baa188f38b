"""scikit-learn estimators for the Bayesian baselines: VBNN, sparse VD and HS-BNN.

They share the interface and the training harness of :class:`svbnn.SVBNNRegressor` /
:class:`svbnn.SVBNNClassifier` (same loop, same per-datum negative ELBO, same Monte Carlo
prediction ``f_H`` with ``H = n_samples_predict`` posterior draws, same seeding), and differ
only in the network they fit:

* ``VBNN*``: Bayes by Backprop, :class:`svbnn.nn.gaussian.GaussianMLP`;
* ``VD*``: sparse variational dropout, :class:`svbnn.nn.dropout.VariationalDropoutMLP`;
* ``HSBNN*``: horseshoe BNN, :class:`svbnn.nn.horseshoe.HorseshoeMLP`.

Fitted summaries replace the spike-and-slab ones: ``kept_masks_`` (per layer, the weights
the method keeps), ``sparsity_`` (the fraction of weights and biases kept, a density like
the paper's ``sum(phi)/T``) and ``selected_features_`` (inputs with a kept first-layer
weight; ``None`` for HS-BNN, which prunes nodes, not inputs).

The module-level helpers :func:`kept_masks`, :func:`kept_fraction` and
:func:`kept_features` compute the same summaries for any model built from these layers,
replicated ones included.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from ._estimator_checks import _DTYPES, _check_real, _hidden_sizes
from .estimators import SVBNNClassifier, SVBNNRegressor
from .nn.base import VariationalLayer, variational_layers
from .nn.dropout import VariationalDropoutMLP
from .nn.gaussian import GaussianMLP
from .nn.horseshoe import HorseshoeLinear, HorseshoeMLP
from .selection import ExportReport

__all__ = [
    "HSBNNClassifier",
    "HSBNNRegressor",
    "VBNNClassifier",
    "VBNNRegressor",
    "VDClassifier",
    "VDRegressor",
    "kept_features",
    "kept_fraction",
    "kept_masks",
]


# -- summaries for any baseline model ---------------------------------------------------
def _mask_layers(model: nn.Module) -> list[VariationalLayer]:
    layers = [m for m in variational_layers(model) if hasattr(m, "kept_mask")]
    if not layers:
        raise ValueError("model has no layers with a kept_mask()")
    return layers


def kept_masks(model: nn.Module) -> list[tuple[Tensor, Tensor | None]]:
    """Per layer, the weights and biases the method keeps (bool).

    Node pruning propagates: when a layer with ``node_kept()`` (HS-BNN) feeds the next
    linear layer, the next layer's weights out of a pruned node are not kept either.

    Returns
    -------
    list of (weight_mask, bias_mask)
        Weight-shaped (with a leading ``R`` when replicated); ``bias_mask`` is ``(out,)``
        / ``(R, out)`` or ``None``.
    """
    out: list[tuple[Tensor, Tensor | None]] = []
    prev: VariationalLayer | None = None
    for layer in _mask_layers(model):
        w = layer.kept_mask()  # type: ignore[operator]
        b = layer.kept_bias_mask()  # type: ignore[operator]
        if (
            isinstance(prev, HorseshoeLinear)
            and isinstance(layer, HorseshoeLinear)
            and prev.out_features == layer.fan_in
        ):
            w = w & prev.node_kept().unsqueeze(-2)
        out.append((w, b))
        prev = layer
    return out


def kept_fraction(model: nn.Module) -> Tensor:
    """Fraction of weights and biases kept (a density; scalar, or ``(R,)`` replicated)."""
    layers = _mask_layers(model)
    replicated = layers[0].n_replicates is not None
    kept: Tensor | None = None
    total = 0
    for layer, (w, b) in zip(layers, kept_masks(model), strict=True):
        dims = tuple(range(1 if replicated else 0, w.dim()))
        k = w.sum(dim=dims, dtype=torch.float64)
        if b is not None:
            k = k + b.sum(dim=tuple(range(1 if replicated else 0, b.dim())), dtype=torch.float64)
        kept = k if kept is None else kept + k
        total += layer.n_params()
    assert kept is not None
    return kept / total


def kept_features(model: nn.Module) -> NDArray[np.int64] | list[NDArray[np.int64]] | None:
    """Inputs with at least one kept first-layer weight (sorted 0-based indices).

    A list of arrays for a replicated model; ``None`` when the first layer prunes nodes
    rather than weights (HS-BNN), for which variable selection is not defined.
    """
    first = _mask_layers(model)[0]
    if isinstance(first, HorseshoeLinear):
        return None
    w, _ = kept_masks(model)[0]
    if w.dim() not in (2, 3):
        raise ValueError("variable selection needs a linear first layer")
    keep = w.any(dim=-2).cpu().numpy()
    if first.n_replicates is None:
        return np.flatnonzero(keep)
    return [np.flatnonzero(k) for k in keep]


# -- estimators ---------------------------------------------------------------------------
class _BaselineMixin:
    """Fitting logic of the baselines' estimators; sits before the SVBNN estimator in the MRO.

    Training, seeding and prediction are the SVBNN estimators'; only the network
    (``_build_module``), the prior settings (``_prepare``, none) and the fitted summaries
    (``_summarize``: kept masks instead of inclusion probabilities) differ.
    """

    # Declared for mypy; set by the concrete estimators' __init__.
    hidden_layer_sizes: int | tuple[int, ...]
    activation: str
    batch_size: int
    learning_rate_init: float
    max_iter: int
    optimizer: str
    n_mc_train: int
    n_samples_predict: int
    dtype: str
    random_state: Any
    device: str
    verbose: bool

    # The baselines keep the paper's setting: y as given, noise_std known.
    _scales_target = False

    def _build_module(self, n_features: int, n_out: int, gen: torch.Generator) -> nn.Module:
        raise NotImplementedError

    def _prepare(self, n: int, p: int, n_out: int) -> None:
        """The baselines have no data-dependent prior settings."""

    def _check_model_params(self) -> None:
        """Each baseline's own settings, checked before anything is fitted."""
        # (name, lower bound or None for any finite value, whether None is allowed)
        for name, low, none_ok in (
            ("prior_variance", 0.0, False),
            ("init_rho", None, False),
            ("init_mu_range", 0.0, True),
            ("threshold", None, False),
            ("init_log_sigma2", None, False),
            ("init_theta_range", 0.0, True),
            ("local_scale", 0.0, False),
            ("global_scale", 0.0, False),
            ("output_scale", 0.0, False),
        ):
            if hasattr(self, name):
                _check_real(name, getattr(self, name), low=low, allow_none=none_ok)
        if hasattr(self, "prune_ratio"):
            _check_real("prune_ratio", self.prune_ratio, low=0.0, high=1.0, low_inclusive=True)

    def _kept_weight_masks(self) -> list[NDArray[np.bool_]]:
        return list(self.kept_masks_)

    def _layer_common(self, gen: torch.Generator) -> dict[str, Any]:
        return {"generator": gen, "device": self.device, "dtype": _DTYPES[self.dtype]}

    def _summarize(self, model: nn.Module) -> None:
        self.kept_masks_ = [w.cpu().numpy() for w, _ in kept_masks(model)]
        self.sparsity_ = float(kept_fraction(model))
        self.density_ = self.sparsity_
        self.selected_features_ = kept_features(model)

    def export_sparse(self, storage: str = "sparse") -> tuple[nn.Module, ExportReport]:
        """Not available for the baselines (their networks are not spike-and-slab)."""
        raise NotImplementedError("export_sparse is only defined for the spike-and-slab estimators")


class _VBNNBase(_BaselineMixin):
    def __init__(
        self,
        hidden_layer_sizes: int | tuple[int, ...] = (7, 7, 7),
        activation: str = "relu",
        prior_variance: float = 2.0,
        init_rho: float = -6.0,
        init_mu_range: float | None = None,
        batch_size: int = 512,
        learning_rate_init: float = 5e-3,
        max_iter: int = 7000,
        optimizer: str = "adam",
        n_mc_train: int = 1,
        n_samples_predict: int = 30,
        dtype: str = "float64",
        random_state: int | np.random.RandomState | np.random.Generator | None = None,
        device: str = "cpu",
        verbose: bool = False,
    ) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.prior_variance = prior_variance
        self.init_rho = init_rho
        self.init_mu_range = init_mu_range
        self.batch_size = batch_size
        self.learning_rate_init = learning_rate_init
        self.max_iter = max_iter
        self.optimizer = optimizer
        self.n_mc_train = n_mc_train
        self.n_samples_predict = n_samples_predict
        self.dtype = dtype
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    def _build_module(self, n_features: int, n_out: int, gen: torch.Generator) -> nn.Module:
        return GaussianMLP(
            n_features,
            _hidden_sizes(self.hidden_layer_sizes),
            n_out,
            activation=self.activation,
            prior_variance=self.prior_variance,
            init_rho=self.init_rho,
            init_mu_range=self.init_mu_range,
            **self._layer_common(gen),
        )


class VBNNClassifier(_VBNNBase, SVBNNClassifier):  # type: ignore[misc]
    """Bayes-by-Backprop classifier (VBNN; Blundell et al., 2015): mean-field Gaussian
    posterior, ``N(0, prior_variance)`` prior on every weight and bias.

    Extra parameters: ``prior_variance`` (``sigma_0^2``, default 2), ``init_rho``,
    ``init_mu_range`` (initial ``rho`` and half-range of the initial means).

    Common parameters (as :class:`svbnn.SVBNNRegressor`): ``hidden_layer_sizes``,
    ``activation``, ``batch_size``, ``learning_rate_init``, ``max_iter`` (epochs),
    ``optimizer``, ``n_mc_train``, ``n_samples_predict`` (``H``), ``dtype`` (default float64),
    ``random_state``, ``device``, ``verbose``.

    Attributes
    ----------
    module_ : nn.Module
    kept_masks_ : list of ndarray
        Per layer, the weights kept (bool, weight-shaped).
    sparsity_, density_ : float
        Fraction of weights and biases kept.
    selected_features_ : ndarray of int or None
    history_ : History
    """


class VBNNRegressor(_VBNNBase, SVBNNRegressor):  # type: ignore[misc]
    """Bayes-by-Backprop regressor (VBNN), Gaussian likelihood with known ``noise_std``.

    Extra parameters: ``prior_variance``, ``init_rho``, ``init_mu_range`` as for
    :class:`VBNNClassifier`; ``noise_std``.

    Common parameters (as :class:`svbnn.SVBNNRegressor`): ``hidden_layer_sizes``,
    ``activation``, ``batch_size``, ``learning_rate_init``, ``max_iter`` (epochs),
    ``optimizer``, ``n_mc_train``, ``n_samples_predict`` (``H``), ``dtype`` (default float64),
    ``random_state``, ``device``, ``verbose``.

    Attributes
    ----------
    module_ : nn.Module
    kept_masks_ : list of ndarray
        Per layer, the weights kept (bool, weight-shaped).
    sparsity_, density_ : float
        Fraction of weights and biases kept.
    selected_features_ : ndarray of int or None
    history_ : History
    """

    def __init__(
        self,
        hidden_layer_sizes: int | tuple[int, ...] = (7, 7, 7),
        activation: str = "relu",
        prior_variance: float = 2.0,
        noise_std: float = 1.0,
        init_rho: float = -6.0,
        init_mu_range: float | None = None,
        batch_size: int = 512,
        learning_rate_init: float = 5e-3,
        max_iter: int = 7000,
        optimizer: str = "adam",
        n_mc_train: int = 1,
        n_samples_predict: int = 30,
        dtype: str = "float64",
        random_state: int | np.random.RandomState | np.random.Generator | None = None,
        device: str = "cpu",
        verbose: bool = False,
    ) -> None:
        _VBNNBase.__init__(
            self,
            hidden_layer_sizes=hidden_layer_sizes,
            activation=activation,
            prior_variance=prior_variance,
            init_rho=init_rho,
            init_mu_range=init_mu_range,
            batch_size=batch_size,
            learning_rate_init=learning_rate_init,
            max_iter=max_iter,
            optimizer=optimizer,
            n_mc_train=n_mc_train,
            n_samples_predict=n_samples_predict,
            dtype=dtype,
            random_state=random_state,
            device=device,
            verbose=verbose,
        )
        self.noise_std = noise_std


class _VDBase(_BaselineMixin):
    def __init__(
        self,
        hidden_layer_sizes: int | tuple[int, ...] = (7, 7, 7),
        activation: str = "relu",
        threshold: float = 3.0,
        init_log_sigma2: float = -10.0,
        init_theta_range: float | None = None,
        batch_size: int = 512,
        learning_rate_init: float = 5e-3,
        max_iter: int = 7000,
        optimizer: str = "adam",
        n_mc_train: int = 1,
        n_samples_predict: int = 30,
        dtype: str = "float64",
        random_state: int | np.random.RandomState | np.random.Generator | None = None,
        device: str = "cpu",
        verbose: bool = False,
    ) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.threshold = threshold
        self.init_log_sigma2 = init_log_sigma2
        self.init_theta_range = init_theta_range
        self.batch_size = batch_size
        self.learning_rate_init = learning_rate_init
        self.max_iter = max_iter
        self.optimizer = optimizer
        self.n_mc_train = n_mc_train
        self.n_samples_predict = n_samples_predict
        self.dtype = dtype
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    def _build_module(self, n_features: int, n_out: int, gen: torch.Generator) -> nn.Module:
        return VariationalDropoutMLP(
            n_features,
            _hidden_sizes(self.hidden_layer_sizes),
            n_out,
            activation=self.activation,
            threshold=self.threshold,
            init_log_sigma2=self.init_log_sigma2,
            init_theta_range=self.init_theta_range,
            **self._layer_common(gen),
        )


class VDClassifier(_VDBase, SVBNNClassifier):  # type: ignore[misc]
    """Sparse variational dropout classifier (VD; Molchanov, Ashukha & Vetrov, 2017).

    Extra parameters: ``threshold`` (prune weights with ``log alpha`` above it, default 3),
    ``init_log_sigma2`` (default -10), ``init_theta_range``. Predictions average posterior
    draws of the pruned network (weights of ``log alpha > threshold`` set to zero).

    Common parameters (as :class:`svbnn.SVBNNRegressor`): ``hidden_layer_sizes``,
    ``activation``, ``batch_size``, ``learning_rate_init``, ``max_iter`` (epochs),
    ``optimizer``, ``n_mc_train``, ``n_samples_predict`` (``H``), ``dtype`` (default float64),
    ``random_state``, ``device``, ``verbose``.

    Attributes
    ----------
    module_ : nn.Module
    kept_masks_ : list of ndarray
        Per layer, the weights kept (bool, weight-shaped).
    sparsity_, density_ : float
        Fraction of weights and biases kept.
    selected_features_ : ndarray of int or None
    history_ : History
    """


class VDRegressor(_VDBase, SVBNNRegressor):  # type: ignore[misc]
    """Sparse variational dropout regressor (VD), Gaussian likelihood with known ``noise_std``.

    Extra parameters as :class:`VDClassifier`, plus ``noise_std``.

    Common parameters (as :class:`svbnn.SVBNNRegressor`): ``hidden_layer_sizes``,
    ``activation``, ``batch_size``, ``learning_rate_init``, ``max_iter`` (epochs),
    ``optimizer``, ``n_mc_train``, ``n_samples_predict`` (``H``), ``dtype`` (default float64),
    ``random_state``, ``device``, ``verbose``.

    Attributes
    ----------
    module_ : nn.Module
    kept_masks_ : list of ndarray
        Per layer, the weights kept (bool, weight-shaped).
    sparsity_, density_ : float
        Fraction of weights and biases kept.
    selected_features_ : ndarray of int or None
    history_ : History
    """

    def __init__(
        self,
        hidden_layer_sizes: int | tuple[int, ...] = (7, 7, 7),
        activation: str = "relu",
        threshold: float = 3.0,
        noise_std: float = 1.0,
        init_log_sigma2: float = -10.0,
        init_theta_range: float | None = None,
        batch_size: int = 512,
        learning_rate_init: float = 5e-3,
        max_iter: int = 7000,
        optimizer: str = "adam",
        n_mc_train: int = 1,
        n_samples_predict: int = 30,
        dtype: str = "float64",
        random_state: int | np.random.RandomState | np.random.Generator | None = None,
        device: str = "cpu",
        verbose: bool = False,
    ) -> None:
        _VDBase.__init__(
            self,
            hidden_layer_sizes=hidden_layer_sizes,
            activation=activation,
            threshold=threshold,
            init_log_sigma2=init_log_sigma2,
            init_theta_range=init_theta_range,
            batch_size=batch_size,
            learning_rate_init=learning_rate_init,
            max_iter=max_iter,
            optimizer=optimizer,
            n_mc_train=n_mc_train,
            n_samples_predict=n_samples_predict,
            dtype=dtype,
            random_state=random_state,
            device=device,
            verbose=verbose,
        )
        self.noise_std = noise_std


class _HSBNNBase(_BaselineMixin):
    def __init__(
        self,
        hidden_layer_sizes: int | tuple[int, ...] = (7, 7, 7),
        activation: str = "relu",
        local_scale: float = 1.0,
        global_scale: float = 1.0,
        output_scale: float = 1.0,
        prune_ratio: float = 0.1,
        init_rho: float = -6.0,
        init_mu_range: float | None = None,
        batch_size: int = 512,
        learning_rate_init: float = 5e-3,
        max_iter: int = 7000,
        optimizer: str = "adam",
        n_mc_train: int = 1,
        n_samples_predict: int = 30,
        dtype: str = "float64",
        random_state: int | np.random.RandomState | np.random.Generator | None = None,
        device: str = "cpu",
        verbose: bool = False,
    ) -> None:
        self.hidden_layer_sizes = hidden_layer_sizes
        self.activation = activation
        self.local_scale = local_scale
        self.global_scale = global_scale
        self.output_scale = output_scale
        self.prune_ratio = prune_ratio
        self.init_rho = init_rho
        self.init_mu_range = init_mu_range
        self.batch_size = batch_size
        self.learning_rate_init = learning_rate_init
        self.max_iter = max_iter
        self.optimizer = optimizer
        self.n_mc_train = n_mc_train
        self.n_samples_predict = n_samples_predict
        self.dtype = dtype
        self.random_state = random_state
        self.device = device
        self.verbose = verbose

    def _build_module(self, n_features: int, n_out: int, gen: torch.Generator) -> nn.Module:
        return HorseshoeMLP(
            n_features,
            _hidden_sizes(self.hidden_layer_sizes),
            n_out,
            activation=self.activation,
            local_scale=self.local_scale,
            global_scale=self.global_scale,
            output_scale=self.output_scale,
            prune_ratio=self.prune_ratio,
            init_rho=self.init_rho,
            init_mu_range=self.init_mu_range,
            **self._layer_common(gen),
        )


class HSBNNClassifier(_HSBNNBase, SVBNNClassifier):  # type: ignore[misc]
    """Horseshoe BNN classifier (HS-BNN; Ghosh, Yao & Doshi-Velez, 2018), node-wise shrinkage.

    Extra parameters: ``local_scale`` (``b_0``), ``global_scale`` (``b_g``) and
    ``output_scale`` (``b_kappa``) of the half-Cauchy priors (default 1, as the authors'
    public code); ``prune_ratio`` (node-pruning rule, see :mod:`svbnn.nn.horseshoe`);
    ``init_rho``, ``init_mu_range``. ``selected_features_`` is ``None``: HS-BNN prunes
    nodes, not inputs.

    Common parameters (as :class:`svbnn.SVBNNRegressor`): ``hidden_layer_sizes``,
    ``activation``, ``batch_size``, ``learning_rate_init``, ``max_iter`` (epochs),
    ``optimizer``, ``n_mc_train``, ``n_samples_predict`` (``H``), ``dtype`` (default float64),
    ``random_state``, ``device``, ``verbose``.

    Attributes
    ----------
    module_ : nn.Module
    kept_masks_ : list of ndarray
        Per layer, the weights kept (bool, weight-shaped).
    sparsity_, density_ : float
        Fraction of weights and biases kept.
    selected_features_ : ndarray of int or None
    history_ : History
    """


class HSBNNRegressor(_HSBNNBase, SVBNNRegressor):  # type: ignore[misc]
    """Horseshoe BNN regressor (HS-BNN), Gaussian likelihood with known ``noise_std``.

    Extra parameters as :class:`HSBNNClassifier`, plus ``noise_std``.

    Common parameters (as :class:`svbnn.SVBNNRegressor`): ``hidden_layer_sizes``,
    ``activation``, ``batch_size``, ``learning_rate_init``, ``max_iter`` (epochs),
    ``optimizer``, ``n_mc_train``, ``n_samples_predict`` (``H``), ``dtype`` (default float64),
    ``random_state``, ``device``, ``verbose``.

    Attributes
    ----------
    module_ : nn.Module
    kept_masks_ : list of ndarray
        Per layer, the weights kept (bool, weight-shaped).
    sparsity_, density_ : float
        Fraction of weights and biases kept.
    selected_features_ : ndarray of int or None
    history_ : History
    """

    def __init__(
        self,
        hidden_layer_sizes: int | tuple[int, ...] = (7, 7, 7),
        activation: str = "relu",
        local_scale: float = 1.0,
        global_scale: float = 1.0,
        output_scale: float = 1.0,
        noise_std: float = 1.0,
        prune_ratio: float = 0.1,
        init_rho: float = -6.0,
        init_mu_range: float | None = None,
        batch_size: int = 512,
        learning_rate_init: float = 5e-3,
        max_iter: int = 7000,
        optimizer: str = "adam",
        n_mc_train: int = 1,
        n_samples_predict: int = 30,
        dtype: str = "float64",
        random_state: int | np.random.RandomState | np.random.Generator | None = None,
        device: str = "cpu",
        verbose: bool = False,
    ) -> None:
        _HSBNNBase.__init__(
            self,
            hidden_layer_sizes=hidden_layer_sizes,
            activation=activation,
            local_scale=local_scale,
            global_scale=global_scale,
            output_scale=output_scale,
            prune_ratio=prune_ratio,
            init_rho=init_rho,
            init_mu_range=init_mu_range,
            batch_size=batch_size,
            learning_rate_init=learning_rate_init,
            max_iter=max_iter,
            optimizer=optimizer,
            n_mc_train=n_mc_train,
            n_samples_predict=n_samples_predict,
            dtype=dtype,
            random_state=random_state,
            device=device,
            verbose=verbose,
        )
        self.noise_std = noise_std
