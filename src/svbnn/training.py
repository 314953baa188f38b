"""The training loop: per-datum negative ELBO, minibatches from a generator, checkpoints.

The objective on a minibatch of size ``m`` (DESIGN section 1), reported per datum:

``Omega / n = -(1/m)(1/K) sum_batch sum_k log p(y_i | f_{theta_k}(x_i)) + KL / n``.

With a replicated model (layers built with ``n_replicates = R``) the data are ``(R, n, p)``
and ``(R, n)``, each replicate gets its own minibatch order, and the loss that is
differentiated is the sum of the R per-replicate objectives, so every replicate follows
exactly the gradient it would follow alone (Adam and RMSprop act elementwise).
"""

from __future__ import annotations

import functools
import logging
import math
import numbers
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from ._adam import Adam
from ._device import check_training_devices
from ._engine import native as _native
from ._engine.kernels import Backend, backend, backend_scope, parse_backend
from ._engine.native_epoch import native_epoch_kind, native_epoch_runnable, native_epochs
from ._engine.native_step import backward_without_graph
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .nn.base import VariationalContainer, kl_divergence, set_generator, variational_layers
from .nn.spike_slab import SpikeSlabMLP
from .selection import gate_statistics, spike_slab_layers

__all__ = [
    "DIVERGED_R2",
    "KL_WEIGHT_MAX",
    "DivergenceWarning",
    "History",
    "check_kl_weight",
    "training_r2",
    "LRSchedule",
    "Optimizer",
    "kl_warmup_factor",
    "lr_factor",
    "make_optimizer",
    "negative_elbo",
    "Objective",
    "elbo_objective",
    "loss_objective",
    "Minibatches",
    "replicate_orders",
    "train",
]

logger = logging.getLogger(__name__)


KL_WEIGHT_MAX = 1e30
"""The largest ``kl_weight`` accepted: above it ``kl_weight * KL`` leaves float32's range
(at 1e300 the fit fails converting the weight)."""


def check_kl_weight(value: float, name: str = "kl_weight") -> float:
    """``value`` if it is a KL weight in ``(0, KL_WEIGHT_MAX]``, else a ``ValueError`` naming
    ``name``."""
    if not (0 < value <= KL_WEIGHT_MAX):
        raise ValueError(f"{name} must lie in (0, {KL_WEIGHT_MAX:g}], got {value}")
    return value


DIVERGED_R2 = -1.0
"""A regression fit whose training R^2 is below this is reported as diverged: its squared
error is more than twice that of predicting the mean of ``y``, far worse than any
constant, however short or unconverged the training."""


class DivergenceWarning(UserWarning):
    """A regression fit ended far worse than a constant predictor (training R^2 below
    :data:`DIVERGED_R2`): a learning rate too high for the optimiser, or bad data.

    Attributes
    ----------
    r2 : tuple of float
        The training R^2 of each replicate (one value for an unreplicated model).
    """

    def __init__(self, message: str, r2: Sequence[float] = ()) -> None:
        super().__init__(message)
        self.r2 = tuple(float(v) for v in r2)


class LikelihoodLike(Protocol):
    """Anything with ``log_prob(output, target) -> (..., m)``: all that training needs of
    a likelihood (the full protocol, with the predictive distribution, is
    :class:`svbnn.objectives.Likelihood`; an unknown likelihood trains by the general
    autograd path, see :func:`svbnn.objectives.fast_path_spec`)."""

    def log_prob(self, output: Tensor, target: Tensor) -> Tensor: ...


class Optimizer(str, Enum):
    """Supported optimisers."""

    ADAM = "adam"
    RMSPROP = "rmsprop"
    SGD = "sgd"


class LRSchedule(str, Enum):
    """How the learning rate moves over a run of ``S`` optimiser steps (:func:`lr_factor`)."""

    CONSTANT = "constant"
    COSINE = "cosine"


# The cosine schedule's floor, a fraction of the initial rate: the last steps still learn
# (a floor of 0 would spend them on nothing).
_LR_FLOOR = 0.01
# The fraction of the run held at the initial rate.
_LR_HOLD = 0.5


def lr_factor(schedule: LRSchedule | str, step: int, total: int) -> float:
    """The learning rate of optimiser step ``step`` (0-based) of ``total``, as a fraction
    of the initial one.

    ``"constant"``: 1. ``"cosine"``: 1 for the first half of the run, then half a cosine
    from 1 down to 0.01 at its end (``step = total``): the first half moves the gates of a
    spike-and-slab network across (each moves about the learning rate a step under Adam),
    the second settles the weights and the noise level without the Monte Carlo noise of a
    large step.
    """
    if LRSchedule(schedule) is LRSchedule.CONSTANT or total <= 1:
        return 1.0
    hold = _LR_HOLD * total
    frac = min(max((step - hold) / (total - hold), 0.0), 1.0)
    return _LR_FLOOR + (1.0 - _LR_FLOOR) * 0.5 * (1.0 + math.cos(math.pi * frac))


def kl_warmup_factor(step: int, warmup: int) -> float:
    """The KL weight of optimiser step ``step`` (0-based) under a warm-up of ``warmup``
    steps, as a fraction of ``kl_weight``: ``(step + 1) / warmup`` up to 1, so that the
    first step already has a KL term and step ``warmup - 1`` on has all of it. ``warmup``
    of 0 (no warm-up): 1 from the first step."""
    if warmup <= 0:
        return 1.0
    return min((step + 1) / warmup, 1.0)


@dataclass
class History:
    """Per-epoch training record (per-datum quantities; lists of lists when replicated)."""

    epoch: list[int] = field(default_factory=list)
    loss: list[Any] = field(default_factory=list)
    nll: list[Any] = field(default_factory=list)
    kl: list[Any] = field(default_factory=list)
    sparsity: list[Any] = field(default_factory=list)
    unresolved: list[Any] = field(default_factory=list)
    """Fraction of gates with ``0.1 < phi < 0.9`` (recorded with ``sparsity``)."""

    def as_dict(self) -> dict[str, list[Any]]:
        """Plain dict for JSON."""
        return asdict(self)


def make_optimizer(
    params: Sequence[nn.Parameter] | Any, name: Optimizer | str, lr: float
) -> torch.optim.Optimizer:
    """Build Adam, RMSprop or SGD; the fused (single-kernel) implementation where torch has it."""
    name = Optimizer(name)
    _check_lr(lr)
    params = list(params)
    fused = _fusable(params)
    if name is Optimizer.ADAM:
        return torch.optim.Adam(params, lr=lr, fused=fused, foreach=None if fused else True)
    if name is Optimizer.RMSPROP:
        return torch.optim.RMSprop(params, lr=lr, foreach=True)
    return torch.optim.SGD(params, lr=lr, fused=fused, foreach=None if fused else True)


def _check_lr(lr: float) -> None:
    """A ``ValueError`` for a learning rate that is not a positive number."""
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"learning rate must be positive, got {lr}")


def _fusable(params: Sequence[Tensor]) -> bool:
    """Whether torch's one-kernel optimisers take ``params``."""
    # One fused kernel over all parameters (torch >= 2.4 on CPU and CUDA) instead of a
    # handful of multi-tensor passes: a spike-and-slab net has three parameters per weight.
    return all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)


def _loop_optimizer(
    params: Sequence[Tensor], name: Optimizer | str, lr: float
) -> Adam | torch.optim.Optimizer:
    """:func:`train`'s optimiser: :func:`make_optimizer`'s, except that Adam is
    :class:`svbnn._adam.Adam`, the same steps without ``torch.optim``'s import of PyTorch's
    compiler on a process's first fit."""
    if Optimizer(name) is Optimizer.ADAM:
        _check_lr(lr)
        return Adam(params, lr, fused=_fusable(params))
    return make_optimizer(params, name, lr)


def negative_elbo(
    model: nn.Module,
    likelihood: LikelihoodLike,
    x: Tensor,
    y: Tensor,
    n_train: int,
    n_mc: int = 1,
    kl_weight: float = 1.0,
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-datum negative ELBO on one minibatch (optionally with a weighted KL).

    Parameters
    ----------
    model : nn.Module
        Network with variational layers (sampling mode).
    likelihood : nn.Module
        Has ``log_prob(output, target) -> (..., m)``.
    x : Tensor
        ``(m, ...)`` inputs, or ``(R, m, ...)`` for a replicated model.
    y : Tensor
        ``(m,)`` or ``(R, m)`` targets.
    n_train : int
        ``n``, the training-set size the KL is spread over.
    n_mc : int
        ``K``, the number of Monte Carlo weight draws.
    kl_weight : float
        ``w`` in ``nll + w KL / n`` (a tempered posterior, "KL annealing" when changed over
        training). ``1`` is the exact negative ELBO of the paper; ``w < 1`` keeps more
        weights (see the MNIST report in ``docs/results/mnist``).

    Returns
    -------
    loss, nll, kl : Tensor
        Scalars, or ``(R,)`` for a replicated model, all per datum: ``loss = nll + w kl``,
        and ``kl`` the unweighted ``KL / n``.
    """
    check_kl_weight(kl_weight)
    if n_mc == 1 and isinstance(model, VariationalContainer):
        # The model's own fused path, where it has one (e.g. a small SpikeSlabMLP under the
        # auto backend: the whole step as one compiled graph), with the KL scale 1 / n
        # made w / n.
        fast = model.fused_negative_elbo(likelihood, x, y, n_train / kl_weight)
        if fast is not None:
            if kl_weight == 1.0:
                return fast
            return fast[0], fast[1], fast[2] / kl_weight
    nll = likelihood.log_prob(model(x), y).mean(dim=-1).neg()
    for _ in range(n_mc - 1):
        nll = nll - likelihood.log_prob(model(x), y).mean(dim=-1)
    if n_mc > 1:
        nll = nll / n_mc
    kl = kl_divergence(model)
    # nll + w kl / n as one operation (small networks pay per operation).
    return torch.add(nll, kl, alpha=kl_weight / n_train), nll.detach(), kl.detach() / n_train


Objective = Callable[[nn.Module, Tensor, Tensor], tuple[Tensor, Tensor, Tensor]]
"""``objective(model, x, y) -> (loss, nll, kl)`` on one minibatch: scalars, or ``(R,)`` for
R replicates; ``loss`` is differentiated (its sum over replicates), the other two are
recorded in :class:`History`."""


class ElboObjective:
    """The per-datum negative ELBO (:func:`negative_elbo`) as an :data:`Objective`; made by
    :func:`elbo_objective`.

    It counts its calls, one an optimiser step, from ``first_step``: call ``t`` weighs the
    KL by :meth:`kl_weight_at` ``(t)``. :func:`train` reads its settings where it runs
    whole epochs at once (:func:`svbnn._engine.native_epoch.native_epochs`) and then
    moves :attr:`step` on by their steps."""

    def __init__(
        self,
        likelihood: LikelihoodLike,
        n_train: int,
        n_mc: int = 1,
        kl_weight: float = 1.0,
        kl_warmup: int = 0,
        first_step: int = 0,
    ) -> None:
        self.likelihood = likelihood
        self.n_train = n_train
        self.n_mc = n_mc
        self.kl_weight = kl_weight
        self.kl_warmup = kl_warmup
        self.step = first_step
        """The step of the next call."""

    def kl_weight_at(self, step: int) -> float:
        """The KL weight of optimiser step ``step``: ``kl_weight * kl_warmup_factor(step,
        kl_warmup)`` (:func:`kl_warmup_factor`; ``kl_weight`` itself without a warm-up)."""
        return self.kl_weight * kl_warmup_factor(step, self.kl_warmup)

    def __call__(self, model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        w = self.kl_weight_at(self.step)
        self.step += 1
        return negative_elbo(model, self.likelihood, x, y, self.n_train, self.n_mc, w)


def elbo_objective(
    likelihood: LikelihoodLike,
    n_train: int,
    n_mc: int = 1,
    kl_weight: float = 1.0,
    kl_warmup: int = 0,
    first_step: int = 0,
) -> ElboObjective:
    """The per-datum negative ELBO (:func:`negative_elbo`) as an :data:`Objective`.

    The objective counts its calls, one an optimiser step, from ``first_step``: call ``t``
    weighs the KL by ``kl_weight * kl_warmup_factor(t, kl_warmup)``
    (:func:`kl_warmup_factor`; ``kl_weight`` itself without a warm-up)."""
    return ElboObjective(likelihood, n_train, n_mc, kl_weight, kl_warmup, first_step)


def loss_objective(loss_fn: Callable[[Tensor, Tensor], Tensor]) -> Objective:
    """A plain loss ``loss_fn(model(x), y)`` as an :data:`Objective` (no KL; for pruned and
    other non-Bayesian networks). ``loss_fn`` returns a scalar, or ``(R,)`` per replicate."""

    def objective(model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        loss = loss_fn(model(x), y)
        return loss, loss.detach(), torch.zeros_like(loss, requires_grad=False)

    return objective


def _to_list(t: Tensor) -> Any:
    return t.item() if t.dim() == 0 else t.tolist()


def replicate_orders(
    n_replicates: int, n: int, generator: torch.Generator, device: torch.device | str = "cpu"
) -> Tensor:
    """One uniform random permutation of ``0 .. n - 1`` per replicate, independent.

    Returns
    -------
    Tensor
        ``(n_replicates, n)`` ``int64``; row ``r`` is replicate ``r``'s minibatch order.
    """
    # R calls of randperm rather than argsort(rand(R, n)): torch's CPU sort is the slow
    # part of the latter (docs/performance.md, "The training loop").
    return torch.stack(
        [torch.randperm(n, generator=generator, device=device) for _ in range(n_replicates)]
    )


class Minibatches:
    """Shuffled minibatches of ``(X, y)``, one epoch at a time, for one network or for R
    replicates with their own data sets.

    Every :meth:`epoch` draws a new order from ``generator`` (a :func:`torch.randperm`, or
    one per replicate, :func:`replicate_orders`) and cuts it into :attr:`n_batches`
    minibatches of ``m = min(batch_size, n)`` (the last one smaller when ``m`` does not
    divide ``n``).

    The inputs of a minibatch are gathered into one buffer that every step reuses, instead
    of a fresh array a step (12 MB for 30 replicates of Simulation II; ``docs/performance.md``,
    "The training loop", has the step times). So a minibatch is valid until the next one is
    drawn, which is when a training step's graph
    (which saved it) is gone. Inputs that need gradients are gathered into fresh arrays.

    Parameters
    ----------
    X : Tensor
        ``(n, ...)`` inputs, or ``(R, n, ...)`` with ``replicated``.
    y : Tensor
        ``(n, ...)`` targets, or ``(R, n, ...)`` with ``replicated``.
    batch_size : int
    generator : torch.Generator
        On ``X``'s device.
    replicated : bool
        Dimension 0 indexes replicates, each with its own minibatch order.
    """

    def __init__(
        self,
        X: Tensor,
        y: Tensor,
        batch_size: int,
        generator: torch.Generator,
        replicated: bool = False,
    ) -> None:
        sample_dim = 1 if replicated else 0
        if X.dim() <= sample_dim or y.dim() <= sample_dim:
            want = "(R, n, ...)" if replicated else "(n, ...)"
            raise ValueError(
                f"{'replicated ' if replicated else ''}data need X {want} and y {want}, got "
                f"{tuple(X.shape)} and {tuple(y.shape)}"
            )
        if X.shape[: sample_dim + 1] != y.shape[: sample_dim + 1]:
            raise ValueError(f"X and y disagree on the number of samples: {X.shape} vs {y.shape}")
        self.n = int(X.shape[sample_dim])
        self.device = X.device
        if self.n == 0:
            raise ValueError("no training data")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = min(batch_size, self.n)
        self.n_batches = math.ceil(self.n / self.batch_size)
        self.generator = generator
        self.replicates = int(X.shape[0]) if replicated else None
        R = self.replicates or 1
        # Replicates gather from the (R n, ...) views with row offsets: one index_select, a
        # third of the cost of the advanced-indexing gather X[rows, idx].
        self._X = X.reshape(R * self.n, *X.shape[sample_dim + 1 :])
        self._y = y.reshape(R * self.n, *y.shape[sample_dim + 1 :])
        self._x_shape, self._y_shape = X.shape[sample_dim + 1 :], y.shape[sample_dim + 1 :]
        self._buffer = (
            None if X.requires_grad else self._X.new_empty((R * self.batch_size, *self._x_shape))
        )

    def order(self) -> Tensor:
        """A new order of the rows from :attr:`generator`: ``(n,)``, or ``(R, n)`` for
        replicates, as rows of the ``(R n, ...)`` data (replicate ``r``'s offset by ``r n``)."""
        device = self._X.device
        if self.replicates is None:
            return torch.randperm(self.n, generator=self.generator, device=device)
        order = replicate_orders(self.replicates, self.n, self.generator, device)
        order += self.n * torch.arange(self.replicates, device=device).unsqueeze(1)
        return order

    def epoch(self) -> Iterator[tuple[Tensor, Tensor]]:
        """The minibatches ``(x, y)`` of one pass over the data: ``(m, ...)``, or
        ``(R, m, ...)`` for replicates."""
        order = self.order()
        m = self.batch_size
        for b in range(self.n_batches):
            rows = order[..., b * m : (b + 1) * m]
            size = rows.shape[-1]
            rows = rows.reshape(-1)
            if self._buffer is None:
                xb = self._X.index_select(0, rows)
            elif _native.gather_usable(self._X, rows, out := self._buffer[: rows.numel()]):
                xb = _native.gather_rows(self._X, rows, out)  # the same rows, prefetched
            else:
                xb = torch.index_select(self._X, 0, rows, out=out)
            yb = self._y.index_select(0, rows)
            if self.replicates is not None:
                xb = xb.view(self.replicates, size, *self._x_shape)
                yb = yb.view(self.replicates, size, *self._y_shape)
            yield xb, yb


def train(
    model: nn.Module,
    X: Tensor,
    y: Tensor,
    likelihood: LikelihoodLike | None = None,
    *,
    objective: Objective | None = None,
    epochs: int,
    batch_size: int,
    lr: float,
    optimizer: Optimizer | str = Optimizer.ADAM,
    lr_schedule: LRSchedule | str = LRSchedule.CONSTANT,
    n_mc: int = 1,
    generator: torch.Generator | None = None,
    verbose: bool = False,
    checkpoint_path: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    callbacks: Sequence[Callable[[int, nn.Module, History], bool | None]] = (),
    track_sparsity: bool = True,
    kl_weight: float = 1.0,
    kl_warmup: int = 0,
    on_step: Callable[[int], None] | None = None,
    replicated: bool | None = None,
    checkpoint_extra: Callable[[], dict[str, Any]] | None = None,
    kernel_backend: Backend | str | None = None,
    identity: Mapping[str, Any] | None = None,
    warn_divergence: bool = True,
) -> History:
    """Fit a model by minimising the per-datum negative ELBO (or another objective).

    The one training loop of svbnn: every method (SVBNN, the Bayesian baselines, pruned
    networks) and every artifact trains through it. Where an epoch's steps are ones that
    svbnn's native loops run whole (the local sampler's step with a learned noise level
    under fused Adam, as the regressor fits), every epoch after the call's first runs in
    one native call: the same steps, bit for bit. So does the Gumbel sampler's step of a
    small network under a categorical likelihood (the classifier's).

    Parameters
    ----------
    model : nn.Module
        Network with variational layers; trained in place.
    X : Tensor
        ``(n, ...)`` inputs, or ``(R, n, ...)`` for a replicated model.
    y : Tensor
        ``(n,)`` or ``(R, n)`` targets.
    likelihood : nn.Module, optional
        E.g. :class:`svbnn.objectives.GaussianLikelihood`: the objective is then the
        per-datum negative ELBO (:func:`elbo_objective`). Its trainable parameters (a
        learned noise level, ``learn_noise=True``) are optimised with the model's (a
        type-II estimate) and saved in its checkpoints.
    objective : callable, optional
        Instead of ``likelihood``: ``objective(model, x, y) -> (loss, nll, kl)`` (e.g.
        :func:`loss_objective` for a plain network). Exactly one of the two is given.
    epochs, batch_size, lr : int, int, float
        Passes over the data, minibatch size ``m`` and learning rate.
    optimizer : {"adam", "rmsprop", "sgd"}
    lr_schedule : {"constant", "cosine"}
        The learning rate over the run's ``epochs * ceil(n / batch_size)`` steps
        (:func:`lr_factor`, each step's rate set as torch's ``LambdaLR`` would):
        ``"constant"`` (the paper's), or ``"cosine"``, constant for the first half and
        then down to 1% along half a cosine. A stopping callback may end the run before
        the schedule does.
    n_mc : int
        ``K`` Monte Carlo draws per step.
    generator : torch.Generator, optional
        The one source of randomness for minibatch order and weight draws; set on every
        variational layer. ``None`` creates a fresh unseeded one.
    verbose : bool
        Show a progress bar with the current loss.
    checkpoint_path : path, optional
        Where to save model, optimiser, generator state and history.
    checkpoint_every : int
        Save every this many epochs (and at the end); 0 saves only at the end.
    resume : bool
        If ``checkpoint_path`` exists, continue from it. The continued run is bit-for-bit
        the run that was never interrupted. Every checkpoint records the run's identity
        (the optimiser and its hyperparameters, ``batch_size``, ``n_mc``, ``kl_weight``,
        the data's shape, the kernel backend and ``identity``); a resume under any other
        value, or from a checkpoint whose epoch exceeds ``epochs``, is refused by a
        :class:`CheckpointError` naming the setting and both values.
    callbacks : sequence of callables
        Called as ``cb(epoch, model, history)`` after every epoch; a callback that returns
        ``True`` stops training after that epoch (early stopping; the checkpoint, if any, is
        written first). A callback with a method ``epochs_until_model_read()`` says how many
        epochs from now its next call that reads the network comes (the calls before read
        only ``history``): the epochs up to then may run in one native call, and those
        earlier calls are handed the network as that call leaves it
        (:class:`svbnn.convergence.ConvergenceMonitor` has it: its period's end). Without
        it, the network a callback is handed is the one of its epoch.
    track_sparsity : bool
        Record ``sum(phi)/T`` and the fraction of unresolved gates every epoch (models
        with spike-and-slab layers only; the lists stay empty for other models).
    kl_weight : float
        ``w`` in the objective ``nll + w KL / n`` (:func:`negative_elbo`); 1, the default, is
        the exact negative ELBO.
    kl_warmup : int
        Optimiser steps over which the KL weight rises linearly to ``kl_weight``
        (:func:`kl_warmup_factor`; the step count continues across a resume): the network
        fits the data before the prior prunes it. 0, the default, is the paper's objective
        from the first step. Only with ``likelihood``.
    on_step : callable, optional
        Called as ``on_step(t)`` after optimiser step ``t`` (0-based, counted from the start
        of the run, so a resumed run continues the count): pruning schedules and masks.
    replicated : bool, optional
        Data are ``(R, n, ...)`` for a model of R replicates. ``None`` infers it from the
        variational layers' ``n_replicates``.
    checkpoint_extra : callable, optional
        ``checkpoint_extra()`` returns more state (numbers, tensors) saved in the checkpoint
        under ``"extra"`` (read it back with :func:`svbnn.checkpoint.load_checkpoint`).
    kernel_backend : {"eager", "compiled", "auto", "native"}, optional
        The spike-and-slab kernels of the training steps (:class:`svbnn.KernelBackend`), for
        this call and this thread only; ``None`` keeps the one in force
        (:func:`svbnn.get_kernel_backend`). A seed reproduces a run within one backend.
    identity : mapping, optional
        Further settings that define the run and are not arguments of ``train`` (a seed,
        the data's source; text, numbers, flags or lists of them): saved in every
        checkpoint, and a resume under other values is refused.
    warn_divergence : bool
        Warn (:class:`DivergenceWarning`) when a Gaussian fit ends with training R^2 below
        :data:`DIVERGED_R2`; ``False`` for a caller that checks the fit itself and names
        its own settings (the estimators).

    Returns
    -------
    History

    Raises
    ------
    FloatingPointError
        When the loss becomes NaN or infinite; the message names the epoch.
    CheckpointError
        When resuming from a checkpoint of another run (another setting: the message names
        it and both values) or with a field that is not valid (the message names the file
        and the field).
    """
    _check_train_args(likelihood, objective, epochs, batch_size, n_mc, kl_weight, kl_warmup)
    lr_schedule = LRSchedule(lr_schedule)
    kernels = parse_backend(kernel_backend) if kernel_backend is not None else None
    if replicated is None:
        replicated = any(layer.n_replicates is not None for layer in variational_layers(model))
    if generator is None:
        generator = torch.Generator(device=X.device)
        generator.seed()
    # A likelihood with parameters (a learned noise level) trains with the network.
    lik_module = likelihood if isinstance(likelihood, nn.Module) else None
    lik_params: list[nn.Parameter] = (
        [] if lik_module is None else [p for p in lik_module.parameters() if p.requires_grad]
    )
    params = [p for p in model.parameters() if p.requires_grad] + lik_params
    check_training_devices(params, X, y, generator)
    batches = Minibatches(X, y, batch_size, generator, replicated)
    n = batches.n
    set_generator(model, generator)
    track_sparsity = track_sparsity and bool(spike_slab_layers(model))
    opt = _loop_optimizer(params, optimizer, lr)
    ckpt = Path(checkpoint_path) if checkpoint_path is not None else None
    history, start = History(), 0
    # What a checkpoint holds besides the optimiser: the network, and a trained likelihood.
    saved = (
        nn.ModuleDict({"net": model, "likelihood": lik_module})
        if lik_module is not None and lik_params
        else model
    )
    run_identity = _train_identity(opt, X, batch_size, n_mc, kl_weight, replicated, identity)
    # The kernels draw differently (a seed reproduces a run within one backend).
    run_identity["kernel_backend"] = (kernels or backend()).value
    total_steps = epochs * batches.n_batches
    if lr_schedule is not LRSchedule.CONSTANT:
        # A resume must continue the same schedule: its kind and its length.
        run_identity["lr_schedule"] = lr_schedule.value
        run_identity["schedule_steps"] = total_steps
    kl_warmup = int(kl_warmup)
    if kl_warmup > 0:
        run_identity["kl_warmup"] = kl_warmup
    if resume and ckpt is not None and ckpt.exists():
        history, start = _resume(ckpt, saved, opt, generator, run_identity, epochs)
    if objective is None:
        assert likelihood is not None
        # Built after a resume: a warm-up continues from the step the run is at.
        first = start * batches.n_batches
        objective = elbo_objective(likelihood, n, n_mc, kl_weight, kl_warmup, first)
    if lr_schedule is not LRSchedule.CONSTANT:
        # Built after a resume: it then sets the rate of the step the run is at.
        scheduler = _ScheduledRate(opt, lr_schedule, total_steps, start * batches.n_batches)
        on_step = functools.partial(_scheduled_step, scheduler, on_step)

    def save(epoch: int) -> None:
        if ckpt is not None:
            extra = checkpoint_extra() if checkpoint_extra is not None else {}
            _save_state(ckpt, saved, opt, generator, history, epoch, extra, run_identity)

    model.train()
    whole_epochs = _NativeEpochs()
    bar = tqdm(total=epochs - start, disable=not verbose, desc="training", leave=False)
    last, stopped = start, False
    while last < epochs and not stopped:
        with backend_scope(kernels):
            # Every epoch but a call's first may run whole in the native loops: the first
            # sets up the optimiser's state and the scheduler's record of its step. Several
            # run in one call up to the next epoch after which a callback reads the network
            # or a checkpoint is due (_span).
            whole = whole_epochs if last > start else None
            span = _span(callbacks, epochs - last, last, checkpoint_every)
            records = _run_epochs(
                model, objective, opt, batches, on_step, last, whole, span, track_sparsity
            )
        for (loss, nll, kl), gates in records:
            epoch = last
            _check_finite(loss, epoch + 1)
            _record_epoch(history, model, epoch + 1, (loss, nll, kl), track_sparsity, gates)
            if verbose:
                bar.update(1)
                bar.set_postfix(loss=f"{float(loss.mean()):.4f}", refresh=False)
            # Every callback runs, even after one asked to stop (e.g. the last epoch's record).
            stop = [bool(cb(epoch + 1, model, history)) for cb in callbacks]
            last = epoch + 1
            if any(stop):
                logger.info("a callback stopped training after epoch %d", last)
                stopped = True
                break
            if checkpoint_every and last % checkpoint_every == 0:
                save(last)
    bar.close()
    save(max(last, start))
    if warn_divergence:
        _warn_if_diverged(likelihood, y, history, lr, optimizer)
    return history


def training_r2(likelihood: object, y: Tensor, history: History) -> list[float] | None:
    """Training R^2 of the last epoch of a Gaussian-likelihood fit, per replicate.

    The Gaussian per-datum NLL is ``log(2 pi s^2) / 2 + MSE / (2 s^2)``, so the recorded
    NLL gives the epoch's mean squared error (over the posterior's weight draws) without
    another pass over the data or a random draw; ``R^2 = 1 - MSE / var(y)``.

    Parameters
    ----------
    likelihood : object
        The fit's likelihood: only a :class:`svbnn.objectives.GaussianLikelihood` (not a
        subclass that changes ``log_prob``) gives an answer.
    y : Tensor
        ``(n,)`` or ``(R, n)`` training targets.
    history : History
        The fit's record (its last ``nll``).

    Returns
    -------
    list of float or None
        One R^2 per replicate (NaN where the NLL, recorded in float32, cannot resolve the
        squared error to within a tenth of ``var(y)``: a noise level far above the
        residuals); ``None`` for another likelihood, no epoch, or a ``y`` of zero variance.
    """
    from .objectives import GaussianLikelihood

    if not isinstance(likelihood, GaussianLikelihood) or not history.nll:
        return None
    if type(likelihood).log_prob is not GaussianLikelihood.log_prob:
        return None
    with torch.no_grad():
        nll = torch.as_tensor(history.nll[-1], dtype=torch.float64).reshape(-1)
        s2 = torch.as_tensor(likelihood.noise_std, dtype=torch.float64).detach().cpu()
        s2 = (s2**2).reshape(-1)
        var = y.detach().to(torch.float64).cpu().reshape(-1, y.shape[-1]).var(-1, correction=0)
        if not bool((var > 0).all()):
            return None
        mse = 2.0 * s2 * (nll - 0.5 * torch.log(2.0 * math.pi * s2))
        # The NLL's rounding (float32: relative 1.2e-7) times 2 s^2 is the MSE's.
        resolution = 2.0 * s2 * nll.abs().clamp(min=1.0) * torch.finfo(torch.float32).eps
        r2 = torch.where(resolution < 0.1 * var, 1.0 - mse / var, math.nan)
        return [float(v) for v in r2.reshape(-1)]


def _warn_if_diverged(
    likelihood: object, y: Tensor, history: History, lr: float, optimizer: Optimizer | str
) -> None:
    """A :class:`DivergenceWarning` when a regression fit ends with training R^2 below
    :data:`DIVERGED_R2` (any replicate)."""
    r2 = training_r2(likelihood, y, history)
    if r2 is None or not any(v < DIVERGED_R2 for v in r2):
        return
    bad = [i for i, v in enumerate(r2) if v < DIVERGED_R2]
    which = "" if len(r2) == 1 else f" in replicate(s) {bad} of {len(r2)}"
    worst = min(r2)
    opt = Optimizer(optimizer).value
    warnings.warn(
        DivergenceWarning(
            f"the fit diverged{which}: training R^2 = {worst:.3g} after epoch "
            f"{history.epoch[-1]} (below {DIVERGED_R2:g}: the squared error is "
            f"{1 - worst:.3g} times that of predicting the mean of y); lower the learning "
            f"rate (lr={lr!r} with optimizer={opt!r}) or check the data for extreme values",
            r2,
        ),
        stacklevel=3,
    )


class _ScheduledRate:
    """A run's learning-rate schedule: the rate of step ``t`` is each group's
    ``initial_lr`` (its rate at the run's start, kept in the group, so in a checkpoint)
    times :func:`lr_factor` ``(schedule, t, total)``, as ``torch.optim.lr_scheduler.LambdaLR``
    with that factor sets it (the same product, so the same rates to the bit; it takes
    :class:`svbnn._adam.Adam`, which LambdaLR does not). Built before step ``step``, it
    sets that step's rate."""

    def __init__(
        self, opt: Adam | torch.optim.Optimizer, schedule: LRSchedule, total: int, step: int
    ) -> None:
        self.groups: list[dict[str, Any]] = opt.param_groups
        for group in self.groups:
            group.setdefault("initial_lr", group["lr"])
        self.schedule, self.total = schedule, total
        self.set(step)

    def rate(self, step: int) -> float:
        """The first group's rate of step ``step``."""
        return self.groups[0]["initial_lr"] * lr_factor(self.schedule, step, self.total)

    def set(self, step: int) -> None:
        """Set every group's rate to that of step ``step``."""
        for group in self.groups:
            group["lr"] = group["initial_lr"] * lr_factor(self.schedule, step, self.total)


def _scheduled_step(
    scheduler: _ScheduledRate, on_step: Callable[[int], None] | None, step: int
) -> None:
    """After optimiser step ``step``: the next step's rate, then the caller's ``on_step``."""
    scheduler.set(step + 1)
    if on_step is not None:
        on_step(step)


def _check_train_args(
    likelihood: LikelihoodLike | None,
    objective: Objective | None,
    epochs: int,
    batch_size: int,
    n_mc: int,
    kl_weight: float,
    kl_warmup: int,
) -> None:
    """:func:`train`'s argument checks, before anything is built."""
    if (likelihood is None) == (objective is None):
        raise ValueError("give exactly one of likelihood and objective")
    if epochs < 0 or batch_size < 1 or n_mc < 1:
        raise ValueError("epochs must be >= 0, batch_size and n_mc >= 1")
    check_kl_weight(kl_weight)
    if isinstance(kl_warmup, bool) or not isinstance(kl_warmup, numbers.Integral) or kl_warmup < 0:
        raise ValueError(f"kl_warmup must be an int >= 0 (optimiser steps), got {kl_warmup!r}")
    if kl_warmup and objective is not None:
        raise ValueError("kl_warmup weighs the ELBO's KL: give likelihood, not objective")


def _record_epoch(
    history: History,
    model: nn.Module,
    epoch: int,
    losses: tuple[Tensor, Tensor, Tensor],
    track_sparsity: bool,
    gates: tuple[Tensor, Tensor] | None = None,
) -> None:
    """Append one epoch's mean loss, NLL and KL (and sparsity, unresolved fraction:
    ``gates`` where the native epochs computed them, else read from ``model``)."""
    loss, nll, kl = losses
    history.epoch.append(epoch)
    history.loss.append(_to_list(loss))
    history.nll.append(_to_list(nll))
    history.kl.append(_to_list(kl))
    if track_sparsity:
        kept, unresolved = gate_statistics(model) if gates is None else gates
        history.sparsity.append(_to_list(kept))
        history.unresolved.append(_to_list(unresolved))


def _save_state(
    ckpt: Path,
    model: nn.Module,
    opt: Adam | torch.optim.Optimizer,
    generator: torch.Generator,
    history: History,
    epoch: int,
    extra: dict[str, Any],
    identity: dict[str, Any],
) -> None:
    """Checkpoint everything a bit-for-bit resume needs (read back by :func:`_resume`)."""
    state = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "generator": generator.get_state(),
        "history": history.as_dict(),
        "epoch": epoch,
        "extra": extra,
        "identity": identity,
    }
    save_checkpoint(state, ckpt)


_OPTIMIZER_NAMES: dict[type, str] = {
    Adam: Optimizer.ADAM.value,
    torch.optim.RMSprop: Optimizer.RMSPROP.value,
    torch.optim.SGD: Optimizer.SGD.value,
}


def _train_identity(
    opt: Adam | torch.optim.Optimizer,
    X: Tensor,
    batch_size: int,
    n_mc: int,
    kl_weight: float,
    replicated: bool,
    identity: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """What a checkpoint of this run must match to be resumed: the optimiser, its
    hyperparameters, the minibatch and Monte Carlo sizes, ``kl_weight``, the data's shape
    and the caller's ``identity`` (``train`` adds the kernel backend)."""
    group = opt.param_groups[0]
    out: dict[str, Any] = {
        "optimizer": _OPTIMIZER_NAMES.get(type(opt), type(opt).__name__),
        "lr": float(group["lr"]),
        "batch_size": int(batch_size),
        "n_mc": int(n_mc),
        "kl_weight": float(kl_weight),
        "data_shape": [int(d) for d in X.shape],
        "replicated": bool(replicated),
    }
    # The optimiser's own numeric settings (betas, eps, momentum, alpha, weight decay...).
    for key, value in group.items():
        if key in ("params", "lr") or isinstance(value, (bool, str)) or value is None:
            continue
        if isinstance(value, (int, float)):
            out[f"optimizer.{key}"] = float(value)
        elif isinstance(value, tuple) and all(isinstance(v, (int, float)) for v in value):
            out[f"optimizer.{key}"] = [float(v) for v in value]
    for key, value in (identity or {}).items():
        out[str(key)] = list(value) if isinstance(value, tuple) else value
    return out


def _check_identity(
    ckpt: Path, saved: Any, current: Mapping[str, Any], *, exact: bool = True
) -> None:
    """Refuse to resume from ``ckpt`` when its identity ``saved`` differs from ``current``.

    With ``exact``, a setting recorded on one side only is a difference too (``False``
    for the partial identity of a checkpoint written before identities were recorded).
    """
    if saved is None:
        return
    if not isinstance(saved, Mapping):
        raise CheckpointError(f"checkpoint {ckpt}: field 'identity' is not a mapping; {_ADVICE}")
    for key in current:
        if key in saved and saved[key] != current[key]:
            raise CheckpointError(
                f"checkpoint {ckpt} was written by a run with {key}={saved[key]!r}, not "
                f"{key}={current[key]!r}; resume with {key}={saved[key]!r}, or delete the "
                "checkpoint (or use another path) to start afresh"
            )
    missing = sorted(set(saved) ^ set(current))
    if exact and missing:
        key = missing[0]
        raise CheckpointError(
            f"checkpoint {ckpt} was written by a run with {key}="
            f"{saved.get(key, '(not set)')!r}, not {key}={current.get(key, '(not set)')!r}; "
            "delete the checkpoint (or use another path) to start afresh"
        )


def _legacy_identity(state: Mapping[str, Any]) -> dict[str, Any] | None:
    """The optimiser kind and learning rate of a checkpoint without an identity, read
    from its optimiser state (``None`` when that state is not readable)."""
    try:
        group = state["optimizer"]["param_groups"][0]
        lr = float(group["lr"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    # Each optimiser's own key: RMSprop's groups hold "momentum" too, so "alpha" is
    # tested before SGD's "dampening".
    kind = (
        Optimizer.RMSPROP.value
        if "alpha" in group
        else Optimizer.ADAM.value
        if "betas" in group
        else Optimizer.SGD.value
        if "dampening" in group
        else None
    )
    if kind is None:
        return {"lr": lr}
    return {"optimizer": kind, "lr": lr}


_ADVICE = "delete it or use another checkpoint path"


def _check_fields(ckpt: Path, state: Mapping[str, Any], epochs: int) -> int:
    """Validate a loaded checkpoint's fields before use; return its epoch.

    ``epoch`` must be an integer in ``[0, epochs]``, ``history`` hold one record per
    finished epoch, and every tensor of ``model`` and ``optimizer`` be finite (a NaN or an
    infinity would train on silently).
    """

    def bad(key: str, why: str) -> CheckpointError:
        return CheckpointError(f"checkpoint {ckpt}: field {key!r} {why}; {_ADVICE}")

    for key in ("model", "optimizer", "generator", "history", "epoch"):
        if key not in state:
            raise bad(key, "is missing")
    epoch = state["epoch"]
    if isinstance(epoch, bool) or not isinstance(epoch, int):
        raise bad("epoch", f"must be an integer, got {epoch!r}")
    if epoch < 0:
        raise bad("epoch", f"must be >= 0, got {epoch}")
    if epoch > epochs:
        raise CheckpointError(
            f"checkpoint {ckpt}: field 'epoch' is {epoch}, more than this run's "
            f"epochs={epochs}; resume with epochs >= {epoch}, or delete the checkpoint "
            "(or use another path) to start afresh"
        )
    history = state["history"]
    if not isinstance(history, Mapping) or not isinstance(history.get("epoch"), list):
        raise bad("history", "is not a training history")
    if history["epoch"] != list(range(1, len(history["epoch"]) + 1)) or (
        len(history["epoch"]) > epoch
    ):
        raise bad("history", f"does not match field 'epoch' ({epoch})")
    if not isinstance(state["generator"], Tensor) or state["generator"].dtype != torch.uint8:
        raise bad("generator", "is not a generator state")
    for key in ("model", "optimizer"):
        name = _first_non_finite(state[key])
        if name is not None:
            raise bad(key, f"holds non-finite values (in {name})")
    return epoch


def _check_shapes(
    ckpt: Path, state: Mapping[str, Any], model: nn.Module, opt: Adam | torch.optim.Optimizer
) -> None:
    """The checkpoint's model tensors have the model's shapes, and its optimiser's
    per-parameter tensors (moments, momentum) their parameter's shape."""

    def bad(key: str, name: str, got: Any, want: Any) -> CheckpointError:
        return CheckpointError(
            f"checkpoint {ckpt}: field {key!r} holds {name} of shape {tuple(got)}, the "
            f"model's is {tuple(want)}; the checkpoint is of another network; {_ADVICE}"
        )

    if not isinstance(state["model"], Mapping):
        raise CheckpointError(f"checkpoint {ckpt}: field 'model' is not a state; {_ADVICE}")
    for name, want in model.state_dict().items():
        got = state["model"].get(name)
        if isinstance(got, Tensor) and got.shape != want.shape:
            raise bad("model", name, got.shape, want.shape)
    params = [p for group in opt.param_groups for p in group["params"]]
    saved = state["optimizer"].get("state", {}) if isinstance(state["optimizer"], Mapping) else {}
    if not isinstance(saved, Mapping):
        raise CheckpointError(f"checkpoint {ckpt}: field 'optimizer' is not a state; {_ADVICE}")
    for index, values in saved.items():
        if not isinstance(index, int) or not 0 <= index < len(params):
            raise CheckpointError(
                f"checkpoint {ckpt}: field 'optimizer' holds a state of parameter {index!r}, "
                f"the model has {len(params)}; {_ADVICE}"
            )
        for key, value in values.items() if isinstance(values, Mapping) else ():
            shape = params[index].shape
            if isinstance(value, Tensor) and value.dim() > 0 and value.shape != shape:
                raise bad("optimizer", f"{key} of parameter {index}", value.shape, shape)


def _first_non_finite(obj: Any, prefix: str = "") -> str | None:
    """The key path of the first floating-point tensor in ``obj`` (nested mappings and
    lists) with a NaN or an infinity; ``None`` when all are finite."""
    if isinstance(obj, Tensor):
        if obj.is_floating_point() and not bool(torch.isfinite(obj).all()):
            return prefix or "(tensor)"
        return None
    items: Any = (
        obj.items() if isinstance(obj, Mapping) else enumerate(obj) if isinstance(obj, list) else ()
    )
    for key, value in items:
        found = _first_non_finite(value, f"{prefix}.{key}" if prefix else str(key))
        if found is not None:
            return found
    return None


def _resume(
    ckpt: Path,
    model: nn.Module,
    opt: Adam | torch.optim.Optimizer,
    generator: torch.Generator,
    identity: Mapping[str, Any],
    epochs: int,
) -> tuple[History, int]:
    """Load model, optimiser and generator state from ``ckpt``: ``(history, epoch)``.

    The checkpoint's identity must match ``identity`` and its fields be valid
    (:func:`_check_fields`) before anything is loaded.
    """
    state = load_checkpoint(ckpt)
    saved = state.get("identity")
    if saved is None:
        _check_identity(ckpt, _legacy_identity(state), identity, exact=False)
    else:
        _check_identity(ckpt, saved, identity)
    start = _check_fields(ckpt, state, epochs)
    _check_shapes(ckpt, state, model, opt)
    try:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        history = History(**state["history"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise CheckpointError(
            f"checkpoint {ckpt} does not fit this model or training run ({err}); "
            "delete it or use another checkpoint path"
        ) from None
    logger.info("resumed from %s at epoch %d", ckpt, start)
    return history, start


def _span(
    callbacks: Sequence[Callable[..., Any]], remaining: int, done: int, checkpoint_every: int
) -> int:
    """How many epochs may run before the loop must stop to look (at most ``remaining``):
    up to the next epoch after which a callback reads the network (its
    ``epochs_until_model_read()``; 1 for a callback that does not say) or, after ``done``
    epochs, a checkpoint is due."""
    span = remaining
    for cb in callbacks:
        until = getattr(cb, "epochs_until_model_read", None)
        span = min(span, int(until()) if callable(until) else 1)
    if checkpoint_every:
        span = min(span, checkpoint_every - done % checkpoint_every)
    return max(span, 1)


_Record = tuple[tuple[Tensor, Tensor, Tensor], tuple[Tensor, Tensor] | None]


def _run_epochs(
    model: nn.Module,
    objective: Objective,
    opt: Adam | torch.optim.Optimizer,
    batches: Minibatches,
    on_step: Callable[[int], None] | None,
    epoch: int,
    whole: _NativeEpochs | None,
    span: int,
    gates: bool,
) -> list[_Record]:
    """Epochs from ``epoch`` on: each one's mean ``(loss, nll, kl)`` and, where the native
    loops computed them, its gate statistics (``None``: read them from the network). Given
    ``whole`` (the run's record of its native epochs), up to ``span`` epochs in one native
    call where :func:`_native_epochs` can (the same steps); else one epoch, step by step."""
    step = epoch * batches.n_batches  # the global step count, also across a resume
    if whole is not None and (
        records := _native_epochs(model, objective, opt, batches, on_step, step, whole, span, gates)
    ):
        return records
    tot_loss = tot_nll = tot_kl = torch.zeros((), device=batches.device)
    for xb, yb in batches.epoch():
        # Gradients dropped before the forward, not after: the memory they free goes to
        # the forward's outputs while Adam's reads may still hold it in the cache
        # (docs/performance.md, "Memory traffic of the compiled step").
        opt.zero_grad(set_to_none=True)
        loss, nll, kl = objective(model, xb, yb)
        # R replicates' losses (R,) are summed: each replicate's gradient is its own. A
        # graph-free step's gradients are handed over without the engine; one network's
        # scalar goes straight in: a sum of one value would be one more operation and
        # autograd node a step (docs/performance.md, "The small networks' step").
        if not backward_without_graph(loss):
            (loss if loss.dim() == 0 else loss.sum()).backward()
        opt.step()
        if on_step is not None:
            on_step(step)
        step += 1
        tot_loss = tot_loss + loss.detach()
        tot_nll = tot_nll + nll
        tot_kl = tot_kl + kl
    k = batches.n_batches
    return [((tot_loss / k, tot_nll / k, tot_kl / k), None)]


class _NativeEpochs:
    """A :func:`train` call's record of whether the network's path lets its epochs run
    whole, and as which kind (:func:`~svbnn._engine.native_epoch.native_epoch_kind`, about
    as long as a small epoch's native call): checked again only when what it depends on
    besides the network's parameters and the data may have changed (:meth:`key_of`); what
    a callback may change between epochs without changing the path (hooks, a profiler,
    the optimiser) is checked every epoch
    (:func:`~svbnn._engine.native_epoch.native_epoch_runnable`)."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.kind: str | None = None

    @staticmethod
    def key_of(model: SpikeSlabMLP) -> tuple[Any, ...]:
        """The kernel backend, the thread count, grad mode, the network's training flag,
        and each layer's sampler, forward mode and frozen draw (the optimiser and the data
        are the call's own)."""
        layers = tuple((m.sampler, m.mode, m._frozen is None) for m in model.layers())
        mode = (backend(), torch.get_num_threads(), torch.is_grad_enabled(), model.training)
        return (*mode, layers)


def _native_epochs(
    model: nn.Module,
    objective: Objective,
    opt: Adam | torch.optim.Optimizer,
    batches: Minibatches,
    on_step: Callable[[int], None] | None,
    step: int,
    record: _NativeEpochs,
    span: int,
    gates: bool,
) -> list[_Record] | None:
    """:func:`_run_epochs`' epochs, up to ``span`` of them, in one native call, the same
    steps bit for bit, where :func:`~svbnn._engine.native_epoch.native_epoch_kind` names a
    kind (``record``: the run's last answer), for the one-draw negative ELBO of one network
    whose ``on_step`` is at most the learning-rate schedule; ``None`` (nothing done,
    nothing drawn) otherwise. A small network's step is mostly Python, and on a small table
    so is each epoch's loop (docs/performance.md, "A whole epoch in the native loops")."""
    if not (
        isinstance(objective, ElboObjective)
        and objective.n_mc == 1
        and objective.step == step
        and batches.replicates is None
        and isinstance(model, SpikeSlabMLP)
    ):
        return None
    scheduler = None
    if on_step is not None:
        # _scheduled_step with no caller's on_step: the rates are computable ahead.
        if not (
            isinstance(on_step, functools.partial)
            and on_step.func is _scheduled_step
            and on_step.args[1:] == (None,)
            and not on_step.keywords
        ):
            return None
        scheduler = on_step.args[0]
    X, y, k = batches._X, batches._y, batches.n_batches
    lik = objective.likelihood
    key = record.key_of(model)
    if key != record.key:
        record.key = key
        record.kind = native_epoch_kind(model, lik, opt, X, y, batches.batch_size)
        if record.kind is None:
            return None
    elif record.kind is None or not native_epoch_runnable(model, lik, opt):
        return None
    total = span * k
    weights = [check_kl_weight(objective.kl_weight_at(step + i)) for i in range(total)]
    group = opt.param_groups[0]
    if scheduler is None:
        lrs = [group["lr"]] * total
    else:
        lrs = [group["lr"]] + [scheduler.rate(step + i) for i in range(1, total)]
    means, stats = native_epochs(
        record.kind,
        model,
        lik,
        opt,
        X,
        y,
        batches.generator,
        span,
        batches.batch_size,
        [objective.n_train / w for w in weights],
        weights,
        lrs,
        gates,
    )
    ran = means.shape[0]  # fewer than span where a loss was not finite
    objective.step += ran * k
    if scheduler is not None:
        scheduler.set(step + ran * k)  # the rate of the step after them
    return [
        (
            (means[e, 0], means[e, 1], means[e, 2]),
            None if stats is None else (stats[e, 0], stats[e, 1]),
        )
        for e in range(ran)
    ]


def _check_finite(loss: Tensor, epoch: int) -> None:
    # One network's scalar is read once: on a small table an epoch is one short step,
    # and three tensor operations a check would add to it (docs/performance.md, "The
    # epoch's record on small tables").
    finite = math.isfinite(loss.item()) if loss.dim() == 0 else bool(torch.isfinite(loss).all())
    if not finite:
        bad = (
            ""
            if loss.dim() == 0
            else f" (replicates {torch.nonzero(~torch.isfinite(loss)).flatten().tolist()})"
        )
        raise FloatingPointError(
            f"the loss became {_to_list(loss)} at epoch {epoch}{bad}; "
            "lower the learning rate or check the data for extreme values"
        )
