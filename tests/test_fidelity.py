"""Options of the paper-fidelity studies (issue #14 items 3 and 5): the dense teacher's
signal scale and per-replication teachers, per-grid-point coverage frequencies, and the
late inverse-CDF phase of SVBNN training. Each option changes what it should, and its
default leaves today's behaviour unchanged."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

from svbnn.data import dense_teacher, dense_teacher_moments
from svbnn.nn import Sampler, SpikeSlabMLP
from svbnn.training import History
from svbnn_experiments import reproduce
from svbnn_experiments.common import Problem
from svbnn_experiments.coverage_points import POINTS_FILE
from svbnn_experiments.methods import late_sampler_switch


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _reference_dense_teacher(n: int, n_test: int, seed: int) -> dict[str, NDArray[Any]]:
    # The dense teacher as it was before the signal_sd option (same draws, same order).
    rng = np.random.default_rng(seed)
    sizes = [20, 6, 6, 1]
    layers = [
        (rng.uniform(0, 1, (sizes[i + 1], sizes[i])), rng.uniform(0, 1, sizes[i + 1]))
        for i in range(3)
    ]

    def f(x: NDArray[Any]) -> NDArray[Any]:
        h = x
        for i, (w, b) in enumerate(layers):
            h = h @ w.T + b
            if i < 2:
                h = 0.5 * (1.0 + np.tanh(0.5 * h))
        out: NDArray[Any] = h[:, 0]
        return out

    X = rng.uniform(-1.0, 1.0, size=(n, 20))
    Xt = rng.uniform(-1.0, 1.0, size=(n_test, 20))
    fx, ft = f(X), f(Xt)
    y = fx + rng.standard_normal(n)
    yt = ft + rng.standard_normal(n_test)
    out = {"X_train": X, "y_train": y, "X_test": Xt, "y_test": yt, "f_test": ft}
    out.update({f"W{i + 1}": w for i, (w, _) in enumerate(layers)})
    out.update({f"b{i + 1}": b for i, (_, b) in enumerate(layers)})
    return out


# ------------------------------------------------------------------ library teacher
def test_dense_teacher_default_is_unchanged_bit_for_bit() -> None:
    d = dense_teacher(n=60, n_test=40, random_state=7)
    ref = _reference_dense_teacher(60, 40, 7)
    for k in ("X_train", "y_train", "X_test", "y_test", "f_test"):
        np.testing.assert_array_equal(getattr(d, k), ref[k])
    assert sorted(d.params) == ["W1", "W2", "W3", "b1", "b2", "b3"]
    for k, v in d.params.items():
        np.testing.assert_array_equal(v, ref[k])


def test_dense_teacher_signal_sd_scales_output_about_its_mean() -> None:
    base = dense_teacher(n=50, n_test=20000, random_state=3)
    scaled = dense_teacher(n=50, n_test=20000, random_state=3, signal_sd=1.0)
    # Same stream: same covariates and hidden layers, only the output layer changes.
    np.testing.assert_array_equal(base.X_train, scaled.X_train)
    for k in ("W1", "W2", "b1", "b2"):
        np.testing.assert_array_equal(base.params[k], scaled.params[k])
    # The paper's teacher has a weak signal: sd of f0 about 0.2 against noise sd 1.
    assert 0.1 < base.f_test.std() < 0.4
    assert scaled.f_test.std() == pytest.approx(1.0, rel=0.03)
    assert scaled.f_test.mean() == pytest.approx(base.f_test.mean(), abs=0.03)
    # f0 is an affine map of the unscaled one (the noise draws are shared too).
    k = float(scaled.params["scale"])
    mean = float(scaled.params["f_mean"])
    np.testing.assert_allclose(scaled.f_test, mean + k * (base.f_test - mean), rtol=1e-10)
    np.testing.assert_allclose(scaled.y_test - scaled.f_test, base.y_test - base.f_test)
    assert k == pytest.approx(1.0 / float(scaled.params["f_sd"]))
    for bad in (0.0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="signal_sd"):
            dense_teacher(n=5, n_test=5, random_state=0, signal_sd=bad)


def test_dense_teacher_moments_are_deterministic() -> None:
    layers = [
        (dense_teacher(n=1, n_test=1, random_state=2020).params[f"W{i}"],
         dense_teacher(n=1, n_test=1, random_state=2020).params[f"b{i}"])
        for i in (1, 2, 3)
    ]  # fmt: skip
    m1, s1 = dense_teacher_moments(layers)
    m2, s2 = dense_teacher_moments(layers)
    assert (m1, s1) == (m2, s2)
    # The paper's teacher of seed 2020, as reported: Var f0 = 0.041.
    assert s1**2 == pytest.approx(0.041, abs=0.002)


# ------------------------------------------------------------------ harness problem
def test_problem_default_teacher_is_shared_and_unscaled() -> None:
    d = dense_teacher(n=5, n_test=50, random_state=2020)
    p = Problem("dense-teacher", 20)
    np.testing.assert_allclose(p.f0(d.X_test), d.f_test, rtol=1e-12)
    # Without redraw_teacher the data seed does not pick the teacher.
    np.testing.assert_array_equal(p.f0(d.X_test, 1), p.f0(d.X_test, 2))
    assert p.teacher_seed_for(123) == 2020


def test_problem_redrawn_and_scaled_teacher() -> None:
    p = Problem("dense-teacher", 20, teacher_sd=1.0, redraw_teacher=True)
    X = np.random.default_rng(0).uniform(-1, 1, (5000, 20))
    f1, f2 = p.f0(X, 11), p.f0(X, 12)
    assert not np.allclose(f1, f2)  # one teacher per replication
    assert f1.std() == pytest.approx(1.0, rel=0.05) and f2.std() == pytest.approx(1.0, rel=0.05)
    _, y, f = p.draw(200, 11)
    np.testing.assert_allclose(f, p.f0(p.draw(200, 11)[0], 11))
    with pytest.raises(ValueError, match="data seed"):
        p.f0(X)
    with pytest.raises(ValueError, match="dense teacher only"):
        Problem("sim2", 200, teacher_sd=1.0)
    with pytest.raises(ValueError, match="teacher_sd"):
        Problem("dense-teacher", 20, teacher_sd=-1.0)


# ------------------------------------------------------------------ coverage artifact
_QUICK: dict[str, Any] = {"reps": 3, "epochs": 3, "progress": False}


def test_coverage_default_run_reports_per_point_frequencies(tmp_path: Path) -> None:
    out = reproduce(
        "coverage", {**_QUICK, "params": {"teachers": "dense"}}, quick=True, out=tmp_path
    )
    rows = _rows(out / "results.csv")
    assert {r["setting"] for r in rows} == {"dense"}
    # Default: the paper's one teacher, unscaled (sd of f0 about 0.2) for every replication.
    sds = {round(float(r["teacher_f_sd"]), 6) for r in rows}
    assert len(sds) == 1 and 0.15 < sds.pop() < 0.25
    points = _rows(out / POINTS_FILE)
    assert len(points) == 100  # the quick grid
    for lv in (90, 95):
        for j in (1, 2, 3):
            per_point = np.array([float(p[f"dense_svbnn_coverage{lv}_x{j}"]) for p in points])
            per_rep = np.array([float(r[f"coverage{lv}_x{j}_pct"]) for r in rows])
            # Two summaries of one (reps, points) table: the same mean.
            assert per_point.mean() == pytest.approx(per_rep.mean(), abs=1e-9)
            # With 3 replications every frequency is a multiple of 1/3.
            np.testing.assert_allclose(per_point * 3 / 100, np.round(per_point * 3 / 100))
    report = (out / "report.md").read_text()
    assert "Per-grid-point coverage frequencies (dense teacher)" in report
    assert "Sparse teacher" not in report
    assert (out / "coverage_points_dense.png").is_file()


def test_coverage_scaled_redrawn_teacher_changes_the_truth(tmp_path: Path) -> None:
    params = {"teachers": "dense", "teacher_sd": 1.0, "redraw_teacher": True}
    out = reproduce("coverage", {**_QUICK, "params": params}, quick=True, out=tmp_path / "a")
    rows = _rows(out / "results.csv")
    sds = [float(r["teacher_f_sd"]) for r in rows]
    assert all(s == pytest.approx(1.0, rel=0.05) for s in sds)
    assert len({round(s, 9) for s in sds}) == len(rows)  # a different teacher per rep
    # Same data seeds and the same noise as the default run; only f0 differs.
    base = reproduce(
        "coverage", {**_QUICK, "params": {"teachers": "dense"}}, quick=True, out=tmp_path / "b"
    )
    brows = _rows(base / "results.csv")
    assert [r["data_seed"] for r in rows] == [r["data_seed"] for r in brows]
    assert [r["test_rmse_f"] for r in rows] != [r["test_rmse_f"] for r in brows]
    assert "a teacher per replication" in (out / "report.md").read_text()
    with pytest.raises(ValueError, match="teachers"):
        reproduce(
            "coverage", {**_QUICK, "params": {"teachers": "medium"}}, quick=True, out=tmp_path / "c"
        )


def test_coverage_predictive_intervals_add_noise_to_the_same_fit(tmp_path: Path) -> None:
    runs = {}
    for interval in ("credible", "predictive"):
        params = {"teachers": "dense", "interval": interval}
        ov = {**_QUICK, "epochs": 100, "params": params}  # enough to fit f0 to about 0.1
        out = reproduce("coverage", ov, quick=True, out=tmp_path / interval)
        runs[interval] = _rows(out / "results.csv")
        assert f"# Coverage of {interval} intervals" in (out / "report.md").read_text()
    cred, pred = runs["credible"], runs["predictive"]
    cov = [k for k in cred[0] if k.startswith("coverage")]
    timing = {"wall_s", "chunk_train_s"}
    # The same fit and predictions: only the coverage columns differ.
    for a, b in zip(cred, pred, strict=True):
        assert {k: v for k, v in a.items() if k not in {*cov, *timing}} == {
            k: v for k, v in b.items() if k not in {*cov, *timing}
        }
    # Noise of sd 1 widens every interval far past the fit's error (RMSE vs f0 about 0.1):
    # the predictive intervals cover f0 almost everywhere, at least as often as credible.
    for k in cov:
        c = np.mean([float(r[k]) for r in cred])
        p = np.mean([float(r[k]) for r in pred])
        assert p >= c and p > 90.0, (k, c, p)
    with pytest.raises(ValueError, match="interval"):
        reproduce(
            "coverage",
            {**_QUICK, "params": {"teachers": "dense", "interval": "both"}},
            quick=True,
            out=tmp_path / "bad",
        )


# ---------------------------------------------------------------- late inverse-CDF
def test_late_sampler_switch_moves_every_layer_at_the_given_epoch() -> None:
    model = SpikeSlabMLP(4, [3], 1, n_replicates=2)
    cb = late_sampler_switch(model, 5)
    for epoch in range(1, 5):
        cb(epoch, model, History())
        assert all(layer.sampler is Sampler.GUMBEL for layer in model.layers())
    cb(5, model, History())
    assert all(layer.sampler is Sampler.INVERSE_CDF for layer in model.layers())


def test_late_inverse_cdf_option_changes_training_and_default_does_not(tmp_path: Path) -> None:
    ov: dict[str, Any] = {"reps": 2, "epochs": 6, "progress": False}
    drop = {"wall_s", "chunk_train_s"}

    def run(name: str, params: dict[str, Any]) -> list[dict[str, str]]:
        out = reproduce("table2", {**ov, "params": params}, quick=True, out=tmp_path / name)
        return [{k: v for k, v in r.items() if k not in drop} for r in _rows(out / "results.csv")]

    base, zero, late = (
        run("a", {}),
        run("b", {"late_inverse_cdf_epochs": 0}),
        run("c", {"late_inverse_cdf_epochs": 3}),
    )
    assert base == zero
    assert [r["train_rmse"] for r in late] != [r["train_rmse"] for r in base]
    with pytest.raises(ValueError, match="late_inverse_cdf_epochs"):
        run("d", {"late_inverse_cdf_epochs": 7})


def test_learn_noise_option_learns_one_noise_sd_per_replication(tmp_path: Path) -> None:
    ov: dict[str, Any] = {"reps": 3, "epochs": 20, "progress": False}
    base = _rows(reproduce("table2", ov, quick=True, out=tmp_path / "a") / "results.csv")
    params = {"learn_noise": True}
    out = reproduce("table2", {**ov, "params": params}, quick=True, out=tmp_path / "b")
    rows = _rows(out / "results.csv")
    assert "noise_std" not in base[0]  # a known noise has no column
    learned = [float(r["noise_std"]) for r in rows]
    # Started at the data's noise sd 1; an early fit leaves larger residuals, so each
    # replication's own estimate has moved up from it.
    assert all(math.isfinite(v) and v > 1.0 for v in learned)
    assert len(set(learned)) == len(rows)
    assert [r["train_rmse"] for r in rows] != [r["train_rmse"] for r in base]


# ------------------------------------------------------------------ variant summary
def test_variants_summary_has_one_row_per_variant(tmp_path: Path) -> None:
    from svbnn_experiments.variants import main

    ov: dict[str, Any] = {"reps": 3, "epochs": 2, "progress": False}
    a = reproduce("table2", ov, quick=True, out=tmp_path / "a")
    b = reproduce("table2", {**ov, "params": {"n_mc": 2}}, quick=True, out=tmp_path / "b")
    out = tmp_path / "sum"
    assert main(["--kind", "table2", "--out", str(out), f"base={a}", f"K=2={b}:0-1"]) == 0
    rows = _rows(out / "results.csv")
    assert [r["variant"] for r in rows] == ["base", "K=2"]
    assert [int(r["reps"]) for r in rows] == [3, 2]
    report = (out / "report.md").read_text()
    assert "| paper | 30 |" in report and "16.0 ± 8.1" in report
    assert (out / "settings.json").is_file()
