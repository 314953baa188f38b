"""Argument checks and small helpers of the scikit-learn estimators (private)."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from scipy import sparse
from sklearn.base import BaseEstimator
from sklearn.utils import check_random_state
from torch import Tensor, nn

from .selection import (
    spike_slab_layers,
)
from .training import History

_DTYPES = {"float32": torch.float32, "float64": torch.float64}
_KERNEL_BACKENDS = ["auto", "compiled", "eager", "native"]
_NOISE_INIT = 0.1  # initial learned noise sd, in units of the training sd of y
# A known noise_std, in units of the training sd of y (measured on 200 rows, 20 epochs: 1e-8
# fits as 1e-3 does, R^2 0.98; 1e-12 ends at R^2 0.03 without a word; 1e-30 overflows).
_NOISE_RATIO = (1e-8, 1e8)
_UNRESOLVED_EXPORT = 0.01  # export_sparse warns above this fraction of unresolved gates


class CollapseWarning(UserWarning):
    """A fit that returns numbers but explains nothing: no input selected, a constant
    predictor, or a classifier that predicts one class for every training row."""


class InputScaleWarning(UserWarning):
    """Inputs far from the unit scale that the prior and the learning rate assume: a
    column of ``X`` whose root mean square is above ``INPUT_RMS_MAX``, or columns whose
    largest absolute values are, at the median over the columns that vary, below
    ``INPUT_MAX_ABS_MIN``. Scale ``X`` first (e.g. a ``StandardScaler`` in a pipeline)."""


INPUT_RMS_MAX = 5.0
"""A column of ``X`` whose root mean square is above this is far above unit scale (a
standardised column's is 1; a 0/1 column's at most 1): its first-layer edges reach large
pre-activations with weights of the initialisation's scale. On Friedman #1 (750 rows)
with standardised inputs multiplied by 10 the default regressor's test RMSE rose from
1.085-1.103 to 1.34-1.69 (by 3: 1.12; seeds 0-1, ``benchmarks/input_scale.py``)."""

INPUT_MAX_ABS_MIN = 0.1
"""Columns of ``X`` whose largest absolute values are, at the median over the columns that
vary, below this are far below unit scale (a standardised column's largest is at least 1;
a 0/1 column's is 1): the prior's slab (``prior_variance``) pulls the weights they need
towards 0. On Friedman #1 with standardised inputs multiplied by 0.03 the default
regressor's test RMSE rose from 1.085-1.103 to 1.38-1.65 (by 0.1: 1.07-1.12). The median, not
every column: one faint column (a pixel that is rarely lit) costs a fit little."""


def _off_scale_message(X: NDArray[Any]) -> str | None:
    """What of ``X`` ``(n, p)`` is far from unit scale (:class:`InputScaleWarning`), in
    words; ``None`` where nothing is. Reads ``X`` in blocks of rows (a float64 copy of a
    block at a time, not of ``X``)."""
    n, p = X.shape
    squares = np.zeros(p)
    low, high = np.full(p, np.inf), np.full(p, -np.inf)
    for start in range(0, n, 4096):
        block = np.asarray(X[start : start + 4096], dtype=np.float64)
        squares += np.einsum("ij,ij->j", block, block)
        low, high = np.minimum(low, block.min(axis=0)), np.maximum(high, block.max(axis=0))
    rms = np.sqrt(squares / max(n, 1))
    top = np.maximum(-low, high)  # each column's largest |value|
    parts = []
    large = np.flatnonzero(rms > INPUT_RMS_MAX)
    if large.size:
        j = int(large[np.argmax(rms[large])])
        parts.append(
            f"{large.size} of its {p} columns have a root mean square above "
            f"{INPUT_RMS_MAX:g} (column {j}: {rms[j]:.3g})"
        )
    varies = high > low
    if varies.any() and float(np.median(top[varies])) < INPUT_MAX_ABS_MIN:
        parts.append(
            f"the largest absolute value of its columns that vary is, at the median, "
            f"{float(np.median(top[varies])):.3g} (below {INPUT_MAX_ABS_MIN:g})"
        )
    if not parts:
        return None
    return (
        "X is far from unit scale: "
        + "; ".join(parts)
        + ". The prior (prior_variance) and the learning rate assume standardised inputs, "
        "so the fit may use such columns poorly: scale X first, e.g. "
        "make_pipeline(StandardScaler(), estimator)."
    )


def _is_compile_error(err: BaseException) -> bool:
    """Whether ``err`` comes from building the compiled kernels (torch.compile, inductor,
    the C++ compiler) rather than from the fit itself."""
    mod = type(err).__module__
    return mod.startswith(("torch._dynamo", "torch._inductor")) or isinstance(
        err, (OSError, ImportError)
    )


class _OutputScale(nn.Module):
    """``out * scale + shift``: a network fitted on the standardised target, in user units."""

    def __init__(self, module: nn.Module, scale: float, shift: float) -> None:
        super().__init__()
        self.module = module
        self.scale, self.shift = scale, shift

    def forward(self, x: Tensor) -> Tensor:
        return self.module(x) * self.scale + self.shift


def _to_numpy(a: Any) -> Any:
    if isinstance(a, Tensor):
        return a.detach().cpu().numpy()
    return a


# -- parameter checks --------------------------------------------------------------------
# Each raises TypeError for a value of the wrong kind and ValueError for one out of range,
# and names the parameter, so a bad setting never surfaces as a raw torch/numpy error.
def _check_int(name: str, value: Any, minimum: int, reason: str = "") -> int:
    # bool is an int subclass, but max_iter=True is a mistake, not a count; 2.5 draws is
    # refused rather than silently truncated.
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}{reason}, got {value!r}")
    return int(value)


def _check_real(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_inclusive: bool = False,
    high_inclusive: bool = False,
    allow_none: bool = False,
) -> None:
    """A finite real number in ``(low, high)`` (``low_inclusive``: ``[low, ...``;
    ``high_inclusive``: ``..., high]``)."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {value!r} ({type(value).__name__})")
    v = float(value)
    below = low is not None and (v < low if low_inclusive else v <= low)
    above = high is not None and (v > high if high_inclusive else v >= high)
    if not math.isfinite(v) or below or above:
        lo = "-inf" if low is None else f"{low:g}"
        hi = "inf" if high is None else f"{high:g}"
        rng = f"{'[' if low_inclusive else '('}{lo}, {hi}{']' if high_inclusive else ')'}"
        raise ValueError(f"{name} must be a finite number in {rng}, got {value!r}")


def _check_choice(name: str, value: Any, choices: list[str]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {choices}, got {value!r}")


def _hidden_sizes(value: Any) -> tuple[int, ...]:
    """``hidden_layer_sizes`` as a tuple; an int is one hidden layer (as sklearn's MLP)."""
    sizes = (value,) if isinstance(value, numbers.Integral) else value
    try:
        sizes = tuple(sizes)
    except TypeError:
        raise TypeError(
            f"hidden_layer_sizes must be an int or a sequence of ints, got {value!r}"
        ) from None
    for h in sizes:
        if isinstance(h, bool) or not isinstance(h, numbers.Integral) or h < 1:
            raise ValueError(f"hidden_layer_sizes must be positive integers, got {value!r}")
    return tuple(int(h) for h in sizes)


class _SeedSource:
    """Draws torch seeds from ``random_state``: int, None, RandomState or Generator."""

    def __init__(self, random_state: Any) -> None:
        self._gen: np.random.Generator | None = None
        self._rs: np.random.RandomState | None = None
        if isinstance(random_state, np.random.Generator):
            self._gen = random_state
        elif isinstance(random_state, bool):
            raise TypeError(f"random_state must be an int, not a bool, got {random_state!r}")
        elif isinstance(random_state, numbers.Integral) and not 0 <= int(random_state) < 2**32:
            raise ValueError(f"random_state must lie in [0, 2**32), got {random_state!r}")
        else:
            try:
                self._rs = check_random_state(random_state)
            except ValueError:
                raise TypeError(
                    "random_state must be an int, None, a numpy RandomState or a numpy "
                    f"Generator, got {random_state!r}"
                ) from None

    def seed(self) -> int:
        # RandomState.randint keeps the seeds (and so the fits) of earlier versions.
        if self._rs is not None:
            return int(self._rs.randint(0, 2**31 - 1))
        assert self._gen is not None
        return int(self._gen.integers(0, 2**31 - 1))


def _check_numeric(a: Any, name: str) -> Any:
    """Refuse string (or non-numeric object) data with a message naming ``a``.

    Returns ``a``, with object arrays converted to float64 here so that sklearn's later
    messages (NaN, infinity) name the argument too.
    """
    if a is None or sparse.issparse(a) or hasattr(a, "dtypes"):
        return a  # sklearn's own checks give clear messages for these (and DataFrames)
    arr = a if isinstance(a, np.ndarray) else np.asarray(a, dtype=object)
    if arr.dtype.kind in "USV":
        raise ValueError(f"{name} must be numeric, got an array of dtype {arr.dtype}")
    if arr.dtype.kind != "O":
        return a
    try:
        return arr.astype(np.float64)
    except (TypeError, ValueError) as e:
        # Same type as numpy's error (sklearn's checks expect TypeError for dicts).
        raise type(e)(f"{name} must be numeric; it holds values that are not: {e}") from e


def _fitted_attributes(est: BaseEstimator) -> dict[str, Any]:
    # sklearn's convention (check_is_fitted): fitted state lives in attributes ending in
    # "_"; that includes private ones such as _predict_seed_.
    return {k: v for k, v in vars(est).items() if k.endswith("_") and not k.startswith("__")}


def _reaches_output(masks: list[NDArray[np.bool_]]) -> bool:
    """Whether kept weights (per layer, ``(out, in)``) connect some input to some output."""
    if not masks or any(m.ndim != 2 for m in masks):
        return True  # not an MLP of linear layers: no claim
    reach: NDArray[np.bool_] = np.ones(masks[0].shape[1], dtype=bool)
    for m in masks:
        if m.shape[1] != reach.size:
            return True
        reach = np.asarray(m[:, reach].any(axis=1), dtype=bool)
    return bool(reach.any())


def _layer_pairs(p: int, hidden: Any, n_out: int) -> list[tuple[int, int]]:
    sizes = [p, *_hidden_sizes(hidden), n_out]
    return list(zip(sizes[:-1], sizes[1:], strict=True))


@contextmanager
def _diverged_names(est: Any) -> Iterator[None]:
    """A loss that overflowed during fit names the estimator's settings to change."""
    try:
        yield
    except FloatingPointError as err:
        raise FloatingPointError(
            f"{type(est).__name__}: training diverged ({err}); lower learning_rate_init "
            f"(now {est.learning_rate_init!r}) or init_mu_range, or standardise X"
        ) from None


def _empirical_bayes_inclusion(epoch: int, model: nn.Module, history: History) -> None:
    """Training callback: set ``lambda`` to the mean ``phi`` (its ELBO maximiser given the
    gates: ``d KL / d lambda = 0`` there), capped at 0.5 so that the prior never favours
    keeping a weight."""
    with torch.no_grad():
        phi = torch.cat(
            [torch.sigmoid(layer.alpha).reshape(-1) for layer in spike_slab_layers(model)]
        )
        log_lam = math.log(min(max(float(phi.mean()), 1e-6), 0.5))
        for m in model.modules():
            buf = m._buffers.get("log_prior_inclusion")
            if buf is not None:
                buf.fill_(log_lam)
