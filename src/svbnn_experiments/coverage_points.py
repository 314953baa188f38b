"""Per-grid-point coverage frequencies of the coverage table (supplement Table 5).

The coverage protocol checks, per replication, whether the credible interval covers f0 at
each of the 1000 grid points. Two summaries of the same ``(reps, points)`` booleans exist:

* per replication: the fraction of the grid covered, then mean ± sd over replications
  (what ``results.csv`` and the main table of the report show);
* per grid point: the fraction of replications covering the point (its coverage
  frequency), then mean ± sd over the grid points.

Both have the same mean; only the sd differs. The paper's sd's are most likely of the
second kind: its sparse-teacher x3 entries, ``98.3 ± 0.00`` (90%) and ``93.3 ± 0.00``
(VBNN), are 59/60 and 56/60 with no spread, which is what 60 replications give at every
point of a coordinate f0 does not depend on, and no per-replication average does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .common import Chunk, ChunkResult
from .files import atomic_savefig, read_csv, write_csv
from .plotting import pyplot
from .report import markdown_table

__all__ = [
    "POINTS_FILE",
    "coverage_point_frequencies",
    "points_section",
    "write_points",
]

POINTS_FILE = "coverage_points.csv"
"""Per-grid-point coverage frequencies (%), one row per grid point."""

_QUANTILES = (0.0, 0.05, 0.25, 0.5, 0.75, 0.95, 1.0)


def coverage_point_frequencies(
    chunks: Sequence[Chunk], results: Sequence[ChunkResult]
) -> dict[str, NDArray[np.float64]]:
    """Fraction (%) of replications covering each grid point, per teacher, method and key.

    Parameters
    ----------
    chunks, results : sequences
        The run's chunks and their results, in the same order.

    Returns
    -------
    dict
        ``"{setting}_{method}_coverage{level}_x{j}"`` -> ``(n_grid,)`` frequencies in
        percent, where ``setting`` is ``dense`` or ``sparse``.
    """
    counts: dict[str, NDArray[np.float64]] = {}
    reps: dict[str, int] = {}
    for ch, res in zip(chunks, results, strict=True):
        if not res.coverage_points:
            continue
        setting = ch.problem.kind.removesuffix("-teacher")
        for key, inside in res.coverage_points.items():
            name = f"{setting}_{ch.method}_{key}"
            counts[name] = counts.get(name, 0.0) + inside.sum(0)
            reps[name] = reps.get(name, 0) + inside.shape[0]
    return {k: 100.0 * v / reps[k] for k, v in counts.items()}


def write_points(out: Path, freqs: Mapping[str, NDArray[np.float64]], n_grid: int) -> Path:
    """Write ``coverage_points.csv``: the grid value and one frequency column per key."""
    grid = np.linspace(-1.0, 1.0, n_grid)
    rows = [
        {"point": i, "x": float(grid[i]), **{k: float(v[i]) for k, v in freqs.items()}}
        for i in range(n_grid)
    ]
    return write_csv(out / POINTS_FILE, rows)


def _read_points(out: Path) -> dict[str, NDArray[np.float64]]:
    path = out / POINTS_FILE
    if not path.exists():
        return {}
    rows = read_csv(path)
    keys = [k for k in rows[0] if k not in ("point", "x")] if rows else []
    return {k: np.array([float(r[k]) for r in rows]) for k in keys}


def _histogram(out: Path, freqs: Mapping[str, NDArray[np.float64]], setting: str) -> str:
    keys = [k for k in freqs if k.startswith(f"{setting}_") and "coverage95" in k]
    if not keys:
        return ""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(keys), figsize=(3.2 * len(keys), 2.8), squeeze=False)
    bins = np.linspace(0.0, 100.0, 41)
    for ax, key in zip(axes[0], keys, strict=True):
        v = freqs[key]
        ax.hist(v, bins=bins, color="tab:blue")
        ax.axvline(95.0, color="k", lw=0.8, ls="--")
        ax.set_title(key.split("_", 1)[1].replace("_", " "), fontsize=8)
        ax.set_xlabel("replications covering the point (%)", fontsize=7)
        ax.tick_params(labelsize=7)
    axes[0][0].set_ylabel("grid points", fontsize=7)
    fig.tight_layout()
    name = f"coverage_points_{setting}.png"
    atomic_savefig(fig, out / name, dpi=110)
    plt.close(fig)
    return f"![per-grid-point 95% coverage frequencies, {setting} teacher]({name})"


def points_section(out: Path, setting: str) -> str:
    """Markdown: per-grid-point coverage frequencies of one teacher, with a histogram."""
    freqs = _read_points(out)
    keys = [k for k in freqs if k.startswith(f"{setting}_")]
    if not keys:
        return ""
    headers = [
        "method / level / coordinate",
        "mean ± sd over points",
        *(f"q{round(100 * q)}" for q in _QUANTILES),
        "points ≥ nominal (%)",
    ]
    rows: list[list[Any]] = []
    for key in keys:
        v = freqs[key]
        level = float(key.split("coverage", 1)[1].split("_", 1)[0])
        qs = np.quantile(v, _QUANTILES)
        rows.append(
            [
                key.split("_", 1)[1].replace("_", " "),
                f"{v.mean():.1f} ± {v.std(ddof=1):.2f}",
                *(f"{q:.1f}" for q in qs),
                f"{100.0 * np.mean(v >= level):.1f}",
            ]
        )
    return "\n\n".join(
        s
        for s in (
            f"### Per-grid-point coverage frequencies ({setting} teacher)",
            "Each grid point's coverage frequency is the fraction of replications whose "
            "interval covers f0 there; the table gives their mean ± sd over the grid points "
            "(the paper's reading, see the note below) and quantiles (q0 = min, q100 = "
            "max). The per-replication table above has the same means. Values per point: "
            f"`{POINTS_FILE}`.",
            markdown_table(headers, rows),
            _histogram(out, freqs, setting),
        )
        if s
    )
