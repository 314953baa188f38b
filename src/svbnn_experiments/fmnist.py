"""The ``fmnist-cnn`` artifact (supplement): a 2-Conv-2-FC network on Fashion-MNIST with
random horizontal flips, Adam, minibatch 1024, learning rate 1e-3 (150 epochs in the
paper), SVBNN against VBNN; test accuracy and sparsity per epoch.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from svbnn.data import FASHION_MNIST_CLASSES

from .classifier_runs import (
    curve_table,
    per_epoch_table,
    plot_curves,
    run_comparison,
    settings_text,
)
from .classifiers import CNN_METHODS
from .common import RunConfig
from .files import read_csv, read_settings
from .paper_values import METHOD_LABELS
from .registry import Timing, register_artifact
from .report import write_report

__all__ = ["FMNIST_DEFAULTS", "fmnist_cnn", "report_fmnist"]

# ------------------------------------------------------------------- fmnist-cnn artifact
FMNIST_DEFAULTS: dict[str, Any] = {
    "epochs": 150,
    "methods": ("svbnn",),
    "fc_hidden": 512,
    "batch_size": 1024,
    "optimizer": "adam",
    "lr_svbnn": 1e-3,
    "lr_baselines": 1e-3,
    "prior_variance": 2.0,
    "eval_draws": 5,
    "flip": True,
    "n_train": 0,
    "n_test": 0,
    "data_dir": "",
}
"""Settings of ``fmnist-cnn`` (paper: 150 epochs). ``fc_hidden`` is the width of the hidden
FC layer, which the paper does not state."""


def report_fmnist(out: Path) -> None:
    """``report.md`` and ``fmnist_accuracy.png`` of the ``fmnist-cnn`` artifact."""
    rows = read_csv(out / "results.csv")
    settings = read_settings(out)
    plot_curves(rows, out / "fmnist_accuracy.png", "Fashion-MNIST, 2-Conv-2-FC")
    runs = settings.get("runs", {})
    notes = [
        f"- {METHOD_LABELS.get(m, m)}: T = {info.get('n_params')}, resumed from epoch "
        f"{info.get('resumed_from')}, trained to epoch {info.get('epochs_done')}"
        + (
            f", log lambda_opt = {info['log_lambda']:.3f}"
            if info.get("log_lambda") is not None
            else ""
        )
        for m, info in runs.items()
    ]
    fc = settings.get("config", {}).get("params", {}).get("fc_hidden", "?")
    write_report(
        out,
        "Fashion-MNIST with a 2-Conv-2-FC network (supplement figure)",
        [
            "Reproduction of the supplement's CNN illustration: conv 32 5x5 (padding 2) + "
            "ReLU + 2x2 max pool, conv 64 3x3 (padding 2) + ReLU + 2x2 max pool, then "
            f"FC 4096 -> {fc} -> 10 with ReLU; random horizontal flips; Adam, minibatch 1024, "
            "learning rate 1e-3 (150 epochs in the paper). SVBNN uses spike-and-slab "
            "convolutions; VBNN Gaussian ones. The paper shows curves only: SVBNN's accuracy "
            "rises with the epochs and then falls as its sparsity goes down; VBNN overfits "
            "after about 80 epochs.",
            curve_table(rows, None),
            "![accuracy and sparsity by epoch](fmnist_accuracy.png)",
            "## By epoch\n\n" + per_epoch_table(rows),
            "## Network sizes\n\n"
            "With 28x28 inputs: conv1 (5x5, padding 2) keeps 28x28, pooling gives 14x14; conv2 "
            "(3x3, padding 2) gives 16x16, pooling 8x8; so the FC part receives 64 x 8 x 8 = "
            '4096 features, the paper\'s "64 x 8 x 8". The paper does not give the width of '
            f"the hidden FC layer; `fc_hidden` = {fc} here. lambda_opt for the CNN: T = all "
            "weights and biases, L = 3, N = the largest of 32, 64 and the FC width, p = 784.\n\n"
            + "\n".join(notes),
            "## Settings\n\n" + settings_text(settings),
        ],
    )


@register_artifact(
    "fmnist-cnn",
    description="Supplement Fashion-MNIST CNN (2 conv + 2 FC): accuracy and sparsity per epoch",
    report=report_fmnist,
    defaults=FMNIST_DEFAULTS,
    quick={"epochs": 1, "n_train": 256, "n_test": 200, "eval_draws": 2, "fc_hidden": 64},
    options=("methods", "device"),
    group="real-data",
    # SVBNN measured at about 120 s per epoch (94 s training + 26 s evaluation, 2 epochs);
    # 150 epochs estimated. VBNN adds about 112 s per epoch.
    timing=Timing(quick_s=8.1, full_s=18000.0),
)
def fmnist_cnn(cfg: RunConfig) -> dict[str, Any]:
    out = run_comparison(cfg, arch="cnn", allowed=CNN_METHODS, fashion=True)
    out["classes"] = list(FASHION_MNIST_CLASSES)
    return out
