"""Data: the paper's simulations, and loaders for UCI (HL&A splits), MNIST and Fashion-MNIST."""

from .real import (
    ChecksumError,
    DataIntegrityError,
    DataNotFoundError,
    MNISTData,
    Standardization,
    UCISplit,
    data_dir,
    load_mnist,
    load_uci,
    load_year,
    standardize,
    validation_split,
)
from .simulations import (
    Covariates,
    SimulatedData,
    dense_teacher,
    linear_toy,
    sim2_function,
    simulation2,
    sparse_teacher,
    sparse_teacher_function,
)

__all__ = [
    "ChecksumError",
    "DataIntegrityError",
    "DataNotFoundError",
    "MNISTData",
    "Standardization",
    "UCISplit",
    "data_dir",
    "load_mnist",
    "load_uci",
    "load_year",
    "standardize",
    "validation_split",
    "Covariates",
    "SimulatedData",
    "dense_teacher",
    "linear_toy",
    "sim2_function",
    "simulation2",
    "sparse_teacher",
    "sparse_teacher_function",
]
