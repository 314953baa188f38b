"""Training checkpoints: written atomically, hash-checked and loaded as weights only.

A checkpoint file is a short header followed by the bytes of ``torch.save(state)``::

    SVBNN-CHECKPOINT 1\\n
    <sha256 of the payload, 64 hex digits>\\n
    <payload>

Loading checks the header and the hash before anything is deserialised, and then reads
the payload with ``torch.load(..., weights_only=True)``, which builds tensors, numbers,
strings and containers only: a planted file cannot run code (pickle's ``__reduce__``). The
hash is a plain SHA-256 that anyone can recompute: it detects accidental corruption (a
truncated or damaged file), not a deliberate change, so what is read is validated before
use by its reader (:func:`svbnn.training.train` checks a checkpoint's epoch, history,
generator state, finite values, shapes and run identity). Every failure is a
:class:`CheckpointError` (a :class:`ValueError`) that names the file and says what to do.

Saving writes a temporary file beside the target and renames it over the target
(:func:`os.replace`), so an interrupted save leaves the previous checkpoint intact. A
temporary left by a killed process is removed by the next save or load of that checkpoint.
"""

from __future__ import annotations

import hashlib
import io
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

__all__ = ["CheckpointError", "atomic_write_bytes", "load_checkpoint", "save_checkpoint"]

_MAGIC = b"SVBNN-CHECKPOINT 1\n"
_HASH_LEN = 64  # hex digits of a SHA-256


class CheckpointError(ValueError):
    """A checkpoint file that cannot be trusted or read (the message names the file)."""


def _remove_stale_temporaries(path: Path) -> None:
    # Temporaries are named "<name>.<random>.tmp" (see atomic_write_bytes); one that still
    # exists when no save is running was left by a killed process.
    for tmp in path.parent.glob(f"{path.name}.*.tmp"):
        try:
            tmp.unlink()
        except OSError:  # pragma: no cover - a concurrent cleanup removed it first
            pass


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename.

    Readers see the old file or the new one, never a mixture; the temporary is removed
    when writing fails.

    Raises
    ------
    OSError
        When ``path`` cannot be written (it lies under a file, in a read-only or special
        place, the disk is full): the message names ``path`` and the reason.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=target.name + ".", suffix=".tmp")
    except OSError as err:
        raise _write_error(target, err) from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as err:
        raise _write_error(target, err) from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _write_error(target: Path, err: OSError) -> OSError:
    """An error of the same class as ``err`` that names ``target`` (the caller's path),
    not the temporary file or the folder the operating system refused."""
    parent = next((p for p in target.parents if p.exists()), None)
    if parent is not None and not parent.is_dir():
        why = f"{parent} is a file, not a folder"
    else:
        why = err.strerror or type(err).__name__
    out = type(err)(f"cannot write {target}: {why}")
    out.errno = err.errno
    return out


def save_checkpoint(state: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Save ``state`` (tensors, numbers, strings, lists and dicts of them) to ``path``.

    Parameters
    ----------
    state : mapping
        E.g. ``{"model": model.state_dict(), "optimizer": opt.state_dict(), "epoch": 3}``.
        Only what ``torch.load(..., weights_only=True)`` can rebuild is allowed, so that
        loading never needs to trust the file.
    path : path
        The checkpoint file; its folder is created if missing.
    """
    target = Path(path)
    buf = io.BytesIO()
    torch.save(dict(state), buf)
    payload = buf.getvalue()
    digest = hashlib.sha256(payload).hexdigest().encode("ascii")
    _remove_stale_temporaries(target)
    atomic_write_bytes(target, _MAGIC + digest + b"\n" + payload)


_ADVICE = "delete it (training then starts afresh) or use another output folder"


def _read_checkpoint_bytes(target: Path) -> bytes:
    """The bytes of the checkpoint file ``target``; stale temporaries beside it are removed.

    Raises
    ------
    CheckpointError
        When the file does not exist or cannot be read.
    """
    try:
        raw = target.read_bytes()
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {target} does not exist") from None
    except OSError as err:
        raise CheckpointError(f"cannot read checkpoint {target}: {err.strerror}") from None
    _remove_stale_temporaries(target)
    return raw


def _verified_payload(raw: bytes, target: Path) -> bytes:
    """The payload of a checkpoint file's bytes ``raw``, after its header and SHA-256 check.

    Raises
    ------
    CheckpointError
        When ``raw`` is empty, has no svbnn header, or does not match its digest.
    """
    head = len(_MAGIC) + _HASH_LEN + 1
    if not raw.startswith(_MAGIC) or len(raw) < head or raw[head - 1 : head] != b"\n":
        what = (
            "is empty"
            if not raw
            else "is not an svbnn checkpoint (or was written by an older version)"
        )
        raise CheckpointError(f"checkpoint {target} {what}; {_ADVICE}")
    digest, payload = raw[len(_MAGIC) : head - 1], raw[head:]
    if hashlib.sha256(payload).hexdigest().encode("ascii") != digest:
        raise CheckpointError(
            f"checkpoint {target} is corrupted (its content does not match its SHA-256: "
            f"truncated or altered); {_ADVICE}"
        )
    return payload


def load_checkpoint(
    path: str | os.PathLike[str], map_location: str | torch.device | None = "cpu"
) -> dict[str, Any]:
    """Load a checkpoint written by :func:`save_checkpoint`.

    Parameters
    ----------
    path : path
    map_location : str or torch.device, optional
        Where tensors are put (default the CPU; ``load_state_dict`` moves them on).

    Returns
    -------
    dict
        The saved state.

    Raises
    ------
    CheckpointError
        The file is missing, empty, truncated, altered, not an svbnn checkpoint, or holds
        something other than weights; the message names the file.
    """
    target = Path(path)
    payload = _verified_payload(_read_checkpoint_bytes(target), target)
    try:
        state = torch.load(io.BytesIO(payload), map_location=map_location, weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure means an untrusted file
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(
            f"checkpoint {target} holds more than weights and was not loaded ({first}); {_ADVICE}"
        ) from None
    if not isinstance(state, dict):
        raise CheckpointError(f"checkpoint {target} does not hold a state dictionary; {_ADVICE}")
    return state
