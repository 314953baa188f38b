"""svbnn: sparse Bayesian deep learning with spike-and-slab priors.

Reference implementation of Bai, Song & Cheng (NeurIPS 2020), "Efficient Variational
Inference for Sparse Deep Learning with Theoretical Guarantee".
"""

import logging

from ._device import check_device
from ._engine.kernels import Backend as KernelBackend
from ._engine.kernels import backend as get_kernel_backend
from ._engine.kernels import backend_scope as kernel_backend
from ._engine.kernels import set_backend as set_kernel_backend
from ._estimator_io import EstimatorFileError, load_estimator, save_estimator
from .baselines import (
    HSBNNClassifier,
    HSBNNRegressor,
    VBNNClassifier,
    VBNNRegressor,
    VDClassifier,
    VDRegressor,
)
from .estimators import SVBNNClassifier, SVBNNPoissonRegressor, SVBNNRegressor
from .priors import (
    lambda_opt,
    log_lambda_opt,
    mlp_log_lambda_auto,
    mlp_log_lambda_opt,
)

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "EstimatorFileError",
    "HSBNNClassifier",
    "HSBNNRegressor",
    "KernelBackend",
    "VBNNClassifier",
    "VBNNRegressor",
    "VDClassifier",
    "VDRegressor",
    "check_device",
    "SVBNNClassifier",
    "SVBNNPoissonRegressor",
    "SVBNNRegressor",
    "__version__",
    "get_kernel_backend",
    "kernel_backend",
    "lambda_opt",
    "load_estimator",
    "log_lambda_opt",
    "mlp_log_lambda_auto",
    "mlp_log_lambda_opt",
    "save_estimator",
    "set_kernel_backend",
]
