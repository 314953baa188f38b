"""The local reparameterisation sampler: exact moments, its draws' law, pathwise gradients,
where it applies, and a learning check."""

import math
from typing import Any

import mpmath as mp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from svbnn._engine.fused import LocalMomentsKL
from svbnn.nn import (
    SpikeSlabConv2d,
    SpikeSlabLinear,
    SpikeSlabMLP,
    forward_mode,
    frozen_sample,
    spike_slab_moments,
)
from svbnn.priors import log1mexp

D = torch.float64


@settings(max_examples=200, deadline=None)
@given(
    mu=st.floats(-50, 50),
    rho=st.floats(-30, 30),
    alpha=st.floats(-60, 60),
)
def test_moments_are_the_mixtures(mu: float, rho: float, alpha: float) -> None:
    """E[theta] = phi mu and Var[theta] = E[theta^2] - E[theta]^2 with
    E[theta^2] = phi (sigma^2 + mu^2), over the whole legal domain, in float64."""
    t = {k: torch.tensor([v], dtype=D) for k, v in (("mu", mu), ("rho", rho), ("alpha", alpha))}
    mean, var = spike_slab_moments(t["mu"], t["rho"], t["alpha"])
    phi = 1 / (1 + math.exp(-alpha))
    sigma = math.log1p(math.exp(-abs(rho))) + max(rho, 0.0)
    second = phi * (sigma**2 + mu**2)
    assert float(mean) == pytest.approx(phi * mu, rel=1e-12, abs=1e-300)
    assert float(var) >= 0.0
    # The difference form cancels: compare with a tolerance of its own rounding.
    assert float(var) == pytest.approx(second - (phi * mu) ** 2, rel=1e-9, abs=1e-12 * second)


def test_moments_are_those_of_exact_draws() -> None:
    """Against 200,000 exact inverse-CDF draws: mean and variance within 5 standard errors."""
    g = torch.Generator().manual_seed(0)
    n = 200_000
    for mu0, sigma, phi in ((0.4, 1.0, 0.6), (-2.0, 0.3, 0.2), (3.0, 0.01, 0.95)):
        # n weights of one law: a layer of one input and n outputs.
        layer = SpikeSlabLinear(1, n, bias=False, sampler="local", generator=g, dtype=D)
        with torch.no_grad():
            layer.mu.fill_(mu0)
            layer.rho.fill_(math.log(math.expm1(sigma)))
            layer.alpha.fill_(math.log(phi / (1 - phi)))
            moments = spike_slab_moments(layer.mu, layer.rho, layer.alpha)
            mean, var = (float(t[0, 0]) for t in moments)
            theta = layer.sample_weights()[0].reshape(-1)  # outside training: exact draws
        assert abs(float(theta.mean()) - mean) < 5 * math.sqrt(var / n)
        fourth = float(((theta - mean) ** 4).mean())
        assert abs(float(theta.var()) - var) < 5 * math.sqrt((fourth - var**2) / n)


def _layer(kind: str, g: torch.Generator, n: int) -> tuple[torch.nn.Module, torch.Tensor]:
    """A local layer and ``n`` copies of one input (each copy gets its own draw)."""
    if kind == "linear":
        layer: torch.nn.Module = SpikeSlabLinear(5, 3, sampler="local", generator=g, dtype=D)
        x = torch.randn(1, 5, generator=g, dtype=D).expand(n, 5)
    elif kind == "replicated":
        layer = SpikeSlabLinear(5, 3, sampler="local", n_replicates=2, generator=g, dtype=D)
        x = torch.randn(2, 1, 5, generator=g, dtype=D).expand(2, n, 5)
    else:
        layer = SpikeSlabConv2d(2, 3, 3, padding=1, sampler="local", generator=g, dtype=D)
        x = torch.randn(1, 2, 4, 4, generator=g, dtype=D).expand(n, 2, 4, 4)
    with torch.no_grad():  # middling gates and wide slabs: far from a point mass
        for name in ("mu", "rho", "alpha"):
            p = getattr(layer, name)
            p.copy_(torch.randn(p.shape, generator=g, dtype=D))
    return layer, x


def _moments(layer: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact mean and variance of the layer's outputs under q."""
    mean_w, var_w = spike_slab_moments(layer.mu, layer.rho, layer.alpha)
    m = layer._product(x, *layer._weights_from_flat(mean_w))
    v = layer._product(x * x, *layer._weights_from_flat(var_w))
    return m, v


@pytest.mark.parametrize("kind", ["linear", "replicated", "conv"])
def test_training_draws_are_gaussian_with_the_exact_moments(kind: str) -> None:
    """Each output entry: mean = the product with E[theta], variance = the product of x^2
    with Var[theta]; standardised draws are N(0, 1) (mean, variance and a KS test), and
    two entries of one row are uncorrelated."""
    n = 4000
    layer, x = _layer(kind, torch.Generator().manual_seed(1), n)
    with torch.no_grad():
        m, v = _moments(layer, x)
    out = layer(x)  # gradients on: training
    assert out.requires_grad
    row_dim = 1 if kind == "replicated" else 0
    z = ((out.detach() - m) / v.sqrt()).movedim(row_dim, 0).reshape(n, -1)
    k = z.shape[1]
    # Mean of n standard normals: sd 1 / sqrt(n); variance: sd sqrt(2 / (n - 1)); the
    # largest of k such statistics within 4.5 sd (a false alarm below 1e-4 for k <= 96).
    assert float(z.mean(0).abs().max()) < 4.5 / math.sqrt(n)
    assert float((z.var(0) - 1).abs().max()) < 4.5 * math.sqrt(2 / (n - 1))
    from scipy import stats

    assert stats.kstest(z.reshape(-1).numpy(), "norm").pvalue > 1e-3
    c = np.corrcoef(z[:, 0].numpy(), z[:, k - 1].numpy())[0, 1]
    assert abs(c) < 4.5 / math.sqrt(n)


def test_pathwise_gradients_are_those_of_the_gaussian_expectation() -> None:
    """E[out^2] = m^2 + v for out ~ N(m, v): the mean of the sampled gradients equals the
    analytic gradient, within 5 Monte Carlo standard errors, for mu, rho and alpha."""
    batches, rows = 50, 400
    layer, x = _layer("linear", torch.Generator().manual_seed(2), rows)
    params = [layer.mu, layer.rho, layer.alpha]
    m, v = _moments(layer, x[:1])
    exact = torch.autograd.grad((m * m + v).sum(), params)
    # Each batch: the mean gradient over its rows' independent draws.
    grads = [torch.autograd.grad((layer(x) ** 2).sum() / rows, params) for _ in range(batches)]
    for k, e in enumerate(exact):
        per = torch.stack([b[k] for b in grads])
        est, se = per.mean(0), per.std(0) / math.sqrt(batches)
        assert bool(torch.all((est - e).abs() <= 5 * se + 1e-10)), (k, est, e, se)


def test_outside_training_a_local_layer_draws_weights_exactly() -> None:
    """No gradients, or a frozen draw: the inverse-CDF draw (the same numbers from the same
    generator), and every row of a batch sees the same weights."""
    outs = {}
    for sampler in ("local", "inverse_cdf"):
        g = torch.Generator().manual_seed(3)
        layer = SpikeSlabLinear(4, 2, sampler=sampler, generator=g, dtype=D)
        x = torch.ones(3, 4, dtype=D)
        with torch.no_grad():
            outs[sampler] = layer(x)
        with frozen_sample(layer):
            outs[sampler + "-frozen"] = layer(x).detach()
    assert torch.equal(outs["local"], outs["inverse_cdf"])
    assert torch.equal(outs["local-frozen"], outs["inverse_cdf-frozen"])
    assert torch.equal(outs["local"][0], outs["local"][2])  # one weight draw for all rows


def test_a_local_network_trains_on_per_row_noise() -> None:
    """A SpikeSlabMLP with the local sampler, one network or replicated: in training two equal
    rows get different outputs (independent noise per row, no shared weight draw); in the
    mean mode they agree with the posterior-mean network."""
    g = torch.Generator().manual_seed(4)
    for replicates in (None, 2):
        net = SpikeSlabMLP(3, (8,), 1, sampler="local", n_replicates=replicates, generator=g)
        x = torch.ones(2, 3) if replicates is None else torch.ones(2, 2, 3)
        out = net(x)
        assert out.requires_grad
        assert not torch.equal(out[..., 0, :], out[..., 1, :])
        with torch.no_grad():
            same = net(x)
        assert torch.equal(same[..., 0, :], same[..., 1, :])
        with forward_mode(net, "mean"), torch.no_grad():
            mean = net(x)
        assert torch.equal(mean[..., 0, :], mean[..., 1, :])


@settings(max_examples=40, deadline=None)
@given(
    p=st.integers(1, 6),
    hidden=st.lists(st.integers(1, 7), min_size=0, max_size=3),
    out=st.integers(1, 3),
    rows=st.integers(1, 5),
    activation=st.sampled_from(["relu", "tanh", "sigmoid"]),
    scale=st.sampled_from([0.1, 1.0, 8.0]),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_flat_path_is_the_layers_path(
    p: int, hidden: list[int], out: int, rows: int, activation: str, scale: float, seed: int
) -> None:
    """LocalFlatMLP (a network on flat storage) against its layers run one by one, from the
    same generator state: the same outputs and gradients (mu, rho, alpha and x) to
    rounding, in float64, over shapes, activations and gates from closed to open."""
    g = torch.Generator().manual_seed(seed)
    net = SpikeSlabMLP(p, hidden, out, activation=activation, sampler="local", generator=g, dtype=D)
    with torch.no_grad():
        net.mu.copy_(torch.randn(net.mu.shape, generator=g, dtype=D))
        net.rho.copy_(torch.randn(net.rho.shape, generator=g, dtype=D) * 3)
        net.alpha.copy_(torch.randn(net.alpha.shape, generator=g, dtype=D) * scale)
    x = torch.randn(rows, p, generator=g, dtype=D, requires_grad=True)
    params = [net.mu, net.rho, net.alpha, x]
    results = []
    for run in (net, net._run):
        g.manual_seed(seed + 1)
        y = run(x)
        # The flat path computes the KL with the moments (LocalMomentsKL) and hands it to
        # kl_divergence; the layers path's KL is the KL's own function.
        kl = net.kl_divergence()
        w = torch.randn(y.shape, generator=torch.Generator().manual_seed(0), dtype=D)
        loss = (y * w).sum() + 0.37 * kl
        results.append(((y.detach(), kl.detach()), torch.autograd.grad(loss, params)))
    (y_flat, g_flat), (y_layers, g_layers) = results
    assert net(x).grad_fn.name() == "LocalFlatMLPBackward"
    assert net.kl_divergence().grad_fn.name() == "LocalMomentsKLBackward"
    torch.testing.assert_close(y_flat, y_layers, rtol=1e-12, atol=1e-12)
    for a, b in zip(g_flat, g_layers, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def _mp_moments_gradient(m: float, r: float, a: float, g_mean: float, g_var: float) -> list[float]:
    """d/d(mu, rho, alpha) of g_mean E[theta] + g_var Var[theta] of one weight, by central
    differences of the mixture's moments in 60-digit arithmetic (error ~1e-30)."""

    def f(mu: Any, rho: Any, alpha: Any) -> Any:
        phi = 1 / (1 + mp.exp(-alpha))
        sigma = mp.log1p(mp.exp(rho))
        mean = phi * mu
        return g_mean * mean + g_var * (phi * (sigma**2 + mu**2) - mean**2)

    point = [mp.mpf(v) for v in (m, r, a)]
    out = []
    with mp.workdps(60):
        for i in range(3):

            def along(x: Any, i: int = i) -> Any:
                return f(*point[:i], x, *point[i + 1 :])

            h = max(abs(point[i]), mp.mpf(1)) * mp.mpf(10) ** -15
            out.append(float(mp.diff(along, point[i], h=h)))
    return out


@settings(max_examples=100, deadline=None)
@given(
    mu=st.lists(st.floats(-50, 50), min_size=1, max_size=4),
    rho=st.floats(-30, 30),
    alpha=st.floats(-60, 60),
    seed=st.integers(0, 2**31 - 1),
)
def test_the_moments_pass_is_the_moments(
    mu: list[float], rho: float, alpha: float, seed: int
) -> None:
    """LocalMomentsKL's moments against spike_slab_moments, and its hand-written gradients
    against those of the mixture's moments in 60-digit arithmetic, over the whole legal
    domain, in float64 (its KL and the KL's gradients: tests/test_engine_reference.py).
    Tolerance: 1e-12 of the size of the terms each derivative sums."""
    n = len(mu)
    g = torch.Generator().manual_seed(seed)
    # The drawn values, spread around them.
    t_mu = torch.tensor(mu, dtype=D)
    t_rho = rho + torch.randn(n, generator=g, dtype=D).clamp(-3, 3)
    t_alpha = alpha + 4 * torch.randn(n, generator=g, dtype=D)
    params = [t.requires_grad_() for t in (t_mu, t_rho, t_alpha)]
    lam = torch.tensor(-3.0, dtype=D)
    g_mean, g_var = (torch.randn(n, generator=g, dtype=D) for _ in range(2))
    mean, var, _ = LocalMomentsKL.apply(*params, lam, log1mexp(lam), 0.1, False)
    ref_mean, ref_var = spike_slab_moments(*params)
    torch.testing.assert_close(mean, ref_mean, rtol=1e-15, atol=0.0)
    torch.testing.assert_close(var, ref_var, rtol=1e-15, atol=0.0)
    got = torch.autograd.grad((mean * g_mean).sum() + (var * g_var).sum(), params)
    rows = [
        _mp_moments_gradient(
            *(float(t[j]) for t in (t_mu.detach(), t_rho.detach(), t_alpha.detach(), g_mean, g_var))
        )
        for j in range(n)
    ]
    want = torch.tensor(rows, dtype=D).T
    with torch.no_grad():
        phi, one_m_phi = torch.sigmoid(t_alpha), torch.sigmoid(-t_alpha)
        sigma = torch.nn.functional.softplus(t_rho)
        q, m2 = phi * one_m_phi, t_mu * t_mu
        scales = (
            phi * g_mean.abs() + 2 * q * t_mu.abs() * g_var.abs(),
            2 * phi * sigma * torch.sigmoid(t_rho) * g_var.abs(),
            q * (t_mu.abs() * g_mean.abs() + (sigma * sigma + m2) * g_var.abs()),
        )
    for name, a, b, scale in zip(("mu", "rho", "alpha"), got, want, scales, strict=True):
        assert bool(((a - b).abs() <= 1e-12 * scale + 1e-300).all()), (name, a, b)
