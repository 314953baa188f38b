"""Knowing when a fit is done: a stopping rule on the ELBO and the gates, and step budgets.

:class:`ConvergenceMonitor` is a callback for :func:`svbnn.training.train`. It follows
scikit-learn's ``tol`` / ``n_iter_no_change`` convention, with two changes that a
stochastic, gated objective needs:

* The loss is compared over *check periods* of at least ``check_steps`` optimiser steps
  (one epoch when an epoch is longer), not over single epochs: an epoch of a 300-row data
  set is three minibatch steps, whose Monte Carlo loss is too noisy to compare.
* The fit has converged only when the loss has not improved by more than ``tol`` for
  ``n_iter_no_change`` periods **and** the gates are stable: at most a fraction
  ``gate_tol`` of the inclusion indicators ``1[phi > 0.5]`` changed side during the last
  period. A flat loss with gates still drifting (the KL pulling weak edges out, one by
  one) is not convergence: stopping there leaves the selection depending on when one
  stopped.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor, nn

from .selection import spike_slab_layers

__all__ = ["MIN_STEPS", "ConvergenceMonitor", "default_max_steps"]


# The step budget's bounds and its number of epochs in between (default_max_steps).
MIN_STEPS, _EPOCHS, _MAX_STEPS = 4_000, 160, 20_000


def default_max_steps(n: int, batch_size: int, min_steps: int = MIN_STEPS) -> int:
    """Upper bound on optimiser steps for a fit on ``n`` rows: ``min_steps`` (4,000) steps,
    or 160 epochs where that is more (from 3,200 rows at 128 a batch with 4,000), up to
    20,000 steps; and at least 20 epochs. The estimators' cosine learning-rate schedule
    spans it; the stopping rule can end a fit before.

    Steps, not epochs, are what moves the gates (Adam moves a logit ``alpha`` by about the
    learning rate a step, from ``logit(0.99) = 4.6`` to below zero). On a larger table the
    KL's pull on a gate is a smaller part of each minibatch's per-datum gradient (it is
    divided by ``n``), so a gate without support in the data drifts to the spike more
    slowly under the same minibatch noise: 4,000 steps left all ten noise inputs added to
    kin8nm (6,144 rows) selected, 10,000 none (user guide, "How the defaults were chosen").

    Parameters
    ----------
    n : int
        Training rows.
    batch_size : int
        Minibatch size (``min(batch_size, n)`` rows a step).
    min_steps : int
        The floor of a small table's budget, in ``[1, 20000]``: the local sampler's
        lower-variance gradients need half the default (:class:`svbnn.SVBNNRegressor`);
        the 160 epochs of a larger table's budget stay, as its gates' drift needs them.

    Returns
    -------
    int
        The budget in steps, a whole number of epochs.
    """
    if not 1 <= min_steps <= _MAX_STEPS:
        raise ValueError(f"min_steps must be in [1, {_MAX_STEPS}], got {min_steps!r}")
    n_batches = math.ceil(n / min(batch_size, n))
    steps = min(max(min_steps, _EPOCHS * n_batches), _MAX_STEPS)
    return max(math.ceil(steps / n_batches), 20) * n_batches


class ConvergenceMonitor:
    """Callback for :func:`svbnn.training.train` that stops when the fit has converged.

    Parameters
    ----------
    n_batches : int
        Optimiser steps per epoch.
    tol : float
        Minimum decrease of the period-mean per-datum loss that counts as an improvement.
    n_iter_no_change : int
        Periods without improvement (and with stable gates) after which training stops.
    check_steps : int
        Minimum optimiser steps per check period (a period is a whole number of epochs).
    gate_tol : float
        Largest fraction of gates allowed to cross 0.5 during the last period.
    enabled : bool
        ``False`` records the diagnostics but never stops training.
    warmup_steps : int
        The run's KL warm-up (``train(kl_warmup=...)``): the objective changes until then,
        so a period that ends within it is not compared (nor can the fit converge in it).

    Attributes
    ----------
    converged : bool
        Whether the last check found the fit converged.
    flipped : float
        Fraction of gates that crossed 0.5 in the last complete period.
    gates_stable : bool
        Whether at most ``gate_tol`` of them did (always, for a network without gates).
    n_periods : int
        Completed check periods.
    """

    def __init__(
        self,
        n_batches: int,
        tol: float = 1e-4,
        n_iter_no_change: int = 10,
        check_steps: int = 100,
        gate_tol: float = 1e-3,
        enabled: bool = True,
        warmup_steps: int = 0,
    ) -> None:
        if n_batches < 1 or n_iter_no_change < 1 or check_steps < 1:
            raise ValueError("n_batches, n_iter_no_change and check_steps must be >= 1")
        if not (tol >= 0 and gate_tol >= 0 and warmup_steps >= 0):
            raise ValueError("tol, gate_tol and warmup_steps must be >= 0")
        self.n_batches = n_batches
        self.warmup_steps = warmup_steps
        self.epochs_per_period = max(1, math.ceil(check_steps / n_batches))
        self.tol = tol
        self.n_iter_no_change = n_iter_no_change
        self.gate_tol = gate_tol
        self.enabled = enabled
        self.converged = False
        self.flipped = math.nan
        self.gates_stable = False
        self.n_periods = 0
        self._best = math.inf
        self._no_improvement = 0
        self._losses: list[float] = []
        self._gates: Tensor | None = None

    @staticmethod
    def _gate_signs(model: nn.Module) -> Tensor | None:
        layers = spike_slab_layers(model)
        if not layers:
            return None
        with torch.no_grad():
            return torch.cat([(layer.alpha > 0).reshape(-1) for layer in layers])

    def epochs_until_model_read(self) -> int:
        """Epochs until the call that reads the network (a period's end; the calls before
        it read only the history): :func:`svbnn.training.train` may run that many in one
        native call."""
        return self.epochs_per_period - len(self._losses)

    def __call__(self, epoch: int, model: nn.Module, history: Any) -> bool:
        """Record the epoch; at the end of a period, decide. Returns ``True`` to stop."""
        # A replicated model records one loss per replicate: the rule watches their mean.
        last = history.loss[-1]
        self._losses.append(sum(last) / len(last) if isinstance(last, list) else float(last))
        if len(self._losses) < self.epochs_per_period:
            return False
        loss = sum(self._losses) / len(self._losses)
        self._losses.clear()
        self.n_periods += 1
        gates = self._gate_signs(model)
        if gates is not None:
            if self._gates is not None:
                self.flipped = float((gates != self._gates).float().mean())
            self._gates = gates
        if epoch * self.n_batches <= self.warmup_steps:
            # The KL's weight is still rising: a period's loss says nothing of convergence.
            self.converged = self.gates_stable = False
            return False
        # sklearn's rule: an improvement is a decrease by more than tol over the best so far.
        if loss < self._best - self.tol:
            self._no_improvement = 0
        else:
            self._no_improvement += 1
        self._best = min(self._best, loss)
        self.gates_stable = gates is None or (
            not math.isnan(self.flipped) and self.flipped <= self.gate_tol
        )
        self.converged = self._no_improvement >= self.n_iter_no_change and self.gates_stable
        return self.enabled and self.converged
