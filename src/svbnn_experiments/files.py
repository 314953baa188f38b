"""Results folders: settings and CSV files written atomically, the run environment, and the
lock that keeps two runs out of one ``--out`` folder.

Results files are written to a temporary file in the same folder and renamed over the
target: a reader, a crash or a second run never sees a half-written ``results.csv``,
``settings.json`` or ``report.md``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import platform
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import torch

from svbnn import __version__, get_kernel_backend
from svbnn.checkpoint import atomic_write_bytes

__all__ = [
    "LOCK_NAME",
    "OutputLockedError",
    "atomic_savefig",
    "atomic_write_text",
    "environment_info",
    "jsonable",
    "lock_output",
    "read_csv",
    "read_settings",
    "write_csv",
    "write_settings",
]


# ------------------------------------------------------------------------ files & env
def jsonable(obj: Any) -> Any:
    """``obj`` as JSON can hold it: mappings with text keys, lists for tuples, paths as
    text, numpy scalars and arrays as numbers and lists, non-finite floats as text."""
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    return obj


def _git_commit() -> dict[str, Any]:
    # src/svbnn_experiments/files.py: the checkout is two folders up.
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        )
        if head.returncode != 0:
            return {"commit": None}
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return {"commit": head.stdout.strip(), "dirty": bool(dirty.stdout.strip())}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None}


def environment_info() -> dict[str, Any]:
    """Versions, git commit, machine and thread settings, for ``settings.json``."""
    return {
        "svbnn": __version__,
        "torch": torch.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "svbnn_kernels": get_kernel_backend().value,
        "git": _git_commit(),
        "command": " ".join(sys.argv),
    }


# Results files are written to a temporary file in the same folder and renamed over the
# target (os.replace is atomic on one file system): a reader, a crash or a second run never
# sees a half-written results.csv, settings.json or report.md.
def _temp_name(path: Path) -> Path:
    # Hidden, unique per writer, and ending in the target's suffix (matplotlib picks the
    # image format from it).
    return path.with_name(f".{path.stem}.{os.getpid()}-{secrets.token_hex(4)}.tmp{path.suffix}")


def atomic_write_text(path: Path, text: str) -> Path:
    """Write ``text`` (UTF-8, line endings kept as given) to ``path`` atomically.

    Through :func:`svbnn.checkpoint.atomic_write_bytes` (the one atomic writer): a temporary
    file beside ``path``, flushed to disk, then renamed over ``path``; on any failure the
    temporary file is removed and ``path`` is left as it was.

    Parameters
    ----------
    path : Path
    text : str

    Returns
    -------
    Path
        ``path``.
    """
    atomic_write_bytes(path, text.encode("utf-8"))
    return path


def atomic_savefig(fig: Any, path: Path, **kwargs: Any) -> Path:
    """``fig.savefig(path, **kwargs)`` through a temporary file and a rename (see
    :func:`atomic_write_text`)."""
    path = Path(path)
    tmp = _temp_name(path)
    try:
        fig.savefig(tmp, **kwargs)
        os.replace(tmp, path)
    except BaseException:
        with _suppress_oserror():
            tmp.unlink()
        raise
    return path


@contextmanager
def _suppress_oserror() -> Iterator[None]:
    try:
        yield
    except OSError:
        pass


def write_settings(out: Path, settings: Mapping[str, Any]) -> Path:
    """Write ``settings.json`` atomically (sorted keys, NaN as strings)."""
    return atomic_write_text(
        out / "settings.json", json.dumps(jsonable(settings), indent=2, sort_keys=True) + "\n"
    )


def read_settings(out: Path) -> dict[str, Any]:
    """Read ``settings.json`` of an output folder (empty dict when missing).

    Raises
    ------
    ValueError
        When the file is not a JSON object (the message names the file).
    """
    path = out / "settings.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data


def write_csv(path: Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write rows (dicts) as CSV, atomically; the header is the union of keys in first-seen
    order."""
    rows = list(rows)
    header: list[str] = []
    for row in rows:
        for k in row:
            if k not in header:
                header.append(k)
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=header, restval="")
    w.writeheader()
    for row in rows:
        w.writerow({k: _fmt_cell(v) for k, v in row.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, buf.getvalue())


def _fmt_cell(v: Any) -> Any:
    if isinstance(v, float):
        return repr(v)
    return v


def _parse_cell(v: str) -> Any:
    if v == "":
        return None
    try:
        if v.lstrip("-").isdigit():
            return int(v)
        return float(v)
    except ValueError:
        return v


TEXT_COLUMNS = frozenset({"method", "setting", "selected", "lambda_label", "panel", "sampler"})
"""Columns kept as text by :func:`read_csv` (a lambda label such as "1e-5" is a name)."""


def read_csv(path: Path) -> list[dict[str, Any]]:
    """Read a CSV written by :func:`write_csv`: numbers parsed (except :data:`TEXT_COLUMNS`),
    empty cells as ``None``.

    Raises
    ------
    FileNotFoundError
        When ``path`` does not exist.
    ValueError
        When a row has more or fewer cells than the header (the message names the file and
        the line), or the file is not UTF-8 text.
    """
    if not path.exists():
        raise FileNotFoundError(f"{path} not found: run the artifact first (without --report-only)")
    out: list[dict[str, Any]] = []
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            for row in reader:
                # DictReader puts surplus cells under the key None and fills missing ones
                # with None: either means a damaged file, not a value.
                if None in row or any(v is None for v in row.values()):
                    raise ValueError(
                        f"{path}, line {reader.line_num}: {len(reader.fieldnames or [])} "
                        "columns expected; the file is damaged (re-run the artifact)"
                    )
                out.append(
                    {
                        k: (v if k in TEXT_COLUMNS and v != "" else _parse_cell(v))
                        for k, v in row.items()
                    }
                )
    except (UnicodeDecodeError, csv.Error) as exc:
        raise ValueError(f"{path} is not a readable CSV file ({exc})") from None
    return out


# ------------------------------------------------------------------------ output lock
LOCK_NAME = ".svbnn.lock"
"""Lock file of an output folder while a run writes into it."""


class OutputLockedError(OSError):
    """Another live run is writing the same output folder."""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    except (OSError, OverflowError):
        return False
    return True


def _read_lock(path: Path) -> dict[str, Any] | None:
    """The lock's owner record; ``None`` when the file is gone; ``{}`` when unreadable."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError):
        return {}
    try:
        data = json.loads(text)
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


# A lock file that exists but holds no owner yet is a run between O_EXCL and its write:
# only after this many seconds is it treated as left behind by a crash.
_EMPTY_LOCK_GRACE_S = 10.0


def _lock_is_stale(path: Path, owner: dict[str, Any]) -> bool:
    if not owner:
        try:
            age = time.time() - path.stat().st_mtime
        except FileNotFoundError:
            return False
        return age > _EMPTY_LOCK_GRACE_S
    pid = owner.get("pid")
    if owner.get("host") != socket.gethostname() or not isinstance(pid, int):
        # Another machine (shared file system): its pid cannot be checked from here.
        return False
    return not _pid_alive(pid)


def _take_over(path: Path, owner: dict[str, Any]) -> None:
    """Remove the stale lock ``path`` whose content was ``owner``.

    The lock is first renamed to a name of ours (atomic: of several processes finding the
    same stale lock, one rename wins), then checked: if what was moved is not the stale
    record (another process took over and locked in between), it is put back.
    """
    moved = path.with_name(f"{path.name}.stale-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.rename(path, moved)
    except FileNotFoundError:
        return
    if _read_lock(moved) == owner:
        moved.unlink(missing_ok=True)
        return
    try:
        os.link(moved, path)  # fails, rather than overwrite, if a lock appeared meanwhile
    except OSError:
        pass
    moved.unlink(missing_ok=True)


def _acquire_lock(path: Path, record: dict[str, Any], folder: Path, option: str) -> None:
    """Create the lock file ``path`` holding ``record``, taking over a stale lock.

    Parameters
    ----------
    path : Path
        The lock file.
    record : dict
        The owner's pid, host, start time and command, written as JSON.
    folder, option
        The locked folder and the option that named it, for the messages.

    Raises
    ------
    OutputLockedError
        When another live run holds the folder, or after 20 tries.
    """
    for _ in range(20):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            _refuse_foreign_lock(path, folder, option)
            owner = _read_lock(path)
            if owner is None:
                continue  # released between our open and our read
            if _lock_is_stale(path, owner):
                _take_over(path, owner)
                continue
            if not owner:
                time.sleep(0.05)  # a run is writing its record; look again
                continue
            where = "" if owner.get("host") == record["host"] else f" on {owner.get('host')}"
            raise OutputLockedError(
                f"{option} {folder}: another run (pid {owner.get('pid')}{where}) is writing "
                f"this folder; wait for it, or choose another {option} (if no such run "
                f"exists, delete {path})"
            ) from None
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(record) + "\n")
        break
    else:
        raise OutputLockedError(
            f"{option} {folder}: could not lock {path} (it keeps changing); if no other run "
            f"writes this folder, delete {path}"
        )


def _refuse_foreign_lock(path: Path, folder: Path, option: str) -> None:
    """Refuse a lock path that svbnn did not write: a symbolic link (dangling or not) or
    something other than a regular file; waiting would never end."""
    if path.is_symlink():
        try:
            target = f" to {os.readlink(path)}"
        except OSError:  # pragma: no cover - removed meanwhile
            target = ""
        what = f"a symbolic link{target}"
    elif path.exists() and not path.is_file():
        what = "not a regular file"
    else:
        return
    raise OutputLockedError(
        f"{option} {folder}: {path} is {what}, not a lock svbnn wrote; remove it and run again"
    )


@contextmanager
def lock_output(folder: Path, option: str = "--out") -> Iterator[Path]:
    """Hold the output folder ``folder`` for one run: refuse if another live run holds it.

    The lock is a file ``.svbnn.lock`` created with ``O_CREAT | O_EXCL`` (atomic: of two
    runs, exactly one creates it) holding the owner's pid and host; it is removed when the
    block exits. A lock left by a dead process on this host is taken over.

    Parameters
    ----------
    folder : Path
        An existing folder.
    option : str
        The option that named the folder, for the message.

    Yields
    ------
    Path
        The lock file.

    Raises
    ------
    OutputLockedError
        When another live run holds the folder (the message names it and its pid).
    """
    path = Path(folder) / LOCK_NAME
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "command": " ".join(sys.argv),
    }
    _acquire_lock(path, record, folder, option)
    try:
        yield path
    finally:
        # Remove only our own lock (a stale-lock takeover elsewhere must not be undone).
        if _read_lock(path) == record:
            path.unlink(missing_ok=True)
