"""Pruning baselines: automated gradual pruning (AGP) and the lottery ticket (LOT).

Both work on any ``nn.Module`` whose prunable layers are ``nn.Linear`` / ``nn.Conv2d``:
each such layer gets a ``weight_mask`` buffer (1 = kept); :func:`apply_masks` zeroes the
masked weights and is called after every optimiser step, so the forward pass always sees
the sparse network. Biases are never pruned.

Vocabulary: *sparsity* below is Zhu & Gupta's, the fraction of weights **removed**;
*density* is the fraction **kept**. The paper's "sparsity" of AGP and LOT (e.g. "AGP 30%")
is a density: the fraction kept. The user-facing arguments are therefore densities
(``final_density=0.3`` keeps 30% of the weights).

* AGP (Zhu & Gupta, 2018): the sparsity follows the cubic schedule
  ``s_t = s_f + (s_i - s_f) (1 - (t - t0) / (n dt))^3`` for
  ``t in {t0, t0 + dt, ..., t0 + n dt}``; at each of those steps the masks are recomputed
  by weight magnitude (per layer by default, as Zhu & Gupta do).
* LOT (Frankle & Carbin, 2018): iterative magnitude pruning with rewinding. Train; remove
  ``prune_rate`` of the remaining weights of each layer by magnitude; reset the surviving
  weights (and all biases) to their initial values exactly; repeat until the target density;
  finally train the winning ticket.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import torch
import torch.nn.functional as F
from numpy.typing import NDArray
from torch import Tensor, nn

from .nn.base import activation_module
from .training import loss_objective, train

__all__ = [
    "AGPPruner",
    "LotteryTicketResult",
    "Scope",
    "Task",
    "agp_schedule",
    "agp_sparsity",
    "apply_masks",
    "ensure_masks",
    "get_masks",
    "imp_densities",
    "lottery_ticket",
    "magnitude_prune",
    "mask_density",
    "make_mlp",
    "prunable_layers",
    "rewind",
    "selected_inputs",
    "set_masks",
    "train_pruned",
]

logger = logging.getLogger(__name__)

_MASK = "weight_mask"


class Scope(str, Enum):
    """Where magnitudes are ranked: within each layer, or across all prunable layers."""

    LAYER = "layer"
    GLOBAL = "global"


class Task(str, Enum):
    """Loss of :func:`train_pruned`: mean squared error or cross-entropy."""

    REGRESSION = "regression"
    CLASSIFICATION = "classification"


# -- masks ------------------------------------------------------------------------------
def prunable_layers(model: nn.Module) -> list[nn.Linear | nn.Conv2d]:
    """The ``nn.Linear`` and ``nn.Conv2d`` submodules of ``model``, in registration order."""
    return [m for m in model.modules() if isinstance(m, (nn.Linear, nn.Conv2d))]


def _layers_or_raise(model: nn.Module) -> list[nn.Linear | nn.Conv2d]:
    layers = prunable_layers(model)
    if not layers:
        raise ValueError("model has no nn.Linear or nn.Conv2d layers to prune")
    return layers


def ensure_masks(model: nn.Module) -> list[Tensor]:
    """Give every prunable layer a ``weight_mask`` buffer (all ones) if it has none.

    Returns
    -------
    list of Tensor
        The masks, weight-shaped, in the dtype of the weights.
    """
    out = []
    for layer in _layers_or_raise(model):
        if not hasattr(layer, _MASK):
            layer.register_buffer(_MASK, torch.ones_like(layer.weight, requires_grad=False))
        out.append(getattr(layer, _MASK))
    return out


def get_masks(model: nn.Module) -> list[Tensor]:
    """Copies of the current masks (all ones for layers without one)."""
    return [
        getattr(layer, _MASK).detach().clone()
        if hasattr(layer, _MASK)
        else torch.ones_like(layer.weight.detach())
        for layer in _layers_or_raise(model)
    ]


def set_masks(model: nn.Module, masks: list[Tensor]) -> None:
    """Install ``masks`` (one per prunable layer, weight-shaped) and apply them."""
    bufs = ensure_masks(model)
    if len(masks) != len(bufs):
        raise ValueError(f"expected {len(bufs)} masks, got {len(masks)}")
    with torch.no_grad():
        for buf, m in zip(bufs, masks, strict=True):
            if m.shape != buf.shape:
                raise ValueError(f"mask shape {tuple(m.shape)} != weight shape {tuple(buf.shape)}")
            buf.copy_(m != 0)
    apply_masks(model)


@torch.no_grad()
def apply_masks(model: nn.Module) -> None:
    """Zero the masked weights of every layer that has a mask (``+0.0``, not ``-0.0``)."""
    for layer in prunable_layers(model):
        if hasattr(layer, _MASK):
            layer.weight.masked_fill_(getattr(layer, _MASK) == 0, 0.0)


def mask_density(model: nn.Module) -> float:
    """Fraction of the prunable weights kept by the masks (biases not counted)."""
    masks = get_masks(model)
    kept = sum(int((m != 0).sum()) for m in masks)
    return kept / sum(m.numel() for m in masks)


def selected_inputs(model: nn.Module) -> NDArray[np.int64]:
    """Inputs with at least one kept first-layer weight (the first layer must be ``nn.Linear``)."""
    first = _layers_or_raise(model)[0]
    if not isinstance(first, nn.Linear):
        raise ValueError("variable selection needs an nn.Linear first layer")
    mask = get_masks(model)[0]
    keep = ((mask != 0) & (first.weight.detach() != 0)).any(dim=0)
    return np.flatnonzero(keep.cpu().numpy())


def _keep_top(scores: Tensor, n_keep: int) -> Tensor:
    """Boolean mask of the ``n_keep`` largest scores (ties broken by position, stably)."""
    flat = scores.flatten()
    keep = torch.zeros(flat.numel(), dtype=torch.bool, device=flat.device)
    if n_keep > 0:
        order = torch.argsort(flat, descending=True, stable=True)
        keep[order[:n_keep]] = True
    return keep.reshape(scores.shape)


@torch.no_grad()
def magnitude_prune(
    model: nn.Module, target_density: float, scope: Scope | str = Scope.LAYER
) -> list[Tensor]:
    """Prune by weight magnitude to ``target_density`` and apply the masks.

    Only weights that are currently kept compete (a pruned weight never returns). With
    ``scope="layer"`` each layer keeps ``round(target_density * n_layer)`` weights; with
    ``"global"`` the largest ``round(target_density * n_total)`` over all layers survive.

    Parameters
    ----------
    model : nn.Module
    target_density : float
        Fraction of weights to keep, in ``[0, 1]``.
    scope : {"layer", "global"}

    Returns
    -------
    list of Tensor
        The new masks (copies).
    """
    if not (0.0 <= target_density <= 1.0):
        raise ValueError(f"target_density must lie in [0, 1], got {target_density}")
    scope = Scope(scope)
    layers = _layers_or_raise(model)
    bufs = ensure_masks(model)
    # Pruned weights score -1 so that they rank below every kept one (|w| >= 0).
    scores = [
        torch.where(m != 0, layer.weight.abs(), torch.full_like(m, -1.0))
        for layer, m in zip(layers, bufs, strict=True)
    ]
    if scope is Scope.LAYER:
        new = [_keep_top(s, round(target_density * s.numel())) for s in scores]
    else:
        flat = torch.cat([s.flatten() for s in scores])
        keep = _keep_top(flat, round(target_density * flat.numel()))
        new = list(torch.split(keep, [s.numel() for s in scores]))
        new = [k.reshape(s.shape) for k, s in zip(new, scores, strict=True)]
    for buf, k in zip(bufs, new, strict=True):
        buf.copy_(k & (buf != 0))
    apply_masks(model)
    return get_masks(model)


# -- AGP --------------------------------------------------------------------------------
def agp_sparsity(
    step: int,
    *,
    final_sparsity: float,
    initial_sparsity: float = 0.0,
    begin_step: int = 0,
    n_updates: int,
    frequency: int = 1,
) -> float:
    """Zhu & Gupta's cubic sparsity schedule (fraction of weights removed) at ``step``.

    ``s_t = s_f + (s_i - s_f) (1 - (t - t0) / (n dt))^3`` for ``t0 <= t <= t0 + n dt``;
    ``s_i`` before ``t0`` and ``s_f`` after ``t0 + n dt``. Between the update steps
    ``t0 + k dt`` the value of the last update holds (masks change only at those steps).

    Parameters
    ----------
    step : int
        ``t``, the index of the training step (0-based).
    final_sparsity, initial_sparsity : float
        ``s_f`` and ``s_i`` in ``[0, 1]``.
    begin_step : int
        ``t0``.
    n_updates : int
        ``n >= 1``, the number of pruning updates after ``t0``.
    frequency : int
        ``dt >= 1``, steps between updates.
    """
    if n_updates < 1 or frequency < 1 or begin_step < 0:
        raise ValueError("need n_updates >= 1, frequency >= 1 and begin_step >= 0")
    if not (0.0 <= initial_sparsity <= 1.0 and 0.0 <= final_sparsity <= 1.0):
        raise ValueError("sparsities must lie in [0, 1]")
    if step < begin_step:
        return initial_sparsity
    k = min((step - begin_step) // frequency, n_updates)
    frac = 1.0 - k / n_updates
    return final_sparsity + (initial_sparsity - final_sparsity) * frac**3


def agp_schedule(
    total_steps: int, begin: float, end: float, n_updates: int
) -> tuple[int, int, int]:
    """``(t0, n, dt)`` of the cubic schedule for a run of ``total_steps`` optimiser steps.

    ``t0 = floor(begin * S)``; the last update ``t0 + n dt`` falls at or before
    ``floor(end * S)`` (and before the last step), with ``n <= n_updates`` reduced only when
    the run has fewer steps than updates.
    """
    if not (0.0 <= begin < end <= 1.0):
        raise ValueError(f"need 0 <= agp_begin < agp_end <= 1, got {begin}, {end}")
    if n_updates < 1:
        raise ValueError(f"agp_updates must be positive, got {n_updates}")
    t0 = math.floor(begin * total_steps)
    stop = min(math.floor(end * total_steps), max(total_steps - 1, 0))
    span = max(stop - t0, 1)
    n = min(int(n_updates), span)
    return t0, n, max(span // n, 1)


class AGPPruner:
    """Automated gradual pruning of a model to a user-given final density.

    Call :meth:`step` after every optimiser step with the index of that step; at the
    schedule's update steps ``t0 + k dt`` (``k = 0..n``) the masks are recomputed by
    magnitude to the scheduled sparsity; after every step the masks are applied.

    Parameters
    ----------
    model : nn.Module
        Pruned in place (masks registered as buffers).
    final_density : float
        Fraction of weights kept at the end (the paper's "AGP 30%" is 0.3).
    begin_step : int
        ``t0``.
    n_updates : int
        ``n``.
    frequency : int
        ``dt``.
    initial_density : float
        ``1 - s_i`` (default 1: start dense).
    scope : {"layer", "global"}
    """

    def __init__(
        self,
        model: nn.Module,
        final_density: float,
        *,
        begin_step: int = 0,
        n_updates: int = 100,
        frequency: int = 1,
        initial_density: float = 1.0,
        scope: Scope | str = Scope.LAYER,
    ) -> None:
        if not (0.0 <= final_density <= initial_density <= 1.0):
            raise ValueError(
                f"need 0 <= final_density <= initial_density <= 1, got {final_density}, "
                f"{initial_density}"
            )
        self.model = model
        self.final_sparsity = 1.0 - float(final_density)
        self.initial_sparsity = 1.0 - float(initial_density)
        self.begin_step = int(begin_step)
        self.n_updates = int(n_updates)
        self.frequency = int(frequency)
        self.scope = Scope(scope)
        # Validates the schedule's arguments once.
        agp_sparsity(
            0,
            final_sparsity=self.final_sparsity,
            initial_sparsity=self.initial_sparsity,
            begin_step=self.begin_step,
            n_updates=self.n_updates,
            frequency=self.frequency,
        )
        ensure_masks(model)
        self.current_sparsity = 0.0

    @property
    def end_step(self) -> int:
        """``t0 + n dt``: the step of the last update."""
        return self.begin_step + self.n_updates * self.frequency

    def sparsity_at(self, step: int) -> float:
        """The scheduled sparsity (fraction removed) at ``step``."""
        return agp_sparsity(
            step,
            final_sparsity=self.final_sparsity,
            initial_sparsity=self.initial_sparsity,
            begin_step=self.begin_step,
            n_updates=self.n_updates,
            frequency=self.frequency,
        )

    def is_update_step(self, step: int) -> bool:
        """Whether ``step`` is one of ``t0, t0 + dt, ..., t0 + n dt``."""
        off = step - self.begin_step
        return 0 <= off <= self.n_updates * self.frequency and off % self.frequency == 0

    def step(self, step: int) -> None:
        """Update the masks if ``step`` is an update step, then apply them."""
        if self.is_update_step(step):
            s = self.sparsity_at(step)
            magnitude_prune(self.model, 1.0 - s, self.scope)
            self.current_sparsity = s
        else:
            apply_masks(self.model)


# -- lottery ticket ---------------------------------------------------------------------
def imp_densities(final_density: float, prune_rate: float = 0.2) -> list[float]:
    """Densities after each round of iterative magnitude pruning.

    Round ``r`` keeps ``(1 - p)^r``; the last round stops exactly at ``final_density``.
    ``ceil(log(final) / log(1 - p))`` rounds in all (none when ``final_density = 1``).
    """
    if not (0.0 < final_density <= 1.0):
        raise ValueError(f"final_density must lie in (0, 1], got {final_density}")
    if not (0.0 < prune_rate < 1.0):
        raise ValueError(f"prune_rate must lie in (0, 1), got {prune_rate}")
    if final_density == 1.0:
        return []
    n = math.ceil(math.log(final_density) / math.log1p(-prune_rate) - 1e-12)
    return [max((1.0 - prune_rate) ** r, final_density) for r in range(1, n + 1)]


def _initial_state(model: nn.Module) -> dict[str, Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


@torch.no_grad()
def rewind(model: nn.Module, initial_state: dict[str, Tensor]) -> None:
    """Reset every parameter to ``initial_state`` exactly, then apply the masks.

    Surviving weights become bit-for-bit their initial values; pruned ones are ``+0.0``.
    """
    params = dict(model.named_parameters())
    missing = set(params) - set(initial_state)
    if missing:
        raise ValueError(f"initial_state lacks parameters {sorted(missing)}")
    for name, p in params.items():
        p.copy_(initial_state[name])
    apply_masks(model)


@dataclass
class LotteryTicketResult:
    """What :func:`lottery_ticket` found.

    Attributes
    ----------
    masks : list of Tensor
        Final masks, one per prunable layer.
    densities : list of float
        Density after each pruning round (measured).
    initial_state : dict
        The initial parameters the ticket was rewound to.
    """

    masks: list[Tensor]
    densities: list[float] = field(default_factory=list)
    initial_state: dict[str, Tensor] = field(default_factory=dict)


def lottery_ticket(
    model: nn.Module,
    train_fn: Callable[[nn.Module], object],
    final_density: float,
    *,
    prune_rate: float = 0.2,
    scope: Scope | str = Scope.LAYER,
    retrain: bool = True,
) -> LotteryTicketResult:
    """Find a lottery ticket by iterative magnitude pruning with rewinding.

    Parameters
    ----------
    model : nn.Module
        At its initialisation; modified in place (ends as the trained ticket when
        ``retrain``, else as the rewound, untrained ticket).
    train_fn : callable
        ``train_fn(model)`` trains in place, applying the masks after every optimiser step
        (:func:`train_pruned` does).
    final_density : float
        Fraction of weights kept at the end (the paper's "LOT 10%" is 0.1).
    prune_rate : float
        ``p``: fraction of the remaining weights removed per round (Frankle & Carbin: 0.2).
    scope : {"layer", "global"}
    retrain : bool
        Train the final ticket once more from the rewound initial weights.

    Returns
    -------
    LotteryTicketResult
    """
    ensure_masks(model)
    init = _initial_state(model)
    densities = []
    for i, d in enumerate(imp_densities(final_density, prune_rate)):
        train_fn(model)
        magnitude_prune(model, d, scope)
        rewind(model, init)
        densities.append(mask_density(model))
        logger.info("lottery ticket round %d: density %.4f", i + 1, densities[-1])
    if retrain:
        train_fn(model)
    return LotteryTicketResult(masks=get_masks(model), densities=densities, initial_state=init)


# -- plain networks and their training --------------------------------------------------
def make_mlp(
    in_features: int,
    hidden_sizes: tuple[int, ...] | list[int],
    out_features: int,
    activation: str = "relu",
    *,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
    dtype: torch.dtype | None = None,
) -> nn.Sequential:
    """A plain ``nn.Sequential`` MLP initialised from ``generator``.

    PyTorch's default scale, ``U(-1/sqrt(fan_in), 1/sqrt(fan_in))`` for weights and biases,
    drawn from ``generator`` (the layers are built uninitialised, so torch's global random
    state is not touched).
    """
    sizes = [in_features, *hidden_sizes, out_features]
    if any(int(s) != s or s < 1 for s in sizes):
        raise ValueError(f"layer sizes must be positive integers, got {sizes}")
    mods: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        # skip_init treats an explicit device=None as "stay on meta": pass a real device.
        lin = nn.utils.skip_init(
            nn.Linear, sizes[i], sizes[i + 1], device=device or "cpu", dtype=dtype
        )
        r = 1.0 / math.sqrt(sizes[i])
        with torch.no_grad():
            lin.weight.uniform_(-r, r, generator=generator)
            lin.bias.uniform_(-r, r, generator=generator)
        mods.append(lin)
        if i < len(sizes) - 2:
            mods.append(activation_module(activation))
    return nn.Sequential(*mods)


def _task_loss(task: Task) -> Callable[[Tensor, Tensor], Tensor]:
    """The mean loss of ``task``: squared error (regression) or cross-entropy (logits)."""

    def loss_fn(out: Tensor, target: Tensor) -> Tensor:
        if task is Task.REGRESSION:
            return F.mse_loss(out.reshape(-1), target.reshape(-1).to(out.dtype))
        return F.cross_entropy(out, target.long())

    return loss_fn


def _after_step(
    model: nn.Module, pruner: AGPPruner | None, start_step: int
) -> Callable[[int], None]:
    """The hook run after optimiser step ``t``: the pruner's step ``start_step + t``, or
    without a pruner the model's masks applied (when it carries any)."""
    has_masks = any(hasattr(m, _MASK) for m in prunable_layers(model))

    def on_step(t: int) -> None:
        if pruner is not None:
            pruner.step(start_step + t)
        elif has_masks:
            apply_masks(model)

    return on_step


def train_pruned(
    model: nn.Module,
    X: Tensor,
    y: Tensor,
    *,
    task: Task | str = Task.REGRESSION,
    epochs: int,
    batch_size: int,
    lr: float,
    optimizer: str = "adam",
    generator: torch.Generator | None = None,
    pruner: AGPPruner | None = None,
    start_step: int = 0,
) -> list[float]:
    """Train a plain network with masks (and optionally an AGP schedule).

    After every optimiser step the pruner's :meth:`AGPPruner.step` is called with the
    global step index (``start_step`` + steps so far), or, without a pruner, the masks the
    model carries are applied.

    Parameters
    ----------
    model : nn.Module
        Outputs ``(m, 1)`` / ``(m,)`` for regression, ``(m, C)`` logits for classification.
    X : Tensor
        ``(n, ...)`` inputs.
    y : Tensor
        ``(n,)`` responses or integer labels.
    task : {"regression", "classification"}
        Mean squared error or cross-entropy.
    epochs, batch_size, lr : int, int, float
    optimizer : {"adam", "rmsprop", "sgd"}
    generator : torch.Generator, optional
        Source of the minibatch order (``None``: a fresh unseeded one).
    pruner : AGPPruner, optional
    start_step : int
        Index of the first step (to continue a schedule across calls).

    Returns
    -------
    list of float
        Mean training loss per epoch.
    """
    task = Task(task)
    if int(X.shape[0]) == 0 or y.shape[0] != X.shape[0]:
        raise ValueError(
            f"X and y must hold the same, positive number of rows: {X.shape}, {y.shape}"
        )
    on_step = _after_step(model, pruner, start_step)
    history = train(
        model,
        X,
        y,
        objective=loss_objective(_task_loss(task)),
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        optimizer=optimizer,
        generator=generator,
        on_step=on_step,
        replicated=False,
        track_sparsity=False,
    )
    return [float(v) for v in history.loss]
