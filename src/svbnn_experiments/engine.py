"""How a run's chunks execute: in this process, in spawned worker processes, or on an engine.

:func:`execute_chunks` runs the chunks of a simulation artifact
(:class:`svbnn_experiments.common.Chunk`, each computed by
:func:`svbnn_experiments.common.run_chunk`) in this process (``--jobs 1``), in ``--jobs N``
spawned worker processes, or on the :class:`ChunkEngine` of an enclosing
:func:`use_engine` block (a Dask cluster, :mod:`svbnn_experiments.distributed`). What a
chunk is and computes, and the chunk layout, live in :mod:`svbnn_experiments.common`: the
engine never changes the numbers.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import replace
from multiprocessing import get_context
from typing import Any, Protocol

from tqdm.auto import tqdm

from svbnn import get_kernel_backend, kernel_backend

from .common import Chunk, ChunkResult, run_chunk

__all__ = [
    "ChunkEngine",
    "active_engine",
    "engine_name",
    "execute_chunks",
    "use_engine",
    "worker_setup",
]


class ChunkEngine(Protocol):
    """Something other than local processes that runs chunks (a Dask cluster).

    Attributes
    ----------
    name : str
        As recorded in ``settings.json`` (``"dask:tcp://host:8786"``).
    workers : int
        Chunks it runs at once: the default ``--jobs`` of runs it serves (the chunk layout
        does not depend on it).
    """

    workers: int

    @property
    def name(self) -> str:
        """As recorded in ``settings.json``."""
        ...

    def run(self, chunks: Sequence[Chunk], progress: bool, desc: str) -> list[ChunkResult]:
        """Run the chunks; results in chunk order."""
        ...


_ENGINE: ContextVar[ChunkEngine | None] = ContextVar("svbnn_chunk_engine", default=None)


@contextmanager
def use_engine(engine: ChunkEngine) -> Iterator[ChunkEngine]:
    """Within the block, :func:`execute_chunks` runs every chunk on ``engine``."""
    token = _ENGINE.set(engine)
    try:
        yield engine
    finally:
        _ENGINE.reset(token)


def active_engine() -> ChunkEngine | None:
    """The engine of the enclosing :func:`use_engine` block, if any."""
    return _ENGINE.get()


def engine_name(jobs: int, n_chunks: int) -> str:
    """What :func:`execute_chunks` runs ``n_chunks`` chunks on: ``"local"`` (this process),
    ``"processes:N"`` (N spawned worker processes) or the active engine's name."""
    engine = active_engine()
    if engine is not None:
        return engine.name
    if jobs == 1 or n_chunks == 1:
        return "local"
    return f"processes:{jobs}"


def execute_chunks(
    chunks: Sequence[Chunk], jobs: int = 1, progress: bool = True, desc: str = "chunks"
) -> list[ChunkResult]:
    """Run chunks in this process (``jobs == 1``), in ``jobs`` spawned worker processes,
    or on the engine of an enclosing :func:`use_engine` block (a Dask cluster).

    Results come back in chunk order whatever the completion order. The chunks, hence the
    results, are the same whichever runs them (see
    :func:`svbnn_experiments.common.layout_chunks`).
    """
    if jobs < 1:
        raise ValueError(f"jobs must be positive, got {jobs}")
    engine = active_engine()
    if engine is not None:
        return engine.run(chunks, progress, desc)
    results: list[ChunkResult] = []
    if jobs == 1 or len(chunks) == 1:
        for ch in tqdm(chunks, desc=desc, disable=not progress or len(chunks) == 1):
            results.append(run_chunk(replace(ch, spec=replace(ch.spec, progress=progress))))
        return results
    # spawn, not fork: forking a process whose torch thread pools are running is unsafe.
    pool = ProcessPoolExecutor(
        max_workers=jobs, mp_context=get_context("spawn"), initializer=_ignore_sigint
    )
    try:
        # The workers run with this process's kernel backend, passed explicitly (a spawned
        # process starts with none of this thread's settings).
        kernels = get_kernel_backend().value
        futures = [pool.submit(run_chunk_with, ch, kernels) for ch in chunks]
        for fut in tqdm(futures, desc=desc, disable=not progress):
            results.append(fut.result())
    except BaseException:
        # Ctrl-C (or a failed chunk): stop the workers now rather than let them finish
        # their chunks. Workers ignore SIGINT, so only this process reports the interrupt.
        # (The worker handles are taken before shutdown(), which drops them.)
        procs: dict[int, Any] = getattr(pool, "_processes", None) or {}
        workers = list(procs.values())
        for proc in workers:
            proc.terminate()
        for proc in workers:
            proc.join(timeout=10)
        # With its workers gone the pool winds down at once; waiting for that releases its
        # queues (else the resource tracker warns of leaked semaphores on stderr).
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    return sorted(results, key=lambda r: r.index)


def run_chunk_with(chunk: Chunk, kernels: str) -> ChunkResult:
    """:func:`run_chunk` under the kernel backend ``kernels`` (in a worker process or on a
    Dask worker: the caller's backend, whatever the worker's ``SVBNN_KERNELS``)."""
    with kernel_backend(kernels):
        return run_chunk(chunk)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker_setup()


def worker_setup() -> None:
    """Prepare a worker process (``--jobs``, a Dask worker) to run chunks.

    tqdm's default lock holds a multiprocessing semaphore that only a normal exit releases:
    a worker stopped mid-chunk (Ctrl-C, a killed worker) leaves it to the resource tracker,
    which then warns on the user's terminal. A worker's progress bars need no lock across
    processes, so it gets a thread lock (unless it already has a lock).
    """
    from tqdm.std import tqdm as std_tqdm

    if "_lock" not in vars(std_tqdm):
        std_tqdm.set_lock(threading.RLock())
