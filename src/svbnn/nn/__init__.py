"""Variational layers: spike-and-slab (the paper's method) and the baselines' layers."""

from .base import (
    ForwardMode,
    Sampler,
    VariationalLayer,
    forward_mode,
    frozen_sample,
    kl_divergence,
    set_generator,
    variational_layers,
)
from .spike_slab import (
    SpikeSlabConv2d,
    SpikeSlabLinear,
    SpikeSlabMLP,
    activation_module,
    gumbel_spike_slab,
    inverse_cdf_spike_slab,
)

__all__ = [
    "ForwardMode",
    "Sampler",
    "SpikeSlabConv2d",
    "SpikeSlabLinear",
    "SpikeSlabMLP",
    "VariationalLayer",
    "activation_module",
    "forward_mode",
    "frozen_sample",
    "gumbel_spike_slab",
    "inverse_cdf_spike_slab",
    "kl_divergence",
    "set_generator",
    "variational_layers",
]
