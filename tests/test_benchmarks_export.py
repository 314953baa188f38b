"""Smoke test of ``python -m benchmarks.export_latency``: it runs on a small trained-like
checkpoint and writes its report. No timing assertions (the machine is not under test)."""

from __future__ import annotations

import csv
import json
import warnings
from pathlib import Path

import pytest
import torch

import benchmarks.export_latency as bench
from svbnn.checkpoint import save_checkpoint
from svbnn.nn import SpikeSlabMLP


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_export_latency_writes_rows_and_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    g = torch.Generator().manual_seed(0)
    model = SpikeSlabMLP(784, (512, 512), 10, generator=g)
    for layer in model.layers():
        keep = torch.rand(layer.alpha.shape, generator=g) < 0.05
        with torch.no_grad():
            layer.alpha.copy_(torch.where(keep, 4.0, -4.0))
    ckpt = tmp_path / "svbnn.pt"
    save_checkpoint({"model": model.state_dict(), "epoch": 1}, ckpt)

    class _Data:  # 20 test images instead of the MNIST file
        def to_tensors(self, *a: object, **k: object) -> tuple[torch.Tensor, ...]:
            x = torch.randn(20, 784, generator=g)
            y = torch.randint(0, 10, (20,), generator=g)
            return x, y, x, y

    import svbnn.data

    monkeypatch.setattr(svbnn.data, "load_mnist", lambda *a, **k: _Data())
    out = tmp_path / "out"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        bench.main(["--mnist", f"toy={ckpt}", "--rounds", "2", "--out", str(out)])
    rows = list(csv.DictReader(open(out / "results.csv")))
    got = {(r["runtime"], int(r["batch"])) for r in rows}
    assert got == {(rt, b) for rt in ("pytorch", "onnxruntime") for b in bench.BATCHES}
    for r in rows:
        assert float(r["dense_ms"]) > 0 and float(r["export_ms"]) > 0
    info = json.loads((out / "settings.json").read_text())["mnist"][0]
    assert info["argmax_equal_rows"] == info["test_rows"] == 20
    assert info["export_macs"] < info["dense_macs"]
    assert "## MNIST `toy`" in (out / "report.md").read_text()


def test_agreement_over_seeds_writes_a_row_per_fit(tmp_path: Path) -> None:
    out = tmp_path / "out"
    bench.main(["--agreement-seeds", "2", "--quick", "--out", str(out)])
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [(r["network"], r["seed"]) for r in rows] == [
        (n, s) for n in ("digits", "breast_cancer") for s in ("0", "1")
    ]
    for r in rows:
        for key in (
            "class_agreement",
            "class_agreement_1000_draws",
            "predict_vs_1000_draws",
            "mean_network_vs_predict",
            "mean_network_vs_1000_draws",
        ):
            assert 0.0 <= float(r[key]) <= 1.0
    assert {r["test_rows"] for r in rows} == {"450", "143"}
    report = (out / "report.md").read_text()
    assert "median = predict_proba on" in report
    assert "The mean network (`phi * mu` on every edge, dense) = predict_proba on" in report
