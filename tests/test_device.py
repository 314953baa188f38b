"""Device settings without a GPU: one-line errors that name the setting, the guard that
fails ``make test-gpu`` without CUDA, and device bugs that show on the CPU too.

The CUDA availability is patched, so these run (and can fail) on any machine, with or
without a GPU; ``tests/test_gpu.py`` holds the checks that need one.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from svbnn import SVBNNClassifier, SVBNNRegressor, VBNNRegressor
from svbnn._device import check_device, cuda_unavailable_reason
from svbnn.nn import SpikeSlabMLP
from svbnn.objectives import GaussianLikelihood
from svbnn.selection import SparseLinear
from svbnn.training import train
from svbnn_experiments import get_artifact, resolve_config
from svbnn_experiments.classifier_runs import classifier_spec
from svbnn_experiments.cli import main
from svbnn_experiments.simulations import build_fit_spec, build_problem
from tests.gpu_guard import gpu_guard_message

ROOT = Path(__file__).resolve().parents[1]
GPU_TESTS = "tests/test_gpu.py"  # the guard is the same for the whole suite; this is faster


def _cuda(monkeypatch: pytest.MonkeyPatch, built: bool, available: bool, count: int = 0) -> None:
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: built)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: available)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


@pytest.mark.parametrize(
    ("built", "available", "count", "value", "reason"),
    [
        (False, False, 0, "cuda", "CUDA is not available in this PyTorch build"),
        (False, False, 0, "cuda:0", "CUDA is not available in this PyTorch build"),
        (True, False, 0, "cuda", "no CUDA device is visible"),
        (True, True, 1, "cuda:7", "only 1 CUDA device(s) are visible"),
        (True, True, 2, "cuda:2", "only 2 CUDA device(s) are visible"),
    ],
)
def test_cuda_that_is_not_there_is_one_line_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
    built: bool,
    available: bool,
    count: int,
    value: str,
    reason: str,
) -> None:
    _cuda(monkeypatch, built, available, count)
    with pytest.raises(ValueError) as err:
        check_device(value)
    msg = str(err.value)
    assert msg.startswith(f"device='{value}': ") and reason in msg and "\n" not in msg
    assert msg.endswith("use device='cpu'")
    with pytest.raises(ValueError, match=r"^--device='cuda"):
        check_device(torch.device(value), "--device")


def test_cuda_that_is_there_is_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    _cuda(monkeypatch, True, True, 2)
    assert check_device("cuda:1") == torch.device("cuda", 1)
    assert cuda_unavailable_reason(1) is None and cuda_unavailable_reason() is None


@pytest.mark.parametrize("value", ["gpu", "", "cuda:x", "cuda:-1", None, 3.5, "meta", "xla"])
def test_a_device_that_is_no_device_names_the_choices(value: Any) -> None:
    with pytest.raises(ValueError, match=r"^device must be 'cpu', 'cuda', 'cuda:N' or 'mps'"):
        check_device(value)


def test_mps_without_mps(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"^device='mps': MPS is not available"):
        check_device("mps")


@pytest.mark.parametrize("value", ["cpu", "cpu:0", torch.device("cpu")])
def test_the_cpu_in_any_spelling(value: Any) -> None:
    assert check_device(value).type == "cpu"


@pytest.mark.parametrize("cls", [SVBNNRegressor, SVBNNClassifier, VBNNRegressor])
@pytest.mark.parametrize("value", ["cuda", "cuda:7"])
def test_estimators_refuse_a_missing_gpu_before_fitting(
    monkeypatch: pytest.MonkeyPatch, cls: type, value: str
) -> None:
    _cuda(monkeypatch, False, False)
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(20, 3)), np.arange(20) % 2
    est = cls(device=value, max_iter=1)
    with pytest.raises(ValueError) as err:
        est.fit(X, y)
    msg = str(err.value)
    assert msg.startswith(f"device='{value}'") and "\n" not in msg
    assert not hasattr(est, "module_")


def test_training_refuses_mixed_devices() -> None:
    # Parameters on "meta" stand in for a GPU model fed CPU data (no GPU needed).
    X, y = torch.randn(16, 3), torch.randn(16)
    model = SpikeSlabMLP(3, (4,), 1, device="meta")
    with pytest.raises(ValueError, match=r"parameters are on meta but X on cpu"):
        train(model, X, y, GaussianLikelihood(), epochs=1, batch_size=8, lr=0.01)
    with pytest.raises(ValueError, match=r"X is on cpu but y on meta"):
        train(
            SpikeSlabMLP(3, (4,), 1),
            X,
            y.to("meta"),
            GaussianLikelihood(),
            epochs=1,
            batch_size=8,
            lr=0.01,
        )


def test_sparse_linear_follows_its_module_to_a_new_dtype() -> None:
    # The CSR matrix is cached at the first forward; .to()/.double() must not keep the old
    # one (it stayed float32 here, and on the old device after .to("cuda")/.cpu()).
    layer = SparseLinear(torch.tensor([[1.0, 0.0, 2.0], [0.0, -1.0, 0.0]]), torch.ones(2))
    x = torch.tensor([[1.0, 2.0, 3.0]])
    torch.testing.assert_close(layer(x), torch.tensor([[8.0, -1.0]]))
    out = layer.double()(x.double())
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, torch.tensor([[8.0, -1.0]], dtype=torch.float64))


# ------------------------------------------------------------------------------ harness
def test_reproduce_with_a_missing_gpu_is_one_line_status_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    _cuda(monkeypatch, False, False)
    out = tmp_path / "t2"
    code = main(["reproduce", "table2", "--quick", "--device", "cuda", "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("svbnn: error: --device='cuda': CUDA is not available")
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize(
    ("value", "needle"),
    [("gpu", "--device must be"), ("mps", "--device"), ("cuda:9", "--device='cuda:9'")],
)
def test_reproduce_refuses_other_devices(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    value: str,
    needle: str,
) -> None:
    _cuda(monkeypatch, True, True, 1)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    code = main(["reproduce", "table2", "--quick", "--device", value, "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and needle in err[0], err


def test_device_does_not_apply_to_artifacts_without_it(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["reproduce", "fig-linear-toy", "--quick", "--device", "cpu"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--device does not apply to fig-linear-toy" in err
    assert all(name in err for name in ("table2", "mnist", "fmnist-cnn", "mnist-uq", "uci"))


def test_the_device_reaches_the_fit_spec() -> None:
    cfg = resolve_config(get_artifact("table2"), {"device": "cpu:0"}, quick=True)
    assert cfg.device == "cpu:0" and cfg.as_dict()["device"] == "cpu:0"
    assert build_fit_spec(cfg, build_problem(cfg, "sim2")).device == "cpu:0"
    assert resolve_config(get_artifact("table2"), quick=True).device == "cpu"


@pytest.mark.parametrize(("artifact", "arch"), [("mnist", "mlp"), ("fmnist-cnn", "cnn")])
def test_the_device_reaches_the_classifier_spec(artifact: str, arch: str) -> None:
    cfg = resolve_config(get_artifact(artifact), {"device": "cpu:0"}, quick=True)
    assert classifier_spec(cfg, "svbnn", arch).device == "cpu:0"
    default = resolve_config(get_artifact(artifact), quick=True)
    assert classifier_spec(default, "svbnn", arch).device == "cpu"


# -------------------------------------------------------------------------- the guard
def test_the_gpu_guard_message() -> None:
    assert gpu_guard_message(0, "no GPU") is None
    assert gpu_guard_message(3, None) is None
    msg = gpu_guard_message(3, "CUDA is not available in this PyTorch build")
    assert msg is not None and "\n" not in msg
    assert msg.startswith("3 GPU test(s) selected") and "never skipped" in msg
    assert "CUDA is not available in this PyTorch build" in msg


def test_selecting_the_gpu_tests_without_cuda_fails(tmp_path: Path) -> None:
    # `make test-gpu` is `pytest -m gpu`: on a machine without a usable GPU (here: CUDA
    # hidden from the child) it must fail, saying why, and run nothing.
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "gpu", GPU_TESTS],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    assert "GPU test(s) selected" in text and "never skipped" in text, text[-2000:]
    assert not re.search(r"\d+ (passed|skipped)", text), text[-2000:]
