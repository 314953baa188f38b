"""One report comparing finished runs of one artifact under different settings (variants).

Each variant is a finished run folder (``results.csv`` + ``settings.json``) of the same
artifact; the summary has one row per variant (mean ± sd over its replications) and the
command that re-measures it. Used for the Simulation II FNR study (``table2`` runs) and the
dense-teacher coverage study (``coverage`` runs)::

    python -m svbnn_experiments.variants --kind table2 --out docs/results/table2-fnr \\
        "paper settings=docs/results/table2" "2x epochs=docs/results/table2-fnr/epochs14000"

The summary writes ``report.md``, ``results.csv`` (one row per variant) and
``settings.json`` (the variants' folders, commands and settings) into ``--out``.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .files import environment_info, read_csv, read_settings, write_csv, write_settings
from .report import fmt_mean_sd, markdown_table, mean_sd, write_report

__all__ = ["KINDS", "Variant", "main", "summarize"]


@dataclass(frozen=True)
class Variant:
    """A finished run to summarise.

    Attributes
    ----------
    label : str
        Row label.
    folder : Path
        The run's output folder.
    reps : tuple of int, optional
        Only these replications (e.g. the first 10 of a 30-replication run, to compare
        with variants run on those replications' data).
    """

    label: str
    folder: Path
    reps: tuple[int, ...] | None = None


KINDS: dict[str, list[tuple[str, str, int]]] = {
    "table2": [
        ("fpr_pct", "FPR (%)", 1),
        ("fnr_pct", "FNR (%)", 1),
        ("x1_selected_pct", "x1 selected (% of reps)", 0),
        ("sparsity_pct", "Sparsity sum(phi)/T (%)", 2),
        ("test_rmse", "Test RMSE", 2),
        ("test_rmse_f", "Test RMSE vs f0", 3),
        ("wall_s", "Wall s/rep", 1),
    ],
    "coverage": [
        ("coverage95_x1_pct", "95% x1", 1),
        ("coverage95_x2_pct", "95% x2", 1),
        ("coverage95_x3_pct", "95% x3", 1),
        ("coverage90_x3_pct", "90% x3", 1),
        ("test_rmse_f", "Test RMSE vs f0", 3),
        ("teacher_f_sd", "sd of f0", 3),
        ("sparsity_pct", "Sparsity (%)", 2),
    ],
}
"""Columns (results.csv key, header, decimals) of the summary of each artifact."""

_PAPER: dict[str, dict[str, str]] = {
    "table2": {
        "fpr_pct": "0.0 ± 0.2",
        "fnr_pct": "16.0 ± 8.1",
        "sparsity_pct": "2.97 ± 0.48",
        "test_rmse": "1.21 ± 0.05",
    },
    "coverage": {
        "coverage95_x1_pct": "97.9 ± 1.0",
        "coverage95_x2_pct": "97.9 ± 1.7",
        "coverage95_x3_pct": "97.5 ± 1.7",
        "coverage90_x3_pct": "93.1 ± 3.0",
    },
}


def _command(settings: Mapping[str, Any]) -> str:
    cmd = str(settings.get("environment", {}).get("command", ""))
    words = cmd.split()
    # Recorded as sys.argv: start at the subcommand, whatever ran it (svbnn or python -m).
    if "reproduce" in words:
        words = ["svbnn", *words[words.index("reproduce") :]]
    return " ".join(words)


def _rows(v: Variant, kind: str) -> list[dict[str, Any]]:
    rows = [r for r in read_csv(v.folder / "results.csv") if r.get("method") == "svbnn"]
    if kind == "coverage":
        rows = [r for r in rows if r.get("setting") == "dense"]
    if v.reps is not None:
        rows = [r for r in rows if int(r["rep"]) in v.reps]
    for r in rows:
        if kind == "table2":
            r["x1_selected_pct"] = 100.0 * ("x1" in str(r.get("selected", "")).split())
    return rows


def _per_point_sd(v: Variant, key: str) -> str:
    path = v.folder / "coverage_points.csv"
    if not path.exists() or v.reps is not None:
        return "-"
    col = f"dense_svbnn_{key.removesuffix('_pct')}"
    pts = read_csv(path)
    if not pts or col not in pts[0]:
        return "-"
    vals = np.array([float(p[col]) for p in pts])
    return f"{vals.mean():.1f} ± {vals.std(ddof=1):.2f} (min {vals.min():.0f})"


def _variant_summary(v: Variant, kind: str) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """One variant's table row, ``results.csv`` row and ``settings.json`` record.

    Parameters
    ----------
    v : Variant
    kind : {"table2", "coverage"}

    Returns
    -------
    cells : list
        The report's table row: label, replications, epochs, mean ± sd per column.
    row : dict
        The means and sds of the columns.
    record : dict
        Where the run is and how it was made (command, config, git, wall time).
    """
    rows = _rows(v, kind)
    settings = read_settings(v.folder)
    cells: list[Any] = [v.label, len(rows), settings.get("config", {}).get("epochs", "-")]
    row: dict[str, Any] = {"variant": v.label, "reps": len(rows), "folder": str(v.folder)}
    for key, _, digits in KINDS[kind]:
        m, s, _ = mean_sd(r.get(key) for r in rows)
        cells.append(fmt_mean_sd(m, s, digits))
        row[f"{key}_mean"], row[f"{key}_sd"] = m, s
    if kind == "coverage":
        cells.append(_per_point_sd(v, "coverage95_x3_pct"))
    record = {
        "label": v.label,
        "folder": str(v.folder),
        "reps": list(v.reps) if v.reps is not None else None,
        "command": _command(settings),
        "config": settings.get("config"),
        "git": settings.get("environment", {}).get("git"),
        "wall_time_s": settings.get("wall_time_s"),
    }
    return cells, row, record


def _variants_table(kind: str, table: list[list[Any]]) -> str:
    """The variants' rows (:func:`_variant_summary`) and the paper's, as a Markdown table."""
    cols = KINDS[kind]
    headers = ["Variant", "reps", "epochs", *(label for _, label, _ in cols)]
    if kind == "coverage":
        headers.append("95% x3 per grid point")
    paper = _PAPER[kind]
    table.append(
        ["paper", 30 if kind == "table2" else 60, "-", *(paper.get(k, "-") for k, *_ in cols)]
    )
    if kind == "coverage":
        table[-1].append("97.5 ± 1.71")
    return markdown_table(headers, table)


def _commands_section(record: list[dict[str, Any]]) -> str:
    """``## Commands``: the command of each variant's run (and the replications used)."""
    commands = "\n".join(
        f"- {r['label']}: `{r['command']}`"
        + (f" (replications {r['reps'][0]}-{r['reps'][-1]} of it)" if r["reps"] else "")
        for r in record
    )
    return "## Commands\n\n" + commands


def summarize(out: Path, kind: str, variants: Sequence[Variant], intro: str = "") -> Path:
    """Write the variants' summary (report.md, results.csv, settings.json) into ``out``.

    Parameters
    ----------
    out : Path
    kind : {"table2", "coverage"}
        The artifact the runs are of (picks the columns).
    variants : sequence of Variant
    intro : str
        Markdown put first in the report (the findings).

    Returns
    -------
    Path
        ``out/report.md``.
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}, got {kind!r}")
    out.mkdir(parents=True, exist_ok=True)
    table: list[list[Any]] = []
    csv_rows: list[dict[str, Any]] = []
    record: list[dict[str, Any]] = []
    for v in variants:
        cells, row, rec = _variant_summary(v, kind)
        table.append(cells)
        csv_rows.append(row)
        record.append(rec)
    text = _variants_table(kind, table)
    write_csv(out / "results.csv", csv_rows)
    write_settings(out, {"kind": kind, "variants": record, "environment": environment_info()})
    return write_report(
        out,
        {
            "table2": "Simulation II: what moves FNR (x1 missed)",
            "coverage": "Dense-teacher coverage: signal strength and teachers",
        }[kind],
        [s for s in (intro, text, _commands_section(record)) if s],
    )


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m svbnn_experiments.variants --kind K --out DIR LABEL=FOLDER[:a-b] ...``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kind", choices=sorted(KINDS), required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--intro", type=Path, help="Markdown file put first in the report")
    ap.add_argument("variants", nargs="+", help="LABEL=FOLDER, or LABEL=FOLDER:FIRST-LAST reps")
    args = ap.parse_args(argv)
    vs: list[Variant] = []
    for text in args.variants:
        # The last "=" ends the label (labels such as "n_mc=2" hold one); an optional
        # ":FIRST-LAST" suffix picks replications.
        label, _, spec = text.rpartition("=")
        folder, reps = spec, None
        head, _, span = spec.rpartition(":")
        if head and re.fullmatch(r"\d+-\d+", span):
            a, _, b = span.partition("-")
            folder, reps = head, tuple(range(int(a), int(b) + 1))
        vs.append(Variant(label, Path(folder), reps))
    intro = args.intro.read_text() if args.intro else ""
    print(summarize(args.out, args.kind, vs, intro))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
