"""Parsers and structural checks for the data files without a registered hash.

Each reader turns a file into arrays or raises :class:`DataIntegrityError` naming the file;
each check looks at what one file can show by itself (shapes, dtypes, ranges, duplicates).
They are shared by the loaders (:mod:`svbnn.data.mnist`, :mod:`svbnn.data.uci`) and by the
download path, which parses a file before keeping it (``_store._validator``).
"""

from __future__ import annotations

import warnings
import zipfile
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from ._download import DataIntegrityError

__all__: list[str] = []

_MNIST_KEYS = ("x_train", "y_train", "x_test", "y_test")


def _read_mnist(path: Path, *, shown: str | Path | None = None) -> dict[str, NDArray[np.generic]]:
    """The four arrays of an MNIST-style ``.npz`` (``shown``: the name in messages)."""
    name = path if shown is None else shown
    try:
        with np.load(path, allow_pickle=False) as archive:
            missing = [k for k in _MNIST_KEYS if k not in archive.files]
            if missing:
                raise DataIntegrityError(f"{name} lacks the arrays {missing}")
            return {k: archive[k] for k in _MNIST_KEYS}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as err:
        if isinstance(err, DataIntegrityError):
            raise
        # np.load's own errors (not a zip, truncated member, pickled object) do not say
        # which file; this one does.
        raise DataIntegrityError(f"{name} is not a readable .npz archive: {err}") from err


def _check_mnist(arrays: dict[str, NDArray[np.generic]], path: str | Path) -> None:
    for part in ("train", "test"):
        x, y = arrays[f"x_{part}"], arrays[f"y_{part}"]
        if x.dtype != np.uint8 or y.dtype != np.uint8:
            raise DataIntegrityError(f"{path}: x_{part}/y_{part} must be uint8")
        if x.ndim != 3 or x.shape[1:] != (28, 28) or y.ndim != 1 or len(x) != len(y):
            raise DataIntegrityError(
                f"{path}: expected x_{part} (n, 28, 28) and y_{part} (n,), "
                f"got {x.shape} and {y.shape}"
            )
        if y.size and int(y.max()) > 9:
            raise DataIntegrityError(f"{path}: y_{part} has labels above 9")


def _read_ints(path: Path, *, shown: str | Path | None = None) -> NDArray[np.int64]:
    """A non-empty 1-D list of integers from a text file (``shown``: the name in messages)."""
    name = path if shown is None else shown
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # numpy warns on empty files
            values = np.loadtxt(path, dtype=np.int64, ndmin=1)
    except (ValueError, UnicodeDecodeError) as err:
        message = f"{name} should hold whitespace-separated integers: {err}"
        raise DataIntegrityError(message) from err
    if values.ndim != 1 or values.size == 0:
        raise DataIntegrityError(f"{name} should hold a non-empty list of integers")
    return values


def _read_int(path: Path, *, shown: str | Path | None = None) -> int:
    values = _read_ints(path, shown=shown)
    if values.size != 1:
        name = path if shown is None else shown
        raise DataIntegrityError(f"{name} should hold a single integer, got {values.size} values")
    return int(values[0])


def _check_count(value: int, path: str | Path, *, minimum: int) -> int:
    if value < minimum:
        raise DataIntegrityError(f"{path} should hold an integer >= {minimum}, got {value}")
    return value


def _check_indices(index: NDArray[np.int64], n: int | None, path: str | Path) -> None:
    """Indices are non-negative, below ``n`` (unchecked when ``None``) and distinct."""
    upper = np.iinfo(np.int64).max if n is None else n
    if index.min() < 0 or index.max() >= upper:
        bounds = "non-negative" if n is None else f"in [0, {n})"
        raise DataIntegrityError(
            f"{path}: indices must lie {bounds}, found range [{index.min()}, {index.max()}]"
        )
    if np.unique(index).size != index.size:
        raise DataIntegrityError(f"{path}: duplicated indices")


def _read_matrix(path: Path, *, shown: str | Path | None = None) -> NDArray[np.float64]:
    name = path if shown is None else shown
    try:
        data = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except (ValueError, UnicodeDecodeError) as err:
        raise DataIntegrityError(f"{name} should be a matrix of numbers: {err}") from err
    return data


def _check_matrix(data: NDArray[np.float64], path: str | Path) -> None:
    if data.size == 0:
        raise DataIntegrityError(f"{path} holds no numbers")
    if not np.isfinite(data).all():
        raise DataIntegrityError(f"{path} holds NaN or infinite values")
