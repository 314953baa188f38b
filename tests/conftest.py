"""Shared test settings: one torch thread (``make test`` runs one pytest-xdist worker
process per core, and the suite's timing budget assumes both), a cache directory of each
process's own for the native kernels, and the guard that fails a GPU run
(``-m gpu``) on a machine without CUDA instead of skipping."""

from collections.abc import Iterator

import pytest
import torch

from tests.gpu_guard import current_reason, gpu_guard_message

torch.set_num_threads(1)


@pytest.fixture
def one_thread() -> Iterator[None]:
    """One torch thread for the test (the native loops' paths under ``auto``), whatever an
    earlier test set; the count restored after."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def native_steps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A list that grows by one at every step of svbnn's native training step
    (``NativeNegativeElbo``) from now on."""
    from svbnn._engine.native_step import NativeNegativeElbo

    steps: list[int] = []
    real = NativeNegativeElbo.apply

    def spy(*args: object) -> object:
        steps.append(1)
        return real(*args)

    monkeypatch.setattr(NativeNegativeElbo, "apply", spy)
    return steps


@pytest.hookimpl(trylast=True)  # after -m has deselected what it deselects
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    n_gpu = sum(1 for item in items if item.get_closest_marker("gpu") is not None)
    message = gpu_guard_message(n_gpu, current_reason() if n_gpu else None)
    if message is not None:
        raise pytest.UsageError(message)
