"""Whole training epochs of one small network in svbnn's native loops. Private.

A small network's training step costs about a millisecond on a CPU, of which the loops'
arithmetic is about a quarter: the rest is the Python of the step (the objective, the
graph-free node, the optimiser's wrappers and the learning-rate scheduler), and on a small
table, where an epoch is one or two steps, the Python of each epoch. Where
:func:`native_epoch_kind` names a kind, :func:`native_epochs` runs every step of one or more
epochs in one call (``epochs.cpp``): the steps that the graph-free step of that kind
(:class:`~svbnn._engine.native_step.NativeLocalNegativeElbo`, the local sampler under a
Gaussian likelihood with a learned noise level, the regressor's; or
:class:`~svbnn._engine.native_step.NativeNegativeElbo`, the Gumbel sampler under a
categorical likelihood, the classifier's) and the training loop's fused Adam
(:class:`svbnn._adam.Adam`) would run, the same ATen operations and loops in the same order,
and torch's own fused Adam kernel, on the same random numbers (each epoch's minibatch order
drawn from the loop's generator as :meth:`svbnn.training.Minibatches.order` draws it, the
draws from the layers' generators). So the epochs leave the parameters, Adam's state and the
generators as the step-by-step loop leaves them, bit for bit, and report each epoch's record
(its mean loss, and the gates' statistics) as the loop computes it
(tests/test_native_epoch.py); the caller (:func:`svbnn.training.train`) gives the KL weights
and the learning rates of the steps, and how many epochs may run before it must look at the
network.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._adam import Adam
from . import native as _native
from .fused import _kl_key, native_gumbel_step
from .native_step import native_local_step_ok, split_targets, step_likelihood, target_shape

if TYPE_CHECKING:
    from ..nn.spike_slab import SpikeSlabMLP

__all__ = ["native_epoch_kind", "native_epoch_runnable", "native_epochs"]


def _adam_group(
    opt: Adam | torch.optim.Optimizer, params: Sequence[Tensor]
) -> dict[str, Any] | None:
    """``opt``'s one parameter group if ``opt`` is the training loop's
    :class:`svbnn._adam.Adam` with the fused kernel over exactly ``params``, its state set
    up (after its first step), and options the native epoch passes on (``weight_decay``,
    betas, ``eps``, a float rate); else ``None``."""
    if type(opt) is not Adam or len(opt.param_groups) != 1:
        return None
    group = opt.param_groups[0]
    if not (
        group.get("fused")
        and not group.get("amsgrad")
        and not group.get("maximize")
        and not group.get("capturable")
        and not group.get("differentiable")
        and not group.get("decoupled_weight_decay", False)
        and isinstance(group.get("lr"), float)
        and all(isinstance(b, float) for b in group["betas"])
        and len(group["params"]) == len(params)
        and all(a is b for a, b in zip(group["params"], params, strict=True))
    ):
        return None
    for p in params:
        state = opt.state.get(p)
        if not (state and {"step", "exp_avg", "exp_avg_sq"} <= state.keys()):
            return None
        if p._backward_hooks or getattr(p, "_post_accumulate_grad_hooks", None) is not None:
            return None
    return group


def native_epoch_kind(
    model: SpikeSlabMLP,
    likelihood: Any,
    opt: Adam | torch.optim.Optimizer,
    X: Tensor,
    y: Tensor,
    batch_size: int,
) -> str | None:
    """The kind of epoch :func:`native_epoch` runs for ``model`` on ``X`` ``(n, p)`` and
    ``y`` ``(n,)`` (under a :class:`~svbnn.objectives.RowWeightedLikelihood`, ``(n, 2)``:
    each row's response and weight) in minibatches of ``batch_size`` rows, or ``None``:
    ``"local"`` where every step would be
    :class:`~svbnn._engine.native_step.NativeLocalNegativeElbo` (the local sampler's
    training forward on flat storage under the ``auto`` or ``native`` backend,
    :func:`~svbnn._engine.native_step.native_local_step_ok`) under a Gaussian
    likelihood of one output with a learned noise level (``GaussianLikelihood(
    learn_noise=True)``); ``"categorical"`` where every step would be
    :class:`~svbnn._engine.native_step.NativeNegativeElbo` of one network
    (:func:`~svbnn._engine.fused.native_gumbel_step`) under a categorical likelihood; in
    both, trained by the loop's fused Adam as :func:`native_epoch_runnable`
    says."""
    mu = model._parameters.get("mu")
    if mu is None or mu.dim() != 1 or not _native.available():
        return None
    spec = step_likelihood(likelihood, model.out_features)
    if spec is None or not (X.dim() == 2 and X.is_contiguous() and y.is_contiguous()):
        return None
    if y.shape != target_shape(X, spec[2]):
        return None
    layers = model.layers()
    if not layers:
        return None
    m = min(batch_size, X.shape[0])
    if layers[0]._local_step():
        if not isinstance(spec[1], Tensor):  # a learned noise level only
            return None
        if not native_local_step_ok(model, layers, spec, X[:m], y[:m]):
            return None
        kind = "local"
    else:
        step = native_gumbel_step(model, layers, likelihood, X[:m], y[:m])
        if step is None or step[0] != "categorical":
            return None
        kind = "categorical"
    return kind if native_epoch_runnable(model, likelihood, opt) else None


def _trained(model: SpikeSlabMLP, likelihood: Any) -> list[Tensor]:
    """The parameters a step trains, in the optimiser's order: the network's ``mu``,
    ``rho``, ``alpha``, and a learned noise level."""
    params = [model.mu, model.rho, model.alpha]
    spec = step_likelihood(likelihood, model.out_features)
    if spec is not None and isinstance(spec[1], Tensor):
        params.append(spec[1])
    return params


def native_epoch_runnable(
    model: SpikeSlabMLP, likelihood: Any, opt: Adam | torch.optim.Optimizer
) -> bool:
    """The part of :func:`native_epoch_kind` that a training loop's callbacks may change
    between epochs while the network's path stays: no anomaly detection, no profiler
    (whose records of each step the epoch would miss), and ``opt`` a fused Adam over the
    parameters the step trains (the network's, and a learned noise level),
    its state set up by a first step."""
    if torch.is_anomaly_enabled() or torch.autograd.profiler._is_profiler_enabled:
        return False
    return _adam_group(opt, _trained(model, likelihood)) is not None


def native_epochs(
    kind: str,
    model: SpikeSlabMLP,
    likelihood: Any,
    opt: Adam | torch.optim.Optimizer,
    X: Tensor,
    y: Tensor,
    generator: torch.Generator,
    n_epochs: int,
    batch_size: int,
    n_train: Sequence[float],
    kl_weight: Sequence[float],
    lr: Sequence[float],
    gates: bool,
) -> tuple[Tensor, Tensor | None]:
    """``n_epochs`` epochs of ``model`` of the ``kind`` :func:`native_epoch_kind` named,
    where :func:`native_epoch_runnable` has just said so (not checked again here). Each
    epoch draws its order of the rows of ``X`` ``(n, p)`` and ``y`` ``(n,)`` from
    ``generator`` (as :meth:`svbnn.training.Minibatches.order` does) and takes minibatches
    of ``batch_size`` rows; step ``i`` (counted over all the epochs) weighs the KL by
    ``kl_weight[i]`` (divided by ``n_train[i] = n / kl_weight[i]``) at learning rate
    ``lr[i]``. The parameters (and a learned noise level) and Adam's state are updated in
    place, their ``.grad`` left at the last step's gradients. Under a
    :class:`~svbnn.objectives.RowWeightedLikelihood` ``y`` is ``(n, 2)``, each row's
    response and weight, and each step's log-likelihood is weighted by its rows' weights.
    Returns each epoch's means over its steps of ``(loss, nll, kl / n)``, ``(E, 3)``, the
    last weighted as :func:`svbnn.training.negative_elbo` returns it, and with ``gates``
    the mean ``phi`` and the unresolved fraction after each epoch, ``(E, 2)``, as
    :func:`svbnn.selection.gate_statistics` computes them (else ``None``). ``E`` is
    ``n_epochs``, or fewer where an epoch's mean loss is not finite (the epochs stop after
    it)."""
    lib = _native.library()
    assert lib is not None
    params = _trained(model, likelihood)
    group = opt.param_groups[0]  # the one group native_epoch_runnable checked
    layers = model.layers()
    first = layers[0]
    engine = model._fused
    engine.kl_cache = None  # the parameters change under it, as a step's would
    log_lam, log_1mlam = engine._log_lams(model, _kl_key(model))
    log_sigma0 = 0.5 * math.log(first.prior_variance)
    prior = (log_lam, log_1mlam, log_sigma0, math.exp(-2.0 * log_sigma0))
    states = [opt.state[p] for p in params]
    adam = (
        [s["exp_avg"] for s in states],
        [s["exp_avg_sq"] for s in states],
        [s["step"] for s in states],
    )
    steps = (list(n_train), list(kl_weight), list(lr))
    beta1, beta2 = group["betas"]
    options = (beta1, beta2, group["eps"], group["weight_decay"])
    outs = [layer.out_features for layer in layers]
    run = (generator, int(n_epochs), bool(gates), batch_size, outs)
    spec = step_likelihood(likelihood, model.out_features)
    assert spec is not None  # native_epoch_kind named a kind
    y, w = split_targets(y, spec[2], classes=kind == "categorical")  # contiguous, as checked
    with torch.no_grad():  # as Adam's step: the parameters are leaves that need gradients
        if kind == "local":
            gens = [layer.generator for layer in layers]
            means, stats, *grads = lib.local_gaussian_epochs(
                params, *adam, *prior, X, y, w, *run, gens, *steps, *options
            )
        elif kind == "categorical":
            relu = model.activation == "relu"
            inv_tau = 1.0 / float(first.temperature)
            means, stats, *grads = lib.gumbel_categorical_epochs(
                params,
                *adam,
                *prior,
                inv_tau,
                X,
                y,
                w,
                *run,
                relu,
                first.generator,
                *steps,
                *options,
            )
        else:
            raise ValueError(f"no native epoch of kind {kind!r}")
    for p, g in zip(params, grads, strict=True):
        p.grad = g
    return means, (stats if gates else None)
