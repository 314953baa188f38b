"""Errors, checksums and downloads for the real-data loaders (standard library only).

Files are hashed at most once per process: the sha256 is cached under the file's
``(resolved path, size, mtime_ns, inode)``, so re-loading a data set (e.g. one UCI split
after another) does not re-read tens of megabytes. A file edited in place gets a new mtime,
or a new inode when it is replaced, and is hashed again. :func:`clear_checksum_cache` forgets
everything.

Downloads go through :mod:`urllib.request` into a temporary file next to the destination,
are hashed while streaming, and are moved into place with :func:`os.replace` only when the
hash matches, so an interrupted or corrupted download never leaves a file that looks valid.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection
from pathlib import Path

__all__ = [
    "ChecksumError",
    "DataIntegrityError",
    "DataNotFoundError",
    "DownloadError",
    "clear_checksum_cache",
    "download_file",
    "file_sha256",
    "verify_file",
]

logger = logging.getLogger(__name__)

_CHUNK = 1 << 20  # 1 MiB: large enough for throughput, small enough for steady progress logs
_ALLOWED_SCHEMES = ("http", "https", "file")


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


def verify_file(path: str | Path, expected: Collection[str], *, hint: str = "") -> str:
    """Check a file's sha256 against the accepted digests.

    Parameters
    ----------
    path : str or Path
        The file.
    expected : collection of str
        Accepted sha256 hex digests (case-insensitive); must not be empty.
    hint : str
        Appended to the error message (what to do about a mismatch).

    Returns
    -------
    str
        The file's sha256.

    Raises
    ------
    ChecksumError
        When the digest is not among ``expected``.
    """
    accepted = {e.lower() for e in expected}
    if not accepted:
        raise ValueError("verify_file needs at least one expected sha256")
    actual = file_sha256(path)
    if actual not in accepted:
        raise ChecksumError(path, sorted(accepted), actual, hint)
    logger.debug("sha256 ok for %s", path)
    return actual


def download_file(
    url: str,
    dest: str | Path,
    *,
    expected: Collection[str] | None,
    timeout: float = 60.0,
) -> Path:
    """Download ``url`` to ``dest`` atomically, verifying its sha256.

    Parameters
    ----------
    url : str
        ``http``, ``https`` or ``file`` URL.
    dest : str or Path
        Final location; parent folders are created.
    expected : collection of str or None
        Accepted sha256 digests; ``None`` when none is registered (logged, not checked).
    timeout : float
        Seconds allowed for connecting and for each read.

    Returns
    -------
    Path
        ``dest``.

    Raises
    ------
    DownloadError
        On a bad URL, a network or HTTP error, or a truncated transfer.
    ChecksumError
        When the downloaded bytes do not hash to ``expected``; nothing is left at ``dest``.
    """
    scheme = urllib.parse.urlsplit(url).scheme.lower()
    if scheme not in _ALLOWED_SCHEMES:
        raise DownloadError(
            f"refusing to download {url!r}: the scheme must be one of {_ALLOWED_SCHEMES}"
        )
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    tmp = Path(tmp_name)
    logger.info("downloading %s -> %s", url, dest)
    try:
        digest = hashlib.sha256()
        received = 0
        with os.fdopen(fd, "wb") as out:
            try:
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    length = response.headers.get("Content-Length")
                    total = int(length) if length and length.isdigit() else None
                    next_log = 0.1
                    while chunk := response.read(_CHUNK):
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
            out.flush()
            os.fsync(out.fileno())
        actual = digest.hexdigest()
        if expected is None:
            # Not a warning: the UCI index files have no registered hash by design (the loader
            # checks their structure instead).
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
        os.replace(tmp, dest)
    finally:
        # Any failure above leaves the temporary file behind; remove it so a retry starts
        # clean and no partial file is ever mistaken for data.
        tmp.unlink(missing_ok=True)
    with _HASH_LOCK:
        _HASH_CACHE[_stamp(dest)] = actual
    logger.info("downloaded %s (%d bytes, sha256 %s)", dest, received, actual)
    return dest
