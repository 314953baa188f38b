"""Prediction (means, intervals, probabilities) and selection/export summaries."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from svbnn.nn import SpikeSlabConv2d, SpikeSlabLinear, SpikeSlabMLP, forward_mode
from svbnn.prediction import (
    credible_interval,
    predict_proba,
    prediction_interval,
    predictive_mean,
    sample_outputs,
)
from svbnn.selection import (
    density,
    export_sparse,
    feature_inclusion,
    fpr_fnr,
    gate_statistics,
    module_size_bytes,
    selected_features,
    sparsity,
)

D = torch.float64


def _linear_model(seed: int = 0) -> torch.nn.Sequential:
    layer = SpikeSlabLinear(3, 1, generator=torch.Generator().manual_seed(seed), dtype=D)
    with torch.no_grad():
        layer.mu.copy_(torch.tensor([[1.0, -2.0, 0.5, 0.3]], dtype=D))
        layer.rho.fill_(math.log(math.expm1(0.2)))
        layer.alpha.copy_(torch.tensor([[3.0, -1.0, 0.5, 10.0]], dtype=D))
    return torch.nn.Sequential(layer)


def test_predictive_mean_converges_to_exact_mean() -> None:
    # For a linear layer E[f(x)] = x . (phi * mu) + phi_b mu_b exactly.
    model = _linear_model()
    x = torch.tensor([[1.0, 1.0, 1.0], [0.5, -1.0, 2.0]], dtype=D)
    H = 4000
    draws = sample_outputs(model, x, H, generator=torch.Generator().manual_seed(1))
    assert draws.shape == (H, 2, 1)
    with forward_mode(model, "mean"):
        exact = model(x)
    se = draws.std(0) / math.sqrt(H)
    est = predictive_mean(model, x, H, generator=torch.Generator().manual_seed(1))
    assert torch.all((est - exact).abs() < 5 * se)


def test_rows_share_each_posterior_draw_and_chunking_is_invisible() -> None:
    model = SpikeSlabMLP(3, (5,), 2, generator=torch.Generator().manual_seed(0), dtype=D)
    x = torch.randn(37, 3, dtype=D)
    a = sample_outputs(model, x, 6, generator=torch.Generator().manual_seed(2), chunk_size=4)
    b = sample_outputs(model, x, 6, generator=torch.Generator().manual_seed(2), chunk_size=1000)
    torch.testing.assert_close(a, b)


def test_credible_interval_coverage_of_draws() -> None:
    model = _linear_model()
    x = torch.randn(5, 3, dtype=D)
    gen = torch.Generator().manual_seed(3)
    lo, hi = credible_interval(model, x, level=0.8, n_samples=2000, generator=gen)
    fresh = sample_outputs(model, x, 4000, generator=torch.Generator().manual_seed(4))
    inside = ((fresh >= lo) & (fresh <= hi)).double().mean(0)
    # 0.8 +- 5 s.e. of a binomial over 4000 fresh draws plus quantile error of 2000 draws.
    tol = 5 * math.sqrt(0.8 * 0.2 / 4000) + 5 * math.sqrt(0.8 * 0.2 / 2000)
    assert torch.all((inside - 0.8).abs() < tol)
    plo, phi = prediction_interval(
        model, x, noise_std=1.0, level=0.8, n_samples=2000, generator=gen
    )
    assert torch.all(phi - plo > hi - lo)
    with pytest.raises(ValueError):
        credible_interval(model, x, level=1.0)


def test_predict_proba_is_average_softmax() -> None:
    model = SpikeSlabMLP(4, (6,), 3, generator=torch.Generator().manual_seed(0), dtype=D)
    x = torch.randn(10, 4, dtype=D)
    p = predict_proba(model, x, 8, generator=torch.Generator().manual_seed(5))
    draws = sample_outputs(model, x, 8, generator=torch.Generator().manual_seed(5))
    torch.testing.assert_close(p, torch.softmax(draws, -1).mean(0))
    torch.testing.assert_close(p.sum(-1), torch.ones(10, dtype=D))


def _set_phi(layer: SpikeSlabLinear, phi: torch.Tensor) -> None:
    with torch.no_grad():
        layer.alpha.copy_(torch.logit(phi))


def test_sparsity_density_and_selection() -> None:
    model = SpikeSlabMLP(4, (2,), 1, dtype=D)
    l1, l2 = model.net[0], model.net[2]
    _set_phi(l1, torch.tensor([[0.9, 0.1, 0.2, 0.3, 0.6], [0.4, 0.2, 0.7, 0.1, 0.5]], dtype=D))
    _set_phi(l2, torch.tensor([[0.8, 0.3, 0.2]], dtype=D))
    phis = [0.9, 0.1, 0.2, 0.3, 0.6, 0.4, 0.2, 0.7, 0.1, 0.5, 0.8, 0.3, 0.2]
    assert float(sparsity(model)) == pytest.approx(sum(phis) / 13)
    assert float(density(model)) == pytest.approx(sum(p > 0.5 for p in phis) / 13)
    np.testing.assert_array_equal(selected_features(model), [0, 2])  # bias column excluded
    # With reach, input 2's kept edge goes to unit 1, whose edge to the output is pruned
    # (phi 0.3): the median model uses input 0 only.
    np.testing.assert_array_equal(selected_features(model, reach=True), [0])
    assert fpr_fnr([0, 2], [0, 1], 4) == (0.5, 0.5)
    assert fpr_fnr([], [0], 4) == (0.0, 1.0)
    with pytest.raises(ValueError):
        fpr_fnr([5], [0], 4)


def test_selection_by_reach_is_the_median_models_inputs() -> None:
    """selected_features(reach=True): the inputs that the median model (export_sparse)
    keeps a path from; many edges of small phi select nothing, while their path
    probability (feature_inclusion) passes 0.5; a replicated model, replicate by
    replicate."""
    g = torch.Generator().manual_seed(0)
    model = SpikeSlabMLP(3, (50,), 2, generator=g, dtype=D)
    l1, l2 = model.net[0], model.net[2]
    phi1 = torch.full((50, 4), 0.02, dtype=D)  # input 1: 50 edges of phi 0.02
    phi1[:10, 0] = 0.9  # input 0: ten kept edges, to units 0-9
    phi1[40:, 2] = 0.9  # input 2: kept edges to units 40-49, which reach nothing
    phi2 = torch.full((2, 51), 0.02, dtype=D)
    phi2[:, :40] = 0.95  # units 0-39 reach both outputs
    _set_phi(l1, phi1)
    _set_phi(l2, phi2)
    assert feature_inclusion(model)[1] > 0.5  # about 1 - (1 - 0.02 * 0.998)^40 = 0.55
    np.testing.assert_array_equal(selected_features(model, reach=True), [0])
    np.testing.assert_array_equal(selected_features(model), [0, 2])
    sparse, _ = export_sparse(model)
    x = torch.randn(8, 3, dtype=D)
    for j in (1, 2):  # the median model does not read inputs 1 and 2
        moved = x.clone()
        moved[:, j] += 5.0
        torch.testing.assert_close(sparse(moved), sparse(x))
    rep = SpikeSlabMLP(3, (50,), 2, generator=g, dtype=D, n_replicates=2)
    swapped = phi1[:, [2, 1, 0, 3]]  # inputs 0 and 2 trade edges
    with torch.no_grad():
        rep.net[0].alpha.copy_(torch.logit(torch.stack([phi1, swapped])))
        rep.net[2].alpha.copy_(torch.logit(torch.stack([phi2, phi2])))
    kept = selected_features(rep, reach=True)
    assert isinstance(kept, list)
    assert [k.tolist() for k in kept] == [[0], [2]]


def test_export_is_the_median_model_and_smaller() -> None:
    g = torch.Generator().manual_seed(0)
    model = SpikeSlabMLP(300, (200,), 10, generator=g, dtype=torch.float32)
    for layer in (model.net[0], model.net[2]):
        keep = torch.rand(layer.alpha.shape, generator=g) < 0.05
        with torch.no_grad():
            layer.alpha.copy_(torch.where(keep, 3.0, -3.0))
    x = torch.randn(16, 300)
    sparse, report = export_sparse(model)
    dense, dense_report = export_sparse(model, storage="dense")
    with forward_mode(model, "median"), torch.no_grad():
        expected = model(x)
    torch.testing.assert_close(sparse(x), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(dense(x), expected, rtol=1e-5, atol=1e-5)
    n_keep = sum(int((torch.sigmoid(m.alpha) > 0.5).sum()) for m in (model.net[0], model.net[2]))
    assert report.n_nonzero == n_keep and report.n_total == model.n_params()
    assert report.size_bytes < dense_report.size_bytes / 5
    assert dense_report.size_bytes == module_size_bytes(dense)
    assert not any(p.requires_grad for p in sparse.parameters())
    # The exported module reloads from its state dict.
    again, _ = export_sparse(model)
    again.load_state_dict(sparse.state_dict())
    torch.testing.assert_close(again(x), expected, rtol=1e-5, atol=1e-5)


def test_export_conv() -> None:
    model = torch.nn.Sequential(SpikeSlabConv2d(2, 3, 3, padding=1, dtype=D), torch.nn.ReLU())
    x = torch.randn(2, 2, 5, 5, dtype=D)
    out, report = export_sparse(model)
    with forward_mode(model, "median"), torch.no_grad():
        torch.testing.assert_close(out(x), model(x))
    assert isinstance(out[0], torch.nn.Conv2d) and report.n_total == 3 * 18 + 3


def test_prediction_leaves_the_layers_generators_as_it_found_them() -> None:
    """predict must not mutate the model: a training stream continues as if no prediction ran."""
    from svbnn.nn import SpikeSlabMLP
    from svbnn.prediction import sample_outputs

    train_gen = torch.Generator().manual_seed(0)
    model = SpikeSlabMLP(3, (4,), 1, generator=train_gen)
    before = [layer.generator for layer in model.layers()]
    sample_outputs(model, torch.randn(5, 3), 3, generator=torch.Generator().manual_seed(1))
    assert [layer.generator for layer in model.layers()] == before
    assert all(g is train_gen for g in before)


@settings(max_examples=40, deadline=None)
@given(
    hidden=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    inputs=st.integers(1, 5),
    outputs=st.integers(1, 3),
    replicates=st.sampled_from([None, 1, 3]),
    scale=st.sampled_from([0.5, 3.0, 30.0]),
    threshold=st.sampled_from([None, 0.5, 0.9]),
    dtype=st.sampled_from([torch.float32, torch.float64]),
    seed=st.integers(0, 2**16),
)
def test_gate_statistics_of_the_flat_gates_are_the_layers(
    hidden: list[int],
    inputs: int,
    outputs: int,
    replicates: int | None,
    scale: float,
    threshold: float | None,
    dtype: torch.dtype,
    seed: int,
) -> None:
    """A fused SpikeSlabMLP's statistics come from its one flat gate parameter; they are
    those of its layers one by one (the route of any other model, here the network inside
    a ModuleList): the unresolved fraction (a count) exactly, the mean to rounding. Gates
    at the bounds 0.1 and 0.9 and at the threshold are drawn too."""
    g = torch.Generator().manual_seed(seed)
    model = SpikeSlabMLP(inputs, tuple(hidden), outputs, n_replicates=replicates, dtype=dtype)
    edges = torch.logit(torch.tensor([0.1, 0.9, 0.5], dtype=dtype))
    with torch.no_grad():
        alpha = scale * torch.randn(model.alpha.shape, generator=g, dtype=dtype)
        pick = torch.rand(model.alpha.shape, generator=g) < 0.3
        at_edges = edges[torch.randint(3, alpha.shape, generator=g)]
        model.alpha.copy_(torch.where(pick, at_edges, alpha))
    flat = gate_statistics(model, threshold)
    by_layer = gate_statistics(torch.nn.ModuleList([model]), threshold)
    assert flat[0].shape == by_layer[0].shape == (() if replicates is None else (replicates,))
    assert flat[0].dtype == by_layer[0].dtype == flat[1].dtype == dtype
    torch.testing.assert_close(flat[0], by_layer[0], rtol=4 * torch.finfo(dtype).eps, atol=0.0)
    torch.testing.assert_close(flat[1], by_layer[1], rtol=0.0, atol=0.0)
