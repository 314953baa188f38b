"""svbnn._engine.native: the C++ compiler's build of the fused draw + KL forward gives the inductor
kernel's outputs bit for bit, so training is the same with it or without it."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import svbnn
import svbnn._engine.fused as fused
import svbnn._engine.kernels as K
import svbnn._engine.paths as fused_paths
from svbnn import training
from svbnn._engine import native as _native
from svbnn._engine.graphs import layer_views
from svbnn._engine.native_step import backward_without_graph, native_step_ok, step_likelihood
from svbnn.nn import SpikeSlabMLP
from svbnn.nn.base import set_generator
from svbnn.objectives import CategoricalLikelihood, GaussianLikelihood, RowWeightedLikelihood
from svbnn.prediction import sample_outputs
from svbnn.training import History, negative_elbo, train


def _spy_on(monkeypatch: pytest.MonkeyPatch, names: tuple[str, ...]) -> list[str]:
    """The names of the native functions called from now on, in order."""
    calls: list[str] = []
    for name in names:
        real = getattr(_native, name)

        def spy(*args: object, _real: object = real, _name: str = name) -> object:
            calls.append(_name)
            return _real(*args)  # type: ignore[operator]

        monkeypatch.setattr(_native, name, spy)
    return calls


def _parameters(n: int, seed: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    mu = torch.randn(n, generator=g) * 0.5
    # rho from -100 (sigma subnormal, and the rho < -20 branches) to 10; alpha both signs,
    # far into both tails.
    rho = torch.rand(n, generator=g) * 110.0 - 100.0
    alpha = torch.randn(n, generator=g) * 12.0
    return mu, rho, alpha


@pytest.mark.parametrize("inv_tau", [2.0, 1.0])
def test_native_forward_equals_the_inductor_kernel_bit_for_bit(
    one_thread: None, inv_tau: float
) -> None:
    assert _native.available()
    mu, rho, alpha = _parameters(100_003, 0)  # not a multiple of any vector width
    seed = torch.tensor([-123456789, 987654321], dtype=torch.int32)
    log_lam, log_1mlam = torch.tensor(-9.5), torch.tensor(-7.5e-5)
    args = (mu, rho, alpha, seed, log_lam, log_1mlam, -0.3, 0.55, inv_tau)
    assert _native.usable(mu, rho, alpha, log_lam, inv_tau)
    native = _native.fused_forward(*args)
    inductor = torch.compile(K.fused_forward, dynamic=True, options=K.COMPILE_OPTIONS)(*args)
    names = ["theta", "kl", "a_fac", "r_fac", "kl_mu", "kl_rho", "kl_alpha"]
    for name, a, b in zip(names, native, inductor, strict=True):
        if name != "kl":
            assert torch.equal(a, b), name
    # The KL sum adds in another order. Both against float64: float32 sums of blocks of
    # 4096 nonnegative terms err by about sqrt(4096) ulp (4e-6 relative); 3e-5 is 8 times that.
    exact = K.kl_sum_forward(
        mu.double(), rho.double(), alpha.double(), log_lam.double(), log_1mlam.double(), -0.3, 0.55
    )
    for kl in (native[1], inductor[1]):
        assert kl.dtype == torch.float32 and kl.shape == ()
        assert abs(float(kl) - float(exact)) <= 3e-5 * float(exact)


def test_native_forward_of_replicates_equals_the_inductor_kernel_bit_for_bit(
    one_thread: None,
) -> None:
    # R replicates' (R, T) rows: the counters run on across rows, the KL is one per row.
    R, T = 3, 33_335
    mu, rho, alpha = (t.view(R, T) for t in _parameters(R * T, 6))
    seed = torch.tensor([77, -5], dtype=torch.int32)
    log_lam, log_1mlam = torch.tensor(-6.0), torch.tensor(-2.5e-3)
    args = (mu, rho, alpha, seed, log_lam, log_1mlam, 0.1, 1.0, 2.0)
    assert _native.usable(mu, rho, alpha, log_lam, 2.0)
    native = _native.fused_forward(*args)
    inductor = torch.compile(K.fused_forward, dynamic=True, options=K.COMPILE_OPTIONS)(*args)
    for i, (a, b) in enumerate(zip(native, inductor, strict=True)):
        if i != 1:
            assert a.shape == (R, T) and torch.equal(a, b), i
    exact = K.kl_sum_forward(
        mu.double(), rho.double(), alpha.double(), log_lam.double(), log_1mlam.double(), 0.1, 1.0
    )
    assert native[1].shape == (R,) and native[1].dtype == torch.float32
    # float32 sums of blocks of 4096 terms, as above
    assert torch.allclose(native[1].double(), exact, rtol=3e-5, atol=0.0)


def test_native_backward_equals_the_inductor_kernel_bit_for_bit(one_thread: None) -> None:
    g = torch.Generator().manual_seed(5)
    n = 100_003
    g_theta, a_fac, r_fac, kl_mu, kl_rho, kl_alpha = (torch.randn(n, generator=g) for _ in range(6))
    theta = torch.randn(n, generator=g) * (torch.rand(n, generator=g) < 0.3)
    g_kl = torch.tensor([1.0 / 60_000])
    saved = (theta, a_fac, r_fac, kl_mu, kl_rho, kl_alpha)
    assert _native.backward_usable(g_theta, g_kl, saved)
    inductor = torch.compile(K.fused_backward, dynamic=True, options=K.COMPILE_OPTIONS)
    expected = inductor(g_theta, g_kl, *(t.clone() for t in saved), True)
    copies = tuple(t.clone() for t in saved)
    got = _native.fused_backward(g_theta, g_kl, *copies)
    for a, b, into in zip(got, expected, copies[3:], strict=True):
        assert torch.equal(a, b)
        assert a.data_ptr() == into.data_ptr()  # written over the factors
    # R replicates, each row with its own KL gradient; autograd's may be expanded.
    R = 7
    rows = tuple(t[: n - n % R].view(R, -1) for t in (g_theta, *saved))
    g_kls = torch.arange(1.0, R + 1).view(R, 1) / 3000.0
    assert _native.backward_usable(rows[0], g_kls, rows[1:])
    assert not _native.backward_usable(rows[0], g_kl, rows[1:])  # one g_kl for R rows
    for g_rows in (g_kls, torch.tensor(2e-4).expand(R, 1)):
        expected = inductor(rows[0], g_rows, *(t.clone() for t in rows[1:]), True)
        got = _native.fused_backward(rows[0], g_rows, *(t.clone() for t in rows[1:]))
        for a, b in zip(got, expected, strict=True):
            assert torch.equal(a, b)


def test_training_is_the_same_with_and_without_the_native_kernel(
    one_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The native backend draws this network with the loops, auto and compiled with
    # inductor's kernel (the loops gained too little against it to stand in for it:
    # docs/performance.md). All three give the same training bit for bit.
    calls = _spy_on(monkeypatch, ("fused_forward", "fused_backward"))
    g = torch.Generator().manual_seed(1)
    X, y = torch.randn(64, 100, generator=g), torch.randn(64, generator=g)
    states = []
    for name in ("auto", "compiled", "native"):
        gen = torch.Generator().manual_seed(2)
        # 13,057 parameters: above the auto backend's whole-network limit, so auto runs the
        # compiled per-parameter kernels, and the native backend's whole step (for
        # narrow layers or smaller networks) does not apply.
        model = SpikeSlabMLP(100, (128,), 1, generator=gen)
        assert sum(p.numel() for p in model.parameters()) // 3 >= K.AUTO_MIN_NUMEL
        hist = train(
            model,
            X,
            y,
            GaussianLikelihood(1.0),
            epochs=3,
            batch_size=32,
            lr=1e-2,
            generator=gen,
            kernel_backend=name,
        )
        states.append((model.state_dict(), hist.kl))
        # 3 epochs of 2 steps
        assert calls == ([] if name != "native" else ["fused_forward", "fused_backward"] * 6)
    for state, kl in states[1:]:
        for key, value in states[0][0].items():
            assert torch.equal(value, state[key]), key
        # Only the reported KL adds in another order.
        assert states[0][1] == pytest.approx(kl, rel=1e-5)


def test_native_kernel_steps_aside_where_it_does_not_apply(
    one_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    mu, rho, alpha = _parameters(1000, 3)
    lam = torch.tensor(-5.0)
    assert _native.usable(mu, rho, alpha, lam, 2.0)
    assert not _native.usable(mu.double(), rho.double(), alpha.double(), lam, 2.0)
    two = [t.view(2, 500) for t in (mu, rho, alpha)]
    assert _native.usable(*two, lam, 2.0)  # replicates with one prior
    assert not _native.usable(*two, lam.expand(2, 1), 2.0)  # a prior per replicate: inductor
    assert not _native.usable(mu[::2], rho[::2], alpha[::2], lam, 2.0)  # not contiguous
    assert not _native.usable(mu, rho, alpha, lam, 3.0)  # only tau = 1/2 and 1
    torch.set_num_threads(2)
    assert not _native.usable(mu, rho, alpha, lam, 2.0)
    torch.set_num_threads(1)
    monkeypatch.setenv("SVBNN_NATIVE", "0")
    assert not _native.usable(mu, rho, alpha, lam, 2.0)


def test_gather_copies_the_rows_index_select_does() -> None:
    g = torch.Generator().manual_seed(9)
    X = torch.randn(500, 13, generator=g)
    rows = torch.randint(0, 500, (77,), generator=g)  # repeats too; fewer than the lookahead
    for n in (77, 5):
        out = torch.empty(n, 13)
        assert _native.gather_usable(X, rows[:n], out)
        assert torch.equal(_native.gather_rows(X, rows[:n], out), X.index_select(0, rows[:n]))
    ints = torch.arange(12, dtype=torch.int16).view(6, 2)  # rows of any dtype: bytes
    out16 = torch.empty(3, 2, dtype=torch.int16)
    idx = torch.tensor([5, 0, 5])
    assert torch.equal(_native.gather_rows(ints, idx, out16), ints[idx])
    assert not _native.gather_usable(X, rows.int(), torch.empty(77, 13))
    assert not _native.gather_usable(X.t(), rows[:13], torch.empty(13, 500))
    # The extension checks what it is handed: a row out of range is an error, not a read
    # outside the data.
    for bad in (500, -1):
        with pytest.raises(RuntimeError, match="out of range"):
            _native.gather_rows(X, torch.tensor([0, bad]), torch.empty(2, 13))


def test_the_extension_refuses_what_its_loops_cannot_read() -> None:
    # Called past the *_usable checks, each function still checks its tensors: an error
    # names the argument instead of a read or write outside an array.
    assert _native.available()
    mu, rho, alpha = _parameters(100, 2)
    seed, lam, lam1 = torch.tensor([1, 2], dtype=torch.int32), torch.tensor(-5.0), torch.tensor(0.0)
    with pytest.raises(RuntimeError, match="rho"):
        _native.fused_forward(mu, rho[:50], alpha, seed, lam, lam1, 0.0, 1.0, 2.0)
    with pytest.raises(RuntimeError, match="alpha"):
        _native.fused_forward(mu, rho, alpha.double(), seed, lam, lam1, 0.0, 1.0, 2.0)
    with pytest.raises(RuntimeError, match="seed"):
        _native.fused_forward(mu, rho, alpha, seed.long(), lam, lam1, 0.0, 1.0, 2.0)
    saved = _native.fused_forward(mu, rho, alpha, seed, lam, lam1, 0.0, 1.0, 2.0)
    with pytest.raises(RuntimeError, match="g_kl"):
        _native.fused_backward(mu, torch.ones(2), saved[0], *saved[2:])
    theta, x = torch.randn(2, 30), torch.randn(2, 5, 4)
    with pytest.raises(RuntimeError, match="theta: at least 31"):  # 3 x 5 + 3 x 4 + 1 x 4
        _native.narrow_mlp_forward(theta, x, ((3, 4), (3, 3), (1, 3)), "relu")
    with pytest.raises(RuntimeError, match="x"):
        _native.narrow_mlp_forward(torch.randn(2, 40), x.mT, ((3, 5),), "relu")


U = 2.0**-24  # float32's unit roundoff


def _narrow_net(
    R: int, m: int, widths: tuple[int, ...], seed: int
) -> tuple[torch.Tensor, torch.Tensor, tuple[tuple[int, int], ...]]:
    g = torch.Generator().manual_seed(seed)
    shapes = tuple(zip(widths[1:], widths[:-1], strict=True))
    T = sum(o * (i + 1) for o, i in shapes)
    theta = torch.randn(R, T + 5, generator=g) / 2  # five more numbers after the network
    x = torch.randn(R, m, widths[0], generator=g)
    return theta, x, shapes


@pytest.mark.parametrize(
    ("m", "widths", "activation"),
    [
        (512, (200, 7, 7, 7, 1), "relu"),
        (31, (9, 16, 3), "relu"),
        (10, (37, 1), "identity"),
        (7, (16, 9, 12, 2), "identity"),
        # Wider than the replicated path takes them: one small network's native step.
        (128, (10, 50, 1), "relu"),
        (33, (30, 40, 20, 1), "relu"),
    ],
)
def test_narrow_mlp_forward_and_weight_gradient_within_float32_error_bounds(
    m: int, widths: tuple[int, ...], activation: str
) -> None:
    # Against float64 on the same weights. Each float32 sum of n products errs by at most
    # (n + 1) u sum |terms| in any order; the bounds carry that through the layers
    # (ReLU does not enlarge an error), so the tolerance is derived, not chosen.
    R = 3
    theta, x, shapes = _narrow_net(R, m, widths, seed=m + len(widths))
    narrow = max(widths[1:]) <= _native.NARROW_MAX_OUT
    assert _native.narrow_mlp_usable(theta, x, shapes, activation) == narrow
    hs, out = _native.narrow_mlp_forward(theta, x, shapes, activation)
    assert out.shape == (R, shapes[-1][0], m)
    assert [tuple(h.shape) for h in hs] == [(R, widths[0], m)] + [(R, w, m) for w in widths[1:-1]]
    views = layer_views(theta.double(), shapes)
    relu = activation == "relu"
    h, err = x.double().mT, torch.zeros(R, widths[0], m, dtype=torch.float64)
    for i, (w, b) in enumerate(views):
        exact = torch.baddbmm(b, w, h)
        absolute = torch.baddbmm(b.abs(), w.abs(), h.abs())
        err = (w.shape[-1] + 2) * U * absolute + torch.bmm(w.abs(), err)
        got = (out if i == len(views) - 1 else hs[i + 1]).double()
        if i < len(views) - 1 and relu:
            exact = exact.clamp_min(0.0)
        assert torch.all((got - exact).abs() <= err), i
        h = exact
    # The backward against float64 given the same activations (so ReLU's kinks agree) and
    # an output gradient.
    g_out = torch.randn(R, shapes[-1][0], m, generator=torch.Generator().manual_seed(1))
    grad = torch.full_like(theta, 7.0)
    _native.narrow_mlp_backward(theta, hs, g_out, shapes, activation, grad)
    got_views = layer_views(grad.double(), shapes)
    g, g_err = g_out.double(), torch.zeros_like(g_out, dtype=torch.float64)
    for i in range(len(views) - 1, -1, -1):
        w = views[i][0]
        h_in = hs[i].double()
        g_w, g_b = got_views[i]
        bound_w = (m + 1) * U * torch.bmm(g.abs(), h_in.abs().mT) + torch.bmm(g_err, h_in.abs().mT)
        assert torch.all((g_w - torch.bmm(g, h_in.mT)).abs() <= bound_w), i
        bound_b = (m + 1) * U * g.abs().sum(-1, keepdim=True) + g_err.sum(-1, keepdim=True)
        assert torch.all((g_b - g.sum(-1, keepdim=True)).abs() <= bound_b), i
        if i > 0:
            mask = (h_in > 0).double() if relu else torch.ones_like(h_in)
            w_abs = w.abs().mT
            g_err = mask * ((w.shape[1] + 1) * U * torch.bmm(w_abs, g.abs()) + w_abs @ g_err)
            g = mask * torch.bmm(w.mT, g)
    sum_t = sum(o * (i + 1) for o, i in shapes)
    assert torch.all(grad[:, sum_t:] == 7.0)  # nothing past the network written


def _first_layer_in_its_order(theta: torch.Tensor, x: torch.Tensor, o: int) -> torch.Tensor:
    """The first narrow layer's outputs ``(R, o, m)`` in the order the loops define them, in
    float32 numpy (each product and sum rounded, nothing fused): per output and row, 16
    lanes each summing the terms of k = lane mod 16 below the last multiple of 16, those 16
    as halves then quarters ((c0 + c2) + (c1 + c3)), the remaining terms in order, the bias."""
    import numpy as np

    R, m, p = x.shape
    W = theta[:, : o * (p + 1)].reshape(R, o, p + 1).numpy()
    w, bias = W[..., :p], W[..., p]
    xs = x.numpy()
    pv = p - p % 16
    lanes = np.zeros((R, o, m, 16), dtype=np.float32)
    for k in range(0, pv, 16):  # (R, o, 1, 16) * (R, 1, m, 16)
        lanes = lanes + w[:, :, None, k : k + 16] * xs[:, None, :, k : k + 16]
    halves = lanes[..., :8] + lanes[..., 8:]
    c = halves[..., :4] + halves[..., 4:]
    s = (c[..., 0] + c[..., 2]) + (c[..., 1] + c[..., 3])
    for k in range(pv, p):
        s = s + w[:, :, None, k] * xs[:, None, :, k]
    return torch.from_numpy(s + bias[:, :, None])


@pytest.mark.parametrize(("m", "p", "o"), [(128, 40, 50), (31, 74, 8), (7, 16, 3), (10, 5, 7)])
def test_narrow_first_layer_sums_in_one_order_on_every_cpu(m: int, p: int, o: int) -> None:
    # The loops hold the 16 lanes in whatever vectors the CPU has (16, 8 or 4 floats), with
    # the same operations: the layer is the same to the bit on every CPU, and equal to this
    # float32 emulation of the order, exactly.
    theta, x, shapes = _narrow_net(2, m, (p, o, 1), seed=p + o)
    _, out = _native.narrow_mlp_forward(theta, x, shapes[:1], "identity")
    assert torch.equal(out, _first_layer_in_its_order(theta, x, o))


@pytest.mark.parametrize(("m", "widths"), [(128, (30, 50, 1)), (33, (5, 7, 9, 1)), (3, (8, 50, 1))])
def test_local_forward_sums_in_one_order_on_every_cpu(m: int, widths: tuple[int, ...]) -> None:
    # The local sampler's layers sum each output's terms from 0 in the order of the inputs,
    # a vector of outputs of several rows at a time in registers of the CPU's width: the
    # same floats on every CPU as this float32 emulation (each product and sum rounded, the
    # square root correctly rounded), exactly.
    import numpy as np

    g = torch.Generator().manual_seed(m)
    outs = list(widths[1:])
    T = sum(o * (i + 1) for o, i in zip(outs, widths[:-1], strict=True))
    mean, var = torch.randn(T, generator=g) * 0.3, torch.rand(T, generator=g) * 0.01
    x = torch.randn(m, widths[0], generator=g)
    eps = [torch.randn(m, o, generator=g) for o in outs]
    out, hidden = _native.local_mlp_forward(mean, var, x, outs, [e.clone() for e in eps])
    h, start = x.numpy(), 0
    tiny = np.float32(np.finfo(np.float32).tiny)
    for layer, (o, e) in enumerate(zip(outs, eps, strict=True)):
        i = h.shape[1]
        wm = mean[start : start + o * (i + 1)].reshape(o, i + 1).numpy()
        wv = var[start : start + o * (i + 1)].reshape(o, i + 1).numpy()
        am = np.zeros((m, o), dtype=np.float32)
        av = np.zeros((m, o), dtype=np.float32)
        for k in range(i):
            hk = h[:, k : k + 1]
            am = am + hk * wm[:, k]
            av = av + (hk * hk) * wv[:, k]
        s = np.sqrt(np.maximum(av + wv[:, i], tiny))
        pre = (am + wm[:, i]) + s * e.numpy()
        last = layer == len(outs) - 1
        h = pre if last else np.where(pre < 0, np.float32(0), pre)
        got = out if last else hidden[layer]
        assert torch.equal(got, torch.from_numpy(h)), layer
        start += o * (i + 1)


@pytest.mark.parametrize(("m", "p", "o"), [(128, 30, 50), (70, 74, 9), (3, 8, 50), (33, 5, 1)])
def test_local_weight_gradient_sums_in_one_order_on_every_cpu(m: int, p: int, o: int) -> None:
    # The local layers' weight gradient sums each weight's terms from 0 over the rows in
    # order (blocks of rows, a vector of inputs at a time in registers): the same floats on
    # every CPU as this float32 emulation, exactly. One layer, so its gradient is g_out's.
    import numpy as np

    g = torch.Generator().manual_seed(m + p)
    T = o * (p + 1)
    mean, var = torch.randn(T, generator=g) * 0.3, torch.rand(T, generator=g) * 0.01
    x = torch.randn(m, p, generator=g)
    eps = [torch.randn(m, o, generator=g)]
    g_out = torch.randn(m, o, generator=g)
    _, hidden = _native.local_mlp_forward(mean, var, x, [o], eps)  # eps becomes eps / (2 s)
    g_mean, g_var, _ = _native.local_mlp_backward(mean, var, x, [o], hidden, eps, g_out, False)
    xs, a = x.numpy(), g_out.numpy()
    b = a * eps[0].numpy()
    want_m = np.zeros((o, p + 1), dtype=np.float32)
    want_v = np.zeros((o, p + 1), dtype=np.float32)
    for r in range(m):
        want_m[:, :p] = want_m[:, :p] + a[r, :, None] * xs[r]
        want_v[:, :p] = want_v[:, :p] + b[r, :, None] * (xs[r] * xs[r])
        want_m[:, p] = want_m[:, p] + a[r]
        want_v[:, p] = want_v[:, p] + b[r]
    assert torch.equal(g_mean, torch.from_numpy(want_m.reshape(-1)))
    assert torch.equal(g_var, torch.from_numpy(want_v.reshape(-1)))


def test_narrow_mlp_steps_aside_for_autograd_wide_layers_and_other_activations(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    theta, x, shapes = _narrow_net(2, 8, (5, 3, 2), seed=4)
    assert _native.narrow_mlp_usable(theta, x, shapes, "relu")
    assert not _native.narrow_mlp_usable(theta.requires_grad_(), x, shapes, "relu")  # recorded
    with torch.no_grad():
        assert _native.narrow_mlp_usable(theta, x, shapes, "relu")
    theta = theta.detach()
    assert not _native.narrow_mlp_usable(theta, x, shapes, "tanh")
    wide = _native.NARROW_MAX_OUT + 1
    theta_w, x_w, shapes_w = _narrow_net(2, 8, (5, wide, 1), seed=4)
    assert not _native.narrow_mlp_usable(theta_w, x_w, shapes_w, "relu")
    assert not _native.narrow_mlp_usable(theta.double(), x.double(), shapes, "relu")
    assert not _native.narrow_mlp_usable(theta, x.mT.contiguous().mT, shapes, "relu")
    assert not _native.narrow_mlp_usable(theta[:, :10], x, shapes, "relu")  # too short
    assert not _native.narrow_mlp_usable(theta, x, ((3, 4), (2, 3)), "relu")  # p is 5
    assert not _native.narrow_mlp_usable(theta, x, ((3, 5), (2, 2)), "relu")  # not chained
    monkeypatch.setenv("SVBNN_NATIVE", "0")
    assert not _native.narrow_mlp_usable(theta, x, shapes, "relu")


def test_replicated_training_with_the_native_loops_learns_what_torch_s_operations_learn(
    one_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The layers' sums add in another order than MKL's, so the runs part in the last bits
    # and drift apart as training goes on; after a few steps they are still close.
    calls = _spy_on(monkeypatch, ("gather_rows", "narrow_mlp_forward", "narrow_mlp_backward"))
    g = torch.Generator().manual_seed(3)
    R, n, p = 4, 96, 30
    X, y = torch.randn(R, n, p, generator=g), torch.randn(R, n, generator=g)
    states = []
    for native in ("0", "1"):
        calls.clear()
        monkeypatch.setenv("SVBNN_NATIVE", native)
        gen = torch.Generator().manual_seed(2)
        model = SpikeSlabMLP(p, (5, 5), 1, n_replicates=R, generator=gen)
        train(model, X, y, GaussianLikelihood(1.0), epochs=2, batch_size=32, lr=1e-3, generator=gen)
        states.append(model.state_dict())
        # 2 epochs of 3 steps: each a gather, the network's forward and its gradient
        per_step = ["gather_rows", "narrow_mlp_forward", "narrow_mlp_backward"]
        assert calls == ([] if native == "0" else per_step * 6)
    for key, value in states[0].items():
        assert torch.allclose(value, states[1][key], rtol=1e-4, atol=1e-5), key


def test_auto_trains_a_narrow_replicated_network_by_the_native_loops_not_one_graph(
    one_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Below AUTO_MIN_NUMEL, auto would compile the whole step as one graph (about a minute,
    # and slower for such a network): the native loops run it instead, with nothing compiled.
    def no_graph(*args: object, **kwargs: object) -> None:
        raise AssertionError("the one-graph step was built")

    monkeypatch.setattr(fused, "whole_network_kernel", no_graph)
    # Nor any inductor kernel but the draw + KL pair (which the native loops serve), also
    # for predictions.
    real_kernels = fused.kernels

    def no_inductor(compiled: bool | None = None) -> dict[str, object]:
        table = real_kernels(compiled)
        if not compiled:
            return table
        return {k: v if k.startswith("fused_") else no_graph for k, v in table.items()}

    monkeypatch.setattr(fused, "kernels", no_inductor)
    names = ("fused_forward", "narrow_mlp_gaussian_step", "fused_backward")
    calls = _spy_on(monkeypatch, (*names, "narrow_mlp_forward", "narrow_mlp_backward"))
    g = torch.Generator().manual_seed(4)
    R, n, p = 3, 64, 30
    X, y = torch.randn(R, n, p, generator=g), torch.randn(R, n, generator=g)
    model = SpikeSlabMLP(p, (5, 5), 1, n_replicates=R, generator=g)
    assert model.mu.numel() < K.AUTO_MIN_NUMEL
    with K.backend_scope("auto"):
        assert fused_paths.native_network(model, model.layers())
        train(model, X, y, GaussianLikelihood(1.0), epochs=1, batch_size=32, lr=1e-3, generator=g)
    # 2 steps: the draw, the layers forward and back, the draw's backward
    assert calls == list(names) * 2
    # A replicate's big layer (R x 5 x 31 = 465 weights; Table 2's first: 21,105) draws
    # eagerly for predictions, whatever its size.
    monkeypatch.setattr(K, "AUTO_MIN_NUMEL", 1)
    with K.backend_scope("auto"):
        draws = sample_outputs(model, X, 3, generator=torch.Generator().manual_seed(5))
    assert draws.shape == (3, R, n, 1) and torch.isfinite(draws).all()
    other = SpikeSlabMLP(p, (5, 5), 1, n_replicates=R, activation="tanh", generator=g)
    wide = SpikeSlabMLP(p, (_native.NARROW_MAX_OUT + 1,), 1, n_replicates=R, generator=g)
    single = SpikeSlabMLP(p, (5, 5), 1, generator=g)
    with K.backend_scope("auto"):
        for net in (other, wide, single):
            assert not fused_paths.native_network(net, net.layers())
    with K.backend_scope("eager"):
        assert not fused_paths.native_network(model, model.layers())


def test_auto_draws_narrow_replicates_on_the_loops_only_in_place_of_the_eager_kernels(
    one_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Under auto, replicates of narrow layers that the native step turns away draw with
    # the native loops below AUTO_MIN_NUMEL parameters (where the eager kernels would
    # draw), and with inductor's kernel from there on (the loops gained too little against
    # it, docs/performance.md). The compiled table is the eager one here (the same
    # formulas), so that nothing compiles; the tables asked for are recorded.
    monkeypatch.setattr(fused, "native_step_ok", lambda *args: False)
    tables: list[bool | None] = []

    def eager_table(compiled: bool | None = None) -> dict[str, object]:
        tables.append(compiled)
        return K._EAGER  # type: ignore[return-value]

    monkeypatch.setattr(fused, "kernels", eager_table)
    calls = _spy_on(monkeypatch, ("fused_forward", "fused_backward"))
    g = torch.Generator().manual_seed(4)
    R, n, p = 3, 32, 30
    X, y = torch.randn(R, n, p, generator=g), torch.randn(R, n, generator=g)
    model = SpikeSlabMLP(p, (5, 5), 1, n_replicates=R, generator=g)
    with K.backend_scope("auto"):
        assert fused_paths.native_network(model, model.layers())
        negative_elbo(model, GaussianLikelihood(1.0), X, y, 100)[0].sum().backward()
        assert calls == ["fused_forward", "fused_backward"] and tables == []
        monkeypatch.setattr(K, "AUTO_MIN_NUMEL", model.mu.numel())
        negative_elbo(model, GaussianLikelihood(1.0), X, y, 100)[0].sum().backward()
    assert calls == ["fused_forward", "fused_backward"] and tables == [True, True]


def _native_step_run(
    native: bool,
    X: torch.Tensor,
    y: torch.Tensor,
    n_replicates: int | None,
    n_classes: int | None = None,
    weighted: bool = False,
) -> tuple[SpikeSlabMLP, History]:
    # A 20-7-7-1 network (20-7-7-C under a categorical likelihood of C classes) for 3
    # epochs in minibatches of 64 (of 300 rows: the last has 44), with the native step or
    # (native False) through autograd; ``weighted``: y (..., n, 2), each row's class and
    # weight, under a RowWeightedLikelihood.
    model = SpikeSlabMLP(
        20,
        (7, 7),
        n_classes or 1,
        n_replicates=n_replicates,
        generator=torch.Generator().manual_seed(1),
    )
    likelihood: Any = GaussianLikelihood(0.8) if n_classes is None else CategoricalLikelihood()
    if weighted:
        likelihood = RowWeightedLikelihood(likelihood)
    with pytest.MonkeyPatch.context() as mp, K.backend_scope("auto"):
        if not native:
            mp.setattr(fused, "native_step_ok", lambda *args: False)
        history = train(
            model,
            X,
            y,
            likelihood,
            epochs=3,
            batch_size=64,
            lr=5e-3,
            generator=torch.Generator().manual_seed(2),
        )
    return model, history


@pytest.mark.parametrize(("n_classes", "weighted"), [(None, False), (3, False), (3, True)])
def test_the_native_step_trains_bit_for_bit_as_its_autograd_graph(
    one_thread: None, native_steps: list[int], n_classes: int | None, weighted: bool
) -> None:
    # NativeNegativeElbo computes the step's gradient in its forward with the operations
    # autograd runs, in its order: the same parameters and history, bit for bit, under a
    # Gaussian (None) and a categorical likelihood, and a categorical one whose rows are
    # weighted (RowWeightedLikelihood: each row's term and its gradient times its weight).
    steps = native_steps
    g = torch.Generator().manual_seed(6)
    X = torch.randn(3, 300, 20, generator=g)
    if n_classes is None:
        y = torch.randn(3, 300, generator=g)
    else:
        y = torch.randint(0, n_classes, (3, 300), generator=g)
    if weighted:
        w = torch.rand(3, 300, generator=g) * 2 + 0.25
        y = torch.stack([y.to(torch.float32), w / w.mean()], dim=-1)
    native, h_native = _native_step_run(True, X, y, 3, n_classes, weighted)
    assert len(steps) == 15  # 3 epochs of 5 steps
    graph, h_graph = _native_step_run(False, X, y, 3, n_classes, weighted)
    assert len(steps) == 15
    for name in ("mu", "rho", "alpha"):
        assert torch.equal(getattr(native, name), getattr(graph, name)), name
    for name in ("loss", "nll", "kl"):
        assert getattr(h_native, name) == getattr(h_graph, name), name


def test_the_native_step_scales_its_gradient_by_the_incoming_one(
    one_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Replicates' losses weighted by powers of two (exact in float32) and backpropagated
    # twice through a kept graph: the gradients of the autograd graph, bit for bit.
    g = torch.Generator().manual_seed(7)
    x, y = torch.randn(3, 40, 20, generator=g), torch.randn(3, 40, generator=g)
    weights = torch.tensor([0.5, 2.0, 4.0])
    grads = []
    for native in (True, False):
        if not native:
            monkeypatch.setattr(fused, "native_step_ok", lambda *args: False)
        model = SpikeSlabMLP(
            20, (7, 7), 1, n_replicates=3, generator=torch.Generator().manual_seed(1)
        )
        with K.backend_scope("auto"):
            loss, _, _ = negative_elbo(model, GaussianLikelihood(1.0), x, y, 500)
            (loss * weights).sum().backward(retain_graph=True)
            (loss * weights).sum().backward()
        grads.append([p.grad for p in (model.mu, model.rho, model.alpha)])
        monkeypatch.undo()
    for a, b in zip(*grads, strict=True):
        assert a is not None and b is not None and torch.equal(a, b)


def _one_step_grads(
    model: SpikeSlabMLP, likelihood: GaussianLikelihood, x: torch.Tensor, y: torch.Tensor
) -> tuple[list[torch.Tensor], float]:
    # The gradients of one step (the noise level's last, if learned) and its nll.
    model.zero_grad(set_to_none=True)
    likelihood.zero_grad(set_to_none=True)
    set_generator(model, torch.Generator().manual_seed(3))  # the same draw every call
    loss, nll, _ = negative_elbo(model, likelihood, x, y, 500)
    loss.sum().backward()
    params = [model.mu, model.rho, model.alpha, *likelihood.parameters()]
    return [p.grad.clone() for p in params if p.grad is not None], float(nll.sum())


@pytest.mark.parametrize("mode", ["auto", "native"])
def test_a_learned_noise_level_takes_the_native_step(
    one_thread: None, native_steps: list[int], monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    # A learned noise level's step: the network's gradients are those of the known noise
    # level at the current variance, bit for bit (that step is autograd's, bit for bit: the
    # tests above); the level's own gradient, 1 - mean((y - out)^2) / var in closed form, is
    # autograd's to float32 rounding. One replicate through the narrow loops either way, so
    # both see the same outputs: each computes mean(r^2) / var in float32, a sum of m terms
    # and a few roundings, so they differ by at most 2 (m + 8) u (1 + mean(r^2) / var).
    g = torch.Generator().manual_seed(9)
    m = 64
    x, y = torch.randn(1, m, 20, generator=g), torch.randn(1, m, generator=g) * 3
    model = SpikeSlabMLP(20, (7, 7), 1, n_replicates=1, generator=torch.Generator().manual_seed(1))
    learned = GaussianLikelihood(0.7, learn_noise=True)
    with K.backend_scope(mode):
        native, nll_native = _one_step_grads(model, learned, x, y)
        assert len(native_steps) == 1 and len(native) == 4
        known = GaussianLikelihood(float(learned.noise_std.detach()))
        assert known.fused_spec(1) == ("gaussian", float(learned.noise_std.detach()) ** 2)
        at_var, _ = _one_step_grads(model, known, x, y)
        assert len(native_steps) == 2
        monkeypatch.setattr(fused, "native_step_ok", lambda *args: False)
        graph, nll_graph = _one_step_grads(model, learned, x, y)
        assert len(native_steps) == 2
    for a, b in zip(native[:3], at_var, strict=True):
        assert torch.equal(a, b)
    g_native, g_graph = float(native[3]), float(graph[3])
    q = abs(1 - g_graph)  # mean(r^2) / var
    assert g_native != 0.0
    assert abs(g_native - g_graph) <= 2 * (m + 8) * U * (1 + q)
    # nll = log(2 pi var) / 2 + q / 2, the same sums and a few more roundings.
    half_log = abs(0.5 * math.log(2 * math.pi * float(learned.noise_std.detach()) ** 2))
    assert abs(nll_native - nll_graph) <= 2 * (m + 8) * U * (half_log + q)


def test_the_native_step_steps_aside_where_its_conditions_fail(one_thread: None) -> None:
    g = torch.Generator().manual_seed(8)
    x, y = torch.randn(3, 16, 20, generator=g), torch.randn(3, 16, generator=g)
    model = SpikeSlabMLP(20, (7, 7), 1, n_replicates=3, generator=g)
    layers = model.layers()
    known = step_likelihood(GaussianLikelihood(1.0), 1)
    learned = step_likelihood(GaussianLikelihood(1.0, learn_noise=True), 1)
    assert known == ("gaussian", 1.0, False) and learned is not None
    assert isinstance(learned[1], torch.Tensor)
    assert step_likelihood(CategoricalLikelihood(), 3) == ("categorical", None, False)
    # A RowWeightedLikelihood of one of these is its base's, weighted; of another, none.
    weighted = ("categorical", None, True)
    assert step_likelihood(RowWeightedLikelihood(CategoricalLikelihood()), 3) == weighted
    assert step_likelihood(RowWeightedLikelihood(GaussianLikelihood(1.0)), 1) == (
        "gaussian",
        1.0,
        True,
    )
    # Likelihoods the step does not know: one learned level per replicate, several
    # outputs, subclasses with their own log_prob.

    class Heavier(GaussianLikelihood):
        def log_prob(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return super().log_prob(output, target) * 2

    class Tempered(CategoricalLikelihood):
        def log_prob(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return super().log_prob(output / 2, target)

    assert step_likelihood(GaussianLikelihood(torch.ones(3, 1), learn_noise=True), 1) is None
    assert step_likelihood(GaussianLikelihood(1.0, learn_noise=True), 2) is None
    assert (
        step_likelihood(Heavier(1.0), 1) is None and step_likelihood(Heavier(1.0, True), 1) is None
    )
    assert step_likelihood(Tempered(), 3) is None
    assert step_likelihood(RowWeightedLikelihood(Tempered()), 3) is None
    twice = RowWeightedLikelihood(RowWeightedLikelihood(CategoricalLikelihood()))
    assert step_likelihood(twice, 3) is None
    double = ("gaussian", learned[1].detach().double(), False)

    def ok(spec: object = known, xx: torch.Tensor = x, yy: torch.Tensor = y) -> bool:
        return native_step_ok(model, layers, spec, xx, yy)  # type: ignore[arg-type]

    for mode in ("auto", "native"):
        with K.backend_scope(mode):
            assert ok() and ok(learned) and not ok(double)
            # a categorical likelihood takes class indices (int64); weighted, (..., m, 2)
            # float32 targets, each row's class and weight; weighted Gaussian rows: autograd
            categorical = ("categorical", None, False)
            assert not ok(categorical) and ok(categorical, yy=y.long())
            stacked = torch.stack([y.long().float(), torch.ones_like(y)], dim=-1)
            assert ok(weighted, yy=stacked) and not ok(weighted, yy=y.long())
            assert not ok(weighted, yy=stacked.double())
            assert not ok(("gaussian", 1.0, True), yy=torch.stack([y, y], dim=-1))
            assert not ok(xx=x.clone().requires_grad_()) and not ok(yy=y.double())
            assert not ok(xx=x.transpose(1, 2).contiguous().transpose(1, 2))
            with torch.no_grad():
                assert not ok()
    with K.backend_scope("eager"):
        assert not ok()
    # Wider layers: under native, one network under the size limit, not replicates.
    wide = SpikeSlabMLP(20, (40,), 1, generator=g)
    wide_r = SpikeSlabMLP(20, (40,), 1, n_replicates=3, generator=g)
    big = SpikeSlabMLP(20, (600,), 1, generator=g)  # 13,201 parameters
    with K.backend_scope("native"):
        assert native_step_ok(wide, wide.layers(), known, x[0], y[0])
        assert not native_step_ok(wide_r, wide_r.layers(), known, x, y)
        assert not native_step_ok(big, big.layers(), known, x[0], y[0])
    with K.backend_scope("auto"):  # auto's one-graph step instead
        assert not native_step_ok(wide, wide.layers(), known, x[0], y[0])


def test_one_network_takes_the_native_step_as_one_replicate_bit_for_bit(
    one_thread: None, native_steps: list[int]
) -> None:
    # A network without replicates runs the native step as one replicate: the same
    # parameters and losses, bit for bit, as a one-replicate network through autograd.
    steps = native_steps
    g = torch.Generator().manual_seed(6)
    X, y = torch.randn(300, 20, generator=g), torch.randn(300, generator=g)
    single, h_single = _native_step_run(True, X, y, None)
    assert len(steps) == 15  # the one network's 3 epochs of 5 steps
    one, h_one = _native_step_run(False, X[None], y[None], 1)
    assert len(steps) == 15  # none for R = 1 through autograd
    for name in ("mu", "rho", "alpha"):
        assert torch.equal(getattr(single, name), getattr(one, name).view(-1)), name
    assert [[v] for v in h_single.loss] == h_one.loss


def test_native_local_moments_kl_is_the_eager_pass(one_thread: None) -> None:
    """The local sampler's moments + KL pass on the native loops against the eager one,
    float32: the moments and the moments' factors within 1e-5 of the size of their terms
    (the two compute softplus, sigmoid and log each their own way; subnormal sigmas below
    1e-37 aside), the KL's own factors against the 60-digit reference in
    tests/test_engine_reference.py; the backward, the same operations in the same order,
    bit for bit."""
    assert _native.available()
    mu, rho, alpha = _parameters(100_003, 7)
    log_lam, log_1mlam = torch.tensor(-9.5), torch.tensor(-7.5e-5)
    args = (mu, rho, alpha, log_lam, log_1mlam, -0.3, 0.55)
    assert _native.local_moments_kl_usable(mu, rho, alpha, log_lam)
    n_mean, n_var, n_kl, n_saved = _native.local_moments_kl(*args)
    e_mean, e_var, e_kl, e_saved = K.local_moments_kl_forward(*args)
    sigma, phi = torch.nn.functional.softplus(rho), torch.sigmoid(alpha)
    q = phi * torch.sigmoid(-alpha)
    term_scales = {
        "mean": e_mean.abs(),
        "var": e_var,
        "phi": phi,
        "q mu": (q * mu).abs(),
        "var_rho": e_saved[2],
        # (1 - phi) - phi cancels near alpha = 0: its terms' size is 1
        "var_alpha": q * (sigma * sigma + mu * mu),
    }
    got = (n_mean, n_var, *n_saved[:4])
    want = (e_mean, e_var, *e_saved[:4])
    for (name, scale), a, b in zip(term_scales.items(), got, want, strict=True):
        bound = 1e-5 * scale + 1e-37
        assert bool(((a - b).abs() <= bound).all()), name
    assert n_kl.shape == () and abs(float(n_kl) - float(e_kl)) <= 3e-5 * abs(float(e_kl))

    g = torch.Generator().manual_seed(8)
    g_mean, g_var = (torch.randn(mu.shape, generator=g) for _ in range(2))
    g_kl = torch.tensor(0.37)
    native = _native.local_moments_kl_backward(g_mean, g_var, g_kl, e_saved)
    eager = K.local_moments_kl_backward(g_mean, g_var, g_kl, e_saved)
    for name, a, b in zip(("mu", "rho", "alpha"), native, eager, strict=True):
        assert torch.equal(a, b), name


@settings(max_examples=60, deadline=None)
@given(
    p=st.integers(1, 30),
    hidden=st.lists(st.integers(1, 40), min_size=0, max_size=2),
    out=st.integers(1, 3),
    rows=st.integers(1, 40),
    input_grad=st.booleans(),
    seed=st.integers(0, 2**31 - 1),
)
def test_native_local_layers_are_the_eager_layers(
    p: int, hidden: list[int], out: int, rows: int, input_grad: bool, seed: int
) -> None:
    """LocalFlatMLP on the native loops against the eager layers, float32, ReLU, from the
    same generators: the output and the gradients of the means, variances and input equal
    to float32 rounding of sums of their size (the products add in another order), over
    depths, widths and rows; the draws' factors are the eager ones."""
    g = torch.Generator().manual_seed(seed)
    widths = [p, *hidden, out]
    shapes = tuple((o, i) for i, o in zip(widths[:-1], widths[1:], strict=True))
    n = sum(o * (i + 1) for o, i in shapes)
    mean = torch.randn(n, generator=g)
    var = torch.rand(n, generator=g) * torch.randn(n, generator=g).exp() + 1e-4
    x = torch.randn(rows, p, generator=g)
    w = torch.randn(rows, out, generator=g)
    assert _native.local_mlp_usable(mean, var, x, "relu", any_threads=True)
    results = []
    for native in (True, False):
        m, v, xx = (t.clone().requires_grad_(t is not x or input_grad) for t in (mean, var, x))
        gens = tuple(torch.Generator().manual_seed(seed + k) for k in range(len(shapes)))
        y = fused.LocalFlatMLP.apply(m, v, xx, shapes, "relu", gens, native)
        grads = torch.autograd.grad((y * w).sum(), [m, v, *([xx] if input_grad else [])])
        results.append((y.detach(), *grads))
    # The size of what each sums: the products of absolute values (of x, the means and the
    # activations, bounded by the output's own scale through the network).
    for a, b in zip(*results, strict=True):
        scale = float(b.abs().max()) + 1.0
        torch.testing.assert_close(a, b, rtol=2e-5, atol=2e-5 * scale)


def test_the_native_local_layers_serve_small_work_only() -> None:
    """The loops multiply without BLAS: they serve at most LOCAL_LAYERS_MAX_WORK rows times
    parameters, ReLU, float32, and the eager layers run the rest."""
    n = 50 * 9 + 51  # 8-50-1
    mean, var = torch.zeros(n), torch.ones(n)
    rows = _native.LOCAL_LAYERS_MAX_WORK // n
    x = torch.zeros(rows, 8)
    assert _native.local_mlp_usable(mean, var, x, "relu", any_threads=True)
    assert not _native.local_mlp_usable(mean, var, torch.zeros(rows + 1, 8), "relu", True)
    assert not _native.local_mlp_usable(mean, var, x, "tanh", any_threads=True)
    assert not _native.local_mlp_usable(mean.double(), var.double(), x.double(), "relu", True)


def test_the_local_sampler_trains_on_the_native_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A local network's training step under auto, one thread: the moments and KL and the
    layers come from the native loops, and the step's gradients are the eager pass's to
    float32 rounding."""
    names = ("local_moments_kl", "local_mlp_forward", "local_mlp_backward")
    calls = _spy_on(monkeypatch, (*names, "local_moments_kl_backward"))
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        grads = {}
        for mode in ("auto", "eager"):
            g = torch.Generator().manual_seed(3)
            net = SpikeSlabMLP(6, (9,), 1, sampler="local", generator=g)
            x = torch.randn(17, 6, generator=g)
            with svbnn.kernel_backend(mode):
                loss = net(x).square().mean() + net.kl_divergence() / 100
                grads[mode] = torch.autograd.grad(loss, [net.mu, net.rho, net.alpha])
            if mode == "auto":
                assert calls == [
                    "local_moments_kl",
                    "local_mlp_forward",
                    "local_mlp_backward",
                    "local_moments_kl_backward",
                ]
    finally:
        torch.set_num_threads(n)
    assert len(calls) == 4  # none under eager
    for a, b in zip(grads["auto"], grads["eager"], strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def _counted(real: Callable[..., object], runs: list[int]) -> Callable[..., object]:
    """``real``, appending to ``runs`` at each call."""

    def call(*args: object) -> object:
        runs.append(1)
        return real(*args)

    return call


def _local_step(
    learn: bool,
    kl_weight: float,
    scale: float,
    mode: str,
    graph_free: bool,
    hidden: tuple[int, ...],
    p: int,
    m: int,
    seed: int,
    weighted: bool = False,
) -> tuple[list[torch.Tensor], list[torch.Tensor], int]:
    """One local-sampler training step's ``(loss, nll, kl)`` and gradients (``mu``, ``rho``,
    ``alpha``, and a learned noise level's), of ``scale * loss``; through
    :class:`NativeLocalNegativeElbo` or (``graph_free`` False) through autograd; and how
    many times the graph-free step ran. ``weighted``: the rows weighted by a
    :class:`~svbnn.objectives.RowWeightedLikelihood` (weights from 0.01 to 5)."""
    g = torch.Generator().manual_seed(seed)
    model = SpikeSlabMLP(p, hidden, 1, sampler="local", generator=g, log_prior_inclusion=-4.0)
    mu, rho, alpha = _parameters(model.mu.numel(), seed)
    with torch.no_grad():  # the whole legal domain: sigma from subnormal to 10, any phi
        model.mu.copy_(mu)
        model.rho.copy_(rho)
        model.alpha.copy_(alpha)
    x = torch.randn(m, p, generator=g)
    y = torch.randn(m, generator=g) * 2
    lik: Any = GaussianLikelihood(0.6, learn_noise=learn)
    if weighted:
        w = 10 ** (torch.rand(m, generator=g) * 2.7 - 2)
        y = torch.stack([y, w], dim=-1)
        lik = RowWeightedLikelihood(lik)
    runs: list[int] = []
    real = fused.native_local_negative_elbo
    with pytest.MonkeyPatch.context() as mp, K.backend_scope(mode):
        if graph_free:
            mp.setattr(
                fused,
                "native_local_negative_elbo",
                _counted(real, runs),
            )
        else:
            mp.setattr(fused, "native_local_step_ok", lambda *args: False)
        losses = list(negative_elbo(model, lik, x, y, 50, kl_weight=kl_weight))
        params = [model.mu, model.rho, model.alpha, *lik.parameters()]
        grads = list(torch.autograd.grad(scale * losses[0], params))
    return [t.detach() for t in losses], grads, len(runs)


@settings(max_examples=25, deadline=None)
@given(
    learn=st.booleans(),
    kl_weight=st.sampled_from([1.0, 0.2]),
    scale=st.sampled_from([1.0, 2.5]),
    mode=st.sampled_from(["auto", "native"]),
    hidden=st.sampled_from([(1,), (9,), (50,), (6, 4)]),
    p=st.integers(1, 12),
    m=st.integers(1, 40),
    seed=st.integers(0, 2**16),
    weighted=st.booleans(),
)
def test_the_local_samplers_graph_free_step_is_its_autograd_step(
    learn: bool,
    kl_weight: float,
    scale: float,
    mode: str,
    hidden: tuple[int, ...],
    p: int,
    m: int,
    seed: int,
    weighted: bool,
) -> None:
    """NativeLocalNegativeElbo: the losses and the gradients of the autograd step (the same
    native moments and layers, on the same draws), to float32 rounding, the rows weighted
    or not. The output's gradient is formed in another order (a few roundings per entry),
    and the loops sum the same products."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        args = (learn, kl_weight, scale, mode)
        free, g_free, runs = _local_step(*args, True, hidden, p, m, seed, weighted)
        graph, g_graph, _ = _local_step(*args, False, hidden, p, m, seed, weighted)
    finally:
        torch.set_num_threads(n)
    assert runs == 1
    assert len(g_free) == len(g_graph) == 3 + int(learn)
    for a, b in zip(free, graph, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6 * (1 + float(b.abs())))
    for a, b in zip(g_free, g_graph, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5 * float(b.abs().max()) + 1e-30)


def test_the_local_graph_free_step_steps_aside_where_its_conditions_fail(
    one_thread: None,
) -> None:
    from svbnn._engine.native_step import native_local_step_ok

    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(16, 5, generator=g), torch.randn(16, generator=g)
    model = SpikeSlabMLP(5, (9,), 1, sampler="local", generator=g)
    known = step_likelihood(GaussianLikelihood(1.0), 1)
    learned = step_likelihood(GaussianLikelihood(1.0, learn_noise=True), 1)
    assert known is not None and learned is not None

    def ok(
        net: SpikeSlabMLP = model,
        spec: object = known,
        xx: torch.Tensor = x,
        yy: torch.Tensor = y,
    ) -> bool:
        return native_local_step_ok(net, net.layers(), spec, xx, yy)  # type: ignore[arg-type]

    tanh = SpikeSlabMLP(5, (9,), 1, sampler="local", activation="tanh", generator=g)
    gumbel = SpikeSlabMLP(5, (9,), 1, generator=g)
    two = SpikeSlabMLP(5, (9,), 2, sampler="local", generator=g)
    replicated = SpikeSlabMLP(5, (9,), 1, sampler="local", n_replicates=2, generator=g)
    double = ("gaussian", learned[1].detach().double(), False)  # type: ignore[union-attr]
    weighted = ("gaussian", learned[1], True)  # type: ignore[union-attr]
    stacked = torch.stack([y, torch.ones_like(y)], dim=-1)
    for mode in ("auto", "native"):
        with K.backend_scope(mode):
            assert ok() and ok(spec=learned)
            # weighted rows: (m, 2) targets, each row's response and weight
            assert ok(spec=weighted, yy=stacked) and not ok(spec=weighted)
            assert not ok(spec=learned, yy=stacked)
            assert not ok(spec=double) and not ok(spec=("categorical", None, False))
            assert not ok(tanh) and not ok(gumbel) and not ok(two)
            assert not ok(replicated, xx=x.expand(2, 16, 5), yy=y.expand(2, 16))
            assert not ok(xx=x.double()) and not ok(yy=y.double())
            assert not ok(xx=x.clone().requires_grad_()) and not ok(yy=y[:, None])
            with torch.no_grad():
                assert not ok()
    with K.backend_scope("eager"):
        assert not ok()
    # Under auto the loops serve one torch thread only; under native any count.
    torch.set_num_threads(2)
    with K.backend_scope("auto"):
        assert not ok()
    with K.backend_scope("native"):
        assert ok()


def test_the_regressor_fits_on_the_local_graph_free_step(
    one_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SVBNNRegressor's default fit (the local sampler, a learned noise level, the native
    backend for its small network) takes the graph-free step at every step, and trains to
    the autograd step's fit: the same selection, and predictions that differ by the
    roundings' drift."""
    runs: list[int] = []
    real = fused.native_local_negative_elbo
    g = torch.Generator().manual_seed(0)
    X = torch.randn(200, 6, generator=g).numpy()
    y = (X[:, 0] - 2 * X[:, 1] + 0.3 * torch.randn(200, generator=g).numpy()).astype(float)
    kw = {"hidden_layer_sizes": (16,), "max_iter": 30, "tol": None, "random_state": 0}
    # One network fit (a linear mean fits it again, the default refit a second network).
    kw.update(mean_function="zero", refit_kl_weight=None)
    monkeypatch.setattr(
        fused,
        "native_local_negative_elbo",
        _counted(real, runs),
    )
    # Step by step: the whole epochs in the native loops (which run these steps after each
    # fit's first epoch) are tests/test_native_epoch.py's.
    monkeypatch.setattr(training, "_native_epochs", lambda *args: None)
    free = svbnn.SVBNNRegressor(**kw).fit(X, y)
    # Every step: 30 epochs of 2 minibatches (200 rows, 128 a batch), then the held-out
    # noise run on 160 rows over 0.3 of the budget (9 epochs of 2).
    assert len(runs) == 2 * 30 + 2 * 9
    monkeypatch.setattr(fused, "native_local_step_ok", lambda *args: False)
    graph = svbnn.SVBNNRegressor(**kw).fit(X, y)
    assert list(free.selected_features_) == list(graph.selected_features_)
    # The steps differ by float32 roundings, which 78 Adam steps carry into the parameters
    # (4e-7 here in y's units, whose sd is about 2.3): far below the noise's 0.3.
    assert abs(free.predict(X[:50]) - graph.predict(X[:50])).max() < 1e-4


def _graph_free_loss(
    kind: str, learn: bool, R: int | None, accumulate: bool, seed: int
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """A graph-free step's loss (``kind``: the local sampler's, or the native step's under
    a Gaussian or categorical likelihood) and the parameters its gradient goes to; with
    ``accumulate``, every parameter already holds a gradient."""
    g = torch.Generator().manual_seed(seed)
    if kind == "local":
        model = SpikeSlabMLP(5, (9,), 1, sampler="local", generator=g, log_prior_inclusion=-3.0)
        x, y = torch.randn(24, 5, generator=g), torch.randn(24, generator=g)
    else:
        model = SpikeSlabMLP(
            6, (7, 7), 3 if kind == "categorical" else 1, n_replicates=R, generator=g
        )
        lead = () if R is None else (R,)
        x = torch.randn(*lead, 40, 6, generator=g)
        y = (
            torch.randint(0, 3, (*lead, 40), generator=g)
            if kind == "categorical"
            else torch.randn(*lead, 40, generator=g)
        )
    lik: torch.nn.Module = (
        CategoricalLikelihood()
        if kind == "categorical"
        else GaussianLikelihood(0.7, learn_noise=learn)
    )
    params = [model.mu, model.rho, model.alpha, *lik.parameters()]
    if accumulate:
        for p in params:
            p.grad = torch.randn(p.shape, generator=g)
    with K.backend_scope("auto"):
        loss = negative_elbo(model, lik, x, y, 300, kl_weight=0.5)[0]
    return loss, params


@settings(max_examples=20, deadline=None)
@given(
    kind=st.sampled_from(["local", "gaussian", "categorical"]),
    learn=st.booleans(),
    R=st.sampled_from([None, 1, 3]),
    accumulate=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_graph_free_steps_gradients_skip_the_engine_bit_for_bit(
    kind: str, learn: bool, R: int | None, accumulate: bool, seed: int
) -> None:
    """backward_without_graph: the ``.grad`` of ``loss.sum().backward()``, bit for bit,
    whether the parameters hold a gradient already or not."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        loss, params = _graph_free_loss(kind, learn, R, accumulate, seed)
        assert backward_without_graph(loss)
        twin, twin_params = _graph_free_loss(kind, learn, R, accumulate, seed)
        twin.sum().backward()
    finally:
        torch.set_num_threads(n)
    assert len(params) == 3 + int(learn and kind != "categorical")
    for p, q in zip(params, twin_params, strict=True):
        assert p.grad is not None and q.grad is not None and torch.equal(p.grad, q.grad)


def test_a_graph_free_steps_gradients_take_the_engine_where_they_must(one_thread: None) -> None:
    """A hook on a parameter, a loss of another path: backward_without_graph does nothing
    and says so; the engine then runs the hook."""
    loss, params = _graph_free_loss("local", True, None, False, 0)
    seen: list[torch.Tensor] = []
    params[0].register_hook(lambda grad: seen.append(grad) or None)
    assert not backward_without_graph(loss)
    assert all(p.grad is None for p in params)
    loss.backward()
    assert len(seen) == 1 and torch.equal(seen[0], params[0].grad)
    model = SpikeSlabMLP(5, (9,), 1, generator=torch.Generator().manual_seed(0))
    x, y = torch.randn(8, 5), torch.randn(8)
    with K.backend_scope("eager"):
        eager = negative_elbo(model, GaussianLikelihood(0.7), x, y, 100)[0]
    assert not backward_without_graph(eager)
    assert model.mu.grad is None


def test_training_hands_graph_free_gradients_over_without_the_engine(
    one_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """train() takes backward_without_graph at every graph-free step: the same parameters
    and history, bit for bit, as the engine's backward."""
    runs: list[int] = []
    real = training.backward_without_graph
    monkeypatch.setattr(training, "backward_without_graph", _counted(real, runs))
    g = torch.Generator().manual_seed(6)
    X, y = torch.randn(3, 300, 20, generator=g), torch.randn(3, 300, generator=g)
    free, h_free = _native_step_run(True, X, y, 3)
    assert len(runs) == 15  # 3 epochs of 5 steps
    monkeypatch.setattr(training, "backward_without_graph", lambda loss: False)
    engine, h_engine = _native_step_run(True, X, y, 3)
    for name in ("mu", "rho", "alpha"):
        assert torch.equal(getattr(free, name), getattr(engine, name)), name
    assert h_free.loss == h_engine.loss
