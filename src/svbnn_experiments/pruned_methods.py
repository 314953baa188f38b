"""The paper's pruning baselines as methods of the simulation harness: AGP and LOT.

Pruning baselines (deterministic networks; no coverage; ``f_H`` is the network's output):

* ``agp``: automated gradual pruning (Zhu & Gupta, 2018). The sparsity follows the cubic
  schedule :func:`svbnn.pruning.agp_sparsity` from ``t0 = agp_begin * S`` to
  ``agp_end * S`` (``S`` the run's optimiser steps) in ``n = agp_updates`` updates every
  ``dt = (agp_end - agp_begin) S / n`` steps (defaults 0.1, 0.6, 100: dense training for
  the first 10% of the run, pruning until 60%, fine-tuning at the final density for the last
  40%; Zhu & Gupta's ``dt`` of 100-1000 steps holds at the paper's sizes, e.g. ``dt = 200``
  for Simulation I (B)).
* ``lot``: lottery ticket (Frankle & Carbin, 2018), iterative magnitude pruning with
  rewinding: train the dense net; each round removes ``lot_prune_rate`` (20%, their rate for
  fully connected layers) of the remaining weights by magnitude, rewinds every surviving
  weight and bias to its initial value exactly, and trains again for the full run (fresh
  Adam state) -- the ticket at that density. The grid's densities are points of one
  trajectory (a round stops exactly at each grid value on its way down), so a whole grid
  costs the rounds of its smallest density plus one per other grid value.

Both prune weights, never biases, by magnitude within each layer (``prune_scope =
"layer"``: every pruned layer keeps ``round(d n_layer)`` of its weights, Zhu & Gupta's rule
and Frankle & Carbin's for fully connected nets), and leave the output layer dense
(``prune_output = False``). Why: the paper's FPRs of AGP and LOT (16.9% and 19.5% at 5% for
Simulation I (B), about 83% at 30% for Simulation II) are what a first layer pruned to the
target density gives (5% of 100 x 6 weights reach about 20 inputs); pruning the 6-weight
output layer of the Simulation I students at 5% would keep ``round(0.3) = 0`` weights (a
constant network), yet the paper's AGP and LOT at 5% fit the sparse teacher; and magnitude
ranking over all layers at once (``"global"``) removed every weight of the second and third
layers of the dense-teacher students at 30% (their first-layer weights are the larger ones
after training). The loss is the mean squared error.

The paper grid-searches the density of AGP and LOT and reports the value with the best test
accuracy. Each method therefore trains every density of its grid (``agp_densities``,
``lot_densities``; fractions kept) and returns a :class:`GridFitted`; the harness calls
:meth:`GridFitted.tune_on_test`, which keeps the density with the smallest test RMSE
averaged over the chunk's replications (one density for all of them, as the paper's
"30.0 +- 0.00") and adds the per-density test RMSEs to the results. AGP trains all densities
of a replication from the same initialisation and minibatch order (paired comparison).

AGP and LOT are batched: the chunk's replications (times the grid, for AGP) are one
replicated plain network (:class:`ReplicatedMLP`, in
:mod:`svbnn_experiments.pruned_networks`); each replication is optimised
independently (losses summed, per-element Adam) with its own minibatch order, like the
replicated Bayesian networks.

Their options share :data:`svbnn_experiments.baseline_methods.BASELINE_DEFAULTS`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from svbnn.pruning import Scope, agp_schedule, agp_sparsity

from .baseline_methods import BASELINE_DEFAULTS, _check_spec, _densities, _option, _rows_per_chunk
from .methods import (
    INIT_MU_RANGE,
    FitSpec,
    FittedReplicates,
    Method,
    register_method,
)
from .pruned_networks import ReplicatedMLP, _train_plain, replicated_magnitude_prune

__all__ = [
    "AGPMethod",
    "GridFitted",
    "LOTMethod",
    "PrunedFitted",
    "ReplicatedMLP",
    "lot_path",
    "replicated_magnitude_prune",
]


# ------------------------------------------------------------------ pruned fits & grids
class PrunedFitted(FittedReplicates):
    """``R`` trained pruned networks (deterministic: every "draw" is the same output).

    ``nominal_density`` is the density the pruning targeted (the grid value).
    """

    bayesian = False

    def __init__(self, model: ReplicatedMLP, nominal_density: float) -> None:
        self.model = model
        self.nominal_density = float(nominal_density)
        self.n_replicates = model.n_replicates

    @torch.no_grad()
    def outputs(self, X: Tensor) -> Tensor:
        """Network output ``(R, n)``."""
        self.model.eval()
        rows = _rows_per_chunk(X)
        parts = [self.model(xc).squeeze(-1) for xc in torch.split(X, rows, dim=1)]
        return torch.cat(parts, dim=1)

    def sample_outputs(
        self, X: Tensor, n_samples: int, generator: torch.Generator | None
    ) -> Tensor:
        return self.outputs(X).unsqueeze(0).expand(n_samples, -1, -1)

    def selected_features(self) -> list[NDArray[np.int64]] | None:
        return self.model.selected_inputs()

    def sparsity(self) -> NDArray[np.float64] | None:
        return self.model.kept_fraction().cpu().numpy()

    def density(self) -> NDArray[np.float64] | None:
        return self.sparsity()

    def weight_density(self) -> NDArray[np.float64]:
        """Fraction of weights kept per replicate (the paper's "sparsity" of AGP/LOT)."""
        out: NDArray[np.float64] = self.model.weight_density().cpu().numpy()
        return out


class GridFitted(FittedReplicates):
    """One fit per value of a tuning grid; behaves as the chosen one.

    Before :meth:`tune_on_test` the first grid value is the chosen one.

    Parameters
    ----------
    candidates : sequence of (value, PrunedFitted)
        Grid values (densities) and their fits, all with the same ``R``.
    info : dict, optional
        Constant settings to record per replicate (e.g. the AGP schedule in steps).
    """

    bayesian = False

    def __init__(
        self,
        candidates: Sequence[tuple[float, PrunedFitted]],
        info: Mapping[str, float] | None = None,
    ) -> None:
        if not candidates:
            raise ValueError("no grid values")
        sizes = {c.n_replicates for _, c in candidates}
        if len(sizes) != 1:
            raise ValueError(f"candidates disagree on the number of replicates: {sizes}")
        self.candidates = list(candidates)
        self.info = dict(info or {})
        self.n_replicates = sizes.pop()
        self.chosen = 0

    @property
    def grid(self) -> list[float]:
        """The grid values, in the order given."""
        return [v for v, _ in self.candidates]

    @property
    def best(self) -> PrunedFitted:
        """The chosen fit."""
        return self.candidates[self.chosen][1]

    def tune_on_test(
        self, X_test: Tensor, y_test: Any, n_samples: int, generator: torch.Generator | None
    ) -> dict[str, NDArray[np.float64]]:
        """Choose the grid value with the smallest test RMSE averaged over replicates.

        Parameters
        ----------
        X_test : Tensor
            ``(R, n_test, p)``.
        y_test : array-like
            ``(n_test,)`` responses shared by the replicates, or ``(R, n_test)``.
        n_samples, generator :
            Unused (the networks are deterministic); part of the harness's tuning hook.

        Returns
        -------
        dict of str to ndarray
            Per-replicate columns: ``grid_density`` (the chosen value),
            ``grid_test_rmse_d{value}`` for every grid value, and :attr:`info`.
        """
        y = np.asarray(y_test, dtype=np.float64)
        cols: dict[str, NDArray[np.float64]] = {}
        means = []
        for value, fit in self.candidates:
            pred = fit.outputs(X_test).double().cpu().numpy()
            rmse = np.sqrt(np.mean((pred - y) ** 2, axis=-1))
            cols[f"grid_test_rmse_d{value:g}"] = rmse
            means.append(float(np.mean(rmse)) if np.all(np.isfinite(rmse)) else math.inf)
        self.chosen = int(np.argmin(means))
        R = self.n_replicates
        out = {"grid_density": np.full(R, self.grid[self.chosen], dtype=np.float64)}
        out["weight_density_pct"] = 100.0 * self.best.weight_density()
        out.update(cols)
        for k, v in self.info.items():
            out[k] = np.full(R, float(v), dtype=np.float64)
        return out

    def sample_outputs(
        self, X: Tensor, n_samples: int, generator: torch.Generator | None
    ) -> Tensor:
        return self.best.sample_outputs(X, n_samples, generator)

    def selected_features(self) -> list[NDArray[np.int64]] | None:
        return self.best.selected_features()

    def sparsity(self) -> NDArray[np.float64] | None:
        return self.best.sparsity()

    def density(self) -> NDArray[np.float64] | None:
        return self.best.density()


# --------------------------------------------------------------------- AGP and LOT
def lot_path(grid: Sequence[float], prune_rate: float) -> list[float]:
    """Densities of the LOT rounds reaching every grid value on one trajectory.

    From density 1, each round keeps ``1 - prune_rate`` of the remaining weights, stopping
    exactly at each grid value on the way down. With a single value this is
    :func:`svbnn.pruning.imp_densities`.
    """
    if not (0.0 < prune_rate < 1.0):
        raise ValueError(f"lot_prune_rate must lie in (0, 1), got {prune_rate}")
    path: list[float] = []
    current = 1.0
    for target in sorted(set(grid), reverse=True):
        while current > target:
            nxt = current * (1.0 - prune_rate)
            current = target if nxt <= target * (1.0 + 1e-9) else nxt
            path.append(current)
    return path


def _flag(value: Any, key: str) -> bool:
    if isinstance(value, bool):
        return value
    if str(value).lower() in ("true", "1", "yes"):
        return True
    if str(value).lower() in ("false", "0", "no"):
        return False
    raise ValueError(f"{key} must be true or false, got {value!r}")


def _pruning_setup(
    X: Tensor, spec: FitSpec, key: str
) -> tuple[tuple[float, ...], Callable[[ReplicatedMLP, list[float]], None], int]:
    """The grid, a ``prune(model, densities)`` applying the options, and the run's steps."""
    _check_spec(spec, int(X.shape[-1]))
    grid = _densities(_option(spec, key), key)
    scope_name = str(_option(spec, "prune_scope"))
    if scope_name not in {s.value for s in Scope}:
        raise ValueError(f"prune_scope must be 'global' or 'layer', got {scope_name!r}")
    scope = Scope(scope_name)
    prune_output = _flag(_option(spec, "prune_output"), "prune_output")

    def prune(model: ReplicatedMLP, densities: list[float]) -> None:
        model.prune(densities, scope, prune_output)

    n = int(X.shape[1])
    steps = spec.epochs * math.ceil(n / min(spec.batch_size, n))
    return grid, prune, steps


def _new_net(spec: FitSpec, S: int, generator: torch.Generator) -> ReplicatedMLP:
    return ReplicatedMLP(
        spec.in_features,
        spec.hidden,
        1,
        spec.activation,
        S,
        init_range=INIT_MU_RANGE[spec.init],
        generator=generator,
        dtype=spec.torch_dtype,
        device=spec.device,
    )


@register_method("agp")
class AGPMethod(Method):
    """Automated gradual pruning; every density of ``agp_densities`` in one batched run."""

    name: ClassVar[str]
    option_defaults: ClassVar[Mapping[str, Any]] = {
        k: BASELINE_DEFAULTS[k]
        for k in BASELINE_DEFAULTS
        if k.startswith("agp_") or k.startswith("prune_")
    }

    def fit(
        self, X: Tensor, y: Tensor, spec: FitSpec, generator: torch.Generator
    ) -> FittedReplicates:
        grid, prune, steps = _pruning_setup(X, spec, "agp_densities")
        R, G = int(X.shape[0]), len(grid)
        t0, n_up, dt = agp_schedule(
            steps,
            float(_option(spec, "agp_begin")),
            float(_option(spec, "agp_end")),
            int(_option(spec, "agp_updates")),
        )
        base = _new_net(spec, R, generator)
        model = base.subset(slice(None))
        # Every grid value of a replication starts from the same network (paired grid).
        with torch.no_grad():
            for i in range(len(model.weights)):
                model.weights[i] = nn.Parameter(base.weights[i].detach().repeat(G, 1, 1))
                model.biases[i] = nn.Parameter(base.biases[i].detach().repeat(G, 1))
                setattr(model, f"mask{i}", base.masks[i].repeat(G, 1, 1))
        model.n_replicates = G * R

        def on_step(t: int) -> None:
            off = t - t0
            if 0 <= off <= n_up * dt and off % dt == 0:
                dens = [
                    1.0
                    - agp_sparsity(
                        t, final_sparsity=1.0 - d, begin_step=t0, n_updates=n_up, frequency=dt
                    )
                    for d in grid
                ]
                prune(model, [d for d in dens for _ in range(R)])
            else:
                model.apply_masks()

        X, y = X.to(spec.torch_dtype), y.to(spec.torch_dtype)
        _train_plain(model, X, y, spec, generator, tile=G, on_step=on_step)
        if t0 + n_up * dt > steps - 1:
            # A run too short for the last update (a smoke run) ends at the final density
            # anyway, without fine-tuning.
            prune(model, [d for d in grid for _ in range(R)])
        candidates = [
            (d, PrunedFitted(model.subset(slice(g * R, (g + 1) * R)), d))
            for g, d in enumerate(grid)
        ]
        info = {"agp_t0_step": t0, "agp_dt_steps": dt, "agp_n_updates": n_up, "steps": steps}
        return GridFitted(candidates, info)


@register_method("lot")
class LOTMethod(Method):
    """Lottery ticket by iterative magnitude pruning with rewinding to the initial weights."""

    name: ClassVar[str]
    option_defaults: ClassVar[Mapping[str, Any]] = {
        k: BASELINE_DEFAULTS[k]
        for k in BASELINE_DEFAULTS
        if k.startswith("lot_") or k.startswith("prune_")
    }

    def fit(
        self, X: Tensor, y: Tensor, spec: FitSpec, generator: torch.Generator
    ) -> FittedReplicates:
        grid, prune, steps = _pruning_setup(X, spec, "lot_densities")
        rate = float(_option(spec, "lot_prune_rate"))
        path = lot_path(grid, rate)
        R = int(X.shape[0])
        X, y = X.to(spec.torch_dtype), y.to(spec.torch_dtype)
        model = _new_net(spec, R, generator)
        init = [p.detach().clone() for p in model.parameters()]
        tickets: dict[float, PrunedFitted] = {}
        density = 1.0
        for rnd in range(len(path) + 1):
            if rnd > 0:
                density = path[rnd - 1]
                prune(model, [density] * R)
                with torch.no_grad():
                    for p, p0 in zip(model.parameters(), init, strict=True):
                        p.copy_(p0)
                model.apply_masks()
            _train_plain(model, X, y, spec, generator)
            if density in grid:
                tickets[density] = PrunedFitted(model.snapshot(), density)
        candidates = [(d, tickets[d]) for d in grid]
        info = {"lot_rounds": len(path) + 1, "lot_prune_rate": rate, "steps": steps}
        return GridFitted(candidates, info)
