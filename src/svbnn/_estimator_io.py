"""A fitted estimator to and from a weights-only file (:func:`save_estimator`,
:func:`load_estimator`; the estimators' ``save`` / ``load``).

The file is a short header followed by the bytes of ``torch.save`` of a dictionary that holds
strings, numbers and tensors only::

    SVBNN-ESTIMATOR 1\\n
    <sha256 of the payload, 64 hex digits>\\n
    <payload: {"format", "version", "meta" (JSON text), "tensors", "module"}>

``meta`` is JSON: the estimator's class name, its parameters (``get_params``) and its fitted
attributes, arrays replaced by references into ``tensors``; ``module`` is the fitted
network's ``state_dict``. Loading reads the payload with ``torch.load(...,
weights_only=True)`` (tensors, numbers, strings and containers only; a pickle that would run
code is refused), rebuilds the estimator from a class in a fixed list (never a name looked
up in the file), checks its parameters as ``fit`` does, rebuilds the network from them and
loads the weights into it (shapes checked, values finite). The SHA-256 detects accidental
corruption (a truncated or altered copy); anyone can recompute it, so it says nothing about
who wrote the file, and what the file holds is validated instead.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from dataclasses import fields
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from torch import nn

from .checkpoint import atomic_write_bytes
from .nn.base import set_generator
from .training import History

__all__ = ["EstimatorFileError", "load_estimator", "save_estimator"]

_MAGIC = b"SVBNN-ESTIMATOR 1\n"
_HASH_LEN = 64
_FORMAT = "svbnn-estimator"
_VERSION = 1
_E = TypeVar("_E")


class EstimatorFileError(ValueError):
    """An estimator file that cannot be read or trusted (the message names the file)."""


def _estimator_classes() -> dict[str, type]:
    """The classes a file may name (imported here: the estimators import this module)."""
    from . import baselines, estimators

    classes: list[type] = [
        estimators.SVBNNRegressor,
        estimators.SVBNNClassifier,
        baselines.VBNNRegressor,
        baselines.VBNNClassifier,
        baselines.VDRegressor,
        baselines.VDClassifier,
        baselines.HSBNNRegressor,
        baselines.HSBNNClassifier,
    ]
    return {c.__name__: c for c in classes}


# -- encoding ----------------------------------------------------------------------------------


class _Encoder:
    """JSON-able values for the fitted attributes; arrays and tensors go to ``tensors``."""

    def __init__(self) -> None:
        self.tensors: dict[str, torch.Tensor] = {}

    def _store(self, t: torch.Tensor) -> str:
        key = str(len(self.tensors))
        self.tensors[key] = t.detach().cpu().clone()
        return key

    def encode(self, value: Any, name: str) -> Any:
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        if isinstance(value, np.generic):
            return {"__scalar__": value.item(), "dtype": value.dtype.str}
        if isinstance(value, np.ndarray):
            if value.dtype.kind in "biuf":
                return {"__array__": self._store(torch.from_numpy(np.array(value)))}
            if value.dtype.kind in "UO" and all(isinstance(v, str) for v in value.flat):
                return {
                    "__strings__": value.tolist(),
                    "dtype": "object" if value.dtype.kind == "O" else value.dtype.str,
                }
            raise TypeError(f"attribute {name}: an array of dtype {value.dtype} cannot be saved")
        if isinstance(value, torch.Tensor):
            return {"__tensor__": self._store(value)}
        if isinstance(value, History):
            return {"__history__": self.encode(value.as_dict(), name)}
        if isinstance(value, tuple):
            return {"__tuple__": [self.encode(v, name) for v in value]}
        if isinstance(value, list):
            return [self.encode(v, name) for v in value]
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {"__dict__": {k: self.encode(v, name) for k, v in value.items()}}
        raise TypeError(
            f"attribute {name} of type {type(value).__name__} cannot be saved in a "
            "weights-only file"
        )


def _decode(value: Any, tensors: dict[str, torch.Tensor], shown: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, list):
        return [_decode(v, tensors, shown) for v in value]
    if not isinstance(value, dict) or len(value) not in (1, 2):
        raise EstimatorFileError(f"estimator file {shown} holds a malformed attribute")
    kind = next(iter(value))
    payload = value[kind]
    if kind in ("__array__", "__tensor__"):
        if not isinstance(payload, str) or payload not in tensors:
            raise EstimatorFileError(f"estimator file {shown} refers to a missing array")
        t = tensors[payload]
        return t.numpy().copy() if kind == "__array__" else t.clone()
    if kind == "__scalar__":
        return np.dtype(str(value.get("dtype"))).type(payload)
    if kind == "__strings__":
        dtype = value.get("dtype")
        return np.array(payload, dtype=object if dtype == "object" else np.dtype(str(dtype)))
    if kind == "__history__":
        record = _decode(payload, tensors, shown)
        names = {f.name for f in fields(History)}
        if not isinstance(record, dict) or set(record) != names:
            raise EstimatorFileError(f"estimator file {shown} holds a malformed history")
        return History(**record)
    if kind == "__tuple__":
        return tuple(_decode(v, tensors, shown) for v in payload)
    if kind == "__dict__" and isinstance(payload, dict):
        return {str(k): _decode(v, tensors, shown) for k, v in payload.items()}
    raise EstimatorFileError(f"estimator file {shown} holds a malformed attribute ({kind!r})")


def _json_params(est: Any) -> dict[str, Any]:
    """``est.get_params()`` as JSON values (a RandomState or Generator seed source becomes
    ``None``: the fitted model's prediction seed is saved with the fitted attributes)."""
    out: dict[str, Any] = {}
    for key, value in est.get_params(deep=False).items():
        if isinstance(value, (np.random.RandomState, np.random.Generator)):
            value = None
        elif isinstance(value, np.generic):
            value = value.item()
        elif isinstance(value, (tuple, list)):
            value = [v.item() if isinstance(v, np.generic) else v for v in value]
        out[key] = value
    return out


def _n_out(est: Any) -> int:
    """The network's output width: one per class, else one."""
    classes = getattr(est, "classes_", None)
    return 1 if classes is None else len(classes)


# -- the public functions ----------------------------------------------------------------------


def save_estimator(estimator: Any, path: str | os.PathLike[str]) -> None:
    """Save a fitted svbnn estimator to a weights-only file (written atomically).

    Parameters
    ----------
    estimator : SVBNNRegressor, SVBNNClassifier or a baseline estimator
        Fitted.
    path : str or PathLike
        The file; its folder is created if missing. An existing file is replaced only once
        the new one is complete.

    Raises
    ------
    TypeError
        ``estimator`` is not an svbnn estimator.
    sklearn.exceptions.NotFittedError
        ``estimator`` is not fitted.
    """
    from sklearn.utils.validation import check_is_fitted

    classes = _estimator_classes()
    if type(estimator) not in classes.values():
        raise TypeError(
            f"estimator must be one of {', '.join(classes)}, got {type(estimator).__name__}"
        )
    check_is_fitted(estimator, "module_")
    enc = _Encoder()
    fitted = {
        k: enc.encode(v, k)
        for k, v in vars(estimator).items()
        if k.endswith("_") and not k.startswith("__") and k != "module_"
    }
    module: nn.Module = estimator.module_
    meta = {
        "class": type(estimator).__name__,
        "params": _json_params(estimator),
        "fitted": fitted,
        "n_out": _n_out(estimator),
        "training": bool(module.training),
    }
    state = {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}
    buf = io.BytesIO()
    torch.save(
        {
            "format": _FORMAT,
            "version": _VERSION,
            "meta": json.dumps(meta, allow_nan=True),
            "tensors": enc.tensors,
            "module": state,
        },
        buf,
    )
    payload = buf.getvalue()
    digest = hashlib.sha256(payload).hexdigest().encode("ascii")
    try:
        atomic_write_bytes(path, _MAGIC + digest + b"\n" + payload)
    except OSError as err:
        file = next((p for p in Path(path).parents if p.exists() and not p.is_dir()), None)
        why = f"{file} is a file, not a folder" if file is not None else err.strerror
        raise OSError(err.errno, f"cannot write the estimator to {path}: {why}") from None


def load_estimator(
    path: str | os.PathLike[str], *, device: str | None = None, expected: type | None = None
) -> Any:
    """Load an estimator saved by :func:`save_estimator`; no code from the file runs.

    Parameters
    ----------
    path : str or PathLike
        The file.
    device : str, optional
        Where to put the network (default: the ``device`` it was fitted with).
    expected : type, optional
        The class the file must hold (``SVBNNRegressor.load`` passes its own).

    Returns
    -------
    estimator
        Fitted; it predicts exactly as the saved one did (same device and kernel backend).

    Raises
    ------
    EstimatorFileError
        (A ``ValueError``.) The file is missing, not an svbnn estimator file, truncated or
        altered, holds something other than weights, names an unknown class or another
        class than ``expected``, or holds parameters or weights that do not fit together;
        the message names the file.
    """
    target = Path(path)
    shown = str(path)
    try:
        raw = target.read_bytes()
    except FileNotFoundError:
        raise EstimatorFileError(f"estimator file {shown} does not exist") from None
    except OSError as err:
        raise EstimatorFileError(f"cannot read estimator file {shown}: {err.strerror}") from None
    payload = _verified(raw, shown)
    try:
        blob = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure: an untrusted file
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise EstimatorFileError(
            f"estimator file {shown} holds more than weights and was not loaded ({first})"
        ) from None
    meta, tensors, state = _parts(blob, shown)
    est = _build(meta, shown, expected, device)
    for key, value in meta["fitted"].items():
        if not (isinstance(key, str) and key.endswith("_") and not key.startswith("__")):
            raise EstimatorFileError(f"estimator file {shown} holds a bad attribute {key!r}")
        setattr(est, key, _decode(value, tensors, shown))
    est.module_ = _network(est, meta, state, shown)
    return est


def _verified(raw: bytes, shown: str) -> bytes:
    head = len(_MAGIC) + _HASH_LEN + 1
    if not raw.startswith(_MAGIC) or len(raw) < head or raw[head - 1 : head] != b"\n":
        what = "is empty" if not raw else "is not an svbnn estimator file (est.save writes one)"
        raise EstimatorFileError(f"estimator file {shown} {what}")
    digest, payload = raw[len(_MAGIC) : head - 1], raw[head:]
    if hashlib.sha256(payload).hexdigest().encode("ascii") != digest:
        raise EstimatorFileError(
            f"estimator file {shown} is corrupted (its content does not match its SHA-256: "
            "truncated or altered)"
        )
    return payload


def _parts(
    blob: Any, shown: str
) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """``(meta, tensors, state_dict)`` of a loaded payload, their types checked."""
    bad = EstimatorFileError(f"estimator file {shown} is not a valid svbnn estimator file")
    if not isinstance(blob, dict) or blob.get("format") != _FORMAT:
        raise bad
    if blob.get("version") != _VERSION:
        raise EstimatorFileError(
            f"estimator file {shown} has format version {blob.get('version')!r}; this svbnn "
            f"reads version {_VERSION}"
        )
    tensors, state, text = blob.get("tensors"), blob.get("module"), blob.get("meta")
    if not (isinstance(tensors, dict) and isinstance(state, dict) and isinstance(text, str)):
        raise bad
    if not all(isinstance(t, torch.Tensor) for t in [*tensors.values(), *state.values()]):
        raise bad
    try:
        meta = json.loads(text)
    except ValueError:
        raise bad from None
    if not (
        isinstance(meta, dict)
        and isinstance(meta.get("params"), dict)
        and isinstance(meta.get("fitted"), dict)
        and isinstance(meta.get("n_out"), int)
        and meta["n_out"] >= 1
    ):
        raise bad
    return meta, tensors, state


def _build(meta: dict[str, Any], shown: str, expected: type | None, device: str | None) -> Any:
    """An unfitted estimator of the file's class and parameters, checked as ``fit`` does."""
    classes = _estimator_classes()
    name = meta.get("class")
    cls = classes.get(name) if isinstance(name, str) else None
    if cls is None:
        raise EstimatorFileError(
            f"estimator file {shown} holds an unknown estimator class {name!r} (known: "
            f"{', '.join(classes)})"
        )
    if expected is not None and cls is not expected:
        raise EstimatorFileError(
            f"estimator file {shown} holds a {name}, not a {expected.__name__}; load it with "
            f"{name}.load or svbnn.load_estimator"
        )
    params = dict(meta["params"])
    if isinstance(params.get("hidden_layer_sizes"), list):
        params["hidden_layer_sizes"] = tuple(params["hidden_layer_sizes"])
    if device is not None:
        params["device"] = device
    try:
        est = cls(**params)
        est._check_params()
    except (TypeError, ValueError) as err:
        raise EstimatorFileError(
            f"estimator file {shown} holds parameters that {name} refuses: {err}"
        ) from None
    return est


def _network(
    est: Any, meta: dict[str, Any], state: dict[str, torch.Tensor], shown: str
) -> nn.Module:
    """The fitted network, rebuilt from the parameters and loaded with the saved weights."""
    n_features = getattr(est, "n_features_in_", None)
    if not isinstance(n_features, int) or n_features < 1:
        raise EstimatorFileError(f"estimator file {shown} has no valid n_features_in_")
    for key, t in state.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise EstimatorFileError(
                f"estimator file {shown} holds non-finite weights ({key}); it was not loaded"
            )
    gen = torch.Generator(device=est.device)
    try:
        module = est._build_module(n_features, int(meta["n_out"]), gen)
        module.load_state_dict(state, strict=True)
    except (RuntimeError, ValueError, TypeError, KeyError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise EstimatorFileError(
            f"estimator file {shown}: its weights do not fit the network its parameters "
            f"describe ({first})"
        ) from None
    set_generator(module, None)
    module.train(bool(meta.get("training", False)))
    if not isinstance(getattr(est, "_predict_seed_", None), int):
        raise EstimatorFileError(f"estimator file {shown} has no valid prediction seed")
    return module
