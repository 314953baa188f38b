"""svbnn: sparse Bayesian deep learning with spike-and-slab priors.

Reference implementation of Bai, Song & Cheng (NeurIPS 2020), "Efficient Variational
Inference for Sparse Deep Learning with Theoretical Guarantee".
"""

import logging

from .baselines import (
    HSBNNClassifier,
    HSBNNRegressor,
    VBNNClassifier,
    VBNNRegressor,
    VDClassifier,
    VDRegressor,
)
from .estimators import SVBNNClassifier, SVBNNRegressor
from .priors import (
    SpikeSlabPrior,
    lambda_opt,
    log_lambda_opt,
    mlp_log_lambda_opt,
)

__version__ = "0.1.0"

logging.getLogger(__name__).addHandler(logging.NullHandler())

__all__ = [
    "HSBNNClassifier",
    "HSBNNRegressor",
    "VBNNClassifier",
    "VBNNRegressor",
    "VDClassifier",
    "VDRegressor",
    "SVBNNClassifier",
    "SVBNNRegressor",
    "SpikeSlabPrior",
    "__version__",
    "lambda_opt",
    "log_lambda_opt",
    "mlp_log_lambda_opt",
]
