"""Dask as the engine of a run's chunks (issue #17, item 1): ``--scheduler``, ``--cluster``,
retries of a killed worker, the one-line errors, and joblib's ``dask`` backend for the
estimators. The tests start and stop their own clusters."""

from __future__ import annotations

import functools
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import distributed
import numpy as np
import pytest

from svbnn import SVBNNRegressor
from svbnn_experiments import distributed as engine_mod
from svbnn_experiments import get_artifact, resolve_config
from svbnn_experiments.cli import main
from svbnn_experiments.common import Chunk, ChunkResult
from svbnn_experiments.engine import engine_name, use_engine
from svbnn_experiments.files import read_csv

SRC = str(Path(__file__).resolve().parents[1] / "src")
TIMINGS = {"wall_s", "chunk_train_s"}  # the only columns allowed to differ between runs
QUICK = ["reproduce", "table2", "--quick", "--no-progress", "--seed", "3"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """Two worker processes, one thread each (what ``--cluster local:2`` starts)."""
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=":0",
        silence_logs=logging.ERROR,
    ) as c:
        yield c


def _rows(folder: Path) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if k not in TIMINGS} for r in read_csv(folder / "results.csv")
    ]


def _settings(folder: Path) -> dict[str, Any]:
    settings: dict[str, Any] = json.loads((folder / "settings.json").read_text())
    return settings


def _one_line(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err
    return err


def test_local_cluster_gives_the_numbers_of_jobs(tmp_path: Path) -> None:
    # --cluster local:2, --jobs 2 and --jobs 1: the same chunks (--batch 1: two), hence the
    # same results.csv, bit for bit.
    one = [*QUICK, "--batch", "1"]
    assert main([*one, "--jobs", "2", "--out", str(tmp_path / "procs")]) == 0
    assert main([*one, "--cluster", "local:2", "--out", str(tmp_path / "dask")]) == 0
    assert main([*one, "--jobs", "1", "--out", str(tmp_path / "local")]) == 0
    procs, dask = _rows(tmp_path / "procs"), _rows(tmp_path / "dask")
    assert len(procs) == 2 and dask == procs == _rows(tmp_path / "local")
    sp, sd = _settings(tmp_path / "procs"), _settings(tmp_path / "dask")
    assert sp["engine"] == "processes:2" and sd["engine"].startswith("dask:tcp://")
    assert sp["config"]["jobs"] == sd["config"]["jobs"] == 2
    assert [c["reps"] for c in sd["chunks"]] == [c["reps"] for c in sp["chunks"]] == [[0], [1]]
    assert sd["status"] == "complete"


class _FakeEngine:
    workers = 3
    name = "fake:engine"

    def run(self, chunks: Any, progress: bool, desc: str) -> list[ChunkResult]:
        raise AssertionError("not run here")


def test_local_cluster_workers_keep_the_default_malloc(monkeypatch: pytest.MonkeyPatch) -> None:
    # Dask's nanny sets MALLOC_TRIM_THRESHOLD_ for its workers (which freezes glibc's mmap
    # threshold and slowed training 1.6x); the cluster of --cluster must not.
    import dask

    key = "distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_"
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    assert dask.config.get(key) is not None  # what the test guards against is there
    client, local = engine_mod._start_local_cluster(distributed, 1)
    try:
        # A lambda travels by value (cloudpickle) and reads the worker's environment.
        worker_env = client.submit(lambda: dict(os.environ), pure=False).result()
    finally:
        client.close()
        local.close()
    assert "MALLOC_TRIM_THRESHOLD_" not in worker_env
    assert worker_env.get("OMP_NUM_THREADS") == "1"  # the rest of Dask's settings stay
    assert dask.config.get(key) is not None  # and the config is restored


def test_ctrl_c_while_the_cluster_starts_is_not_lost() -> None:
    # A Ctrl-C pressed while the LocalCluster starts stops the start (it used to be ignored
    # then, and the run went on); the workers ignore SIGINT through the preload instead.
    import signal
    import types

    class FakeCluster:
        def __init__(self, **kwargs: Any) -> None:
            assert kwargs["preload"] == ["svbnn_experiments._dask_preload"]
            os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C, mid-start
            time.sleep(1.0)  # interrupted long before this ends

    def no_client(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the start must stop at the interrupt")

    fake = types.SimpleNamespace(LocalCluster=FakeCluster, Client=no_client)
    # Python's own Ctrl-C handler, as in a terminal: a process started in the background of
    # a non-interactive shell inherits SIGINT ignored, and Python then installs none.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            engine_mod._start_local_cluster(fake, 2)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_worker_preload_ignores_sigint() -> None:
    code = (
        "import signal; import svbnn_experiments._dask_preload; "
        "assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN"
    )
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "PYTHONPATH": SRC})


def test_an_engine_sets_the_default_jobs_and_is_recorded() -> None:
    # --jobs (chunks run at once) is the engine's workers unless given; the chunk layout
    # does not depend on it.
    table2 = get_artifact("table2")
    assert engine_name(1, 4) == "local" and engine_name(2, 1) == "local"
    assert engine_name(2, 4) == "processes:2"
    with use_engine(_FakeEngine()):
        assert resolve_config(table2).jobs == 3
        assert resolve_config(table2, quick=True).jobs == 3
        assert resolve_config(table2, {"jobs": 5}).jobs == 5
        assert engine_name(1, 1) == "fake:engine"
    assert resolve_config(table2, quick=True).jobs == 1


def _die_once(chunk: Chunk, kernels: str, marker: str) -> ChunkResult:
    # On a worker: the first chunk 0 to run takes its worker process down with it.
    if chunk.index == 0 and not os.path.exists(marker):
        Path(marker).write_text("killed")
        os._exit(1)
    return engine_mod._chunk_task(chunk, kernels)


def test_a_killed_worker_is_survived(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "killed"
    monkeypatch.setattr(engine_mod, "_chunk_task", functools.partial(_die_once, marker=str(marker)))
    out = tmp_path / "run"
    assert main([*QUICK, "--scheduler", cluster.scheduler_address, "--out", str(out)]) == 0
    assert marker.read_text() == "killed"  # a worker did die running chunk 0
    rows = read_csv(out / "results.csv")
    assert sorted(r["rep"] for r in rows) == [0, 1]
    assert all(np.isfinite(r["test_rmse"]) for r in rows)
    settings = _settings(out)
    assert settings["status"] == "complete" and settings["config"]["jobs"] == 2


def test_ctrl_c_cancels_the_chunks(
    cluster: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt  # while the engine waits for its chunks

    monkeypatch.setattr(distributed, "wait", interrupted)
    out = tmp_path / "run"
    assert main([*QUICK, "--scheduler", cluster.scheduler_address, "--out", str(out)]) == 130
    assert capsys.readouterr().err.strip().splitlines() == [
        f"svbnn: interrupted; partial results in {out}"
    ]
    assert _settings(out)["status"] == "interrupted"
    with distributed.Client(cluster.scheduler_address, set_as_default=False) as client:
        # The run's tasks were cancelled and released (none left on the scheduler).
        for _ in range(50):
            if not client.run_on_scheduler(_n_tasks):
                break
            time.sleep(0.1)
        assert client.run_on_scheduler(_n_tasks) == 0


def _n_tasks(dask_scheduler: Any) -> int:
    return len(dask_scheduler.tasks)


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["--cluster", "local:0"], ["--cluster", "local:N"]),
        (["--cluster", "foo"], ["--cluster", "local:N"]),
        (["--cluster", "local:x"], ["--cluster"]),
        (["--scheduler", "foo"], ["--scheduler", "tcp://HOST:PORT"]),
        (["--scheduler", "tcp://h:1", "--cluster", "local:1"], ["--cluster", "--scheduler"]),
        (["--cluster", "local:2", "--jobs", "3"], ["--jobs 3", "--cluster local:2"]),
        (["--cluster", "local:2", "--estimate-epochs", "2"], ["--cluster", "--estimate-epochs"]),
        (["--scheduler", "tcp://h:1", "--report-only"], ["--scheduler", "--report-only"]),
        (["--cluster", "local:1", "--list"], ["--cluster", "--list"]),
    ],
)
def test_engine_options_fail_in_one_line(
    argv: list[str], needles: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*QUICK, "--out", str(tmp_path / "x"), *argv]) == 2
    _one_line(capsys, "error", *needles)
    assert not (tmp_path / "x" / "settings.json").exists()


def test_unreachable_scheduler_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(engine_mod, "CONNECT_TIMEOUT_S", 1.0)
    assert main([*QUICK, "--scheduler", "tcp://127.0.0.1:1", "--out", str(tmp_path)]) == 2
    _one_line(capsys, "--scheduler tcp://127.0.0.1:1: cannot connect")


def test_scheduler_without_workers_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(engine_mod, "CONNECT_TIMEOUT_S", 1.0)
    with distributed.LocalCluster(
        n_workers=0,
        processes=False,
        protocol="tcp",
        dashboard_address=":0",
        silence_logs=logging.ERROR,
    ) as empty:
        address = empty.scheduler_address
        assert main([*QUICK, "--scheduler", address, "--out", str(tmp_path)]) == 2
    _one_line(capsys, f"--scheduler {address}: no worker joined", "--jobs N")


def test_missing_dask_is_one_line_with_the_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import distributed fails
    assert main([*QUICK, "--cluster", "local:1", "--out", str(tmp_path)]) == 2
    _one_line(capsys, "--cluster needs Dask: pip install 'svbnn[distributed]'")


def test_dask_is_imported_only_when_asked_for() -> None:
    code = (
        "import sys, svbnn_experiments, svbnn_experiments.cli as cli; cli.build_parser(); "
        "import svbnn_experiments.distributed; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed')))"
    )
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert res.stdout.strip() == "[]"


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
def test_estimators_run_on_the_cluster_through_joblib(cluster: Any) -> None:
    # scikit-learn's convention: parallel work goes through joblib, whose "dask" backend
    # sends it to the cluster. Same random_state, same scores as in this process.
    import joblib
    from sklearn.model_selection import cross_val_score

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(60, 3))
    y = X[:, 0] - 2 * X[:, 1] + 0.1 * rng.standard_normal(60)
    est = SVBNNRegressor(
        hidden_layer_sizes=(4,),
        max_iter=20,
        batch_size=30,
        learning_rate_init=0.03,
        n_samples_predict=5,
        kernel_backend="eager",
        random_state=0,
    )
    local = cross_val_score(est, X, y, cv=2, n_jobs=1)
    with distributed.Client(cluster.scheduler_address), joblib.parallel_backend("dask"):
        remote = cross_val_score(est, X, y, cv=2, n_jobs=2)
    assert np.all(local > 0.5)  # a real fit, not a degenerate one
    np.testing.assert_array_equal(remote, local)
