"""The measured sections: training step (1-2), replications (3) and inference (5).

Each ``run_*`` times its configurations with :func:`~benchmarks.timing.time_interleaved`,
appends its rows to the report and returns the timings the Markdown tables are written from.
"""

from __future__ import annotations

import argparse
import gc
import math
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from svbnn.nn.spike_slab import SpikeSlabLinear
from svbnn.objectives import GaussianLikelihood
from svbnn.selection import export_sparse, module_size_bytes
from svbnn.training import train as train_model

from .networks import (
    BAYESIAN_TORCH,
    DENSE,
    N_REPLICATES,
    REFERENCE,
    SVBNN,
    NetSpec,
    build_step,
    dense_model,
    svbnn_model,
)
from .results import Report, Row, timing_row
from .timing import Timing, paired_ratio, per_step, rep_ratios, time_interleaved


def run_training(
    report: Report, nets: list[NetSpec], impls: list[str], args: argparse.Namespace
) -> dict[str, dict[str, Timing]]:
    """Sections 1-2: time per training step of every implementation on every network."""
    results: dict[str, dict[str, Timing]] = {}
    for net in nets:
        fns = {impl: build_step(net, impl, seed=1)[0] for impl in impls}
        rounds = args.cnn_repeats if net.kind == "cnn" else args.repeats
        min_block = 0.0 if net.kind == "cnn" else args.min_block_ms / 1e3
        warm = 1 if net.kind == "cnn" else args.warmup
        t0 = time.perf_counter()
        results[net.key] = time_interleaved(fns, rounds, min_block, warm)
        del fns
        gc.collect()
        print(f"  timed {net.label} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
        for impl, t in results[net.key].items():
            note = f"{t.steps_per_block} steps per block"
            report.rows.append(timing_row("train_step", net.key, impl, "time_per_step", t, note))
        res = results[net.key]
        for other in (DENSE, REFERENCE, BAYESIAN_TORCH):
            if other not in res:
                continue
            num, den = (res[SVBNN], res[DENSE]) if other == DENSE else (res[other], res[SVBNN])
            r = paired_ratio(num, den)
            metric = "svbnn_over_dense" if other == DENSE else f"{other}_over_svbnn"
            report.rows.append(
                Row("train_step", net.key, other, metric, "ratio", *r, len(num.per_round))
            )
    return results


def build_replicate_training(
    net: NetSpec, n_replicates: int, batched: bool, epochs: int, seed: int = 0
) -> tuple[Callable[[], None], int]:
    """``svbnn.training.train`` on ``n_replicates`` Simulation II-shaped data sets.

    ``batched``: one ``SpikeSlabMLP(..., n_replicates=R)`` on the ``(R, n, p)`` data;
    otherwise ``R`` one-replicate networks, each trained on its own data set, one after
    another. A call trains every replicate for ``epochs`` more epochs: a fresh random
    minibatch order per epoch and replicate, the ragged last minibatch, the per-epoch loss
    check, all as a real run (the networks keep their weights from call to call).

    Returns
    -------
    fn, steps : callable, int
        The call, and the optimiser steps it takes per replicate.
    """
    gen = torch.Generator().manual_seed(seed)
    R, n, m = n_replicates, net.n_train, net.batch
    X = torch.randn(R, n, net.in_features, generator=gen)
    y = torch.randn(R, n, generator=gen)
    lik = GaussianLikelihood(1.0)
    kw: dict[str, Any] = {
        "epochs": epochs,
        "batch_size": m,
        "lr": net.lr,
        "generator": gen,
        "track_sparsity": False,
    }
    if batched:
        model = svbnn_model(net, gen, R)

        def fn() -> None:
            train_model(model, X, y, lik, **kw)

    else:
        models = [svbnn_model(net, gen) for _ in range(R)]

        def fn() -> None:
            for r, one in enumerate(models):
                train_model(one, X[r], y[r], lik, **kw)

    return fn, epochs * math.ceil(n / m)


def run_replicates(report: Report, net: NetSpec, args: argparse.Namespace) -> dict[str, Timing]:
    """Section 3: R replications trained as one batched network against R trained one after
    another, both with ``svbnn.training.train``. Returns per-step timings: ``batched`` (a
    step of all R), ``single`` (a step of one replicate, from the R sequential runs)."""
    batched, steps = build_replicate_training(net, N_REPLICATES, True, args.rep_epochs, seed=2)
    sequential, _ = build_replicate_training(net, N_REPLICATES, False, args.rep_epochs, seed=2)
    t = time_interleaved(
        {"batched": batched, "sequential": sequential},
        args.rep_repeats,
        args.min_block_ms / 1e3,
        min(args.warmup, 1),
    )
    b = per_step(t["batched"], steps)
    s = per_step(t["sequential"], steps * N_REPLICATES)
    rows = [
        (f"batched R={N_REPLICATES}", "time_per_step", "ms", [v * 1e3 for v in b.per_round]),
        ("sequential, per replicate", "time_per_step", "ms", [v * 1e3 for v in s.per_round]),
        (
            f"batched R={N_REPLICATES}",
            "throughput",
            "replicate-steps/s",
            [N_REPLICATES / v for v in b.per_round],
        ),
        (
            f"sequential {N_REPLICATES}x1",
            "throughput",
            "replicate-steps/s",
            [1.0 / v for v in s.per_round],
        ),
        ("batched/sequential", "throughput_ratio", "ratio", rep_ratios(b, s)),
    ]
    for impl, metric, unit, values in rows:
        report.rows.append(
            Row(
                "replicates",
                net.key,
                impl,
                metric,
                unit,
                statistics.median(values),
                float(np.percentile(values, 25)),
                float(np.percentile(values, 75)),
                len(values),
            )
        )
    return {"batched": b, "single": s}


def sparse_mnist_model(net: NetSpec, target_density: float, seed: int) -> nn.Module:
    """An MNIST SVBNN whose inclusion probabilities mimic a fitted sparse network.

    A random ``target_density`` fraction of all weights and biases (seeded) gets
    ``phi = sigmoid(4) ~ 0.98``, the rest ``phi = sigmoid(-4) ~ 0.02``.
    """
    gen = torch.Generator().manual_seed(seed)
    model = svbnn_model(net, gen)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, SpikeSlabLinear):
                keep = torch.rand(m.alpha.shape, generator=gen) < target_density
                m.alpha.copy_(torch.where(keep, 4.0, -4.0))
    return model


def run_inference(report: Report, net: NetSpec, args: argparse.Namespace) -> dict[str, Any]:
    """Section 5: latency and size on disk of the exported sparse MNIST net vs the dense one."""
    model = sparse_mnist_model(net, args.density, seed=3)
    with warnings.catch_warnings():  # torch's "sparse CSR support is in beta" notices
        warnings.filterwarnings("ignore", message=".*[Ss]parse.*", category=UserWarning)
        exported, rep = export_sparse(model, storage="sparse")
        with torch.inference_mode():
            exported(torch.zeros(1, net.in_features))  # builds the CSR matrices once
    dense = dense_model(net).eval()
    sizes = {"exported": rep.size_bytes, "dense": module_size_bytes(dense)}
    gen = torch.Generator().manual_seed(4)
    out: dict[str, Any] = {"sizes": sizes, "density": rep.density, "latency": {}}
    for batch in (1, 1000):
        t = _time_latency(exported, dense, torch.randn(batch, net.in_features, generator=gen), args)
        out["latency"][batch] = t
        for name, tt in t.items():
            report.rows.append(timing_row("inference", net.key, name, f"latency_batch_{batch}", tt))
    _add_export_rows(report, net, sizes, rep.density)
    return out


def _time_latency(
    exported: nn.Module, dense: nn.Module, x: Tensor, args: argparse.Namespace
) -> dict[str, Timing]:
    """Interleaved forward-pass timings of the exported and the dense network on ``x``."""

    def fwd(m: nn.Module = exported, x: Tensor = x) -> None:
        with torch.inference_mode():
            m(x)

    def fwd_dense(m: nn.Module = dense, x: Tensor = x) -> None:
        with torch.inference_mode():
            m(x)

    return time_interleaved(
        {"exported": fwd, "dense": fwd_dense},
        args.repeats,
        args.min_block_ms / 1e3,
        args.warmup,
    )


def _add_export_rows(report: Report, net: NetSpec, sizes: dict[str, int], density: float) -> None:
    """The size-on-disk, density and size-ratio rows of section 5."""
    for name, size in sizes.items():
        report.rows.append(
            Row(
                "inference",
                net.key,
                name,
                "size_on_disk",
                "bytes",
                size,
                note="len(torch.save(state_dict))",
            )
        )
    report.rows.append(
        Row(
            "inference",
            net.key,
            "exported",
            "density",
            "fraction",
            density,
            note="phi set at random (seeded), not trained",
        )
    )
    report.rows.append(
        Row(
            "inference",
            net.key,
            "dense/exported",
            "size_ratio",
            "ratio",
            sizes["dense"] / sizes["exported"],
        )
    )
