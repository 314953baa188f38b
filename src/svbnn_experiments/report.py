"""Markdown reports: mean +- sd per method beside the paper's published numbers."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .files import atomic_write_text
from .paper_values import METHOD_LABELS, Value

__all__ = [
    "Column",
    "comparison_table",
    "fmt_mean_sd",
    "group_rows",
    "markdown_table",
    "mean_sd",
    "settings_section",
    "write_report",
]


@dataclass(frozen=True)
class Column:
    """A metric column of a report table.

    Attributes
    ----------
    key : str
        ``results.csv`` column.
    label : str
        Header text.
    digits : int
        Decimals shown.
    paper : bool
        Add an adjacent column with the paper's value.
    """

    key: str
    label: str
    digits: int = 2
    paper: bool = True


def mean_sd(values: Iterable[Any]) -> tuple[float, float, int]:
    """Mean, sample sd (ddof 1; NaN for one value) and count of the non-missing values."""
    vals = np.array([float(v) for v in values if v is not None and v != ""], dtype=float)
    vals = vals[np.isfinite(vals)]
    if vals.size == 0:
        return math.nan, math.nan, 0
    sd = float(vals.std(ddof=1)) if vals.size > 1 else math.nan
    return float(vals.mean()), sd, int(vals.size)


def fmt_mean_sd(mean: float, sd: float, digits: int = 2) -> str:
    """``"1.21 ± 0.05"``; ``"-"`` for a missing mean, no ``±`` when sd is undefined."""
    if not math.isfinite(mean):
        return "-"
    if not math.isfinite(sd):
        return f"{mean:.{digits}f}"
    return f"{mean:.{digits}f} ± {sd:.{digits}f}"


def fmt_value(v: Value, digits: int = 2) -> str:
    """A published ``(mean, sd)`` as text, ``"-"`` when the paper has none."""
    if v is None:
        return "-"
    return fmt_mean_sd(v[0], v[1], digits)


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(str(c) for c in r) + " |")
    return "\n".join(lines)


def group_rows(
    rows: Iterable[Mapping[str, Any]], keys: Sequence[str]
) -> dict[tuple[Any, ...], list[Mapping[str, Any]]]:
    """Rows grouped by the values of ``keys``, groups in first-seen order."""
    out: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in rows:
        out.setdefault(tuple(r.get(k) for k in keys), []).append(r)
    return out


def comparison_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[Column],
    paper: Callable[[str, str], Value] | None = None,
    methods: Sequence[str] | None = None,
) -> str:
    """Mean ± sd per method, each metric followed by the paper's value for it.

    Parameters
    ----------
    rows : sequence of dict
        ``results.csv`` rows (one per replication and method).
    columns : sequence of Column
    paper : callable, optional
        ``paper(method, metric) -> (mean, sd) | None``.
    methods : sequence of str, optional
        Methods to list (those with rows first, then paper-only ones, in the paper's order).
    """
    by_method = group_rows(rows, ["method"])
    present = [k[0] for k in by_method]
    order = list(methods) if methods is not None else present
    headers = ["Method", "reps"]
    for c in columns:
        headers.append(c.label)
        if c.paper and paper is not None:
            headers.append(f"{c.label} (paper)")
    table = []
    for m in order:
        mrows = by_method.get((m,), [])
        line: list[str] = [METHOD_LABELS.get(m, m), str(len(mrows)) if mrows else "not run"]
        for c in columns:
            mean, sd, _ = mean_sd(r.get(c.key) for r in mrows)
            line.append(fmt_mean_sd(mean, sd, c.digits))
            if c.paper and paper is not None:
                line.append(fmt_value(paper(m, c.key), c.digits))
        table.append(line)
    return markdown_table(headers, table)


def settings_section(settings: Mapping[str, Any], keys: Sequence[tuple[str, str]]) -> str:
    """A bullet list of selected settings (``(key, label)`` pairs; dotted keys descend)."""
    lines = []
    for key, label in keys:
        v: Any = settings
        for part in key.split("."):
            v = v.get(part) if isinstance(v, Mapping) else None
        if v is not None:
            lines.append(f"- {label}: `{v}`")
    return "\n".join(lines)


def write_report(out: Path, title: str, sections: Sequence[str]) -> Path:
    """Write ``report.md`` atomically: a title and the sections separated by blank lines."""
    body = "\n\n".join(s.strip() for s in sections if s and s.strip())
    return atomic_write_text(out / "report.md", f"# {title}\n\n{body}\n")
