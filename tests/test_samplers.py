"""Samplers: exact gate probabilities, goodness of fit, pathwise gradients, seed replay."""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats

from svbnn.nn import (
    SpikeSlabConv2d,
    SpikeSlabLinear,
    forward_mode,
    frozen_sample,
    gumbel_spike_slab,
    inverse_cdf_spike_slab,
)

D = torch.float64
N = 200_000


def _consts(mu: float, sigma: float, phi: float, n: int = N) -> tuple[torch.Tensor, ...]:
    rho = math.log(math.expm1(sigma))
    alpha = math.log(phi / (1 - phi))
    return (
        torch.full((n,), mu, dtype=D, requires_grad=True),
        torch.full((n,), rho, dtype=D, requires_grad=True),
        torch.full((n,), alpha, dtype=D, requires_grad=True),
    )


def _draw(
    sampler: str, mu: torch.Tensor, rho: torch.Tensor, alpha: torch.Tensor, seed: int
) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u = torch.rand(mu.shape, generator=g, dtype=D)
    if sampler == "gumbel":
        eps = torch.randn(mu.shape, generator=g, dtype=D)
        return gumbel_spike_slab(mu, rho, alpha, u, eps, 0.5)
    return inverse_cdf_spike_slab(mu, rho, alpha, u)


@pytest.mark.parametrize("sampler", ["gumbel", "inverse_cdf"])
@pytest.mark.parametrize("phi", [0.02, 0.3, 0.5, 0.9, 0.995])
def test_gate_probability_is_phi(sampler: str, phi: float) -> None:
    mu, rho, alpha = _consts(1.5, 0.5, phi)
    theta = _draw(sampler, mu, rho, alpha, seed=int(phi * 1000))
    frac = float((theta != 0).double().mean())
    # Binomial standard error; 5 s.e. gives a false-alarm rate below 1e-6 per case.
    se = math.sqrt(phi * (1 - phi) / N)
    assert abs(frac - phi) < 5 * se


def _mixture_pit(
    theta: np.ndarray, mu: float, sigma: float, phi: float, rng: np.random.Generator
) -> np.ndarray:
    """Randomised probability integral transform of the mixture (uniform iff the law is right)."""
    cdf = lambda t: phi * stats.norm.cdf(t, mu, sigma) + (1 - phi) * (t >= 0)  # noqa: E731
    pit = cdf(theta)
    zero = theta == 0
    lo = phi * stats.norm.cdf(0.0, mu, sigma)
    pit[zero] = lo + (1 - phi) * rng.random(int(zero.sum()))
    return pit


@pytest.mark.parametrize("sampler", ["gumbel", "inverse_cdf"])
@pytest.mark.parametrize("mu,sigma,phi", [(0.4, 1.0, 0.6), (-2.0, 0.3, 0.2), (3.0, 0.01, 0.95)])
def test_draws_follow_the_mixture(sampler: str, mu: float, sigma: float, phi: float) -> None:
    m, r, a = _consts(mu, sigma, phi, n=20_000)
    theta = _draw(sampler, m, r, a, seed=7).detach().numpy()
    pit = _mixture_pit(theta, mu, sigma, phi, np.random.default_rng(0))
    assert stats.kstest(pit, "uniform").pvalue > 1e-3


def _pathwise_check(sampler: str, moment: int, mu0: float, sigma: float, phi: float) -> None:
    mu, rho, alpha = _consts(mu0, sigma, phi)
    theta = _draw(sampler, mu, rho, alpha, seed=11)
    (theta**moment).sum().backward()
    dsig_drho = 1 / (1 + math.exp(-math.log(math.expm1(sigma))))
    dphi_dalpha = phi * (1 - phi)
    if moment == 1:  # E[theta] = phi mu
        analytic = {"mu": phi, "rho": 0.0, "alpha": mu0 * dphi_dalpha}
    else:  # E[theta^2] = phi (sigma^2 + mu^2)
        analytic = {
            "mu": 2 * phi * mu0,
            "rho": 2 * phi * sigma * dsig_drho,
            "alpha": (sigma**2 + mu0**2) * dphi_dalpha,
        }
    grads = {"mu": mu.grad, "rho": rho.grad, "alpha": alpha.grad}
    names = ["mu", "rho", "alpha"] if sampler == "inverse_cdf" else ["mu", "rho"]
    for name in names:
        g = grads[name]
        assert g is not None
        est, se = float(g.mean()), float(g.std()) / math.sqrt(N)
        assert abs(est - analytic[name]) < 5 * se + 1e-12, (name, est, analytic[name], se)


@pytest.mark.parametrize("sampler", ["gumbel", "inverse_cdf"])
@pytest.mark.parametrize("moment", [1, 2])
@pytest.mark.parametrize("mu0,sigma,phi", [(0.5, 1.0, 0.6), (-1.0, 0.7, 0.3)])
def test_pathwise_gradients_are_unbiased(
    sampler: str, moment: int, mu0: float, sigma: float, phi: float
) -> None:
    """Inverse CDF: unbiased for mu, sigma and phi. Gumbel straight-through: unbiased for mu and
    sigma; its phi-gradient is the relaxation's (checked in the next test), biased by design."""
    _pathwise_check(sampler, moment, mu0, sigma, phi)


def test_gumbel_phi_gradient_is_the_relaxed_gradient() -> None:
    # The straight-through alpha-gradient of E[theta] is mu * E[d g~/d alpha], where
    # g~ = sigmoid((alpha + L) / tau) with L standard logistic: compute it by quadrature.
    mu0, sigma, phi, tau = 0.8, 0.5, 0.7, 0.5
    mu, rho, alpha = _consts(mu0, sigma, phi)
    theta = _draw("gumbel", mu, rho, alpha, seed=3)
    theta.sum().backward()
    a = math.log(phi / (1 - phi))

    def integrand(u: float) -> float:
        s = 1 / (1 + math.exp(-(a + math.log(u) - math.log1p(-u)) / tau))
        return s * (1 - s) / tau

    from scipy.integrate import quad

    expected = mu0 * quad(integrand, 0, 1, limit=200)[0]
    g = alpha.grad
    assert g is not None
    se = float(g.std()) / math.sqrt(N)
    assert abs(float(g.mean()) - expected) < 5 * se


def test_gumbel_straight_through_equals_autograd_formula() -> None:
    """Seed replay: the fused kernel gives the gradients of gate = g + g~ - g~.detach()."""
    g = torch.Generator().manual_seed(5)
    shape = (7, 9)
    mu = torch.randn(shape, generator=g, dtype=D, requires_grad=True)
    rho = torch.randn(shape, generator=g, dtype=D, requires_grad=True)
    alpha = (2 * torch.randn(shape, generator=g, dtype=D)).requires_grad_()
    u = torch.rand(shape, generator=g, dtype=D)
    eps = torch.randn(shape, generator=g, dtype=D)
    w = torch.randn(shape, generator=g, dtype=D)
    tau = 0.5
    fused = gumbel_spike_slab(mu, rho, alpha, u, eps, tau)
    g1 = torch.autograd.grad((fused * w).sum(), (mu, rho, alpha))
    eta = alpha + torch.log(u) - torch.log1p(-u)
    soft = torch.sigmoid(eta / tau)
    hard = (eta > 0).to(D)
    gate = hard + soft - soft.detach()
    plain = gate * (mu + F.softplus(rho) * eps)
    g2 = torch.autograd.grad((plain * w).sum(), (mu, rho, alpha))
    torch.testing.assert_close(fused, plain.detach(), rtol=0, atol=1e-15)
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-14)


def test_forward_modes_linear() -> None:
    g = torch.Generator().manual_seed(0)
    layer = SpikeSlabLinear(4, 3, generator=g, dtype=D)
    with torch.no_grad():
        layer.alpha.normal_(generator=g)
    x = torch.randn(5, 4, generator=g, dtype=D)
    phi = torch.sigmoid(layer.alpha)
    with forward_mode(layer, "mean"):
        mean_w = phi * layer.mu
        torch.testing.assert_close(layer(x), F.linear(x, mean_w[:, :4], mean_w[:, 4]))
    with forward_mode(layer, "median"):
        med = layer.mu * (phi > 0.5)
        torch.testing.assert_close(layer(x), F.linear(x, med[:, :4], med[:, 4]))
    assert layer.mode.value == "sample"
    with frozen_sample(layer):
        a, b = layer(x), layer(x)
    torch.testing.assert_close(a, b)
    assert not torch.equal(layer(x), layer(x))


def test_conv2d_uses_sampled_kernel() -> None:
    g = torch.Generator().manual_seed(0)
    conv = SpikeSlabConv2d(3, 4, 3, padding=1, generator=g, dtype=D)
    x = torch.randn(2, 3, 6, 6, generator=g, dtype=D)
    with frozen_sample(conv):
        w, b = conv._weights()
        out = conv(x)
    assert w.shape == (4, 3, 3, 3)
    torch.testing.assert_close(out, F.conv2d(x, w, b, padding=1))
    assert conv.n_params() == 4 * 27 + 4
    assert conv.inclusion_probs()["weight"].shape == (4, 3, 3, 3)


def test_initialisation_starts_fully_connected() -> None:
    layer = SpikeSlabLinear(50, 20, generator=torch.Generator().manual_seed(0))
    phi = layer.inclusion_probs()["weight"]
    torch.testing.assert_close(phi, torch.full_like(phi, 0.99))
    assert float(layer.mu.detach().abs().max()) <= 1 / math.sqrt(50)
    assert float(layer.mu.detach().std()) > 0.05


def test_replicated_linear_matches_single() -> None:
    g = torch.Generator().manual_seed(0)
    rep = SpikeSlabLinear(4, 3, n_replicates=2, generator=g, dtype=D)
    x = torch.randn(2, 5, 4, generator=g, dtype=D)
    with forward_mode(rep, "median"):
        out = rep(x)
    for r in range(2):
        w = rep.mu[r] * (rep.alpha[r] > 0)
        torch.testing.assert_close(out[r], F.linear(x[r], w[:, :4], w[:, 4]))
    with pytest.raises(ValueError):
        rep(torch.randn(3, 5, 4, dtype=D))
