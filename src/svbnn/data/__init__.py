"""Data: the paper's simulations, and loaders for UCI (HL&A splits), MNIST and Fashion-MNIST."""

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
    "Covariates",
    "SimulatedData",
    "dense_teacher",
    "linear_toy",
    "sim2_function",
    "simulation2",
    "sparse_teacher",
    "sparse_teacher_function",
]
