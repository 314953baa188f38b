"""svbnn._native: the C++ compiler's build of the fused draw + KL forward gives the inductor
kernel's outputs bit for bit, so training is the same with it or without it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

import svbnn._kernels as K
from svbnn import _native
from svbnn.nn import SpikeSlabMLP
from svbnn.objectives import GaussianLikelihood
from svbnn.training import train


@pytest.fixture
def one_thread() -> Iterator[None]:
    # The native kernel serves one-thread runs only (inductor's loop splits among threads).
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


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
    replicated = tuple(t.view(1, n) for t in saved)
    assert not _native.backward_usable(g_theta.view(1, n), g_kl.view(1, 1), replicated)


def test_training_is_the_same_with_and_without_the_native_kernel(
    one_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[str] = []
    for name in ("fused_forward", "fused_backward"):
        real = getattr(_native, name)

        def spy(*args: object, _real: object = real, _name: str = name) -> object:
            calls.append(_name)
            return _real(*args)  # type: ignore[operator]

        monkeypatch.setattr(_native, name, spy)
    g = torch.Generator().manual_seed(1)
    X, y = torch.randn(64, 100, generator=g), torch.randn(64, generator=g)
    states = []
    for native in ("0", "1"):
        monkeypatch.setenv("SVBNN_NATIVE", native)
        gen = torch.Generator().manual_seed(2)
        # 13,057 parameters: above the auto backend's whole-network limit, so the step runs
        # the compiled per-parameter kernels.
        model = SpikeSlabMLP(100, (128,), 1, generator=gen)
        assert sum(p.numel() for p in model.parameters()) // 3 >= K.AUTO_MIN_NUMEL
        with K.backend_scope("auto"):
            hist = train(
                model,
                X,
                y,
                GaussianLikelihood(1.0),
                epochs=3,
                batch_size=32,
                lr=1e-2,
                generator=gen,
            )
        states.append((model.state_dict(), hist.kl))
        # 3 epochs of 2 steps
        assert calls == ([] if native == "0" else ["fused_forward", "fused_backward"] * 6)
    for key, value in states[0][0].items():
        assert torch.equal(value, states[1][0][key]), key
    # Only the reported KL adds in another order.
    assert states[0][1] == pytest.approx(states[1][1], rel=1e-5)


def test_native_kernel_steps_aside_where_it_does_not_apply(
    one_thread: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    mu, rho, alpha = _parameters(1000, 3)
    lam = torch.tensor(-5.0)
    assert _native.usable(mu, rho, alpha, lam, 2.0)
    assert not _native.usable(mu.double(), rho.double(), alpha.double(), lam, 2.0)
    two = [t.view(2, 500) for t in (mu, rho, alpha)]
    assert not _native.usable(*two, lam.view(1, 1), 2.0)  # replicates: inductor
    assert not _native.usable(mu[::2], rho[::2], alpha[::2], lam, 2.0)  # not contiguous
    assert not _native.usable(mu, rho, alpha, lam, 3.0)  # only tau = 1/2 and 1
    torch.set_num_threads(2)
    assert not _native.usable(mu, rho, alpha, lam, 2.0)
    torch.set_num_threads(1)
    monkeypatch.setenv("SVBNN_NATIVE", "0")
    assert not _native.usable(mu, rho, alpha, lam, 2.0)


def test_the_library_is_compiled_once_into_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_native, "_library", None)
    monkeypatch.setattr(_native, "_failed", False)
    monkeypatch.setenv("SVBNN_CACHE_DIR", str(tmp_path))
    assert _native.available()
    built = list(tmp_path.iterdir())
    assert len(built) == 1 and built[0].name.startswith("fused_forward-")
    assert built[0].suffix == ".so"
    monkeypatch.setattr(_native, "_library", None)
    assert _native.available()  # found in the cache
    assert list(tmp_path.iterdir()) == built


def test_without_a_compiler_the_inductor_kernel_stays(
    one_thread: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(_native, "_library", None)
    monkeypatch.setattr(_native, "_failed", False)
    monkeypatch.setenv("SVBNN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with caplog.at_level(logging.WARNING, logger="svbnn._native"):
        assert not _native.available()
        assert not _native.available()  # tried once
    assert len([r for r in caplog.records if "did not compile" in r.getMessage()]) == 1
    mu, rho, alpha = _parameters(1000, 4)
    assert not _native.usable(mu, rho, alpha, torch.tensor(-5.0), 2.0)
    assert list(tmp_path.iterdir()) == []
