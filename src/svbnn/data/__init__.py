"""Data: the paper's simulations, and loaders for UCI (HL&A splits), MNIST and Fashion-MNIST.

Modules: :mod:`~svbnn.data.simulations` (the synthetic teachers), :mod:`~svbnn.data.mnist`
(MNIST, Fashion-MNIST), :mod:`~svbnn.data.uci` (the UCI sets and Year),
:mod:`~svbnn.data.preprocessing` (standardisation, validation split); the
private ``_registry`` (known files, checksums, sources), ``_store`` (the data folder, download
and verification) and ``_download`` (hashing and fetching) serve them. Every public name is
importable from here.
"""

from ._download import (
    ChecksumError,
    DataIntegrityError,
    DataNotFoundError,
    DownloadError,
    clear_checksum_cache,
    file_sha256,
)
from ._registry import (
    CHECKSUMS,
    PAPER_UCI_DATASETS,
    SIZES,
    SOURCES,
    UCI_DATASETS,
    UCI_INFO,
    UCIInfo,
    is_registered_file,
    uci_name,
)
from ._store import ENV_DATA_DIR, ENV_DATA_URL, data_dir, default_cache_dir, source_url
from .mnist import (
    FASHION_MNIST_CLASSES,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    MNIST_MEAN,
    MNIST_STD,
    MNISTData,
    load_mnist,
    normalize_images,
)
from .preprocessing import Standardization, standardize, validation_split
from .simulations import (
    Covariates,
    SimulatedData,
    dense_teacher,
    dense_teacher_moments,
    linear_toy,
    sim2_function,
    simulation2,
    sparse_teacher,
    sparse_teacher_function,
)
from .uci import (
    YEAR_FILENAME,
    YEAR_N_TEST,
    YEAR_N_TRAIN,
    UCISplit,
    load_uci,
    load_year,
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
    "SIZES",
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
    "Covariates",
    "SimulatedData",
    "dense_teacher",
    "dense_teacher_moments",
    "linear_toy",
    "sim2_function",
    "simulation2",
    "sparse_teacher",
    "sparse_teacher_function",
]
