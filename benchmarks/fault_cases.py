"""Re-run the bad inputs and faults of issue #15 and count the outcomes.

``python -m benchmarks.fault_cases`` runs each case in a fresh subprocess (library calls) or
through the ``svbnn`` command, in a temporary folder, and classifies it:

* ``clear error``: a ValueError/TypeError (library) or one line on stderr with rc 2 (CLI);
* ``ok``: the call is valid and gave a finite result (or the warning the case calls for);
* ``CODE EXECUTION``: a planted checkpoint ran code (a marker file appeared);
* ``DATA LOSS`` / ``SILENT WRONG``: results mixed or lost, or a wrong result without a word;
* ``TRACEBACK`` (counted as ``RAW OR MISLEADING``): a raw traceback or an exception type
  that does not name the problem;
* ``RAW OR MISLEADING``: for the cases that declare the user's own token (an option, a path
  or a value), an error whose message lacks it, or names an internal file, ``None`` or a
  type instead;
* ``HANG``: a case running over 30 s (120 s for the cases that train), not counting the
  start of its interpreter (the time to import svbnn and torch, measured once at the start
  and printed: on a loaded machine it alone can take 10-20 s).

It prints one line per case and the counts; the exit status is 1 if any case is bad. The
MNIST cases need the data (``SVBNN_DATA``) and are skipped, and said to be, without it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

GOOD = ("clear error", "ok")
HANG_S = 30.0
"""A case running longer than this is a hang..."""
HANG_TRAIN_S = 120.0
"""...or longer than this for a case that trains."""
_RENAMED = {"TRACEBACK": "RAW OR MISLEADING"}  # the class names

_PLANT = """
import os, torch
class E:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))
torch.save({"model": E(), "epoch": 1}, PATH)
"""

_FIT = (
    "import numpy as np, warnings; from svbnn import SVBNNRegressor, SVBNNClassifier;"
    "rng = np.random.default_rng(0); X = rng.normal(size=(60, 4)); y = X[:, 0];"
)


@dataclass
class Case:
    name: str
    run: Callable[[Path], str]
    trains: bool = False  # the hang limit is HANG_TRAIN_S rather than HANG_S


def _py(code: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    timeout = min(timeout, _LIMIT[0])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


_LIMIT = [float("inf")]  # the running case's hang limit (main sets it per case)


def _cli(args: list[str], cwd: Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    code = f"import sys; from svbnn_experiments.cli import main; sys.exit(main({args!r}))"
    return _py(code, cwd, timeout)


def _classify_py(res: subprocess.CompletedProcess[str], cwd: Path, expect: str) -> str:
    """``expect``: 'error' (a ValueError/TypeError/CheckpointError), 'ok', or 'warn:TEXT' (a
    warning containing TEXT, or a diverged fit's error naming the setting to change)."""
    if (cwd / "PWNED").exists():
        return "CODE EXECUTION"
    err = res.stderr
    last = err.strip().splitlines()[-1] if err.strip() else ""
    if expect == "error":
        if res.returncode != 0 and last.split(":")[0].endswith(
            ("ValueError", "TypeError", "CheckpointError", "NotFittedError", "DataNotFoundError")
        ):
            return "clear error"
        if last.startswith("FloatingPointError") and "learning_rate_init" in last:
            return "clear error"  # a diverged fit that names the setting to change
        return "TRACEBACK" if res.returncode else "SILENT WRONG"
    if res.returncode != 0:
        named = last.startswith("FloatingPointError") and "learning_rate_init" in last
        return "clear error" if named and expect.startswith("warn") else "TRACEBACK"
    if expect.startswith("warn:") and not _warned(err, expect[5:]):
        return "SILENT WRONG"
    return "ok"


# svbnn's specific UserWarnings; sklearn's ConvergenceWarning (the generic budget warning)
# does not count as a warning about a bad setting.
_USER_WARNINGS = ("UserWarning", "CollapseWarning", "DivergenceWarning")


def _warned(err: str, text: str) -> bool:
    """Whether stderr ``err`` holds ``text``; ``"UserWarning"`` also matches its svbnn
    subclasses, which Python prints by their own names."""
    if text == "UserWarning":
        return any(f"{name}: " in err for name in _USER_WARNINGS)
    return text in err


def _classify_cli(res: subprocess.CompletedProcess[str], cwd: Path) -> str:
    if (cwd / "PWNED").exists():
        return "CODE EXECUTION"
    lines = res.stderr.strip().splitlines()
    if "Traceback" in res.stderr:
        return "TRACEBACK"
    if res.returncode == 2 and len(lines) == 1:
        return "clear error"
    return "SILENT WRONG" if res.returncode == 0 else "TRACEBACK"


def _py_case(name: str, code: str, expect: str) -> Case:
    def run(tmp: Path) -> str:
        return _classify_py(_py(code.replace("PATH", repr(str(tmp / "c.pt"))), tmp), tmp, expect)

    return Case(name, run, trains="fit(" in code or "train(" in code)


def _cli_case(name: str, args: list[str], prepare: Callable[[Path], None] | None = None) -> Case:
    def run(tmp: Path) -> str:
        if prepare is not None:
            prepare(tmp)
        argv = [a.replace("TMP", str(tmp)) for a in args]
        return _classify_cli(_cli(argv, tmp), tmp)

    return Case(name, run, trains=args[:1] == ["reproduce"])


def _plant(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    _py(_PLANT.replace("PATH", repr(str(path))), path.parent)
    (path.parent / "PWNED").unlink(missing_ok=True)  # the plant itself must not count


def _train_resume(tail: str) -> str:
    return (
        "import torch; from svbnn.nn import SpikeSlabMLP; from svbnn.objectives import "
        "GaussianLikelihood; from svbnn.training import train;"
        + tail
        + "train(SpikeSlabMLP(3,(4,),1),torch.randn(8,3),torch.randn(8),GaussianLikelihood(1.),"
        "epochs=3,batch_size=4,lr=1e-3,checkpoint_path=PATH,resume=True)"
    )


def _two_runs_same_out(tmp: Path) -> str:
    out = tmp / "cc"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys; from svbnn_experiments.cli import main; sys.exit(main(["
                f"'reproduce','table2','--quick','--no-progress','--seed','{s}','--out',"
                f"{str(out)!r}]))",
            ],
            env={**os.environ, "OMP_NUM_THREADS": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for s in (1, 2)
    ]
    codes = [p.wait(timeout=600) for p in procs]
    if sorted(codes) not in ([0, 0], [0, 2]):
        return "TRACEBACK"
    settings = json.loads((out / "settings.json").read_text())
    seed = settings["config"]["seed"]
    # The folder must hold one run, whole: its results.csv is the one a lone run with the
    # seed its settings.json names writes (timings aside).
    ref = tmp / f"ref{seed}"
    _cli(
        ["reproduce", "table2", "--quick", "--no-progress", "--seed", str(seed), "--out", str(ref)],
        tmp,
    )
    if settings.get("status") != "complete":
        return "DATA LOSS"
    return "ok" if _rows(out) == _rows(ref) else "DATA LOSS"


def _rows(folder: Path) -> list[dict[str, str]]:
    import csv

    with open(folder / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k: v for k, v in r.items() if not k.endswith("_s")} for r in rows]


def _checkpoint_cases() -> list[Case]:
    """Faults 1 and 3: a planted pickle runs no code; damaged checkpoints are refused."""
    return [
        # 1. checkpoints run no code
        _py_case("1 train(resume) on a planted pickle", _PLANT + _train_resume(""), "error"),
        # 3. integrity
        _py_case(
            "3 checkpoint with 14 bytes overwritten",
            _train_resume("")
            + ";b=bytearray(open(PATH,'rb').read());m=len(b)//2;b[m:m+14]=b'\\xff'*14;"
            "open(PATH,'wb').write(bytes(b));"
            + _train_resume("").split(";")[-1].replace("epochs=3", "epochs=6"),
            "error",
        ),
        _py_case("3 empty checkpoint", "open(PATH,'wb').close();" + _train_resume(""), "error"),
        _py_case(
            "3 garbage checkpoint", "open(PATH,'wb').write(b'x'*99);" + _train_resume(""), "error"
        ),
    ]


def _refit_cases() -> list[Case]:
    """Fault 4: a failed refit keeps the previous fit."""
    return [
        # 4. failed refit
        _py_case(
            "4 failed refit keeps the previous fit",
            _FIT + "m=SVBNNRegressor(max_iter=2).fit(X,y)\n"
            "try: m.set_params(learning_rate_init=-1).fit(X[:,:3],y)\n"
            "except ValueError: pass\nm.predict(X[:2])",
            "ok",
        ),
    ]


def _estimator_cases() -> list[Case]:
    """Fault 6: estimator edge cases (bad settings and inputs are refused or warned about)."""
    return [
        # 6. estimator edge cases
        _py_case(
            "6 hidden_layer_sizes=5 (one layer)",
            _FIT + "SVBNNRegressor(hidden_layer_sizes=5,max_iter=2).fit(X,y)",
            "ok",
        ),
        _py_case("6 init_mu_range=-1", _FIT + "SVBNNRegressor(init_mu_range=-1).fit(X,y)", "error"),
        _py_case("6 string y", _FIT + "SVBNNRegressor(max_iter=2).fit(X,['a']*60)", "error"),
        _py_case(
            "6 predict(n_samples=2.5)",
            _FIT + "SVBNNRegressor(max_iter=2).fit(X,y).predict(X,n_samples=2.5)",
            "error",
        ),
        _py_case(
            "6 predict_interval(n_samples=1)",
            _FIT + "SVBNNRegressor(max_iter=2).fit(X,y).predict_interval(X,n_samples=1)",
            "error",
        ),
        _py_case(
            "6 learning_rate_init=1e6 (known noise) warns or names it",
            _FIT + "SVBNNRegressor(learning_rate_init=1e6,max_iter=30,noise_std=1.0).fit(X,y)",
            "warn:UserWarning",
        ),
        _py_case(
            "6 learning_rate_init=1e6 (defaults) names the setting",
            _FIT + "SVBNNRegressor(learning_rate_init=1e6,max_iter=30).fit(X,y)",
            "error",
        ),
        _py_case(
            "6 init_mu_range=1e3 warns",
            _FIT + "SVBNNRegressor(init_mu_range=1e3,max_iter=30).fit(X,y)",
            "warn:UserWarning",
        ),
        _py_case(
            "6 device='cuda' without CUDA",
            _FIT + "import torch; assert not torch.cuda.is_available();"
            "SVBNNRegressor(device='cuda').fit(X,y)",
            "error",
        ),
        _py_case(
            "6 np.random.Generator random_state",
            _FIT + "SVBNNRegressor(max_iter=2,random_state=np.random.default_rng(0)).fit(X,y)",
            "ok",
        ),
    ]


def _loader_cases() -> list[Case]:
    """Fault 7: the data loaders refuse a path outside the data folder."""
    return [
        # 7. data loaders
        _py_case(
            "7 load_uci path traversal",
            "from svbnn.data import load_uci; import tempfile,os; d=tempfile.mkdtemp();"
            "load_uci('../../../evil', data_dir=d, verify=False, download=True,"
            " base_url='file:///nonexistent')",
            "error",
        ),
    ]


def _cli_cases() -> list[Case]:
    """Faults 5 and 2: bad command-line settings and folders; two runs into one ``--out``."""
    sets = ["reproduce", "table2", "--quick", "--no-progress", "--out", "TMP/o"]
    return [
        # 5. CLI
        _cli_case("5 --out an existing file", [*sets[:-1], "TMP/f"], lambda t: (t / "f").touch()),
        _cli_case("5 --out file/sub", [*sets[:-1], "TMP/f/sub"], lambda t: (t / "f").touch()),
        _cli_case("5 --out unwritable", [*sets[:-1], "/proc/svbnn/x"]),
        _cli_case("5 --estimate-epochs 0", ["reproduce", "table2", "--estimate-epochs", "0"]),
        _cli_case("5 --set n_test=[1,2]", [*sets, "--set", "n_test=[1,2]"]),
        _cli_case("5 --set n_test=0", [*sets, "--set", "n_test=0"]),
        _cli_case("5 --set n_test=1.5", [*sets, "--set", "n_test=1.5"]),
        _cli_case("5 --set n_train=-3", [*sets, "--set", "n_train=-3"]),
        _cli_case(
            "5 --report-only on a bad results.csv",
            ["reproduce", "table2", "--report-only", "--out", "TMP/r"],
            lambda t: (
                (t / "r").mkdir(),
                (t / "r" / "results.csv").write_text("a,b\n1\n"),
                (t / "r" / "settings.json").write_text("{}"),
            ),
        ),
        Case("2 two runs into one --out", _two_runs_same_out, trains=True),
    ]


def _mnist_cases() -> list[Case]:
    """Fault 1 on the real-data artifacts: planted checkpoints beside MNIST runs."""
    return [
        _cli_case(
            "1 reproduce mnist on a planted --out checkpoint",
            ["reproduce", "mnist", "--quick", "--no-progress", "--out", "TMP/D"],
            lambda t: _plant(t / "D" / "checkpoints" / "svbnn.pt"),
        ),
        Case("1 mnist-uq beside a planted sibling mnist run", _uq_sibling, trains=True),
    ]


# ------------------------------------------------------ run identity (issue 32, part A)
# Each case declares its expected outcome and the user's own tokens (option, path or
# value) that the message must contain. A refusal whose message lacks them, or names an
# internal file (a .tmp), None or an exception type instead, is MISLEADING; a case over its
# limit (30 s; 120 s for a case that trains) is a HANG.
_INTERNAL = re.compile(r"\.tmp\b|\bNone\b|\b[A-Z][A-Za-z]*(Error|Exception)\b")
_ERROR_TYPES = (
    "ValueError",
    "CheckpointError",
    "OSError",
    "FileNotFoundError",
    "NotADirectoryError",
    "PermissionError",
    "FileExistsError",
    "OutputLockedError",
)


@dataclass
class IdentityCase:
    """A case of the run-identity classes: ``run(tmp)`` returns the outcome.

    Attributes
    ----------
    name : str
    expect : {"clear error", "ok"}
        What a correct program does.
    tokens : tuple of str
        The user's own input the message (the error, or the warning of an ``ok`` case that
        warns) must contain; ``TMP`` stands for the case's folder.
    run : callable
        ``run(tmp, case) -> outcome``.
    trains : bool
        The case trains (its limit is 120 s, else 30 s).
    """

    name: str
    expect: str
    tokens: tuple[str, ...]
    run: Callable[[Path, IdentityCase], str]
    trains: bool = False

    @property
    def limit(self) -> float:
        return 120.0 if self.trains else 30.0


def _message_outcome(message: str, case: IdentityCase, tmp: Path) -> str:
    """``clear error`` when the one-line ``message`` names every token and nothing internal;
    else ``MISLEADING``."""
    tokens = [t.replace("PATH", str(tmp / "c.pt")).replace("TMP", str(tmp)) for t in case.tokens]
    if all(t in message for t in tokens) and not _INTERNAL.search(message):
        return "clear error"
    return "MISLEADING"


def _identity_cli(
    case: IdentityCase, tmp: Path, args: list[str], timeout: float | None = None
) -> tuple[str | None, subprocess.CompletedProcess[str] | None]:
    """Run the command ``args``; ``(outcome, result)`` where ``outcome`` is set when the
    command was an error (classified) or hung, else ``None`` (the caller checks the run)."""
    argv = [a.replace("TMP", str(tmp)) for a in args]
    try:
        res = _cli(argv, tmp, timeout=timeout or case.limit)
    except subprocess.TimeoutExpired:
        return "HANG", None
    if (tmp / "PWNED").exists():
        return "CODE EXECUTION", res
    if "Traceback" in res.stderr:
        return "TRACEBACK", res
    if res.returncode == 0:
        return None, res
    lines = res.stderr.strip().splitlines()
    if res.returncode != 2 or len(lines) != 1:
        return "TRACEBACK", res
    return _message_outcome(lines[0], case, tmp), res


def _identity_refusal(
    prepare: list[list[str]], args: list[str], check_unchanged: bool = True
) -> Callable[[Path, IdentityCase], str]:
    """Run the ``prepare`` commands (they must succeed), then ``args``, which must be refused
    naming the case's tokens, leaving the folder's files as they were."""

    def run(tmp: Path, case: IdentityCase) -> str:
        for cmd in prepare:
            outcome, res = _identity_cli(case, tmp, cmd, timeout=600)
            if outcome is not None or res is None:
                return outcome or "HANG"
        out = tmp / "o"
        before = _snapshot(out)
        outcome, _ = _identity_cli(case, tmp, args)
        if outcome is None:
            return "SILENT WRONG"  # ran (resumed or overwrote) under other settings
        after = _snapshot(out)
        if check_unchanged and any(after.get(k) != v for k, v in before.items()):
            return "DATA LOSS"  # a file of the run already there was changed or removed
        return outcome

    return run


def _snapshot(folder: Path) -> dict[str, bytes]:
    if not folder.is_dir():
        return {}
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.suffix != ".png"
    }


def _identity_py(code: str) -> Callable[[Path, IdentityCase], str]:
    """A library call that must raise an error naming the tokens (``PATH``: ``TMP/c.pt``)."""

    def run(tmp: Path, case: IdentityCase) -> str:
        try:
            res = _py(code.replace("PATH", repr(str(tmp / "c.pt"))), tmp, timeout=case.limit)
        except subprocess.TimeoutExpired:
            return "HANG"
        if (tmp / "PWNED").exists():
            return "CODE EXECUTION"
        last = res.stderr.strip().splitlines()[-1] if res.stderr.strip() else ""
        if res.returncode == 0:
            return "ok" if case.expect == "ok" else "SILENT WRONG"
        kind, _, message = last.partition(": ")
        if kind.split(".")[-1] not in _ERROR_TYPES:
            return "TRACEBACK"
        return _message_outcome(message, case, tmp)

    return run


_G = ["reproduce", "fig-gumbel-convergence", "--quick", "--no-progress", "--out", "TMP/o"]
_T2 = ["reproduce", "table2", "--quick", "--no-progress", "--reps", "2", "--epochs", "2"]

_TRAIN = (
    "import torch; from svbnn.nn import SpikeSlabMLP; from svbnn.objectives import "
    "GaussianLikelihood; from svbnn.training import train; "
    "from svbnn.checkpoint import load_checkpoint, save_checkpoint\n"
    "def fit(hidden=4, **kw):\n"
    "    g = torch.Generator().manual_seed(0); X = torch.randn(8, 3, generator=g)\n"
    "    a = dict(epochs=3, batch_size=4, lr=1e-3, checkpoint_path=PATH, resume=True)\n"
    "    a.update(kw)\n"
    "    train(SpikeSlabMLP(3, (hidden,), 1), X, X[:, 0], GaussianLikelihood(1.0), **a)\n"
    "def tamper(**kw):\n"
    "    s = load_checkpoint(PATH); s.update(kw); save_checkpoint(s, PATH)\n"
    "fit()\n"
)


def _report_only_incomplete(tmp: Path, case: IdentityCase) -> str:
    """An interrupted run with 1 of 2 replications: --report-only must say so in the report
    and on the terminal."""
    import csv

    outcome, _ = _identity_cli(case, tmp, [*_T2, "--out", "TMP/o"], timeout=600)
    if outcome is not None:
        return outcome
    settings = json.loads((tmp / "o" / "settings.json").read_text())
    settings["status"] = "interrupted"
    (tmp / "o" / "settings.json").write_text(json.dumps(settings))
    with open(tmp / "o" / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(tmp / "o" / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(r for r in rows if r["rep"] == "0")
    outcome, res = _identity_cli(
        case, tmp, ["reproduce", "table2", "--report-only", "--out", "TMP/o"]
    )
    if outcome is not None or res is None:
        return outcome or "HANG"
    report = (tmp / "o" / "report.md").read_text()
    warned = any(all(t in line for t in case.tokens) for line in res.stderr.splitlines())
    return (
        "ok" if warned and all(t in report.splitlines()[0] for t in case.tokens) else "SILENT WRONG"
    )


def _restart(tmp: Path, case: IdentityCase) -> str:
    """--restart with another seed starts afresh: the folder then records the new seed."""
    for cmd in ([*_G], [*_G, "--seed", "7", "--restart"]):
        outcome, _ = _identity_cli(case, tmp, cmd, timeout=600)
        if outcome is not None:
            return outcome
    settings = json.loads((tmp / "o" / "settings.json").read_text())
    return "ok" if settings["identity"]["seed"] == 7 else "SILENT WRONG"


def _jobs_one_answer(tmp: Path, case: IdentityCase) -> str:
    """--jobs 1 and --jobs 2 give the same results.csv (timings aside)."""
    for jobs in ("1", "2"):
        outcome, _ = _identity_cli(
            case, tmp, [*_T2, "--reps", "3", "--jobs", jobs, "--out", f"TMP/j{jobs}"]
        )
        if outcome is not None:
            return outcome
    return "ok" if _rows(tmp / "j1") == _rows(tmp / "j2") else "SILENT WRONG"


def _dangling_lock(tmp: Path, case: IdentityCase) -> str:
    (tmp / "o").mkdir()
    (tmp / "o" / ".svbnn.lock").symlink_to(tmp / "nowhere")
    outcome, _ = _identity_cli(case, tmp, _G)
    return outcome or "SILENT WRONG"


def run_identity_cases(with_mnist: bool) -> list[IdentityCase]:
    """The cases of issue 32, part A: a folder or checkpoint resumes only its own run,
    checkpoint fields are validated, incomplete reports say so, messages name the user's
    input, and a seed gives one answer whatever --jobs."""
    c = IdentityCase
    out = [
        # A folder resumes only its own settings.
        c(
            "I1 --out of a run, again with --seed 7",
            "clear error",
            ("TMP/o", "--seed 7", "--restart"),
            _identity_refusal([_G], [*_G, "--seed", "7"]),
        ),
        c(
            "I1 --out of a run, again with --set n_points=301",
            "clear error",
            ("n_points=301",),
            _identity_refusal([_G], [*_G, "--set", "n_points=301"]),
        ),
        c(
            "I1 --out of a run, again with --kernels auto",
            "clear error",
            ("--kernels auto",),
            _identity_refusal([_G], [*_G, "--kernels", "auto"]),
        ),
        c(
            "I1 --out of a run, again with --reps 2",
            "clear error",
            ("--reps 2",),
            _identity_refusal([_G], [*_G, "--reps", "2"]),
        ),
        c("I1 --out of a run, again with --seed 7 --restart", "ok", (), _restart),
        # A checkpoint resumes only its own run; its fields are validated.
        c(
            "I1 train(resume) with another lr",
            "clear error",
            ("PATH", "lr=0.002"),
            _identity_py(_TRAIN + "fit(lr=2e-3)"),
            trains=True,
        ),
        c(
            "I1 train(resume) optimizer='sgd' on an Adam checkpoint",
            "clear error",
            ("PATH", "optimizer='sgd'"),
            _identity_py(_TRAIN + "fit(optimizer='sgd')"),
            trains=True,
        ),
        c(
            "I1 train(resume) with another batch_size",
            "clear error",
            ("PATH", "batch_size=2"),
            _identity_py(_TRAIN + "fit(batch_size=2)"),
            trains=True,
        ),
        c(
            "I1 train(resume) with another kl_weight",
            "clear error",
            ("PATH", "kl_weight=0.5"),
            _identity_py(_TRAIN + "fit(kl_weight=0.5)"),
            trains=True,
        ),
        c(
            "I1 checkpoint epoch -5",
            "clear error",
            ("PATH", "epoch"),
            _identity_py(_TRAIN + "tamper(epoch=-5); fit(epochs=6)"),
            trains=True,
        ),
        c(
            "I1 checkpoint epoch 2.7",
            "clear error",
            ("PATH", "epoch"),
            _identity_py(_TRAIN + "tamper(epoch=2.7); fit(epochs=6)"),
            trains=True,
        ),
        c(
            "I1 checkpoint epoch beyond epochs",
            "clear error",
            ("PATH", "epoch", "epochs=3"),
            _identity_py(_TRAIN + "tamper(epoch=99); fit()"),
            trains=True,
        ),
        c(
            "I1 checkpoint with NaN weights",
            "clear error",
            ("PATH", "model"),
            _identity_py(
                _TRAIN + "s = load_checkpoint(PATH); "
                "[t.fill_(float('nan')) for t in s['model'].values() "
                "if t.is_floating_point()]; tamper(model=s['model']); fit(epochs=6)"
            ),
            trains=True,
        ),
        c(
            "I1 checkpoint of another network shape",
            "clear error",
            ("PATH",),
            _identity_py(_TRAIN + "fit(hidden=5)"),
            trains=True,
        ),
        # --report-only on an incomplete run says so.
        c(
            "I2 --report-only on an interrupted run",
            "ok",
            ("incomplete: 1 of 2",),
            _report_only_incomplete,
            trains=True,
        ),
        # Messages name the user's input.
        c(
            "I3 checkpoint path under a regular file",
            "clear error",
            ("TMP/f/c.pt",),
            _identity_py(
                "import pathlib; pathlib.Path('f').touch(); "
                "from svbnn.checkpoint import save_checkpoint; "
                "save_checkpoint({'epoch': 1}, PATH.replace('c.pt', 'f/c.pt'))"
            ),
        ),
        c(
            "I3 checkpoint path under /proc",
            "clear error",
            ("/proc/svbnn/c.pt",),
            _identity_py(
                "from svbnn.checkpoint import save_checkpoint; "
                "save_checkpoint({'epoch': 1}, '/proc/svbnn/c.pt')"
            ),
        ),
        c(
            "I3 train(checkpoint_path=...) under a regular file",
            "clear error",
            ("TMP/f/c.pt",),
            _identity_py(
                "import pathlib; pathlib.Path('f').touch(); "
                + _TRAIN.replace("fit()\n", "").replace("PATH", "PATH.replace('c.pt', 'f/c.pt')")
                + "fit()"
            ),
            trains=True,
        ),
        c(
            "I3 dangling .svbnn.lock symlink",
            "clear error",
            ("TMP/o/.svbnn.lock", "remove"),
            _dangling_lock,
        ),
        c(
            "I3 --merge nope1 nope2",
            "clear error",
            ("nope1", "no run found"),
            _identity_refusal(
                [], ["reproduce", "table2", "--merge", "nope1", "nope2", "--out", "TMP/o"]
            ),
        ),
        c(
            "I3 --set n_test=1000000000000",
            "clear error",
            ("--set n_test", "1000000000000"),
            _identity_refusal([], [*_T2, "--out", "TMP/o", "--set", "n_test=1000000000000"]),
        ),
        c(
            "I3 --set hidden=[50,10000000]",
            "clear error",
            ("--set hidden", "10000000"),
            _identity_refusal([], [*_T2, "--out", "TMP/o", "--set", "hidden=[50,10000000]"]),
        ),
        c(
            "I3 --reps 10000000000",
            "clear error",
            ("--reps", "10000000000"),
            _identity_refusal([], [*_T2, "--out", "TMP/o", "--reps", "10000000000"]),
        ),
        c(
            "I1 --merge of parts run with other seeds",
            "clear error",
            ("TMP/p7", "--seed 7"),
            _identity_refusal(
                [
                    [*_T2, "--methods", "svbnn", "--out", "TMP/p0"],
                    [*_T2, "--methods", "vbnn", "--seed", "7", "--out", "TMP/p7"],
                ],
                ["reproduce", "table2", "--merge", "TMP/p0", "TMP/p7", "--out", "TMP/o"],
            ),
            trains=True,
        ),
        # A seed gives one answer.
        c(
            "I4 --jobs 1 and --jobs 2 give the same numbers",
            "ok",
            (),
            _jobs_one_answer,
            trains=True,
        ),
    ]
    if with_mnist:
        m = ["reproduce", "mnist", "--quick", "--no-progress", "--epochs", "2", "--out", "TMP/o"]
        out += [
            c(
                "I1 mnist --out of a run, again with --seed 7",
                "clear error",
                ("--seed 7",),
                _identity_refusal([m], [*m, "--seed", "7"]),
                trains=True,
            ),
            c(
                "I1 mnist --out of a run, again with --set n_train=256",
                "clear error",
                ("n_train=256",),
                _identity_refusal([m], [*m, "--set", "n_train=256"]),
                trains=True,
            ),
            c(
                "I1 mnist --out of a run, again with fewer --epochs",
                "clear error",
                ("--epochs 1",),
                _identity_refusal([m], [*m[:-4], "--epochs", "1", "--out", "TMP/o"]),
                trains=True,
            ),
        ]
    return out


def _as_case(case: IdentityCase) -> Case:
    def run(tmp: Path) -> str:
        outcome = case.run(tmp, case)
        if outcome in GOOD and outcome != case.expect:
            return "SILENT WRONG" if case.expect == "clear error" else "MISLEADING"
        return outcome

    return Case(case.name, run)


def cases(with_mnist: bool) -> list[Case]:
    """Every fault case, in report order; the MNIST ones only with ``with_mnist``."""
    out: list[Case] = [
        *_checkpoint_cases(),
        *_refit_cases(),
        *_estimator_cases(),
        *_loader_cases(),
        *_cli_cases(),
    ]
    out += _reliability_b_cases()
    if with_mnist:
        out += _mnist_cases()
    out += [_as_case(c) for c in run_identity_cases(with_mnist)]
    return out


def _uq_sibling(tmp: Path) -> str:
    _plant(tmp / "X" / "mnist" / "checkpoints" / "svbnn.pt")
    (tmp / "X" / "mnist" / "checkpoints" / "meta.json").write_text(
        json.dumps({"arch": "mlp", "hidden": [512, 512], "n_train": 512, "methods": {"svbnn": {}}})
    )
    res = _cli(
        ["reproduce", "mnist-uq", "--quick", "--no-progress", "--out", str(tmp / "X/uq")], tmp
    )
    if (tmp / "PWNED").exists() or (tmp / "X" / "mnist" / "checkpoints" / "PWNED").exists():
        return "CODE EXECUTION"
    if res.returncode != 0:
        return "TRACEBACK"
    origins = json.loads((tmp / "X" / "uq" / "settings.json").read_text())["models"]
    return "ok" if all(v["origin"] == "trained here" for v in origins.values()) else "SILENT WRONG"


def _startup_s() -> float:
    """Seconds to start an interpreter that imports svbnn, torch, the CLI and (for the
    ``--scheduler`` cases) Dask, if installed."""
    code = "import svbnn, svbnn.data, svbnn_experiments.cli\ntry:\n    import distributed\n"
    code += "except ImportError:\n    pass\n"
    with tempfile.TemporaryDirectory() as d:
        t0 = time.monotonic()
        _py(code, Path(d))
        return time.monotonic() - t0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="run the cases whose name contains this text")
    args = parser.parse_args(argv)
    with_mnist = bool(os.environ.get("SVBNN_DATA"))
    counts: Counter[str] = Counter()
    startup = _startup_s()
    print(f"(starting an interpreter and importing svbnn takes {startup:.1f} s here; not counted)")
    for case in cases(with_mnist):
        if args.only and args.only not in case.name:
            continue
        limit = (HANG_TRAIN_S if case.trains else HANG_S) + startup
        _LIMIT[0] = limit + 5.0  # a subprocess is killed a little after the limit
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory() as d:
            try:
                outcome = case.run(Path(d))
            except subprocess.TimeoutExpired:
                outcome = "HANG"
        elapsed = time.monotonic() - t0
        if elapsed > limit and outcome != "CODE EXECUTION":
            outcome = "HANG"
        outcome = _RENAMED.get(outcome, outcome)
        counts[outcome] += 1
        print(f"{outcome:17s} {elapsed:6.1f} s  {case.name}", flush=True)
    if not with_mnist:
        print("(the two MNIST checkpoint cases need SVBNN_DATA; not run)")
    classes = ["clear error", "ok", "SILENT WRONG", "RAW OR MISLEADING", "HANG", "DATA LOSS"]
    classes += ["CODE EXECUTION"]
    shown = {**{k: 0 for k in classes}, **counts}
    print("counts: " + ", ".join(f"{k}: {v}" for k, v in shown.items()))
    return 0 if set(counts) <= set(GOOD) else 1


# ------------------------------------------------------------------------------------------
# Issue 32, part B: deadlines and caps, statistics that cannot be silently wrong, sharing a
# model without sharing code. Each case declares its expected outcome and the user's own
# token, which a clear message must contain.
# ------------------------------------------------------------------------------------------

# Exception types that are a clear error when their message names the user's token.
_CLEAR_TYPES = (
    "ValueError",
    "TypeError",
    "CheckpointError",
    "EstimatorFileError",
    "NotFittedError",
    "DataNotFoundError",
    "DownloadError",
    "DataIntegrityError",
    "ChecksumError",
    "FileNotFoundError",
    "FileExistsError",
    "NotADirectoryError",
    "PermissionError",
    "IsADirectoryError",
    "OSError",
    "FloatingPointError",
)
# What an error message must not show instead of the user's input.
_MISLEADING = re.compile(
    r"\bNone\b|<class '|site-packages|/src/svbnn|\.tmp\b|\.part\b|Unable to allocate"
)


def _misleading(message: str, token: str) -> bool:
    """A message that lacks ``token`` or names an internal file, ``None`` or a type."""
    return token not in message or bool(_MISLEADING.search(message.replace(token, "")))


def _classify_token(
    res: subprocess.CompletedProcess[str], cwd: Path, expect: str, token: str
) -> str:
    """``expect``: 'error' (a clear exception naming ``token``), 'ok', or 'warn:TEXT'."""
    if (cwd / "PWNED").exists():
        return "CODE EXECUTION"
    err = res.stderr.strip()
    last = err.splitlines()[-1] if err else ""
    if expect == "error":
        if res.returncode == 0:
            return "SILENT WRONG"
        kind, _, message = last.partition(": ")
        if kind.rsplit(".", 1)[-1] in _CLEAR_TYPES and not _misleading(message, token):
            return "clear error"
        return "RAW OR MISLEADING"
    if res.returncode != 0:
        return "RAW OR MISLEADING"
    if expect.startswith("warn:") and (expect[5:] not in err or token not in err):
        return "SILENT WRONG"
    return "ok"


def _classify_cli_token(res: subprocess.CompletedProcess[str], cwd: Path, token: str) -> str:
    """A CLI user error: status 2 and one line on stderr that names ``token``."""
    if (cwd / "PWNED").exists():
        return "CODE EXECUTION"
    lines = res.stderr.strip().splitlines()
    if res.returncode == 0:
        return "SILENT WRONG"
    if res.returncode == 2 and len(lines) == 1 and not _misleading(lines[0], token):
        return "clear error"
    return "RAW OR MISLEADING"


def _token_case(name: str, code: str, expect: str, token: str) -> Case:
    """A library case: ``code`` run in a fresh interpreter (``PATH``: a file in the case's
    folder; ``TMP``: the folder). It trains if it calls ``fit`` or ``train``."""

    def run(tmp: Path) -> str:
        src = code.replace("PATH", repr(str(tmp / "m.svbnn"))).replace("TMP", repr(str(tmp)))
        res = _py(src, tmp)
        return _classify_token(res, tmp, expect, token.replace("TMP", str(tmp)))

    return Case(name, run, trains="fit(" in code or "train(" in code)


# A local HTTP server inside the case's interpreter: serve(kind) -> port. 'endless' streams
# zeros without end, 'trickle' sends a byte every 50 ms, 'silent' accepts and never answers.
_SERVE = """
import socket, threading, time
def _handle(conn, kind):
    with conn:
        try:
            conn.settimeout(60)
            if kind != 'silent':
                data = b''
                while b'\\r\\n\\r\\n' not in data:
                    chunk = conn.recv(4096)
                    if not chunk:
                        return
                    data += chunk
                conn.sendall(b'HTTP/1.0 200 OK\\r\\n\\r\\n')
            end = time.monotonic() + 60
            while time.monotonic() < end:
                if kind == 'endless':
                    conn.sendall(b'0' * 65536)
                elif kind == 'trickle':
                    conn.sendall(b'1'); time.sleep(0.05)
                else:
                    time.sleep(0.5)
        except OSError:
            pass
def serve(kind):
    s = socket.create_server(('127.0.0.1', 0))
    def loop():
        while True:
            c, _ = s.accept()
            threading.Thread(target=_handle, args=(c, kind), daemon=True).start()
    threading.Thread(target=loop, daemon=True).start()
    return s.getsockname()[1]
"""


class _Server:
    """A server thread on 127.0.0.1 for the CLI cases; stops by itself after ``life`` s.

    ``kind``: 'silent' accepts and never answers; 'proxy' answers what it receives with an
    HTTP error (as an HTTP proxy would); 'banner' speaks first, and not Dask.
    """

    def __init__(self, kind: str, life: float = 60.0) -> None:
        self.kind, self.end = kind, time.monotonic() + life
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        with self.sock:
            while time.monotonic() < self.end:
                try:
                    conn, _ = self.sock.accept()
                except TimeoutError:
                    continue
                threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.settimeout(max(self.end - time.monotonic(), 0.1))
                if self.kind == "banner":
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
                elif self.kind == "proxy" and conn.recv(4096):
                    conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                while time.monotonic() < self.end and conn.recv(4096):
                    pass
            except OSError:
                pass


def _scheduler_case(name: str, kind: str) -> Case:
    def run(tmp: Path) -> str:
        server = _Server(kind)
        address = f"tcp://127.0.0.1:{server.port}"
        args = ["reproduce", "table2", "--quick", "--no-progress", "--out", str(tmp / "o")]
        res = _cli([*args, "--scheduler", address], tmp)
        return _classify_cli_token(res, tmp, f"--scheduler {address}")

    return Case(name, run)


def _cli_warn_case(name: str, args: list[str], needles: list[str]) -> Case:
    """A valid run that must finish (status 0) and warn with every one of ``needles``."""

    def run(tmp: Path) -> str:
        res = _cli([a.replace("TMP", str(tmp)) for a in args], tmp)
        if (tmp / "PWNED").exists():
            return "CODE EXECUTION"
        if res.returncode != 0:
            return "RAW OR MISLEADING"
        return "ok" if all(n in res.stderr for n in needles) else "SILENT WRONG"

    return Case(name, run, trains=True)


_REG = (
    "import numpy as np, warnings; warnings.simplefilter('ignore');"
    "from svbnn import SVBNNRegressor, SVBNNClassifier, load_estimator;"
    "rng = np.random.default_rng(0); X = rng.normal(size=(60, 4)); y = X[:, 0];"
    "m = SVBNNRegressor(hidden_layer_sizes=(8,), max_iter=3, random_state=0).fit(X, y);"
    "m.save(PATH);"
)
_CRAFT = (
    "import io, os, hashlib, torch\n"
    "class E:\n"
    "    def __reduce__(self):\n"
    "        return (os.system, ('touch PWNED',))\n"
    "b = io.BytesIO(); torch.save({'format': 'svbnn-estimator', 'version': 1, 'meta': E()}, b)\n"
    "p = b.getvalue(); d = hashlib.sha256(p).hexdigest().encode()\n"
    "open(PATH, 'wb').write(b'SVBNN-ESTIMATOR 1\\n' + d + b'\\n' + p)\n"
)
_DIVERGING_TRAIN = (
    "import torch, warnings; warnings.simplefilter('always');"
    "from svbnn.nn import SpikeSlabMLP; from svbnn.objectives import GaussianLikelihood;"
    "from svbnn.training import train; g = torch.Generator().manual_seed(0);"
    "X = torch.randn(200, 4, generator=g); y = X[:, 0];"
    "train(SpikeSlabMLP(4, (50,), 1, generator=torch.Generator().manual_seed(1)), X, y,"
    " GaussianLikelihood(0.5, learn_noise=True), epochs=10, batch_size=128, lr=0.2,"
    " optimizer='sgd', generator=torch.Generator().manual_seed(0))"
)


def _reliability_b_cases() -> list[Case]:
    """Issue 32, items 2, 4 and 6: nothing waits forever, statistics that cannot be silently
    wrong, a shared model runs no code."""
    big = "f = open(TMP + '/mnist.npz', 'wb'); f.truncate(100 * 2**30); f.close();"
    return [
        # 2. deadlines and caps
        _token_case(
            "32B download from a server that streams without end",
            _SERVE + "from svbnn.data import load_uci; port = serve('endless');"
            "load_uci('yacht', 0, TMP, download=True, base_url=f'http://127.0.0.1:{port}',"
            " timeout=5)",
            "error",
            "http://127.0.0.1:",
        ),
        _token_case(
            "32B download from a server that trickles a byte per 50 ms",
            _SERVE + "from svbnn.data import load_uci; port = serve('trickle');"
            "load_uci('yacht', 0, TMP, download=True, base_url=f'http://127.0.0.1:{port}',"
            " timeout=2)",
            "error",
            "timeout",
        ),
        _token_case(
            "32B download from a server that accepts and never answers",
            _SERVE + "from svbnn.data import load_mnist; port = serve('silent');"
            "load_mnist(TMP, download=True, base_url=f'http://127.0.0.1:{port}', timeout=2)",
            "error",
            "http://127.0.0.1:",
        ),
        _token_case(
            "32B a 100 GiB mnist.npz in the data folder (size before hash)",
            big + "from svbnn.data import load_mnist; load_mnist(TMP)",
            "error",
            "TMP/mnist.npz",
        ),
        _token_case(
            "32B a 100 GiB index file in the data folder (size before parse)",
            "import os; os.makedirs(TMP + '/uci/yacht'); open(TMP + '/uci/yacht/data.txt',"
            " 'w').write('1 2\\n3 4\\n'); f = open(TMP + '/uci/yacht/n_splits.txt', 'wb');"
            " f.truncate(100 * 2**30); f.close(); from svbnn.data import load_uci;"
            " load_uci('yacht', 0, TMP, verify=False)",
            "error",
            "n_splits.txt",
        ),
        _scheduler_case("32B --scheduler that accepts and never answers", "silent"),
        _scheduler_case("32B --scheduler where an HTTP proxy answers", "proxy"),
        _scheduler_case("32B --scheduler where another service speaks first", "banner"),
        # 4. statistics that cannot be silently wrong
        _token_case(
            "32B SVBNNRegressor(prior_variance=1e-300)",
            _FIT + "SVBNNRegressor(prior_variance=1e-300, max_iter=2).fit(X, y)",
            "error",
            "prior_variance",
        ),
        _token_case(
            "32B SVBNNClassifier(prior_variance=1e31)",
            _FIT + "SVBNNClassifier(prior_variance=1e31, max_iter=2).fit(X, y > 0)",
            "error",
            "prior_variance",
        ),
        _token_case(
            "32B VBNNRegressor(prior_variance=1e-40)",
            _FIT + "from svbnn import VBNNRegressor;"
            "VBNNRegressor(prior_variance=1e-40, max_iter=2).fit(X, y)",
            "error",
            "prior_variance",
        ),
        *(
            _token_case(
                f"32B SVBNNRegressor({setting})",
                _FIT + f"SVBNNRegressor({setting}, max_iter=2).fit(X, y)",
                "error",
                setting.split("=")[0],
            )
            for setting in (
                "temperature=1e-300",
                "noise_std=1e-300",
                "kl_weight=1e300",
                "log_prior_inclusion=-1e300",
            )
        ),
        _token_case(
            "32B GaussianLikelihood(noise_std=1e-30)",
            "from svbnn.objectives import GaussianLikelihood; GaussianLikelihood(1e-30)",
            "error",
            "noise_std",
        ),
        _token_case(
            "32B SpikeSlabMLP(prior_variance=1e-300)",
            "from svbnn.nn import SpikeSlabMLP; SpikeSlabMLP(3, (4,), 1, prior_variance=1e-300)",
            "error",
            "prior_variance",
        ),
        _token_case(
            "32B train with SGD at a diverging learning rate warns by name",
            _DIVERGING_TRAIN,
            "warn:DivergenceWarning",
            "lr=0.2",
        ),
        _token_case(
            "32B SVBNNRegressor(optimizer='sgd', learning_rate_init=0.3) warns",
            _FIT + "warnings.simplefilter('always');"
            "SVBNNRegressor(optimizer='sgd', learning_rate_init=0.3, max_iter=50,"
            " random_state=0).fit(np.r_[X, X, X, X], np.r_[y, y, y, y])",
            "warn:the fit diverged",
            "DivergenceWarning",
        ),
        _cli_warn_case(
            "32B reproduce table2 --quick --set lr=3 names the diverged replication",
            ["reproduce", "table2", "--quick", "--no-progress", "--set", "lr=3", "--out", "TMP/o"],
            ["DivergenceWarning: svbnn on sim2", "rep 0 (R^2", "lr=3.0"],
        ),
        # 6. sharing a model without sharing code
        _token_case(
            "32B est.save / Cls.load predicts bit for bit",
            _REG + "r = SVBNNRegressor.load(PATH);"
            "assert (r.predict(X) == m.predict(X)).all();"
            "assert all((a == b).all() for a, b in zip(r.predict_interval(X),"
            " m.predict_interval(X)))",
            "ok",
            "",
        ),
        _token_case(
            "32B load_estimator on a crafted pickle behind a valid header",
            _CRAFT + "from svbnn import load_estimator; load_estimator(PATH)",
            "error",
            "TMP/m.svbnn",
        ),
        _token_case(
            "32B SVBNNRegressor.load on a pickled estimator",
            _FIT + "import pickle; m = SVBNNRegressor(max_iter=2).fit(X, y);"
            "open(PATH, 'wb').write(pickle.dumps(m)); SVBNNRegressor.load(PATH)",
            "error",
            "TMP/m.svbnn",
        ),
        _token_case(
            "32B SVBNNClassifier.load on a regressor's file",
            _REG + "SVBNNClassifier.load(PATH)",
            "error",
            "TMP/m.svbnn",
        ),
        _token_case(
            "32B load_estimator on a truncated file",
            _REG + "b = open(PATH, 'rb').read(); open(PATH, 'wb').write(b[: len(b) // 2]);"
            "load_estimator(PATH)",
            "error",
            "TMP/m.svbnn",
        ),
        _token_case(
            "32B load_estimator on a missing file",
            "from svbnn import load_estimator; load_estimator(TMP + '/nope.svbnn')",
            "error",
            "TMP/nope.svbnn",
        ),
        _token_case(
            "32B est.save under a regular file",
            _REG.replace("m.save(PATH);", "")
            + "open(TMP + '/f', 'w').close(); m.save(TMP + '/f/m.svbnn')",
            "error",
            "TMP/f/m.svbnn",
        ),
        _token_case(
            "32B est.save of an unfitted estimator",
            _FIT + "SVBNNRegressor().save(PATH)",
            "error",
            "SVBNNRegressor",
        ),
    ]


if __name__ == "__main__":
    raise SystemExit(main())
