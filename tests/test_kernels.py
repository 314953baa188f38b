"""The compiled kernel backend computes what the eager one computes."""

import os
import subprocess
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

import svbnn
import svbnn._engine.fused as engine
import svbnn._engine.kernels as K
import svbnn._engine.paths as fused_paths
from svbnn._engine import native as _native
from svbnn.nn import SpikeSlabMLP, set_generator
from svbnn.objectives import GaussianLikelihood
from svbnn.training import negative_elbo


class _OtherGaussian(GaussianLikelihood):
    """Unknown to the whole-step graph (it overrides ``log_prob``): only the training
    forward runs as one graph."""

    def log_prob(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return super().log_prob(output, target)


def _grads(
    backend: str,
    fused: bool,
    likelihood: type[GaussianLikelihood] = GaussianLikelihood,
    replicates: int | None = None,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    with K.backend_scope(backend):
        model = SpikeSlabMLP(
            6,
            (5, 4),
            1,
            fused=fused,
            n_replicates=replicates,
            generator=torch.Generator().manual_seed(0),
            dtype=torch.float64,
            log_prior_inclusion=-7.0,
        )
        set_generator(model, torch.Generator().manual_seed(1))
        g = torch.Generator().manual_seed(2)
        lead = () if replicates is None else (replicates,)
        x = torch.randn(*lead, 16, 6, generator=g, dtype=torch.float64)
        y = torch.randn(*lead, 16, generator=g, dtype=torch.float64)
        loss, _, _ = negative_elbo(model, likelihood(), x, y, n_train=100)
        loss.sum().backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.slow
@pytest.mark.parametrize("fused", [False, True])
def test_compiled_backend_matches_eager(fused: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # fused=False: per-layer draws (torch's generator) and the separate KL kernel.
    # fused=True: the one-loop draw + KL with counter-based noise, which the compiled
    # backend uses for SpikeSlabMLP; eagerly it runs when the backend claims "compiled".
    loss_c, grads_c = _grads("compiled", fused)
    if fused:
        monkeypatch.setattr(engine, "_fused_path", lambda numel, device=None: True)
    loss_e, grads_e = _grads("eager", fused)
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads_c, grads_e, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("likelihood", [GaussianLikelihood, _OtherGaussian])
@pytest.mark.parametrize("replicates", [None, 3])
def test_auto_backend_whole_network_matches_eager(
    monkeypatch: pytest.MonkeyPatch, likelihood: type[GaussianLikelihood], replicates: int | None
) -> None:
    # "auto" runs a small MLP's negative ELBO (mlp_negative_elbo), or with a likelihood it
    # does not know its training forward (mlp_draw_forward), as one compiled graph, for
    # one network or for replicates; the same formulas run eagerly when forced on.
    loss_c, grads_c = _grads("auto", True, likelihood, replicates)
    monkeypatch.setattr(fused_paths, "use_whole_network", lambda *_: True)
    monkeypatch.setattr(
        engine, "whole_network_kernel", lambda fn, *static: lambda *t: fn(*t, *static)
    )
    loss_e, grads_e = _grads("eager", True, likelihood, replicates)
    torch.testing.assert_close(loss_c, loss_e, rtol=1e-12, atol=1e-12)
    for a, b in zip(grads_c, grads_e, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_backend_switch() -> None:
    assert K.backend() is K.Backend.EAGER
    assert not K.use_compiled(10**9)
    with pytest.raises(ValueError, match="unknown kernel_backend 'fast'"):
        with K.backend_scope("fast"):
            pass
    with K.backend_scope("auto"):
        assert not K.use_compiled(K.AUTO_MIN_NUMEL - 1)
        assert K.use_whole_network(K.AUTO_MIN_NUMEL - 1)
        assert K.use_compiled(K.AUTO_MIN_NUMEL)
        assert not K.use_whole_network(K.AUTO_MIN_NUMEL)
        # auto's thresholds were measured on CPUs: elsewhere it runs the eager kernels
        meta = torch.device("meta")
        assert not K.use_compiled(10**9, meta) and not K.use_whole_network(1, meta)
        with K.backend_scope("compiled"):
            assert K.use_compiled(1) and not K.use_whole_network(1)
            assert K.use_compiled(1, meta)
        assert K.backend() is K.Backend.AUTO
    assert K.backend() is K.Backend.EAGER


def test_public_backend_api_scopes_and_restores() -> None:
    assert svbnn.get_kernel_backend() is svbnn.KernelBackend.EAGER
    with pytest.raises(RuntimeError, match="inside"):
        with svbnn.kernel_backend("auto") as inside:
            assert inside is svbnn.KernelBackend.AUTO is svbnn.get_kernel_backend()
            raise RuntimeError("inside")
    assert svbnn.get_kernel_backend() is svbnn.KernelBackend.EAGER
    with svbnn.kernel_backend(None) as kept:
        assert kept is svbnn.KernelBackend.EAGER


def test_set_kernel_backend_is_deprecated_and_still_works() -> None:
    with pytest.warns(DeprecationWarning, match="kernel_backend="):
        with pytest.raises(ValueError, match="unknown kernel_backend 'fast'; choose from eager"):
            svbnn.set_kernel_backend("fast")
    try:
        with pytest.warns(DeprecationWarning):
            assert svbnn.set_kernel_backend("auto") is svbnn.KernelBackend.EAGER
        assert svbnn.get_kernel_backend() is svbnn.KernelBackend.AUTO
        with svbnn.kernel_backend("native"):  # a scope still wins
            assert svbnn.get_kernel_backend() is svbnn.KernelBackend.NATIVE
    finally:
        K._scoped.set(None)
    assert svbnn.get_kernel_backend() is svbnn.KernelBackend.EAGER


def test_environment_settings_are_read_at_use_with_a_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    env = {**os.environ, "SVBNN_KERNELS": "fast"}
    res = subprocess.run(
        [sys.executable, "-c", "import svbnn"], env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr  # importing reads nothing
    monkeypatch.setenv("SVBNN_KERNELS", "fast")
    with pytest.raises(ValueError, match="unknown SVBNN_KERNELS 'fast'; choose from eager"):
        svbnn.get_kernel_backend()
    monkeypatch.setenv("SVBNN_KERNELS", "native")
    assert svbnn.get_kernel_backend() is svbnn.KernelBackend.NATIVE
    monkeypatch.delenv("SVBNN_KERNELS")
    monkeypatch.setenv("SVBNN_NATIVE", "no")
    with pytest.raises(ValueError, match="SVBNN_NATIVE must be 0 or 1, got 'no'"):
        _native._enabled()


def test_concurrent_fits_with_different_backends_each_give_their_own_result() -> None:
    # An eager fit and a native fit at the same time in two threads (one torch thread each)
    # give, bit for bit, what each gives alone: the backend is the fit's, not the process's.
    from svbnn import SVBNNRegressor

    X = torch.randn(300, 5, generator=torch.Generator().manual_seed(0)).numpy()
    y = X[:, 0] - 2.0 * X[:, 1] ** 2

    def fit(kernels: str) -> np.ndarray:
        torch.set_num_threads(1)
        est = SVBNNRegressor(
            max_iter=15, tol=None, random_state=0, kernel_backend=kernels, sampler="gumbel"
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return est.fit(X, y).predict(X)

    alone = {k: fit(k) for k in ("eager", "native")}
    assert not np.array_equal(alone["eager"], alone["native"])  # the test can tell them apart
    for _ in range(2):
        with ThreadPoolExecutor(2) as pool:
            together = dict(zip(alone, pool.map(fit, alone), strict=True))
        for k in alone:
            np.testing.assert_array_equal(together[k], alone[k], err_msg=k)


@pytest.mark.slow
def test_compiled_float32_fused_forward_matches_eager() -> None:
    # The inline float32 math (bit casts, polynomials) compiles to the same numbers: only
    # the order of roundings may differ.
    g = torch.Generator().manual_seed(0)
    n = 5000
    mu, rho, alpha = (torch.randn(n, generator=g) * s + c for s, c in ((0.1, 0), (2, -4), (3, 0)))
    rho[:4] = torch.tensor([-120.0, -30.0, 0.0, 40.0])
    args = (torch.tensor([3, 4], dtype=torch.int32), torch.tensor(-4.0), torch.tensor(-0.0183))
    consts = (0.1, 1.0 / 1.5, 2.0)  # log sigma_0, 1 / sigma_0^2, 1 / tau
    eager = K.fused_forward(mu, rho, alpha, *args, *consts)
    compiled = torch.compile(K.fused_forward, dynamic=True)(mu, rho, alpha, *args, *consts)
    for a, b in zip(compiled, eager, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6)
