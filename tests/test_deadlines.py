"""Nothing waits forever (issue 32, item 2): downloads have a size cap and a total deadline,
files are size-checked before they are hashed or parsed, and ``--scheduler`` gives up on a
server that accepts and never answers, or answers as something else, in one line.

Every server here is a thread on 127.0.0.1 (port 0) that stops by itself: it serves until the
test ends or for at most ``_SERVER_LIFE_S`` seconds.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from svbnn.data import (
    ENV_DATA_DIR,
    ENV_DATA_URL,
    SIZES,
    DataIntegrityError,
    DownloadError,
    _download,
    clear_checksum_cache,
    load_mnist,
    load_uci,
)

_SERVER_LIFE_S = 20.0

Handler = Callable[[socket.socket, threading.Event], None]


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(ENV_DATA_DIR, raising=False)
    monkeypatch.delenv(ENV_DATA_URL, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    clear_checksum_cache()


def _serve(handler: Handler) -> Iterator[str]:
    """Run ``handler(conn, stop)`` for each connection to a local port; yields ``HOST:PORT``."""
    stop = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.1)
    end = time.monotonic() + _SERVER_LIFE_S

    def accept() -> None:
        while not stop.is_set() and time.monotonic() < end:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=_handle, args=(handler, conn, stop), daemon=True).start()
        listener.close()

    def _handle(handler: Handler, conn: socket.socket, stop: threading.Event) -> None:
        with conn:
            try:
                handler(conn, stop)
            except OSError:
                pass  # the client gave up: what the tests want

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    host, port = listener.getsockname()[:2]
    try:
        yield f"{host}:{port}"
    finally:
        stop.set()
        thread.join(timeout=2)


def _read_request(conn: socket.socket) -> bytes:
    conn.settimeout(5)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def _endless(conn: socket.socket, stop: threading.Event) -> None:
    """An HTTP server that streams zeros without end (no Content-Length)."""
    _read_request(conn)
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n")
    block = b"0" * 65536
    while not stop.is_set():
        conn.sendall(block)


def _trickle(conn: socket.socket, stop: threading.Event) -> None:
    """An HTTP server that sends one byte every 50 ms: no single read ever times out."""
    _read_request(conn)
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n")
    while not stop.is_set():
        conn.sendall(b"1")
        time.sleep(0.05)


def _announces_too_much(conn: socket.socket, stop: threading.Event) -> None:
    _read_request(conn)
    conn.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 99999999999\r\n\r\n")
    stop.wait(5)


def _silent(conn: socket.socket, stop: threading.Event) -> None:
    """Accepts the connection, then never sends a byte."""
    stop.wait(_SERVER_LIFE_S)


def _http_proxy(conn: socket.socket, stop: threading.Event) -> None:
    """Answers whatever it receives with an HTTP error, as a proxy would."""
    conn.settimeout(_SERVER_LIFE_S)
    if conn.recv(4096):
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
    stop.wait(5)


def _http_first(conn: socket.socket, stop: threading.Event) -> None:
    """Speaks first, and not Dask (e.g. an SSH or SMTP banner, or an HTTP reply)."""
    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
    stop.wait(5)


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _serve(request.param)


def _left(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.is_file()]


# ------------------------------------------------------------------------------------------
# Downloads: a size cap and a total deadline
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("server", [_endless], indirect=True)
def test_endless_download_is_stopped_at_the_registered_size(server: str, tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(DownloadError, match="sent more than 11487 bytes") as info:
        load_uci("yacht", 0, tmp_path, download=True, base_url=f"http://{server}", timeout=5)
    assert time.monotonic() - t0 < 10
    assert f"http://{server}/uci/yacht/" in str(info.value)
    assert _left(tmp_path) == []  # nothing kept, no temporary file either


@pytest.mark.parametrize("server", [_announces_too_much], indirect=True)
def test_announced_oversize_is_refused_before_the_transfer(server: str, tmp_path: Path) -> None:
    with pytest.raises(DownloadError, match="announces 99999999999 bytes"):
        load_mnist(tmp_path, download=True, base_url=f"http://{server}", timeout=5)
    assert _left(tmp_path) == []


@pytest.mark.parametrize("server", [_trickle], indirect=True)
def test_trickling_download_meets_its_total_deadline(server: str, tmp_path: Path) -> None:
    # Each read gets a byte within 50 ms, so a per-read timeout never fires; the deadline of
    # an index file is its timeout plus its registered size at 64 KiB/s (well under 2 s).
    t0 = time.monotonic()
    with pytest.raises(DownloadError, match="gave up after") as info:
        load_uci("yacht", 0, tmp_path, download=True, base_url=f"http://{server}", timeout=1)
    assert time.monotonic() - t0 < 6
    assert "timeout" in str(info.value)
    assert _left(tmp_path) == []


@pytest.mark.parametrize("server", [_trickle], indirect=True)
def test_download_file_deadline_argument(server: str, tmp_path: Path) -> None:
    t0 = time.monotonic()
    with pytest.raises(DownloadError, match="gave up after 1 s"):
        _download.download_file(
            f"http://{server}/x", tmp_path / "x", expected=None, timeout=5, deadline=1.0
        )
    assert 0.9 < time.monotonic() - t0 < 5
    assert _left(tmp_path) == []


# ------------------------------------------------------------------------------------------
# Files in the data folder: size first
# ------------------------------------------------------------------------------------------


def test_sizes_cover_every_registered_file() -> None:
    from svbnn.data import CHECKSUMS, UCI_INFO
    from svbnn.data._registry import _uci_registered_files

    for name in UCI_INFO:
        for file in _uci_registered_files(name):
            assert f"uci/{name}/{file}" in SIZES
    for relpath, digests in CHECKSUMS.items():
        assert len(SIZES[relpath]) == len(digests)  # one size beside each hash


def test_oversized_hashed_file_is_refused_without_hashing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / "mnist.npz"
    with big.open("wb") as f:
        f.truncate(100 * 2**30)  # a sparse 100 GiB file: nothing is written to disk

    def never(path: Path) -> str:
        raise AssertionError(f"{path} was hashed")

    monkeypatch.setattr(_download, "_hash_file", never)
    t0 = time.monotonic()
    with pytest.raises(DataIntegrityError, match="107374182400 bytes") as info:
        load_mnist(tmp_path)
    assert time.monotonic() - t0 < 2
    assert str(big) in str(info.value)


def test_oversized_index_file_is_refused_before_parsing(tmp_path: Path) -> None:
    folder = tmp_path / "uci" / "yacht"
    folder.mkdir(parents=True)
    (folder / "data.txt").write_text("1 2\n3 4\n")
    with (folder / "n_splits.txt").open("wb") as f:
        f.truncate(100 * 2**30)
    with pytest.raises(DataIntegrityError, match="n_splits.txt has 107374182400 bytes"):
        load_uci("yacht", 0, tmp_path, verify=False)


# ------------------------------------------------------------------------------------------
# --scheduler: a deadline on the connection and on each task
# ------------------------------------------------------------------------------------------

QUICK = ["reproduce", "table2", "--quick", "--no-progress", "--seed", "3"]


@pytest.mark.parametrize(
    ("server", "needle"),
    [
        (_silent, "no Dask scheduler answered within 1 s"),
        (_http_proxy, "no Dask scheduler answered within 1 s"),
        (_http_first, "not a Dask scheduler (it answered 'HTTP/1.1')"),
    ],
    indirect=["server"],
)
def test_scheduler_that_is_not_dask_is_one_line(
    server: str,
    needle: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("distributed")
    from svbnn_experiments import distributed as engine_mod
    from svbnn_experiments.cli import main

    monkeypatch.setattr(engine_mod, "CONNECT_TIMEOUT_S", 1.0)
    t0 = time.monotonic()
    assert main([*QUICK, "--scheduler", f"tcp://{server}", "--out", str(tmp_path / "o")]) == 2
    assert time.monotonic() - t0 < 10
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"--scheduler tcp://{server}: " in err[0] and needle in err[0], err


def test_a_scheduler_whose_chunks_never_finish_meets_the_task_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A scheduler with no worker, and --jobs given (so nothing waits for a worker to join):
    # no chunk ever runs.
    distributed = pytest.importorskip("distributed")
    import logging

    from svbnn_experiments import distributed as engine_mod
    from svbnn_experiments.cli import main

    monkeypatch.setattr(engine_mod, "TASK_TIMEOUT_S", 1.0)
    with distributed.LocalCluster(
        n_workers=0,
        processes=False,
        protocol="tcp",
        dashboard_address=":0",
        silence_logs=logging.ERROR,
    ) as empty:
        address = empty.scheduler_address
        t0 = time.monotonic()
        argv = [*QUICK, "--scheduler", address, "--jobs", "1", "--out", str(tmp_path / "o")]
        assert main(argv) == 2
        assert time.monotonic() - t0 < 15
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"--scheduler {address}: no chunk finished within 1 s" in err[0], err


def test_a_scheduler_that_stops_answering_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # Once connected, the scheduler answers no status request (as a stopped process would)
    # and the chunk never runs (no worker); chunks may take hours, so only the liveness
    # check can tell, within ALIVE_CHECK_S.
    distributed = pytest.importorskip("distributed")
    import asyncio
    import logging

    from svbnn_experiments import distributed as engine_mod

    monkeypatch.setattr(engine_mod, "ALIVE_CHECK_S", 0.5)

    async def never(*args: object, **kwargs: object) -> None:
        await asyncio.sleep(3600)

    with distributed.LocalCluster(
        n_workers=0,
        processes=False,
        protocol="tcp",
        dashboard_address=":0",
        silence_logs=logging.ERROR,
    ) as empty:
        address = empty.scheduler_address
        with engine_mod.dask_engine(address, jobs=1) as engine:
            empty.scheduler.handlers["identity"] = never
            future = engine.client.submit(sum, [1, 2], pure=False)
            t0 = time.monotonic()
            with pytest.raises(ValueError, match=f"--scheduler {address}: the scheduler stopped"):
                list(engine._finished([future]))
            assert time.monotonic() - t0 < 5
