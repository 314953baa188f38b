"""The reproduction harness: registry, every artifact in --quick mode, reports, CLI."""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from svbnn import KernelBackend, get_kernel_backend
from svbnn._engine import native as _native
from svbnn.data import dense_teacher
from svbnn_experiments import ARTIFACTS, artifact_names, estimate, get_artifact, resolve_config
from svbnn_experiments import methods as methods_mod
from svbnn_experiments.cli import main
from svbnn_experiments.common import (
    Chunk,
    CoverageSpec,
    Problem,
    derive_seed,
    layout_chunks,
    run_chunk,
    usable_cpus,
)
from svbnn_experiments.methods import FitSpec, FittedReplicates, Method
from svbnn_experiments.paper_values import COVERAGE, TABLE1, TABLE2, paper_value
from svbnn_experiments.report import fmt_mean_sd, mean_sd

# Listed explicitly: removing or renaming an artifact must fail this test.
EXPECTED_ARTIFACTS = [
    "table1-dense",
    "table1-sparse",
    "table2",
    "coverage",
    "fig-lambda-sparse-teacher",
    "fig-lambda-dense-teacher",
    "fig-lambda-sim2",
    "fig-selected-network",
    "fig-linear-toy",
    "fig-gumbel-convergence",
]

BASE_FILES = ["results.csv", "settings.json", "report.md"]
EXTRA_FILES: dict[str, list[str]] = {
    "fig-lambda-sparse-teacher": ["lambda_sweep.png", "summary.csv"],
    "fig-lambda-dense-teacher": ["lambda_sweep.png", "summary.csv"],
    "fig-lambda-sim2": ["lambda_sweep.png", "summary.csv"],
    "fig-selected-network": ["selected_network.png", "network.csv"],
    "fig-linear-toy": ["linear_toy.png", "coefficients.csv"],
    "fig-gumbel-convergence": ["gumbel_convergence.png"],
}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_expected_artifact_is_registered() -> None:
    names = artifact_names()
    missing = [n for n in EXPECTED_ARTIFACTS if n not in names]
    assert not missing, f"artifacts not registered: {missing}"
    for name in EXPECTED_ARTIFACTS:
        art = get_artifact(name)
        assert art.description and art.run is not None and art.report is not None


@pytest.fixture(scope="module")
def quick_all(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`svbnn reproduce all --quick` into a temporary folder (the smoke run of everything)."""
    torch.set_num_threads(1)
    out = tmp_path_factory.mktemp("quick")
    # Real-data artifacts are smoke-tested on generated files in test_realdata_experiments;
    # here `all` runs without a data directory and must skip them.
    saved = os.environ.pop("SVBNN_DATA", None)
    try:
        assert main(["reproduce", "all", "--quick", "--out", str(out), "--no-progress"]) == 0
    finally:
        if saved is not None:
            os.environ["SVBNN_DATA"] = saved
    return out


@pytest.mark.parametrize("name", EXPECTED_ARTIFACTS)
def test_quick_run_writes_expected_files(quick_all: Path, name: str) -> None:
    folder = quick_all / name
    for f in BASE_FILES + EXTRA_FILES.get(name, []):
        assert (folder / f).is_file(), f"{name}: {f} missing"
        assert (folder / f).stat().st_size > 0, f"{name}: {f} empty"
    rows = _rows(folder / "results.csv")
    assert rows, f"{name}: results.csv has no rows"
    settings = json.loads((folder / "settings.json").read_text())
    assert settings["artifact"] == name
    assert settings["config"]["quick"] is True
    for key in ("svbnn", "torch", "numpy", "git"):
        assert key in settings["environment"]
    assert settings["wall_time_s"] >= 0
    cfg = resolve_config(get_artifact(name), quick=True)
    if name.startswith(("table", "coverage")):
        n_settings = 2 if name == "coverage" else 1
        assert len(rows) == cfg.reps * n_settings
        for r in rows:
            for col in (
                "train_rmse",
                "test_rmse",
                "test_rmse_f",
                "test_rmse_median",
                "fpr_pct",
                "fnr_pct",
                "sparsity_pct",
                "density_pct",
                "wall_s",
            ):
                assert math.isfinite(float(r[col])), (name, col)
            assert 0.0 <= float(r["sparsity_pct"]) <= 100.0
    if name.startswith("fig-lambda"):
        assert len(rows) == 13 * cfg.reps
        assert {r["lambda_label"] for r in rows} >= {"1e-200", "opt", "0.99"}
    if name in ("coverage", "table1-dense", "table1-sparse"):
        for r in rows:
            for lv in (90, 95):
                for j in (1, 2, 3):
                    assert 0.0 <= float(r[f"coverage{lv}_x{j}_pct"]) <= 100.0


def test_table2_report_has_paper_values(quick_all: Path) -> None:
    text = (quick_all / "table2" / "report.md").read_text()
    assert "1.21 ± 0.05" in text  # published SVBNN test RMSE
    assert "16.0 ± 8.1" in text  # published SVBNN FNR
    assert "uniform" in text  # covariate law recorded


def test_report_only_rebuilds_from_csv(quick_all: Path, tmp_path: Path) -> None:
    import shutil

    for name in ("table2", "fig-lambda-sim2", "fig-selected-network"):
        folder = tmp_path / name
        shutil.copytree(quick_all / name, folder)
        for f in folder.glob("*.png"):
            f.unlink()
        (folder / "report.md").unlink()
        assert main(["reproduce", name, "--report-only", "--out", str(folder)]) == 0
        assert (folder / "report.md").read_text().startswith("# ")
        for f in EXTRA_FILES.get(name, []):
            assert (folder / f).is_file()


def test_report_only_without_results_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["reproduce", "table2", "--report-only", "--out", str(tmp_path / "none")]) == 2
    assert "run table2 first" in capsys.readouterr().err


def test_list_shows_all_artifacts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "--list"]) == 0
    out = capsys.readouterr().out
    for name in EXPECTED_ARTIFACTS:
        assert name in out
    assert "estimated" in out


def test_console_entry_point_lists() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "svbnn_experiments.cli", "reproduce", "--list"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr
    assert "table2" in res.stdout


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["reproduce", "table2", "--methods", "svbnn,foo"], "unknown method"),
        (["reproduce", "table1-dense", "--covariates", "normal"], "does not apply"),
        (["reproduce", "nonsense"], "unknown artifact"),
        (["reproduce", "table2", "--set", "no_such_key=1"], "no such setting"),
        (["reproduce", "table2", "--reps", "0"], "must be positive"),
    ],
)
def test_cli_errors_are_clear(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_every_paper_method_is_registered() -> None:
    # Importing svbnn_experiments registers the baselines next to SVBNN.
    assert set(methods_mod.METHOD_NAMES) == {"svbnn", "vbnn", "vd", "hsbnn", "agp", "lot"}
    assert sorted(methods_mod.available_methods()) == sorted(methods_mod.METHOD_NAMES)
    for name in methods_mod.METHOD_NAMES:
        assert isinstance(methods_mod.get_method(name), Method)
    with pytest.raises(ValueError, match="unknown method"):
        methods_mod.get_method("foo")


def test_same_seed_same_results(tmp_path: Path) -> None:
    from svbnn_experiments import reproduce

    ov: dict[str, Any] = {"reps": 2, "epochs": 3, "progress": False, "params": {"n_test": 50}}
    a = reproduce("table1-sparse", ov, quick=True, out=tmp_path / "a")
    b = reproduce("table1-sparse", ov, quick=True, out=tmp_path / "b")
    c = reproduce("table1-sparse", {**ov, "seed": 1}, quick=True, out=tmp_path / "c")
    drop = {"wall_s", "chunk_train_s"}
    ra = [{k: v for k, v in r.items() if k not in drop} for r in _rows(a / "results.csv")]
    rb = [{k: v for k, v in r.items() if k not in drop} for r in _rows(b / "results.csv")]
    rc = [{k: v for k, v in r.items() if k not in drop} for r in _rows(c / "results.csv")]
    assert ra == rb
    assert [r["data_seed"] for r in ra] != [r["data_seed"] for r in rc]
    # replications draw different data
    assert ra[0]["data_seed"] != ra[1]["data_seed"]


def test_kernels_option_applies_to_the_run_only(tmp_path: Path) -> None:
    # table2 --quick trains a replicated network: 'auto' runs it with svbnn's native loops
    # (nothing compiled in the test suite), and settings.json records the backend the seed
    # needs.
    assert get_kernel_backend() is KernelBackend.EAGER
    saved = os.environ.get("SVBNN_KERNELS")
    argv = ["reproduce", "table2", "--quick", "--reps", "1", "--no-progress"]
    assert main([*argv, "--kernels", "auto", "--out", str(tmp_path)]) == 0
    settings = json.loads((tmp_path / "settings.json").read_text())
    assert settings["environment"]["svbnn_kernels"] == "auto"
    assert get_kernel_backend() is KernelBackend.EAGER
    assert os.environ.get("SVBNN_KERNELS") == saved


def test_table2_runs_with_its_own_kernels_unless_told_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, native_steps: list[int]
) -> None:
    # table2's default is auto (its replicated narrow network runs on the native loops,
    # nothing compiled); --kernels and SVBNN_KERNELS override it; other artifacts keep the
    # library's eager default.
    monkeypatch.delenv("SVBNN_KERNELS", raising=False)
    argv = ["reproduce", "table2", "--quick", "--reps", "1", "--no-progress", "--out"]

    def kernels(out: Path) -> str:
        backend: str = json.loads((out / "settings.json").read_text())["environment"][
            "svbnn_kernels"
        ]
        return backend

    # Under auto its training step is NativeNegativeElbo's (the model reaches negative_elbo
    # unwrapped, so the model's own fused path applies); not under eager.
    steps = native_steps
    assert main([*argv, str(tmp_path / "default")]) == 0
    assert kernels(tmp_path / "default") == "auto"
    assert (len(steps) > 0) == _native.available()
    steps.clear()
    assert main([*argv, str(tmp_path / "option"), "--kernels", "eager"]) == 0
    assert kernels(tmp_path / "option") == "eager"
    assert not steps
    monkeypatch.setenv("SVBNN_KERNELS", "eager")
    assert main([*argv, str(tmp_path / "environment")]) == 0
    assert kernels(tmp_path / "environment") == "eager"
    assert get_kernel_backend() is KernelBackend.EAGER
    assert [n for n in artifact_names() if get_artifact(n).kernels is not None] == ["table2"]
    # Without the native loops (no C++ compiler) the default stays eager: auto would need
    # the compiler for torch.compile.
    monkeypatch.delenv("SVBNN_KERNELS")
    monkeypatch.setattr(_native, "available", lambda: False)
    assert main([*argv, str(tmp_path / "no-compiler")]) == 0
    assert kernels(tmp_path / "no-compiler") == "eager"


def test_demo_runs_and_prints_paper_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--epochs", "2", "--reps", "1", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "paper Table 2" in out and "1.21 ± 0.05" in out and "selected" in out


def test_estimate_extrapolates(tmp_path: Path) -> None:
    res = estimate(
        "table2",
        {"reps": 2, "jobs": 1, "progress": False, "params": {"n_test": 100}},
        epochs=2,
        out=tmp_path,
    )
    (shape,) = res["shapes"]
    assert shape["replicates_per_network"] == 2 and shape["steps_per_epoch"] == 6
    assert shape["full_epochs"] == 7000
    assert shape["per_step_ms"] > 0 and res["estimated_total_s"] > 0
    assert (tmp_path / "estimate.json").is_file()


# ------------------------------------------------------------------------ unit pieces
def test_layout_chunks_covers_everything_once() -> None:
    for n, batch in [(30, 60), (30, 8), (390, 65), (7, 3), (2, 60)]:
        chunks = layout_chunks(n, batch)
        flat = [i for c in chunks for i in c]
        assert flat == list(range(n))
        assert max(len(c) for c in chunks) <= batch
        assert len(chunks) == -(-n // batch)
        assert max(len(c) for c in chunks) - min(len(c) for c in chunks) <= 1
    with pytest.raises(ValueError):
        layout_chunks(0, 1)


def test_a_seed_gives_one_answer_whatever_jobs(tmp_path: Path) -> None:
    """Replication r's numbers depend on the settings, the seed and r only: --jobs 1 and
    --jobs 2 (which runs chunks in two processes) give the same results.csv, bit for bit."""
    args = ["reproduce", "table2", "--quick", "--no-progress", "--reps", "3", "--epochs", "2"]
    for jobs in ("1", "2"):
        assert main([*args, "--jobs", jobs, "--out", str(tmp_path / jobs)]) == 0

    def numbers(folder: str) -> list[dict[str, str]]:
        rows = _rows(tmp_path / folder / "results.csv")
        return [{k: v for k, v in r.items() if k not in ("wall_s", "chunk_train_s")} for r in rows]

    one, two = numbers("1"), numbers("2")
    assert len(one) == 3 and one == two
    # With --batch 1 the chunks run in two processes: tests/test_distributed.py
    # (test_local_cluster_gives_the_numbers_of_jobs) checks those against --jobs 1 too.


def test_default_jobs_are_the_usable_cpus() -> None:
    # One worker process per usable CPU (one torch thread each); --quick smoke runs and
    # explicit --jobs as given (recorded in the config; the layout does not depend on it).
    cpus = usable_cpus()
    assert 1 <= cpus <= (os.cpu_count() or 1)
    table2 = get_artifact("table2")
    cfg = resolve_config(table2)
    assert (cfg.jobs, cfg.threads) == (cpus, 1) and cfg.as_dict()["jobs"] == cpus
    assert resolve_config(table2, quick=True).jobs == 1
    assert resolve_config(table2, {"jobs": 3}, quick=True).jobs == 3


def test_derive_seed_is_deterministic_and_distinct() -> None:
    assert derive_seed(0, 1, 3, 0) == derive_seed(0, 1, 3, 0)
    seeds = {derive_seed(0, 1, 3, r) for r in range(100)}
    assert len(seeds) == 100
    assert derive_seed(0, 1, 3, 0) != derive_seed(1, 1, 3, 0)


def test_dense_teacher_problem_matches_library() -> None:
    d = dense_teacher(n=5, n_test=50, random_state=7)
    f = Problem("dense-teacher", 20, teacher_seed=7).f0(d.X_test)
    np.testing.assert_allclose(f, d.f_test, rtol=1e-12)


def test_problem_draws_follow_seed_and_law() -> None:
    p = Problem("sim2", 200, covariates="uniform")
    X, y, f = p.draw(400, 3)
    X2, _, _ = p.draw(400, 3)
    np.testing.assert_array_equal(X, X2)
    assert X.min() >= -1 and X.max() <= 1
    # residual y - f is the N(0, 1) noise: its mean is within 5 standard errors of 0
    assert abs((y - f).mean()) < 5 / math.sqrt(400)
    Xn, _, _ = Problem("sim2", 200, covariates="normal").draw(400, 3)
    assert Xn.min() < -1 or Xn.max() > 1
    with pytest.raises(ValueError):
        Problem("sim2", 200, covariates="cauchy")


def test_coverage_grid() -> None:
    spec = CoverageSpec(x_star=(0.1, -0.2, 0.3, 0.4), n_grid=11)
    g = spec.grid(2)
    assert g.shape == (11, 4)
    np.testing.assert_allclose(g[:, 2], np.linspace(-1, 1, 11))
    np.testing.assert_allclose(g[:, [0, 1, 3]], np.tile([0.1, -0.2, 0.4], (11, 1)))


def test_paper_values() -> None:
    assert TABLE2["svbnn"]["test_rmse"] == (1.21, 0.05)
    assert paper_value("table1", "svbnn", "sparsity_pct", "sparse") == (2.15, 0.25)
    assert paper_value("table1", "vbnn", "fpr_pct", "dense") is None
    assert paper_value("coverage", "svbnn", "coverage95_x3_pct", "dense") == (97.5, 1.71)
    # Table 1's coverage column is the coverage table's x3 (dense) and x1 (sparse) at 95%.
    # The paper itself disagrees on one sd (VBNN dense: 3.89 in Table 1, 2.43 in Table 5).
    for setting, x in (("dense", 3), ("sparse", 1)):
        for m in ("svbnn", "vbnn", "vd", "hsbnn"):
            t1 = TABLE1[setting][m]["coverage95_pct"]
            t5 = COVERAGE[setting][m][f"coverage95_x{x}_pct"]
            assert t1 is not None and t5 is not None and t1[0] == t5[0]
    assert TABLE1["dense"]["vbnn"]["coverage95_pct"] == (91.4, 3.89)
    assert COVERAGE["dense"]["vbnn"]["coverage95_x3_pct"] == (91.4, 2.43)
    with pytest.raises(ValueError):
        paper_value("table1", "svbnn", "test_rmse")


def test_mean_sd_and_format() -> None:
    m, s, n = mean_sd([1.0, 2.0, 3.0, None])
    assert (m, n) == (2.0, 3) and s == pytest.approx(1.0)
    assert math.isnan(mean_sd([1.0])[1])
    assert fmt_mean_sd(1.2345, 0.0512) == "1.23 ± 0.05"
    assert fmt_mean_sd(float("nan"), 0.1) == "-"


class _OracleFitted(FittedReplicates):
    """Posterior draws f0(x) + b(x) + s z with an offset b(x) ~ N(0, s^2): the credible
    interval at level L covers f0 with probability L exactly (up to quantile error)."""

    def __init__(self, problem: Problem, R: int, s: float = 0.3) -> None:
        self.problem, self.n_replicates, self.s = problem, R, s

    def sample_outputs(self, X: torch.Tensor, n_samples: int, generator: Any) -> torch.Tensor:
        f = torch.tensor(np.stack([self.problem.f0(x.double().numpy()) for x in X]))
        b = self.s * torch.randn(f.shape, generator=generator, dtype=f.dtype)
        z = torch.randn((n_samples, *f.shape), generator=generator, dtype=f.dtype)
        return f + b + self.s * z

    def selected_features(self) -> list[Any]:
        return [self.problem.relevant] * self.n_replicates


class _Oracle(Method):
    def fit(self, X: torch.Tensor, y: torch.Tensor, spec: FitSpec, generator: Any) -> Any:
        return _OracleFitted(Problem("sparse-teacher", 100), X.shape[0])


def test_coverage_protocol_reaches_nominal_level(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(methods_mod._METHODS, "oracle", _Oracle)
    prob = Problem("sparse-teacher", 100)
    R = 2
    chunk = Chunk(
        index=0,
        method="oracle",
        problem=prob,
        spec=FitSpec(in_features=100, hidden=(6, 6), activation="tanh", epochs=0, batch_size=8),
        reps=tuple(range(R)),
        data_seeds=(1, 2),
        train_seed=0,
        n_train=8,
        test_seed=3,
        n_test=20,
        n_predict=5,
        coverage=CoverageSpec(x_star=tuple(np.linspace(-0.5, 0.5, 100)), n_draws=600, n_grid=1000),
    )
    res = run_chunk(chunk)
    for lv in (90, 95):
        # 1000 grid points x R replications of independent Bernoulli(level) indicators:
        # allow 4 binomial standard errors (plus ~0.5% for quantile estimation with 600 draws).
        se = math.sqrt(lv / 100 * (1 - lv / 100) / (1000 * R))
        for j in (1, 2, 3):
            cov = np.mean([r[f"coverage{lv}_x{j}_pct"] for r in res.rows]) / 100
            assert abs(cov - lv / 100) < 4 * se + 0.005, (lv, j, cov)
    assert all(r["fpr_pct"] == 0 and r["fnr_pct"] == 0 for r in res.rows)


def test_svbnn_method_uses_one_prior_inclusion_per_replicate() -> None:
    # Replicate 0 gets lambda = 1e-200, replicate 1 lambda = 0.99, on the same data. With
    # lambda = 1e-200 the KL's pull on every alpha dwarfs the rest, so Adam moves alpha down
    # by about lr per step: 60 steps of 5e-3 take phi from 0.99 (alpha 4.6) to about 0.987.
    # With lambda = 0.99 the pull is far weaker, so replicate 1 stays denser.
    prob = Problem("sim2", 10)
    X1, y1, _ = prob.draw(200, 0)
    X = torch.tensor(np.stack([X1, X1]), dtype=torch.float32)
    y = torch.tensor(np.stack([y1, y1]), dtype=torch.float32)
    spec = FitSpec(
        in_features=10,
        hidden=(4,),
        activation="relu",
        epochs=60,
        batch_size=200,
        log_prior_inclusion=(-200 * math.log(10.0), math.log(0.99)),
    )
    fitted = methods_mod.get_method("svbnn").fit(X, y, spec, torch.Generator().manual_seed(0))
    sp = fitted.sparsity()
    assert sp is not None and sp[0] < 0.9875 and sp[1] > sp[0] + 1e-3
    draws = fitted.sample_outputs(X, 3, torch.Generator().manual_seed(1))
    assert draws.shape == (3, 2, 200)
    phi_mu = fitted.layer_inclusion(1)
    assert phi_mu is not None and [p.shape for p, _ in phi_mu] == [(4, 10), (1, 4)]


def test_registry_rejects_duplicates() -> None:
    from svbnn_experiments.registry import register_artifact

    with pytest.raises(ValueError, match="already registered"):
        register_artifact("table2", description="x", report=lambda out: None)(lambda cfg: {})
    assert len(ARTIFACTS) >= len(EXPECTED_ARTIFACTS)
