"""Replicated plain networks for the pruning baselines: :class:`ReplicatedMLP` (``S``
independent masked MLPs run as one batched network), per-replicate magnitude pruning
(:func:`replicated_magnitude_prune`) and their mean-squared-error training.

The AGP and LOT methods that use them are in :mod:`svbnn_experiments.pruned_methods`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from svbnn.nn import activation_module
from svbnn.pruning import Scope
from svbnn.training import train

from .methods import FitSpec

__all__ = ["ReplicatedMLP", "replicated_magnitude_prune"]


# ----------------------------------------------------------- replicated plain networks
class ReplicatedMLP(nn.Module):
    """``S`` independent plain MLPs with weight masks, run as one batched network.

    Parameters
    ----------
    in_features : int
    hidden_sizes : sequence of int
    out_features : int
    activation : str
        Hidden activation (as :func:`svbnn.nn.activation_module`).
    n_replicates : int
        ``S``.
    init_range : float, optional
        Weights and biases start ``U(-r, r)``; ``None``: ``r = 1/sqrt(fan_in)`` (PyTorch's
        scale, the variational layers' default too).
    generator : torch.Generator, optional
        On ``device``.
    dtype : torch.dtype, optional
    device : torch.device or str, optional

    Shapes: ``(S, m, in) -> (S, m, out)``. Weights ``weight{i}`` are ``(S, out, in)``,
    biases ``bias{i}`` ``(S, out)``, masks ``mask{i}`` (bool buffers) weight-shaped.
    """

    def __init__(
        self,
        in_features: int,
        hidden_sizes: Sequence[int],
        out_features: int,
        activation: str,
        n_replicates: int,
        *,
        init_range: float | None = None,
        generator: torch.Generator | None = None,
        dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        sizes = [int(in_features), *(int(h) for h in hidden_sizes), int(out_features)]
        if min(sizes) < 1 or n_replicates < 1:
            raise ValueError(f"sizes and n_replicates must be positive, got {sizes}")
        self.sizes = sizes
        self.n_replicates = int(n_replicates)
        self.activation = activation
        self.act = activation_module(activation)
        self.weights = nn.ParameterList()
        self.biases = nn.ParameterList()
        for i in range(len(sizes) - 1):
            fan_in, out = sizes[i], sizes[i + 1]
            r = 1.0 / math.sqrt(fan_in) if init_range is None else float(init_range)
            w = torch.empty(n_replicates, out, fan_in, dtype=dtype, device=device)
            b = torch.empty(n_replicates, out, dtype=dtype, device=device)
            w.uniform_(-r, r, generator=generator)
            b.uniform_(-r, r, generator=generator)
            self.weights.append(nn.Parameter(w))
            self.biases.append(nn.Parameter(b))
            self.register_buffer(f"mask{i}", torch.ones_like(w, dtype=torch.bool))

    @property
    def masks(self) -> list[Tensor]:
        """The weight masks (True = kept), input layer first."""
        return [getattr(self, f"mask{i}") for i in range(len(self.weights))]

    def forward(self, x: Tensor) -> Tensor:
        # Feature-major, h = W h with h of shape (S, features, m), as the replicated
        # SpikeSlabMLP runs its layers: for these narrow layers BLAS serves
        # (S, out, in) @ (S, in, m) better than (S, m, in) @ (S, in, out)
        # (docs/performance.md, "Tried and not kept").
        h = x.transpose(1, 2)
        last = len(self.weights) - 1
        for i, (w, b) in enumerate(zip(self.weights, self.biases, strict=True)):
            h = torch.baddbmm(b.unsqueeze(-1), w, h)
            if i < last:
                h = self.act(h)
        return h.transpose(1, 2)

    @torch.no_grad()
    def apply_masks(self) -> None:
        """Zero the pruned weights."""
        for w, m in zip(self.weights, self.masks, strict=True):
            w.mul_(m)

    @torch.no_grad()
    def prune(
        self,
        densities: Sequence[float],
        scope: Scope | str = Scope.LAYER,
        prune_output: bool = False,
    ) -> None:
        """Magnitude pruning of each replicate to its density (see
        :func:`replicated_magnitude_prune`), then apply the masks.

        With ``prune_output=False`` the output layer is left as it is and the density
        applies to the other layers.
        """
        n = len(self.masks) if prune_output else len(self.masks) - 1
        if n > 0:
            new = replicated_magnitude_prune(
                list(self.weights)[:n], self.masks[:n], densities, scope
            )
            for m, k in zip(self.masks[:n], new, strict=True):
                m.copy_(k)
        self.apply_masks()

    def n_weights(self) -> int:
        """Weights per replicate (biases excluded)."""
        return sum(int(m[0].numel()) for m in self.masks)

    def n_params(self) -> int:
        """``T``: weights and biases per replicate."""
        return self.n_weights() + sum(int(b.shape[1]) for b in self.biases)

    def weight_density(self) -> Tensor:
        """Fraction of weights kept per replicate, ``(S,)`` float64."""
        kept = sum(m.flatten(1).sum(1, dtype=torch.float64) for m in self.masks)
        return torch.as_tensor(kept) / self.n_weights()

    def kept_fraction(self) -> Tensor:
        """Fraction of the ``T`` weights and biases kept (biases are never pruned), ``(S,)``."""
        n_bias = self.n_params() - self.n_weights()
        return (self.weight_density() * self.n_weights() + n_bias) / self.n_params()

    def selected_inputs(self) -> list[NDArray[np.int64]]:
        """Per replicate, the inputs with a kept, nonzero first-layer weight."""
        w = self.weights[0].detach()
        keep = (self.masks[0] & (w != 0)).any(dim=1).cpu().numpy()
        return [np.flatnonzero(k) for k in keep]

    def subset(self, index: slice) -> ReplicatedMLP:
        """A copy holding the replicates ``index`` (a slice) only."""
        out = copy.deepcopy(self)
        with torch.no_grad():
            for i in range(len(self.weights)):
                out.weights[i] = nn.Parameter(self.weights[i].detach()[index].clone())
                out.biases[i] = nn.Parameter(self.biases[i].detach()[index].clone())
                setattr(out, f"mask{i}", self.masks[i][index].clone())
        out.n_replicates = int(out.weights[0].shape[0])
        return out

    def snapshot(self) -> ReplicatedMLP:
        """A detached copy (the current weights and masks)."""
        return self.subset(slice(None))


def _keep_largest(scores: Tensor, densities: list[float]) -> Tensor:
    """Per row ``s`` of ``scores`` ``(S, n)``, the ``round(densities[s] * n)`` largest.

    Returns
    -------
    Tensor
        Bool ``(S, n)``; of equal scores the earlier position is kept first.
    """
    S, n = int(scores.shape[0]), int(scores.shape[1])
    n_keep = torch.tensor([round(d * n) for d in densities], device=scores.device)
    order = torch.argsort(scores, dim=1, descending=True, stable=True)
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(n, device=scores.device).expand(S, n).contiguous())
    return rank < n_keep.unsqueeze(1)


@torch.no_grad()
def replicated_magnitude_prune(
    weights: Sequence[Tensor],
    masks: Sequence[Tensor],
    densities: Sequence[float],
    scope: Scope | str = Scope.LAYER,
) -> list[Tensor]:
    """Per-replicate magnitude pruning: :func:`svbnn.pruning.magnitude_prune` for every
    replicate of a batched network at once.

    Only currently kept weights compete (a pruned weight never returns). With ``"layer"``
    each layer of replicate ``s`` keeps ``round(d_s * n_layer)`` weights; with ``"global"``
    its ``round(d_s * n_total)`` largest over all layers survive; ties go to the earlier
    position, as in the library function.

    Parameters
    ----------
    weights, masks : sequence of Tensor
        Per layer, ``(S, out, in)`` weights and bool masks.
    densities : sequence of float
        ``S`` target densities in ``[0, 1]``.
    scope : {"global", "layer"}

    Returns
    -------
    list of Tensor
        The new bool masks.
    """
    scope = Scope(scope)
    S = int(weights[0].shape[0])
    dens = [float(d) for d in densities]
    if len(dens) != S:
        raise ValueError(f"need {S} densities, got {len(dens)}")
    if not all(0.0 <= d <= 1.0 for d in dens):
        raise ValueError(f"densities must lie in [0, 1], got {dens}")
    # Pruned weights score -1 so that they rank below every kept one (|w| >= 0).
    scores = [
        torch.where(m, w.detach().abs(), torch.full_like(w, -1.0)).reshape(S, -1)
        for w, m in zip(weights, masks, strict=True)
    ]
    groups = [torch.cat(scores, dim=1)] if scope is Scope.GLOBAL else scores
    kept = [_keep_largest(sc, dens) for sc in groups]
    if scope is Scope.GLOBAL:
        kept = list(torch.split(kept[0], [s.shape[1] for s in scores], dim=1))
    return [k.reshape(m.shape) & m for k, m in zip(kept, masks, strict=True)]


def _train_plain(
    model: ReplicatedMLP,
    X: Tensor,
    y: Tensor,
    spec: FitSpec,
    generator: torch.Generator,
    *,
    tile: int = 1,
    on_step: Callable[[int], None] | None = None,
) -> None:
    """Minimise each replicate's mean squared error with its own minibatch order.

    ``X`` ``(R, n, p)`` and ``y`` ``(R, n)``; the model has ``S = tile * R`` replicates and
    replicate ``g R + r`` sees the minibatches of replication ``r`` (the same initial data,
    order and batches for every grid value ``g``). ``on_step(t)`` runs after optimiser step
    ``t`` (0-based); without it the masks are applied.
    """
    R = int(X.shape[0])
    if model.n_replicates != tile * R:
        raise ValueError(f"model has {model.n_replicates} replicates, expected {tile} x {R}")

    def mse(model: nn.Module, xb: Tensor, yb: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if tile > 1:
            xb, yb = xb.repeat(tile, 1, 1), yb.repeat(tile, 1)
        loss = (model(xb).squeeze(-1) - yb).pow(2).mean(dim=1)
        return loss, loss.detach(), torch.zeros_like(loss)

    train(
        model,
        X,
        y,
        objective=mse,
        epochs=spec.epochs,
        batch_size=spec.batch_size,
        lr=spec.lr,
        optimizer=spec.optimizer,
        generator=generator,
        on_step=on_step if on_step is not None else (lambda _t: model.apply_masks()),
        replicated=True,
        track_sparsity=False,
    )
