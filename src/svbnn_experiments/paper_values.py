"""Published numbers of Bai, Song & Cheng (NeurIPS 2020): Tables 1 and 2, supplement Table 5.

Every value is ``(mean, sd)`` over the paper's replications (30; 60 for coverage) in the
paper's units: RMSE on the response scale, rates and sparsities in percent. ``None`` marks
a cell the paper leaves empty ("-"). Method keys are the CLI names (``svbnn``, ``vbnn``,
``vd``, ``hsbnn``, ``agp``, ``lot``); metric keys are the column names of ``results.csv``.

The paper's "Sparsity(%)" is ``sum(phi)/T`` for SVBNN (a density: the fraction kept), and
the user-set kept fraction for AGP and LOT; it is compared with ``sparsity_pct``.

Table 1's coverage column repeats Table 5's 95% coverage of x3 (dense) and x1 (sparse),
except one sd: VBNN, dense teacher, 91.4 +- 3.89 in Table 1 and 91.4 +- 2.43 in Table 5.
Both are kept as printed.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "COVERAGE",
    "METHOD_LABELS",
    "TABLE1",
    "TABLE2",
    "Value",
    "paper_value",
]

Value = tuple[float, float] | None
"""A published ``(mean, sd)``, or ``None`` where the paper reports nothing."""

METHOD_LABELS: Final[dict[str, str]] = {
    "svbnn": "SVBNN",
    "vbnn": "VBNN",
    "vd": "VD",
    "hsbnn": "HS-BNN",
    "agp": "AGP",
    "lot": "LOT",
}


def _row(
    train: Value, test: Value, fpr: Value, fnr: Value, cov95: Value, sparsity: Value
) -> dict[str, Value]:
    return {
        "train_rmse": train,
        "test_rmse": test,
        "fpr_pct": fpr,
        "fnr_pct": fnr,
        "coverage95_pct": cov95,
        "sparsity_pct": sparsity,
    }


# Table 1 (Simulation I). Coverage is the 95% coverage of x3 for the dense teacher (A) and
# of x1 for the sparse teacher (B) (supplement B.5). AGP kept 30% / 5%, LOT 10% / 5%.
TABLE1: Final[dict[str, dict[str, dict[str, Value]]]] = {
    "dense": {
        "svbnn": _row((1.01, 0.02), (1.01, 0.00), None, None, (97.5, 1.71), (6.45, 0.83)),
        "vbnn": _row((1.00, 0.02), (1.00, 0.00), None, None, (91.4, 3.89), (100.0, 0.00)),
        "vd": _row((0.99, 0.02), (1.01, 0.00), None, None, (76.4, 4.75), (28.6, 2.81)),
        "hsbnn": _row((0.98, 0.02), (1.02, 0.01), None, None, (83.5, 0.78), (64.9, 24.9)),
        "agp": _row((0.99, 0.02), (1.01, 0.00), None, None, None, (30.0, 0.00)),
        "lot": _row((1.04, 0.01), (1.02, 0.00), None, None, None, (10.0, 0.00)),
    },
    "sparse": {
        "svbnn": _row(
            (0.99, 0.03), (1.00, 0.01), (0.00, 0.00), (0.00, 0.00), (96.4, 4.73), (2.15, 0.25)
        ),
        "vbnn": _row(
            (0.92, 0.05), (1.53, 0.17), (100.0, 0.00), (0.00, 0.00), (90.7, 8.15), (100.0, 0.00)
        ),
        "vd": _row(
            (0.86, 0.04), (1.07, 0.03), (72.9, 6.99), (0.00, 0.00), (75.5, 7.81), (20.8, 3.08)
        ),
        "hsbnn": _row((0.90, 0.04), (1.29, 0.04), None, None, (67.0, 8.54), (32.1, 20.1)),
        "agp": _row((1.01, 0.03), (1.02, 0.00), (16.9, 1.81), (0.00, 0.00), None, (5.00, 0.00)),
        "lot": _row((0.96, 0.01), (1.04, 0.01), (19.5, 2.57), (0.00, 0.00), None, (5.00, 0.00)),
    },
}

# Table 2 (Simulation II). AGP and LOT kept 30%.
TABLE2: Final[dict[str, dict[str, Value]]] = {
    "svbnn": _row((1.19, 0.05), (1.21, 0.05), (0.00, 0.21), (16.0, 8.14), None, (2.97, 0.48)),
    "vbnn": _row((0.96, 0.06), (1.99, 0.49), (100.0, 0.00), (0.00, 0.00), None, (100.0, 0.00)),
    "vd": _row((1.02, 0.05), (1.43, 0.19), (98.6, 1.22), (0.67, 3.65), None, (46.9, 4.72)),
    "hsbnn": _row((1.17, 0.52), (1.66, 0.43), None, None, None, (41.1, 36.5)),
    "agp": _row((1.06, 0.08), (1.58, 0.11), (82.7, 3.09), (1.33, 5.07), None, (30.0, 0.00)),
    "lot": _row((1.08, 0.09), (1.44, 0.14), (83.6, 2.94), (0.00, 0.00), None, (30.0, 0.00)),
}


def _cov(c90: tuple[Value, Value, Value], c95: tuple[Value, Value, Value]) -> dict[str, Value]:
    out: dict[str, Value] = {}
    for level, vals in (("90", c90), ("95", c95)):
        for j, v in enumerate(vals, start=1):
            out[f"coverage{level}_x{j}_pct"] = v
    return out


# Supplement Table 5 ("Coverage rates for teacher networks"), 60 replications. The paper
# reports no coverage for AGP and LOT (not Bayesian).
COVERAGE: Final[dict[str, dict[str, dict[str, Value]]]] = {
    "dense": {
        "svbnn": _cov(
            ((93.8, 2.84), (93.1, 4.93), (93.1, 2.96)), ((97.9, 1.01), (97.9, 1.69), (97.5, 1.71))
        ),
        "vbnn": _cov(
            ((85.8, 2.51), (82.4, 2.62), (86.3, 1.88)), ((92.7, 2.83), (91.3, 2.61), (91.4, 2.43))
        ),
        "vd": _cov(
            ((61.3, 2.40), (60.0, 2.79), (64.9, 6.17)), ((74.9, 1.79), (71.8, 2.33), (76.4, 4.75))
        ),
        "hsbnn": _cov(
            ((83.1, 1.67), (80.0, 1.21), (76.9, 1.70)), ((88.1, 1.13), (84.1, 1.48), (83.5, 0.78))
        ),
    },
    "sparse": {
        "svbnn": _cov(
            ((92.3, 8.61), (94.6, 5.37), (98.3, 0.00)), ((96.4, 4.73), (97.7, 3.71), (100.0, 0.00))
        ),
        "vbnn": _cov(
            ((86.7, 10.9), (87.0, 11.3), (93.3, 0.00)), ((90.7, 8.15), (91.9, 9.21), (96.7, 0.00))
        ),
        "vd": _cov(
            ((65.2, 0.08), (63.7, 6.58), (65.9, 0.83)), ((75.5, 7.81), (74.6, 7.79), (76.6, 0.40))
        ),
        "hsbnn": _cov(
            ((59.0, 8.52), (59.4, 4.38), (56.6, 2.06)), ((67.0, 8.54), (68.2, 3.62), (66.5, 1.86))
        ),
    },
}


def paper_value(table: str, method: str, metric: str, setting: str | None = None) -> Value:
    """Look up one published ``(mean, sd)``; ``None`` when the paper has no such cell.

    Parameters
    ----------
    table : {"table1", "table2", "coverage"}
    method : str
        CLI method name.
    metric : str
        ``results.csv`` column name.
    setting : {"dense", "sparse"}, optional
        Required for ``table1`` and ``coverage``.
    """
    if table == "table2":
        return TABLE2.get(method, {}).get(metric)
    if table in ("table1", "coverage"):
        if setting not in ("dense", "sparse"):
            raise ValueError(f"{table} needs setting 'dense' or 'sparse', got {setting!r}")
        src = TABLE1 if table == "table1" else COVERAGE
        return src[setting].get(method, {}).get(metric)
    raise ValueError(f"unknown table {table!r}; choose table1, table2 or coverage")
