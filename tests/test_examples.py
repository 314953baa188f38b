"""Smoke tests of examples/: each script runs with its quick settings and says what it found."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

# script -> lines its output must contain (regular expressions)
EXPECTED = {
    "fit_your_data.py": [
        r"regression: test RMSE \d+\.\d+",
        r"regression: 95% prediction intervals cover \d+% of test responses",
        r"regression: selected inputs \[[\d, ]*\]",
        r"classification: test accuracy 0\.9\d\d",
    ],
    "custom_model.py": [
        r"own loop: KL/n \d+\.\d+, sum\(phi\)/T 0\.\d+",
        r"own loop: test RMSE vs f0: posterior mean f_H \d+\.\d+",
        r"train\(\): same parameters as the hand-written loop: True",
    ],
    "variable_selection.py": [
        r"selected inputs \(0-based\): \[[\d, ]+\]; relevant: \[0, 1, 2, 3, 4\]",
        r"FPR \d+\.\d% +FNR \d+\.\d%",
        r"export_sparse: \d+ of 477 parameters kept",
    ],
    "poisson_counts.py": [
        r"test D\^2: SVBNN 0\.[5-9]\d\d, PoissonRegressor 0\.\d+, true rates 0\.\d+",
        r"90% prediction intervals cover 9\d\.\d% of test counts",
        r"selected inputs \[0, 1, 2\] \(relevant: \[0, 1, 2\]\)",
    ],
    "intervals.py": [
        r"95% +credible +\d+\.\d+ +\d+\.\d%",
        r"95% +prediction +\d+\.\d+ +\d+\.\d%",
    ],
}


def test_every_example_is_tested() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(EXPECTED)


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_example_runs(script: str) -> None:
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p
    )
    proc = subprocess.run(
        [sys.executable, str(EXAMPLES / script), "--quick", "--seed", "0"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for pattern in EXPECTED[script]:
        assert re.search(pattern, proc.stdout), f"{pattern!r} not in output:\n{proc.stdout}"
