"""How svbnn._engine.native builds and loads its extension module: the install build is
imported only if it matches the SHA-256 in the package's manifest, anything else is built
privately in a fresh temporary folder, torch's cache of extensions is never used, and
without a compiler or ninja the loops are off with one message.

One real build serves the whole session (``install_build``: ``build_into_package`` into a
folder that the pytest-xdist workers of one run share); the tests that need a build
elsewhere copy it. The end-to-end private build is ``slow``."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from filelock import FileLock

from svbnn._engine import native as _native


@pytest.fixture(scope="session")
def install_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding what ``build_into_package`` leaves there: the library and the
    manifest. Built once per test run (the workers wait on a lock), never in torch's cache."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's own folder in the run's
        root = root.parent
    folder = root / "svbnn-install-build"
    with FileLock(str(root / "svbnn-install-build.lock")):
        if not (folder / "manifest.json").is_file():
            with pytest.MonkeyPatch.context() as mp:
                torch_cache = root / "torch-extensions-cache"
                mp.setenv("TORCH_EXTENSIONS_DIR", str(torch_cache))
                _native.build_into_package(folder)
                assert not torch_cache.exists()
    return folder


@pytest.fixture
def fresh_loader(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Path]:
    """The loader as a new process finds it, its install folder ``tmp_path / "_build"``."""
    build_dir = tmp_path / "_build"
    _native._load_once.cache_clear()
    monkeypatch.setattr(_native, "BUILD_DIR", build_dir)
    yield build_dir
    _native._load_once.cache_clear()  # the next use loads the package's own build again


def _only_entry(folder: Path) -> dict[str, str]:
    (entry,) = json.loads((folder / "manifest.json").read_text()).values()
    assert isinstance(entry, dict)
    return entry


def test_the_install_build_leaves_the_library_and_its_sha256(install_build: Path) -> None:
    entry = _only_entry(install_build)
    library = install_build / entry["library"]
    # torch's build files (ninja's, the objects) are gone; the library matches its hash.
    assert sorted(p.name for p in install_build.iterdir()) == sorted(
        [library.name, "manifest.json"]
    )
    assert _native._sha256(library) == entry["sha256"]
    assert (install_build / "manifest.json").stat().st_mode & 0o777 == 0o644


def _private_builds(
    monkeypatch: pytest.MonkeyPatch, install_build: Path
) -> tuple[list[Path], list[Path]]:
    """The folders the loader builds in from now on, and the files it imports. Each "build"
    copies the session's library there and imports it (a real one:
    ``test_a_private_build_end_to_end``). The files imported are what counts: pybind11
    hands out a module of a name imported before (one library here) as it was."""
    folders: list[Path] = []
    imported: list[Path] = []
    library = install_build / _only_entry(install_build)["library"]
    real_import = _native._import

    def spy_import(path: Path) -> object:
        imported.append(path)
        return real_import(path)

    def build(build_directory: Path, name: str) -> object:
        folders.append(build_directory)
        assert name.startswith("svbnn_native_") and not any(build_directory.iterdir())
        return spy_import(Path(shutil.copy(library, build_directory)))

    monkeypatch.setattr(_native, "_build", build)
    monkeypatch.setattr(_native, "_import", spy_import)
    return folders, imported


def test_the_install_build_is_loaded_only_if_it_matches_the_manifest(
    install_build: Path,
    fresh_loader: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    shutil.copytree(install_build, fresh_loader)
    library = fresh_loader / _only_entry(fresh_loader)["library"]
    builds, imported = _private_builds(monkeypatch, install_build)
    assert _native.available()
    assert builds == [] and imported == [library]
    # A library that is not the one built (here: one byte more) is never loaded: the loops
    # are built for this process in a fresh private folder instead, gone after the load.
    with open(library, "ab") as f:
        f.write(b"\0")
    _native._load_once.cache_clear()
    with caplog.at_level(logging.WARNING, logger="svbnn._engine.native"):
        assert _native.available()
    assert len(builds) == 1 and builds[0].parent == Path(tempfile.gettempdir())
    assert builds[0].name.startswith("svbnn-native-") and not builds[0].exists()
    assert imported[1:] == [builds[0] / library.name]
    assert any("does not match the SHA-256" in r.getMessage() for r in caplog.records)


def test_an_install_build_in_a_process_that_imported_one_moves_only_its_own(
    install_build: Path, fresh_loader: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A process that imported the extension gets that module back from another import of
    # the same name (pybind11), whose __file__ is the first file: the build must record and
    # move the library it built, never the one loaded before.
    shutil.copytree(install_build, fresh_loader)
    library = fresh_loader / _only_entry(fresh_loader)["library"]
    assert _native.available()
    loaded = _native.library()

    def build(build_directory: Path, name: str) -> object:
        shutil.copy(library, build_directory / f"{name}.so")
        return loaded

    monkeypatch.setattr(_native, "_build", build)
    second = fresh_loader.parent / "second"
    built = _native.build_into_package(second)
    assert library.is_file() and _native._sha256(library) == _only_entry(fresh_loader)["sha256"]
    assert built.parent == second and _only_entry(second)["library"] == built.name


def test_a_manifest_names_only_a_library_beside_it(
    install_build: Path, fresh_loader: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shutil.copytree(install_build, fresh_loader)
    manifest = json.loads((fresh_loader / "manifest.json").read_text())
    (key,) = manifest
    outside = fresh_loader.parent / manifest[key]["library"]
    shutil.copy(fresh_loader / manifest[key]["library"], outside)
    # The right hash, but a path out of the folder: not an entry of the manifest.
    manifest[key]["library"] = f"../{outside.name}"
    (fresh_loader / "manifest.json").write_text(json.dumps(manifest))
    assert _native._read_manifest(fresh_loader) == {}
    builds, imported = _private_builds(monkeypatch, install_build)
    assert _native.available() and len(builds) == 1
    assert imported == [builds[0] / outside.name]


def test_an_install_build_for_another_key_warns_and_builds_privately(
    install_build: Path,
    fresh_loader: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What an upgrade without a rebuild leaves: a manifest whose one entry is another key's.
    shutil.copytree(install_build, fresh_loader)
    manifest = json.loads((fresh_loader / "manifest.json").read_text())
    (key,) = manifest
    manifest = {"0" * 20: manifest[key]}
    (fresh_loader / "manifest.json").write_text(json.dumps(manifest))
    builds, _ = _private_builds(monkeypatch, install_build)
    with caplog.at_level(logging.WARNING, logger="svbnn._engine.native"):
        assert _native.available()
    assert len(builds) == 1
    (message,) = [r.getMessage() for r in caplog.records if "does not match" in r.getMessage()]
    assert "python -m svbnn._engine.native" in message


def test_without_an_install_build_the_loops_are_built_privately(
    install_build: Path, fresh_loader: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    builds, _ = _private_builds(monkeypatch, install_build)
    assert _native.available()
    assert len(builds) == 1 and not builds[0].exists()
    assert not fresh_loader.exists()


@pytest.mark.slow
def test_a_private_build_end_to_end(
    fresh_loader: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    torch_cache = tmp_path / "torch-extensions-cache"
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(torch_cache))
    built: list[Path] = []
    real_build = _native._build

    def spy(build_directory: Path, name: str) -> object:
        built.append(build_directory)
        return real_build(build_directory, name)

    monkeypatch.setattr(_native, "_build", spy)
    assert _native.available()
    assert len(built) == 1 and built[0].name.startswith("svbnn-native-")
    assert not built[0].exists() and not fresh_loader.exists() and not torch_cache.exists()
    out = torch.empty(2, 3)
    src = torch.arange(12.0).view(4, 3)
    assert torch.equal(_native.gather_rows(src, torch.tensor([3, 1]), out), src[[3, 1]])


def test_without_a_compiler_the_inductor_kernel_stays(
    fresh_loader: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("CXX", str(tmp_path / "no-such-compiler"))
    with caplog.at_level(logging.WARNING, logger="svbnn._engine.native"):
        assert not _native.available()
        assert not _native.available()  # tried once
    assert len([r for r in caplog.records if "did not compile" in r.getMessage()]) == 1
    mu = rho = alpha = torch.zeros(1000)
    assert not _native.usable(mu, rho, alpha, torch.tensor(-5.0), 2.0)
    assert sorted(tmp_path.iterdir()) == []


def test_without_ninja_the_inductor_kernel_stays(
    fresh_loader: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from torch.utils import cpp_extension

    monkeypatch.setattr(cpp_extension, "is_ninja_available", lambda: False)
    with caplog.at_level(logging.WARNING, logger="svbnn._engine.native"):
        assert not _native.available()
    (message,) = [r.getMessage() for r in caplog.records if "did not compile" in r.getMessage()]
    assert "Ninja is required" in message
