"""Device checks shared by the estimators, the ``svbnn`` command and the GPU test guard.

A device setting is checked once, where it is given, so that a missing backend is a
one-line :class:`ValueError` naming the setting rather than torch's ``AssertionError``
("Torch not compiled with CUDA enabled") from deep inside a fit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["check_device", "check_training_devices", "cuda_unavailable_reason"]


def cuda_unavailable_reason(index: int | None = None) -> str | None:
    """Why CUDA (device ``index``, or any device) cannot be used here; ``None`` if it can.

    Parameters
    ----------
    index : int, optional
        A CUDA device index (``cuda:N``); ``None`` asks for the current device.

    Returns
    -------
    str or None
        One sentence without a final period, e.g. ``"CUDA is not available in this
        PyTorch build (torch 2.13.0+cpu)"``; ``None`` when the device can be used.
    """
    if not torch.backends.cuda.is_built():
        return f"CUDA is not available in this PyTorch build (torch {torch.__version__})"
    if not torch.cuda.is_available():
        return (
            "no CUDA device is visible (torch.cuda.is_available() is False: no GPU, no "
            "driver, or CUDA_VISIBLE_DEVICES hides it)"
        )
    count = torch.cuda.device_count()
    if index is not None and index >= count:
        return f"only {count} CUDA device(s) are visible (cuda:0 to cuda:{count - 1})"
    return None


def check_device(value: Any, name: str = "device") -> torch.device:
    """``value`` as a :class:`torch.device` this process can use, or a one-line error.

    Parameters
    ----------
    value : str or torch.device
        ``"cpu"``, ``"cuda"``, ``"cuda:N"`` or ``"mps"`` (or the same as a device).
    name : str
        The setting's name as the user gave it (``"device"``, ``"--device"``), which the
        error message names.

    Returns
    -------
    torch.device

    Raises
    ------
    ValueError
        For text that is not a device, a device type svbnn does not run on, or a device
        the host or this PyTorch build does not have.
    """
    try:
        dev = torch.device(value)
    except (RuntimeError, TypeError, ValueError):
        raise ValueError(
            f"{name} must be 'cpu', 'cuda', 'cuda:N' or 'mps', got {value!r}"
        ) from None
    if dev.type == "cuda":
        reason = cuda_unavailable_reason(dev.index)
        if reason is not None:
            raise ValueError(f"{name}={str(value)!r}: {reason}; use {name}='cpu'")
    elif dev.type == "mps":
        if not torch.backends.mps.is_available():
            raise ValueError(f"{name}={str(value)!r}: MPS is not available here")
    elif dev.type != "cpu":
        raise ValueError(f"{name} must be 'cpu', 'cuda', 'cuda:N' or 'mps', got {value!r}")
    return dev


def _normalized(device: torch.device) -> torch.device:
    # "cuda" and "cuda:0" name the same device when 0 is the current one; "cpu" has no index.
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    if device.type == "cpu":
        return torch.device("cpu")
    return device


def check_training_devices(
    params: Sequence[torch.Tensor],
    X: torch.Tensor,
    y: torch.Tensor,
    generator: torch.Generator,
) -> None:
    """Refuse a training run whose tensors and generator are not on one device.

    Parameters
    ----------
    params : sequence of Tensor
        The model's parameters.
    X, y : Tensor
        The training data.
    generator : torch.Generator
        The run's generator (minibatch orders and weight draws are drawn on the device).

    Raises
    ------
    ValueError
        Naming both devices and the remedy, instead of torch's error from the first
        operation that mixes them.
    """
    where = _normalized(X.device)
    if _normalized(y.device) != where:
        raise ValueError(f"X is on {X.device} but y on {y.device}; move both to one device")
    for p in params:
        if _normalized(p.device) != where:
            raise ValueError(
                f"the model's parameters are on {p.device} but X on {X.device}; move the "
                "model (model.to(X.device)) or the data"
            )
    if _normalized(generator.device) != where:
        raise ValueError(
            f"the generator is on {generator.device} but X on {X.device}; create it on the "
            "data's device: torch.Generator(device=X.device)"
        )
