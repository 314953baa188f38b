"""Methods compared by the simulation artifacts: one interface, one registry.

A :class:`Method` fits ``R`` replications at once (data ``(R, n, p)``, responses
``(R, n)``) and returns a :class:`FittedReplicates` from which the harness computes every
metric: Monte Carlo predictions, the median-model prediction, the selected inputs,
sparsity and density, and the per-layer inclusion probabilities for network plots.
SVBNN is defined here; the paper's baselines (VBNN, VD, HS-BNN, AGP, LOT) are in
:mod:`svbnn_experiments.baseline_methods`. Methods plug in with :func:`register_method`.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor

from svbnn.nn import Sampler, SpikeSlabLinear, SpikeSlabMLP, variational_layers
from svbnn.objectives import GaussianLikelihood
from svbnn.prediction import sample_outputs
from svbnn.priors import mlp_log_lambda_opt
from svbnn.selection import density, selected_features, sparsity
from svbnn.training import History, train

__all__ = [
    "METHOD_DESCRIPTIONS",
    "METHOD_NAMES",
    "FitSpec",
    "FittedReplicates",
    "Method",
    "SVBNNFitted",
    "SVBNNMethod",
    "available_methods",
    "check_methods",
    "get_method",
    "late_sampler_switch",
    "method_options",
    "register_method",
]

METHOD_NAMES: tuple[str, ...] = ("svbnn", "vbnn", "vd", "hsbnn", "agp", "lot")
"""Every method of the paper's comparisons, in the paper's order."""

METHOD_DESCRIPTIONS: dict[str, str] = {
    "svbnn": "spike-and-slab variational BNN (this paper)",
    "vbnn": "Bayes by Backprop, Gaussian prior and posterior (Blundell et al. 2015)",
    "vd": "sparse variational dropout (Molchanov et al. 2017)",
    "hsbnn": "horseshoe BNN with node-wise scales (Ghosh, Yao & Doshi-Velez 2018)",
    "agp": "automated gradual pruning (Zhu & Gupta 2018)",
    "lot": "lottery ticket, iterative magnitude pruning (Frankle & Carbin 2018)",
}

INIT_MU_RANGE: dict[str, float | None] = {"torch": None, "authors": 0.6}
"""``--init``: ``torch`` draws mu ~ U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (library default);
``authors`` draws mu ~ U(-0.6, 0.6) as the authors' Simulation II code does."""


@dataclass(frozen=True)
class FitSpec:
    """Everything a method needs to fit one batch of replications of a regression problem.

    Attributes
    ----------
    in_features : int
        ``p``.
    hidden : tuple of int
        Hidden widths of the student network.
    activation : str
        Hidden activation.
    epochs, batch_size, lr : int, int, float
        Training length, minibatch size ``m`` and learning rate.
    optimizer : str
        ``"adam"`` (the paper's choice in the simulations).
    n_mc : int
        ``K``, Monte Carlo draws per step (paper: 1).
    noise_std : float
        Known noise sd of the Gaussian likelihood (paper: 1).
    prior_variance : float
        ``sigma_0^2`` (paper: 2).
    temperature : float
        Gumbel-softmax ``tau`` (paper: 0.5).
    sampler : str
        ``"gumbel"`` or ``"inverse_cdf"``.
    init : str
        ``"torch"`` or ``"authors"`` (see :data:`INIT_MU_RANGE`).
    dtype : str
        ``"float32"`` or ``"float64"``.
    device : str
        Where the chunk's data, networks and generator live: ``"cpu"``, ``"cuda"`` or
        ``"cuda:N"`` (``--device``).
    log_prior_inclusion : tuple of float, optional
        One log-lambda per replicate; ``None`` means ``lambda_opt`` for every replicate.
    progress : bool
        Show a per-epoch progress bar.
    options : dict
        Method-specific settings (e.g. a pruning level for AGP).
    """

    in_features: int
    hidden: tuple[int, ...]
    activation: str
    epochs: int
    batch_size: int
    lr: float = 5e-3
    optimizer: str = "adam"
    n_mc: int = 1
    noise_std: float = 1.0
    prior_variance: float = 2.0
    temperature: float = 0.5
    sampler: str = "gumbel"
    init: str = "torch"
    dtype: str = "float32"
    log_prior_inclusion: tuple[float, ...] | None = None
    progress: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"

    @property
    def torch_dtype(self) -> torch.dtype:
        """The ``torch.dtype`` named by ``dtype``."""
        if self.dtype not in ("float32", "float64"):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype!r}")
        return torch.float32 if self.dtype == "float32" else torch.float64


class FittedReplicates(ABC):
    """``R`` fitted replications of one method; the metrics' only view of a fitted model."""

    n_replicates: int
    bayesian: bool = True
    """Whether :meth:`sample_outputs` draws from a posterior (credible intervals make sense)."""

    @abstractmethod
    def sample_outputs(
        self, X: Tensor, n_samples: int, generator: torch.Generator | None
    ) -> Tensor:
        """Function draws ``f_{theta_h}(X)``: ``X`` ``(R, n, p)`` -> ``(H, R, n)``."""

    def median_outputs(self, X: Tensor) -> Tensor | None:
        """Median-model (``phi > 0.5``, weights ``mu``) prediction ``(R, n)``, if defined."""
        return None

    def tune_on_test(
        self, X_test: Tensor, y_test: Any, n_samples: int, generator: torch.Generator | None
    ) -> dict[str, NDArray[np.float64]]:
        """Pick a tuning value on the test set, as the paper does for AGP and LOT.

        Called by the harness once, after fitting and before any metric. ``X_test`` is
        ``(R, n_test, p)``, ``y_test`` the shared ``(n_test,)`` responses. Returns extra
        per-replicate columns (arrays of length ``R``); the default tunes nothing.
        """
        return {}

    def selected_features(self) -> list[NDArray[np.int64]] | None:
        """Per replicate, the 0-based inputs with a kept first-layer edge (``None``: n/a)."""
        return None

    def sparsity(self) -> NDArray[np.float64] | None:
        """Per replicate, ``sum(phi) / T`` (or the kept fraction of a pruning method)."""
        return None

    def density(self) -> NDArray[np.float64] | None:
        """Per replicate, the fraction of parameters kept (``phi > 0.5``)."""
        return None

    def noise_std(self) -> NDArray[np.float64] | None:
        """Per replicate, the learned noise sd (``None``: known, or not a likelihood fit)."""
        return None

    def layer_inclusion(self, replicate: int) -> list[tuple[NDArray[Any], NDArray[Any]]] | None:
        """Per layer of one replicate, ``(phi, mu)`` weight matrices of shape ``(out, in)``."""
        return None


class Method(ABC):
    """A fitting procedure for a batch of replications (see :class:`FitSpec`)."""

    name: ClassVar[str]
    option_defaults: ClassVar[Mapping[str, Any]] = {}
    """Method-specific settings (``FitSpec.options`` keys, ``--set KEY=VALUE``) and defaults."""

    @abstractmethod
    def fit(
        self, X: Tensor, y: Tensor, spec: FitSpec, generator: torch.Generator
    ) -> FittedReplicates:
        """Fit ``R`` replications: ``X`` ``(R, n, p)``, ``y`` ``(R, n)``."""


_METHODS: dict[str, Callable[[], Method]] = {}


def register_method(name: str) -> Callable[[type[Method]], type[Method]]:
    """Class decorator that makes a :class:`Method` available under ``name``."""

    def deco(cls: type[Method]) -> type[Method]:
        if name in _METHODS:
            raise ValueError(f"method {name!r} is already registered")
        cls.name = name
        _METHODS[name] = cls
        return cls

    return deco


def available_methods() -> list[str]:
    """Names of the implemented methods."""
    return list(_METHODS)


def get_method(name: str) -> Method:
    """An instance of the method ``name``.

    Raises
    ------
    ValueError
        For a name that is not a method of the paper.
    """
    if name in _METHODS:
        return _METHODS[name]()
    raise ValueError(f"unknown method {name!r}; the paper's methods are {', '.join(METHOD_NAMES)}")


def method_options(names: Sequence[str]) -> dict[str, Any]:
    """The option defaults of the methods ``names`` (see :attr:`Method.option_defaults`)."""
    out: dict[str, Any] = {}
    for name in names:
        out.update(get_method(name).option_defaults)
    return out


def check_methods(names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """Validate a list of method names before any training starts (raises like get_method)."""
    if not names:
        raise ValueError("no method given")
    for name in names:
        get_method(name)
    return tuple(names)


def train_regression(
    model: torch.nn.Module,
    X: Tensor,
    y: Tensor,
    spec: FitSpec,
    generator: torch.Generator,
    callbacks: Sequence[Callable[[int, torch.nn.Module, History], bool | None]] = (),
    learn_noise: bool = False,
) -> NDArray[np.float64] | None:
    """Train a replicated single-output network on ``X`` ``(R, n, p)``, ``y`` ``(R, n)`` with
    the Gaussian likelihood and the optimiser settings of ``spec`` (every Bayesian method).
    ``callbacks`` are :func:`svbnn.training.train`'s (called after every epoch). With
    ``learn_noise`` each replicate learns its own noise sd, started at ``spec.noise_std``;
    returns them, ``(R,)`` (``None`` for a known noise)."""
    R = X.shape[0]
    if learn_noise:
        start = torch.full((R, 1), spec.noise_std, dtype=spec.torch_dtype, device=X.device)
        lik = GaussianLikelihood(start, learn_noise=True)
    else:
        lik = GaussianLikelihood(spec.noise_std)
    # The model itself, not wrapped: its (R, m, 1) output goes to the likelihood as it is
    # (log_prob squeezes it), and negative_elbo finds the model's own fused paths (under
    # auto, Table 2's network trains through svbnn._engine.native_step).
    train(
        model,
        X.to(spec.torch_dtype),
        y.to(spec.torch_dtype),
        lik,
        epochs=spec.epochs,
        batch_size=spec.batch_size,
        lr=spec.lr,
        optimizer=spec.optimizer,
        n_mc=spec.n_mc,
        generator=generator,
        verbose=spec.progress,
        track_sparsity=False,
        callbacks=callbacks,
    )
    if not learn_noise:
        return None
    return torch.as_tensor(lik.noise_std).detach().reshape(R).double().cpu().numpy()


def late_sampler_switch(
    model: torch.nn.Module, switch_after: int
) -> Callable[[int, torch.nn.Module, History], bool | None]:
    """A training callback that moves every spike-and-slab layer to the exact inverse-CDF
    sampler once ``switch_after`` epochs are done (the optimiser state carries over).

    The Gumbel-softmax relaxation is biased at ``tau = 0.5``; a late phase with the exact
    sampler lets the gates settle under the unbiased gradient of the ELBO without paying
    for the slower exact sampler during the whole run.
    """

    def switch(epoch: int, _model: torch.nn.Module, _history: History) -> None:
        if epoch == switch_after:
            for layer in variational_layers(model):
                if isinstance(layer, SpikeSlabLinear):
                    layer.sampler = Sampler.INVERSE_CDF

    return switch


class _Squeeze(torch.nn.Module):
    """Single-output regression net: ``(R, m, p) -> (R, m)``."""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.net(x)
        return out.squeeze(-1)


class SVBNNFitted(FittedReplicates):
    """A trained replicated :class:`SpikeSlabMLP`."""

    def __init__(self, model: SpikeSlabMLP, noise: NDArray[np.float64] | None = None) -> None:
        self.model = model
        self.n_replicates = int(variational_layers(model)[0].n_replicates or 1)
        self._noise = noise

    def noise_std(self) -> NDArray[np.float64] | None:
        return self._noise

    def sample_outputs(
        self, X: Tensor, n_samples: int, generator: torch.Generator | None
    ) -> Tensor:
        # Bound the (R, rows, p) chunk at about 16M elements: the replicated first layer
        # materialises its input per chunk, so large test sets must be processed in slices.
        rows = max(64, 2**24 // max(1, X.shape[0] * X.shape[-1]))
        out = sample_outputs(self.model, X, n_samples, generator=generator, chunk_size=rows)
        return out.squeeze(-1)

    def median_outputs(self, X: Tensor) -> Tensor | None:
        rows = max(64, 2**24 // max(1, X.shape[0] * X.shape[-1]))
        out = sample_outputs(self.model, X, 1, chunk_size=rows, mode="median")
        return out[0].squeeze(-1)

    def selected_features(self) -> list[NDArray[np.int64]] | None:
        sel = selected_features(self.model)
        return sel if isinstance(sel, list) else [sel]

    def sparsity(self) -> NDArray[np.float64] | None:
        return np.atleast_1d(sparsity(self.model).double().cpu().numpy())

    def density(self) -> NDArray[np.float64] | None:
        return np.atleast_1d(density(self.model, 0.5).double().cpu().numpy())

    def layer_inclusion(self, replicate: int) -> list[tuple[NDArray[Any], NDArray[Any]]] | None:
        out = []
        for layer in self.model.net:
            if isinstance(layer, SpikeSlabLinear):
                phi = layer.inclusion_probs()["weight"][replicate]
                mu = layer.mu.detach()[replicate, :, : layer.fan_in]
                out.append((phi.double().cpu().numpy(), mu.double().cpu().numpy()))
        return out


@register_method("svbnn")
class SVBNNMethod(Method):
    """The paper's method: all R replications as one replicated :class:`SpikeSlabMLP`.

    Option ``late_inverse_cdf_epochs`` (``--set late_inverse_cdf_epochs=K``): train the last
    ``K`` epochs with the exact inverse-CDF sampler (:func:`late_sampler_switch`); 0, the
    default, keeps ``spec.sampler`` throughout. Option ``learn_noise`` (``--set
    learn_noise=True``): each replication learns its noise sd (started at ``noise_std``)
    instead of knowing it; the ``noise_std`` column of ``results.csv`` holds the values.
    """

    option_defaults: ClassVar[Mapping[str, Any]] = {
        "late_inverse_cdf_epochs": 0,
        "learn_noise": False,
    }

    def fit(
        self, X: Tensor, y: Tensor, spec: FitSpec, generator: torch.Generator
    ) -> FittedReplicates:
        R, n, p = X.shape
        if p != spec.in_features:
            raise ValueError(f"data have {p} features, the spec says {spec.in_features}")
        if spec.init not in INIT_MU_RANGE:
            raise ValueError(f"init must be one of {sorted(INIT_MU_RANGE)}, got {spec.init!r}")
        model = SpikeSlabMLP(
            p,
            spec.hidden,
            1,
            activation=spec.activation,
            prior_variance=spec.prior_variance,
            log_prior_inclusion=mlp_log_lambda_opt(p, spec.hidden, 1, n),
            sampler=spec.sampler,
            temperature=spec.temperature,
            init_mu_range=INIT_MU_RANGE[spec.init],
            n_replicates=R,
            generator=generator,
            device=spec.device,
            dtype=spec.torch_dtype,
        )
        if spec.log_prior_inclusion is not None:
            if len(spec.log_prior_inclusion) != R:
                raise ValueError("need one log prior inclusion per replicate")
            if not all(math.isfinite(v) and v < 0 for v in spec.log_prior_inclusion):
                raise ValueError("log prior inclusions must be finite and < 0")
            model.set_log_prior_inclusion(
                torch.tensor(spec.log_prior_inclusion, dtype=spec.torch_dtype)
            )
        late = int(spec.options.get("late_inverse_cdf_epochs", 0))
        if not 0 <= late <= spec.epochs:
            raise ValueError(
                f"late_inverse_cdf_epochs must be in [0, epochs = {spec.epochs}], got {late}"
            )
        callbacks = [late_sampler_switch(model, spec.epochs - late)] if late else []
        learn = bool(spec.options.get("learn_noise", False))
        noise = train_regression(model, X, y, spec, generator, callbacks, learn_noise=learn)
        return SVBNNFitted(model, noise)
