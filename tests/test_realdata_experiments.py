"""Real-data artifacts (uci, mnist, mnist-uq, fmnist-cnn) on small generated data files.

The data files are written into ``tmp_path`` in the formats the loaders read (``mnist.npz``,
``fashion_mnist.npz``, ``uci/<name>/...``) and registered by hash, as
``tests/test_data_loaders.py`` does; ``SVBNN_DATA`` points at them.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import svbnn_experiments.classifiers as mnist_mod
import svbnn_experiments.uci  # noqa: F401  (registers the uci artifact)
from svbnn.checkpoint import load_checkpoint
from svbnn.data import CHECKSUMS, clear_checksum_cache
from svbnn_experiments import get_artifact, resolve_config
from svbnn_experiments.cli import main
from svbnn_experiments.files import write_settings
from svbnn_experiments.mnist_uq import overlay_images
from svbnn_experiments.realdata import EpochBook, check_real_methods, parse_floats, parse_names
from tests.realdata_files import UCI_ROWS, UCI_SPLITS, UCI_TEST, make_data_root, sha, write_uci

torch.set_num_threads(1)


@pytest.fixture
def data_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data folder with tiny MNIST, Fashion-MNIST and two UCI sets, registered by hash."""
    return make_data_root(tmp_path / "data", monkeypatch)


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _run(name: str, out: Path, *args: str) -> None:
    assert main(["reproduce", name, "--out", str(out), "--no-progress", *args]) == 0


def _run_methods(
    name: str, out: Path, methods: tuple[str, ...], epochs: int, **params: Any
) -> None:
    """Run an artifact with baselines (the harness's method check does not know them yet)."""
    art = get_artifact(name)
    over: dict[str, Any] = {"progress": False, "epochs": epochs}
    if params:
        over["params"] = params
    cfg = dataclasses.replace(resolve_config(art, over, quick=True, out=out), methods=methods)
    cfg.out.mkdir(parents=True, exist_ok=True)
    extra = art.run(cfg)
    write_settings(cfg.out, {"artifact": name, "config": cfg.as_dict(), **extra})
    art.report(cfg.out)


# ---------------------------------------------------------------------------------- UCI
def test_uci_quick_writes_table_and_rebuilds(data_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "uci"
    _run("uci", out, "--quick", "--set", "datasets=wine,power")
    rows = _rows(out / "results.csv")
    assert len(rows) == 2 * UCI_SPLITS
    assert {r["dataset"] for r in rows} == {"wine-quality-red", "power-plant"}
    for r in rows:
        for col in ("test_rmse", "test_ll", "sparsity_pct", "density_pct", "sigma_eps"):
            assert math.isfinite(float(r[col])), col
        assert 0.0 < float(r["sparsity_pct"]) <= 100.0
        assert int(r["n_test"]) == UCI_TEST and int(r["n_train"]) == UCI_ROWS - UCI_TEST
    grid = _rows(out / "grid.csv")
    assert len(grid) == 2 * UCI_SPLITS * 2  # quick grid has 2 values
    # One chosen value per split, the one with the lowest validation RMSE.
    for ds in ("wine-quality-red", "power-plant"):
        for s in range(UCI_SPLITS):
            g = [r for r in grid if r["dataset"] == ds and int(r["split"]) == s]
            best = min(g, key=lambda r: float(r["val_rmse_std"]))
            assert [int(r["chosen"]) for r in g].count(1) == 1 and best["chosen"] == "1"
            row = next(r for r in rows if r["dataset"] == ds and int(r["split"]) == s)
            assert float(row["sigma_eps"]) == float(best["sigma_eps"])
    text = (out / "report.md").read_text()
    assert "0.62 ± 0.04" in text and "4.01 ± 0.18" in text  # the paper's SVBNN RMSE
    assert (out / "uci_validation.png").stat().st_size > 0
    (out / "report.md").unlink()
    (out / "uci_validation.png").unlink()
    _run("uci", out, "--report-only")
    assert (out / "report.md").read_text().startswith("# ")
    assert (out / "uci_validation.png").exists()


def test_uci_rmse_is_in_original_units(
    data_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rescaling the target rescales the reported RMSE and nothing else (standardisation)."""
    _run("uci", tmp_path / "a", "--quick", "--set", "datasets=wine", "--set", "noise_grid=0.5")
    folder = data_root / "uci" / "wine-quality-red"
    write_uci(folder, p=11, seed=2, scale=1000.0, shift=5.0)
    monkeypatch.setitem(CHECKSUMS, "uci/wine-quality-red/data.txt", (sha(folder / "data.txt"),))
    clear_checksum_cache()
    _run("uci", tmp_path / "b", "--quick", "--set", "datasets=wine", "--set", "noise_grid=0.5")
    a, b = _rows(tmp_path / "a" / "results.csv"), _rows(tmp_path / "b" / "results.csv")
    for ra, rb in zip(a, b, strict=True):
        assert float(rb["test_rmse"]) == pytest.approx(1000.0 * float(ra["test_rmse"]), rel=1e-3)
        assert float(rb["test_rmse_std"]) == pytest.approx(float(ra["test_rmse_std"]), rel=1e-3)
        assert float(rb["sparsity_pct"]) == pytest.approx(float(ra["sparsity_pct"]), rel=1e-4)
        # The log density of a 1000 times larger target is log(1000) lower.
        assert float(rb["test_ll"]) == pytest.approx(
            float(ra["test_ll"]) - math.log(1000.0), abs=1e-3
        )


def test_uci_learned_noise_moves_from_its_start_per_split(data_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "uci"
    start = 1.0
    over = ("--set", "datasets=wine", "--set", f"noise_grid={start},0.3", "--epochs", "400")
    _run("uci", out, "--quick", *over, "--set", "learn_noise=True")
    rows = _rows(out / "results.csv")
    assert len(rows) == UCI_SPLITS and not (out / "grid.csv").exists()  # no grid search
    sigmas = [float(r["sigma_eps"]) for r in rows]
    # The generated target is sin(x1) + N(0, 0.1^2): the standardised residual sd is far
    # below the start of 1, and each split learns its own value (400 Adam steps of 1e-3
    # move log sigma by at most 0.4).
    assert all(0.0 < s < 0.9 * start for s in sigmas) and len(set(sigmas)) == UCI_SPLITS
    assert {r["noise"] for r in rows} == {"learned"}
    assert "(learned)" in (out / "report.md").read_text()


def test_uci_rejects_bad_settings(data_root: Path, tmp_path: Path) -> None:
    assert main(["reproduce", "uci", "--quick", "--out", str(tmp_path), "--set", "datasets=year"])
    assert main(["reproduce", "uci", "--quick", "--out", str(tmp_path), "--set", "datasets=foo"])


# -------------------------------------------------------------------------------- MNIST
def test_mnist_quick_all_methods(data_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "mnist"
    _run_methods("mnist", out, ("svbnn", "vbnn", "vd", "agp"), epochs=2)
    rows = _rows(out / "results.csv")
    assert [(r["method"], int(r["epoch"])) for r in rows] == [
        (m, e) for m in ("svbnn", "vbnn", "vd", "agp") for e in (1, 2)
    ]
    for r in rows:
        assert 0.0 <= float(r["test_acc"]) <= 100.0
        assert math.isfinite(float(r["test_nll"])) and math.isfinite(float(r["train_loss"]))
    last = {r["method"]: r for r in rows if r["epoch"] == "2"}
    assert float(last["agp"]["sparsity_pct"]) == pytest.approx(5.0, abs=0.01)
    assert float(last["vbnn"]["sparsity_pct"]) == 100.0
    assert 0.0 < float(last["svbnn"]["sparsity_pct"]) < 100.0
    for m in ("svbnn", "vbnn", "vd", "agp"):
        assert (out / "checkpoints" / f"{m}.pt").is_file()
    assert (out / "accuracy_by_epoch.png").stat().st_size > 0
    text = (out / "report.md").read_text()
    assert "5.06" in text and "2.28" in text  # the paper's final sparsities

    # mnist-uq reuses these checkpoints when the folder is named.
    uq = tmp_path / "mnist-uq"
    _run("mnist-uq", uq, "--quick", "--set", f"source={tmp_path / 'mnist'}")
    settings = json.loads((uq / "settings.json").read_text())
    assert {m: v["origin"] for m, v in settings["models"].items()} == {
        "svbnn": "reused",
        "agp": "reused",
    }
    assert not (uq / "checkpoints").exists()
    _check_uq(uq)


def _check_uq(folder: Path) -> None:
    rows = _rows(folder / "results.csv")
    assert [(r["pair"], r["method"]) for r in rows] == [
        (p, m) for p in ("5+6", "2+3", "2+7") for m in ("svbnn", "agp")
    ]
    for r in rows:
        probs = np.array([float(r[f"p{c}"]) for c in range(10)])
        assert probs.min() >= 0.0 and probs.sum() == pytest.approx(1.0, abs=1e-5)
    assert (folder / "mnist_uq.png").stat().st_size > 0
    with np.load(folder / "overlays.npz") as z:
        np.testing.assert_allclose(z["overlay"], (z["first"] / 2.0) + (z["second"] / 2.0))


def test_mnist_uq_trains_without_checkpoint(data_root: Path, tmp_path: Path) -> None:
    """Without --set source, nothing is loaded, not even a sibling mnist run's checkpoints."""
    _run("mnist", tmp_path / "mnist", "--quick", "--methods", "svbnn,agp")
    out = tmp_path / "uq"
    _run("mnist-uq", out, "--quick")
    settings = json.loads((out / "settings.json").read_text())
    assert {v["origin"] for v in settings["models"].values()} == {"trained here"}
    assert (out / "checkpoints" / "svbnn.pt").is_file() and (out / "training.csv").is_file()
    _check_uq(out)
    # A named folder without an mnist run is an error, not a silent retraining.
    missing = tmp_path / "nothing"
    assert (
        main(
            [
                "reproduce",
                "mnist-uq",
                "--out",
                str(tmp_path / "uq2"),
                "--quick",
                "--no-progress",
                "--set",
                f"source={missing}",
            ]
        )
        == 2
    )


def test_mnist_resume_continues_bit_for_bit(data_root: Path, tmp_path: Path) -> None:
    """Stopping after epoch 1 and rerunning with --epochs 2 gives the 2-epoch run."""
    _run("mnist", tmp_path / "once", "--quick", "--epochs", "2")
    _run("mnist", tmp_path / "twice", "--quick", "--epochs", "1")
    first = _rows(tmp_path / "twice" / "results.csv")
    assert [int(r["epoch"]) for r in first] == [1]
    _run("mnist", tmp_path / "twice", "--quick", "--epochs", "2")
    once = _rows(tmp_path / "once" / "results.csv")
    twice = _rows(tmp_path / "twice" / "results.csv")
    assert [int(r["epoch"]) for r in twice] == [1, 2]
    for a, b in zip(once, twice, strict=True):
        for col in ("test_acc", "test_nll", "sparsity_pct", "train_loss", "kl_per_datum"):
            assert a[col] == b[col], col
    settings = json.loads((tmp_path / "twice" / "settings.json").read_text())
    assert settings["runs"]["svbnn"]["resumed_from"] == 1
    a = load_checkpoint(tmp_path / "once" / "checkpoints" / "svbnn.pt")
    b = load_checkpoint(tmp_path / "twice" / "checkpoints" / "svbnn.pt")
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key


def test_agp_resume_and_stale_rows(data_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "agp"
    _run_methods("mnist", out, ("agp",), epochs=1)
    book = EpochBook(out / "results.csv")
    # A row written for an epoch whose checkpoint never landed must be dropped on resume.
    book.add({**book.rows[0], "epoch": 2, "test_acc": -1.0})
    book.save()
    _run_methods("mnist", out, ("agp",), epochs=3)
    rows = _rows(out / "results.csv")
    assert [int(r["epoch"]) for r in rows] == [1, 2, 3]
    assert all(float(r["test_acc"]) >= 0 for r in rows)
    settings = json.loads((out / "settings.json").read_text())
    assert settings["runs"]["agp"]["resumed_from"] == 1
    state = load_checkpoint(out / "checkpoints" / "agp.pt")
    assert state["epoch"] == 3


def test_fmnist_cnn_quick(data_root: Path, tmp_path: Path) -> None:
    out = tmp_path / "fmnist"
    _run_methods("fmnist-cnn", out, ("svbnn", "vbnn"), epochs=1)
    rows = _rows(out / "results.csv")
    assert [r["method"] for r in rows] == ["svbnn", "vbnn"]
    assert (out / "fmnist_accuracy.png").stat().st_size > 0
    assert "64 x 8 x 8 = 4096" in (out / "report.md").read_text()
    # Reruns with the checkpoints in place do no training and keep the rows.
    _run_methods("fmnist-cnn", out, ("svbnn", "vbnn"), epochs=1)
    assert _rows(out / "results.csv") == rows


# ------------------------------------------------------------------------------- pieces
def test_cnn_sizes_and_flip() -> None:
    assert mnist_mod.cnn_feature_size(28) == 8
    spec = mnist_mod.ClassifierSpec(
        method="svbnn",
        arch="cnn",
        hidden=(16,),
        epochs=1,
        batch_size=8,
        lr=1e-3,
        optimizer="adam",
        flip=True,
    )
    model, info = mnist_mod.build_classifier(spec, 100, torch.Generator().manual_seed(0))
    assert model(torch.zeros(3, 1, 28, 28)).shape == (3, 10)
    assert info["log_lambda"] < 0
    flip = mnist_mod.RandomHorizontalFlip()
    flip.generator = torch.Generator().manual_seed(0)
    x = torch.arange(16, dtype=torch.float32).reshape(1, 1, 4, 4).repeat(1000, 1, 1, 1)
    y = flip(x)
    flipped = (y == x.flip(-1)).flatten(1).all(1)
    assert bool(((y == x).flatten(1).all(1) | flipped).all())
    # Binomial(1000, 1/2): 5 sd either side.
    assert abs(int(flipped.sum()) - 500) < 5 * math.sqrt(250)
    flip.eval()
    assert torch.equal(flip(x), x)


def test_overlay_images() -> None:
    imgs = np.stack([np.full((28, 28), v, dtype=np.uint8) for v in (10, 20, 30, 40)])
    labels = np.array([2, 3, 7, 2])
    out, idx = overlay_images(imgs, labels, ((2, 3), (7, 2)))
    assert idx == [(0, 1), (2, 0)]
    np.testing.assert_array_equal(out[:, 0, 0], [15.0, 20.0])
    with pytest.raises(ValueError, match="too few"):
        overlay_images(imgs, labels, ((5, 6),))


def test_setting_parsers() -> None:
    assert parse_names("a, b,,c") == ("a", "b", "c")
    assert parse_floats("0.1,1") == (0.1, 1.0) and parse_floats(0.5) == (0.5,)
    with pytest.raises(ValueError):
        parse_floats("0.1,-1")
    assert check_real_methods(["svbnn", "agp", "svbnn"], ("svbnn", "agp"), "x") == ("svbnn", "agp")
    with pytest.raises(ValueError, match="runs the methods"):
        check_real_methods(["lot"], ("svbnn",), "x")


def test_mnist_compare_puts_variants_side_by_side(data_root: Path, tmp_path: Path) -> None:
    from svbnn_experiments.mnist_compare import main as compare_main

    _run("mnist", tmp_path / "exact", "--quick", "--epochs", "2")
    _run("mnist", tmp_path / "w16", "--quick", "--epochs", "2", "--set", "kl_weight=0.0625")
    out = tmp_path / "cmp"
    assert (
        compare_main(["--out", str(out), f"exact={tmp_path / 'exact'}", f"w16={tmp_path / 'w16'}"])
        == 0
    )
    rows = _rows(out / "results.csv")
    assert [(r["variant"], int(r["epoch"])) for r in rows] == [
        ("exact", 1),
        ("exact", 2),
        ("w16", 1),
        ("w16", 2),
    ]
    # A weighted KL is a different objective: the same seed gives a different run.
    assert rows[1]["train_loss"] != rows[3]["train_loss"]
    text = (out / "report.md").read_text()
    assert "kl_weight=0.0625" in text and (out / "mnist_variants.png").stat().st_size > 0
    assert compare_main(["--out", str(out), "nolabel"]) == 2
