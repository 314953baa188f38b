"""Results folders (issue #15, item 2 and the interrupt half of item 5): atomic writes, one
run per output folder, and a status in settings.json that says whether results are whole."""

from __future__ import annotations

import contextlib
import csv
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from svbnn_experiments.cli import main
from svbnn_experiments.files import (
    LOCK_NAME,
    OutputLockedError,
    atomic_savefig,
    atomic_write_text,
    lock_output,
    write_csv,
    write_settings,
)
from svbnn_experiments.report import write_report

SRC = str(Path(__file__).resolve().parents[1] / "src")
ENV = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if ".tmp" in p.name or "stale" in p.name)


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "svbnn_experiments.cli", *args]


# ------------------------------------------------------------------------ atomic writes
def test_atomic_write_text_replaces_whole(tmp_path: Path) -> None:
    path = tmp_path / "a.csv"
    atomic_write_text(path, "x,y\r\n1,2\r\n")
    assert path.read_bytes() == b"x,y\r\n1,2\r\n"  # line endings kept (csv writes \r\n)
    atomic_write_text(path, "new")
    assert path.read_text() == "new"
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "write",
    [
        lambda d: write_csv(d / "results.csv", [{"a": 1.0}]),
        lambda d: write_settings(d, {"a": 1}),
        lambda d: write_report(d, "T", ["body"]),
        lambda d: atomic_write_text(d / "estimate.json", "{}"),
    ],
    ids=["write_csv", "write_settings", "write_report", "atomic_write_text"],
)
def test_a_failed_write_keeps_the_old_file_and_no_temporary(
    write: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("results.csv", "settings.json", "report.md", "estimate.json"):
        (tmp_path / name).write_text("old")

    def fail(src: Any, dst: Any) -> None:
        raise OSError(28, "No space left on device")

    # Every results writer must go through the one atomic writer (the rename fails here).
    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="No space"):
        write(tmp_path)
    for name in ("results.csv", "settings.json", "report.md", "estimate.json"):
        assert (tmp_path / name).read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_atomic_savefig(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure

    fig = Figure()
    fig.add_subplot().plot([0, 1], [1, 0])
    path = atomic_savefig(fig, tmp_path / "f.png", dpi=20)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert _leftovers(tmp_path) == []


# ------------------------------------------------------------------------------ locks
def test_a_held_folder_is_refused_naming_the_owner(tmp_path: Path) -> None:
    with lock_output(tmp_path) as lock:
        owner = json.loads(lock.read_text())
        assert owner["pid"] == os.getpid() and owner["host"] == socket.gethostname()
        with pytest.raises(OutputLockedError, match=rf"--out {tmp_path}: .*pid {os.getpid()}"):
            with lock_output(tmp_path):
                pass
        assert lock.exists()  # the refused attempt left the owner's lock alone
    assert not (tmp_path / LOCK_NAME).exists()


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_stale_lock_is_taken_over(tmp_path: Path) -> None:
    stale = {"pid": _dead_pid(), "host": socket.gethostname()}
    (tmp_path / LOCK_NAME).write_text(json.dumps(stale))
    with lock_output(tmp_path) as lock:
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    assert not lock.exists()
    assert _leftovers(tmp_path) == []


def test_a_lock_from_another_host_is_respected(tmp_path: Path) -> None:
    # Its pid cannot be checked from here: refuse, and say whose it is.
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": 1, "host": "elsewhere"}))
    with pytest.raises(OutputLockedError, match="pid 1 on elsewhere"):
        with lock_output(tmp_path):
            pass


def test_an_empty_lock_is_stale_only_when_old(tmp_path: Path) -> None:
    # An empty lock is a run between creating the file and writing its record.
    lock = tmp_path / LOCK_NAME
    lock.write_text("")
    with pytest.raises(OutputLockedError):
        with lock_output(tmp_path):
            pass
    old = time.time() - 60
    os.utime(lock, (old, old))
    with lock_output(tmp_path):
        pass
    assert not lock.exists()


def test_cli_refuses_a_folder_another_process_writes(tmp_path: Path) -> None:
    # This process holds the lock; a real `svbnn` process must refuse at once.
    with lock_output(tmp_path):
        res = subprocess.run(
            _cli("reproduce", "fig-gumbel-convergence", "--quick", "--out", str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=120,
            env=ENV,
        )
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr
    assert f"--out {tmp_path}" in lines[0] and f"pid {os.getpid()}" in lines[0]
    assert not (tmp_path / "results.csv").exists()


def test_merge_refuses_an_unfinished_part(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    part = tmp_path / "part"
    part.mkdir()
    write_settings(part, {"artifact": "table2", "status": "interrupted"})
    out = tmp_path / "merged"
    assert main(["reproduce", "table2", "--merge", str(part), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "interrupted" in err and str(part) in err


# --------------------------------------------------------------------- status, SIGINT
def test_a_complete_run_says_so_and_leaves_no_lock(tmp_path: Path) -> None:
    assert main(["reproduce", "fig-gumbel-convergence", "--quick", "--out", str(tmp_path)]) == 0
    settings = json.loads((tmp_path / "settings.json").read_text())
    assert settings["status"] == "complete"
    assert not (tmp_path / LOCK_NAME).exists()
    assert _leftovers(tmp_path) == []


def _default_sigint() -> None:
    # The child gets Ctrl-C as a terminal user's process does, whatever this test process
    # inherited: a command started in the background of a non-interactive shell (as CI may
    # run the suite) ignores SIGINT, and Python then never raises KeyboardInterrupt.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT])


def _terminal_sigint() -> None:
    # A process group of its own, to send Ctrl-C to the whole group as a terminal does.
    _default_sigint()
    os.setsid()


def _workers_ignoring_sigint(pid: int) -> list[int]:
    """``pid``'s worker processes (spawned by multiprocessing: the pool's and the Dask
    cluster's, not its resource tracker) that ignore SIGINT, read from Linux's /proc: a
    worker does once it is set up (the pool's initializer, Dask's preload)."""
    parent: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            # "pid (comm) state ppid ...": comm may hold spaces, so split after its ")".
            parent[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # a process that ended meanwhile
    descendants: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, ppid in parent.items() if ppid in frontier} - descendants
        descendants |= frontier
    ignoring = []
    for child in sorted(descendants):
        try:
            command = Path(f"/proc/{child}/cmdline").read_bytes()
            status = Path(f"/proc/{child}/status").read_text().splitlines()
        except OSError:
            continue
        if b"multiprocessing.spawn" not in command:
            continue
        mask = next(int(line.split()[1], 16) for line in status if line.startswith("SigIgn:"))
        if mask >> (signal.SIGINT - 1) & 1:
            ignoring.append(child)
    return ignoring


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """SIGKILL to what is left of ``proc``'s process group (its own session: workers that
    outlived it included)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def _running(pid: int) -> bool:
    """Whether process ``pid`` runs (not ended, not a zombie)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="POSIX signals, Linux /proc")
@pytest.mark.parametrize(
    "engine",
    [
        (),
        # Workers too: Ctrl-C reaches the whole process group, while they train; stopping
        # them must not leave the resource tracker a semaphore to warn about.
        # Two chunks (--batch 1), one for each worker: --jobs runs a lone chunk in-process.
        ("--reps", "2", "--batch", "1", "--jobs", "2"),
        ("--reps", "2", "--batch", "1", "--cluster", "local:2"),
    ],
    ids=["local", "processes", "dask"],
)
def test_sigint_marks_the_run_interrupted(tmp_path: Path, engine: tuple[str, ...]) -> None:
    out = tmp_path / "run"
    # Far more epochs than the test waits for: the run is training when SIGINT arrives.
    args = ("reproduce", "table2", "--quick", "--reps", "1", "--epochs", "100000", *engine)
    proc = subprocess.Popen(
        _cli(*args, "--no-progress", "--out", str(out)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        preexec_fn=_terminal_sigint if engine else _default_sigint,
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            settings = out / "settings.json"
            if settings.exists() and json.loads(settings.read_text())["status"] == "running":
                break
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        else:
            pytest.fail("the run never started")
        if engine:
            # Both workers set up (they ignore SIGINT from then on) before Ctrl-C reaches
            # the group: one still starting would die of it with a traceback.
            while len(_workers_ignoring_sigint(proc.pid)) < 2:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "the workers never started"
                time.sleep(0.1)
            time.sleep(0.5)  # and take their chunks
            os.killpg(proc.pid, signal.SIGINT)
        else:
            time.sleep(0.5)
            proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if engine:
            _kill_group(proc)
        elif proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert err.strip().splitlines() == [f"svbnn: interrupted; partial results in {out}"]
    settings = json.loads((out / "settings.json").read_text())
    assert settings["status"] == "interrupted" and settings["config"]["epochs"] == 100000
    assert not (out / LOCK_NAME).exists()


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="POSIX signals, Linux /proc")
def test_sigterm_stops_the_workers_and_marks_the_run_interrupted(tmp_path: Path) -> None:
    # `kill PID` of a run: without a handler the process ended at once and its workers
    # trained on (orphans, for the whole of their chunks), the folder still "running".
    out = tmp_path / "run"
    args = ("reproduce", "table2", "--quick", "--reps", "2", "--batch", "1", "--jobs", "2")
    proc = subprocess.Popen(
        _cli(*args, "--epochs", "100000", "--no-progress", "--out", str(out)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=ENV,
        preexec_fn=_terminal_sigint,
    )
    try:
        deadline = time.monotonic() + 90
        workers: list[int] = []
        while len(workers) < 2:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the workers never started"
            time.sleep(0.1)
            workers = _workers_ignoring_sigint(proc.pid)
        time.sleep(0.5)
        proc.terminate()  # SIGTERM to the run's process alone, as `kill PID`
        _, err = proc.communicate(timeout=60)
        alive = [pid for pid in workers if _running(pid)]  # before the cleanup kills them
    finally:
        _kill_group(proc)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert err.strip().splitlines() == [f"svbnn: interrupted; partial results in {out}"]
    assert json.loads((out / "settings.json").read_text())["status"] == "interrupted"
    assert not (out / LOCK_NAME).exists()
    assert alive == []


# ------------------------------------------------------------------ the race
def _data_seeds(seed: int) -> list[str]:
    from svbnn_experiments import get_artifact, resolve_config
    from svbnn_experiments.simulations import plan_table2

    cfg = resolve_config(get_artifact("table2"), {"seed": seed, "reps": 1}, quick=True)
    return [str(s) for ch in plan_table2(cfg) for s in ch.data_seeds]


@pytest.mark.slow
def test_two_runs_on_one_folder_never_mix(tmp_path: Path) -> None:
    # `for s in 1 2; do svbnn reproduce table2 --quick --seed $s --out cc & done; wait`
    # mixed one run's results.csv with the other's settings.json in 3 of 10 trials.
    for trial in range(3):
        out = tmp_path / f"cc{trial}"
        procs = {
            s: subprocess.Popen(
                _cli("reproduce", "table2", "--quick", "--reps", "1", "--no-progress")
                + ["--seed", str(s), "--out", str(out)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env=ENV,
            )
            for s in (1, 2)
        }
        results = {
            s: (p.wait(timeout=300), p.stderr.read() if p.stderr else "") for s, p in procs.items()
        }
        for p in procs.values():
            if p.stderr:
                p.stderr.close()
        codes = sorted(rc for rc, _ in results.values())
        assert codes in ([0, 0], [0, 2]), results
        for rc, err in results.values():
            if rc == 2:
                assert "--out" in err and "pid" in err and err.count("\n") == 1
        settings = json.loads((out / "settings.json").read_text())
        assert settings["status"] == "complete"
        with (out / "results.csv").open(newline="") as fh:
            seeds = [r["data_seed"] for r in csv.DictReader(fh)]
        assert seeds == _data_seeds(settings["config"]["seed"])
        assert not (out / LOCK_NAME).exists()


def test_settings_record_the_checkout_commit() -> None:
    import subprocess as sp

    from svbnn_experiments.files import environment_info

    repo = Path(__file__).resolve().parents[1]
    head = sp.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True)
    assert head.returncode == 0  # the tests run from a checkout
    assert environment_info()["git"]["commit"] == head.stdout.strip()


def test_ctrl_c_in_process_is_one_line_and_marks_the_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The same path as a real Ctrl-C, without signals: the run raises KeyboardInterrupt.
    import dataclasses

    from svbnn_experiments import registry

    def interrupted(cfg: Any) -> dict[str, Any]:
        raise KeyboardInterrupt

    table2 = dataclasses.replace(registry.ARTIFACTS["table2"], run=interrupted)
    monkeypatch.setitem(registry._ARTIFACTS, "table2", table2)
    out = tmp_path / "run"
    assert main(["reproduce", "table2", "--quick", "--no-progress", "--out", str(out)]) == 130
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [f"svbnn: interrupted; partial results in {out}"]
    assert json.loads((out / "settings.json").read_text())["status"] == "interrupted"
    assert not (out / LOCK_NAME).exists()


# ----------------------------------------------------------------------- run identity
_GUMBEL = ["reproduce", "fig-gumbel-convergence", "--quick", "--no-progress"]


@pytest.mark.parametrize(
    ("change", "needles"),
    [
        (["--seed", "7"], ("--seed 0, not --seed 7",)),
        (["--set", "n_points=301"], ("--set n_points=501, not --set n_points=301",)),
        (["--kernels", "auto"], ("--kernels eager, not --kernels auto",)),
        (["--reps", "2"], ("--reps 1, not --reps 2",)),
    ],
)
def test_a_folder_resumes_only_its_own_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: list[str], needles: tuple[str]
) -> None:
    """A run into a folder holding a run with other settings is refused in one line naming
    the setting and both values, and the folder is left as it was; --restart starts
    afresh; the same settings run again."""
    out = ["--out", str(tmp_path)]
    assert main([*_GUMBEL, *out]) == 0
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main([*_GUMBEL, *out, *change]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "Traceback" not in err, err
    assert all(n in err for n in (str(tmp_path), "--restart", *needles)), err
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before
    assert main([*_GUMBEL, *out, *change, "--restart"]) == 0
    settings = json.loads((tmp_path / "settings.json").read_text())
    assert settings["status"] == "complete"
    value = change[1].split("=")[-1]
    assert value in json.dumps(settings["identity"])
    assert main([*_GUMBEL, *out, *change]) == 0  # the same settings again: accepted


def test_identity_ignores_speed_settings_and_reads_old_folders(tmp_path: Path) -> None:
    """--jobs, --threads and --no-progress change no number: not part of the identity; a
    folder written before identities were saved is compared through its config."""
    from svbnn_experiments import get_artifact, resolve_config
    from svbnn_experiments.runner import _saved_identity, run_identity

    art = get_artifact("table2")
    a = resolve_config(art, {"jobs": 1, "threads": 1}, quick=True, out=tmp_path / "a")
    b = resolve_config(art, {"jobs": 3, "threads": 2, "progress": False}, quick=True)
    assert run_identity(a) == run_identity(b)
    assert run_identity(a) != run_identity(resolve_config(art, {"seed": 1}, quick=True))
    old = {"config": a.as_dict(), "environment": {"svbnn_kernels": "eager"}}
    assert _saved_identity(old) == run_identity(a, "eager")
    assert _saved_identity({}) is None


def test_a_folder_with_results_but_no_settings_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "results.csv").write_text("method,rep\nsvbnn,0\n")
    assert main([*_GUMBEL, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no recorded settings" in err and "--restart" in err
    assert (tmp_path / "results.csv").read_text() == "method,rep\nsvbnn,0\n"


@pytest.mark.parametrize("other", ["--report-only", "--estimate-epochs"])
def test_restart_only_with_a_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], other: str
) -> None:
    extra = ["3"] if other == "--estimate-epochs" else []
    assert main([*_GUMBEL, "--out", str(tmp_path), "--restart", other, *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--restart" in err and other in err


def test_report_only_on_an_incomplete_run_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An interrupted run's report is not silently final: its first line and a warning on
    the terminal say how much of the run it covers."""
    out = ["--out", str(tmp_path)]
    args = ["reproduce", "table2", "--quick", "--no-progress", "--reps", "2", "--epochs", "2"]
    assert main([*args, *out]) == 0
    settings = json.loads((tmp_path / "settings.json").read_text())
    settings["status"] = "interrupted"
    write_settings(tmp_path, settings)
    with open(tmp_path / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    write_csv(tmp_path / "results.csv", [r for r in rows if r["rep"] == "0"])
    capsys.readouterr()
    assert main(["reproduce", "table2", "--report-only", *out]) == 0
    captured = capsys.readouterr()
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("> **incomplete: 1 of 2 replications (the run is interrupted)")
    warning = [line for line in captured.err.splitlines() if "warning" in line]
    assert len(warning) == 1 and "incomplete: 1 of 2 replications" in warning[0]
    assert captured.err.count("incomplete") == 1  # one line, not the log and the warning
    # The complete run's report has no such line.
    settings["status"] = "complete"
    write_settings(tmp_path, settings)
    write_csv(tmp_path / "results.csv", rows)
    assert main(["reproduce", "table2", "--report-only", *out]) == 0
    assert "incomplete" not in (tmp_path / "report.md").read_text()
    assert "warning" not in capsys.readouterr().err


def test_incomplete_epochs_are_counted_per_method(tmp_path: Path) -> None:
    from svbnn_experiments.runner import incomplete_note

    config = {"epochs": 5, "methods": ["svbnn", "agp"], "reps": 1}
    write_settings(tmp_path, {"status": "running", "config": config})
    rows = [{"method": "svbnn", "epoch": e} for e in (1, 2, 3)] + [{"method": "agp", "epoch": 1}]
    write_csv(tmp_path / "results.csv", rows)
    assert incomplete_note(tmp_path) == (
        "incomplete: 1 of 5 epochs (the run is running); this report covers only those"
    )
    rows += [{"method": "agp", "epoch": e} for e in (2, 3, 4, 5)]
    rows += [{"method": "svbnn", "epoch": e} for e in (4, 5)]
    write_csv(tmp_path / "results.csv", rows)
    write_settings(tmp_path, {"status": "complete", "config": config})
    assert incomplete_note(tmp_path) is None


# ----------------------------------------------------------------------- messages
def test_a_dangling_lock_symlink_is_refused_at_once(tmp_path: Path) -> None:
    lock = tmp_path / LOCK_NAME
    lock.symlink_to(tmp_path / "nowhere")
    t0 = time.perf_counter()
    with pytest.raises(OutputLockedError, match="symbolic link") as err:
        with lock_output(tmp_path):
            pass
    assert time.perf_counter() - t0 < 1.0
    assert str(lock) in str(err.value) and "remove it" in str(err.value)
    assert lock.is_symlink()  # not followed, not removed


def test_merge_of_missing_folders_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "m"
    assert main(["reproduce", "table2", "--merge", "nope1", "nope2", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "svbnn: error: --merge nope1: no run found (no such folder)"
    (tmp_path / "empty").mkdir()
    assert main(["reproduce", "table2", "--merge", str(tmp_path / "empty"), "--out", str(out)]) == 2
    assert "no settings.json there" in capsys.readouterr().err


def test_merge_refuses_parts_of_other_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Parts run with other settings (beyond their methods) would mix runs in one report."""
    base = ["reproduce", "table2", "--quick", "--no-progress", "--reps", "1", "--epochs", "1"]
    assert main([*base, "--methods", "svbnn", "--out", str(tmp_path / "a")]) == 0
    assert main([*base, "--methods", "vbnn", "--out", str(tmp_path / "b")]) == 0
    assert main([*base, "--methods", "vbnn", "--seed", "5", "--out", str(tmp_path / "c")]) == 0
    merge = ["reproduce", "table2", "--merge", str(tmp_path / "a")]
    out = ["--out", str(tmp_path / "m")]
    assert main([*merge, str(tmp_path / "b"), *out]) == 0
    assert main([*merge, str(tmp_path / "b"), *out]) == 0  # the same merge again
    identity = json.loads((tmp_path / "m" / "settings.json").read_text())["identity"]
    assert identity["methods"] == ["svbnn", "vbnn"]
    capsys.readouterr()
    assert main([*merge, str(tmp_path / "c"), "--out", str(tmp_path / "m2")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(tmp_path / "c") in err and "--seed 0, not --seed 5" in err
    # Into a folder holding another run: refused, the run there kept.
    before = (tmp_path / "a" / "results.csv").read_bytes()
    assert main([*merge, str(tmp_path / "b"), "--out", str(tmp_path / "a")]) == 2
    assert "--methods svbnn, not --methods svbnn,vbnn" in capsys.readouterr().err
    assert (tmp_path / "a" / "results.csv").read_bytes() == before


def test_more_epochs_continue_a_checkpointed_run_fewer_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder with per-epoch checkpoints continues to a larger --epochs (the same run,
    trained longer); fewer epochs are refused; without checkpoints any change is refused."""
    from svbnn_experiments import get_artifact, resolve_config
    from svbnn_experiments.runner import _check_folder_identity, run_identity

    art = get_artifact("mnist")
    cfg = resolve_config(art, {"epochs": 3}, quick=True, out=tmp_path)
    write_settings(tmp_path, {"identity": run_identity(cfg), "status": "interrupted"})
    longer = resolve_config(art, {"epochs": 5}, quick=True, out=tmp_path)
    shorter = resolve_config(art, {"epochs": 2}, quick=True, out=tmp_path)
    with pytest.raises(ValueError, match="--epochs 3, not --epochs 5"):
        _check_folder_identity(longer, restart=False)  # no checkpoints: another run
    (tmp_path / "checkpoints").mkdir()
    _check_folder_identity(longer, restart=False)
    with pytest.raises(ValueError, match="--epochs 3, not --epochs 2"):
        _check_folder_identity(shorter, restart=False)
    seven = resolve_config(art, {"epochs": 5, "seed": 7}, quick=True, out=tmp_path)
    with pytest.raises(ValueError, match="--seed 0, not --seed 7"):
        _check_folder_identity(seven, restart=False)
