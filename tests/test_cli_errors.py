"""User errors of the ``svbnn`` command: one line on stderr naming the option and the value,
status 2, no traceback, and nothing done before the refusal (issue #15, item 5)."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from svbnn_experiments import ARTIFACTS, get_artifact, resolve_config
from svbnn_experiments.cli import _parse_set, build_parser, main
from svbnn_experiments.methods import method_options

SRC = str(Path(__file__).resolve().parents[1] / "src")


def _one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# ----------------------------------------------------------------------------- --out
def test_out_is_an_existing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "afile"
    f.write_text("keep me")
    assert main(["reproduce", "table2", "--quick", "--out", str(f)]) == 2
    _one_line_error(capsys, "--out", str(f), "not a folder")
    assert f.read_text() == "keep me"


def test_out_below_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "afile"
    f.write_text("")
    assert main(["reproduce", "table2", "--quick", "--out", str(f / "sub")]) == 2
    _one_line_error(capsys, "--out", str(f / "sub"), "cannot create")


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux /proc")
def test_out_where_no_folder_can_be_made(capsys: pytest.CaptureFixture[str]) -> None:
    # /proc refuses new folders even to root.
    assert main(["reproduce", "table2", "--quick", "--out", "/proc/svbnn-test/x"]) == 2
    _one_line_error(capsys, "--out", "/proc/svbnn-test/x", "cannot create")


def test_out_in_a_read_only_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Root may write anywhere (these tests run as root in CI): report the folder as
    # read-only the way os.access would for an ordinary user.
    ro = tmp_path / "ro"
    ro.mkdir()
    real_access = os.access
    monkeypatch.setattr(
        os, "access", lambda p, mode, **kw: False if Path(p) == ro else real_access(p, mode, **kw)
    )
    assert main(["reproduce", "table2", "--quick", "--out", str(ro)]) == 2
    _one_line_error(capsys, "--out", str(ro), "not writable")


# ----------------------------------------------------------------------------- --set
@pytest.mark.parametrize(
    ("item", "needles"),
    [
        ("n_test=[1,2]", ("--set n_test", "[1, 2]", "integer")),  # was a TypeError
        ("n_test=0", ("--set n_test", "0", ">= 1")),  # was a NaN RMSE, rc 0
        ("n_test=1.5", ("--set n_test", "1.5", "integer")),  # was truncated to 1
        ("n_test=-1", ("--set n_test", "-1")),  # was "negative dimensions are not allowed"
        ("n_train=abc", ("--set n_train", "abc")),  # was "invalid literal for int()"
        ("hidden=[-1]", ("--set hidden", "-1")),  # was "n_params must be a positive integer"
        ("hidden=[]", ("--set hidden", "non-empty")),
        ("hidden=[7.5]", ("--set hidden", "7.5")),
        ("lr=nan", ("--set lr", "nan", "finite")),
        ("lr=-0.1", ("--set lr", "-0.1")),
        ("lr=True", ("--set lr", "True")),
        ("p=3", ("--set p", "3", ">= 5")),
        ("teacher_seed=-1", ("--set teacher_seed", "-1")),
        ("coverage_draws=1", ("--set coverage_draws", "1", ">= 2")),
        ("sampler=foo", ("--set sampler", "foo", "gumbel")),
        ("no_such_key=1", ("--set no_such_key", "known:", "n_test")),
        ("reps=3", ("--set reps", "--reps")),
        ("novalue", ("--set", "KEY=VALUE", "novalue")),
        ("=3", ("--set", "KEY=VALUE")),
    ],
)
def test_bad_set_values_are_refused_before_any_work(
    item: str, needles: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never"
    assert main(["reproduce", "table2", "--quick", "--out", str(out), "--set", item]) == 2
    _one_line_error(capsys, *needles)
    assert not out.exists(), "refused only after creating the output folder"


def test_setting_ranges_follow_the_artifact(capsys: pytest.CaptureFixture[str]) -> None:
    # The dense teacher has 20 inputs; mnist's n_test = 0 means "the whole test set".
    assert main(["reproduce", "table1-dense", "--set", "p=21"]) == 2
    _one_line_error(capsys, "--set p", "21", "equal to 20")
    cfg = resolve_config(get_artifact("mnist"), {"params": {"n_test": "0"}})
    assert cfg.params["n_test"] == 0
    cfg = resolve_config(get_artifact("table2"), {"params": {"lr": "1", "hidden": "[3, 4]"}})
    assert cfg.params["lr"] == 1.0 and isinstance(cfg.params["lr"], float)
    assert cfg.params["hidden"] == [3, 4]
    cfg = resolve_config(get_artifact("uci"), {"params": {"noise_grid": "0.5", "datasets": "1"}})
    assert cfg.params["noise_grid"] == [0.5] and cfg.params["datasets"] == "1"


# -------------------------------------------------------------------- numeric options
@pytest.mark.parametrize("option", ["--reps", "--epochs", "--jobs", "--threads", "--batch"])
@pytest.mark.parametrize("value", ["0", "-1", "2.5", "x"])
def test_counts_must_be_positive_integers(
    option: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never"
    assert main(["reproduce", "table2", "--quick", "--out", str(out), option, value]) == 2
    _one_line_error(capsys, option, repr(value))
    assert not out.exists()


@pytest.mark.parametrize("value", ["0", "-3"])
def test_estimate_epochs_must_be_positive(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    # --estimate-epochs 0 was a ZeroDivisionError after a timing run.
    assert main(["reproduce", "table2", "--estimate-epochs", value]) == 2
    _one_line_error(capsys, "--estimate-epochs", repr(value))


def test_demo_counts_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--epochs", "0"]) == 2
    _one_line_error(capsys, "--epochs", "'0'")


def test_unknown_option_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reproduce", "table2", "--no-such-option"]) == 2
    _one_line_error(capsys, "--no-such-option")


def test_version_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("svbnn ")


# ------------------------------------------------------------------- --report-only
def _fake_table2(folder: Path, rows: str) -> None:
    folder.mkdir()
    header = "method,rep,setting,train_rmse,test_rmse,fpr_pct,fnr_pct\n"
    (folder / "results.csv").write_text(header + rows)
    (folder / "settings.json").write_text(json.dumps({"artifact": "table2", "config": {}}))


@pytest.mark.parametrize(
    "rows",
    [
        "svbnn,0,sim2,1.0,1.2\n",  # a short row (a truncated file)
        "svbnn,0,sim2,1.0,1.2,0,0,7,8\n",  # surplus cells
        "svbnn,0,sim2,1.0,abc,0,0\n",  # text in a number column
    ],
)
def test_report_only_on_a_damaged_results_file(
    rows: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    _fake_table2(folder, rows)
    assert main(["reproduce", "table2", "--report-only", "--out", str(folder)]) == 2
    _one_line_error(capsys, "--report-only", str(folder))


def test_report_only_on_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "f"
    f.write_text("")
    assert main(["reproduce", "table2", "--report-only", "--out", str(f)]) == 2
    _one_line_error(capsys, "--out", str(f))


# ------------------------------------------------------------ library errors, bugs
class _CheckpointError(ValueError):
    """Stands for an error class of the library (e.g. a damaged checkpoint)."""


@pytest.mark.parametrize(
    "exc",
    [
        _CheckpointError("checkpoint c.pt is damaged:\nhash mismatch"),
        PermissionError(13, "Permission denied", "c.pt"),
        FileNotFoundError("no data directory"),
    ],
)
def test_library_errors_become_one_line(
    exc: Exception, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import svbnn_experiments as ex

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise exc

    monkeypatch.setattr(ex, "reproduce", boom)
    assert main(["reproduce", "table2", "--quick"]) == 2
    _one_line_error(capsys, "svbnn: error:")


def test_internal_errors_keep_their_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    # A RuntimeError or TypeError from inside a run is a bug: it must not be hidden.
    import svbnn_experiments as ex

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise TypeError("bug")

    monkeypatch.setattr(ex, "reproduce", boom)
    with pytest.raises(TypeError, match="bug"):
        main(["reproduce", "table2", "--quick"])


def test_console_error_has_no_traceback(tmp_path: Path) -> None:
    f = tmp_path / "afile"
    f.write_text("")
    env = {**os.environ, "PYTHONPATH": SRC, "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "svbnn_experiments.cli",
            "reproduce",
            "table2",
            "--quick",
            "--out",
            str(f),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"svbnn: error: --out {f}: exists and is not a folder"
    ]


# ------------------------------------------------------------- property-based tests
_TABLE2_KEYS = sorted(
    {*get_artifact("table2").defaults, *method_options(("svbnn", "agp", "lot"))}
    - {"reps", "epochs", "batch"}
)

_values = st.one_of(
    st.integers(min_value=-(10**12), max_value=10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["nan", "inf", "-inf", "True", "None", "[]", "()", "{}", "'x'", "1e400"]),
    st.lists(st.one_of(st.integers(-5, 50), st.floats(-2, 2)), max_size=4).map(repr),
    st.text(max_size=12),
)
_keys = st.one_of(st.sampled_from(_TABLE2_KEYS), st.text(min_size=1, max_size=10))


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(items=st.lists(st.tuples(_keys, _values), min_size=1, max_size=3))
def test_set_parsing_gives_a_valid_setting_or_a_named_error(
    items: list[tuple[str, str]],
) -> None:
    # Invariant: a ValueError naming the key, or settings of the defaults' types within
    # range; never any other exception.
    argv = [f"{k}={v}" for k, v in items]
    artifact = get_artifact("table2")
    try:
        given_ = _parse_set(argv)
        cfg = resolve_config(
            artifact, {"methods": ("svbnn", "agp", "lot"), "params": given_}, quick=True
        )
    except ValueError as exc:
        msg = str(exc)
        assert "\n" not in msg
        assert "--set" in msg
        keys = [item.partition("=")[0].strip() for item in argv]
        assert any(f"--set {k}" in msg for k in keys if k) or "KEY=VALUE" in msg, msg
        return
    defaults = {**artifact.defaults, **method_options(("svbnn", "agp", "lot"))}
    for key in given_:
        value, default = cfg.params[key], defaults[key]
        if isinstance(default, str):
            assert isinstance(value, str)
        elif isinstance(default, bool):
            assert isinstance(value, bool)
        elif _is_int(default):
            assert _is_int(value) and value >= 0
        elif isinstance(default, float):
            assert isinstance(value, float) and math.isfinite(value)
        else:
            assert isinstance(value, (list, tuple)) and len(value) > 0
            for v in value:
                assert math.isfinite(v)
                if _is_int(default[0]):
                    assert _is_int(v) and v >= 1


_tokens = st.one_of(
    st.sampled_from(
        [
            "reproduce",
            "demo",
            "table2",
            "--reps",
            "--epochs",
            "--seed",
            "--jobs",
            "--threads",
            "--batch",
            "--estimate-epochs",
            "--covariates",
            "--init",
            "--dtype",
            "--kernels",
            "--set",
            "--out",
            "--quick",
        ]
    ),
    st.integers(-3, 3).map(str),
    st.text(max_size=6),
)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(argv=st.lists(_tokens, max_size=8))
def test_option_parsing_parses_or_fails_in_one_line(argv: list[str]) -> None:
    parser = build_parser()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:
            assert exc.code in (0, 2)
            if exc.code == 2:
                assert len(err.getvalue().strip().splitlines()) == 1, err.getvalue()
            return
    for name in ("reps", "epochs", "jobs", "threads", "batch", "estimate_epochs"):
        value = getattr(args, name, None)
        assert value is None or (_is_int(value) and value >= 1)


def test_every_artifact_setting_accepts_its_own_default() -> None:
    # The validator must never refuse the paper's settings (as text, as from --set).
    for art in ARTIFACTS.values():
        methods = ("svbnn",)
        params = {
            k: repr(v) if not isinstance(v, str) else v
            for k, v in art.defaults.items()
            if k not in ("reps", "epochs", "batch", "methods")
        }
        cfg = resolve_config(art, {"methods": methods, "params": params}, strict=False)
        for k, v in art.defaults.items():
            if k in params:
                expected = list(v) if isinstance(v, list) else v
                assert cfg.params[k] == expected, (art.name, k)


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["--set", "n_test=1000000000000"], ("--set n_test", "1000000000000", "10000000")),
        (["--set", "n_train=100000000"], ("--set n_train", "100000000")),
        (["--set", "hidden=[50, 1000000]"], ("--set hidden (item 2)", "1000000")),
        (["--set", "coverage_draws=10000000"], ("--set coverage_draws", "10000000")),
        (["--reps", "100000000"], ("--reps", "at most", "100000000")),
        (["--epochs", "100000000000"], ("--epochs", "at most", "100000000000")),
        (["--jobs", "100000"], ("--jobs", "at most", "100000")),
    ],
)
def test_sizes_beyond_memory_are_refused_by_name_before_any_work(
    args: list[str], needles: tuple[str, ...], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "never"
    assert main(["reproduce", "table2", "--quick", "--out", str(out), *args]) == 2
    _one_line_error(capsys, *needles)
    assert not out.exists()
