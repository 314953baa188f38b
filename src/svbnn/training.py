"""The training loop: per-datum negative ELBO, minibatches from a generator, checkpoints.

The objective on a minibatch of size ``m`` (DESIGN section 1), reported per datum:

``Omega / n = -(1/m)(1/K) sum_batch sum_k log p(y_i | f_{theta_k}(x_i)) + KL / n``.

With a replicated model (layers built with ``n_replicates = R``) the data are ``(R, n, p)``
and ``(R, n)``, each replicate gets its own minibatch order, and the loss that is
differentiated is the sum of the R per-replicate objectives, so every replicate follows
exactly the gradient it would follow alone (Adam and RMSprop act elementwise).
"""

from __future__ import annotations

import logging
import math
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from . import _native
from ._device import check_training_devices
from .checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from .nn.base import VariationalContainer, kl_divergence, set_generator, variational_layers
from .selection import sparsity, spike_slab_layers, unresolved_fraction

__all__ = [
    "DIVERGED_R2",
    "KL_WEIGHT_MAX",
    "DivergenceWarning",
    "History",
    "check_kl_weight",
    "training_r2",
    "Optimizer",
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


def check_kl_weight(value: float) -> float:
    """``value`` if it is a KL weight in ``(0, KL_WEIGHT_MAX]``, else a ``ValueError`` naming
    ``kl_weight``."""
    if not (0 < value <= KL_WEIGHT_MAX):
        raise ValueError(f"kl_weight must lie in (0, {KL_WEIGHT_MAX:g}], got {value}")
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
    """Anything with ``log_prob(output, target) -> (..., m)`` (see :mod:`svbnn.objectives`)."""

    def log_prob(self, output: Tensor, target: Tensor) -> Tensor: ...


class Optimizer(str, Enum):
    """Supported optimisers."""

    ADAM = "adam"
    RMSPROP = "rmsprop"
    SGD = "sgd"


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
    if not (lr > 0 and math.isfinite(lr)):
        raise ValueError(f"learning rate must be positive, got {lr}")
    params = list(params)
    # One fused kernel over all parameters (torch >= 2.4 on CPU and CUDA) instead of a
    # handful of multi-tensor passes: a spike-and-slab net has three parameters per weight.
    fused = all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)
    if name is Optimizer.ADAM:
        return torch.optim.Adam(params, lr=lr, fused=fused, foreach=None if fused else True)
    if name is Optimizer.RMSPROP:
        return torch.optim.RMSprop(params, lr=lr, foreach=True)
    return torch.optim.SGD(params, lr=lr, fused=fused, foreach=None if fused else True)


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


def elbo_objective(
    likelihood: LikelihoodLike, n_train: int, n_mc: int = 1, kl_weight: float = 1.0
) -> Objective:
    """The per-datum negative ELBO (:func:`negative_elbo`) as an :data:`Objective`."""

    def objective(model: nn.Module, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        return negative_elbo(model, likelihood, x, y, n_train, n_mc, kl_weight)

    return objective


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
    # R calls of randperm: a tenth of the cost of argsort(rand(R, n)) (measured, R = 30,
    # n = 3000: 0.46 against 5.2 ms an epoch; torch's CPU sort is the slow part).
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

    The inputs of a minibatch are gathered into one buffer that every step reuses: a fresh
    array a step (12 MB for 30 replicates of Simulation II) costs the allocator more than
    the copy (measured, in-process A/B: 8.0 against 10.0 ms a training step there). So a
    minibatch is valid until the next one is drawn, which is when a training step's graph
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

    def epoch(self) -> Iterator[tuple[Tensor, Tensor]]:
        """The minibatches ``(x, y)`` of one pass over the data: ``(m, ...)``, or
        ``(R, m, ...)`` for replicates."""
        device = self._X.device
        if self.replicates is None:
            order = torch.randperm(self.n, generator=self.generator, device=device)
        else:
            order = replicate_orders(self.replicates, self.n, self.generator, device)
            order += self.n * torch.arange(self.replicates, device=device).unsqueeze(1)
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
    n_mc: int = 1,
    generator: torch.Generator | None = None,
    verbose: bool = False,
    checkpoint_path: str | os.PathLike[str] | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    callbacks: Sequence[Callable[[int, nn.Module, History], bool | None]] = (),
    track_sparsity: bool = True,
    kl_weight: float = 1.0,
    on_step: Callable[[int], None] | None = None,
    replicated: bool | None = None,
    checkpoint_extra: Callable[[], dict[str, Any]] | None = None,
) -> History:
    """Fit a model by minimising the per-datum negative ELBO (or another objective).

    The one training loop of svbnn: every method (SVBNN, the Bayesian baselines, pruned
    networks) and every artifact trains through it.

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
        the run that was never interrupted.
    callbacks : sequence of callables
        Called as ``cb(epoch, model, history)`` after every epoch; a callback that returns
        ``True`` stops training after that epoch (early stopping; the checkpoint, if any, is
        written first).
    track_sparsity : bool
        Record ``sum(phi)/T`` and the fraction of unresolved gates every epoch (models
        with spike-and-slab layers only; the lists stay empty for other models).
    kl_weight : float
        ``w`` in the objective ``nll + w KL / n`` (:func:`negative_elbo`); 1, the default, is
        the exact negative ELBO.
    on_step : callable, optional
        Called as ``on_step(t)`` after optimiser step ``t`` (0-based, counted from the start
        of the run, so a resumed run continues the count): pruning schedules and masks.
    replicated : bool, optional
        Data are ``(R, n, ...)`` for a model of R replicates. ``None`` infers it from the
        variational layers' ``n_replicates``.
    checkpoint_extra : callable, optional
        ``checkpoint_extra()`` returns more state (numbers, tensors) saved in the checkpoint
        under ``"extra"`` (read it back with :func:`svbnn.checkpoint.load_checkpoint`).

    Returns
    -------
    History

    Raises
    ------
    FloatingPointError
        When the loss becomes NaN or infinite; the message names the epoch.
    """
    _check_train_args(likelihood, objective, epochs, batch_size, n_mc, kl_weight)
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
    if objective is None:
        assert likelihood is not None
        objective = elbo_objective(likelihood, n, n_mc, kl_weight)
    set_generator(model, generator)
    track_sparsity = track_sparsity and bool(spike_slab_layers(model))
    opt = make_optimizer(params, optimizer, lr)
    ckpt = Path(checkpoint_path) if checkpoint_path is not None else None
    history, start = History(), 0
    # What a checkpoint holds besides the optimiser: the network, and a trained likelihood.
    saved = (
        nn.ModuleDict({"net": model, "likelihood": lik_module})
        if lik_module is not None and lik_params
        else model
    )
    if resume and ckpt is not None and ckpt.exists():
        history, start = _resume(ckpt, saved, opt, generator)

    def save(epoch: int) -> None:
        if ckpt is not None:
            extra = checkpoint_extra() if checkpoint_extra is not None else {}
            _save_state(ckpt, saved, opt, generator, history, epoch, extra)

    model.train()
    bar = tqdm(range(start, epochs), disable=not verbose, desc="training", leave=False)
    last = start
    for epoch in bar:
        loss, nll, kl = _run_epoch(model, objective, opt, batches, on_step, epoch)
        _check_finite(loss, epoch + 1)
        _record_epoch(history, model, epoch + 1, (loss, nll, kl), track_sparsity)
        if verbose:
            bar.set_postfix(loss=f"{float(loss.mean()):.4f}", refresh=False)
        # Every callback runs, even after one asked to stop (e.g. the last epoch's record).
        stop = [bool(cb(epoch + 1, model, history)) for cb in callbacks]
        last = epoch + 1
        if any(stop):
            logger.info("a callback stopped training after epoch %d", last)
            break
        if checkpoint_every and last % checkpoint_every == 0:
            save(last)
    save(max(last, start))
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


def _check_train_args(
    likelihood: LikelihoodLike | None,
    objective: Objective | None,
    epochs: int,
    batch_size: int,
    n_mc: int,
    kl_weight: float,
) -> None:
    """:func:`train`'s argument checks, before anything is built."""
    if (likelihood is None) == (objective is None):
        raise ValueError("give exactly one of likelihood and objective")
    if epochs < 0 or batch_size < 1 or n_mc < 1:
        raise ValueError("epochs must be >= 0, batch_size and n_mc >= 1")
    check_kl_weight(kl_weight)


def _record_epoch(
    history: History,
    model: nn.Module,
    epoch: int,
    losses: tuple[Tensor, Tensor, Tensor],
    track_sparsity: bool,
) -> None:
    """Append one epoch's mean loss, NLL and KL (and sparsity, unresolved fraction)."""
    loss, nll, kl = losses
    history.epoch.append(epoch)
    history.loss.append(_to_list(loss))
    history.nll.append(_to_list(nll))
    history.kl.append(_to_list(kl))
    if track_sparsity:
        history.sparsity.append(_to_list(sparsity(model)))
        history.unresolved.append(_to_list(unresolved_fraction(model)))


def _save_state(
    ckpt: Path,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    generator: torch.Generator,
    history: History,
    epoch: int,
    extra: dict[str, Any],
) -> None:
    """Checkpoint everything a bit-for-bit resume needs (read back by :func:`_resume`)."""
    state = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "generator": generator.get_state(),
        "history": history.as_dict(),
        "epoch": epoch,
        "extra": extra,
    }
    save_checkpoint(state, ckpt)


def _resume(
    ckpt: Path, model: nn.Module, opt: torch.optim.Optimizer, generator: torch.Generator
) -> tuple[History, int]:
    """Load model, optimiser and generator state from ``ckpt``: ``(history, epoch)``."""
    state = load_checkpoint(ckpt)
    try:
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        generator.set_state(state["generator"])
        history, start = History(**state["history"]), int(state["epoch"])
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise CheckpointError(
            f"checkpoint {ckpt} does not fit this model or training run ({err}); "
            "delete it or use another checkpoint path"
        ) from None
    logger.info("resumed from %s at epoch %d", ckpt, start)
    return history, start


def _run_epoch(
    model: nn.Module,
    objective: Objective,
    opt: torch.optim.Optimizer,
    batches: Minibatches,
    on_step: Callable[[int], None] | None,
    epoch: int,
) -> tuple[Tensor, Tensor, Tensor]:
    """One pass over the minibatches: the epoch's mean ``(loss, nll, kl)``."""
    step = epoch * batches.n_batches  # the global step count, also across a resume
    tot_loss = tot_nll = tot_kl = torch.zeros((), device=batches.device)
    for xb, yb in batches.epoch():
        # Gradients dropped before the forward, not after: the memory they free goes to
        # the forward's outputs while Adam's reads may still hold it in the cache (measured,
        # in-process A/B: 0.98-0.99 of the step on MNIST and Simulation II).
        opt.zero_grad(set_to_none=True)
        loss, nll, kl = objective(model, xb, yb)
        # R replicates' losses (R,) are summed: each replicate's gradient is its own. One
        # network's scalar goes straight in: a sum of one value is one more operation and
        # autograd node a step, 3-5% of a small network's step (measured, UCI 8-50-1 and
        # Simulation II, 1 thread, in-process A/B).
        (loss if loss.dim() == 0 else loss.sum()).backward()
        opt.step()
        if on_step is not None:
            on_step(step)
        step += 1
        tot_loss = tot_loss + loss.detach()
        tot_nll = tot_nll + nll
        tot_kl = tot_kl + kl
    k = batches.n_batches
    return tot_loss / k, tot_nll / k, tot_kl / k


def _check_finite(loss: Tensor, epoch: int) -> None:
    if not bool(torch.all(torch.isfinite(loss))):
        bad = (
            ""
            if loss.dim() == 0
            else f" (replicates {torch.nonzero(~torch.isfinite(loss)).flatten().tolist()})"
        )
        raise FloatingPointError(
            f"the loss became {_to_list(loss)} at epoch {epoch}{bad}; "
            "lower the learning rate or check the data for extreme values"
        )
