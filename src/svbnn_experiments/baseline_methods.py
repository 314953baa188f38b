"""The paper's baselines as methods of the simulation harness: VBNN, VD and HS-BNN here,
AGP and LOT in :mod:`svbnn_experiments.pruned_methods`.

Each method fits the ``R`` replications of a chunk (data ``(R, n, p)``) and returns a
:class:`~svbnn_experiments.methods.FittedReplicates`, so every metric is computed by the
harness exactly as for SVBNN (RMSE of ``f_H`` with ``H`` draws, FPR/FNR, coverage, sparsity).

Bayesian baselines (one replicated network per chunk, trained by :func:`svbnn.training.train`
on the per-datum negative ELBO with the Gaussian likelihood, the FitSpec's epochs, minibatch
size, optimiser and learning rate, exactly as SVBNN):

* ``vbnn``: :class:`svbnn.nn.GaussianMLP` (Bayes by Backprop, ``N(0, sigma_0^2)`` prior with
  the FitSpec's ``prior_variance``). Keeps every weight: all inputs selected, sparsity 100%.
* ``vd``: :class:`svbnn.nn.VariationalDropoutMLP` (sparse variational dropout). Kept weights:
  ``log alpha <= 3``; selected inputs: those with a kept first-layer weight; predictive
  draws use the pruned network.
* ``hsbnn``: :class:`svbnn.nn.HorseshoeMLP` (node-wise horseshoe). Kept: weights into kept
  nodes (:func:`svbnn.baselines.kept_masks`); input selection not defined (``None``), as
  in the paper.

Sparsity and density of the Bayesian baselines are both :func:`svbnn.baselines.kept_fraction`,
the fraction of all ``T`` weights and biases kept (the analogue of SVBNN's ``phi > 0.5``).

Method options come from ``FitSpec.options`` (filled from ``--set`` keys; the keys and
defaults are :data:`BASELINE_DEFAULTS`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from svbnn.baselines import kept_features, kept_fraction
from svbnn.nn import GaussianMLP, HorseshoeMLP, VariationalDropoutMLP, VariationalMLP
from svbnn.prediction import sample_outputs

from .methods import (
    INIT_MU_RANGE,
    FitSpec,
    FittedReplicates,
    Method,
    register_method,
    train_regression,
)

__all__ = [
    "BASELINE_DEFAULTS",
    "HSBNNMethod",
    "VBNNMethod",
    "VDMethod",
    "VariationalFitted",
]

BASELINE_DEFAULTS: dict[str, Any] = {
    "agp_densities": (0.5, 0.3, 0.1, 0.05),
    "lot_densities": (0.5, 0.3, 0.1, 0.05),
    "prune_scope": "layer",
    "prune_output": False,
    "agp_begin": 0.1,
    "agp_end": 0.6,
    "agp_updates": 100,
    "lot_prune_rate": 0.2,
}
"""Options of the pruning baselines (``FitSpec.options`` keys; ``--set KEY=VALUE``).

``agp_densities``/``lot_densities``: the density grid (fractions of weights kept; the paper
reports AGP 30%/5% and LOT 10%/5% for Simulation I (A)/(B), both 30% for Simulation II);
``prune_scope``: ``"layer"`` or ``"global"``; ``prune_output``: whether the output layer's
weights are pruned too; ``agp_begin``/``agp_end``: start and end of
the cubic schedule as fractions of the run's steps; ``agp_updates``: its number of updates
``n``; ``lot_prune_rate``: fraction of the remaining weights removed per LOT round."""


def _rows_per_chunk(X: Tensor) -> int:
    # Bound the (R, rows, p) slice at about 16M elements, as the SVBNN method does.
    return max(64, 2**24 // max(1, X.shape[0] * X.shape[-1]))


def _option(spec: FitSpec, key: str) -> Any:
    return spec.options.get(key, BASELINE_DEFAULTS[key])


def _densities(value: Any, key: str) -> tuple[float, ...]:
    """A density grid from an option value: a number, a sequence or ``"0.3,0.1"``."""
    if isinstance(value, str):
        items: Sequence[Any] = [v for v in value.replace(" ", "").split(",") if v]
    elif isinstance(value, (int, float)):
        items = [value]
    else:
        items = list(value)
    try:
        grid = tuple(float(v) for v in items)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{key} must be numbers (fractions kept), got {value!r}") from exc
    if not grid:
        raise ValueError(f"{key} is empty")
    if not all(0.0 < d <= 1.0 for d in grid):
        raise ValueError(f"{key} must be fractions kept in (0, 1] (0.3 for 30%), got {grid}")
    if len(set(grid)) != len(grid):
        raise ValueError(f"{key} has repeated values: {grid}")
    return grid


# ----------------------------------------------------------------- Bayesian baselines
class VariationalFitted(FittedReplicates):
    """A trained replicated VBNN / VD / HS-BNN network (see the module docstring)."""

    def __init__(self, model: VariationalMLP) -> None:
        self.model = model
        self.n_replicates = int(model.layers()[0].n_replicates or 1)

    def sample_outputs(
        self, X: Tensor, n_samples: int, generator: torch.Generator | None
    ) -> Tensor:
        out = sample_outputs(
            self.model, X, n_samples, generator=generator, chunk_size=_rows_per_chunk(X)
        )
        return out.squeeze(-1)

    def selected_features(self) -> list[NDArray[np.int64]] | None:
        sel = kept_features(self.model)
        if sel is None:
            return None
        return sel if isinstance(sel, list) else [sel]

    def sparsity(self) -> NDArray[np.float64] | None:
        return np.atleast_1d(kept_fraction(self.model).double().cpu().numpy())

    def density(self) -> NDArray[np.float64] | None:
        return self.sparsity()


class _VariationalBaseline(Method):
    """Fit one replicated variational network on the negative ELBO, as SVBNN is fitted."""

    @abstractmethod
    def build(self, p: int, spec: FitSpec, R: int, generator: torch.Generator) -> VariationalMLP:
        """The untrained replicated network for ``R`` replications."""

    def fit(
        self, X: Tensor, y: Tensor, spec: FitSpec, generator: torch.Generator
    ) -> FittedReplicates:
        R, _, p = X.shape
        _check_spec(spec, p)
        model = self.build(p, spec, R, generator)
        train_regression(model, X, y, spec, generator)
        return VariationalFitted(model)


def _check_spec(spec: FitSpec, p: int) -> None:
    if p != spec.in_features:
        raise ValueError(f"data have {p} features, the spec says {spec.in_features}")
    if spec.init not in INIT_MU_RANGE:
        raise ValueError(f"init must be one of {sorted(INIT_MU_RANGE)}, got {spec.init!r}")


def _common(spec: FitSpec, R: int, generator: torch.Generator) -> dict[str, Any]:
    return {
        "n_replicates": R,
        "generator": generator,
        "device": spec.device,
        "dtype": spec.torch_dtype,
    }


@register_method("vbnn")
class VBNNMethod(_VariationalBaseline):
    """Bayes by Backprop: mean-field Gaussian posterior, ``N(0, prior_variance)`` prior."""

    def build(self, p: int, spec: FitSpec, R: int, generator: torch.Generator) -> VariationalMLP:
        return GaussianMLP(
            p,
            spec.hidden,
            1,
            activation=spec.activation,
            prior_variance=spec.prior_variance,
            init_mu_range=INIT_MU_RANGE[spec.init],
            **_common(spec, R, generator),
        )


@register_method("vd")
class VDMethod(_VariationalBaseline):
    """Sparse variational dropout (log-uniform prior, prune at ``log alpha > 3``)."""

    def build(self, p: int, spec: FitSpec, R: int, generator: torch.Generator) -> VariationalMLP:
        return VariationalDropoutMLP(
            p,
            spec.hidden,
            1,
            activation=spec.activation,
            init_theta_range=INIT_MU_RANGE[spec.init],
            **_common(spec, R, generator),
        )


@register_method("hsbnn")
class HSBNNMethod(_VariationalBaseline):
    """Horseshoe BNN with node-wise scales (half-Cauchy scales 1, node pruning ratio 0.1)."""

    def build(self, p: int, spec: FitSpec, R: int, generator: torch.Generator) -> VariationalMLP:
        return HorseshoeMLP(
            p,
            spec.hidden,
            1,
            activation=spec.activation,
            init_mu_range=INIT_MU_RANGE[spec.init],
            **_common(spec, R, generator),
        )
