"""Interleaved wall-clock timing of training steps, and the statistics the report shows.

Implementations are timed round-robin (A B C A B C ...) so that machine noise hits all
alike; each round times a block of ``k`` consecutive calls per implementation (``k`` chosen
so a block lasts at least ``min_block_s``) and records the per-call mean of the block.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .networks import N_REPLICATES


@dataclass
class Timing:
    """Per-step seconds, one value per round (each the mean of a block of ``k`` steps)."""

    per_round: list[float]
    steps_per_block: int

    @property
    def median(self) -> float:
        return statistics.median(self.per_round)

    @property
    def q1(self) -> float:
        return float(np.percentile(self.per_round, 25))

    @property
    def q3(self) -> float:
        return float(np.percentile(self.per_round, 75))


def time_interleaved(
    fns: dict[str, Callable[[], Any]], rounds: int, min_block_s: float, warmup: int
) -> dict[str, Timing]:
    """Time several callables round-robin (A B C A B C ...); see the module docstring."""
    k: dict[str, int] = {}
    for name, fn in fns.items():
        for _ in range(warmup):
            fn()
        k[name] = 1
        if min_block_s > 0:  # calibrate the block length: fastest of three more steps
            one = math.inf
            for _ in range(3):
                t0 = time.perf_counter()
                fn()
                one = min(one, time.perf_counter() - t0)
            k[name] = max(1, math.ceil(min_block_s / max(one, 1e-9)))
    out = {name: Timing([], k[name]) for name in fns}
    gc.collect()
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(k[name]):
                fn()
            out[name].per_round.append((time.perf_counter() - t0) / k[name])
    return out


def paired_ratio(num: Timing, den: Timing) -> tuple[float, float, float]:
    """Median and quartiles of the per-round ratios ``num / den``."""
    r = [a / b for a, b in zip(num.per_round, den.per_round, strict=True)]
    return statistics.median(r), float(np.percentile(r, 25)), float(np.percentile(r, 75))


def per_step(t: Timing, steps: int) -> Timing:
    """A timing of calls that take ``steps`` steps each, as time per step."""
    return Timing([v / steps for v in t.per_round], t.steps_per_block * steps)


def rep_ratios(b: Timing, s: Timing) -> list[float]:
    """Per-round throughput ratios: R sequential replicate-steps over one batched step."""
    return [N_REPLICATES * sv / bv for bv, sv in zip(b.per_round, s.per_round, strict=True)]


def profile_step(step: Callable[[], None], n_steps: int, row_limit: int = 15) -> str:
    """torch.profiler table (self CPU time) of ``n_steps`` training steps."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n_steps):
            step()
    table: str = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=row_limit)
    return table
