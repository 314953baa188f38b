"""The exact log-space KL: closed forms, extreme arguments, analytic gradients."""

import math

import pytest
import torch
from torch.distributions import Bernoulli, Normal, kl_divergence

from svbnn._engine.kernels import log_softplus
from svbnn.nn import SpikeSlabLinear
from svbnn.objectives import spike_slab_kl, spike_slab_kl_reference
from svbnn.priors import log1mexp

D = torch.float64


def _params(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(n, generator=g, dtype=D) * 2
    rho = torch.randn(n, generator=g, dtype=D) * 2
    alpha = torch.randn(n, generator=g, dtype=D) * 4
    return mu, rho, alpha


@pytest.mark.parametrize("lam", [0.3, 1e-3, 0.97])
def test_kl_matches_torch_distributions(lam: float) -> None:
    mu, rho, alpha = _params(200)
    sigma = torch.nn.functional.softplus(rho)
    phi = torch.sigmoid(alpha)
    var0 = 2.0
    expected = kl_divergence(Bernoulli(probs=phi), Bernoulli(probs=torch.full_like(phi, lam)))
    expected = expected + phi * kl_divergence(
        Normal(mu, sigma), Normal(torch.zeros_like(mu), torch.full_like(mu, math.sqrt(var0)))
    )
    got = spike_slab_kl_reference(mu, rho, alpha, math.log(lam), var0)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    total = spike_slab_kl(mu, rho, alpha, math.log(lam), var0)
    torch.testing.assert_close(total, expected.sum(), rtol=1e-12, atol=1e-10)


def test_kl_closed_form_at_tiny_lambda() -> None:
    # log lambda = -1000: lambda underflows float64, log(1 - lambda) = 0 to double precision,
    # so KL = phi (log phi + 1000) + (1 - phi) log(1 - phi) + phi * slab exactly.
    mu, rho, alpha = _params(50, seed=1)
    phi = torch.sigmoid(alpha)
    sigma = torch.nn.functional.softplus(rho)
    var0 = 2.0
    slab = 0.5 * math.log(var0) - torch.log(sigma) + (sigma**2 + mu**2) / (2 * var0) - 0.5
    expected = phi * (torch.log(phi) + 1000.0) + (1 - phi) * torch.log1p(-phi) + phi * slab
    got = spike_slab_kl_reference(mu, rho, alpha, -1000.0, var0)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kl_finite_on_extreme_grid(dtype: torch.dtype) -> None:
    alphas = torch.linspace(-50, 50, 101, dtype=dtype)
    for log_lam in [-1000.0, -200 * math.log(10), -30.0, -1.0, -1e-3, -1e-12]:
        a = alphas.clone().requires_grad_()
        mu = torch.full_like(a, 0.3).requires_grad_()
        rho = torch.full_like(a, -6.0).requires_grad_()
        kl = spike_slab_kl(mu, rho, a, log_lam, 2.0)
        assert torch.isfinite(kl)
        kl.backward()
        for p in (a, mu, rho):
            assert p.grad is not None and torch.all(torch.isfinite(p.grad))
        elem = spike_slab_kl_reference(mu.detach(), rho.detach(), a.detach(), log_lam, 2.0)
        assert torch.all(torch.isfinite(elem))
        # KL is non-negative up to rounding.
        assert float(elem.min()) > -1e-4


def test_fused_gradient_equals_autograd() -> None:
    mu, rho, alpha = (t.requires_grad_() for t in _params(30, seed=2))
    assert torch.autograd.gradcheck(
        lambda a, b, c: spike_slab_kl(a, b, c, -3.5, 2.0), (mu, rho, alpha)
    )
    for log_lam in [-1000.0, -1e-12]:
        k1 = spike_slab_kl(mu, rho, alpha, log_lam, 2.0)
        g1 = torch.autograd.grad(k1, (mu, rho, alpha))
        k2 = spike_slab_kl_reference(mu, rho, alpha, log_lam, 2.0).sum()
        g2 = torch.autograd.grad(k2, (mu, rho, alpha))
        for a, b in zip(g1, g2, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_log1mexp_accuracy() -> None:
    x = torch.tensor([-1e-300, -1e-12, -0.5, -0.7, -5.0, -1000.0], dtype=D)
    expected = torch.tensor(
        [
            math.log(1e-300),
            math.log(1e-12),
            math.log(-math.expm1(-0.5)),
            math.log(-math.expm1(-0.7)),
            math.log1p(-math.exp(-5.0)),
            0.0,
        ],
        dtype=D,
    )
    torch.testing.assert_close(log1mexp(x), expected, rtol=1e-12, atol=1e-300)


def test_replicated_kl_is_per_replicate() -> None:
    g = torch.Generator().manual_seed(0)
    layer = SpikeSlabLinear(
        5,
        3,
        n_replicates=4,
        log_prior_inclusion=torch.tensor([-1.0, -5.0, -50.0, -1000.0]),
        generator=g,
        dtype=D,
    )
    with torch.no_grad():
        layer.alpha.normal_(generator=g)
    kl = layer.kl_divergence()
    assert kl.shape == (4,)
    for r, log_lam in enumerate([-1.0, -5.0, -50.0, -1000.0]):
        single = spike_slab_kl(layer.mu[r], layer.rho[r], layer.alpha[r], log_lam, 2.0)
        torch.testing.assert_close(kl[r], single)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_log_softplus_is_accurate_and_has_finite_gradients_in_the_tail(
    dtype: torch.dtype,
) -> None:
    # The one log(softplus) of the library (kernels, Gaussian and horseshoe layers): exact
    # where softplus is representable, rho itself below -20 (where softplus(rho) = e^rho
    # to the precision), and a finite gradient also where softplus underflows to 0.
    rho = torch.tensor([-300.0, -120.0, -21.0, -19.0, -1.0, 0.0, 3.0, 40.0], dtype=dtype)
    rho.requires_grad_()
    got = log_softplus(rho)
    want = torch.log(torch.nn.functional.softplus(rho.detach().double()))
    want = torch.where(rho.detach() < -20, rho.detach().double(), want)
    torch.testing.assert_close(got.double(), want, rtol=1e-6, atol=1e-6)
    (grad,) = torch.autograd.grad(got.sum(), rho)
    assert bool(torch.isfinite(grad).all())
    torch.testing.assert_close(grad[:3], torch.ones(3, dtype=dtype))
    # Given sigma (as the kernels pass it), the same numbers bit for bit.
    sigma = torch.nn.functional.softplus(rho.detach())
    assert torch.equal(log_softplus(rho.detach(), sigma), got.detach())
