"""Each family's KL is registered once, in svbnn.kl, and every layer computes it there."""

import math

import pytest
import torch

from svbnn import kl as K
from svbnn.nn import (
    GaussianLinear,
    HorseshoeLinear,
    SpikeSlabConv2d,
    SpikeSlabLinear,
    VariationalDropoutLinear,
)
from svbnn.objectives import spike_slab_kl


def test_every_family_is_registered_once() -> None:
    assert set(K._KL_REGISTRY) == {
        (K.SpikeSlab, K.SpikeSlabPrior),
        (K.MeanFieldGaussian, K.GaussianPrior),
        (K.Horseshoe, K.HorseshoePrior),
        (K.AdditiveNoise, K.LogUniformPrior),
    }
    with pytest.raises(ValueError, match="already registered"):
        K.register_kl(K.MeanFieldGaussian, K.GaussianPrior)(lambda q, p, b: q.mu.sum())
    with pytest.raises(NotImplementedError, match="MeanFieldGaussian against.*LogUniformPrior"):
        K.kl_divergence(K.MeanFieldGaussian(torch.zeros(2), torch.zeros(2)), K.LogUniformPrior())


@pytest.mark.parametrize("replicates", [None, 3])
def test_the_layers_compute_their_kl_through_the_registry(
    replicates: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(0)
    kw = {"n_replicates": replicates}
    layers = [
        SpikeSlabLinear(4, 3, **kw),
        GaussianLinear(4, 3, **kw),
        HorseshoeLinear(4, 3, **kw),
        VariationalDropoutLinear(4, 3, **kw),
    ]
    if replicates is None:  # (convolutions are not replicated)
        layers.insert(1, SpikeSlabConv2d(2, 3, 2))
    calls: list[str] = []
    for key, fn in list(K._KL_REGISTRY.items()):

        def spy(q: object, p: object, b: int, fn: K.KLFunction = fn) -> torch.Tensor:
            calls.append(type(q).__name__)
            return fn(q, p, b)

        monkeypatch.setitem(K._KL_REGISTRY, key, spy)
    for layer in layers:
        kl = layer.kl_divergence()
        assert kl.shape == (() if replicates is None else (replicates,))
        assert bool(torch.all(torch.isfinite(kl)))
    families = ["SpikeSlab", "MeanFieldGaussian", "Horseshoe", "AdditiveNoise"]
    assert calls == (families if replicates else ["SpikeSlab", *families])


def test_the_registered_kls_equal_their_closed_forms() -> None:
    g = torch.Generator().manual_seed(1)
    mu, rho = torch.randn(3, 5, generator=g, dtype=torch.float64), torch.full((3, 5), -1.0)
    rho = rho.double()
    sigma = torch.nn.functional.softplus(rho)
    ref = (math.log(2.0) / 2 - sigma.log() + (sigma**2 + mu**2) / 4.0 - 0.5).sum()
    got = K.kl_divergence(K.MeanFieldGaussian(mu, rho), K.GaussianPrior(2.0))
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)
    alpha = torch.randn(3, 5, generator=g, dtype=torch.float64)
    got = K.kl_divergence(K.SpikeSlab(mu, rho, alpha), K.SpikeSlabPrior(-3.0, 2.0))
    torch.testing.assert_close(got, spike_slab_kl(mu, rho, alpha, -3.0, 2.0))


def test_a_new_family_plugs_in() -> None:
    class PointMass:
        def __init__(self, value: torch.Tensor) -> None:
            self.value = value

    class Prior:
        pass

    class NarrowPrior(Prior):  # a subclass finds its base's registration
        pass

    @K.register_kl(PointMass, Prior)
    def _kl(q: PointMass, p: Prior, batch_dims: int) -> torch.Tensor:
        return (q.value**2).sum()

    try:
        assert float(K.kl_divergence(PointMass(torch.tensor([3.0, 4.0])), NarrowPrior())) == 25.0
    finally:
        del K._KL_REGISTRY[(PointMass, Prior)]
