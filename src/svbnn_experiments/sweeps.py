"""The lambda sweeps of Figures 1, 2 and supplement Figure 7: RMSE against lambda.

The grid is the paper's: (a) {1e-200, 1e-150, 1e-100, 1e-50, 1e-20, 1e-5, lambda_opt},
(b) {lambda_opt, 0.1, 0.3, 0.5, 0.7, 0.9, 0.99}. Each lambda is one replicate of a batched
network (its own log-lambda via ``set_log_prior_inclusion``), and the networks of one
replication share its training data, so the curves compare lambdas on the same data.
Everything is in log-lambda, so 1e-200 needs no special care.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from .common import Chunk, RunConfig, lambda_opt_for
from .files import read_csv, read_settings, write_csv
from .plotting import plot_lambda_sweep
from .registry import Timing, register_artifact
from .report import group_rows, markdown_table, mean_sd, settings_section, write_report
from .simulations import (
    QUICK_TRAIN,
    SIM_DEFAULTS,
    TRAIN_DEFAULTS,
    _problem_record,
    build_problem,
    plan_replications,
    run_plan,
)

__all__ = ["LAMBDA_GRID", "lambda_grid"]

LAMBDA_GRID: tuple[tuple[str, float | None, str], ...] = (
    ("1e-200", -200.0, "a"),
    ("1e-150", -150.0, "a"),
    ("1e-100", -100.0, "a"),
    ("1e-50", -50.0, "a"),
    ("1e-20", -20.0, "a"),
    ("1e-5", -5.0, "a"),
    ("opt", None, "ab"),
    ("0.1", math.log10(0.1), "b"),
    ("0.3", math.log10(0.3), "b"),
    ("0.5", math.log10(0.5), "b"),
    ("0.7", math.log10(0.7), "b"),
    ("0.9", math.log10(0.9), "b"),
    ("0.99", math.log10(0.99), "b"),
)
"""``(label, log10 lambda or None for lambda_opt, panel)``: panel "a" is lambda <= lambda_opt."""


def lambda_grid(log_lambda_opt: float) -> list[tuple[str, float, str]]:
    """The grid with lambda_opt filled in: ``(label, natural log lambda, panel)``."""
    ln10 = math.log(10.0)
    return [
        (lab, log_lambda_opt if v is None else v * ln10, panel) for lab, v, panel in LAMBDA_GRID
    ]


def _plan(cfg: RunConfig, kind: str) -> list[Chunk]:
    problem = build_problem(cfg, kind)
    log_opt = lambda_opt_for(problem, cfg.params["hidden"], int(cfg.params["n_train"]))
    items = []
    for r in range(cfg.reps):
        for lab, log_lam, panel in lambda_grid(log_opt):
            labels = {
                "setting": kind,
                "lambda_label": lab,
                "log10_lambda": log_lam / math.log(10.0),
                "panel": panel,
            }
            items.append((r, log_lam, labels))
    return plan_replications(cfg, problem, items)


def _run(cfg: RunConfig, kind: str) -> dict[str, Any]:
    chunks = _plan(cfg, kind)
    results, extra = run_plan(cfg, chunks)
    write_csv(cfg.out / "results.csv", [r for res in results for r in res.rows])
    extra["problem"] = _problem_record(cfg, chunks[0].problem)
    extra["lambda_grid"] = [
        {"label": lab, "log10_lambda": v, "panel": p} for lab, v, p in LAMBDA_GRID
    ]
    return extra


def _teacher_drawing(settings: dict[str, Any], kind: str) -> Any:
    if kind == "sim2":
        return None
    from .common import _dense_teacher_layers

    if kind == "sparse-teacher":
        from svbnn.data import sparse_teacher

        params = sparse_teacher(n=1, n_test=1, random_state=0).params
        ws = [params[f"W{i}"] for i in (1, 2, 3)]
        return [w != 0 for w in ws], ws, [0, 1]
    seed = int(settings.get("problem", {}).get("teacher_seed") or 2020)
    ws = [w for w, _ in _dense_teacher_layers(seed)]
    return [w != 0 for w in ws], ws, list(range(20))


TITLES = {
    "sparse-teacher": "Simulation I (B), sparse teacher: RMSE against lambda (paper Figure 1)",
    "dense-teacher": "Simulation I (A), dense teacher: RMSE against lambda (supplement Figure 7)",
    "sim2": "Simulation II: RMSE against lambda (paper Figure 2)",
}


def _cell(v: tuple[float, float, int], d: int = 3) -> str:
    """``mean ± sd`` with ``d`` decimals (``-`` when the mean is not finite)."""
    if not math.isfinite(v[0]):
        return "-"
    return f"{v[0]:.{d}f}" + (f" ± {v[1]:.{d}f}" if math.isfinite(v[1]) else "")


def _lambda_summary(
    rows: list[dict[str, Any]],
) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """Per lambda (in increasing order), SVBNN's train and test RMSE over replications.

    Parameters
    ----------
    rows : list of dict
        Rows of ``results.csv``, one per method, lambda and replication.

    Returns
    -------
    summary : list of dict
        Rows of ``summary.csv`` (means and sds of the figure).
    table : list of list
        Rows of the report's table (RMSE, sparsity, density, FPR and FNR).
    """
    groups = group_rows([r for r in rows if r.get("method") == "svbnn"], ["lambda_label"])
    summary = []
    table = []
    for (lab,), g in sorted(groups.items(), key=lambda kv: float(kv[1][0]["log10_lambda"])):
        tr = mean_sd(r["train_rmse"] for r in g)
        te = mean_sd(r["test_rmse"] for r in g)
        sp = mean_sd(r.get("sparsity_pct") for r in g)
        de = mean_sd(r.get("density_pct") for r in g)
        fpr = mean_sd(r.get("fpr_pct") for r in g)
        fnr = mean_sd(r.get("fnr_pct") for r in g)
        l10 = float(g[0]["log10_lambda"])
        summary.append(
            {
                "lambda_label": lab,
                "log10_lambda": l10,
                "panel": g[0]["panel"],
                "train_mean": tr[0],
                "train_sd": tr[1],
                "test_mean": te[0],
                "test_sd": te[1],
                "n": tr[2],
            }
        )
        cells = [_cell(tr), _cell(te), _cell(sp, 2), _cell(de, 2), _cell(fpr, 1), _cell(fnr, 1)]
        table.append([lab, f"{l10:.2f}", tr[2], *cells])
    return summary, table


def _sweep_figure(
    out: Path, summary: list[dict[str, Any]], settings: dict[str, Any], kind: str
) -> Path:
    """``lambda_sweep.png``: the figure of ``summary``, with lambda_opt and the teacher."""
    opt = [s for s in summary if s["lambda_label"] == "opt"]
    log10_opt = float(opt[0]["log10_lambda"]) if opt else float("nan")
    return plot_lambda_sweep(
        out / "lambda_sweep.png",
        summary,
        log10_opt,
        title=TITLES[kind],
        teacher=_teacher_drawing(settings, kind),
    )


_HEADERS = [
    "lambda",
    "log10 lambda",
    "reps",
    "Train RMSE",
    "Test RMSE",
    "Sparsity sum(phi)/T (%)",
    "Density phi>0.5 (%)",
    "FPR (%)",
    "FNR (%)",
]

_SETTINGS = [
    ("config.reps", "replications per lambda"),
    ("config.epochs", "epochs"),
    ("problem.student", "student network"),
    ("problem.activation", "activation"),
    ("problem.log10_lambda_opt", "log10 lambda_opt"),
    ("config.params.n_train", "n"),
    ("config.params.batch_size", "minibatch m"),
    ("problem.covariates", "covariates"),
    ("config.init", "initialisation of mu"),
    ("config.seed", "base seed"),
    ("config.quick", "quick mode"),
    ("wall_time_s", "wall time (s)"),
    ("environment.git.commit", "git commit"),
]


def _report(out: Path, kind: str) -> None:
    """``report.md``, ``summary.csv`` and ``lambda_sweep.png`` of a lambda-sweep artifact."""
    rows = read_csv(out / "results.csv")
    settings = read_settings(out)
    summary, table = _lambda_summary(rows)
    write_csv(out / "summary.csv", summary)
    fig = _sweep_figure(out, summary, settings, kind)
    sections = [
        f"{TITLES[kind]}. The paper publishes this only as a figure, so there are no numbers "
        "to compare with; the expected shape: training RMSE falls as lambda grows, testing "
        "RMSE is U-shaped (sparse teacher, Simulation II) or slowly falling (dense teacher), "
        "with lambda_opt in the valley. Error bars are ± 1 sd over replications.",
        f"![lambda sweep]({fig.name})",
        markdown_table(_HEADERS, table),
        "## Settings\n\n" + settings_section(settings, _SETTINGS),
        "RMSE is of f_H (H = 30) against the noisy responses; per-replicate rows are in "
        "`results.csv`, the per-lambda means in `summary.csv`.",
    ]
    write_report(out, TITLES[kind].split(":")[0] + ": lambda sweep", sections)


_QUICK = {"reps": 1, "epochs": 10, **QUICK_TRAIN, "n_test": 300}
_OPTS = ("init", "dtype", "device")  # SVBNN only: lambda is its prior


def _defaults(kind: str) -> dict[str, Any]:
    return {**TRAIN_DEFAULTS, **SIM_DEFAULTS[kind], "reps": 30, "batch": 65}


def _plan_sparse(cfg: RunConfig) -> list[Chunk]:
    return _plan(cfg, "sparse-teacher")


def _plan_dense(cfg: RunConfig) -> list[Chunk]:
    return _plan(cfg, "dense-teacher")


def _plan_sim2(cfg: RunConfig) -> list[Chunk]:
    return _plan(cfg, "sim2")


@register_artifact(
    "fig-lambda-sparse-teacher",
    description="Figure 1 (a, b): RMSE against lambda, sparse teacher (B), 13 lambdas x 30 reps",
    report=lambda out: _report(out, "sparse-teacher"),
    defaults=_defaults("sparse-teacher"),
    quick=_QUICK,
    options=_OPTS,
    plan=_plan_sparse,
    group="figure",
    timing=Timing(quick_s=4.6, full_s=1211),
)
def fig_lambda_sparse_teacher(cfg: RunConfig) -> dict[str, Any]:
    return _run(cfg, "sparse-teacher")


@register_artifact(
    "fig-lambda-dense-teacher",
    description="Supplement Figure 7: RMSE against lambda, dense teacher (A), 13 lambdas x 30 reps",
    report=lambda out: _report(out, "dense-teacher"),
    defaults=_defaults("dense-teacher"),
    quick=_QUICK,
    options=_OPTS,
    plan=_plan_dense,
    group="figure",
    timing=Timing(quick_s=4.8, full_s=1481),
)
def fig_lambda_dense_teacher(cfg: RunConfig) -> dict[str, Any]:
    return _run(cfg, "dense-teacher")


@register_artifact(
    "fig-lambda-sim2",
    description="Figure 2 (a, b): RMSE against lambda, Simulation II, 13 lambdas x 30 reps",
    report=lambda out: _report(out, "sim2"),
    defaults=_defaults("sim2"),
    quick=_QUICK,
    options=(*_OPTS, "covariates"),
    plan=_plan_sim2,
    group="figure",
    timing=Timing(quick_s=5.2, full_s=5293),
)
def fig_lambda_sim2(cfg: RunConfig) -> dict[str, Any]:
    return _run(cfg, "sim2")
