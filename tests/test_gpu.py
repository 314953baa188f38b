"""The CUDA path: every layer, kernel backend, estimator and the harness on a GPU.

Run with ``make test-gpu`` (``pytest -m gpu``) on a machine with an NVIDIA GPU and a CUDA
build of torch. The default run leaves these tests out (``-m 'not slow and not gpu'``), and
selecting them without a usable CUDA device fails the session (``tests/conftest.py``): they
are never skipped.

Deterministic quantities (mean forwards, KL, their gradients) must match the CPU in float64;
sampled ones are compared by feeding both devices the same uniforms and normals, or by
their statistics (the CPU and CUDA generators draw different streams).

``SVBNN_GPU_TEST_DEVICE=cpu pytest --noconftest -m gpu tests/test_gpu.py`` runs the same
code on the CPU: a dry run of the test code itself (the mixed-device test cannot pass
there), not a GPU check.
"""

from __future__ import annotations

import copy
import csv
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

import svbnn._engine.fused as engine
import svbnn._engine.fused_math as KM
from svbnn import (
    HSBNNRegressor,
    SVBNNClassifier,
    SVBNNRegressor,
    VBNNRegressor,
    VDRegressor,
    kernel_backend,
)
from svbnn.checkpoint import load_checkpoint
from svbnn.export import export_compact
from svbnn.nn import (
    GaussianConv2d,
    GaussianLinear,
    HorseshoeLinear,
    SpikeSlabConv2d,
    SpikeSlabLinear,
    SpikeSlabMLP,
    VariationalDropoutConv2d,
    VariationalDropoutLinear,
    forward_mode,
    gumbel_spike_slab,
    inverse_cdf_spike_slab,
    kl_divergence,
    set_generator,
)
from svbnn.objectives import GaussianLikelihood, spike_slab_kl
from svbnn.selection import SparseLinear, export_sparse
from svbnn.training import negative_elbo, train
from svbnn_experiments.cli import main
from tests.realdata_files import make_data_root

pytestmark = pytest.mark.gpu

DEVICE = torch.device(os.environ.get("SVBNN_GPU_TEST_DEVICE", "cuda"))
CPU = torch.device("cpu")
F64 = torch.float64
ROOT = Path(__file__).resolve().parents[1]


def _gen(seed: int, device: torch.device = CPU) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed)


def _twins(make: Callable[[], nn.Module]) -> tuple[nn.Module, nn.Module]:
    """The same module on the CPU and on DEVICE (one initialisation, copied)."""
    cpu = make()
    set_generator(cpu, None)
    return cpu, copy.deepcopy(cpu).to(DEVICE)


def _close(a: torch.Tensor, b: torch.Tensor, rtol: float = 1e-10, atol: float = 1e-12) -> None:
    assert a.device.type == CPU.type, a.device
    assert b.device.type == DEVICE.type, b.device
    torch.testing.assert_close(b.cpu(), a, rtol=rtol, atol=atol)


LAYERS: dict[str, tuple[Callable[[], nn.Module], tuple[int, ...]]] = {
    "SpikeSlabLinear": (
        lambda: SpikeSlabLinear(6, 4, generator=_gen(0), dtype=F64, init_inclusion=0.7),
        (8, 6),
    ),
    "SpikeSlabConv2d": (
        lambda: SpikeSlabConv2d(2, 3, 3, padding=1, generator=_gen(0), dtype=F64),
        (4, 2, 5, 5),
    ),
    "GaussianLinear": (lambda: GaussianLinear(6, 4, generator=_gen(0), dtype=F64), (8, 6)),
    "GaussianConv2d": (
        lambda: GaussianConv2d(2, 3, 3, padding=1, generator=_gen(0), dtype=F64),
        (4, 2, 5, 5),
    ),
    "VariationalDropoutLinear": (
        lambda: VariationalDropoutLinear(6, 4, generator=_gen(0), dtype=F64),
        (8, 6),
    ),
    "VariationalDropoutConv2d": (
        lambda: VariationalDropoutConv2d(2, 3, 3, padding=1, generator=_gen(0), dtype=F64),
        (4, 2, 5, 5),
    ),
    "HorseshoeLinear": (lambda: HorseshoeLinear(6, 4, generator=_gen(0), dtype=F64), (8, 6)),
}


# ------------------------------------------------------------------------------ layers
@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_mean_forward_kl_and_gradients_match_the_cpu(name: str) -> None:
    make, shape = LAYERS[name]
    cpu, dev = _twins(make)
    x = torch.randn(*shape, generator=_gen(1), dtype=F64)
    results = []
    for layer, xx in ((cpu, x), (dev, x.to(DEVICE))):
        assert all(p.device.type == xx.device.type for p in layer.parameters())
        with forward_mode(layer, "mean"):
            out = layer(xx)
        kl = kl_divergence(layer)
        (out.square().sum() + kl).backward()
        grads = [p.grad for p in layer.parameters()]
        assert all(g is not None for g in grads)
        results.append((out.detach(), kl.detach(), grads))
    (out_c, kl_c, g_c), (out_d, kl_d, g_d) = results
    _close(out_c, out_d)
    _close(kl_c, kl_d)
    for a, b in zip(g_c, g_d, strict=True):
        assert a is not None and b is not None
        _close(a, b, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("name", list(LAYERS))
def test_layer_sampled_forward_runs_on_the_device_from_its_generator(name: str) -> None:
    make, shape = LAYERS[name]
    _, dev = _twins(make)
    x = torch.randn(*shape, generator=_gen(1), dtype=F64).to(DEVICE)
    outs = []
    for _ in range(2):
        set_generator(dev, _gen(5, DEVICE))
        out = dev(x)
        kl_divergence(dev).backward(retain_graph=True)
        out.sum().backward()
        assert out.device.type == DEVICE.type and bool(torch.isfinite(out).all())
        outs.append(out.detach())
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)  # same seed, same draw
    set_generator(dev, _gen(6, DEVICE))
    assert not torch.equal(dev(x).detach(), outs[0])  # and it is a draw


@pytest.mark.parametrize("layer_type", ["linear", "gaussian"])
def test_sampled_forward_averages_to_the_mean_forward(layer_type: str) -> None:
    # E[theta] = phi mu (exact inverse-CDF sampler) and E[w] = mu (Gaussian), so a linear
    # layer's sampled output averages to its mean-mode output: checked at 5 standard errors.
    if layer_type == "linear":
        layer: nn.Module = SpikeSlabLinear(
            5, 3, generator=_gen(0), dtype=F64, sampler="inverse_cdf", init_inclusion=0.6
        )
    else:
        layer = GaussianLinear(5, 3, generator=_gen(0), dtype=F64, init_rho=-1.0)
    set_generator(layer, None)
    layer = layer.to(DEVICE)
    set_generator(layer, _gen(3, DEVICE))
    x = torch.randn(4, 5, generator=_gen(1), dtype=F64).to(DEVICE)
    with torch.no_grad():
        draws = torch.stack([layer(x) for _ in range(4000)])
        with forward_mode(layer, "mean"):
            mean = layer(x)
    se = draws.std(0) / 4000**0.5
    assert bool((draws.std(0) > 0).all())
    assert bool(((draws.mean(0) - mean).abs() <= 5 * se + 1e-12).all())


@pytest.mark.parametrize("backend", ["eager", "compiled"])
@pytest.mark.parametrize("sampler", ["gumbel", "inverse_cdf"])
def test_samplers_given_the_same_uniforms_match_the_cpu(backend: str, sampler: str) -> None:
    g = _gen(0)
    mu, rho, alpha = (torch.randn(257, generator=g, dtype=F64) for _ in range(3))
    u = torch.rand(257, generator=g, dtype=F64)
    eps = torch.randn(257, generator=g, dtype=F64)
    results = []
    for device, name in ((CPU, "eager"), (DEVICE, backend)):
        # A fresh leaf per device: t.to(CPU) is t itself, and had it been made to require
        # grad, the device copy of it would be a non-leaf without a .grad.
        params = [t.to(device, copy=True).requires_grad_(True) for t in (mu, rho, alpha)]
        with kernel_backend(name):
            if sampler == "gumbel":
                theta = gumbel_spike_slab(*params, u.to(device), eps.to(device), 0.5)
            else:
                theta = inverse_cdf_spike_slab(*params, u.to(device))
            kl = spike_slab_kl(*params, -2.0, 2.0)
            (theta.square().sum() + kl).backward()
        results.append((theta.detach(), kl.detach(), [p.grad for p in params]))
    (t_c, kl_c, g_c), (t_d, kl_d, g_d) = results
    _close(t_c, t_d)
    _close(kl_c, kl_d)
    for a, b in zip(g_c, g_d, strict=True):
        assert a is not None and b is not None
        _close(a, b, rtol=1e-9, atol=1e-11)


# ----------------------------------------------------------------- kernels, fused MLP
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_counter_noise_is_the_same_bits_on_the_device(dtype: torch.dtype) -> None:
    # The hash is int32 arithmetic (wrapping): the same seed gives the same uniforms on
    # every device, eager or compiled (inductor's Triton code on CUDA).
    like = torch.empty(10_001, dtype=dtype)
    seed = torch.tensor([123456789, -987654321], dtype=torch.int32)
    u_c, e_c = KM.counter_noise(like, seed)
    compiled = torch.compile(KM.counter_noise, dynamic=True)
    for fn in (KM.counter_noise, compiled):
        u_d, e_d = fn(like.to(DEVICE), seed.to(DEVICE))
        torch.testing.assert_close(u_d.cpu(), u_c, rtol=0, atol=0)
        tol = 1e-6 if dtype == torch.float32 else 1e-13
        torch.testing.assert_close(e_d.cpu(), e_c, rtol=tol, atol=tol)


def _mlp_step(
    device: torch.device, backend: str, fused: bool, monkeypatch: pytest.MonkeyPatch
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One negative-ELBO step of a SpikeSlabMLP (float64) with fixed counter seeds."""
    seed = torch.tensor([11, 22], dtype=torch.int32)
    monkeypatch.setattr(engine, "_counter_seed", lambda model, first: seed.to(model.mu.device))
    model = SpikeSlabMLP(
        6, (5, 4), 1, fused=fused, generator=_gen(0), dtype=F64, log_prior_inclusion=-3.0
    )
    set_generator(model, None)
    model = model.to(device)
    set_generator(model, _gen(1, device))
    g = _gen(2)
    x = torch.randn(16, 6, generator=g, dtype=F64).to(device)
    y = torch.randn(16, generator=g, dtype=F64).to(device)
    with kernel_backend(backend):
        loss, _, _ = negative_elbo(model, GaussianLikelihood(0.8), x, y, n_train=100)
        loss.backward()
    assert loss.device.type == device.type
    return loss.detach(), [p.grad for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("backend", ["eager", "compiled"])
def test_fused_mlp_step_on_the_device_matches_eager_on_the_cpu(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The fused draw + KL (compiled) and the eager counter-noise path draw from the
    # counter seed: with the seed fixed, the device's step is the CPU eager step up to
    # rounding.
    monkeypatch.setattr(engine, "_fused_path", lambda numel, device=None: True)
    loss_c, g_c = _mlp_step(CPU, "eager", True, monkeypatch)
    if backend == "eager":
        loss_d, g_d = _mlp_step(DEVICE, "eager", True, monkeypatch)
    else:
        monkeypatch.undo()
        loss_d, g_d = _mlp_step(DEVICE, backend, True, monkeypatch)
    assert len(g_c) == len(g_d) == 3
    _close(loss_c, loss_d, rtol=1e-10)
    for a, b in zip(g_c, g_d, strict=True):
        _close(a, b, rtol=1e-8, atol=1e-10)


def test_auto_on_the_device_is_the_eager_step(monkeypatch: pytest.MonkeyPatch) -> None:
    # auto's thresholds and whole-step graph were chosen on CPUs (kernels.use_compiled):
    # off the CPU it runs the eager kernels, drawing from the layer's generator.
    loss_e, g_e = _mlp_step(DEVICE, "eager", True, monkeypatch)
    loss_a, g_a = _mlp_step(DEVICE, "auto", True, monkeypatch)
    assert len(g_e) == len(g_a) == 3
    # The same eager ops on the same draws: equal up to the device's reduction order.
    torch.testing.assert_close(loss_a, loss_e, rtol=1e-12, atol=1e-14)
    for a, e in zip(g_a, g_e, strict=True):
        torch.testing.assert_close(a, e, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("fused", [True, False])
def test_mlp_mean_forward_and_kl_match_the_cpu(fused: bool) -> None:
    cpu, dev = _twins(lambda: SpikeSlabMLP(7, (6, 5), 2, fused=fused, generator=_gen(0), dtype=F64))
    x = torch.randn(9, 7, generator=_gen(1), dtype=F64)
    with forward_mode(cpu, "mean"), forward_mode(dev, "mean"):
        _close(cpu(x), dev(x.to(DEVICE)))
    _close(kl_divergence(cpu).detach(), kl_divergence(dev).detach())


@pytest.mark.parametrize("backend", ["eager", "compiled", "auto", "native"])
def test_mlp_trains_on_the_device_under_every_backend(backend: str) -> None:
    g = _gen(0)
    X = torch.randn(256, 10, generator=g).to(DEVICE)
    y = (X[:, 0] - 2 * X[:, 1]).contiguous()
    model = SpikeSlabMLP(10, (16,), 1, generator=_gen(1, DEVICE), device=DEVICE)
    with kernel_backend(backend):
        hist = train(
            model,
            X,
            y,
            GaussianLikelihood(0.5),
            epochs=30,
            batch_size=64,
            lr=0.01,
            generator=_gen(2, DEVICE),
        )
    assert all(p.device.type == DEVICE.type for p in model.parameters())
    assert np.all(np.isfinite(hist.loss))
    assert hist.loss[-1] < hist.loss[0]


# --------------------------------------------------------------- generators, checkpoints
def test_a_generator_on_another_device_is_a_clear_error() -> None:
    X = torch.randn(32, 3, device=DEVICE)
    y = torch.randn(32, device=DEVICE)
    model = SpikeSlabMLP(3, (4,), 1, device=DEVICE)
    with pytest.raises(ValueError, match="generator is on cpu"):
        train(model, X, y, GaussianLikelihood(), epochs=1, batch_size=8, lr=0.01, generator=_gen(0))
    with pytest.raises(ValueError, match="parameters are on"):
        train(SpikeSlabMLP(3, (4,), 1), X, y, GaussianLikelihood(), epochs=1, batch_size=8, lr=0.01)


def test_same_device_seed_same_run() -> None:
    def run() -> list[float]:
        X = torch.randn(64, 4, generator=_gen(0)).to(DEVICE)
        model = SpikeSlabMLP(4, (5,), 1, generator=_gen(1, DEVICE), device=DEVICE)
        return train(
            model,
            X,
            X[:, 0].contiguous(),
            GaussianLikelihood(),
            epochs=5,
            batch_size=16,
            lr=0.01,
            generator=_gen(2, DEVICE),
        ).loss

    np.testing.assert_allclose(run(), run(), rtol=1e-6)


def test_a_checkpoint_saved_on_the_device_loads_on_the_cpu(tmp_path: Path) -> None:
    ckpt = tmp_path / "run.ckpt"
    X = torch.randn(64, 4, generator=_gen(0)).to(DEVICE)
    y = X[:, 0].contiguous()
    model = SpikeSlabMLP(4, (5,), 1, generator=_gen(1, DEVICE), device=DEVICE)
    train(
        model,
        X,
        y,
        GaussianLikelihood(),
        epochs=3,
        batch_size=16,
        lr=0.01,
        generator=_gen(2, DEVICE),
        checkpoint_path=ckpt,
    )
    state = load_checkpoint(ckpt)
    tensors = [v for v in state["model"].values() if isinstance(v, torch.Tensor)]
    assert tensors and all(t.device.type == "cpu" for t in tensors)
    cpu_model = SpikeSlabMLP(4, (5,), 1)
    cpu_model.load_state_dict(state["model"])
    for p, q in zip(cpu_model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(p, q.detach().cpu(), rtol=0, atol=0)
    # ... and resumes on the device (optimiser state and generator back where they were).
    again = SpikeSlabMLP(4, (5,), 1, generator=_gen(1, DEVICE), device=DEVICE)
    hist = train(
        again,
        X,
        y,
        GaussianLikelihood(),
        epochs=5,
        batch_size=16,
        lr=0.01,
        generator=_gen(2, DEVICE),
        checkpoint_path=ckpt,
        resume=True,
    )
    assert hist.epoch == [1, 2, 3, 4, 5]


def test_sparse_export_runs_on_the_device_and_moves_back() -> None:
    model = SpikeSlabMLP(5, (4,), 1, generator=_gen(0), dtype=F64, init_inclusion=0.7)
    set_generator(model, None)
    model = model.to(DEVICE)
    x = torch.randn(6, 5, generator=_gen(1), dtype=F64)
    with forward_mode(model, "median"):
        want = model(x.to(DEVICE)).detach().cpu()
    module, _ = export_sparse(model)
    assert any(isinstance(m, SparseLinear) for m in module.modules())
    torch.testing.assert_close(module(x.to(DEVICE)).cpu(), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(module.cpu()(x), want, rtol=1e-12, atol=1e-12)


def test_compact_export_one_row_sparse_layers_run_on_the_device() -> None:
    # The batch-1 export stores large sparse layers as CSR matrices (non-persistent
    # buffers): they follow .to(), and torch.addmv runs them on the device.
    model = SpikeSlabMLP(300, (400,), 3, generator=_gen(0), dtype=F64)
    first, last = model.layers()
    with torch.no_grad():  # 5% of the first layer's edges kept, every output edge
        on = torch.rand(first.alpha.shape, generator=_gen(2), dtype=F64) < 0.05
        first.alpha.copy_(torch.where(on, 3.0, -3.0))
        last.alpha.fill_(3.0)
    module, report = export_compact(model, batch_size=1)
    assert report.layer_storage is not None and report.layer_storage[0] == "sparse"
    x = torch.randn(1, 300, generator=_gen(1), dtype=F64)
    with forward_mode(model, "median"), torch.no_grad():
        want = model(x)
    moved = module.to(DEVICE)
    torch.testing.assert_close(moved(x.to(DEVICE)).cpu(), want, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(moved.cpu()(x), want, rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------------ estimators
def _data(n: int = 120, p: int = 5) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, p))
    return X, 2 * X[:, 0] - X[:, 1] + 0.3 * rng.normal(size=n)


def _fit(est: Any, X: np.ndarray, y: np.ndarray) -> None:
    with warnings.catch_warnings():  # 5 epochs: unconverged fits warn; not the point here
        warnings.simplefilter("ignore")
        est.fit(X, y)


SMALL = {"hidden_layer_sizes": (8,), "max_iter": 5, "batch_size": 32, "random_state": 0}


@pytest.mark.parametrize("backend", ["eager", "auto", "compiled"])
@pytest.mark.parametrize("noise_std", ["auto", 0.5])
def test_regressor_fits_and_predicts_on_the_device(backend: str, noise_std: object) -> None:
    X, y = _data()
    est = SVBNNRegressor(**SMALL, device=str(DEVICE), kernel_backend=backend, noise_std=noise_std)
    _fit(est, X, y)
    assert next(est.module_.parameters()).device.type == DEVICE.type
    pred, sd = est.predict(X[:10], return_std=True)
    lo, hi = est.predict_interval(X[:10], n_samples=20)
    plo, phi = est.predict_prediction_interval(X[:10], n_samples=20)
    for a in (pred, sd, lo, hi, plo, phi):
        assert isinstance(a, np.ndarray) and a.shape == (10,) and np.all(np.isfinite(a))
    assert np.all(lo <= hi) and np.all(plo <= phi) and est.noise_std_ > 0
    module, _ = est.export_sparse()
    assert module(torch.tensor(X[:3], dtype=torch.float32, device=DEVICE)).shape[0] == 3


def test_a_linear_mean_predicts_and_exports_on_the_device() -> None:
    # mean_function="linear": the linear mean's coefficient draws come from the device
    # generator after the network's; predict and export_predictive draw the same ones.
    X, y = _data()
    est = SVBNNRegressor(**SMALL, device=str(DEVICE), mean_function="linear")
    _fit(est, X, y)
    assert est.mean_function_ == "linear" and est.linear_features_.size > 0
    m, sd = est.predict(X[:10], return_std=True)
    lo, hi = est.predict_prediction_interval(X[:10], n_samples=20)
    assert np.all(np.isfinite(m)) and np.all(sd > 0) and np.all(lo <= hi)
    x = torch.as_tensor(X[:10], device=DEVICE)
    with torch.no_grad():
        both = est.export_predictive(return_std=True)(x).cpu().numpy()
        moments = est.export_moments(return_std=True)(x).cpu().numpy()
    np.testing.assert_allclose(both[:, 0], m, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(both[:, 1], sd, rtol=1e-9)
    assert np.all(np.isfinite(moments))


def test_the_local_sampler_on_the_device_is_its_layers_path() -> None:
    # The regressor's default sampler: the flat path (LocalFlatMLP, after the moments + KL
    # pass LocalMomentsKL) against the layers run one by one from the same device generator
    # state, values and gradients, the KL in the loss, float64.
    g = torch.Generator(device=DEVICE).manual_seed(0)
    net = SpikeSlabMLP(5, (7,), 2, sampler="local", generator=g, device=DEVICE, dtype=torch.float64)
    x = torch.randn(4, 5, dtype=torch.float64, generator=g, device=DEVICE)
    runs = []
    for run in (net, net._run):
        g.manual_seed(1)
        out = run(x)
        kl = net.kl_divergence()
        loss = (out * out).sum() + 0.37 * kl
        grads = torch.autograd.grad(loss, [net.mu, net.rho, net.alpha])
        runs.append(((out.detach(), kl.detach()), grads))
    assert net(x).grad_fn.name() == "LocalFlatMLPBackward"
    assert net.kl_divergence().grad_fn.name() == "LocalMomentsKLBackward"
    torch.testing.assert_close(runs[0][0], runs[1][0])
    for a, b in zip(runs[0][1], runs[1][1], strict=True):
        torch.testing.assert_close(a, b)
    assert runs[0][0][0].device.type == DEVICE.type


def test_tempered_regressor_fits_its_noise_on_held_out_rows_on_the_device() -> None:
    X, y = _data()
    est = SVBNNRegressor(**SMALL, device=str(DEVICE), kl_weight=0.2)
    _fit(est, X, y)
    assert est.noise_std_held_out_ is not None and est.noise_std_held_out_ > 0
    assert est.noise_std_ >= est.noise_std_held_out_
    lo, hi = est.predict_prediction_interval(X[:10])
    assert np.all(np.isfinite(lo)) and np.all(np.isfinite(hi)) and np.all(lo < hi)


def test_refit_on_the_device_keeps_its_screening_closed() -> None:
    # refit_kl_weight on the device: the refit and its held-out noise run train there, the
    # inputs the first fit left out stay closed (phi exactly 0) and change no prediction.
    # 300 epochs: enough for the first fit to leave out inputs (after SMALL's 5 it keeps all
    # eight, and there would be nothing closed to check).
    X, y = _data(p=8)
    kw = {**SMALL, "max_iter": 300}
    est = SVBNNRegressor(**kw, device=str(DEVICE), refit_kl_weight=0.2, refit_budget=0.5)
    _fit(est, X, y)
    assert next(est.module_.parameters()).device.type == DEVICE.type
    assert est.screened_features_ is not None
    assert set(est.selected_features_) <= set(est.screened_features_)
    closed = np.setdiff1d(np.arange(8), est.screened_features_)
    assert len(closed) > 0 and np.all(est.feature_inclusion_[closed] == 0.0)
    X2 = X.copy()
    X2[:, closed] = 100.0
    np.testing.assert_array_equal(est.predict(X), est.predict(X2))
    assert est.noise_std_held_out_ is not None and est.noise_std_held_out_ > 0


def test_classifier_fits_and_predicts_on_the_device() -> None:
    X, y = _data()
    est = SVBNNClassifier(**SMALL, device=str(DEVICE))
    _fit(est, X, y > 0)
    proba = est.predict_proba(X[:10])
    assert proba.shape == (10, 2) and np.allclose(proba.sum(1), 1.0)
    assert set(est.predict(X)) <= {False, True}


def test_weighted_held_out_fit_and_its_exports_on_the_device() -> None:
    # The options that train replicates (prior_inclusion="cv"), weigh rows and classes,
    # and both exports, from a fit on the device.
    X, y = _data()
    labels = y > 0.5
    w = np.linspace(0.5, 2.0, len(y))
    est = SVBNNClassifier(
        **SMALL, device=str(DEVICE), prior_inclusion="cv", class_weight="balanced"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X, labels, sample_weight=w)
        module = est.export()
    assert len(est.inclusion_scores_) == len(est.inclusion_grid_)
    xd = torch.tensor(X, device=DEVICE)
    out = module(xd)
    assert out.device.type == DEVICE.type and out.shape == (len(X), 2)
    torch.testing.assert_close(out.cpu(), module.cpu()(xd.cpu()), rtol=1e-6, atol=1e-6)
    exported = torch.export.export(module, (xd.cpu(),))
    torch.testing.assert_close(exported.module()(xd.cpu()), out.cpu(), rtol=1e-6, atol=1e-6)
    predictive = est.export_predictive(n_samples=7)
    got = predictive(xd).cpu().numpy()
    np.testing.assert_allclose(got, est.predict_proba(X, n_samples=7), rtol=0, atol=1e-12)


@pytest.mark.parametrize("cls", [VBNNRegressor, VDRegressor, HSBNNRegressor])
def test_baseline_estimators_fit_on_the_device(cls: type) -> None:
    X, y = _data()
    est = cls(**SMALL, device=str(DEVICE))
    _fit(est, X, y)
    assert next(est.module_.parameters()).device.type == DEVICE.type
    assert np.all(np.isfinite(est.predict(X[:10])))


# ---------------------------------------------------------------------------- harness
def test_reproduce_table2_quick_on_the_device(tmp_path: Path) -> None:
    out = tmp_path / "t2"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    cmd = [
        sys.executable,
        "-m",
        "svbnn_experiments.cli",
        "reproduce",
        "table2",
        "--quick",
        "--device",
        str(DEVICE),
        "--methods",
        "svbnn,vbnn,agp",
        "--out",
        str(out),
        "--no-progress",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    settings = json.loads((out / "settings.json").read_text())
    assert json.dumps(settings).count(f'"device": "{DEVICE}"') >= 1
    rows = (out / "results.csv").read_text().splitlines()
    assert len(rows) > 1 and "nan" not in rows[1].lower()


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


@pytest.mark.parametrize(("artifact", "methods"), [("mnist", "svbnn,agp"), ("fmnist-cnn", "svbnn")])
def test_real_data_artifact_trains_and_resumes_on_the_device(
    artifact: str, methods: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Tiny generated images; one epoch, then a rerun to two epochs resumes each checkpoint
    # saved on the device, on the device.
    make_data_root(tmp_path / "data", monkeypatch)
    out = tmp_path / artifact
    args = ["reproduce", artifact, "--quick", "--device", str(DEVICE), "--methods", methods]
    args += ["--out", str(out), "--no-progress"]
    assert main([*args, "--epochs", "1"]) == 0
    assert main([*args, "--epochs", "2"]) == 0
    settings = json.loads((out / "settings.json").read_text())
    assert settings["config"]["device"] == str(DEVICE)
    names = methods.split(",")
    assert all(settings["runs"][m]["resumed_from"] == 1 for m in names)
    body = _csv_rows(out / "results.csv")
    assert [(r["method"], r["epoch"]) for r in body] == [(m, e) for m in names for e in ("1", "2")]
    assert all(0.0 <= float(r["test_acc"]) <= 100.0 for r in body)
    for m in names:
        state = load_checkpoint(out / "checkpoints" / f"{m}.pt")
        assert state["epoch"] == 2
        assert all(t.device.type == "cpu" for t in state["model"].values())


def test_mnist_uq_on_the_device_trains_or_reuses_its_models(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_data_root(tmp_path / "data", monkeypatch)
    common = ["--quick", "--device", str(DEVICE), "--no-progress"]
    source = tmp_path / "mnist"
    assert (
        main(["reproduce", "mnist", *common, "--methods", "svbnn,agp", "--out", str(source)]) == 0
    )
    for origin, extra in (("trained here", []), ("reused", ["--set", f"source={source}"])):
        out = tmp_path / origin.replace(" ", "-")
        assert main(["reproduce", "mnist-uq", *common, "--out", str(out), *extra]) == 0
        settings = json.loads((out / "settings.json").read_text())
        assert {v["origin"] for v in settings["models"].values()} == {origin}
        for r in _csv_rows(out / "results.csv"):
            assert sum(float(r[f"p{c}"]) for c in range(10)) == pytest.approx(1.0, abs=1e-5)


def test_uci_on_the_device_grid_search_and_refit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_data_root(tmp_path / "data", monkeypatch)
    out = tmp_path / "uci"
    args = ["reproduce", "uci", "--quick", "--device", str(DEVICE), "--no-progress"]
    assert main([*args, "--set", "datasets=wine", "--out", str(out)]) == 0
    settings = json.loads((out / "settings.json").read_text())
    assert settings["config"]["device"] == str(DEVICE)
    for r in _csv_rows(out / "results.csv"):
        for col in ("test_rmse", "test_ll", "sparsity_pct"):
            assert np.isfinite(float(r[col])), col
