"""Every path of the spike-and-slab draw + KL against one reference.

The library's one definition of the KL and its derivatives is ``kl_terms`` (DESIGN 1.2);
the reference here is independent of it: the KL's value in 60-digit arithmetic (mpmath),
its derivatives by central differences, and the Gumbel straight-through draw (Algorithm 1)
as plain autograd given the same noise. Each path runs on a named grid with the endpoints
and every switch point of the code (``rho`` -120, -110, -87, -20, 0, 40; ``alpha`` +-60,
+-17, 0; log-lambda -1000 and -1e-6; ``mu`` -8, 0, 8; prior variance 0.5 to 10;
temperature 0.3, 0.5, 1; one parameter or many; one network or replicate rows) and on
hypothesis-drawn points of the same domain.

Tolerances. float64 paths: 1e-12 relative to the magnitude of the terms that are summed
(the KL may be a small difference of large terms; float64 rounds each term to 1.1e-16 of
its size), or 1e-20 (the reference's own error). float32 paths: 1e-5 relative to that
magnitude, or 1e-6 absolute; float32 inputs are exact in float64, so the reference is
computed from the very same numbers. Never NaN or inf where the reference is finite.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import mpmath as mp
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor

import svbnn
import svbnn._engine.kernels as K
from svbnn._engine import native as _native
from svbnn._engine.fused_math import counter_noise
from svbnn.nn import SpikeSlabMLP
from svbnn.objectives import spike_slab_kl
from svbnn.priors import log1mexp

RHO = (-120.0, -110.0, -87.0, -20.0, 0.0, 40.0)
ALPHA = (-60.0, -17.0, 0.0, 17.0, 60.0)
MU = (-8.0, 0.0, 8.0)
LOG_LAM = (-1000.0, -1e-6)
VAR0 = (0.5, 2.0, 10.0)
TAU = (0.3, 0.5, 1.0)
RTOL = {torch.float64: 1e-12, torch.float32: 1e-5}
ATOL = {torch.float64: 1e-20, torch.float32: 1e-6}  # float64: the reference's own error


def _grid(dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor]:
    """Every combination of the switch points, one row per log-lambda: ``(2, 90)`` each."""
    rows = list(itertools.product(MU, RHO, ALPHA))
    mu, rho, alpha = (torch.tensor(c, dtype=dtype) for c in zip(*rows, strict=True))
    return mu.repeat(2, 1), rho.repeat(2, 1), alpha.repeat(2, 1)


def _mp_kl(m: Any, r: Any, a: Any, lam: Any, var0: float) -> Any:
    """The KL of one parameter, DESIGN section 1, in mpmath's arithmetic."""
    phi, one_m_phi = 1 / (1 + mp.exp(-a)), 1 / (1 + mp.exp(a))
    sig = mp.log1p(mp.exp(r))
    l1m = mp.log(-mp.expm1(lam))
    slab = mp.log(mp.sqrt(var0)) - mp.log(sig) + (sig**2 + m**2) / (2 * var0) - mp.mpf(1) / 2
    return phi * (mp.log(phi) - lam) + one_m_phi * (mp.log(one_m_phi) - l1m) + phi * slab


def _partial(i: int, point: list[Any], lam: Any, var0: float) -> float:
    """d KL / d point[i] (point = mu, rho, alpha) by a central difference, step
    ``1e-15 max(|x|, 1)`` at 60 digits: error ~1e-30 absolute (truncation ~h^2, rounding
    ~1e-60 / h)."""

    def f(x: Any) -> Any:
        return _mp_kl(*point[:i], x, *point[i + 1 :], lam, var0)

    x = point[i]
    with mp.workdps(60):
        return float(mp.diff(f, x, h=max(abs(x), mp.mpf(1)) * mp.mpf(10) ** -15))


class Reference:
    """The reference at given (float32 or float64) parameters, from the KL's value alone in
    60-digit arithmetic (its derivatives by central differences): the elementwise value,
    the three derivatives, and the magnitudes of the terms that each sums (the bound's scale).
    ``log_lam`` broadcasts to the parameters' shape."""

    def __init__(self, mu: Tensor, rho: Tensor, alpha: Tensor, log_lam: Tensor, var0: float):
        m, r, a = (t.detach().double() for t in (mu, rho, alpha))
        lam = torch.as_tensor(log_lam).double().expand_as(m)
        kl, grads = [], []
        for mi, ri, ai, li in zip(*(t.flatten().tolist() for t in (m, r, a, lam)), strict=True):
            mi, ri, ai, li = (mp.mpf(v) for v in (mi, ri, ai, li))
            with mp.workdps(60):
                kl.append(float(_mp_kl(mi, ri, ai, li, var0)))
            grads.append([_partial(i, [mi, ri, ai], li, var0) for i in range(3)])
        self.kl = torch.tensor(kl, dtype=torch.float64).view(m.shape)
        g = torch.tensor(grads, dtype=torch.float64)
        self.grads = tuple(g[:, j].view(m.shape) for j in range(3))
        F = torch.nn.functional
        phi, one_m_phi = torch.sigmoid(a), torch.sigmoid(-a)
        sigma, d_sigma = F.softplus(r), torch.sigmoid(r)
        log_1mlam = log1mexp(lam)
        ls0, prec0 = 0.5 * math.log(var0), 1.0 / var0
        log_sigma = K.log_softplus(r, sigma)
        slab_terms = abs(ls0) + log_sigma.abs() + (sigma**2 + m**2) * 0.5 * prec0 + 0.5
        self.kl_scale = (
            (phi * (F.logsigmoid(a) - lam)).abs()
            + (one_m_phi * (F.logsigmoid(-a) - log_1mlam)).abs()
            + phi * slab_terms
        )
        self.grad_scales = (
            (phi * m * prec0).abs(),
            phi * (sigma * d_sigma * prec0 + K.sigma_ratio(r, sigma, d_sigma)),
            phi * one_m_phi * (a.abs() + lam.abs() + log_1mlam.abs() + slab_terms),
        )
        assert torch.isfinite(self.kl).all() and all(torch.isfinite(t).all() for t in self.grads)


def _straight_through(
    mu: Tensor, rho: Tensor, alpha: Tensor, u: Tensor, eps: Tensor, tau: float
) -> Tensor:
    """Algorithm 1 (DESIGN section 1) as plain autograd: the hard gate forward, the relaxed
    gate ``sigmoid(eta / tau)`` backward."""
    eta = alpha + torch.log(u) - torch.log1p(-u)
    soft = torch.sigmoid(eta / tau)
    gate = (eta > 0).to(mu.dtype) + soft - soft.detach()
    return gate * (mu + torch.nn.functional.softplus(rho) * eps)


def _close(got: Tensor, want: Tensor, scale: Tensor, dtype: torch.dtype, what: str) -> None:
    got = got.double()
    assert torch.isfinite(got).all(), f"{what}: not finite where the reference is"
    err = (got - want).abs()
    bound = RTOL[dtype] * scale.abs() + ATOL[dtype]
    worst = int(torch.argmax(err - bound))
    assert bool((err <= bound).all()), (
        f"{what}: {got.flatten()[worst]} against {want.flatten()[worst]}"
        f" (bound {bound.flatten()[worst]})"
    )


def _check_kl(
    ref: Reference, kl_rows: Tensor, derivs: tuple[Tensor, ...], dtype: torch.dtype, path: str
) -> None:
    want_rows = ref.kl.sum(-1)
    _close(kl_rows, want_rows, ref.kl_scale.sum(-1), dtype, f"{path} KL")
    for name, got, want, scale in zip(
        ("mu", "rho", "alpha"), derivs, ref.grads, ref.grad_scales, strict=True
    ):
        _close(got, want, scale, dtype, f"{path} d/d{name}")


def _kl_paths(
    mu: Tensor, rho: Tensor, alpha: Tensor, log_lam: Tensor, var0: float, inv_tau: float
) -> dict[str, tuple[Tensor, tuple[Tensor, ...]]]:
    """(KL per row, (d_mu, d_rho, d_alpha)) from every path that computes them.
    ``log_lam``: ``(rows, 1)``."""
    ls0, prec0 = 0.5 * math.log(var0), 1.0 / var0
    log_1mlam = log1mexp(log_lam)
    out: dict[str, tuple[Tensor, tuple[Tensor, ...]]] = {}
    # the layers' KL (an autograd.Function with the eager closed-form backward)
    params = [t.clone().requires_grad_(True) for t in (mu, rho, alpha)]
    with svbnn.kernel_backend("eager"):
        kl = spike_slab_kl(*params, log_lam.squeeze(-1), var0, batch_dims=1)
        grads = torch.autograd.grad(kl.sum(), params)
    out["spike_slab_kl, eager"] = (kl.detach(), grads)
    # the compiled backend's kernels (the same Python that torch.compile compiles)
    one = torch.ones((), dtype=mu.dtype)
    kl = K.kl_sum_forward(mu, rho, alpha, log_lam, log_1mlam, ls0, prec0)
    out["kl_sum_forward + kl_backward"] = (
        kl,
        K.kl_backward(one, mu, rho, alpha, log_lam, log_1mlam, ls0, prec0),
    )
    # the fused draw + KL of a network's training step: eager (torch's noise) and the
    # compiled one (counter noise)
    u = torch.rand(mu.shape, dtype=mu.dtype, generator=torch.Generator().manual_seed(1))
    eps = torch.randn(mu.shape, dtype=mu.dtype, generator=torch.Generator().manual_seed(2))
    f = K.fused_forward_given_noise(mu, rho, alpha, u, eps, log_lam, log_1mlam, ls0, prec0, inv_tau)
    out["fused_forward_given_noise"] = (f[1], f[4:])
    seed = torch.tensor([12345, -678], dtype=torch.int32)
    f = K.fused_forward(mu, rho, alpha, seed, log_lam, log_1mlam, ls0, prec0, inv_tau)
    out["fused_forward"] = (f[1], f[4:])
    # the local sampler's moments + KL pass (its KL derivatives are the saved factors
    # 4-6), eager and on the native loops (float32, one network and one prior per call)
    f = K.local_moments_kl_forward(mu, rho, alpha, log_lam, log_1mlam, ls0, prec0)
    out["local_moments_kl_forward"] = (f[2], f[3][4:])
    if mu.dtype == torch.float32 and _native.available():
        rows = []
        for i in range(mu.shape[0]):
            args = (mu[i], rho[i], alpha[i], log_lam[i, 0], log_1mlam[i, 0])
            rows.append(_native.local_moments_kl(*args, ls0, prec0))
        out["native local_moments_kl"] = (
            torch.stack([r[2] for r in rows]),
            tuple(torch.stack([r[3][j] for r in rows]) for j in (4, 5, 6)),
        )
    # the native loops: float32, one scalar prior per call
    if mu.dtype == torch.float32 and inv_tau in (1.0, 2.0) and _native.available():
        rows = []
        for i in range(mu.shape[0]):
            args = (mu[i], rho[i], alpha[i], seed, log_lam[i, 0], log_1mlam[i, 0])
            rows.append(_native.fused_forward(*args, ls0, prec0, inv_tau))
        out["native fused_forward"] = (
            torch.stack([r[1] for r in rows]),
            tuple(torch.stack([r[j] for r in rows]) for j in (4, 5, 6)),
        )
    return out


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("var0", VAR0)
def test_every_kl_path_equals_the_reference_on_the_grid(dtype: torch.dtype, var0: float) -> None:
    mu, rho, alpha = _grid(dtype)
    log_lam = torch.tensor(LOG_LAM, dtype=dtype).view(2, 1)
    ref = Reference(mu, rho, alpha, log_lam, var0)
    paths = _kl_paths(mu, rho, alpha, log_lam, var0, 2.0)
    if dtype == torch.float32:
        assert "native fused_forward" in paths or not _native.available()
    for path, (kl, derivs) in paths.items():
        _check_kl(ref, kl, derivs, dtype, path)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_one_parameter_layers(dtype: torch.dtype) -> None:
    # width 1: a (1, 1) row at each corner of the grid
    for m, r, a, lam in itertools.product((-8.0, 8.0), (-110.0, 40.0), (-60.0, 60.0), LOG_LAM):
        mu, rho, alpha = (torch.tensor([[v]], dtype=dtype) for v in (m, r, a))
        log_lam = torch.tensor([[lam]], dtype=dtype)
        ref = Reference(mu, rho, alpha, log_lam, 2.0)
        for path, (kl, derivs) in _kl_paths(mu, rho, alpha, log_lam, 2.0, 2.0).items():
            _check_kl(ref, kl, derivs, dtype, f"{path} at {(m, r, a, lam)}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("tau", TAU)
def test_the_fused_draw_is_the_straight_through_reference(dtype: torch.dtype, tau: float) -> None:
    # theta and its two gradient factors (d theta / d rho through eps, d theta / d alpha through
    # the relaxed gate) against autograd of gumbel_spike_slab given the same noise.
    mu, rho, alpha = _grid(dtype)
    log_lam = torch.tensor(LOG_LAM, dtype=dtype).view(2, 1)
    log_1mlam = log1mexp(log_lam)
    seed = torch.tensor([7, 99], dtype=torch.int32)
    u_c, eps_c = counter_noise(mu, seed)
    u_g = torch.rand(mu.shape, dtype=dtype, generator=torch.Generator().manual_seed(3))
    u_g = u_g.clamp(1e-6, 1 - 1e-6)  # away from the hard gate's flip (logit(u) = -alpha)
    eps_g = torch.randn(mu.shape, dtype=dtype, generator=torch.Generator().manual_seed(4))
    draws = {
        "fused_forward_given_noise": (
            K.fused_forward_given_noise(
                mu, rho, alpha, u_g, eps_g, log_lam, log_1mlam, 0.0, 0.5, 1.0 / tau
            ),
            u_g,
            eps_g,
        ),
        "fused_forward": (
            K.fused_forward(mu, rho, alpha, seed, log_lam, log_1mlam, 0.0, 0.5, 1.0 / tau),
            u_c,
            eps_c,
        ),
    }
    if dtype == torch.float32 and 1.0 / tau in (1.0, 2.0) and _native.available():
        rows = [
            _native.fused_forward(
                mu[i], rho[i], alpha[i], seed, log_lam[i, 0], log_1mlam[i, 0], 0.0, 0.5, 1 / tau
            )
            for i in range(2)
        ]
        # the native loop counts its noise on across rows as the compiled kernel does
        flat = counter_noise(mu[0], seed)
        both = [
            tuple(torch.stack([r[j] for r in rows]) for j in range(7)),
            torch.stack([flat[0], flat[0]]),
            torch.stack([flat[1], flat[1]]),
        ]
        draws["native fused_forward"] = (both[0], both[1], both[2])
    for path, (out, u, eps) in draws.items():
        p = [t.detach().double().requires_grad_(True) for t in (mu, rho, alpha)]
        theta = _straight_through(*p, u.double(), eps.double(), tau)
        g_mu, g_rho, g_alpha = torch.autograd.grad(theta, p, torch.ones_like(theta))
        sigma = torch.nn.functional.softplus(p[1].detach())
        scale = p[0].detach().abs() + sigma * eps.double().abs()
        _close(out[0], theta.detach(), scale, dtype, f"{path} theta")
        # the fused kernels return the factors that multiply the incoming gradient
        _close(out[3] * (out[0] != 0), g_rho, scale.clamp(min=1.0), dtype, f"{path} d/drho")
        _close(out[2], g_alpha, (g_alpha.abs() + 1.0) * 10, dtype, f"{path} d/dalpha")
        # The fused backward reads the gate as theta != 0 (no boolean output: it would slow
        # the loop). A drawn slab value of exactly 0 has probability 0, except where mu = 0
        # and sigma underflows (rho = -120 here): there d/dmu is 0 instead of the gate.
        slab_zero = (p[0] + torch.nn.functional.softplus(p[1]) * eps.double()).detach() == 0
        fused_slab_zero = slab_zero | ((mu == 0) & (torch.nn.functional.softplus(rho) == 0))
        keep = ~fused_slab_zero
        assert torch.equal((out[0] != 0)[keep], (g_mu > 0.5)[keep]), path


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    st.lists(
        st.tuples(
            st.floats(-8, 8),
            st.floats(-120, 40),
            st.floats(-60, 60),
        ),
        min_size=1,
        max_size=6,
    ),
    st.floats(-1000, -1e-6),
    st.floats(0.5, 10),
    st.sampled_from([torch.float32, torch.float64]),
)
def test_every_kl_path_equals_the_reference_at_drawn_points(
    points: list[tuple[float, float, float]], log_lam: float, var0: float, dtype: torch.dtype
) -> None:
    mu, rho, alpha = (torch.tensor([c], dtype=dtype) for c in zip(*points, strict=True))
    lam = torch.tensor([[log_lam]], dtype=dtype)
    ref = Reference(mu, rho, alpha, lam, var0)
    for path, (kl, derivs) in _kl_paths(mu, rho, alpha, lam, var0, 2.0).items():
        _check_kl(ref, kl, derivs, dtype, path)


@pytest.mark.parametrize("backend", ["eager", "native", "auto"])
@pytest.mark.parametrize("n_replicates", [None, 2])
def test_a_network_at_the_extremes_trains_finitely_under_every_backend(
    backend: str, n_replicates: int | None
) -> None:
    # rho = -110 (sigma underflows in float32) on some weights, alpha far in both tails: the
    # training step's and kl_divergence's gradients are finite, and kl_divergence's equal the
    # reference's. (Before the one definition, eager gave NaN for d/drho in both, and every
    # backend in kl_divergence.)
    from svbnn.objectives import GaussianLikelihood
    from svbnn.training import negative_elbo

    gen = torch.Generator().manual_seed(0)
    model = SpikeSlabMLP(4, [5], 1, n_replicates=n_replicates, generator=gen)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("rho"):
                p.view(-1)[::3] = -110.0
            if name.endswith("alpha"):
                p.view(-1)[::4] = 60.0
                p.view(-1)[1::4] = -60.0
    lead = () if n_replicates is None else (n_replicates,)
    x = torch.randn(*lead, 8, 4, generator=gen)
    y = torch.randn(*lead, 8, generator=gen)
    with svbnn.kernel_backend(backend):
        loss, _, _ = negative_elbo(model, GaussianLikelihood(), x, y, n_train=8)
        loss.sum().backward()
        assert all(torch.isfinite(p.grad).all() for p in model.parameters())
        model.zero_grad()
        model.kl_divergence().sum().backward()
    lam = model.log_prior_inclusion
    lam = lam.reshape(-1, 1) if lam.numel() > 1 else lam
    ref = Reference(model.mu, model.rho, model.alpha, lam, 2.0)
    for name, want, scale in zip(("mu", "rho", "alpha"), ref.grads, ref.grad_scales, strict=True):
        got = getattr(model, name).grad
        _close(got, want, scale, torch.float32, f"{backend} kl_divergence d/d{name}")


@pytest.mark.parametrize("noise_std", [1e-3, 0.7, 40.0])
def test_the_gaussian_likelihood_is_the_one_nll_definition(noise_std: float) -> None:
    # gaussian_nll is the Gaussian NLL's definition; the likelihood's known-noise form
    # (const - r^2 / (2 var), two autograd operations) and its learned-noise form equal it.
    from svbnn.objectives import GaussianLikelihood, gaussian_nll

    g = torch.Generator().manual_seed(0)
    out = torch.randn(2, 50, 1, generator=g, dtype=torch.float64) * 3
    y = torch.randn(2, 50, generator=g, dtype=torch.float64) * 3
    r2 = (y - out.squeeze(-1)) ** 2
    want = -gaussian_nll(r2, noise_std**2)
    known = GaussianLikelihood(noise_std).log_prob(out, y)
    torch.testing.assert_close(known, want, rtol=1e-14, atol=1e-14)
    lik = GaussianLikelihood(noise_std, learn_noise=True)
    sd = lik.noise_std  # its own stored (float32) value
    assert isinstance(sd, torch.Tensor)
    learned = lik.log_prob(out, y)
    torch.testing.assert_close(learned, -gaussian_nll(r2, sd.double() ** 2), rtol=1e-14, atol=1e-14)
    # and it is the normal law's log density
    ref = torch.distributions.Normal(out.squeeze(-1), noise_std).log_prob(y)
    torch.testing.assert_close(want, ref, rtol=1e-12, atol=1e-12)
