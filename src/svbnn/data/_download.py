"""Errors, checksums and downloads for the real-data loaders (standard library only).

Files are hashed at most once per process: the sha256 is cached under the file's
``(resolved path, size, mtime_ns, inode)``, so re-loading a data set (e.g. one UCI split
after another) does not re-read tens of megabytes. A file edited in place gets a new mtime,
or a new inode when it is replaced, and is hashed again. :func:`clear_checksum_cache` forgets
everything.

Downloads go through :mod:`urllib.request` into a temporary file next to the destination,
are hashed while streaming, are bounded in size (``max_bytes``: the registered size) and in
time (``timeout`` per connection and read, ``deadline`` for the whole transfer), and are
moved into place with :func:`os.replace` only when the hash matches, so an interrupted or
corrupted download never leaves a file that looks valid.
Files without a registered hash are checked by the caller's ``validate`` (parsing) at the same
point, and a ``root`` keeps every destination inside the data folder, symlinks resolved.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection
from pathlib import Path
from typing import BinaryIO, NamedTuple

__all__ = [
    "ChecksumError",
    "DataIntegrityError",
    "DataNotFoundError",
    "DownloadError",
    "check_size",
    "clear_checksum_cache",
    "download_file",
    "ensure_inside",
    "file_sha256",
    "verify_file",
]

logger = logging.getLogger(__name__)

_CHUNK = 1 << 20  # 1 MiB: large enough for throughput, small enough for steady progress logs
_ALLOWED_SCHEMES = ("http", "https", "file")
MIN_RATE_BYTES_S = 64 * 1024
"""Slowest average transfer rate a download may have: its default ``deadline`` is the
per-read ``timeout`` plus ``max_bytes`` at this rate (an index file: the timeout; MNIST:
about 3 minutes more)."""
_UNKNOWN_SIZE_BYTES = 1 << 30  # the deadline's size when no max_bytes is given (1 GiB)


class DataNotFoundError(FileNotFoundError):
    """A data directory or file is missing.

    The message says what is missing, where it was looked for, and how to provide it.
    """


class DownloadError(DataNotFoundError):
    """Fetching a data file failed (bad URL, network or HTTP error, truncated transfer)."""


class DataIntegrityError(ValueError):
    """A data file is present but its content is not what the loader expects."""


class ChecksumError(DataIntegrityError):
    """A data file's sha256 does not match the registered value.

    Parameters
    ----------
    path : str or Path
        The offending file.
    expected : collection of str
        The accepted sha256 hex digests.
    actual : str
        The sha256 hex digest of the file.
    hint : str
        What the user can do about it.
    """

    def __init__(
        self, path: str | Path, expected: Collection[str], actual: str, hint: str = ""
    ) -> None:
        self.path = path
        self.expected = tuple(expected)
        self.actual = actual
        self.hint = hint
        wanted = (
            self.expected[0] if len(self.expected) == 1 else "one of " + ", ".join(self.expected)
        )
        message = f"sha256 mismatch for {path}: expected {wanted}, got {actual}."
        if hint:
            message += " " + hint
        super().__init__(message)

    def __reduce__(self) -> tuple[type[ChecksumError], tuple[object, ...]]:
        # The default reduce would call __init__ with the message alone; keep it picklable
        # so it survives multiprocessing workers.
        return (type(self), (self.path, self.expected, self.actual, self.hint))


_HASH_CACHE: dict[tuple[str, int, int, int], str] = {}
_HASH_LOCK = threading.Lock()


def _stamp(path: Path) -> tuple[str, int, int, int]:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


def _hash_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_sha256(path: str | Path) -> str:
    """Sha256 hex digest of a file, computed once per process per file version.

    Parameters
    ----------
    path : str or Path
        The file.

    Returns
    -------
    str
        64 lower-case hex characters.
    """
    p = Path(path)
    key = _stamp(p)
    with _HASH_LOCK:
        cached = _HASH_CACHE.get(key)
    if cached is not None:
        return cached
    digest = _hash_file(p)
    with _HASH_LOCK:
        _HASH_CACHE[key] = digest
    return digest


def clear_checksum_cache() -> None:
    """Forget every cached file hash (the next verification re-reads the files)."""
    with _HASH_LOCK:
        _HASH_CACHE.clear()


def check_size(path: str | Path, max_bytes: int | None, *, hint: str = "") -> None:
    """Refuse a file larger than ``max_bytes`` before anything reads it.

    Parameters
    ----------
    path : str or Path
        The file.
    max_bytes : int or None
        The largest accepted size in bytes (``None``: no bound).
    hint : str
        Appended to the error message.

    Raises
    ------
    DataIntegrityError
        When the file is larger, naming it and both sizes.
    """
    if max_bytes is None:
        return
    size = Path(path).stat().st_size
    if size > max_bytes:
        message = (
            f"{path} has {size} bytes, more than the {max_bytes} bytes allowed for it "
            "(svbnn.data.SIZES): it is not the expected file (not read)."
        )
        raise DataIntegrityError(message + (" " + hint if hint else ""))


def verify_file(
    path: str | Path, expected: Collection[str], *, hint: str = "", max_bytes: int | None = None
) -> str:
    """Check a file's sha256 against the accepted digests, its size first.

    Parameters
    ----------
    path : str or Path
        The file.
    expected : collection of str
        Accepted sha256 hex digests (case-insensitive); must not be empty.
    hint : str
        Appended to the error message (what to do about a mismatch).
    max_bytes : int, optional
        The largest accepted size: a larger file is refused without being hashed.

    Returns
    -------
    str
        The file's sha256.

    Raises
    ------
    ChecksumError
        When the digest is not among ``expected``.
    DataIntegrityError
        When the file is larger than ``max_bytes``.
    """
    accepted = {e.lower() for e in expected}
    if not accepted:
        raise ValueError("verify_file needs at least one expected sha256")
    check_size(path, max_bytes, hint=hint)
    actual = file_sha256(path)
    if actual not in accepted:
        raise ChecksumError(path, sorted(accepted), actual, hint)
    logger.debug("sha256 ok for %s", path)
    return actual


def ensure_inside(root: str | Path, path: str | Path, *, what: str = "path") -> Path:
    """Check that ``path`` lies inside ``root``, both lexically and after resolving symlinks.

    Parameters
    ----------
    root : str or Path
        The folder that must contain ``path``.
    path : str or Path
        The candidate (need not exist).
    what : str
        How the error message refers to ``path``.

    Returns
    -------
    Path
        ``path`` unchanged.

    Raises
    ------
    ValueError
        When ``path`` escapes ``root`` through ``..``, an absolute part or a symlink.
    """
    # Lexical check first ('..' and absolute parts, whatever exists on disk), then the
    # resolved one: a symlink planted inside the root must not redirect a write elsewhere.
    root_abs = Path(os.path.abspath(root))
    path_abs = Path(os.path.abspath(path))
    if not path_abs.is_relative_to(root_abs) or path_abs == root_abs:
        raise ValueError(f"refusing {what} {path}: it is not inside the data folder {root_abs}")
    root_real, path_real = Path(root).resolve(), Path(path).resolve()
    if not path_real.is_relative_to(root_real) or path_real == root_real:
        raise ValueError(
            f"refusing {what} {path}: it resolves to {path_real}, outside the data folder "
            f"{root_real} (a symlink points out of it)"
        )
    return Path(path)


def download_file(
    url: str,
    dest: str | Path,
    *,
    expected: Collection[str] | None,
    timeout: float = 60.0,
    validate: Callable[[Path], None] | None = None,
    root: str | Path | None = None,
    max_bytes: int | None = None,
    deadline: float | None = None,
) -> Path:
    """Download ``url`` to ``dest`` atomically, verifying its sha256 or its content.

    Parameters
    ----------
    url : str
        ``http``, ``https`` or ``file`` URL.
    dest : str or Path
        Final location; parent folders are created. An existing file is replaced only by a
        download that passes every check.
    expected : collection of str or None
        Accepted sha256 digests; ``None`` when none is registered (then only ``validate``
        checks the content).
    timeout : float
        Seconds allowed for connecting and for each read.
    validate : callable, optional
        Called on the downloaded temporary file before it is moved into place; raises
        :class:`DataIntegrityError` when the content is not what the caller expects (the
        check for files that have no registered hash).
    root : str or Path, optional
        The data folder: ``dest`` must lie inside it, also after resolving symlinks, or
        nothing is written.
    max_bytes : int, optional
        The largest accepted size: a server announcing more is refused before the transfer,
        and a transfer that grows past it is stopped (nothing is written to ``dest``).
    deadline : float, optional
        Seconds allowed for the whole transfer (a server that trickles data never times
        out a read); default ``timeout`` plus ``max_bytes`` (1 GiB if not given) at
        :data:`MIN_RATE_BYTES_S`.

    Returns
    -------
    Path
        ``dest``.

    Raises
    ------
    DownloadError
        On a bad URL, a network or HTTP error, a truncated or oversized transfer, one past
        its deadline, or a destination that cannot be written.
    ChecksumError
        When the downloaded bytes do not hash to ``expected``; nothing is left at ``dest``.
    DataIntegrityError
        When ``validate`` refuses the download; nothing is left at ``dest``.
    ValueError
        When ``dest`` is outside ``root``.
    """
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in _ALLOWED_SCHEMES:
        raise DownloadError(
            f"refusing to download {url!r}: the scheme must be one of {_ALLOWED_SCHEMES}"
        )
    dest = Path(dest)
    if root is not None:
        ensure_inside(root, dest, what="download destination")
    if deadline is None:
        size = _UNKNOWN_SIZE_BYTES if max_bytes is None else max_bytes
        deadline = timeout + size / MIN_RATE_BYTES_S
    limits = _Limits(timeout, time.monotonic() + deadline, deadline, max_bytes)
    fd, tmp = _temporary_file(url, dest)
    logger.info("downloading %s -> %s", url, dest)
    try:
        with os.fdopen(fd, "wb") as out:
            actual, received = _stream(url, out, dest, limits)
            out.flush()
            os.fsync(out.fileno())
        _check_download(url, dest, tmp, actual, expected, validate)
        os.replace(tmp, dest)
    finally:
        # Any failure above leaves the temporary file behind; remove it so a retry starts
        # clean and no partial file is ever mistaken for data.
        tmp.unlink(missing_ok=True)
    with _HASH_LOCK:
        _HASH_CACHE[_stamp(dest)] = actual
    logger.info("downloaded %s (%d bytes, sha256 %s)", dest, received, actual)
    return dest


def _temporary_file(url: str, dest: Path) -> tuple[int, Path]:
    """A new temporary file next to ``dest`` (same filesystem, so the final move is atomic)."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    except OSError as err:
        # A file where a folder should be, or no write permission: say where and why rather
        # than surface a bare OSError.
        raise DownloadError(
            f"cannot download {url}: cannot write into {dest.parent} ({err.strerror or err}). "
            "Choose a writable data folder (argument data_dir or SVBNN_DATA)."
        ) from err
    return fd, Path(tmp_name)


class _Limits(NamedTuple):
    timeout: float  # seconds per connection and read
    end: float  # time.monotonic() by which the transfer must be over
    deadline: float  # the same, in seconds from the start (for messages)
    max_bytes: int | None


def _stream(url: str, out: BinaryIO, dest: Path, limits: _Limits) -> tuple[str, int]:
    """Copy ``url`` into ``out``, logging progress; returns the sha256 and the byte count.

    ``read1`` returns what one receive brings, so the deadline is checked at least once per
    ``timeout`` however slowly the server sends (``read(n)`` waits for all ``n`` bytes).
    """
    digest = hashlib.sha256()
    received = 0
    try:
        with urllib.request.urlopen(url, timeout=limits.timeout) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length and length.isdigit() else None
            _check_announced(url, total, limits.max_bytes)
            read = getattr(response, "read1", response.read)
            next_log = 0.1
            while chunk := read(_CHUNK):
                if limits.max_bytes is not None and received + len(chunk) > limits.max_bytes:
                    raise DownloadError(
                        f"download of {url} stopped: the server sent more than "
                        f"{limits.max_bytes} bytes, the most allowed for this file "
                        f"(svbnn.data.SIZES); discarded, nothing written to {dest}"
                    )
                if time.monotonic() > limits.end:
                    raise DownloadError(
                        f"download of {url} gave up after {limits.deadline:.0f} s (its deadline, "
                        f"with {received} bytes received): the server is too slow or stalled "
                        f"(nothing written to {dest}); pass a larger timeout or use a mirror"
                    )
                out.write(chunk)
                digest.update(chunk)
                received += len(chunk)
                if total and received / total >= next_log:
                    logger.info(
                        "%s: %d%% (%d of %d bytes)",
                        dest.name,
                        int(100 * received / total),
                        received,
                        total,
                    )
                    next_log += 0.1
    except (
        urllib.error.URLError,
        http.client.HTTPException,
        TimeoutError,
        ConnectionError,
    ) as err:
        raise DownloadError(f"could not download {url} to {dest}: {err}") from err
    if total is not None and received != total:
        raise DownloadError(f"download of {url} truncated: got {received} of {total} bytes")
    return digest.hexdigest(), received


def _check_announced(url: str, total: int | None, max_bytes: int | None) -> None:
    """Refuse a transfer whose announced length is larger than the registered file."""
    if total is not None and max_bytes is not None and total > max_bytes:
        raise DownloadError(
            f"download of {url} refused: the server announces {total} bytes, more than the "
            f"{max_bytes} bytes allowed for this file (svbnn.data.SIZES)"
        )


def _check_download(
    url: str,
    dest: Path,
    tmp: Path,
    actual: str,
    expected: Collection[str] | None,
    validate: Callable[[Path], None] | None,
) -> None:
    """Refuse a downloaded file (at ``tmp``, sha256 ``actual``) that fails its checks."""
    if expected is None:
        # Not a warning: the UCI index files have no registered hash by design (the
        # caller's validate checks their structure instead).
        logger.info("no sha256 registered for %s; downloaded file not hash-checked", dest)
    elif actual not in {e.lower() for e in expected}:
        raise ChecksumError(
            f"{url} (downloaded for {dest})",
            sorted(e.lower() for e in expected),
            actual,
            f"The download was discarded (nothing written to {dest}). The source may be "
            "corrupted or serve a different version; try again, or point the base URL "
            "(argument base_url / SVBNN_DATA_URL) at a good mirror.",
        )
    if validate is None:
        return
    try:
        validate(tmp)
    except DataIntegrityError as err:
        # Files without a registered hash (e.g. the UCI split indices) are checked by
        # parsing them here, before they take the place of anything at dest: a mirror
        # that serves an error page must not leave a file that fails every later load.
        raise DataIntegrityError(
            f"the file downloaded from {url} is not valid: {err}. The download was "
            f"discarded (nothing written to {dest}). The source may be broken or serve "
            "a different layout; fix it, or point the base URL (argument base_url / "
            "SVBNN_DATA_URL) at a good mirror."
        ) from err
