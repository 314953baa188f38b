"""Data loaders against hostile names, broken mirrors and missing folders (issue 15, item 7).

Everything runs on small files in a temporary folder; the "mirror" is a local folder served
through a ``file://`` base URL, so there is no network and no dependence on shared data.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

from svbnn.data import (
    CHECKSUMS,
    ENV_DATA_DIR,
    ENV_DATA_URL,
    ChecksumError,
    DataIntegrityError,
    DataNotFoundError,
    DownloadError,
    _download,
    clear_checksum_cache,
    is_registered_file,
    load_mnist,
    load_uci,
    source_url,
)

N_ROWS = 12
FILES_SPLIT_0 = (
    "data.txt",
    "n_splits.txt",
    "index_features.txt",
    "index_target.txt",
    "index_train_0.txt",
    "index_test_0.txt",
)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No real data, no mirror from the environment, a private cache, no cached hashes."""
    monkeypatch.delenv(ENV_DATA_DIR, raising=False)
    monkeypatch.delenv(ENV_DATA_URL, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    clear_checksum_cache()


def _write_yacht(folder: Path) -> None:
    """A tiny, valid ``uci/yacht`` folder (2 splits, 3 features, target column 3)."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    np.savetxt(folder / "data.txt", rng.normal(size=(N_ROWS, 4)).round(3), fmt="%.3f")
    (folder / "n_splits.txt").write_text("2\n")
    (folder / "index_features.txt").write_text("0 1 2\n")
    (folder / "index_target.txt").write_text("3\n")
    for i in range(2):
        perm = rng.permutation(N_ROWS)
        np.savetxt(folder / f"index_train_{i}.txt", perm[:9], fmt="%d")
        np.savetxt(folder / f"index_test_{i}.txt", perm[9:], fmt="%d")


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    """A local mirror holding a valid ``uci/yacht`` (hash registered) and a planted payload."""
    www = tmp_path / "mirror"
    _write_yacht(www / "uci" / "yacht")
    data = www / "uci" / "yacht" / "data.txt"
    monkeypatch.setitem(
        CHECKSUMS, "uci/yacht/data.txt", (hashlib.sha256(data.read_bytes()).hexdigest(),)
    )
    # What a traversal through the mirror URL fetches: <mirror>/uci/../../evil -> tmp_path/evil.
    (tmp_path / "evil").mkdir()
    (tmp_path / "evil" / "data.txt").write_text("pwned\n")
    return www, www.as_uri()


def _tree(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


# ------------------------------------------------------------------------------------------
# 1. Path traversal: names are checked against the registry before any I/O
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["../../evil", "../../../evil", "yacht/../../../evil"])
def test_traversal_through_download_is_refused(
    tmp_path: Path, mirror: tuple[Path, str], name: str
) -> None:
    _, url = mirror
    root = tmp_path / "a" / "b" / "root"
    root.mkdir(parents=True)
    before = _tree(tmp_path)
    # (The old code wrote the payload to <root>/../../evil/data.txt for '../../evil'.)
    with pytest.raises(ValueError, match="name=") as info:
        load_uci(name, verify=False, download=True, base_url=url, data_dir=root)
    assert "kin8nm" in str(info.value) and "yacht" in str(info.value)  # lists the known names
    assert _tree(tmp_path) == before  # nothing created, inside the root or outside it


@pytest.mark.parametrize(
    "name", ["../evil", "../../../evil", "/etc", "a/b", "a\\b", "..", ".", "", ".hidden", "x\0y"]
)
def test_unregistered_folder_names_must_be_plain(tmp_path: Path, name: str) -> None:
    root = tmp_path / "root"
    (root / "uci").mkdir(parents=True)
    _write_yacht(tmp_path / "evil")  # a valid folder the traversal would reach
    with pytest.raises(ValueError, match="name=") as info:
        load_uci(name, verify=False, data_dir=root)
    assert "kin8nm" in str(info.value)


def test_split_is_checked_before_io(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TypeError, match="split must be an int"):
        load_uci("yacht", "../x", empty)  # type: ignore[arg-type]
    # Out of the registry's range: refused before looking for (or downloading) anything.
    with pytest.raises(ValueError, match=r"split must be in \[0, 20\)"):
        load_uci("yacht", 20, empty, download=True, base_url="file:///nonexistent")
    assert not any(empty.iterdir())


def test_source_url_only_for_registered_files() -> None:
    for relpath in ("../evil", "uci/../../evil/data.txt", "uci/toy/data.txt", "/etc/passwd"):
        with pytest.raises(ValueError):
            source_url(relpath, "file:///mirror")
    with pytest.raises(ValueError, match="not a registered data file"):
        source_url("uci/yacht/index_train_20.txt", "file:///mirror")  # yacht has 20
    assert source_url("uci/yacht/index_train_19.txt", "http://m").endswith("_19.txt")
    assert is_registered_file("mnist.npz")
    assert not is_registered_file("uci/year/YearPredictionMSD.txt")


def test_download_destination_must_stay_inside_root(
    tmp_path: Path, mirror: tuple[Path, str]
) -> None:
    www, url = mirror
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "uci").mkdir(parents=True)
    outside.mkdir()
    # A symlink planted in the data folder must not redirect downloads out of it.
    (root / "uci" / "yacht").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ValueError, match="outside the data folder"):
        load_uci("yacht", 0, root, download=True, base_url=url)
    assert not any(outside.iterdir())
    with pytest.raises(ValueError, match="not inside the data folder"):
        _download.download_file(
            (tmp_path / "evil" / "data.txt").as_uri(), root / ".." / "x", expected=None, root=root
        )
    assert not (tmp_path / "x").exists()


# ------------------------------------------------------------------------------------------
# 2. Unhashed files from a mirror: validated before they are kept; a bad copy is named
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "garbage", "match"),
    [
        ("index_train_0.txt", "<html><body>404 Not Found</body></html>\n", "integers"),
        ("index_test_0.txt", "", "non-empty"),
        ("n_splits.txt", "2 3\n", "single integer"),
        ("n_splits.txt", "0\n", ">= 1"),
        ("index_features.txt", "0 1 1\n", "duplicated"),
        ("index_target.txt", "-1\n", ">= 0"),
    ],
)
def test_garbage_from_mirror_is_not_kept(
    tmp_path: Path, mirror: tuple[Path, str], file: str, garbage: str, match: str
) -> None:
    www, url = mirror
    good = (www / "uci" / "yacht" / file).read_bytes()
    (www / "uci" / "yacht" / file).write_text(garbage)
    root = tmp_path / "root"
    with pytest.raises(DataIntegrityError, match=match) as info:
        load_uci("yacht", 0, root, download=True, base_url=url)
    message = str(info.value)
    assert file in message and "discarded" in message and "base_url" in message
    assert not (root / "uci" / "yacht" / file).exists()
    assert not [p for p in root.rglob("*") if p.name.endswith(".part")]
    # Once the mirror is fixed, the retry works (the bad copy did not stick).
    (www / "uci" / "yacht" / file).write_bytes(good)
    assert load_uci("yacht", 0, root, download=True, base_url=url).n_train == 9


def test_present_bad_index_file_is_named_and_replaced(
    tmp_path: Path, mirror: tuple[Path, str]
) -> None:
    _, url = mirror
    root = tmp_path / "root"
    load_uci("yacht", 0, root, download=True, base_url=url)
    bad = root / "uci" / "yacht" / "index_train_0.txt"
    bad.write_text("<html>error page kept by an older version</html>\n")
    with pytest.raises(DataIntegrityError) as info:
        load_uci("yacht", 0, root)
    message = str(info.value)
    assert str(bad) in message and "Delete it" in message and "download=True" in message
    # download=True replaces it (only by a copy that parses) and the load goes through.
    s = load_uci("yacht", 0, root, download=True, base_url=url)
    assert s.n_train == 9 and "html" not in bad.read_text()
    # Out-of-range rows (parse fine, wrong for this data.txt) are replaced the same way.
    bad.write_text("0 1 2 3 4 5 6 7 99\n")
    with pytest.raises(DataIntegrityError, match="Delete it"):
        load_uci("yacht", 0, root)
    assert load_uci("yacht", 0, root, download=True, base_url=url).n_train == 9


def test_overlapping_split_files_named_and_replaced(
    tmp_path: Path, mirror: tuple[Path, str]
) -> None:
    _, url = mirror
    root = tmp_path / "root"
    load_uci("yacht", 0, root, download=True, base_url=url)
    folder = root / "uci" / "yacht"
    (folder / "index_test_0.txt").write_text((folder / "index_train_0.txt").read_text())
    with pytest.raises(DataIntegrityError, match="in both") as info:
        load_uci("yacht", 0, root)
    assert str(folder / "index_test_0.txt") in str(info.value) and "Delete it" in str(info.value)
    assert load_uci("yacht", 0, root, download=True, base_url=url).n_test == 3


def test_mirror_still_bad_after_refetch(tmp_path: Path, mirror: tuple[Path, str]) -> None:
    www, url = mirror
    root = tmp_path / "root"
    load_uci("yacht", 0, root, download=True, base_url=url)
    # The mirror serves indices that parse but do not fit data.txt (only visible at load time).
    for folder in (www / "uci" / "yacht", root / "uci" / "yacht"):
        (folder / "index_train_0.txt").write_text("0 1 2 3 4 5 6 7 99\n")
    with pytest.raises(DataIntegrityError, match="source serves bad files"):
        load_uci("yacht", 0, root, download=True, base_url=url)


def test_unreadable_npz_is_named(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "mnist.npz").write_bytes(b"<html>not a zip</html>")
    with pytest.raises(DataIntegrityError) as info:
        load_mnist(root, verify=False)
    message = str(info.value)
    assert str(root / "mnist.npz") in message and "Delete it" in message


# ------------------------------------------------------------------------------------------
# 3. A careful user's mistakes: one clear message each
# ------------------------------------------------------------------------------------------


def test_unset_data_dir_says_how_to_set_it() -> None:
    with pytest.raises(DataNotFoundError) as info:
        load_uci("yacht")
    message = str(info.value)
    assert "SVBNN_DATA is unset" in message and "SVBNN_DATA=/path/to/data" in message
    assert "data_dir" in message and "does not exist" in message


def test_missing_data_dir_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(DataNotFoundError, match="Data directory .*nowhere .*does not exist"):
        load_uci("yacht", 0, tmp_path / "nowhere")
    monkeypatch.setenv(ENV_DATA_DIR, str(tmp_path / "gone"))
    with pytest.raises(DataNotFoundError, match=r"gone \(from \$SVBNN_DATA\) does not exist"):
        load_mnist()


def test_data_dir_that_is_a_file(tmp_path: Path, mirror: tuple[Path, str]) -> None:
    _, url = mirror
    a_file = tmp_path / "notes.txt"
    a_file.write_text("x")
    for download in (False, True):
        with pytest.raises(DataNotFoundError, match="is not a directory"):
            load_uci("yacht", 0, a_file, download=download, base_url=url)


def test_unwritable_data_dir(
    tmp_path: Path, mirror: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = mirror

    def refuse(*args: object, **kwargs: object) -> tuple[int, str]:
        # What a read-only folder gives (chmod cannot show it when the tests run as root).
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_download.tempfile, "mkstemp", refuse)
    with pytest.raises(DownloadError, match="cannot write into .*Permission denied"):
        load_uci("yacht", 0, tmp_path / "root", download=True, base_url=url)


def test_corrupt_hashed_file_names_file_and_remedy(
    tmp_path: Path, mirror: tuple[Path, str]
) -> None:
    _, url = mirror
    root = tmp_path / "root"
    load_uci("yacht", 0, root, download=True, base_url=url)
    data = root / "uci" / "yacht" / "data.txt"
    data.write_text(data.read_text().replace("1", "2", 1))
    with pytest.raises(ChecksumError) as info:
        load_uci("yacht", 0, root)
    message = str(info.value)
    assert str(data) in message and "delete it" in message
    assert "download=True" in message and "verify=False" in message
