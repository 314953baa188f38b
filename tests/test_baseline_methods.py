"""Tests of the baselines as harness methods (svbnn_experiments.baseline_methods)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from svbnn.pruning import agp_schedule, imp_densities, magnitude_prune
from svbnn_experiments import baseline_methods as bm
from svbnn_experiments import pruned_methods as pm
from svbnn_experiments.cli import main
from svbnn_experiments.methods import FitSpec, get_method

BASELINES = ("vbnn", "vd", "hsbnn", "agp", "lot")
GRID = (0.5, 0.1)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _finite(row: dict[str, str], key: str) -> bool:
    return row.get(key, "") != "" and math.isfinite(float(row[key]))


@pytest.fixture(scope="module")
def quick_sparse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Table 1 (sparse teacher) in --quick mode with every method, small grids via --set."""
    out = tmp_path_factory.mktemp("baselines") / "table1-sparse"
    argv = [
        "reproduce",
        "table1-sparse",
        "--quick",
        "--methods",
        "svbnn," + ",".join(BASELINES),
        "--reps",
        "2",
        "--epochs",
        "6",
        "--set",
        "n_test=300",
        "--set",
        "coverage_grid=50",
        "--set",
        "agp_densities=0.5,0.1",
        "--set",
        "lot_densities=0.5,0.1",
        "--out",
        str(out),
        "--no-progress",
    ]
    assert main(argv) == 0
    return out


def test_every_method_yields_finite_metrics_with_the_right_gaps(quick_sparse: Path) -> None:
    rows = _rows(quick_sparse / "results.csv")
    by_method: dict[str, list[dict[str, str]]] = {}
    for r in rows:
        by_method.setdefault(r["method"], []).append(r)
    assert set(by_method) == {"svbnn", *BASELINES}
    for method, mrows in by_method.items():
        assert len(mrows) == 2
        for r in mrows:
            for key in ("train_rmse", "test_rmse", "sparsity_pct", "density_pct"):
                assert _finite(r, key), (method, key)
            assert 0.0 < float(r["sparsity_pct"]) <= 100.0
            # Input selection: defined for all but HS-BNN (node pruning).
            has_fpr = method != "hsbnn"
            assert _finite(r, "fpr_pct") == has_fpr, method
            assert _finite(r, "fnr_pct") == has_fpr, method
            # Credible intervals: only for the Bayesian methods.
            bayesian = method not in ("agp", "lot")
            assert _finite(r, "coverage95_pct") == bayesian, method
            assert _finite(r, "grid_density") == (not bayesian), method
    for r in by_method["vbnn"]:
        assert float(r["fpr_pct"]) == 100.0 and float(r["fnr_pct"]) == 0.0
        assert float(r["sparsity_pct"]) == 100.0
        assert int(r["n_selected"]) == 100


def test_grid_keeps_the_density_with_the_best_mean_test_rmse(quick_sparse: Path) -> None:
    rows = _rows(quick_sparse / "results.csv")
    sizes = json.loads((quick_sparse / "settings.json").read_text())["problem"]["student"]
    n_w = [a * b for a, b in zip(sizes[:-1], sizes[1:], strict=False)]
    total = sum(n_w)

    def kept(d: float) -> int:
        return sum(round(d * n) for n in n_w[:-1]) + n_w[-1]

    for method in ("agp", "lot"):
        mrows = [r for r in rows if r["method"] == method]
        means = {d: np.mean([float(r[f"grid_test_rmse_d{d:g}"]) for r in mrows]) for d in GRID}
        best = min(means, key=lambda d: means[d])
        for r in mrows:
            assert float(r["grid_density"]) == best
            # The reported metrics are those of the chosen density.
            assert float(r["test_rmse"]) == pytest.approx(float(r[f"grid_test_rmse_d{best:g}"]))
            # Layer-wise pruning to the density, the output layer left dense.
            assert float(r["weight_density_pct"]) == pytest.approx(100 * kept(best) / total)
    text = (quick_sparse / "report.md").read_text()
    assert "| AGP | 2 |" in text and "| LOT | 2 |" in text


def _spec(**options: Any) -> FitSpec:
    return FitSpec(
        in_features=5,
        hidden=(4, 3),
        activation="tanh",
        epochs=4,
        batch_size=16,
        lr=1e-2,
        options=options,
    )


def _data(R: int = 2, n: int = 40, p: int = 5, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(R, n, p, generator=g) * 2 - 1
    y = 2 * X[..., 0] + torch.randn(R, n, generator=g)
    return X, y


@pytest.mark.parametrize("scope", ["global", "layer"])
def test_batched_pruning_matches_the_library(scope: str) -> None:
    g = torch.Generator().manual_seed(1)
    net = pm.ReplicatedMLP(6, (5, 4), 1, "relu", 3, generator=g)
    with torch.no_grad():
        net.weights[1][0, 0, :2] = 0.0  # ties at zero
    net.prune([0.7, 0.7, 0.7], scope)  # a first round, so that pruned weights exist
    dens = [0.5, 0.2, 0.05]
    new = pm.replicated_magnitude_prune(list(net.weights), net.masks, dens, scope)
    for s, d in enumerate(dens):
        ref = nn.Sequential(*(nn.Linear(w.shape[2], w.shape[1]) for w in net.weights))
        lins = [m for m in ref if isinstance(m, nn.Linear)]
        with torch.no_grad():
            for lin, w, m in zip(lins, net.weights, net.masks, strict=True):
                lin.weight.copy_(w[s])
                lin.register_buffer("weight_mask", m[s].to(w.dtype).clone())
        want = magnitude_prune(ref, d, scope)
        for k, w_mask in zip(new, want, strict=True):
            assert torch.equal(k[s], w_mask.bool())


def test_lot_path_reaches_every_grid_value_at_the_prune_rate() -> None:
    assert pm.lot_path([0.05], 0.2) == pytest.approx(imp_densities(0.05, 0.2))
    path = pm.lot_path([0.5, 0.3, 0.1, 0.05], 0.2)
    for d in (0.5, 0.3, 0.1, 0.05):
        assert d in path
    prev = 1.0
    for d in path:
        assert 0.8 * prev - 1e-12 <= d < prev
        prev = d
    # 0.8 0.64 0.512 [0.5] 0.4 0.32 [0.3] 0.24 0.192 0.154 0.123 [0.1] 0.08 0.064 0.0512 [0.05]
    assert path[-1] == 0.05 and len(path) == 16


def test_agp_schedule_fits_the_run() -> None:
    # Simulation I (B): 10000 epochs of 4 steps.
    assert agp_schedule(40000, 0.1, 0.6, 100) == (4000, 100, 200)
    for steps in (1, 7, 80, 12345):
        t0, n, dt = agp_schedule(steps, 0.1, 0.6, 100)
        assert n >= 1 and dt >= 1
        if steps > 10:
            assert t0 + n * dt <= steps - 1
    with pytest.raises(ValueError, match="agp_begin"):
        agp_schedule(100, 0.7, 0.6, 10)


def test_density_options_are_validated() -> None:
    assert bm._densities("0.3,0.05", "k") == (0.3, 0.05)
    assert bm._densities(0.3, "k") == (0.3,)
    assert bm._densities([1, 0.5], "k") == (1.0, 0.5)
    assert pm._flag("False", "k") is False and pm._flag(True, "k") is True
    with pytest.raises(ValueError, match="true or false"):
        pm._flag("maybe", "prune_output")
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        bm._densities((30, 5), "agp_densities")
    with pytest.raises(ValueError, match="empty"):
        bm._densities((), "lot_densities")
    X, y = _data()
    with pytest.raises(ValueError, match="prune_scope"):
        get_method("agp").fit(X, y, _spec(prune_scope="nodes"), torch.Generator())


@pytest.mark.parametrize("scope", ["global", "layer"])
def test_agp_ends_at_each_grid_density_and_keeps_biases(scope: str) -> None:
    X, y = _data()
    fit = get_method("agp").fit(
        X, y, _spec(agp_densities=(0.6, 0.2), prune_scope=scope), torch.Generator().manual_seed(0)
    )
    assert isinstance(fit, pm.GridFitted) and not fit.bayesian
    for d, cand in fit.candidates:
        net = cand.model
        *pruned, out_mask = net.masks
        assert torch.all(out_mask)  # the output layer stays dense (prune_output=False)
        kept = [m.flatten(1).sum(1) for m in pruned]
        if scope == "global":
            n = sum(m[0].numel() for m in pruned)
            assert torch.all(sum(kept) == round(d * n))
        else:
            for k, m in zip(kept, pruned, strict=True):
                assert torch.all(k == round(d * m[0].numel()))
        for w, m in zip(net.weights, net.masks, strict=True):
            assert torch.all(w[~m] == 0)
        for b in net.biases:
            assert torch.all(b != 0)
        assert np.all(cand.sparsity() > cand.weight_density())  # biases count as kept
    out = fit.sample_outputs(X, 3, None)
    assert out.shape == (3, 2, 40) and torch.equal(out[0], out[2])


def test_lot_tickets_are_rewound_initial_weights() -> None:
    # With no training, every round prunes the initial weights by magnitude and rewinds:
    # the ticket is the initial network restricted to its largest weights.
    X, y = _data()
    spec = _spec(lot_densities=(0.5, 0.2))
    spec = FitSpec(**{**spec.__dict__, "epochs": 0})
    gen = torch.Generator().manual_seed(3)
    fit = get_method("lot").fit(X, y, spec, gen)
    assert isinstance(fit, pm.GridFitted)
    init = pm.ReplicatedMLP(5, (4, 3), 1, "tanh", 2, generator=torch.Generator().manual_seed(3))
    for d, cand in fit.candidates:
        net = cand.model
        for w, w0, m in zip(net.weights, init.weights, net.masks, strict=True):
            assert torch.equal(w, w0.detach() * m)
        for b, b0 in zip(net.biases, init.biases, strict=True):
            assert torch.equal(b, b0)
        ref = init.snapshot()
        ref.prune([d, d], "layer", prune_output=False)
        for m, m_ref in zip(net.masks, ref.masks, strict=True):
            assert torch.equal(m, m_ref)
    assert fit.info["lot_rounds"] == len(pm.lot_path((0.5, 0.2), 0.2)) + 1


def test_tune_on_test_picks_the_smallest_mean_rmse() -> None:
    # Candidates that predict constants 0, 1, 2 (zero weights, biases set) for y = 0.9.
    cands = []
    for c in (0.0, 1.0, 2.0):
        net = pm.ReplicatedMLP(3, (2,), 1, "relu", 2)
        with torch.no_grad():
            for w in net.weights:
                w.zero_()
            net.biases[0].zero_()
            net.biases[1].fill_(c)
        cands.append((0.1 * (c + 1), pm.PrunedFitted(net, 0.1 * (c + 1))))
    fit = pm.GridFitted(cands, {"steps": 7})
    X = torch.zeros(2, 4, 3)
    cols = fit.tune_on_test(X, np.full(4, 0.9), 5, None)
    assert fit.chosen == 1 and fit.best is cands[1][1]
    assert np.all(cols["grid_density"] == pytest.approx(0.2))
    assert np.allclose(cols["grid_test_rmse_d0.1"], 0.9)
    assert np.allclose(cols["grid_test_rmse_d0.2"], 0.1)
    assert np.all(cols["steps"] == 7.0)
    assert torch.allclose(fit.sample_outputs(X, 2, None), torch.ones(2, 2, 4))


@pytest.mark.parametrize("name", ["vbnn", "vd", "hsbnn"])
def test_bayesian_baselines_fit_replicates(name: str) -> None:
    X, y = _data()
    gen = torch.Generator().manual_seed(0)
    fit = get_method(name).fit(X, y, _spec(), gen)
    assert fit.bayesian and fit.n_replicates == 2
    draws = fit.sample_outputs(X, 4, gen)
    assert draws.shape == (4, 2, 40) and torch.isfinite(draws).all()
    assert not torch.equal(draws[0], draws[1])  # genuine posterior draws
    sp = fit.sparsity()
    assert sp is not None and sp.shape == (2,) and np.all((sp > 0) & (sp <= 1))
    sel = fit.selected_features()
    if name == "hsbnn":
        assert sel is None
    else:
        assert sel is not None and len(sel) == 2
    if name == "vbnn":
        assert sel is not None and all(len(s) == 5 for s in sel)
        assert np.all(sp == 1.0)


def test_method_options_need_a_method_that_uses_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["reproduce", "table1-sparse", "--quick", "--out", str(tmp_path), "--no-progress"]
    assert main([*argv, "--methods", "svbnn", "--set", "agp_densities=0.5"]) == 2
    assert "agp_densities" in capsys.readouterr().err
    assert main([*argv, "--methods", "lot", "--set", "agp_densities=0.5"]) == 2
    assert main([*argv, "--methods", "lot", "--set", "lot_densities=1.5", "--reps", "1"]) != 0


def test_runs_of_separate_methods_merge_into_one_report(tmp_path: Path) -> None:
    base = ["reproduce", "table1-dense", "--quick", "--reps", "2", "--epochs", "3", "--no-progress"]
    assert main([*base, "--methods", "svbnn", "--out", str(tmp_path / "a")]) == 0
    assert main([*base, "--methods", "vbnn", "--out", str(tmp_path / "b")]) == 0
    out = tmp_path / "merged"
    argv = ["reproduce", "table1-dense", "--merge", str(tmp_path / "a"), str(tmp_path / "b")]
    assert main([*argv, "--out", str(out)]) == 0
    rows = _rows(out / "results.csv")
    assert sorted(r["method"] for r in rows) == ["svbnn", "svbnn", "vbnn", "vbnn"]
    settings = json.loads((out / "settings.json").read_text())
    assert settings["config"]["methods"] == ["svbnn", "vbnn"]
    assert [s["methods"] for s in settings["merged_from"]] == [["svbnn"], ["vbnn"]]
    text = (out / "report.md").read_text()
    assert "| SVBNN | 2 |" in text and "| VBNN | 2 |" in text
    # The same method twice would double its replications: refused.
    argv = ["reproduce", "table1-dense", "--merge", str(tmp_path / "a"), str(tmp_path / "a")]
    assert main([*argv, "--out", str(tmp_path / "bad")]) != 0
