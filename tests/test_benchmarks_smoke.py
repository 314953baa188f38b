"""Smoke test of the benchmark suite (``python -m benchmarks.run``): it runs and writes its table.

No timing assertions: the machine's speed is not under test, only that every section
produces its rows and files.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest
import torch

# ``benchmarks`` is a top-level folder of the repository (pytest's pythonpath has ".").
import benchmarks.run as bench
from benchmarks.breakdown import replicate_breakdown
from benchmarks.memory import memory_child
from benchmarks.networks import network_specs
from benchmarks.reference import reference_kl, reference_mlp
from svbnn._engine import native as _native
from svbnn.objectives import spike_slab_kl_reference


def _saved_rows(out: Path) -> list[dict[str, str]]:
    """A harness's saved ``results.csv`` as text rows."""
    with open(out / "results.csv") as f:
        return list(csv.DictReader(f))


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_quick_run_writes_markdown_csv_json(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    report = bench.main(["--quick", "--networks", "uci,cnn", "--no-memory", "--out", str(out)])

    md = (out / "bench.md").read_text()
    for heading in (
        "## 1-2. Training step",
        "## 3. 30 replications",
        "## 5. Inference",
        "## Targets",
    ):
        assert heading in md
    assert "**1 thread(s)**" in md
    assert "UCI (8-50-1)" in md
    assert "Fashion-MNIST CNN" in md

    rows = list(csv.DictReader(open(out / "bench.csv")))
    step_rows = {
        (r["network"], r["implementation"])
        for r in rows
        if r["metric"] == "time_per_step" and r["section"] == "train_step"
    }
    expected = {"dense", "svbnn", "reference"}
    if bench.bayesian_torch_available()[0]:
        expected.add("bayesian-torch")
    assert step_rows == {(net, impl) for net in ("uci", "cnn") for impl in expected}
    for r in rows:
        if r["metric"] == "time_per_step":
            assert float(r["median"]) > 0

    payload = json.loads((out / "bench.json").read_text())
    assert payload["meta"]["threads"] == 1
    names = [t["name"] for t in payload["targets"]]
    assert len(names) == 7
    by_name = {t["name"]: t for t in payload["targets"]}
    # Networks left out of --networks give "n/a", measured ones a verdict.
    assert by_name["SVBNN/dense step time, MNIST"]["passed"] is None
    assert by_name["SVBNN/dense step time, UCI"]["passed"] in (True, False)
    size = by_name["size on disk, dense / exported sparse MNIST"]
    assert size["measured"] > 1.0
    assert report.targets[-1].measured == pytest.approx(size["measured"])

    # The export section really reached the requested density (binomial, 5 sd margin).
    density = next(r for r in rows if r["metric"] == "density")
    n_total = 669_706
    sd = math.sqrt(0.05 * 0.95 / n_total)
    assert abs(float(density["median"]) - 0.05) < 5 * sd


def test_missing_bayesian_torch_is_skipped_with_a_note(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench, "bayesian_torch_available", lambda: (False, "ImportError: none"))
    bench.main(["--quick", "--networks", "uci", "--no-memory", "--out", str(tmp_path)])
    md = (tmp_path / "bench.md").read_text()
    assert "pip install bayesian-torch" in md
    rows = list(csv.DictReader(open(tmp_path / "bench.csv")))
    assert all(r["implementation"] != "bayesian-torch" for r in rows)


def test_memory_child_reports_peak_rss(capsys: pytest.CaptureFixture[str]) -> None:
    memory_child("uci:svbnn", threads=1, cnn_hidden=16, cnn_batch=4, steps=1)
    rec = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert rec["config"] == "uci:svbnn"
    assert rec["peak_rss"] >= rec["rss_before"] > 0


def test_reference_kl_matches_library_kl() -> None:
    """The reference's hand-written KL is the paper's formula (checked against svbnn's)."""
    gen = torch.Generator().manual_seed(0)
    model = reference_mlp(3, [4], 2, log_prior_inclusion=math.log(0.1))
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen))
    expected = sum(
        spike_slab_kl_reference(m.w_mu, m.w_rho, m.w_alpha, math.log(0.1), 2.0).sum()
        + spike_slab_kl_reference(m.b_mu, m.b_rho, m.b_alpha, math.log(0.1), 2.0).sum()
        for m in model
        if hasattr(m, "w_mu")
    )
    torch.testing.assert_close(reference_kl(model), expected)


def test_device_timing_writes_dense_and_svbnn_side_by_side(tmp_path: Path) -> None:
    # benchmarks.gpu_speed on the CPU (the code path is the same on CUDA, plus synchronise).
    import benchmarks.gpu_speed as gpu_speed

    res = gpu_speed.main(
        ["--device", "cpu", "--quick", "--backends", "eager", "--out", str(tmp_path)]
    )
    (row,) = res["rows"]
    assert row["network"] == "UCI" and row["backend"] == "eager"
    assert row["dense_ms"] > 0 and row["svbnn_ms"] > 0 and math.isfinite(row["ratio"])
    saved = json.loads((tmp_path / "gpu_speed.json").read_text())
    assert saved["rows"] == res["rows"]
    assert "| UCI | 128 | eager |" in (tmp_path / "gpu_speed.md").read_text()


def test_parametrisation_prototype_matches_the_library_kernel() -> None:
    # benchmarks.parametrisation times a sigma = exp(rho) prototype of the draw + KL forward;
    # on the same sigmas it must compute what the library kernel computes (eager here, the
    # benchmark compiles both). float32 rounding: measured 1.3e-7 relative.
    from benchmarks.parametrisation import fused_forward_log_sigma, max_difference
    from svbnn._engine.kernels import fused_forward

    assert max_difference(fused_forward, fused_forward_log_sigma) < 1e-5


def test_replicate_breakdown_times_torch_and_native_pieces_side_by_side() -> None:
    args = argparse.Namespace(repeats=1, min_block_ms=1.0, warmup=0)
    t = replicate_breakdown(network_specs(32, 256)["sim2"], args)
    names = list(t)
    assert names[-1] == "full batched step"
    sides = ["torch", "native"] if _native.available() else ["torch"]
    for piece in ("minibatch gather", "first layer"):
        assert sorted(n.rsplit(", ", 1)[1] for n in names if n.startswith(piece)) == sorted(sides)
    assert all(timing.median > 0 for timing in t.values())


@pytest.mark.skipif(not _native.available(), reason="no C++ compiler for the native loops")
def test_draw_ablation_swaps_the_forward_loop_and_times_it(tmp_path: Path) -> None:
    # benchmarks.draw_ablation times variants of the native forward loop inside a training
    # step. The variants must be built from the library's source, and the swap must reach
    # the step: the unchanged build draws the library's weights bit for bit, one without
    # the normal noise other weights, and every variant's forward is timed in the step.
    from benchmarks import draw_ablation as ab
    from benchmarks.networks import NetSpec
    from svbnn import kernel_backend
    from svbnn.nn import SpikeSlabMLP

    missing = ab.Variant("broken", "a replacement that no longer applies", (("no such", "x"),))
    with pytest.raises(ValueError, match="no longer has"):
        ab.variant_source(_native._SOURCES[0].read_text(), missing)

    library, no_noise = ab.VARIANTS[0], ab.VARIANTS[2]
    model = SpikeSlabMLP(64, (200,), 10, generator=torch.Generator().manual_seed(0))

    def weights() -> torch.Tensor:
        first = model.layers()[0]
        first.generator = torch.Generator().manual_seed(1)  # the same seed words each time
        with kernel_backend("native"):  # the backend that draws with the loops
            return model._fused.draw_with_kl(model, first)[0].detach()

    real = _native.library()
    assert real is not None
    drawn = {}
    for variant in (library, no_noise):
        with pytest.MonkeyPatch.context() as mp:
            swapped = ab._Swapped(ab.build(variant, tmp_path), real)
            mp.setattr(_native, "library", lambda swapped=swapped: swapped)
            drawn[variant.name] = weights()
    reference = weights()
    assert torch.equal(drawn[library.name], reference)
    assert not torch.equal(drawn[no_noise.name], reference)

    # The exp parametrisation's loop, given rho' = log(softplus(rho)) (the same sigmas),
    # draws the library's weights: the same gates, the slab to float32 rounding of sigma.
    exp_variant = next(v for v in ab.VARIANTS if v.name == "exp parametrisation")
    with torch.no_grad():
        model.rho.copy_(torch.nn.functional.softplus(model.rho.double()).log().float())
    with pytest.MonkeyPatch.context() as mp:
        swapped = ab._Swapped(ab.build(exp_variant, tmp_path), real)
        mp.setattr(_native, "library", lambda: swapped)
        exp_drawn = weights()
    assert torch.equal(exp_drawn == 0, reference == 0)
    torch.testing.assert_close(exp_drawn, reference, rtol=1e-5, atol=1e-6)

    # 64-200-10: 15,010 parameters in layers wider than 16, outside the native backend's
    # whole step, so its step draws with the loop.
    net = NetSpec("tiny", "tiny MLP", "mlp", 64, (200,), 10, "classification", 32, 1000, 1e-3)
    res = ab.measure(net, rounds=1, steps=1, variants=(library, no_noise))
    assert [r["variant"] for r in res["rows"]] == [library.name, no_noise.name]
    assert all(r["forward_ms"]["median"] > 0 for r in res["rows"])
    assert res["rows"][0]["step_over_library"]["median"] == 1.0
    assert "| no normal noise |" in ab.markdown(res)


def test_small_fits_times_both_backends_and_the_dense_loop_side_by_side() -> None:
    from benchmarks import small_fits

    rows = small_fits.main(["--repeats", "1", "--epochs", "1"])
    assert [r["data"] for r in rows] == ["diabetes", "breast cancer", "Friedman #1"]
    for r in rows:
        assert all(len(t) == 1 and t[0] > 0 for t in r["times"].values())
        assert set(r["scores"]) == {"eager", "native", "local"}


def test_epoch_loop_fits_both_ways_side_by_side_with_the_same_predictions() -> None:
    from benchmarks import epoch_loop

    rows = epoch_loop.main(["--repeats", "1", "--tables", "diabetes", "--max-iter", "3"])
    assert [r["table"] for r in rows] == ["diabetes"]
    assert all(len(t) == 1 and t[0] > 0 for t in rows[0]["times"].values())
    assert rows[0]["same"] is True


def test_epoch_loop_compares_epochs_a_native_call_on_a_small_table() -> None:
    from benchmarks import epoch_loop

    argv = ["--repeats", "1", "--tables", "breast-cancer-83", "--max-iter", "3"]
    rows = epoch_loop.main([*argv, "--compare", "spans"])
    assert [r["table"] for r in rows] == ["breast cancer, 110 rows"]
    assert all(len(t) == 1 and t[0] > 0 for t in rows[0]["times"].values())
    assert rows[0]["same"] is True


@pytest.mark.skipif(not _native.available(), reason="no C++ compiler for the native loops")
def test_local_layers_times_native_and_eager_side_by_side(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks import local_layers

    results = local_layers.main(["--rounds", "1", "--min-block-s", "0"])
    assert [r["widths"] for r in results] == [w for w, _ in local_layers.CASES]
    assert all(r["native_us"] > 0 and r["eager_us"] > 0 and r["ratio"] > 0 for r in results)
    assert "| 784-512-512-10 | 128 |" in capsys.readouterr().out


def test_small_data_fits_every_setting_and_climbs(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import small_data

    rows = small_data.main(
        ["--seeds", "0", "--data", "wine", "diabetes", "--max-iter", "2", "--climb", "8"]
    )
    common = ("defaults", "kl_weight=0.2", "prior_inclusion='eb'")
    assert [(r["data"], r["setting"]) for r in rows] == [
        *(("wine", setting) for setting in (*common, "linear")),
        *(("diabetes", setting) for setting in (*common, "sampler='gumbel'", "linear")),
    ]
    for r in rows:
        assert np.isfinite(r["score"]) and r["seconds"] > 0
        assert (r["selected"] == "-") == (r["setting"] == "linear")
        # A classifier's test log loss; none for the regressor.
        assert (r["log_loss"] is None) == (r["data"] == "diabetes")
        assert r["log_loss"] is None or np.isfinite(r["log_loss"])
    out = capsys.readouterr().out
    assert "| wine | defaults | 1 |" in out  # the means over the seeds
    # --noise-columns appends N(0, 1) columns drawn by the seed, the rows' split unchanged.
    Xtr, Xte, ytr, yte = small_data.split("iris", 3, noise_columns=10)
    plain = small_data.split("iris", 3)
    assert Xtr.shape == (112, 14) and Xte.shape == (38, 14)
    np.testing.assert_array_equal(Xtr[:, :4], plain[0])
    np.testing.assert_array_equal(ytr, plain[2])
    # --train-rows keeps that many training rows (drawn by the seed), the test part whole.
    Xtr, Xte, ytr, _ = small_data.split("diabetes", 0, train_rows=83)
    assert Xtr.shape == (83, 10) and len(ytr) == 83 and Xte.shape == (111, 10)
    with pytest.raises(ValueError, match="--train-rows"):
        small_data.split("diabetes", 0, train_rows=1000)
    # the defaults' fit, the tempered fit, four quarters of each continuation
    climb = [line for line in out.splitlines() if line.startswith(("| defaults'", "| kl_", "| +"))]
    assert len(climb) == 2 + 4 * len(small_data.CLIMB_VARIANTS) and all(
        np.isfinite(float(c.split("|")[2])) for c in climb
    )


def test_linear_path_fits_both_arms_side_by_side(tmp_path: Path) -> None:
    from benchmarks import linear_path

    out = tmp_path / "lp"
    linear_path.main(
        ["--out", str(out), "--datasets", "regression-20", "--max-splits", "1", "--max-epochs", "2"]
    )
    rows = _saved_rows(out)
    assert [r["arm"] for r in rows] == list(linear_path.ARMS)
    for r in rows:
        assert np.isfinite(float(r["rmse"])) and 0 <= int(r["noise_kept"]) <= 10
        assert np.isfinite(float(r["nll"])) and 0 <= float(r["coverage"]) <= 1
        assert np.isfinite(float(r["final_loss"]))
        assert 0 <= int(r["true_kept"]) <= 20
    assert "| regression-20 (375) | 1 | " in (out / "report.md").read_text()
    assert json.loads((out / "settings.json").read_text())["train_rows"] == {"regression-20": 375}


def test_linear_mean_fits_both_arms_and_rewrites_its_report(tmp_path: Path) -> None:
    from benchmarks import linear_mean

    out = tmp_path / "lm"
    argv = ["--out", str(out), "--datasets", "regression-20", "--max-splits", "1"]
    linear_mean.main([*argv, "--max-iter", "2"])
    rows = _saved_rows(out)
    assert [r["arm"] for r in rows] == list(linear_mean.ARMS)
    for r in rows:
        assert np.isfinite(float(r["rmse"])) and 0 <= int(r["noise_kept"]) <= 10
        assert np.isfinite(float(r["nll"])) and 0 <= float(r["coverage"]) <= 1
        assert 0 <= int(r["true_kept"]) <= 20 and float(r["q"]) > 0
    assert rows[0]["network_dropped"] == "False" and rows[1]["network_dropped"] in ("True", "False")
    assert rows[0]["q"] == rows[1]["q"]  # one q per split, from the defaults' fit
    # The library's mean_function="auto": its own ratio, and whether it took the mean.
    assert rows[2]["mean_function"] in ("linear", "zero") and rows[0]["mean_function"] == ""
    assert (float(rows[2]["q"]) <= 1.0) == (rows[2]["mean_function"] == "linear")
    report = (out / "report.md").read_text()
    assert "| regression-20 (375) | 1 | " in report
    assert "| regression-20 | 1 | " in report  # the library's table
    (out / "report.md").unlink()
    linear_mean.main([*argv, "--report-only"])
    assert (out / "report.md").read_text() == report
    # Runs saved before the library's arm existed report the lead's table alone.
    settings = json.loads((out / "settings.json").read_text())
    lead = linear_mean.report(rows[:2], settings)
    assert "| regression-20 (375) | 1 | " in lead and "| regression-20 | 1 | " not in lead


def test_sparse_linear_mean_keeps_the_linear_inputs() -> None:
    # Two linear inputs and six null ones, 20 draws: the linear inputs are always kept,
    # with their coefficients; a null input passes the 2.5-sd threshold with probability
    # about 2 P(Z > 2.5) = 0.012, so 9 or more passes of 120 (expected 1.5) has
    # probability below 1e-4. On this draw of pure noise no input passes.
    from benchmarks.linear_mean import sparse_linear_mean

    passes = 0
    for seed in range(20):
        rng = np.random.default_rng(seed)
        X = rng.standard_normal((400, 8))
        y = 3 * X[:, 0] - 2 * X[:, 3] + 0.5 * rng.standard_normal(400)
        cols, lin = sparse_linear_mean(X, y)
        assert {0, 3} <= set(cols.tolist())
        coef = dict(zip(cols.tolist(), lin.coef_, strict=True))
        assert abs(coef[0] - 3) < 0.15 and abs(coef[3] + 2) < 0.15
        passes += len(cols) - 2
    assert passes <= 8
    cols, lin = sparse_linear_mean(X, np.random.default_rng(99).standard_normal(400))
    assert lin is None and cols.size == 0


def test_linear_mean_generated_tables_fit_with_their_peers(tmp_path: Path) -> None:
    from benchmarks import linear_mean

    shapes = {
        "regression-20-of-303": (227, 30, 20),
        "sparse-uncorrelated-300": (225, 20, 4),
        "friedman1-400": (300, 20, 5),
        "mixed-400": (300, 22, 11),
    }
    got = list(linear_mean.generated_splits(list(linear_mean.GENERATED), 1))
    assert [name for name, _, _ in got] == list(linear_mean.GENERATED)
    for name, split, d in got:
        assert split == 0 and (*d["Xtr"].shape, d["n_true"]) == shapes[name]
        assert d["p"] == d["Xtr"].shape[1] and len(d["yte"]) == len(d["Xte"])
    again = list(linear_mean.generated_splits(["mixed-400"], 1))[0][2]
    np.testing.assert_array_equal(again["Xtr"], got[-1][2]["Xtr"])  # seeded

    out = tmp_path / "gen"
    linear_mean.main(
        ["--out", str(out), "--generated", "--datasets", "mixed-400", "--max-splits", "1"]
        + ["--max-iter", "2"]
    )
    with open(out / "peers.csv") as f:
        peers = {r["method"] for r in csv.DictReader(f)}
    assert peers == {"BayesianRidge", "GP", "MLP", "NGBoost", "LassoCV"}
    row = next(x for x in (out / "report.md").read_text().splitlines() if x.startswith("| mixed"))
    assert row.startswith("| mixed-400 (300) | 1 | ")
    # The peer columns: the best peer's name after the RMSE ratios and after the NLLs.
    assert sum(f"({m})" in row for m in peers) >= 1 and row.count(" | ") == 14


def test_temperature_lead_fits_both_arms_and_rewrites_its_report(tmp_path: Path) -> None:
    from benchmarks import temperature

    out = tmp_path / "temp"
    argv = ["--out", str(out), "--datasets", "wine", "--max-splits", "1"]
    temperature.main([*argv, "--max-iter", "3"])
    rows = _saved_rows(out)
    assert [r["arm"] for r in rows] == list(temperature.ARMS)
    # The defaults' arm is the fit's own predict_proba: the same draws at T = 1.
    assert float(rows[0]["temperature"]) == 1.0
    assert 0.1 <= float(rows[1]["temperature"]) <= 10.0
    # The oracle's T is the best of the grid on the test rows: no arm's log loss is lower.
    assert float(rows[2]["log_loss"]) <= min(float(r["log_loss"]) for r in rows) + 1e-12
    assert rows[0]["accuracy"] != "" and rows[0]["noise_kept"] == rows[1]["noise_kept"]
    for r in rows:
        assert 0 <= float(r["accuracy"]) <= 1 and 0 <= float(r["ece"]) <= 1
        assert np.isfinite(float(r["log_loss"])) and 0 <= int(r["noise_kept"]) <= 10
    report = (out / "report.md").read_text()
    assert "| wine (134) | 1 | " in report
    (out / "report.md").unlink()
    temperature.main([*argv, "--report-only"])
    assert (out / "report.md").read_text() == report


def test_classifier_selection_fits_its_arms_and_rewrites_its_report(tmp_path: Path) -> None:
    from benchmarks import classifier_selection as cs

    out = tmp_path / "sel"
    argv = ["--out", str(out), "--problems", "0", "37"]
    cs.main([*argv, "--max-iter", "3"])
    rows = _saved_rows(out)
    arms = [*cs.ARMS, cs.REFERENCE]
    assert [r["arm"] for r in rows] == arms * 2
    assert [int(r["rows"]) for r in rows] == [300] * 3 + [cs.PROBLEMS[37][0]] * 3
    for r in rows:
        assert 0 <= float(r["accuracy"]) <= 1 and 0 <= float(r["ece"]) <= 1
        assert np.isfinite(float(r["log_loss"]))
        if r["arm"] != cs.REFERENCE:
            assert 0 <= int(r["true_kept"]) <= 5 and 0 <= int(r["noise_kept"]) <= 15
    # The problems' informative inputs are the first five, and the training rows hold
    # every class (the rows are permuted after make_classification's ordered ones).
    d = cs.problem(37)
    assert d["Xtr"].shape == (cs.PROBLEMS[37][0], 20) and len(d["yte"]) == cs.TEST_ROWS
    assert set(np.unique(d["ytr"])) == set(range(cs.PROBLEMS[37][1]))
    report = (out / "report.md").read_text()
    assert "| 300 | 1 | select-refit |" in report and "p37 (" in report
    (out / "report.md").unlink()
    cs.main([*argv, "--report-only"])
    assert (out / "report.md").read_text() == report
    with pytest.raises(SystemExit) as bad:
        cs.main(["--out", str(out), "--arm", "x={1}"])
    assert bad.value.code == 2


def test_temperature_lead_runs_a_generated_problem(tmp_path: Path) -> None:
    from benchmarks import temperature

    out = tmp_path / "gen"
    temperature.main(["--out", str(out), "--generated", "--problems", "4", "--max-iter", "3"])
    rows = _saved_rows(out)
    assert [r["arm"] for r in rows] == list(temperature.ARMS)
    assert {r["dataset"] for r in rows} == {temperature.generated_name(4)}
    n, classes, _ = temperature.GENERATED[4]
    assert f"| {temperature.generated_name(4)} ({n}) | 1 | " in (out / "report.md").read_text()
    d = temperature.generated_split(4)
    assert d["Xtr"].shape == (n, 20) and d["Xte"].shape == (1000, 20)
    assert set(np.unique(d["ytr"])) == set(range(classes))
    for bad in (["--generated", "--datasets", "wine"], ["--problems", "1"]):
        with pytest.raises(SystemExit):
            temperature.main(["--out", str(out), *bad])


def test_temperature_draws_are_predict_probas() -> None:
    # tempered(logit_draws(est, X), 1) is predict_proba(X) (the same draws, softmax after);
    # the grid's T minimises the held-out log loss: T < 1 sharpens, T > 1 flattens.
    from sklearn.datasets import load_iris

    from benchmarks.temperature import fit_temperature, log_loss, logit_draws, tempered
    from svbnn import SVBNNClassifier

    X, y = load_iris(return_X_y=True)
    X = (X - X.mean(0)) / X.std(0)
    est = SVBNNClassifier(random_state=0, max_iter=20, tol=None).fit(X, y)
    logits = logit_draws(est, X)
    np.testing.assert_allclose(tempered(logits, 1.0), est.predict_proba(X), rtol=0, atol=1e-12)
    T = fit_temperature(logits, y)
    grid = np.exp(np.linspace(np.log(0.1), np.log(10.0), 201))[::40]  # points of its grid
    assert all(
        log_loss(tempered(logits, T), y) <= log_loss(tempered(logits, t), y) + 1e-12 for t in grid
    )


def test_weighted_fits_times_its_three_arms(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import weighted_fits as wf

    wf.main(["--repeats", "1", "--max-iter", "2"])
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("| ") and not line.startswith("| data")]
    assert [r.split(" | ")[0] for r in rows] == [
        "| diabetes",
        "| breast cancer",
        "| 3 classes, 70/20/10",
    ]
    for r in rows:
        cells = r.strip("|").split(" | ")
        assert all(float(c) > 0 for c in cells[2:5])  # the three arms' times
        assert all(1 <= int(e) <= 2 for e in cells[7].split(" / "))  # within the budget
    # The regressor's rows are weighted by sample_weight, the classifiers' by class.
    tables = wf.tables()
    assert tables["diabetes"][4] is not None and tables["breast cancer"][4] is None
    with pytest.raises(SystemExit) as bad:
        wf.main(["--repeats", "0"])
    assert bad.value.code == 2


def test_refit_band_prints_one_row_per_size(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import refit_band as rb

    rb.main(["--sizes", "60", "80", "--seeds", "1", "--inputs", "6", "--max-iter", "2"])
    rows = [
        r for r in capsys.readouterr().out.splitlines() if r.startswith("| ") and "|---" not in r
    ]
    assert [r.split(" | ")[0:2] for r in rows[1:]] == [["| 60", "6"], ["| 80", "6"]]
    for r in rows[1:]:
        cells = r.strip("|").split(" | ")
        assert float(cells[2]) > 0 and float(cells[3]) > 0 and float(cells[4]) > 0
        assert float(cells[7]) == 2  # the fixed budget, the refit's too (max_iter set)
    X_tr, y_tr, X_te, y_te = rb.table(60, 6, 0)
    assert X_tr.shape == (60, 6) and X_te.shape == (rb.N_TEST, 6)
    np.testing.assert_allclose(X_tr.mean(0), 0.0, atol=1e-12)
    args = ["--sizes", "60", "--seeds", "1", "--inputs", "22", "--max-iter", "2"]
    rb.main([*args, "--classes", "3"])
    out = capsys.readouterr().out.splitlines()
    assert "whole refit: ECE" in out[0]
    cells = out[2].strip("| ").split(" | ")
    assert cells[:2] == ["60", "22"] and len(cells) == len(out[0].split(" | "))
    assert 0 <= float(cells[5]) <= 1 and float(cells[7]) > 0  # accuracy, log loss
    assert 0 <= float(cells[11]) <= rb.NOISE_COLUMNS and float(cells[13]) == 2
    X_tr, y_tr, X_te, y_te = rb.table(60, 22, 0, classes=3)
    assert X_tr.shape == (60, 22) and set(np.unique(y_tr)) == {0, 1, 2}
    bad_args = (["--seeds", "0"], ["--inputs", "4"], ["--sizes", "10"], ["--classes", "1"])
    for bad in (*bad_args, ["--classes", "2", "--inputs", "21"]):
        with pytest.raises(SystemExit) as err:
            rb.main(bad)
        assert err.value.code == 2


def test_noise_tables_prints_both_arms_per_size(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import noise_tables as nt

    nt.main(["--sizes", "40", "--seeds", "1", "--max-iter", "2"])
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| 40 ")]
    assert [r.split(" | ")[1:3] for r in rows] == [
        ["2", "defaults"],
        ["2", "one fit at 0.2"],
        ["3", "defaults"],
        ["3", "one fit at 0.2"],
    ]
    for r in rows:
        cells = r.strip("|").split(" | ")
        assert 0 <= float(cells[4]) <= 20 and 0 <= float(cells[5]) <= 1
        # The defaults check their fit on held-out rows below 500 rows; one fit does not.
        assert (cells[6] != "-") == (cells[2] == "defaults")
    X_tr, y_tr, X_te, y_te = nt.table(40, 3, 0)
    assert X_tr.shape == (40, 20) and X_te.shape == (nt.N_TEST, 20) and set(y_tr) <= {0, 1, 2}
    for bad_args in (["--seeds", "0"], ["--arm", "eb={"]):
        with pytest.raises(SystemExit) as bad:
            nt.main(bad_args)
        assert bad.value.code == 2
    nt.main(
        [
            "--sizes",
            "40",
            "--seeds",
            "1",
            "--max-iter",
            "2",
            "--arm",
            'eb={"prior_inclusion": "eb"}',
        ]
    )
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| 40 ")]
    assert [r.split(" | ")[2] for r in rows] == ["eb", "eb"]
    nt.main(["--regression", "--sizes", "40", "--seeds", "1", "--max-iter", "2"])
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| 40 ")]
    assert [r.split(" | ")[1:3] for r in rows] == [["-", "defaults"], ["-", "first fit alone"]]
    gains = [r.strip("|").split(" | ")[6] for r in rows]
    # The defaults' refit, where one is made, is checked on held-out rows; the first fit
    # alone never is.
    assert gains[1] == "-" and (gains[0] == "-" or not math.isnan(float(gains[0])))


def test_first_fit_prints_both_arms_and_no_compiler_import(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from benchmarks import first_fit as ff

    args = ["--sizes", "60", "--repeats", "1", "--inputs", "22", "--max-iter", "5"]
    ff.main([*args, "--kinds", "regressor"])
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| ")]
    cells = rows[1].strip("| ").split(" | ")
    assert cells[:2] == ["regressor", "60"] and len(cells) == len(rows[0].split(" | "))
    assert float(cells[2]) > 0 and float(cells[3]) > 0 and float(cells[5]) > 0
    assert cells[6] == "no"  # the first fit did not import torch._dynamo
    for bad in (["--repeats", "0"], ["--inputs", "21"], ["--max-iter", "0"]):
        with pytest.raises(SystemExit) as err:
            ff.main(bad)
        assert err.value.code == 2


def test_native_ab_fits_every_table_the_same_from_a_seed() -> None:
    # The fits' comparison of two trees reads "the same predictions" from digests: a fit of
    # one tree must give the same digest from the same seed, and another from another seed.
    from benchmarks import native_ab

    for table in native_ab.FIT_TABLES:
        a, b, c = (native_ab._fit(table, seed, max_iter=2) for seed in (0, 0, 1))
        assert a["s"] > 0 and len(a["predictions_sha256"]) == 64
        assert a["predictions_sha256"] == b["predictions_sha256"] != c["predictions_sha256"]
    with pytest.raises(ValueError):
        native_ab._fit_table("no-such-table")


def test_classifier_calibration_prints_every_method(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import classifier_calibration as cc

    args = ["--sizes", "60", "--classes", "3", "--seeds", "1", "--inputs", "22"]
    cc.main([*args, "--max-iter", "2"])
    rows = [r for r in capsys.readouterr().out.splitlines() if r.startswith("| ")]
    assert [r.strip("| ").split(" | ")[2] for r in rows[1:]] == list(cc.METHODS)
    for r in rows[1:]:
        cells = r.strip("| ").split(" | ")
        assert cells[:2] == ["3", "60"]
        assert 0 <= float(cells[3]) <= 1 and float(cells[4]) > 0  # accuracy, log loss
        assert 1 / 3 <= float(cells[6]) <= 1  # the mean top-class probability
        oracle = cells[8:11] if cells[2] == "SVBNN" else None
        assert oracle is None or (
            0.1 <= float(oracle[0]) <= 10.0 and float(oracle[1]) <= float(cells[4]) + 1e-12
        )
    # The oracle's temperature (benchmarks.temperature's) of calibrated draws is 1; of
    # flattened ones, every logit halved, 0.5 (which sharpens them back).
    from benchmarks.temperature import fit_temperature

    rng = np.random.default_rng(0)
    proba = rng.dirichlet(np.ones(3), size=4000)
    y = np.array([rng.choice(3, p=q) for q in proba])
    logits = torch.log(torch.as_tensor(proba))[None]  # one draw, (1, n, C)
    assert abs(fit_temperature(logits, y) - 1.0) <= 0.1
    assert abs(fit_temperature(0.5 * logits, y) - 0.5) <= 0.05
    for bad in (["--seeds", "0"], ["--classes", "1"], ["--inputs", "21"], ["--sizes", "10"]):
        with pytest.raises(SystemExit) as err:
            cc.main(bad)
        assert err.value.code == 2


def test_input_scale_warns_on_the_off_scale_tables_only(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks import input_scale

    input_scale.main(["--scales", "1", "10", "0.03", "--seeds", "1", "--max-iter", "2"])
    rows = [r.strip("|").split(" | ") for r in capsys.readouterr().out.splitlines()[2:]]
    assert [(r[0].strip(), r[-1].strip()) for r in rows] == [
        ("1", "no"),
        ("10", "yes"),
        ("0.03", "yes"),
    ]
    for bad in (["--seeds", "0"], ["--scales", "0"]):
        with pytest.raises(SystemExit) as err:
            input_scale.main(bad)
        assert err.value.code == 2


def test_seed_ensemble_fits_its_members_and_their_mixture(tmp_path: Path) -> None:
    from benchmarks import seed_ensemble

    out = tmp_path / "se"
    argv = ["--out", str(out), "--datasets", "diabetes", "--max-splits", "1", "--max-iter", "2"]
    seed_ensemble.main(argv)
    rows = _saved_rows(out)
    assert [r["arm"] for r in rows] == ["member 0", "member 1", seed_ensemble.ENSEMBLE]
    members, ensemble = rows[:2], rows[2]
    # The mixture's mean is the members' mean: its RMSE is at most theirs (convexity).
    assert float(ensemble["rmse"]) <= statistics.mean(float(r["rmse"]) for r in members) + 1e-9
    for r in rows:
        assert np.isfinite(float(r["nll"])) and 0 <= float(r["coverage"]) <= 1
    assert float(ensemble["fit_s"]) == pytest.approx(sum(float(r["fit_s"]) for r in members))
    assert "| diabetes (332) | 1 | " in (out / "report.md").read_text()
    for bad in (["--members", "1"], ["--rows", "4"], ["--rows", "100000"]):
        with pytest.raises(SystemExit) as err:
            seed_ensemble.main([*argv, *bad])
        assert err.value.code == 2
    # --rows: that many rows of the table, split 75/25 (30 training rows of 40).
    seed_ensemble.main([*argv, "--rows", "40"])
    assert json.loads((out / "settings.json").read_text())["train_rows"] == {"diabetes": 30}


def test_a_mixture_interval_holds_its_level() -> None:
    from scipy.stats import norm

    from benchmarks.seed_ensemble import _mixture_interval

    mean, sd = np.array([[0.0, 1.0], [2.0, 1.0]]), np.array([[1.0, 0.5], [0.5, 0.5]])
    lo, hi = _mixture_interval(mean, sd)
    for i in range(2):
        mass = np.mean(
            norm.cdf(hi[i], mean[:, i], sd[:, i]) - norm.cdf(lo[i], mean[:, i], sd[:, i])
        )
        assert mass == pytest.approx(0.95, abs=1e-9)
    # Two equal members: the one Gaussian's interval.
    assert (lo[1], hi[1]) == pytest.approx((1.0 - 1.96 * 0.5, 1.0 + 1.96 * 0.5), abs=1e-3)
