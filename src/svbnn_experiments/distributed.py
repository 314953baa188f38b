"""Dask as the engine of a run's chunks: ``svbnn reproduce --scheduler/--cluster``.

The chunks of a simulation artifact (:class:`svbnn_experiments.common.Chunk`, picklable)
run as Dask tasks, one per chunk, on an existing scheduler (``--scheduler tcp://HOST:PORT``)
or on a :class:`distributed.LocalCluster` started for the run (``--cluster local:N``: N
worker processes, one thread each). The chunk layout, hence every number of the run,
follows the run's settings only (:func:`svbnn_experiments.common.layout_chunks`), never the
cluster's size: the same as ``--jobs 1``. Tasks of a worker that dies are rescheduled by
Dask; a chunk that raises is retried :data:`RETRIES` times.

Dask is an optional dependency (``pip install 'svbnn[distributed]'``), imported only here,
only when an engine is started.
"""

from __future__ import annotations

import logging
import socket
import struct
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from svbnn import get_kernel_backend

from .common import Chunk, ChunkResult
from .engine import run_chunk_with, use_engine, worker_setup

__all__ = [
    "CONNECT_TIMEOUT_S",
    "INSTALL_HINT",
    "TASK_TIMEOUT_S",
    "RETRIES",
    "DaskEngine",
    "dask_engine",
    "parse_cluster",
]

CONNECT_TIMEOUT_S = 5.0
"""Seconds to wait for a scheduler to answer (and, without ``--jobs``, for a worker)."""

TASK_TIMEOUT_S = 6 * 3600.0
"""Seconds a run waits for its next chunk to finish before giving up on the cluster (a
scheduler that stopped answering, or whose workers all left, never finishes one)."""

ALIVE_CHECK_S = 30.0
"""While no chunk finishes, the scheduler must answer a status request at least this often
(within this many seconds): a scheduler that stopped answering is given up on in about a
minute, while chunks that take hours keep running."""

_HANDSHAKE_MAX_BYTES = 1 << 20
"""A Dask scheduler's first message (its handshake) is a few hundred bytes; a length
prefix above this is not Dask (e.g. an HTTP server's answer read as a frame length)."""

RETRIES = 2
"""Retries of a chunk whose task raised (e.g. a worker killed while running it)."""

INSTALL_HINT = "pip install 'svbnn[distributed]'"


def parse_cluster(text: str) -> int:
    """The N of ``--cluster local:N`` (N >= 1 worker processes).

    Raises
    ------
    ValueError
        For anything else.
    """
    kind, sep, count = text.partition(":")
    if kind != "local" or not sep:
        raise ValueError(f"expects local:N (N worker processes), got {text!r}")
    try:
        n = int(count)
    except ValueError:
        raise ValueError(f"expects local:N with N a positive integer, got {text!r}") from None
    if n < 1:
        raise ValueError(f"expects local:N with N >= 1, got {text!r}")
    return n


def _chunk_task(chunk: Chunk, kernels: str) -> ChunkResult:
    """One chunk on a Dask worker, with the client's kernel backend (a seed reproduces a
    run within one backend, and a worker's own ``SVBNN_KERNELS`` may differ)."""
    worker_setup()
    return run_chunk_with(chunk, kernels)


@dataclass
class DaskEngine:
    """A Dask client (and the local cluster it owns, if any) running chunks.

    Attributes
    ----------
    client : distributed.Client
    address : str
        The scheduler's address.
    workers : int
        Chunks run at once (worker threads): the runs' default ``--jobs``.
    cluster : distributed.LocalCluster, optional
        Started for the run (``--cluster``), closed with the engine.
    retries : int
        Retries of a chunk whose task raised.
    task_timeout : float
        Seconds to wait for the next chunk to finish (:data:`TASK_TIMEOUT_S`).
    """

    client: Any
    address: str
    workers: int
    cluster: Any = None
    retries: int = RETRIES
    task_timeout: float = TASK_TIMEOUT_S

    @property
    def name(self) -> str:
        """``"dask:ADDRESS"``, as recorded in ``settings.json``."""
        return f"dask:{self.address}"

    def run(self, chunks: Sequence[Chunk], progress: bool, desc: str) -> list[ChunkResult]:
        """Submit one task per chunk; results in chunk order.

        The progress bar counts completed chunks. On any error or Ctrl-C the chunks not yet
        done are cancelled (a task already running on an external worker finishes there;
        the workers of a local cluster are stopped when the engine closes).

        Raises
        ------
        ValueError
            One line naming the scheduler when no chunk finishes within ``task_timeout``
            seconds of the start or of the previous one.
        """

        kernels = get_kernel_backend().value
        futures = [
            self.client.submit(_chunk_task, ch, kernels, pure=False, retries=self.retries)
            for ch in chunks
        ]
        try:
            with (
                self.client.as_current(),
                tqdm(total=len(futures), desc=desc, disable=not progress) as bar,
            ):
                for _ in self._finished(futures):
                    bar.update()
            results: list[ChunkResult] = [f.result() for f in futures]
        except BaseException:
            self.client.cancel(futures)
            raise
        return results

    def _finished(self, futures: list[Any]) -> Iterator[Any]:
        """The futures as they finish; a ``ValueError`` when none finishes within
        ``task_timeout`` of the previous one (workers that all left), or when the scheduler
        does not answer a status request within :data:`ALIVE_CHECK_S` while waiting."""
        from distributed import wait

        option = "--scheduler" if self.cluster is None else "--cluster"
        pending, last = set(futures), time.monotonic()
        while pending:
            poll = min(ALIVE_CHECK_S, max(self.task_timeout - (time.monotonic() - last), 0.01))
            try:
                with self.client.as_current():
                    done = wait(list(pending), timeout=poll, return_when="FIRST_COMPLETED")
            except TimeoutError:
                self._check_alive(option)
                if time.monotonic() - last >= self.task_timeout:
                    raise ValueError(
                        f"{option} {self.address}: no chunk finished within "
                        f"{self.task_timeout:g} s ({len(pending)} of {len(futures)} pending); "
                        "the scheduler or its workers stopped answering"
                    ) from None
                continue
            last = time.monotonic()
            pending = set(done.not_done)
            yield from done.done

    def _check_alive(self, option: str) -> None:
        """A ``ValueError`` when the scheduler does not answer within :data:`ALIVE_CHECK_S`."""
        try:
            self.client.sync(self.client.scheduler.identity, callback_timeout=ALIVE_CHECK_S)
        except (TimeoutError, OSError):
            raise ValueError(
                f"{option} {self.address}: the scheduler stopped answering (no reply to a "
                f"status request within {ALIVE_CHECK_S:g} s)"
            ) from None


def _import_distributed(option: str) -> Any:
    try:
        import distributed
    except ImportError:
        raise ValueError(f"{option} needs Dask: {INSTALL_HINT}") from None
    return distributed


@contextmanager
def _default_malloc() -> Iterator[None]:
    """Worker processes started in the block keep glibc's default memory settings.

    Dask's nanny starts workers with ``MALLOC_TRIM_THRESHOLD_=65536``, which also freezes
    glibc's mmap threshold at 128 KiB: every larger tensor of a training step is then a fresh
    ``mmap``/``munmap`` pair with its page faults, which slows a training step; the block
    removes the variable from the workers' environment (timings in docs/guide/cluster.md).
    """
    import dask

    key = "distributed.nanny.pre-spawn-environ"
    environ = {k: v for k, v in dask.config.get(key, {}).items() if k != "MALLOC_TRIM_THRESHOLD_"}
    with dask.config.set({key: environ}):
        yield


@contextmanager
def _quiet(logger: str = "distributed") -> Iterator[None]:
    # Dask logs a failed connection or a closing cluster's stray warnings on stderr; the
    # command reports its own one-line errors instead.
    log = logging.getLogger(logger)
    level = log.level
    log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(level)


@contextmanager
def dask_engine(
    scheduler: str | None = None,
    cluster: str | None = None,
    *,
    jobs: int | None = None,
    timeout: float | None = None,
    task_timeout: float | None = None,
) -> Iterator[DaskEngine]:
    """Connect to a Dask scheduler or start a local cluster; chunks run there in the block.

    Parameters
    ----------
    scheduler : str, optional
        Address of a running scheduler (``tcp://HOST:PORT``), as ``--scheduler``.
    cluster : str, optional
        ``"local:N"``: start a ``LocalCluster`` of N worker processes with one thread each,
        closed at the end of the block, as ``--cluster``.
    jobs : int, optional
        The ``--jobs`` given, if any: with ``scheduler``, the engine's worker count
        (else the scheduler's worker threads at connection, waiting up to ``timeout`` for
        the first worker to join).
    timeout : float, optional
        Seconds to wait for the scheduler (and a first worker); default
        :data:`CONNECT_TIMEOUT_S`.
    task_timeout : float, optional
        Seconds to wait for the next chunk to finish; default :data:`TASK_TIMEOUT_S`.

    Yields
    ------
    DaskEngine
        Active (:func:`svbnn_experiments.engine.use_engine`) within the block.

    Raises
    ------
    ValueError
        One line naming the option: both or neither given, a bad ``cluster``, Dask not
        installed, an unreachable or silent scheduler (or another service at its address),
        no worker; in the block, no chunk finished within ``task_timeout``.
    """
    if (scheduler is None) == (cluster is None):
        raise ValueError("give one of --scheduler and --cluster")
    option = "--scheduler" if scheduler is not None else "--cluster"
    timeout = CONNECT_TIMEOUT_S if timeout is None else timeout
    n = _local_cluster_size(cluster, jobs) if cluster is not None else 0
    distributed = _import_distributed(option)
    client, local, workers = _open_client(distributed, scheduler, n, jobs, timeout)
    try:
        if scheduler is not None and jobs is None:
            workers = _wait_for_workers(client, scheduler, timeout)
        engine = DaskEngine(client, str(client.scheduler.address), workers, local)
        engine.task_timeout = TASK_TIMEOUT_S if task_timeout is None else task_timeout
        with use_engine(engine):
            yield engine
    finally:
        _close(client, local)


def _open_client(
    distributed: Any, scheduler: str | None, n: int, jobs: int | None, timeout: float
) -> tuple[Any, Any, int]:
    """``(client, local cluster or None, workers)``: a client of the scheduler, or of a new
    local cluster of ``n`` workers when ``scheduler`` is None. A scheduler's workers are
    ``jobs``, or 0 until :func:`_wait_for_workers` counts them."""
    with _quiet():
        if scheduler is not None:
            return _connect(distributed, scheduler, timeout), None, jobs or 0
        client, local = _start_local_cluster(distributed, n)
        return client, local, n


def _close(client: Any, local: Any) -> None:
    """Close the client, then the local cluster it owns (if any), quietly."""
    with _quiet():
        client.close()
        if local is not None:
            local.close()


def _local_cluster_size(cluster: str, jobs: int | None) -> int:
    """The N of ``--cluster local:N``, checked against ``--jobs`` (the workers are N)."""
    try:
        n = parse_cluster(cluster)
    except ValueError as exc:
        raise ValueError(f"--cluster: {exc}") from None
    if jobs is not None and jobs != n:
        raise ValueError(
            f"--jobs {jobs} disagrees with --cluster {cluster}: the cluster runs {n} "
            "chunk(s) at once; leave out --jobs"
        )
    return n


def _start_local_cluster(distributed: Any, n: int) -> tuple[Any, Any]:
    """A ``LocalCluster`` of ``n`` worker processes (one thread each, ignoring SIGINT) and
    a client of it; the cluster is closed again if the client fails to start."""
    # Workers ignore SIGINT from the preload on (Ctrl-C reaches the terminal's whole process
    # group; only this process reports it and closes the cluster). SIGINT is not ignored
    # here while the cluster starts, so a Ctrl-C then stops the start at once (a worker
    # still importing may print its own KeyboardInterrupt) instead of being lost.
    local = None
    try:
        with _default_malloc():
            local = distributed.LocalCluster(
                n_workers=n,
                threads_per_worker=1,
                processes=True,
                # A free port: None still binds the scheduler's HTTP server to 8787 and
                # warns on stderr when another cluster (or run) holds it.
                dashboard_address=":0",
                silence_logs=logging.ERROR,
                preload=["svbnn_experiments._dask_preload"],
            )
        client = distributed.Client(local, set_as_default=False)
    except BaseException:
        if local is not None:
            local.close()
        raise
    return client, local


def _connect(distributed: Any, scheduler: str, timeout: float) -> Any:
    """A client of the scheduler at ``scheduler`` (``tcp://HOST:PORT``).

    Raises
    ------
    ValueError
        One line: a malformed address, or no scheduler answering within ``timeout``.
    """
    try:
        # Checked first: a Client given a malformed address is left half-started.
        host, _ = distributed.comm.get_address_host_port(scheduler)
        if not host:
            raise ValueError("no host")
    except ValueError as exc:
        raise ValueError(f"--scheduler {scheduler!r}: expects tcp://HOST:PORT ({exc})") from None
    _probe(distributed, scheduler, timeout)
    try:
        return distributed.Client(scheduler, timeout=timeout, set_as_default=False)
    except (OSError, ValueError, TypeError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(f"--scheduler {scheduler}: cannot connect ({reason})") from None


def _probe(distributed: Any, scheduler: str, timeout: float) -> None:
    """Check, within ``timeout`` seconds in all, that a Dask scheduler answers at ``scheduler``.

    Dask's client waits without a deadline for the scheduler's handshake once the TCP
    connection is accepted, and reads whatever comes first as a frame length (an HTTP
    server's reply becomes an allocation of exabytes). A scheduler sends its handshake
    as soon as it accepts: here, an 8-byte length then that many bytes must arrive in time,
    with a plausible length. Only ``tcp://`` addresses are probed.

    Raises
    ------
    ValueError
        One line naming ``--scheduler``: refused, silent, or not a Dask scheduler.
    """
    scheme, _ = distributed.comm.parse_address(scheduler)
    if scheme != "tcp":
        return
    host, port = distributed.comm.get_address_host_port(scheduler)
    deadline = time.monotonic() + timeout
    where = f"--scheduler {scheduler}"
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            head = _receive(sock, 8, deadline)
            (length,) = struct.unpack("<Q", head)
            if not 0 < length <= _HANDSHAKE_MAX_BYTES:
                shown = head.decode("ascii", "replace").split("\r")[0]
                raise ValueError(
                    f"{where}: the server there is not a Dask scheduler (it answered "
                    f"{shown!r}); give the address of a Dask scheduler (tcp://HOST:PORT, "
                    "default port 8786)"
                )
            _receive(sock, length, deadline)
    except TimeoutError:
        raise ValueError(
            f"{where}: no Dask scheduler answered within {timeout:g} s (the connection was "
            "accepted, but nothing came back: a firewall, a proxy or another service "
            "listens there)"
        ) from None
    except OSError as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(f"{where}: cannot connect ({reason})") from None


def _receive(sock: socket.socket, n: int, deadline: float) -> bytes:
    """Exactly ``n`` bytes from ``sock`` before ``deadline`` (``time.monotonic``)."""
    data = b""
    while len(data) < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        sock.settimeout(left)
        chunk = sock.recv(min(n - len(data), 1 << 16))
        if not chunk:
            raise ConnectionError("the server closed the connection before the handshake")
        data += chunk
    return data


def _wait_for_workers(client: Any, scheduler: str, timeout: float) -> int:
    """The scheduler's worker threads once a first worker has joined (the runs' ``--jobs``
    when none is given); a one-line ``ValueError`` if none joins within ``timeout``."""
    try:
        client.wait_for_workers(1, timeout=timeout)
    except TimeoutError:
        raise ValueError(
            f"--scheduler {scheduler}: no worker joined within {timeout:g} s "
            f"(start one: dask worker {scheduler}), or give --jobs N"
        ) from None
    return sum(client.nthreads().values())
