"""Tiny data files in the formats the real-data loaders read, registered by hash.

``mnist.npz``, ``fashion_mnist.npz`` and ``uci/<name>/...`` with a few rows each, so that the
real-data artifacts run in seconds (``tests/test_realdata_experiments.py``, and on a GPU
``tests/test_gpu.py``); ``tests/test_data_loaders.py`` checks the loaders themselves.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from svbnn.data import CHECKSUMS, ENV_DATA_DIR, ENV_DATA_URL, clear_checksum_cache

N_TRAIN_IMG, N_TEST_IMG = 64, 40
UCI_ROWS, UCI_SPLITS, UCI_TEST = 90, 2, 10


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_images(path: Path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    arrays = {
        "x_train": rng.integers(0, 256, size=(N_TRAIN_IMG, 28, 28), dtype=np.uint8),
        "y_train": (np.arange(N_TRAIN_IMG) % 10).astype(np.uint8),
        "x_test": rng.integers(0, 256, size=(N_TEST_IMG, 28, 28), dtype=np.uint8),
        "y_test": (np.arange(N_TEST_IMG) % 10).astype(np.uint8),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)


def write_uci(folder: Path, p: int, seed: int, scale: float = 1.0, shift: float = 0.0) -> None:
    """``UCI_ROWS`` rows, ``p`` features and a target ``scale * y + shift`` (last column)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(UCI_ROWS, p)).round(4)
    y = (np.sin(X[:, 0]) + 0.1 * rng.normal(size=UCI_ROWS)).round(4)
    data = np.column_stack([X, scale * y + shift])
    folder.mkdir(parents=True, exist_ok=True)
    np.savetxt(folder / "data.txt", data, fmt="%.10g")
    (folder / "index_features.txt").write_text("".join(f"{j}\n" for j in range(p)))
    (folder / "index_target.txt").write_text(f"{p}\n")
    (folder / "n_splits.txt").write_text(f"{UCI_SPLITS}\n")
    split_rng = np.random.default_rng(seed + 1)
    for i in range(UCI_SPLITS):
        perm = split_rng.permutation(UCI_ROWS)
        np.savetxt(folder / f"index_train_{i}.txt", perm[UCI_TEST:], fmt="%d")
        np.savetxt(folder / f"index_test_{i}.txt", perm[:UCI_TEST], fmt="%d")


def make_data_root(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Write tiny MNIST, Fashion-MNIST and two UCI sets under ``root``, register their
    hashes and point ``SVBNN_DATA`` at ``root`` (for the test's duration)."""
    write_images(root / "mnist.npz", 0)
    write_images(root / "fashion_mnist.npz", 1)
    write_uci(root / "uci" / "wine-quality-red", p=11, seed=2)
    write_uci(root / "uci" / "power-plant", p=4, seed=3)
    for rel in (
        "mnist.npz",
        "fashion_mnist.npz",
        "uci/wine-quality-red/data.txt",
        "uci/power-plant/data.txt",
    ):
        monkeypatch.setitem(CHECKSUMS, rel, (sha(root / rel),))
    monkeypatch.setenv(ENV_DATA_DIR, str(root))
    monkeypatch.delenv(ENV_DATA_URL, raising=False)
    clear_checksum_cache()
    return root
