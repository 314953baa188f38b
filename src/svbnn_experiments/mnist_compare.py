"""One report comparing finished ``mnist`` runs of SVBNN under different settings.

``python -m svbnn_experiments.mnist_compare --out DIR LABEL=RUN_FOLDER [LABEL=RUN_FOLDER ...]``
reads each run's ``results.csv`` (SVBNN rows) and ``settings.json`` and writes, atomically,
into ``DIR``: ``results.csv`` (the per-epoch rows with a ``variant`` column),
``mnist_variants.png`` (test accuracy and sparsity against the epoch, one curve per
variant), ``settings.json`` and ``report.md``: per variant, its settings and command, the
accuracy and sparsity at a few epochs, the best accuracy, and the first epoch at which the
paper's row holds (test accuracy >= 98% with sum(phi)/T <= 5%, the paper's 5.06%).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .files import atomic_savefig, read_csv, read_settings, write_csv, write_settings
from .plotting import pyplot
from .report import markdown_table, write_report

__all__ = ["compare_mnist_runs", "main"]

_EPOCHS = (10, 20, 50, 100, 200, 300, 400)
_PAPER_ACC, _PAPER_SPARSITY = 98.0, 5.06


def _svbnn_rows(folder: Path) -> list[dict[str, Any]]:
    rows = [r for r in read_csv(folder / "results.csv") if r.get("method") == "svbnn"]
    if not rows:
        raise ValueError(f"{folder}: no SVBNN rows in results.csv")
    return sorted(rows, key=lambda r: int(r["epoch"]))


def _paper_row_epoch(rows: Sequence[Mapping[str, Any]]) -> str:
    for r in rows:
        if float(r["test_acc"]) >= _PAPER_ACC and float(r["sparsity_pct"]) <= _PAPER_SPARSITY:
            acc, sp = float(r["test_acc"]), float(r["sparsity_pct"])
            return f"{int(r['epoch'])} ({acc:.2f}% at {sp:.2f}%)"
    return "never"


def _describe(settings: Mapping[str, Any]) -> str:
    params = settings.get("config", {}).get("params", {})
    keys = ("lr_svbnn", "kl_weight", "optimizer", "batch_size", "prior_variance")
    parts = [f"{k}={params[k]}" for k in keys if k in params]
    command = settings.get("environment", {}).get("command", "")
    return ", ".join(parts) + (f"; `{command}`" if command else "")


def _plot_variants(curves: Mapping[str, list[dict[str, Any]]], path: Path) -> None:
    """Test accuracy and sparsity against the epoch, one curve per variant (the paper's
    values dashed)."""
    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for label, rows in curves.items():
        ep = [int(r["epoch"]) for r in rows]
        ax1.plot(ep, [float(r["test_acc"]) for r in rows], label=label)
        ax2.plot(ep, [float(r["sparsity_pct"]) for r in rows], label=label)
    ax1.axhline(_PAPER_ACC, color="grey", lw=0.8, ls="--")
    ax2.axhline(_PAPER_SPARSITY, color="grey", lw=0.8, ls="--")
    ax1.set(xlabel="epoch", ylabel="test accuracy (%)", ylim=(94, 99))
    ax2.set(xlabel="epoch", ylabel="sum(phi)/T (%)", yscale="log")
    ax1.legend(fontsize=8)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=120)
    plt.close(fig)


def _variants_table(curves: Mapping[str, list[dict[str, Any]]]) -> str:
    """Per variant: epochs run, best accuracy, the paper's row, accuracy and sparsity at
    ``_EPOCHS``."""
    headers = ["variant", "epochs run", "best acc. % [epoch]", "paper's row (>= 98% at <= 5.06%)"]
    headers += [f"epoch {e}: acc. / sparsity %" for e in _EPOCHS]
    table = []
    for label, rows in curves.items():
        by_epoch = {int(r["epoch"]): r for r in rows}
        best = max(rows, key=lambda r: float(r["test_acc"]))
        line = [
            label,
            str(int(rows[-1]["epoch"])),
            f"{float(best['test_acc']):.2f} [{int(best['epoch'])}]",
            _paper_row_epoch(rows),
        ]
        for e in _EPOCHS:
            r = by_epoch.get(e)
            line.append(
                "-" if r is None else f"{float(r['test_acc']):.2f} / {float(r['sparsity_pct']):.2f}"
            )
        table.append(line)
    return markdown_table(headers, table)


def compare_mnist_runs(runs: Mapping[str, Path], out: Path) -> Path:
    """Write the comparison of ``runs`` (label to ``mnist`` output folder) into ``out``."""
    if not runs:
        raise ValueError("give at least one LABEL=RUN_FOLDER")
    out.mkdir(parents=True, exist_ok=True)
    curves = {label: _svbnn_rows(Path(folder)) for label, folder in runs.items()}
    settings = {label: read_settings(Path(folder)) for label, folder in runs.items()}
    write_csv(
        out / "results.csv",
        [{"variant": label, **r} for label, rows in curves.items() for r in rows],
    )
    _plot_variants(curves, out / "mnist_variants.png")
    table = _variants_table(curves)
    variants = "\n".join(f"- **{label}**: {_describe(settings[label])}" for label in runs)
    write_settings(
        out,
        {
            "runs": {label: str(folder) for label, folder in runs.items()},
            "status": "complete",
            "variants": {label: settings[label].get("config", {}) for label in runs},
        },
    )
    return write_report(
        out,
        "MNIST: SVBNN under different settings",
        [
            "SVBNN on MNIST (784-512-512-10, RMSprop, minibatch 256, test accuracy of the "
            "posterior predictive after every epoch, sparsity = sum(phi)/T) with the exact "
            "per-datum negative ELBO (kl_weight = 1) and with a weighted KL term "
            "(`kl_weight = w`: the objective `nll + w KL / n`). The paper's row is 5.06% "
            "final sparsity with the best accuracy of its methods (AGP about 98%).",
            table,
            "![accuracy and sparsity by epoch](mnist_variants.png)",
            "## Variants\n\n" + variants,
            "Per-epoch rows of every variant are in `results.csv`; each run's own report "
            "(and checkpoints, where kept) is in its folder.",
        ],
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="output folder")
    parser.add_argument("runs", nargs="+", help="LABEL=RUN_FOLDER of finished mnist runs")
    args = parser.parse_args(argv)
    runs: dict[str, Path] = {}
    for item in args.runs:
        label, sep, folder = item.partition("=")
        if not sep or not label:
            print(f"mnist_compare: expected LABEL=RUN_FOLDER, got {item!r}", file=sys.stderr)
            return 2
        runs[label] = Path(folder)
    try:
        compare_mnist_runs(runs, args.out)
    except (ValueError, OSError) as exc:
        print(f"mnist_compare: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
