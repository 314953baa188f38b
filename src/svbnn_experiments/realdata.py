"""What the real-data artifacts share: published numbers, settings parsing, per-epoch records.

The real-data artifacts (``uci``, ``mnist``, ``mnist-uq``, ``fmnist-cnn``; modules
:mod:`.uci` and :mod:`.mnist`) read the data folder given by ``--set data_dir=PATH`` or the
``SVBNN_DATA`` environment variable (see :func:`svbnn.data.data_dir`).

Published values (supplement of Bai, Song & Cheng, NeurIPS 2020):

* UCI table ("Results on UCI regression datasets"): test RMSE of SVBNN, HS-BNN and PBP and
  SVBNN's posterior sparsity ``sum(phi)/T`` in percent, mean ± sd over the 20 HL&A splits
  (the PBP column's small ± are those of Hernandez-Lobato & Adams, who report standard
  errors).
* MNIST (main text, section 6): final sparsity of SVBNN 5.06%, AGP 5.00%, VD 2.28% (the
  accuracy curves of its MNIST figure are not given as numbers).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from svbnn.checkpoint import CheckpointError, load_checkpoint

from .files import read_csv, write_csv
from .paper_values import Value

__all__ = [
    "MNIST_PAPER_SPARSITY",
    "UCI_PAPER",
    "EpochBook",
    "check_real_methods",
    "checkpoint_epoch",
    "data_dir_param",
    "parse_floats",
    "parse_names",
]

UCI_PAPER: Final[dict[str, dict[str, Any]]] = {
    "kin8nm": {
        "label": "Kin8nm",
        "n": 8192,
        "p": 8,
        "svbnn": (0.08, 0.00),
        "hsbnn": (0.08, 0.00),
        "pbp": (0.10, 0.00),
        "sparsity": (64.5, 1.85),
    },
    "naval-propulsion-plant": {
        "label": "Naval",
        "n": 11934,
        "p": 16,
        "svbnn": (0.00, 0.00),
        "hsbnn": (0.00, 0.00),
        "pbp": (0.01, 0.00),
        "sparsity": (82.9, 1.31),
    },
    "power-plant": {
        "label": "Power Plant",
        "n": 9568,
        "p": 4,
        "svbnn": (4.01, 0.18),
        "hsbnn": (4.03, 0.15),
        "pbp": (4.12, 0.03),
        "sparsity": (56.6, 3.13),
    },
    "wine-quality-red": {
        "label": "Wine",
        "n": 1599,
        "p": 11,
        "svbnn": (0.62, 0.04),
        "hsbnn": (0.63, 0.04),
        "pbp": (0.64, 0.01),
        "sparsity": (59.9, 4.92),
    },
    "year": {
        "label": "Year",
        "n": 515345,
        "p": 90,
        "svbnn": (8.87, math.nan),
        "hsbnn": (9.26, math.nan),
        "pbp": (8.88, math.nan),
        "sparsity": (20.8, math.nan),
    },
}
"""The supplement's UCI table, keyed by the canonical data set name of :mod:`svbnn.data`."""

MNIST_PAPER_SPARSITY: Final[dict[str, Value]] = {
    "svbnn": (5.06, math.nan),
    "agp": (5.00, math.nan),
    "vd": (2.28, math.nan),
    "vbnn": None,
}
"""Final sparsities (percent kept) of the MNIST comparison (main text, section 6)."""


def parse_names(value: Any) -> tuple[str, ...]:
    """A list setting given as ``"a,b"`` (``--set datasets=a,b``) or as a list/tuple."""
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",")]
    elif isinstance(value, Iterable):
        items = [str(v).strip() for v in value]
    else:
        raise ValueError(f"expected a comma-separated list, got {value!r}")
    items = [v for v in items if v]
    if not items:
        raise ValueError("empty list")
    return tuple(items)


def parse_floats(value: Any) -> tuple[float, ...]:
    """A list of positive floats given as ``"0.1,0.5"``, a number, or a list/tuple."""
    if isinstance(value, (int, float)):
        out: tuple[float, ...] = (float(value),)
    else:
        out = tuple(float(v) for v in parse_names(value))
    if not all(math.isfinite(v) and v > 0 for v in out):
        raise ValueError(f"values must be positive and finite, got {value!r}")
    return out


def data_dir_param(params: Mapping[str, Any]) -> str | None:
    """The ``data_dir`` setting (``None``: the ``SVBNN_DATA`` folder)."""
    value = params.get("data_dir")
    return str(value) if value else None


def check_real_methods(
    methods: Sequence[str], allowed: Sequence[str], artifact: str
) -> tuple[str, ...]:
    """Validate ``--methods`` for a real-data artifact (its own list of methods)."""
    bad = [m for m in methods if m not in allowed]
    if bad or not methods:
        got = ", ".join(methods) or "(none)"
        raise ValueError(f"{artifact} runs the methods {', '.join(allowed)}; got {got}")
    return tuple(dict.fromkeys(methods))


def checkpoint_epoch(path: Path) -> int:
    """Epoch stored in a training checkpoint (0 when there is none).

    Raises
    ------
    CheckpointError
        When the checkpoint's ``epoch`` is not a non-negative integer (the message names
        the file and the field).
    """
    if not path.exists():
        return 0
    epoch = load_checkpoint(path).get("epoch")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise CheckpointError(
            f"checkpoint {path}: field 'epoch' must be an integer >= 0, got {epoch!r}; "
            "delete it or use another output folder"
        )
    return epoch


class EpochBook:
    """Per-epoch rows of several methods in one CSV, kept consistent with the checkpoints.

    A row is identified by ``(method, epoch)``. A resumed run first drops the rows of a
    method beyond its checkpoint's epoch (an interrupted epoch may have been recorded
    before its checkpoint was written), then adds or replaces rows as epochs finish; the
    file is rewritten after every change, so an interrupted run leaves every finished epoch.

    Parameters
    ----------
    path : Path
        The CSV (read if it exists).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.rows: list[dict[str, Any]] = read_csv(path) if path.exists() else []

    def truncate(self, method: str, last_epoch: int) -> None:
        """Drop ``method``'s rows with ``epoch > last_epoch``."""
        self.rows = [
            r for r in self.rows if r.get("method") != method or int(r["epoch"]) <= last_epoch
        ]

    def add(self, row: Mapping[str, Any]) -> None:
        """Add a row, replacing the one of the same method and epoch."""
        key = (row["method"], int(row["epoch"]))
        self.rows = [r for r in self.rows if (r.get("method"), int(r["epoch"])) != key]
        self.rows.append(dict(row))

    def method_rows(self, method: str) -> list[dict[str, Any]]:
        """Rows of one method by epoch."""
        return sorted(
            (r for r in self.rows if r.get("method") == method), key=lambda r: int(r["epoch"])
        )

    def save(self) -> None:
        """Rewrite the CSV: methods in first-seen order, epochs ascending."""
        order: dict[str, int] = {}
        for r in self.rows:
            order.setdefault(str(r.get("method")), len(order))
        rows = sorted(self.rows, key=lambda r: (order[str(r.get("method"))], int(r["epoch"])))
        write_csv(self.path, rows)
