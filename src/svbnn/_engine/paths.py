"""Which of the fast paths of :mod:`svbnn._engine.fused` applies to a
:class:`~svbnn.nn.SpikeSlabMLP` and its input: the conditions :class:`FusedEngine` checks
before each training forward. Private.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from ..nn.base import ACTIVATIONS, ForwardMode, Sampler
from . import native as _native
from .kernels import Backend, _on_cpu, backend, use_whole_network

if TYPE_CHECKING:
    from ..nn.spike_slab import SpikeSlabLinear, SpikeSlabMLP

__all__ = [
    "EAGER_FUSED_MAX_NUMEL",
    "draw_ok",
    "eager_fused_ok",
    "flat_mlp_ok",
    "fused_kl_ok",
    "layer_shapes",
    "native_draw",
    "native_loops",
    "native_network",
    "whole_network_ok",
]


EAGER_FUSED_MAX_NUMEL = 100_000
"""Size from which one network (not replicates) whose draw + KL would run on the eager
kernels on the CPU (the ``eager`` backend; ``native`` where its loops do not serve) draws
layer by layer (path 1) instead of with the fused eager function (path 2), whose
whole-network temporaries fault pages in each step. Upper quartiles of path 2's step time
over path 1's (``benchmarks.engine_paths``, 15 rounds, MNIST's network with two hidden
layers of 64 to 512 units; ``docs/results/engine-paths/run6`` to ``run8``): 0.811-0.864 at
55,050 parameters, 0.872 and 1.052 at 85,642, 0.903-1.338 from 118,282 to 669,706; the
rule that keeps a fast path asks for below 0.91 (``docs/performance.md``, "Path 2 by
network size")."""


def eager_fused_ok(model: SpikeSlabMLP) -> bool:
    """Whether the fused eager draw + KL (path 2) serves this network, where its draw runs
    on the eager kernels: replicates, off the CPU, or one network below
    :data:`EAGER_FUSED_MAX_NUMEL` parameters."""
    mu = model.mu
    return mu.dim() != 1 or mu.numel() < EAGER_FUSED_MAX_NUMEL or not _on_cpu(mu.device)


def layer_shapes(layers: list[SpikeSlabLinear]) -> tuple[tuple[int, int], ...]:
    return tuple((layer.out_features, layer.fan_in) for layer in layers)


def draw_ok(model: SpikeSlabMLP, layers: list[SpikeSlabLinear]) -> bool:
    # A sampling forward of a network on flat storage, its layers alike and not frozen.
    if not (model.fused and layers and "mu" in model._parameters):
        return False
    first = layers[0]
    if first._local_step():  # local reparameterisation draws no weights
        return False
    return first.mode is ForwardMode.SAMPLE and all(
        layer._flat is not None
        and layer._frozen is None
        and layer.mode is first.mode
        and layer.sampler is first.sampler
        and layer.temperature == first.temperature
        for layer in layers
    )


def local_flat_ok(model: SpikeSlabMLP, x: Tensor, layers: list[SpikeSlabLinear]) -> bool:
    # A training forward under local reparameterisation of one network on flat storage
    # (not replicated), every layer alike, one matrix input, plain layers.
    if not (model.fused and layers and "mu" in model._parameters):
        return False
    return (
        # (a network off the local sampler stops at its first layer's check)
        all(layer._local_step() and layer._flat is not None and layer.has_bias for layer in layers)
        and model.mu.dim() == 1
        and x.dim() == 2
        and _plain_layers_ok(model, layers)
    )


def one_prior_variance(layers: list[SpikeSlabLinear]) -> bool:
    # The flat KL (one slab variance for all parameters) applies.
    first = layers[0]
    return all(layer.prior_variance == first.prior_variance for layer in layers)


def fused_kl_ok(layers: list[SpikeSlabLinear]) -> bool:
    # The one-pass draw + KL: Gumbel sampler, training (grad enabled), one prior variance.
    return (
        layers[0].sampler is Sampler.GUMBEL
        and torch.is_grad_enabled()
        and one_prior_variance(layers)
    )


def flat_mlp_ok(model: SpikeSlabMLP, x: Tensor, layers: list[SpikeSlabLinear]) -> bool:
    # One matrix input (or (R, m, p) for R replicates), every layer with a bias, a known
    # activation, and no hooks that running the modules one by one would have called.
    if layers[0].n_replicates is None:
        shape_ok = x.dim() == 2
    else:
        shape_ok = _replicated_input_ok(x, layers)
    return shape_ok and _plain_layers_ok(model, layers)


def _replicated_input_ok(x: Tensor, layers: list[SpikeSlabLinear]) -> bool:
    # (R, m, p) for R replicates: any other shape takes the layers' path, which says why
    # it does not fit.
    first = layers[0]
    return x.dim() == 3 and x.shape[0] == first.n_replicates and x.shape[2] == first.in_features


def _plain_layers_ok(model: SpikeSlabMLP, layers: list[SpikeSlabLinear]) -> bool:
    return (
        model.activation in ACTIVATIONS
        and all(layer.has_bias for layer in layers)
        and not any(
            m._forward_hooks or m._forward_pre_hooks or m._backward_hooks
            for m in (model.net, *model.net)
        )
        and not nn.modules.module._global_forward_hooks
        and not nn.modules.module._global_forward_pre_hooks
    )


def whole_network_ok(model: SpikeSlabMLP, x: Tensor, layers: list[SpikeSlabLinear]) -> bool:
    return (
        use_whole_network(model.mu.numel(), model.mu.device)
        and not native_network(model, layers)
        and fused_kl_ok(layers)
        and flat_mlp_ok(model, x, layers)
    )


def native_network(model: SpikeSlabMLP, layers: list[SpikeSlabLinear]) -> bool:
    """Under ``auto`` (or ``native``): whether svbnn's native loops run this network's whole
    training step (a replicated float32 network on the CPU of narrow layers, ReLU or none,
    one prior, under ``auto`` one torch thread: the draw + KL and the layers,
    :mod:`svbnn._engine.native`). Such a network takes
    the per-parameter kernels instead of the one-graph step, which compiles first and
    steps slower for such networks (``docs/performance.md``): where the native step turns
    it away, the native loops' draw + KL below ``AUTO_MIN_NUMEL`` parameters and
    inductor's from there on."""
    mu = model._parameters.get("mu")
    return mu is not None and mu.dim() == 2 and native_loops(model, layers)


def native_loops(
    model: SpikeSlabMLP, layers: list[SpikeSlabLinear], max_out: int | None = None
) -> bool:
    """Under ``auto`` or ``native``: whether the native loops can run this network's draw +
    KL and its layers: one network or replicates, float32 on the CPU, layers of at most
    ``max_out`` outputs (default ``_native.NARROW_MAX_OUT``), ReLU or none, one prior, and
    under ``auto`` one torch thread (:func:`native_network` without asking for
    replicates)."""
    mode = backend()
    if mode not in (Backend.AUTO, Backend.NATIVE) or "mu" not in model._parameters:
        return False
    return _native.narrow_network(layer_shapes(layers), model.activation, max_out) and (
        native_draw(model, layers[0], any_threads=mode is Backend.NATIVE)
    )


def native_draw(model: SpikeSlabMLP, first: SpikeSlabLinear, any_threads: bool) -> bool:
    """Whether the native loops serve this network's draw + KL (``_native.usable`` of its
    flat parameters, prior and temperature; ``first``: its first layer)."""
    return _native.usable(
        model.mu,
        model.rho,
        model.alpha,
        model.log_prior_inclusion,
        1.0 / float(first.temperature),
        any_threads=any_threads,
    )
