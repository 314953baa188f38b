"""Variational layers: spike-and-slab (the paper's method) and the baselines' layers."""

from .base import (
    ForwardMode,
    GatedLayer,
    Sampler,
    VariationalContainer,
    VariationalLayer,
    activation_module,
    forward_mode,
    frozen_sample,
    is_gated_layer,
    kl_divergence,
    set_generator,
    variational_layers,
)
from .dropout import (
    VariationalDropoutConv2d,
    VariationalDropoutLinear,
    VariationalDropoutMLP,
    vd_kl_approximation,
)
from .gaussian import GaussianConv2d, GaussianLinear, GaussianMLP, VariationalMLP
from .horseshoe import HorseshoeLinear, HorseshoeMLP, half_cauchy_scale_kl, matrix_normal_kl
from .spike_slab import (
    SpikeSlabConv2d,
    SpikeSlabLinear,
    SpikeSlabMLP,
    gumbel_spike_slab,
    inverse_cdf_spike_slab,
    spike_slab_moments,
)

__all__ = [
    "GaussianConv2d",
    "GaussianLinear",
    "GaussianMLP",
    "HorseshoeLinear",
    "HorseshoeMLP",
    "VariationalDropoutConv2d",
    "VariationalDropoutLinear",
    "VariationalDropoutMLP",
    "VariationalMLP",
    "half_cauchy_scale_kl",
    "matrix_normal_kl",
    "vd_kl_approximation",
    "ForwardMode",
    "GatedLayer",
    "Sampler",
    "SpikeSlabConv2d",
    "SpikeSlabLinear",
    "SpikeSlabMLP",
    "VariationalContainer",
    "VariationalLayer",
    "activation_module",
    "forward_mode",
    "frozen_sample",
    "gumbel_spike_slab",
    "inverse_cdf_spike_slab",
    "spike_slab_moments",
    "is_gated_layer",
    "kl_divergence",
    "set_generator",
    "variational_layers",
]
