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
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from tqdm.auto import tqdm

from svbnn import get_kernel_backend, kernel_backend

from .common import Chunk, ChunkResult, run_chunk
from .engine import use_engine, worker_setup

__all__ = [
    "CONNECT_TIMEOUT_S",
    "INSTALL_HINT",
    "RETRIES",
    "DaskEngine",
    "dask_engine",
    "parse_cluster",
]

CONNECT_TIMEOUT_S = 5.0
"""Seconds to wait for a scheduler to answer (and, without ``--jobs``, for a worker)."""

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
    with kernel_backend(kernels):
        return run_chunk(chunk)


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
    """

    client: Any
    address: str
    workers: int
    cluster: Any = None
    retries: int = RETRIES

    @property
    def name(self) -> str:
        """``"dask:ADDRESS"``, as recorded in ``settings.json``."""
        return f"dask:{self.address}"

    def run(self, chunks: Sequence[Chunk], progress: bool, desc: str) -> list[ChunkResult]:
        """Submit one task per chunk; results in chunk order.

        The progress bar counts completed chunks. On any error or Ctrl-C the chunks not yet
        done are cancelled (a task already running on an external worker finishes there;
        the workers of a local cluster are stopped when the engine closes).
        """
        from distributed import as_completed

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
                for _ in as_completed(futures):
                    bar.update()
            results: list[ChunkResult] = [f.result() for f in futures]
        except BaseException:
            self.client.cancel(futures)
            raise
        return results


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
    ``mmap``/``munmap`` pair with its page faults. Measured on the 2-core machine: Table 2's
    chunks trained in 391-418 s on such workers, 297-302 s without the variable, 243-251 s
    in plain processes (docs/guide/cluster.md).
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

    Yields
    ------
    DaskEngine
        Active (:func:`svbnn_experiments.engine.use_engine`) within the block.

    Raises
    ------
    ValueError
        One line naming the option: both or neither given, a bad ``cluster``, Dask not
        installed, an unreachable scheduler, no worker.
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
    try:
        return distributed.Client(scheduler, timeout=timeout, set_as_default=False)
    except (OSError, ValueError, TypeError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise ValueError(f"--scheduler {scheduler}: cannot connect ({reason})") from None


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
