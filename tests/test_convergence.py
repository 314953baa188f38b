"""The stopping rule (ConvergenceMonitor) and the step budget."""

from types import SimpleNamespace

import pytest
from torch import nn

from svbnn.convergence import ConvergenceMonitor


def _first_stop(monitor: ConvergenceMonitor, losses: list[float]) -> int | None:
    """The epoch after which ``monitor`` stops a run with these per-epoch losses."""
    history = SimpleNamespace(loss=[])
    plain = nn.Linear(2, 1)  # no gates: always stable
    for epoch, loss in enumerate(losses, start=1):
        history.loss.append(loss)
        if monitor(epoch, plain, history):
            return epoch
    return None


def test_a_flat_loss_stops_after_n_iter_no_change_periods() -> None:
    # 10 steps an epoch, periods of 100 steps (10 epochs): the first period sets the best,
    # the next three do not improve on it.
    monitor = ConvergenceMonitor(10, tol=1e-4, n_iter_no_change=3, check_steps=100)
    assert _first_stop(monitor, [1.0] * 100) == 40
    assert monitor.converged and monitor.n_periods == 4


def test_no_period_within_the_kl_warmup_counts() -> None:
    # A loss that rises through a 200-step warm-up (the KL's weight grows), then is flat.
    losses = [0.01 * e for e in range(1, 21)] + [0.2] * 80
    plain = ConvergenceMonitor(10, tol=1e-4, n_iter_no_change=3, check_steps=100)
    assert _first_stop(plain, losses) == 40  # the rising loss reads as no improvement
    warmed = ConvergenceMonitor(10, tol=1e-4, n_iter_no_change=3, check_steps=100, warmup_steps=200)
    assert _first_stop(warmed, losses) == 60  # a best from epoch 30, three flat periods more


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="warmup_steps"):
        ConvergenceMonitor(10, warmup_steps=-1)
