"""svbnn.export: the compacted median model, its standard-module exports and the
estimators' export on raw inputs."""

from __future__ import annotations

import copy
import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.exceptions import NotFittedError

from svbnn import SVBNNClassifier, SVBNNRegressor
from svbnn.export import (
    CompactMLP,
    InputSelect,
    ReLUMoments,
    SoftmaxOfNormal,
    SparseLinear,
    export_compact,
    export_moments,
    export_onnx,
    sparse_is_faster,
    to_dense,
)
from svbnn.nn import SpikeSlabMLP, forward_mode

F64 = torch.float64


def _net(
    p: int = 40,
    hidden: tuple[int, ...] = (30, 20),
    out: int = 3,
    keep: float = 0.1,
    activation: str = "relu",
    dtype: torch.dtype = F64,
    seed: int = 0,
) -> SpikeSlabMLP:
    """A network whose gates are resolved at random: ``phi`` 0.95 on a ``keep`` fraction."""
    g = torch.Generator().manual_seed(seed)
    model = SpikeSlabMLP(p, hidden, out, activation=activation, generator=g, dtype=dtype)
    for layer in model.layers():
        on = torch.rand(layer.alpha.shape, generator=g, dtype=dtype) < keep
        with torch.no_grad():
            layer.alpha.copy_(torch.where(on, 3.0, -3.0))
            layer.mu.normal_(0.0, 1.0, generator=g)
    return model


def _median(model: SpikeSlabMLP, x: torch.Tensor) -> torch.Tensor:
    with forward_mode(model, "median"), torch.no_grad():
        return model(x)


def _float32_bound(model: SpikeSlabMLP, x: torch.Tensor) -> torch.Tensor:
    """Per output, a bound on how far two float32 evaluations of ``model``'s median model
    on ``x`` that sum in different orders can be apart: ``2 * sum(fan-ins) * u`` times the
    network of absolute weights on ``|x|`` (the standard forward error bound of a matrix
    product, ``gamma_n |W| |x|``, compounded over the layers; ``u = 2**-24``)."""
    absolute = copy.deepcopy(model).double()
    with torch.no_grad():
        for layer in absolute.layers():
            layer.mu.abs_()
    n_terms = sum(layer.fan_in for layer in model.layers())
    return 2 * n_terms * 2.0**-24 * _median(absolute, x.abs().double()).to(x.dtype)


def _set_layer(model: SpikeSlabMLP, k: int, w: torch.Tensor, b: torch.Tensor) -> None:
    """Layer ``k``'s median model: weights ``w``, biases ``b`` (zeros are gated off)."""
    layer = model.layers()[k]
    flat = torch.cat([w, b[:, None]], dim=1).to(layer.mu)
    with torch.no_grad():
        layer.mu.copy_(flat)
        layer.alpha.copy_(torch.where(flat != 0, 5.0, -5.0))


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid"])
@pytest.mark.parametrize("storage", ["auto", "dense", "sparse"])
@pytest.mark.parametrize("keep", [0.03, 0.1, 0.5])
def test_compact_is_the_median_model(activation: str, storage: str, keep: float) -> None:
    model = _net(keep=keep, activation=activation)
    x = torch.randn(17, 40, generator=torch.Generator().manual_seed(1), dtype=F64)
    module, report = export_compact(model, storage=storage)
    torch.testing.assert_close(module(x), _median(model, x), rtol=1e-12, atol=1e-12)
    assert report.layer_shapes is not None and report.kept_inputs is not None
    assert report.layer_shapes[-1][0] == 3
    assert report.layer_shapes[0][1] == len(report.kept_inputs) <= 40
    assert not any(p.requires_grad for p in module.parameters())


def test_compact_float32_within_rounding_and_takes_float64() -> None:
    model = _net(dtype=torch.float32, keep=0.2)
    x = torch.randn(9, 40, generator=torch.Generator().manual_seed(2))
    module, _ = export_compact(model)
    want = _median(model, x)
    # float32 sums in another order: a few ulps of the outputs' scale.
    tol = 1e-5 * float(want.abs().max())
    torch.testing.assert_close(module(x), want, rtol=0, atol=tol)
    out64 = module(x.double())
    assert out64.dtype == torch.float32
    torch.testing.assert_close(out64, module(x), rtol=0, atol=0)


def test_dead_units_are_dropped_and_constants_folded() -> None:
    # 5 inputs -> 4 hidden -> 3 hidden -> 2 outputs, built by hand:
    # input 4 has no edge; hidden1 unit 2 has no input edge but a bias (a constant);
    # hidden1 unit 3 has an input edge but no outgoing one; hidden2 unit 1 reaches no
    # output; input 3 only feeds hidden1 unit 3 (dead), so it is dropped too.
    model = SpikeSlabMLP(5, (4, 3), 2, dtype=F64, generator=torch.Generator().manual_seed(0))
    w1 = torch.tensor(
        [[1.0, -2.0, 0, 0, 0], [0, 0.5, 1.5, 0, 0], [0, 0, 0, 0, 0], [0, 0, 0, 3.0, 0]], dtype=F64
    )
    b1 = torch.tensor([0.1, -0.2, 0.7, 0.3], dtype=F64)
    w2 = torch.tensor([[1.0, 0, 2.0, 0], [0, 1.0, 0, 0], [0.5, -1.0, 1.0, 0]], dtype=F64)
    b2 = torch.tensor([0.0, 0.4, -0.1], dtype=F64)
    w3 = torch.tensor([[1.0, 0, 2.0], [-1.0, 0, 0.5]], dtype=F64)
    b3 = torch.tensor([0.2, -0.3], dtype=F64)
    for k, (w, b) in enumerate([(w1, b1), (w2, b2), (w3, b3)]):
        _set_layer(model, k, w, b)
    module, report = export_compact(model, storage="dense")
    assert report.kept_inputs == [0, 1, 2]
    assert report.layer_shapes == [(2, 3), (2, 2), (2, 2)]
    assert isinstance(module[0], InputSelect)
    x = torch.randn(11, 5, generator=torch.Generator().manual_seed(3), dtype=F64)
    torch.testing.assert_close(module(x), _median(model, x), rtol=1e-12, atol=1e-12)
    # hidden2's biases carry the constant unit: relu(0.7) * [2, 0, 1] added.
    torch.testing.assert_close(module[3].bias, torch.tensor([1.4, -0.1 + 0.7], dtype=F64))
    # Every kept hidden unit has an incoming and an outgoing nonzero weight.
    lins = [m for m in module if isinstance(m, torch.nn.Linear)]
    for a, b in zip(lins[:-1], lins[1:], strict=True):
        assert bool((a.weight != 0).any(dim=1).all()) and bool((b.weight != 0).any(dim=0).all())
    # The dropped inputs do not move the median model.
    x2 = x.clone()
    x2[:, 3:] = torch.randn(11, 2, dtype=F64)
    torch.testing.assert_close(_median(model, x2), _median(model, x), rtol=0, atol=0)


def test_constant_network_keeps_one_input() -> None:
    model = _net(activation="sigmoid")
    layer = model.layers()[0]
    with torch.no_grad():
        layer.alpha[:, :40] = -5.0  # no input edge: every output is a constant
    x = torch.randn(6, 40, generator=torch.Generator().manual_seed(4), dtype=F64)
    module, report = export_compact(model)
    assert report.kept_inputs == [0]
    want = _median(model, x)
    torch.testing.assert_close(module(x), want, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(want, want[:1].expand_as(want))


def test_storage_rule() -> None:
    assert sparse_is_faster(1000, 512, 784)  # 0.25% of a large layer
    assert sparse_is_faster(20_000, 512, 784) and sparse_is_faster(19_000, 512, 784, 8)
    assert not sparse_is_faster(24_000, 512, 784, 8)  # 6%: dense at 2 to 15 rows
    assert not sparse_is_faster(1_000, 256, 256, 8)  # small: dense at 2 to 15 rows
    assert not sparse_is_faster(100_000, 512, 784)  # 25%
    assert not sparse_is_faster(10, 30, 30)  # small: dense at any density
    # One row: 3 * nnz + 50,000 < size and density < 25%.
    size = 512 * 784
    assert sparse_is_faster(int(0.24 * size), 512, 784, 1)
    assert not sparse_is_faster(int(0.26 * size), 512, 784, 1)
    assert sparse_is_faster(18_931, 234, 519, 1)  # MNIST's compacted first layer at 4%
    assert not sparse_is_faster(24_000, 234, 519, 1)  # 3 * 24,000 + 50,000 > 121,446
    assert not sparse_is_faster(1, 128, 128, 1)  # the fixed cost exceeds the dense product
    model = _net(p=784, hidden=(512,), out=10, keep=0.01, dtype=torch.float32)
    _, report = export_compact(model)
    assert report.layer_storage is not None and report.layer_shapes is not None
    for (o, i), nnz, kind in zip(
        report.layer_shapes, report.layer_nonzero or [], report.layer_storage, strict=True
    ):
        assert kind == ("sparse" if sparse_is_faster(nnz, o, i) else "dense")


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid"])
@pytest.mark.parametrize("batch_size", [1, 16, 1000])
def test_flat_module_is_the_median_model(activation: str, batch_size: int) -> None:
    # Large enough that the rule stores the first layer sparse at every batch size tried.
    model = _net(p=300, hidden=(400, 150), out=4, keep=0.05, activation=activation)
    module, report = export_compact(model, batch_size=batch_size)
    (flat,) = list(module)
    assert isinstance(flat, CompactMLP)
    assert flat.layout == ("rows" if batch_size == 1 else "features")
    assert report.layer_storage == flat.storage
    assert report.layer_shapes is not None and report.layer_nonzero is not None
    for (o, i), nnz, kind in zip(
        report.layer_shapes, report.layer_nonzero, flat.storage, strict=True
    ):
        assert kind == ("sparse" if sparse_is_faster(nnz, o, i, batch_size) else "dense")
    assert flat.storage[0] == "sparse"
    assert flat.nnz() == sum(report.layer_nonzero)
    g = torch.Generator().manual_seed(8)
    for shape in ((13, 300), (1, 300), (2, 3, 300)):
        x = torch.randn(*shape, generator=g, dtype=F64)
        want = _median(model, x.reshape(-1, 300)).reshape(*shape[:-1], 4)
        torch.testing.assert_close(module(x), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match="columns"):
        module(torch.zeros(2, 299, dtype=F64))


@pytest.mark.parametrize("batch_size", [1, 1000])
def test_flat_module_exports_copies_and_reloads(batch_size: int, tmp_path: Path) -> None:
    model = _net(p=300, hidden=(400, 150), out=4, keep=0.05, dtype=torch.float32)
    module, _ = export_compact(model, batch_size=batch_size)
    assert module[0].storage[0] == "sparse"  # batch 1: the rows layout's CSR matrix
    x = torch.randn(8, 300, generator=torch.Generator().manual_seed(9))
    want = module(x)
    # torch.export at any batch size, the sparse layers included.
    batch = torch.export.Dim("batch")
    ep = torch.export.export(module, (x,), dynamic_shapes=({0: batch},))
    for rows in (x[:3], x[:1]):
        torch.testing.assert_close(ep.module()(rows), module(rows), rtol=1e-6, atol=1e-6)
    # ... and at one row, where the rows layout runs matrix-vector products.
    ep1 = torch.export.export(module, (x[:1],))
    torch.testing.assert_close(ep1.module()(x[4:5]), module(x[4:5]), rtol=1e-6, atol=1e-6)
    dense = to_dense(module)
    assert all(k == "dense" for k in dense[0].storage) and dense[0].layout == "rows"
    # Two float32 summation orders: each within the forward error bound of the other.
    assert torch.all((dense(x) - want).abs() <= _float32_bound(model, x))
    _assert_onnx_runs_as(module, tmp_path / "flat.onnx", 300, x)
    torch.testing.assert_close(copy.deepcopy(module)(x), want, rtol=0, atol=0)
    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    buf.seek(0)
    again, _ = export_compact(model, batch_size=batch_size)
    for t in again.buffers():
        if t.layout == torch.strided:  # the CSR matrices share these arrays' memory
            t.zero_()
    for rows in (x, x[:1]):  # every weight and bias zero on both paths: the output is 0
        assert not again(rows).any()
    again.load_state_dict(torch.load(buf, weights_only=True))
    torch.testing.assert_close(again(x), want, rtol=0, atol=0)
    # float64 inputs are cast; a float64 copy of the module computes in float64.
    assert module(x.double()).dtype == torch.float32
    torch.testing.assert_close(
        copy.deepcopy(module).double()(x.double()), want.double(), rtol=1e-5, atol=1e-5
    )


def test_flat_module_rules() -> None:
    size = 512 * 784
    assert sparse_is_faster(int(0.19 * size), 512, 784, 1000)
    assert not sparse_is_faster(int(0.21 * size), 512, 784, 1000)
    assert sparse_is_faster(1600, 128, 128, 16) and not sparse_is_faster(1000, 100, 100, 64)
    w = [torch.eye(3, dtype=F64)]
    b = [torch.zeros(3, dtype=F64)]
    idx = torch.arange(3)
    with pytest.raises(ValueError, match="layout"):
        CompactMLP(idx, 3, w, b, ["dense"], "relu", "columns")
    with pytest.raises(ValueError, match="storage"):
        CompactMLP(idx, 3, w, b, ["csr"], "relu", "features")


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
def test_sparse_module_scripts_saves_and_copies() -> None:
    model = _net(keep=0.05)
    module, report = export_compact(model, storage="sparse")
    x = torch.randn(5, 40, generator=torch.Generator().manual_seed(5), dtype=F64)
    want = module(x)
    assert any(isinstance(m, SparseLinear) for m in module)
    torch.testing.assert_close(torch.jit.script(module)(x), want, rtol=0, atol=0)
    torch.testing.assert_close(copy.deepcopy(module)(x), want, rtol=0, atol=0)
    torch.testing.assert_close(to_dense(module)(x), want, rtol=1e-12, atol=1e-12)
    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    buf.seek(0)
    again, _ = export_compact(_net(keep=0.05), storage="sparse")
    again.load_state_dict(torch.load(buf, weights_only=True))
    torch.testing.assert_close(again(x), want, rtol=0, atol=0)
    assert report.size_bytes > 0


@pytest.mark.parametrize("storage", ["dense", "sparse"])
def test_torch_export_and_onnxruntime_agree(storage: str, tmp_path: Path) -> None:
    model = _net(keep=0.1, dtype=torch.float32)
    module, _ = export_compact(model, storage=storage)
    x = torch.randn(8, 40, generator=torch.Generator().manual_seed(6))
    want = module(x)
    # A CSR product traces at a fixed batch only; to_dense's module at any batch.
    ep = torch.export.export(module, (x,))
    torch.testing.assert_close(ep.module()(x), want, rtol=1e-6, atol=1e-6)
    batch = torch.export.Dim("batch")
    ep = torch.export.export(to_dense(module), (x,), dynamic_shapes=({0: batch},))
    torch.testing.assert_close(ep.module()(x[:3]), want[:3], rtol=1e-6, atol=1e-6)
    _assert_onnx_runs_as(module, tmp_path / "net.onnx", 40, x)


def test_errors() -> None:
    with pytest.raises(ValueError, match="storage"):
        export_compact(_net(), storage="csr")
    with pytest.raises(ValueError, match="batch_size"):
        export_compact(_net(), batch_size=0)
    with pytest.raises(ValueError, match="threshold"):
        export_compact(_net(), threshold=1.5)
    with pytest.raises(TypeError, match="SpikeSlabMLP"):
        export_compact(torch.nn.Linear(3, 2))  # type: ignore[arg-type]
    rep = SpikeSlabMLP(4, (3,), 1, n_replicates=2)
    with pytest.raises(ValueError, match="replicated"):
        export_compact(rep)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(ValueError, match="dtype"):
            export_onnx(export_compact(_net())[0], "x.onnx", n_features=40, dtype="int8")


def _assert_onnx_runs_as(
    module: torch.nn.Module, path: Path, n_features: int, x: torch.Tensor
) -> None:
    """``module`` exported to ONNX at ``path`` gives its outputs in onnxruntime to 1e-5, on
    all rows of ``x`` and on one."""
    export_onnx(module, path, n_features=n_features)
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    for rows in (x, x[:1]):
        got = sess.run(None, {"x": rows.numpy()})[0]
        np.testing.assert_allclose(got, module(rows).numpy(), rtol=0, atol=1e-5)


# ------------------------------------------------------------------------ estimators
def _noisy(X: np.ndarray, seed: int = 0) -> np.ndarray:
    """``X`` standardised, with 10 added N(0, 1) noise columns."""
    rng = np.random.default_rng(seed)
    Z = (X - X.mean(0)) / np.where(X.std(0) > 0, X.std(0), 1.0)
    return np.hstack([Z, rng.normal(size=(len(X), 10))])


def _fit(est: Any, X: np.ndarray, y: np.ndarray) -> Any:
    with warnings.catch_warnings():  # short fits: unconverged is not the point here
        warnings.simplefilter("ignore")
        return est.fit(X, y)


def test_regressor_export_takes_raw_inputs_in_float64_and_float32(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 6)) * 3.0 + 5.0
    y = 100.0 + 20.0 * X[:, 0] - 10.0 * X[:, 1] + rng.normal(size=200)
    est = _fit(SVBNNRegressor(hidden_layer_sizes=(16,), max_iter=15, random_state=0), X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        module = est.export()
    # The median model of the fitted network, mapped to y's units, on all columns.
    x64 = torch.from_numpy(X)
    want = _median(est.module_, x64.to(next(est.module_.parameters()).dtype))[:, 0].double()
    lin = est._linear_mean()  # a linear target: the linear mean's, when the fit has one
    if lin is not None:
        want = want + torch.from_numpy(lin.predict(X))
    want = want * est._y_scale_ + est._y_mean_
    out = module(x64)
    assert out.shape == (200,)
    tol = 1e-5 * float(want.abs().max())
    torch.testing.assert_close(out.double(), want, rtol=0, atol=tol)
    torch.testing.assert_close(module(x64.float()).double(), want, rtol=0, atol=tol)
    # Close to the posterior mean in y's units (a short fit: loose).
    assert float(np.sqrt(np.mean((out.numpy() - est.predict(X)) ** 2))) < 0.5 * np.std(y)
    with pytest.raises(ValueError, match="columns"):
        module(x64[:, :5])
    path = tmp_path / "reg.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.export_onnx(path)
    got = ort.InferenceSession(str(path)).run(None, {"x": X})[0]
    np.testing.assert_allclose(got, out.numpy(), rtol=0, atol=1e-5 * float(np.abs(got).max()))


def test_classifier_export_onnx_agrees_with_predict_proba(tmp_path: Path) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X = _noisy(X)
    rng = np.random.default_rng(1)
    test = rng.permutation(len(X))[:150]
    train = np.setdiff1d(np.arange(len(X)), test)
    est = _fit(
        SVBNNClassifier(random_state=0),
        X[train],
        y[train],
    )
    module = est.export()
    path = tmp_path / "clf.onnx"
    est.export_onnx(path, dtype="float32")
    sess = ort.InferenceSession(str(path))
    proba = sess.run(None, {"x": X[test].astype(np.float32)})[0]
    np.testing.assert_allclose(proba, module(torch.from_numpy(X[test])).numpy(), rtol=0, atol=1e-5)
    np.testing.assert_allclose(proba.sum(1), 1.0, atol=1e-5)
    # The median model is one network, not the posterior average that predict_proba
    # takes: on default fits its classes agree with predict's on 97-100% of the test rows
    # (docs/results/export/report.md, "Tabular fits"; 98% here), below the 99%.
    agree = np.mean(est.classes_[proba.argmax(1)] == est.predict(X[test]))
    assert agree >= 0.95
    with pytest.raises(ValueError, match="dtype"):
        est.export_onnx(tmp_path / "bad.onnx", dtype="float16")


def test_export_before_fit_raises() -> None:
    with pytest.raises(NotFittedError):
        SVBNNClassifier().export()


def _cnn(padding2: int, seed: int = 0) -> torch.nn.Sequential:
    """A small version of the paper's CNN, gates resolved at random (30% kept)."""
    from svbnn.nn import SpikeSlabConv2d, SpikeSlabLinear

    g = torch.Generator().manual_seed(seed)
    kw = {"generator": g, "dtype": F64}
    model = torch.nn.Sequential(
        SpikeSlabConv2d(1, 6, 3, padding=1, **kw),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        SpikeSlabConv2d(6, 8, 3, padding=padding2, **kw),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        SpikeSlabLinear(8 * (4 + 2 * padding2 - 2) ** 2, 12, **kw),
        torch.nn.ReLU(),
        SpikeSlabLinear(12, 3, **kw),
    )
    for layer in model:
        if hasattr(layer, "alpha"):
            on = torch.rand(layer.alpha.shape, generator=g, dtype=F64) < 0.3
            with torch.no_grad():
                layer.alpha.copy_(torch.where(on, 3.0, -3.0))
    conv1 = model[0]
    with torch.no_grad():  # channels 0-1 dead: kernels off, biases on (constants)
        conv1.alpha[:2, :9] = -3.0
        conv1.alpha[:2, 9] = 3.0
        conv1.mu[:2, 9] = torch.tensor([0.5, -0.5], dtype=F64)
    return model


@pytest.mark.parametrize("padding2", [0, 1])
def test_conv_export_drops_dead_channels(padding2: int, tmp_path: Path) -> None:
    model = _cnn(padding2)
    x = torch.randn(5, 1, 8, 8, generator=torch.Generator().manual_seed(7), dtype=F64)
    with forward_mode(model, "median"), torch.no_grad():
        want = model(x)
    module, report = export_compact(model)
    torch.testing.assert_close(module(x), want, rtol=1e-12, atol=1e-12)
    convs = [m for m in module if isinstance(m, torch.nn.Conv2d)]
    assert convs[0].out_channels < 6 and convs[1].in_channels == convs[0].out_channels
    # Channel 1 (constant relu(-0.5) = 0) is dropped in both cases; channel 0 (constant
    # 0.5) only where the next convolution has no padding (folded into its bias).
    assert convs[0].out_channels <= (4 if padding2 == 0 else 5)
    assert bool((convs[0].weight != 0).flatten(1).any(dim=1).all()) or padding2 == 1
    assert report.layer_shapes is not None
    m32 = module.float()
    path = tmp_path / "cnn.onnx"
    torch.onnx.export(m32, (x.float(),), str(path), input_names=["x"], dynamo=True, verbose=False)
    got = ort.InferenceSession(str(path)).run(None, {"x": x.float().numpy()})[0]
    np.testing.assert_allclose(got, m32(x.float()).detach().numpy(), rtol=0, atol=1e-5)


def test_predictive_export_is_predict(tmp_path: Path) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X = _noisy(X)[:200]
    y = y[:200]
    clf = _fit(SVBNNClassifier(hidden_layer_sizes=(8,), max_iter=10, random_state=0), X, y)
    module = clf.export_predictive(n_samples=7)
    got = module(torch.from_numpy(X)).numpy()
    np.testing.assert_allclose(got, clf.predict_proba(X, n_samples=7), rtol=0, atol=1e-12)
    path = tmp_path / "pred.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.export_onnx(path, predictive=True)
    onnx_out = ort.InferenceSession(str(path)).run(None, {"x": X})[0]
    np.testing.assert_allclose(onnx_out, clf.predict_proba(X), rtol=0, atol=1e-5)
    reg = _fit(SVBNNRegressor(hidden_layer_sizes=(8,), max_iter=10, random_state=0), X, 5 * y + 2)
    X32 = X.astype(np.float32)
    out = reg.export_predictive()(torch.from_numpy(X32)).numpy()
    np.testing.assert_allclose(out, reg.predict(X32), rtol=0, atol=1e-9)
    # The predictive distribution for intervals: predict(return_std=True)'s mean and sd.
    mean, sd = reg.predict(X, return_std=True)
    both = reg.export_predictive(return_std=True)(torch.from_numpy(X)).numpy()
    assert both.shape == (len(X), 2)
    np.testing.assert_allclose(both, np.stack([mean, sd], axis=1), rtol=1e-12, atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg.export_onnx(tmp_path / "std.onnx", predictive=True, return_std=True)
    onnx_both = ort.InferenceSession(str(tmp_path / "std.onnx")).run(None, {"x": X})[0]
    np.testing.assert_allclose(onnx_both, both, rtol=1e-6, atol=1e-6 * float(np.abs(both).max()))
    with pytest.raises(ValueError, match="predictive=True"):
        reg.export_onnx(tmp_path / "bad.onnx", return_std=True)
    with pytest.raises(ValueError, match="return_std"):
        clf.export_predictive(return_std=True)
    with pytest.raises(ValueError, match="n_samples"):
        reg.export_predictive(n_samples=0)


# -- the moments export --------------------------------------------------------------------
def _gates_spread(model: SpikeSlabMLP, seed: int) -> SpikeSlabMLP:
    """``phi`` spread over (0, 1), some at most 0.01, with slab sds of 0.05-0.5."""
    g = torch.Generator().manual_seed(seed)
    for layer in model.layers():
        with torch.no_grad():
            layer.alpha.uniform_(-6.0, 4.0, generator=g)
            layer.rho.uniform_(-3.0, 0.0, generator=g)
    return model


def test_relu_moments_are_the_rectified_normals() -> None:
    from scipy import integrate, stats

    m = torch.tensor([-3.0, -0.5, 0.0, 0.7, 2.5, 1.3, -1.3, 0.0], dtype=F64)
    v = torch.tensor([0.3, 1.0, 2.0, 0.01, 4.0, 0.0, 0.0, 0.0], dtype=F64)
    got = ReLUMoments()(torch.stack([m, v])).numpy()
    for k in range(len(m)):
        mk, sk = float(m[k]), float(v[k]) ** 0.5
        if sk == 0.0:
            want = (max(mk, 0.0), 0.0)
        else:
            dist = stats.norm(mk, sk)
            e1 = integrate.quad(lambda a, d=dist: a * d.pdf(a), 0.0, np.inf)[0]
            e2 = integrate.quad(lambda a, d=dist: a * a * d.pdf(a), 0.0, np.inf)[0]
            want = (e1, e2 - e1 * e1)
        # erf is evaluated in float32 (relative error ~1e-7).
        np.testing.assert_allclose(got[:, k], want, rtol=1e-6, atol=1e-7)


def test_moments_of_a_linear_network_are_exact() -> None:
    # With the identity activation and one hidden layer, the hidden units are independent
    # (disjoint weights) and the output's mean and variance are exact: the mean is the
    # posterior-mean network's; the variance is checked against 200,000 weight draws.
    model = _gates_spread(_net(p=6, hidden=(5,), out=2, activation="identity", seed=3), 4)
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(5), dtype=F64)
    out = export_moments(model, 6, min_inclusion=0.0)(x)
    with forward_mode(model, "mean"), torch.no_grad():
        torch.testing.assert_close(out[0], model(x), rtol=1e-12, atol=1e-12)
    g = torch.Generator().manual_seed(6)
    draws = []
    with torch.no_grad():
        for _ in range(200):
            ws = [(_draw_layer(layer, 1000, g)) for layer in model.layers()]
            h = torch.einsum("kop,np->kno", ws[0][0], x) + ws[0][1][:, None, :]
            draws.append(torch.einsum("koh,knh->kno", ws[1][0], h) + ws[1][1][:, None, :])
    f = torch.cat(draws)  # (200_000, n, out)
    var = f.var(dim=0)
    # The sample variance's sd: sqrt((mu4 - var^2) / N), from the draws' fourth moment.
    mu4 = ((f - f.mean(dim=0)) ** 4).mean(dim=0)
    se = ((mu4 - var**2) / f.shape[0]).sqrt()
    assert bool(((out[1] - var).abs() <= 5 * se).all()), (out[1], var, se)


def _draw_layer(layer: torch.nn.Module, k: int, g: torch.Generator) -> tuple:
    """``k`` exact spike-and-slab draws of a layer's weights and biases."""
    mu, rho, alpha = layer.mu, layer.rho, layer.alpha
    shape = (k, *mu.shape)
    slab = mu + torch.nn.functional.softplus(rho) * torch.randn(shape, generator=g, dtype=F64)
    on = torch.rand(shape, generator=g, dtype=F64) < torch.sigmoid(alpha)
    w = slab * on
    return w[..., : layer.fan_in], w[..., layer.fan_in]


def test_moments_export_leaves_out_small_gates_and_dead_units_exactly() -> None:
    model = _gates_spread(_net(p=12, hidden=(9, 7), out=3, seed=7), 8)
    x = torch.randn(6, 12, generator=torch.Generator().manual_seed(9), dtype=F64)
    for cut in (0.0, 0.05, 0.3):
        module = export_moments(model, 12, min_inclusion=cut)
        # The reference: every unit and input, the edges of phi <= cut zeroed.
        ref = copy.deepcopy(model)
        with torch.no_grad():
            for layer in ref.layers():
                off = torch.sigmoid(layer.alpha) <= cut
                layer.mu.masked_fill_(off, 0.0)
                layer.rho.masked_fill_(off, -50.0)  # softplus(-50) ~ 2e-22: no variance
        full = export_moments(ref, 12, min_inclusion=0.0)
        torch.testing.assert_close(module(x), full(x), rtol=1e-12, atol=1e-12)
        sizes = [m.weight.shape for m in module if hasattr(m, "var_weight")]
        if cut == 0.3:
            assert sizes[0][1] < 12 or sizes[0][0] < 9 or sizes[1][0] < 7
    with pytest.raises(ValueError, match="min_inclusion"):
        export_moments(model, 12, min_inclusion=1.0)


def test_moments_export_runs_in_onnxruntime_with_a_unit_of_no_variance(tmp_path: Path) -> None:
    # Hidden unit 0 has every incoming edge and its bias left out (mean 0, variance 0)
    # and a kept edge out: relu's moments at v = 0 must be relu(m), not 0 / 0.
    model = _gates_spread(_net(p=5, hidden=(4,), out=2, seed=11), 12)
    with torch.no_grad():
        model.layers()[0].alpha[0].fill_(-10.0)
        model.layers()[1].alpha[:, 0].fill_(5.0)
    module = export_moments(model, 5)
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(13), dtype=F64)
    want = module(x)
    assert bool(torch.isfinite(want).all())
    export_onnx(module, tmp_path / "m.onnx", n_features=5, dtype="float64")
    got = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"x": x.numpy()})[0]
    # Both evaluate erf in float32, by different code (relative errors ~1e-7, grown by
    # the variance's subtraction E[h^2] - E[h]^2).
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="activation"):
        export_moments(_net(activation="tanh"), 40)


def test_softmax_of_normal_is_the_unscented_transform() -> None:
    head = SoftmaxOfNormal(4, like=torch.empty(0, dtype=F64))
    g = torch.Generator().manual_seed(1)
    m = torch.randn(5, 4, generator=g, dtype=F64)
    # No variance: the softmax itself.
    got = head(torch.stack([m, torch.zeros_like(m)]))
    torch.testing.assert_close(got, torch.softmax(m, -1), rtol=1e-12, atol=1e-12)
    # The sigma points' weights sum to 1 and reproduce the normal's first two moments.
    w, pts = head.weights[:, 0, 0], head.offsets[:, 0, :]
    torch.testing.assert_close(w.sum(), torch.tensor(1.0, dtype=F64), rtol=0, atol=1e-15)
    torch.testing.assert_close(w @ pts, torch.zeros(4, dtype=F64), rtol=0, atol=1e-15)
    torch.testing.assert_close((pts * w[:, None]).T @ pts, torch.eye(4, dtype=F64))
    # With variance: a probability vector per row, against 400,000 normal draws (Monte
    # Carlo sd <= 3e-4). The transform is approximate: 0.006 apart at these scales, 0.02
    # the bound.
    v = torch.rand(5, 4, generator=g, dtype=F64)
    got = head(torch.stack([m, v]))
    torch.testing.assert_close(got.sum(-1), torch.ones(5, dtype=F64), rtol=0, atol=1e-12)
    z = m + v.sqrt() * torch.randn(400_000, 5, 4, generator=g, dtype=F64)
    mc = torch.softmax(z, -1).mean(0)
    assert float((got - mc).abs().max()) < 0.02


def test_estimators_moments_export(tmp_path: Path) -> None:
    X, y = load_breast_cancer(return_X_y=True)
    X = _noisy(X)[:200]
    y = y[:200]
    clf = _fit(SVBNNClassifier(hidden_layer_sizes=(8,), max_iter=10, random_state=0), X, y)
    module = clf.export_moments()
    got = module(torch.from_numpy(X)).numpy()
    assert got.shape == (len(X), 2)
    np.testing.assert_allclose(got.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    torch.export.export(module, (torch.from_numpy(X[:3]),))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf.export_onnx(tmp_path / "m.onnx", predictive="moments")
    onnx_out = ort.InferenceSession(str(tmp_path / "m.onnx")).run(None, {"x": X})[0]
    np.testing.assert_allclose(onnx_out, got, rtol=0, atol=1e-5)
    reg = _fit(SVBNNRegressor(hidden_layer_sizes=(8,), max_iter=10, random_state=0), X, 5 * y + 2)
    both = reg.export_moments(return_std=True)(torch.from_numpy(X)).numpy()
    mean = reg.export_moments()(torch.from_numpy(X)).numpy()
    np.testing.assert_allclose(both[:, 0], mean, rtol=1e-12, atol=1e-12)
    assert reg.export_moments()(torch.from_numpy(X.astype(np.float32))).shape == (len(X),)
    # The predictive sd holds the noise: at least the learned noise sd.
    assert bool((both[:, 1] >= reg.noise_std_ * (1 - 1e-12)).all())
    with pytest.raises(ValueError, match="return_std"):
        clf.export_moments(return_std=True)
    with pytest.raises(ValueError, match="predictive"):
        clf.export_onnx(tmp_path / "bad.onnx", predictive="median")
