"""The guard of ``make test-gpu`` (``pytest -m gpu``): no CUDA is a failure, not a skip.

The GPU tests are kept out of the default run (``-m 'not slow and not gpu'``); selecting
them on a machine without a usable CUDA device stops the session with this message and a
nonzero status, so that a GPU check can never pass by skipping everything.
"""

from __future__ import annotations

from svbnn._device import cuda_unavailable_reason


def gpu_guard_message(n_gpu_tests: int, reason: str | None) -> str | None:
    """The error for ``n_gpu_tests`` selected GPU tests, or ``None`` when they can run.

    Parameters
    ----------
    n_gpu_tests : int
        Selected tests marked ``gpu``.
    reason : str or None
        Why CUDA cannot be used here (:func:`svbnn._device.cuda_unavailable_reason`),
        ``None`` when it can.
    """
    if n_gpu_tests == 0 or reason is None:
        return None
    return (
        f"{n_gpu_tests} GPU test(s) selected (-m gpu, make test-gpu) but {reason}. "
        "Run them on a machine with an NVIDIA GPU and a CUDA build of torch; they are "
        "never skipped."
    )


def current_reason() -> str | None:
    """Why this process cannot use CUDA device 0 (``None``: it can)."""
    return cuda_unavailable_reason(0)
