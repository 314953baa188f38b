"""The one-loop draw + KL of the compiled backend (svbnn._engine.kernels.fused_*).

Everything here runs the fused formulas eagerly (no compiler needed): the compiled backend
runs the same Python functions through torch.compile, checked against these in the slow
test of tests/test_kernels.py.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from scipy import stats

import svbnn._engine.fused as fused
import svbnn._engine.fused_math as KM
import svbnn._engine.kernels as K
import svbnn._engine.paths as fused_paths
from svbnn._engine.fused_math import counter_noise
from svbnn.nn import SpikeSlabMLP, VariationalContainer, set_generator
from svbnn.objectives import (
    CategoricalLikelihood,
    GaussianLikelihood,
    spike_slab_kl,
    spike_slab_kl_reference,
)
from svbnn.training import negative_elbo

N = 200_000


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_counter_uniforms_are_exact_midpoints_inside_the_unit_interval(
    dtype: torch.dtype,
) -> None:
    # The extreme hash words (all bits 0, all bits 1) give the first and last midpoint
    # exactly: (k + 1/2) 2^-b with b = 23 (float32) or 52 (float64), never 0 or 1.
    b = 23 if dtype == torch.float32 else 52
    words = torch.tensor([0, -1], dtype=torch.int32)
    u = KM._unit(words, None if dtype == torch.float32 else words, dtype)
    assert u.tolist() == [0.5 * 2.0**-b, 1.0 - 0.5 * 2.0**-b]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_counter_noise_is_uniform_and_normal(dtype: torch.dtype) -> None:
    like = torch.empty(N, dtype=dtype)
    u, eps = counter_noise(like, torch.tensor([7, -3], dtype=torch.int32))
    assert u.dtype == dtype and eps.dtype == dtype
    assert float(u.min()) > 0.0 and float(u.max()) < 1.0
    # Seeded, so each p-value is one fixed number; 1e-3 fails a sound generator 0.1% of
    # the time over seeds, and a wrong distribution (KS distance > 0.005) essentially always.
    assert stats.kstest(u.double().numpy(), "uniform").pvalue > 1e-3
    assert stats.kstest(eps.double().numpy(), "norm").pvalue > 1e-3
    # Independence of u and eps, of neighbouring elements, of elements half a draw apart,
    # and of two seeds: correlations within 5 standard errors (1/sqrt(n)).
    u2, eps2 = counter_noise(like, torch.tensor([8, -3], dtype=torch.int32))
    h = N // 2
    pairs = [
        (u, eps),
        (u[1:], u[:-1]),
        (eps[1:], eps[:-1]),
        (eps[:h], eps[h:]),
        (u, u2),
        (eps, eps2),
    ]
    for a, b in pairs:
        r = np.corrcoef(a.double().numpy(), b.double().numpy())[0, 1]
        assert abs(r) < 5 / math.sqrt(len(a))


def test_counter_noise_is_a_function_of_seed_and_shape() -> None:
    seed = torch.tensor([1, 2], dtype=torch.int32)
    like = torch.empty(3, 333, dtype=torch.float64)
    u, eps = counter_noise(like, seed)
    assert u.shape == (3, 333) and eps.shape == (3, 333)
    u_again, eps_again = counter_noise(like, seed.clone())
    assert torch.equal(u, u_again) and torch.equal(eps, eps_again)
    u_other, _ = counter_noise(like, torch.tensor([1, 3], dtype=torch.int32))
    assert not torch.equal(u, u_other)
    assert len(torch.unique(u)) == u.numel()  # 53-bit uniforms: no repeats among 999


def _ulps(got: torch.Tensor, exact: torch.Tensor) -> float:
    """Largest error of float32 ``got`` in units of the last place of the float64 ``exact``."""
    ref = exact.float().abs()
    spacing = (torch.nextafter(ref, torch.tensor(math.inf)) - ref).double()
    return float(((got.double() - exact) / spacing).abs().max())


def test_inline_float32_math_is_within_a_few_ulp() -> None:
    # The fused kernel's float32 log, log1p, exp and cos (arithmetic and bit operations
    # instead of library calls) against float64, over their domains and at the edges.
    g = torch.Generator().manual_seed(0)
    x = torch.exp(torch.empty(N).uniform_(-87.0, 88.0, generator=g)).float()
    x[:4] = torch.tensor([2.0**-126, 1.0, 0.70710677, 3.0e38])
    assert _ulps(KM._log(x), torch.log(x.double())) <= 2.0
    # softplus, log sigmoid and the sigmoids of x = -log(e), e = exp(-|x|) in (0, 1]
    e = (torch.rand(N, generator=g) ** 8).clamp(min=1e-37)
    e[:7] = torch.tensor([1e-37, 1e-30, 2.0**-24, 0.41421354, 0.41421357, 0.5, 1.0])
    x = torch.cat([-torch.log(e), torch.log(e)])
    xd = x.double()
    want = (F.softplus(xd), F.logsigmoid(xd), torch.sigmoid(xd), torch.sigmoid(-xd))
    # (the sigmoids within 3 ulp, as torch's float32 sigmoid: 2.4 ulp on these points)
    for got, exact, ulps in zip(KM._softplus_parts(x), want, (2, 2, 3, 3), strict=True):
        assert _ulps(got, exact) <= ulps
    z = -torch.empty(N).uniform_(0.0, 87.3, generator=g)
    z[:3] = torch.tensor([0.0, -1e-9, -0.34657359])
    assert _ulps(KM._exp_nonpositive(z), torch.exp(z.double())) <= 2.0
    # Subnormal and underflowing results: correctly rounded to within one subnormal step.
    tail = torch.tensor([-87.5, -90.0, -100.0, -103.2, -104.0, -150.0, -math.inf])
    err = (KM._exp_nonpositive(tail).double() - torch.exp(tail.double())).abs()
    assert float(err.max()) <= 2.0**-149
    # cos(2 pi v) at every 16-bit angle of the counter noise, and at the interval's ends:
    # within 2 ulp of 1 (torch.cos of the rounded float32 2 pi v: 3 ulp)
    v = torch.cat([(torch.arange(2**16) + 0.5) * 2.0**-16, torch.tensor([0.0, 0.25, 1.0])])
    err = (KM._cos_2pi(v).double() - torch.cos(2.0 * math.pi * v.double())).abs()
    assert float(err.max()) <= 2.0**-22


def test_float32_fused_forward_matches_float64_formulas() -> None:
    # The float32 kernel (inline math) against the float64 reference formulas evaluated
    # on the same float32 inputs and noise: weights, KL and gradient factors.
    shape = (20_000,)
    mu, rho, alpha = (t.detach().float() for t in _params(shape, seed=3))
    seed = torch.tensor([21, -4], dtype=torch.int32)
    lam = torch.tensor(-6.0)
    log_1mlam = torch.log(-torch.expm1(lam))
    out = K.fused_forward(mu, rho, alpha, seed, lam, log_1mlam, 0.25, math.exp(-0.5), 2.0)
    u, eps = counter_noise(mu, seed)
    m, r, a = (t.double().requires_grad_() for t in (mu, rho, alpha))
    ref_theta = (u.double() > torch.sigmoid(-a)) * (m + torch.nn.functional.softplus(r) * eps)
    ref_kl = spike_slab_kl_reference(m, r, a, lam.double(), math.exp(0.5))
    kl_grads = torch.autograd.grad(ref_kl.sum(), (m, r, a))
    torch.testing.assert_close(out[0].double(), ref_theta.detach(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(out[1].double(), ref_kl.sum().detach(), rtol=1e-6, atol=0)
    for got, want in zip(out[4:], kl_grads, strict=True):
        torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-6)


def _params(shape: tuple[int, ...], seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(shape, generator=g, dtype=torch.float64)
    rho = torch.randn(shape, generator=g, dtype=torch.float64) - 2.0
    rho.view(-1)[:3] = torch.tensor([-30.0, 0.0, 25.0])  # softplus tails
    alpha = 4.0 * torch.randn(shape, generator=g, dtype=torch.float64)
    alpha.view(-1)[3:6] = torch.tensor([-60.0, 0.0, 60.0])
    return [t.requires_grad_() for t in (mu, rho, alpha)]


@pytest.mark.parametrize("tau", [0.5, 1.0, 0.3])
@pytest.mark.parametrize("noise", ["counter", "given"])
@pytest.mark.parametrize("replicated", [False, True])
def test_fused_draw_and_kl_match_autograd_of_the_reference(
    replicated: bool, noise: str, tau: float
) -> None:
    # tau: the relaxed gate's derivative has a division-only form for 1/tau = 2 (the
    # paper's 0.5) and 1, and a general one.
    shape = (3, 400) if replicated else (1200,)
    mu, rho, alpha = _params(shape)
    log_lam = torch.tensor([-3.0, -8.0, -0.5], dtype=torch.float64) if replicated else None
    lam_arg = log_lam.reshape(-1, 1) if log_lam is not None else torch.tensor(-6.0).double()
    seed = torch.tensor([11, 12], dtype=torch.int32)
    if noise == "counter":  # the compiled kernel's formulas, run eagerly
        u, eps = counter_noise(mu.detach(), seed)
        args: tuple[torch.Tensor, ...] = (seed,)
    else:  # the eager kernel, noise from torch's generator
        gen = torch.Generator().manual_seed(4)
        u = torch.rand(shape, generator=gen, dtype=torch.float64)
        eps = torch.randn(shape, generator=gen, dtype=torch.float64)
        args = (u, eps)
    var0 = 2.0
    log_1mlam = torch.log(-torch.expm1(lam_arg))
    theta, kl = fused.FusedGumbelKL.apply(
        mu, rho, alpha, lam_arg, log_1mlam, args, tau, 0.5 * math.log(var0), False
    )
    g = torch.Generator().manual_seed(5)
    g_theta = torch.randn(shape, generator=g, dtype=torch.float64)
    g_kl = torch.rand(kl.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((theta * g_theta).sum() + (kl * g_kl).sum(), (mu, rho, alpha))

    # Reference: Algorithm 1's straight-through gate through autograd, the same noise.
    eta = alpha + torch.logit(u)
    hard = (u > torch.sigmoid(-alpha)).double()  # the event alpha + logit(u) > 0
    soft = torch.sigmoid(eta / tau)
    ref_theta = (hard + soft - soft.detach()) * (mu + torch.nn.functional.softplus(rho) * eps)
    ref_kl = spike_slab_kl_reference(mu, rho, alpha, lam_arg, var0).sum(-1)
    torch.testing.assert_close(theta, ref_theta.detach(), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(kl, ref_kl.detach(), rtol=1e-12, atol=1e-9)
    ref = torch.autograd.grad((ref_theta * g_theta).sum() + (ref_kl * g_kl).sum(), (mu, rho, alpha))
    for a, b in zip(grads, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    # Gate frequency: P(theta != 0) = phi; the mean over all elements within 5 s.e.
    phi = torch.sigmoid(alpha.detach())
    se = float(torch.sqrt((phi * (1 - phi)).sum())) / phi.numel()
    assert abs(float((theta != 0).double().mean() - phi.mean())) < 5 * se + 1e-12


@pytest.mark.parametrize("split", [False, True])
def test_compiled_backward_overwrites_its_factors_only_when_the_graph_is_let_go(
    monkeypatch: pytest.MonkeyPatch, split: bool
) -> None:
    # The compiled path's backward writes the gradients over its saved factors unless the
    # graph is kept: then (here: the KL backpropagated first with retain_graph, the draw
    # after) the second backward reads the factors again and must find them intact. The
    # compiled kernels' formulas run eagerly; the flag each backward got is recorded.
    flags: list[bool] = []

    def backward(*args: Any) -> tuple[torch.Tensor, ...]:
        flags.append(bool(args[-1]))
        out: tuple[torch.Tensor, ...] = K.fused_backward(*args)
        return out

    monkeypatch.setattr(
        fused, "kernels", lambda compiled=None: {**K._EAGER, "fused_backward": backward}
    )
    shape = (900,)
    lam = torch.tensor(-5.0, dtype=torch.float64)
    consts = (lam, torch.log(-torch.expm1(lam)))
    seed = torch.tensor([3, 4], dtype=torch.int32)
    g_theta = torch.randn(shape, generator=torch.Generator().manual_seed(7), dtype=torch.float64)

    def grads(compiled: bool) -> list[torch.Tensor]:
        mu, rho, alpha = _params(shape)
        theta, kl = fused.FusedGumbelKL.apply(
            mu, rho, alpha, *consts, (seed,), 0.5, 0.5 * math.log(2.0), compiled
        )
        if split and compiled:
            (0.25 * kl).backward(retain_graph=True)
            (theta * g_theta).sum().backward()
        else:
            ((theta * g_theta).sum() + 0.25 * kl).backward()
        return [t.grad for t in (mu, rho, alpha)]  # type: ignore[misc]

    expected = grads(False)  # eager: never overwrites
    assert flags == [False]
    got = grads(True)
    assert flags[1:] == ([False, True] if split else [True])  # the last backward lets go
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-13, atol=1e-15)


def test_backward_into_factors_returns_the_factors_holding_the_gradients() -> None:
    args = [t.detach() for t in _params((500,))]
    out = K.fused_forward(
        *args, torch.tensor([1, 2], dtype=torch.int32), torch.tensor(-4.0).double(),
        torch.log(-torch.expm1(torch.tensor(-4.0).double())), 0.3, 0.5, 2.0,
    )  # fmt: skip
    theta, _, *factors = out
    g = torch.randn(500, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    g_kl = torch.tensor(0.1, dtype=torch.float64)
    fresh = K.fused_backward(g, g_kl, theta, *factors)
    copies = [f.clone() for f in factors]
    into = K.fused_backward(g, g_kl, theta, *copies, True)
    assert all(a is b for a, b in zip(into, copies[2:], strict=True))  # kl_mu, kl_rho, kl_alpha
    for a, b in zip(fresh, into, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=0)


@pytest.mark.parametrize("tau", [0.5, 1.0, 0.3])
def test_fused_forward_is_finite_at_extreme_parameters(tau: float) -> None:
    # float32, inclusion logits and slab scales far out in both tails: every output and
    # gradient factor stays finite (the gate derivative's a/b form cannot overflow).
    grid = torch.tensor([-200.0, -90.0, -30.0, -1.0, 0.0, 1.0, 30.0, 90.0, 200.0])
    alpha = grid.repeat_interleave(len(grid)).repeat(50)
    rho = grid.repeat(len(grid)).repeat(50)
    mu = torch.linspace(-3, 3, alpha.numel())
    out = K.fused_forward(
        mu, rho, alpha, torch.tensor([5, 6], dtype=torch.int32),
        torch.tensor(-5.0), torch.log(-torch.expm1(torch.tensor(-5.0))), 0.0, 1.0, 1.0 / tau,
    )  # fmt: skip
    for t in out:
        assert bool(torch.isfinite(t).all())


def _fused_mlp(monkeypatch: pytest.MonkeyPatch, R: int | None) -> SpikeSlabMLP:
    # The fused path is taken where the kernels run compiled; forcing it on with the eager
    # backend runs the same formulas eagerly.
    monkeypatch.setattr(fused, "_fused_path", lambda numel, device=None: True)
    model = SpikeSlabMLP(
        5,
        (4, 3),
        1,
        n_replicates=R,
        generator=torch.Generator().manual_seed(0),
        dtype=torch.float64,
        log_prior_inclusion=-4.0 if R is None else torch.tensor([-4.0, -9.0]).double(),
    )
    set_generator(model, torch.Generator().manual_seed(1))
    return model


def _eager_whole_network(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Force the "auto" backend's whole-network graphs on, run eagerly; returns the list
    that collects the names of the graphs run."""
    calls: list[str] = []

    def kernel(fn: Callable[..., Any], *static: Any) -> Callable[..., Any]:
        calls.append(fn.__name__)
        return lambda *tensors: fn(*tensors, *static)

    monkeypatch.setattr(fused_paths, "use_whole_network", lambda *_: True)
    monkeypatch.setattr(fused, "whole_network_kernel", kernel)
    return calls


class _OtherGaussian(GaussianLikelihood):
    """A likelihood the whole-step graph does not know (it overrides ``log_prob``): the
    forward alone runs as a graph."""

    def log_prob(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return super().log_prob(output, target)


@pytest.mark.parametrize(
    ("R", "whole"),
    [
        (None, None),
        (2, None),
        (None, "mlp_draw_forward"),
        (None, "mlp_negative_elbo"),
        (2, "mlp_draw_forward"),
        (2, "mlp_negative_elbo"),
    ],
)
def test_fused_mlp_step_equals_manual_autograd(
    monkeypatch: pytest.MonkeyPatch, R: int | None, whole: str | None
) -> None:
    # whole: the whole-network graphs of the "auto" backend for small MLPs, run eagerly
    # here and differentiated by autograd: the training forward (mlp_draw_forward, with a
    # likelihood it does not know) or the whole negative ELBO (mlp_negative_elbo).
    model = _fused_mlp(monkeypatch, R)
    calls = _eager_whole_network(monkeypatch) if whole else []
    likelihood = _OtherGaussian() if whole == "mlp_draw_forward" else GaussianLikelihood()
    g = torch.Generator().manual_seed(2)
    lead = () if R is None else (R,)
    x = torch.randn(*lead, 16, 5, generator=g, dtype=torch.float64)
    y = torch.randn(*lead, 16, generator=g, dtype=torch.float64)
    gen = model.layers()[0].generator
    assert gen is not None
    replay = torch.Generator().manual_seed(0)
    replay.set_state(gen.get_state())
    loss, _, kl = negative_elbo(model, likelihood, x, y, n_train=100)
    assert calls == ([whole] if whole else [])
    loss.sum().backward()
    grads = [p.grad.clone() for p in (model.mu, model.rho, model.alpha)]  # type: ignore[union-attr]

    # Replay: same seed words from the same generator state, weights through autograd.
    seed = torch.randint(-(2**31), 2**31 - 1, (2,), generator=replay, dtype=torch.int32)
    mu, rho, alpha = (
        p.detach().clone().requires_grad_() for p in (model.mu, model.rho, model.alpha)
    )
    u, eps = counter_noise(mu.detach(), seed)
    eta = alpha + torch.logit(u)
    soft = torch.sigmoid(eta / 0.5)
    theta = ((u > torch.sigmoid(-alpha)).double() + soft - soft.detach()) * (
        mu + torch.nn.functional.softplus(rho) * eps
    )
    h = x
    start = 0
    sizes = [5, 4, 3, 1]
    for i in range(3):
        n_w = (sizes[i] + 1) * sizes[i + 1]
        wb = theta[..., start : start + n_w].reshape(*lead, sizes[i + 1], sizes[i] + 1)
        start += n_w
        h = h @ wb[..., :-1].transpose(-1, -2) + wb[..., -1].unsqueeze(-2)
        if i < 2:
            h = torch.relu(h)
    nll = -GaussianLikelihood().log_prob(h, y).mean(-1)
    ref_kl = spike_slab_kl(mu, rho, alpha, model.log_prior_inclusion, 2.0, len(lead)) / 100
    torch.testing.assert_close(kl, ref_kl.detach(), rtol=1e-12, atol=1e-12)
    (nll + ref_kl).sum().backward()
    for a, b in zip(grads, (mu.grad, rho.grad, alpha.grad), strict=True):
        assert b is not None
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kind", ["gaussian", "categorical"])
@pytest.mark.parametrize("kl_weight", [1.0, 0.25])
@pytest.mark.parametrize("R", [None, 3])
def test_whole_step_graph_equals_the_general_path(
    monkeypatch: pytest.MonkeyPatch, kind: str, kl_weight: float, R: int | None
) -> None:
    # negative_elbo's one-graph path (mlp_negative_elbo, eagerly) against the general one
    # (model forward, then the likelihood) from the same generator state: same draw, so
    # the same loss, nll, kl and gradients up to rounding; for one network and for R
    # replicates (per-replicate loss, nll and kl).
    out = 1 if kind == "gaussian" else 3
    model = SpikeSlabMLP(
        5,
        (4,),
        out,
        n_replicates=R,
        generator=torch.Generator().manual_seed(0),
        dtype=torch.float64,
    )
    set_generator(model, torch.Generator().manual_seed(1))
    twin = copy.deepcopy(model)
    g = torch.Generator().manual_seed(2)
    lead = () if R is None else (R,)
    x = torch.randn(*lead, 16, 5, generator=g, dtype=torch.float64)
    if kind == "gaussian":
        lik: torch.nn.Module = GaussianLikelihood(0.7)
        y = torch.randn(*lead, 16, generator=g, dtype=torch.float64)
    else:
        lik = CategoricalLikelihood()
        y = torch.randint(0, 3, (*lead, 16), generator=g)
    calls = _eager_whole_network(monkeypatch)
    fast = negative_elbo(model, lik, x, y, n_train=50, kl_weight=kl_weight)
    assert calls == ["mlp_negative_elbo"]
    monkeypatch.setattr(SpikeSlabMLP, "fused_negative_elbo", lambda *_: None)
    general = negative_elbo(twin, lik, x, y, n_train=50, kl_weight=kl_weight)
    assert calls == ["mlp_negative_elbo", "mlp_draw_forward"]
    assert general[0].shape == lead
    # loss = nll + w KL / n, with the unweighted KL / n reported.
    torch.testing.assert_close(general[0], general[1] + kl_weight * general[2], rtol=1e-12, atol=0)
    for a, b in zip(fast, general, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    fast[0].sum().backward()
    general[0].sum().backward()
    for p, q in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", ["tensor_noise", "two_outputs", "two_draws"])
def test_whole_step_graph_steps_aside_where_it_does_not_apply(
    monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    # A per-replicate noise tensor, a Gaussian with several outputs, K > 1 draws: the
    # general path (with the forward graph) runs, and gives the per-datum ELBO as before.
    out = 2 if case == "two_outputs" else 1
    model = SpikeSlabMLP(5, (4,), out, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(1)
    x = torch.randn(8, 5, generator=g)
    y = torch.randn(8, out, generator=g) if out > 1 else torch.randn(8, generator=g)
    lik = GaussianLikelihood(torch.ones(1, 1) if case == "tensor_noise" else 1.0)
    calls = _eager_whole_network(monkeypatch)
    loss, nll, kl = negative_elbo(
        model, lik, x, y, n_train=20, n_mc=2 if case == "two_draws" else 1
    )
    assert "mlp_negative_elbo" not in calls and calls[0] == "mlp_draw_forward"
    assert torch.isfinite(loss).all() and torch.allclose(loss.detach(), nll + kl)


@pytest.mark.parametrize("whole", [False, True])
def test_replicated_input_of_the_wrong_shape_is_named(
    monkeypatch: pytest.MonkeyPatch, whole: bool
) -> None:
    # A replicated network fed another number of replicates or inputs: the one-graph path
    # steps aside, and the layers' path names what it expected.
    model = SpikeSlabMLP(5, (4,), 1, n_replicates=2, generator=torch.Generator().manual_seed(0))
    calls = _eager_whole_network(monkeypatch) if whole else []
    for shape in [(3, 8, 5), (8, 5)]:
        with pytest.raises(ValueError, match="replicated (network|layer) expects input"):
            negative_elbo(
                model, GaussianLikelihood(), torch.zeros(shape), torch.zeros(shape[:-1]), 8
            )
    with pytest.raises(RuntimeError):
        negative_elbo(model, GaussianLikelihood(), torch.zeros(2, 8, 6), torch.zeros(2, 8), 8)
    assert calls == []


def test_cached_kl_is_used_once_and_only_while_parameters_are_unchanged(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    model = _fused_mlp(monkeypatch, None)
    x = torch.randn(8, 5, dtype=torch.float64)
    model(x)
    cached = model._fused.kl_cache
    assert cached is not None
    first = model.kl_divergence()
    assert first is cached[0]
    second = model.kl_divergence()  # the cache is spent: computed anew, same value
    assert second is not first
    torch.testing.assert_close(second, first)
    model(x)
    with torch.no_grad():
        model.mu.add_(0.1)  # e.g. an optimiser step between forward and KL
    fresh = model.kl_divergence()
    want = spike_slab_kl(model.mu, model.rho, model.alpha, model.log_prior_inclusion, 2.0)
    torch.testing.assert_close(fresh, want)
    assert not torch.allclose(fresh, first)
    # A model with a pending cache can still be deep-copied (the cache is not copied).
    model(x)
    import copy

    clone = copy.deepcopy(model)
    assert clone._fused.kl_cache is None


def test_fused_draws_reproduce_from_the_generator(monkeypatch: pytest.MonkeyPatch) -> None:
    outs = []
    for _ in range(2):
        model = _fused_mlp(monkeypatch, None)
        outs.append(model(torch.ones(3, 5, dtype=torch.float64)).detach())
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid", "identity"])
def test_flat_mlp_gradients(activation: str) -> None:
    g = torch.Generator().manual_seed(3)
    shapes = ((4, 3), (2, 4), (1, 2))
    T = sum(o * (i + 1) for o, i in shapes)
    theta = torch.randn(T, generator=g, dtype=torch.float64, requires_grad=True)
    x = torch.randn(5, 3, generator=g, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda t, a: fused.FlatMLP.apply(t, a, shapes, activation), (theta, x)
    )


def test_the_gradient_buffer_is_reused_only_while_no_one_keeps_it() -> None:
    # The flat gradient goes into one array step after step, unless a previous step's
    # gradient is still held (here: a leaf's .grad made of it), whose values must stay.
    g = torch.Generator().manual_seed(4)
    shapes = ((4, 3), (2, 4), (1, 2))
    T = sum(o * (i + 1) for o, i in shapes)
    x1, x2 = (torch.randn(5, 3, generator=g, dtype=torch.float64) for _ in range(2))
    theta = torch.randn(T, generator=g, dtype=torch.float64, requires_grad=True)
    buffer = fused.GradientBuffer()

    def grad_of(x: torch.Tensor, buf: fused.GradientBuffer | None) -> torch.Tensor:
        (out,) = torch.autograd.grad(
            fused.FlatMLP.apply(theta, x, shapes, "tanh", buf).sum(), theta
        )
        return out

    want1, want2 = grad_of(x1, None), grad_of(x2, None)
    got1 = grad_of(x1, buffer)
    del got1
    array = buffer.array
    assert array is not None
    got2 = grad_of(x2, buffer)
    assert buffer.array is array and got2.data_ptr() == array.data_ptr()  # reused
    torch.testing.assert_close(got2, want2, rtol=0, atol=0)
    del got2
    # Held (here by a gradient hook): the next backward writes into a new array, and the
    # held gradient keeps its values.
    kept: list[torch.Tensor] = []
    handle = theta.register_hook(lambda grad: kept.append(grad))
    grad_of(x1, buffer)
    handle.remove()
    assert kept[0].data_ptr() == array.data_ptr()
    grad_of(x2, buffer)
    assert buffer.array is not array
    torch.testing.assert_close(kept[0], want1, rtol=0, atol=0)


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_flat_mlp_path_equals_the_layer_by_layer_path(activation: str) -> None:
    def run(hooked: bool) -> tuple[torch.Tensor, list[torch.Tensor]]:
        model = SpikeSlabMLP(
            6,
            (5, 4),
            2,
            activation=activation,
            generator=torch.Generator().manual_seed(0),
            dtype=torch.float64,
            log_prior_inclusion=-3.0,
        )
        set_generator(model, torch.Generator().manual_seed(1))
        if hooked:  # a forward hook makes the network run its modules one by one
            model.layers()[1].register_forward_hook(lambda m, i, o: None)
        x = torch.randn(7, 6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
        out = model(x)
        (out.square().sum() + model.kl_divergence()).backward()
        return out.detach(), [p.grad.clone() for p in (model.mu, model.rho, model.alpha)]  # type: ignore[union-attr]

    out_a, grads_a = run(False)
    out_b, grads_b = run(True)
    torch.testing.assert_close(out_a, out_b, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_a_new_prior_inclusion_reaches_the_next_step() -> None:
    model = SpikeSlabMLP(
        4,
        (3,),
        1,
        generator=torch.Generator().manual_seed(0),
        dtype=torch.float64,
        log_prior_inclusion=-2.0,
    )
    x = torch.randn(5, 4, dtype=torch.float64)
    for log_lam in (-2.0, -9.0, -2.0):
        model.set_log_prior_inclusion(log_lam)
        model(x)
        want = spike_slab_kl(model.mu, model.rho, model.alpha, log_lam, 2.0)
        torch.testing.assert_close(model.kl_divergence(), want, rtol=1e-12, atol=1e-12)


def test_likelihoods_tell_the_fused_path_what_they_are() -> None:
    class OwnCategorical(CategoricalLikelihood):
        def log_prob(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return super().log_prob(output, target)

    assert GaussianLikelihood(0.5).fused_spec(1) == ("gaussian", 0.25)
    assert GaussianLikelihood(0.5).fused_spec(2) is None  # several outputs
    assert GaussianLikelihood(torch.ones(3, 1)).fused_spec(1) is None  # per replicate
    assert _OtherGaussian().fused_spec(1) is None  # its own log_prob
    assert CategoricalLikelihood().fused_spec(10) == ("categorical", 1.0)
    assert OwnCategorical().fused_spec(10) is None


class _Container(VariationalContainer):
    """A container with a fused path that returns fixed numbers (and records its call)."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = SpikeSlabMLP(3, (2,), 1, generator=torch.Generator().manual_seed(0))
        self.calls: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.inner(x)
        return out

    def kl_divergence(self) -> torch.Tensor:
        return self.inner.kl_divergence()

    def fused_negative_elbo(
        self, likelihood: object, x: torch.Tensor, y: torch.Tensor, n_train: float
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None:
        self.calls.append(n_train)
        return torch.tensor(3.0), torch.tensor(2.0), torch.tensor(1.0)


def test_negative_elbo_asks_the_container_hook_first() -> None:
    x, y = torch.randn(4, 3), torch.randn(4)
    lik = GaussianLikelihood()
    # The default: no fused path, the general one runs.
    plain = SpikeSlabMLP(3, (2,), 1)
    assert VariationalContainer.fused_negative_elbo(plain, lik, x, y, 10.0) is None
    model = _Container()
    assert [float(t) for t in negative_elbo(model, lik, x, y, n_train=10)] == [3.0, 2.0, 1.0]
    # A KL weight w: the hook spreads the KL over n / w, and the reported KL is unweighted.
    loss, _, kl = negative_elbo(model, lik, x, y, n_train=10, kl_weight=0.5)
    assert model.calls == [10.0, 20.0] and float(loss) == 3.0 and float(kl) == 2.0
    # K > 1 draws: never the one-draw hook.
    negative_elbo(model, lik, x, y, n_train=10, n_mc=2)
    assert model.calls == [10.0, 20.0]


def test_a_model_pickled_with_the_old_cache_attributes_loads() -> None:
    model = SpikeSlabMLP(3, (2,), 1, generator=torch.Generator().manual_seed(0))
    state = dict(model.__dict__)
    del state["_fused"]
    state.update(_kl_cache=None, _log_lam_cache=None, _scales_cache=None)
    old = SpikeSlabMLP.__new__(SpikeSlabMLP)
    old.__setstate__(state)
    assert isinstance(old._fused, fused.FusedEngine) and not hasattr(old, "_kl_cache")
    x = torch.randn(4, 3)
    torch.testing.assert_close(old.kl_divergence(), model.kl_divergence())
    assert old(x).shape == (4, 1)


@pytest.mark.parametrize(
    ("hidden", "replicates", "path"),
    [
        ((128,), None, 1),  # 784-128-10: 101,770 parameters, from EAGER_FUSED_MAX_NUMEL on
        ((112,), None, 2),  # 784-112-10: 89,050, below it
        ((64,), 2, 2),  # replicates keep path 2 (2 x 50,890 parameters)
    ],
)
def test_the_eager_backend_draws_a_large_network_layer_by_layer(
    monkeypatch: pytest.MonkeyPatch, hidden: tuple[int, ...], replicates: int | None, path: int
) -> None:
    # Path 2 (the fused eager draw + KL) on one network below EAGER_FUSED_MAX_NUMEL
    # parameters and on replicates; path 1 (each layer its own draw) from there on.
    import svbnn.nn.spike_slab as spike_slab

    model = SpikeSlabMLP(
        784, hidden, 10, n_replicates=replicates, generator=torch.Generator().manual_seed(0)
    )
    set_generator(model, torch.Generator().manual_seed(1))
    n = model.mu.numel()
    assert (n >= fused_paths.EAGER_FUSED_MAX_NUMEL) == (path == 1 or replicates is not None)
    seen: list[int] = []
    for owner, name, path_of in (
        (spike_slab, "gumbel_spike_slab", 1),
        (fused.FusedGumbelKL, "apply", 2),
    ):
        real = getattr(owner, name)
        monkeypatch.setattr(
            owner, name, lambda *a, real=real, p=path_of: seen.append(p) or real(*a)
        )
    lead = () if replicates is None else (replicates,)
    x = torch.randn(*lead, 16, 784, generator=torch.Generator().manual_seed(2))
    y = torch.randint(0, 10, (*lead, 16), generator=torch.Generator().manual_seed(3))
    with K.backend_scope("eager"):
        loss, _, kl = negative_elbo(model, CategoricalLikelihood(), x, y, n_train=100)
        loss.sum().backward()
    assert set(seen) == {path}
    assert len(seen) == (len(model.layers()) if path == 1 else 1)
    # either way the KL is the exact one of the flat parameters and every gradient flows
    exact = spike_slab_kl(
        model.mu.detach(),
        model.rho.detach(),
        model.alpha.detach(),
        model.log_prior_inclusion,
        model.layers()[0].prior_variance,
        batch_dims=0 if replicates is None else 1,
    )
    torch.testing.assert_close(kl.detach() * 100, exact, rtol=1e-5, atol=1e-5)
    for p in (model.mu, model.rho, model.alpha):
        assert p.grad is not None and torch.isfinite(p.grad).all() and (p.grad != 0).any()
