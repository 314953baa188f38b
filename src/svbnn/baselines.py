"""scikit-learn estimators for the Bayesian baselines: VBNN, sparse VD and HS-BNN.

Each is a family piece on the task pieces and the shared variational estimator that
:class:`svbnn.SVBNNRegressor` / :class:`svbnn.SVBNNClassifier` are built on: the same
common parameters with the same defaults (learned noise, ``y`` standardised,
``max_iter="auto"`` with the stopping rule, float32), the same loop, per-datum negative
ELBO, Monte Carlo prediction ``f_H`` with ``H = n_samples_predict`` posterior draws and
seeding. They differ only in the network they fit, its parameters and its summaries:

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

The paper's setting of the baselines is reachable by parameters: a known ``noise_std``, a
fixed number of epochs (``max_iter=7000, tol=None``), ``dtype="float64"``, and its
network, ``hidden_layer_sizes=(7, 7, 7), batch_size=512, learning_rate_init=5e-3``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from ._estimator_base import (
    _COMMON_ATTRIBUTES,
    _COMMON_PARAMETERS,
    _fill_doc,
    _VariationalEstimator,
)
from ._estimator_checks import _DTYPES, _check_real, _hidden_sizes
from ._estimator_tasks import (
    _CLASSIFICATION_ATTRIBUTES,
    _REGRESSION_ATTRIBUTES,
    _REGRESSION_PARAMETERS,
    CLASSIFIER_PREDICT_DRAWS,
    _Classification,
    _Regression,
)
from .nn.base import VariationalLayer, variational_layers
from .nn.dropout import VariationalDropoutMLP
from .nn.gaussian import GaussianMLP
from .nn.horseshoe import HorseshoeLinear, HorseshoeMLP
from .priors import check_prior_variance

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
@dataclass(eq=False, repr=False, kw_only=True)
class _BaselineFamily(_VariationalEstimator):
    """What the baselines' families share: summaries from the layers' kept masks, and the
    checks of their own real-valued parameters (listed in ``_real_params``)."""

    # (name, lower bound or None for any finite value, whether None is allowed)
    _real_params: ClassVar[tuple[tuple[str, float | None, bool], ...]] = ()

    def _check_family_params(self) -> None:
        for name, low, none_ok in self._real_params:
            if name == "prior_variance":
                check_prior_variance(self.prior_variance)
            else:
                _check_real(name, getattr(self, name), low=low, allow_none=none_ok)

    def _layer_common(self, gen: torch.Generator) -> dict[str, Any]:
        return {"generator": gen, "device": self.device, "dtype": _DTYPES[self.dtype]}

    def _summarize(self, model: nn.Module) -> None:
        """``kept_masks_``, ``sparsity_`` (= ``density_``) and ``selected_features_``."""
        self.kept_masks_ = [w.cpu().numpy() for w, _ in kept_masks(model)]
        self.sparsity_ = float(kept_fraction(model))
        self.density_ = self.sparsity_
        self.selected_features_ = kept_features(model)

    def _kept_weight_masks(self) -> list[NDArray[np.bool_]]:
        return list(self.kept_masks_)


_BASELINE_ATTRIBUTES = """\
module_ : torch.nn.Module
    The fitted network (a regressor's on standardised ``y``).
kept_masks_ : list of ndarray
    Per layer, the weights kept (bool, weight-shaped).
sparsity_, density_ : float
    Fraction of weights and biases kept.
selected_features_ : ndarray of int or None
    Inputs with a kept first-layer weight (``None`` for HS-BNN)."""

_BASELINE_WARNS = """\
sklearn.exceptions.ConvergenceWarning
    The budget ran out before the stopping rule fired.
CollapseWarning
    A fit that explains nothing (as :class:`svbnn.SVBNNRegressor`; recorded in
    ``collapsed_``).
InputScaleWarning
    The training inputs are far from unit scale (as :class:`svbnn.SVBNNRegressor`)."""


@dataclass(eq=False, repr=False, kw_only=True)
class _VBNNFamily(_BaselineFamily):
    """Bayes by Backprop: :class:`~svbnn.nn.gaussian.GaussianMLP`."""

    prior_variance: float = 2.0
    init_rho: float = -6.0
    init_mu_range: float | None = None

    _real_params = (
        ("prior_variance", 0.0, False),
        ("init_rho", None, False),
        ("init_mu_range", 0.0, True),
    )

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


_VBNN_PARAMETERS = """\
prior_variance : float, default 2.0
    ``sigma_0^2`` of the ``N(0, sigma_0^2)`` prior on every weight and bias, in
    ``[1e-12, 1e30]`` (:data:`svbnn.priors.PRIOR_VARIANCE_RANGE`).
init_rho : float, default -6.0
    Initial ``rho`` (posterior sd ``softplus(rho)``).
init_mu_range : float, optional
    Half-range of the initial means (``None``: ``1/sqrt(fan_in)``)."""


@dataclass(eq=False, repr=False, kw_only=True)
class _VDFamily(_BaselineFamily):
    """Sparse variational dropout: :class:`~svbnn.nn.dropout.VariationalDropoutMLP`."""

    threshold: float = 3.0
    init_log_sigma2: float = -10.0
    init_theta_range: float | None = None

    _real_params = (
        ("threshold", None, False),
        ("init_log_sigma2", None, False),
        ("init_theta_range", 0.0, True),
    )

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


_VD_PARAMETERS = """\
threshold : float, default 3.0
    Prune weights with ``log alpha`` above it; predictions average posterior draws of the
    pruned network.
init_log_sigma2 : float, default -10.0
    Initial ``log sigma^2`` (the authors' value).
init_theta_range : float, optional
    Half-range of the initial means (``None``: ``1/sqrt(fan_in)``)."""


@dataclass(eq=False, repr=False, kw_only=True)
class _HSBNNFamily(_BaselineFamily):
    """Horseshoe BNN: :class:`~svbnn.nn.horseshoe.HorseshoeMLP` (node-wise shrinkage)."""

    local_scale: float = 1.0
    global_scale: float = 1.0
    output_scale: float = 1.0
    prune_ratio: float = 0.1
    init_rho: float = -6.0
    init_mu_range: float | None = None

    _real_params = (
        ("local_scale", 0.0, False),
        ("global_scale", 0.0, False),
        ("output_scale", 0.0, False),
        ("init_rho", None, False),
        ("init_mu_range", 0.0, True),
    )

    def _check_family_params(self) -> None:
        super()._check_family_params()
        _check_real("prune_ratio", self.prune_ratio, low=0.0, high=1.0, low_inclusive=True)

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


_HSBNN_PARAMETERS = """\
local_scale, global_scale, output_scale : float, default 1.0
    ``b_0``, ``b_g`` and ``b_kappa`` of the half-Cauchy priors (1, as the authors'
    public code).
prune_ratio : float, default 0.1
    Node-pruning rule (see :mod:`svbnn.nn.horseshoe`).
init_rho : float, default -6.0
    Initial ``rho`` of the weights' posterior sd.
init_mu_range : float, optional
    Half-range of the initial means (``None``: ``1/sqrt(fan_in)``)."""

_REG = dict(
    common_parameters=_COMMON_PARAMETERS,
    task_parameters=_REGRESSION_PARAMETERS,
    attributes=f"{_BASELINE_ATTRIBUTES}\n{_REGRESSION_ATTRIBUTES}\n{_COMMON_ATTRIBUTES}",
    warns=_BASELINE_WARNS,
)
_CLF = dict(
    common_parameters=_COMMON_PARAMETERS,
    attributes=f"{_CLASSIFICATION_ATTRIBUTES}\n{_BASELINE_ATTRIBUTES}\n{_COMMON_ATTRIBUTES}",
    warns=_BASELINE_WARNS,
)


@_fill_doc(**_CLF, family_parameters=_VBNN_PARAMETERS)
@dataclass(eq=False, repr=False, kw_only=True)
class VBNNClassifier(_VBNNFamily, _Classification):
    """Bayes-by-Backprop classifier (VBNN; Blundell et al., 2015): mean-field Gaussian
    posterior, ``N(0, prior_variance)`` prior on every weight and bias.

    Parameters
    ----------
    {common_parameters}
    {family_parameters}

    Attributes
    ----------
    {attributes}

    Warns
    -----
    {warns}
    """

    n_samples_predict: int = CLASSIFIER_PREDICT_DRAWS


@_fill_doc(**_REG, family_parameters=_VBNN_PARAMETERS)
@dataclass(eq=False, repr=False, kw_only=True)
class VBNNRegressor(_VBNNFamily, _Regression):
    """Bayes-by-Backprop regressor (VBNN; Blundell et al., 2015), Gaussian likelihood.

    Parameters
    ----------
    {common_parameters}
    {task_parameters}
    {family_parameters}

    Attributes
    ----------
    {attributes}

    Warns
    -----
    {warns}
    """


@_fill_doc(**_CLF, family_parameters=_VD_PARAMETERS)
@dataclass(eq=False, repr=False, kw_only=True)
class VDClassifier(_VDFamily, _Classification):
    """Sparse variational dropout classifier (VD; Molchanov, Ashukha & Vetrov, 2017).

    Parameters
    ----------
    {common_parameters}
    {family_parameters}

    Attributes
    ----------
    {attributes}

    Warns
    -----
    {warns}
    """

    n_samples_predict: int = CLASSIFIER_PREDICT_DRAWS


@_fill_doc(**_REG, family_parameters=_VD_PARAMETERS)
@dataclass(eq=False, repr=False, kw_only=True)
class VDRegressor(_VDFamily, _Regression):
    """Sparse variational dropout regressor (VD; Molchanov, Ashukha & Vetrov, 2017).

    Parameters
    ----------
    {common_parameters}
    {task_parameters}
    {family_parameters}

    Attributes
    ----------
    {attributes}

    Warns
    -----
    {warns}
    """


@_fill_doc(**_CLF, family_parameters=_HSBNN_PARAMETERS)
@dataclass(eq=False, repr=False, kw_only=True)
class HSBNNClassifier(_HSBNNFamily, _Classification):
    """Horseshoe BNN classifier (HS-BNN; Ghosh, Yao & Doshi-Velez, 2018), node-wise shrinkage.

    ``selected_features_`` is ``None``: HS-BNN prunes nodes, not inputs.

    Parameters
    ----------
    {common_parameters}
    {family_parameters}

    Attributes
    ----------
    {attributes}

    Warns
    -----
    {warns}
    """

    n_samples_predict: int = CLASSIFIER_PREDICT_DRAWS


@_fill_doc(**_REG, family_parameters=_HSBNN_PARAMETERS)
@dataclass(eq=False, repr=False, kw_only=True)
class HSBNNRegressor(_HSBNNFamily, _Regression):
    """Horseshoe BNN regressor (HS-BNN; Ghosh, Yao & Doshi-Velez, 2018), node-wise shrinkage.

    ``selected_features_`` is ``None``: HS-BNN prunes nodes, not inputs.

    Parameters
    ----------
    {common_parameters}
    {task_parameters}
    {family_parameters}

    Attributes
    ----------
    {attributes}

    Warns
    -----
    {warns}
    """
