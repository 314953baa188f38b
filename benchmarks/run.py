"""The svbnn benchmark: training-step time, replication throughput, memory and inference.

Run ``python -m benchmarks.run [--repeats N] [--threads T] [--quick] [--out results/bench]``.
Everything is measured in one run, side by side, and written as Markdown, CSV and JSON
into ``--out``; the Markdown is also printed. See ``benchmarks/README.md`` for what each
row measures.

Method
------
* Timings are wall-clock (``time.perf_counter``) of complete training steps (zero grad,
  forward, loss, backward, Adam step) on a fixed synthetic minibatch of the right shape
  (timing does not depend on the values). Implementations are interleaved round-robin
  (A B C D A B C D ...) so that machine noise hits all alike; each round times a block of
  ``k`` consecutive steps per implementation (``k`` chosen so a block lasts at least
  ``--min-block-ms``) and records the per-step mean of the block. Tables show the median
  over rounds with the interquartile range; ratios are medians of the per-round ratios
  (the two blocks of a round run back to back).
* Peak memory is the peak resident set size (Linux ``VmHWM``) of a fresh subprocess per
  configuration that builds the model and data and runs a few steps. Torch's CPU
  allocations are ordinary heap memory, so RSS sees them (``tracemalloc`` does not). Also
  reported: the peak during the steps minus the resident size just before the first step
  (the mark is reset through ``/proc/self/clear_refs``), i.e. the working memory the
  training steps add on top of the torch runtime, the model and the data.
"""

from __future__ import annotations

import argparse
import csv
import gc
import itertools
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from svbnn._kernels import AUTO_MIN_NUMEL, backend, set_backend
from svbnn.experiments.classifiers import paper_cnn
from svbnn.nn.base import set_generator
from svbnn.nn.spike_slab import SpikeSlabConv2d, SpikeSlabLinear, SpikeSlabMLP
from svbnn.objectives import CategoricalLikelihood, GaussianLikelihood
from svbnn.priors import log_lambda_opt, mlp_log_lambda_opt
from svbnn.selection import export_sparse, module_size_bytes
from svbnn.training import make_optimizer, negative_elbo, replicate_orders
from svbnn.training import train as train_model

from .reference import reference_cnn, reference_kl, reference_mlp

DENSE, SVBNN, REFERENCE, BAYESIAN_TORCH = "dense", "svbnn", "reference", "bayesian-torch"
IMPL_LABELS = {
    DENSE: "dense",
    SVBNN: "SVBNN",
    REFERENCE: "reference",
    BAYESIAN_TORCH: "bayesian-torch",
}
BT_INSTALL = "pip install bayesian-torch"
N_REPLICATES = 30


# -- networks ------------------------------------------------------------------------------
@dataclass(frozen=True)
class NetSpec:
    """One benchmarked network: architecture, task, minibatch size, training-set size."""

    key: str
    label: str
    kind: str  # "mlp" or "cnn"
    in_features: int
    hidden: tuple[int, ...]
    out_features: int
    task: str  # "regression" or "classification"
    batch: int
    n_train: int
    lr: float

    def n_params(self) -> int:
        if self.kind == "cnn":
            h = self.hidden[0]
            return (1 * 25 + 1) * 32 + (32 * 9 + 1) * 64 + (4096 + 1) * h + (h + 1) * 10
        sizes = [self.in_features, *self.hidden, self.out_features]
        return sum((sizes[i] + 1) * sizes[i + 1] for i in range(len(sizes) - 1))

    def arch(self) -> str:
        if self.kind == "cnn":
            return f"conv32(5x5)-pool-conv64(3x3)-pool-{4096}-{self.hidden[0]}-10"
        return "-".join(str(s) for s in (self.in_features, *self.hidden, self.out_features))

    def log_lambda(self) -> float:
        if self.kind == "cnn":
            return log_lambda_opt(self.n_params(), 3, 4096, self.n_train, 784)
        return mlp_log_lambda_opt(self.in_features, self.hidden, self.out_features, self.n_train)


def network_specs(cnn_hidden: int, cnn_batch: int) -> dict[str, NetSpec]:
    """The paper's networks (Simulation II, UCI, MNIST, Fashion-MNIST CNN)."""
    return {
        "sim2": NetSpec(
            "sim2", "Simulation II", "mlp", 200, (7, 7, 7), 1, "regression", 512, 3000, 5e-3
        ),
        "uci": NetSpec("uci", "UCI", "mlp", 8, (50,), 1, "regression", 128, 8192, 1e-3),
        "mnist": NetSpec(
            "mnist", "MNIST", "mlp", 784, (512, 512), 10, "classification", 256, 60000, 5e-3
        ),
        "cnn": NetSpec(
            "cnn",
            "Fashion-MNIST CNN",
            "cnn",
            784,
            (cnn_hidden,),
            10,
            "classification",
            cnn_batch,
            60000,
            1e-3,
        ),
    }


def bayesian_torch_available() -> tuple[bool, str]:
    """Whether ``bayesian_torch`` imports, and its version or the reason it does not."""
    try:
        from importlib.metadata import version

        import bayesian_torch.layers  # noqa: F401

        return True, version("bayesian-torch")
    except Exception as exc:  # any import failure means: skip the column
        return False, f"{type(exc).__name__}: {exc}"


def _mlp(net: NetSpec, lin: Callable[[int, int], nn.Module]) -> list[nn.Module]:
    """The fully connected network of ``net`` from a layer factory, ReLU between layers."""
    sizes = [net.in_features, *net.hidden, net.out_features]
    mods: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        mods.append(lin(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            mods.append(nn.ReLU())
    return mods


def _dense_model(net: NetSpec) -> nn.Module:
    if net.kind == "cnn":
        return paper_cnn(nn.Conv2d, nn.Linear, net.hidden[0])
    return nn.Sequential(*_mlp(net, nn.Linear))


def _svbnn_model(net: NetSpec, gen: torch.Generator, n_replicates: int | None = None) -> nn.Module:
    kw: dict[str, Any] = {"log_prior_inclusion": net.log_lambda(), "generator": gen}
    if net.kind == "cnn":
        model: nn.Module = paper_cnn(
            partial(SpikeSlabConv2d, **kw), partial(SpikeSlabLinear, **kw), net.hidden[0]
        )
    else:
        model = SpikeSlabMLP(
            net.in_features, net.hidden, net.out_features, n_replicates=n_replicates, **kw
        )
    set_generator(model, gen)
    return model


class _BayesianTorchNet(nn.Module):
    """Sequential container that sums the KL each bayesian-torch layer returns (their idiom)."""

    def __init__(self, layers: Sequence[nn.Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor]:
        from bayesian_torch.layers.base_variational_layer import BaseVariationalLayer_

        kl = torch.zeros(())
        for layer in self.layers:
            if isinstance(layer, BaseVariationalLayer_):
                x, k = layer(x)
                kl = kl + k
            else:
                x = layer(x)
        return x, kl


def _bayesian_torch_model(net: NetSpec) -> nn.Module:
    from bayesian_torch.layers import Conv2dReparameterization, LinearReparameterization

    if net.kind == "cnn":
        cnn = paper_cnn(Conv2dReparameterization, LinearReparameterization, net.hidden[0])
        return _BayesianTorchNet(list(cnn))
    return _BayesianTorchNet(_mlp(net, LinearReparameterization))


def _batch(net: NetSpec, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    shape = (net.batch, 1, 28, 28) if net.kind == "cnn" else (net.batch, net.in_features)
    x = torch.randn(shape, generator=gen)
    if net.task == "regression":
        return x, torch.randn(net.batch, generator=gen)
    return x, torch.randint(0, net.out_features, (net.batch,), generator=gen)


def _plain_nll(net: NetSpec, out: Tensor, y: Tensor) -> Tensor:
    """Per-datum negative log-likelihood (Gaussian with unit noise, or categorical)."""
    if net.task == "regression":
        return 0.5 * math.log(2 * math.pi) + 0.5 * F.mse_loss(out.squeeze(-1), y)
    return F.cross_entropy(out, y)


def build_step(net: NetSpec, impl: str, seed: int = 0) -> tuple[Callable[[], None], nn.Module]:
    """A closure running one full training step of ``impl`` on ``net``, and its model.

    Every implementation uses the same optimiser (``svbnn.training.make_optimizer``: Adam,
    torch's multi-tensor implementation), so differences come from the layers and losses.
    """
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # reference and bayesian-torch draw from the default generator
    x, y = _batch(net, gen)
    n = net.n_train
    if impl == DENSE:
        model = _dense_model(net)
        opt = make_optimizer(model.parameters(), "adam", net.lr)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            loss = (
                F.mse_loss(model(x).squeeze(-1), y)
                if net.task == "regression"
                else F.cross_entropy(model(x), y)
            )
            loss.backward()
            opt.step()

    elif impl == SVBNN:
        model = _svbnn_model(net, gen)
        lik: nn.Module = (
            GaussianLikelihood(1.0) if net.task == "regression" else CategoricalLikelihood()
        )
        opt = make_optimizer(model.parameters(), "adam", net.lr)

        def step() -> None:
            loss, _, _ = negative_elbo(model, lik, x, y, n)
            opt.zero_grad(set_to_none=True)
            loss.sum().backward()
            opt.step()

    elif impl == REFERENCE:
        if net.kind == "cnn":
            model = reference_cnn(net.hidden[0], log_prior_inclusion=net.log_lambda())
        else:
            model = reference_mlp(
                net.in_features, net.hidden, net.out_features, log_prior_inclusion=net.log_lambda()
            )
        opt = make_optimizer(model.parameters(), "adam", net.lr)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            loss = _plain_nll(net, model(x), y) + reference_kl(model) / n
            loss.backward()
            opt.step()

    elif impl == BAYESIAN_TORCH:
        model = _bayesian_torch_model(net)
        opt = make_optimizer(model.parameters(), "adam", net.lr)

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            out, kl = model(x)
            loss = _plain_nll(net, out, y) + kl / n
            loss.backward()
            opt.step()

    else:
        raise ValueError(f"unknown implementation {impl!r}")
    return step, model


def build_replicate_step(
    net: NetSpec, n_replicates: int | None, seed: int = 0
) -> tuple[Callable[[], None], nn.Module]:
    """One training step on the Simulation II network, on fixed minibatch rows (the peak
    memory section's step; the timings use :func:`build_replicate_training`).

    With ``n_replicates = R`` the data are ``(R, n, p)`` and each replicate gets its own
    minibatch rows, gathered inside the step; otherwise ``(n, p)``.
    """
    gen = torch.Generator().manual_seed(seed)
    model = _svbnn_model(net, gen, n_replicates)
    lik = GaussianLikelihood(1.0)
    opt = make_optimizer(model.parameters(), "adam", net.lr)
    n, m = net.n_train, net.batch
    if n_replicates is None:
        X = torch.randn(n, net.in_features, generator=gen)
        y = torch.randn(n, generator=gen)
        idx = torch.randperm(n, generator=gen)[:m]

        def step() -> None:
            loss, _, _ = negative_elbo(model, lik, X[idx], y[idx], n)
            opt.zero_grad(set_to_none=True)
            loss.sum().backward()
            opt.step()

    else:
        R = n_replicates
        X = torch.randn(R, n, net.in_features, generator=gen)
        y = torch.randn(R, n, generator=gen)
        idx = torch.argsort(torch.rand(R, n, generator=gen), dim=1)[:, :m]
        # train's gather: one index_select on the (R n, p) view.
        flat_idx = (idx + n * torch.arange(R).unsqueeze(1)).reshape(-1)
        X_rows, y_rows = X.view(R * n, -1), y.view(R * n)

        def step() -> None:
            xb = X_rows.index_select(0, flat_idx).view(R, m, -1)
            yb = y_rows.index_select(0, flat_idx).view(R, m)
            loss, _, _ = negative_elbo(model, lik, xb, yb, n)
            opt.zero_grad(set_to_none=True)
            loss.sum().backward()
            opt.step()

    return step, model


# -- timing --------------------------------------------------------------------------------
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


# -- memory (subprocess per configuration) -------------------------------------------------
def _proc_status_bytes(key: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{key} not in /proc/self/status")


def _reset_peak_rss() -> bool:
    """Reset the kernel's peak-RSS mark (VmHWM) to the current RSS (Linux >= 4.0)."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def memory_child(config: str, threads: int, cnn_hidden: int, cnn_batch: int, steps: int) -> None:
    """Entry point of the memory subprocess: print its peak RSS as JSON.

    ``VmHWM`` (the peak RSS of this process image) is used rather than ``getrusage``'s
    ``ru_maxrss``, which Linux carries over ``execve`` from the forking parent and so
    would report the parent's peak. Before the steps the mark is reset, so the second
    reading is the peak while training.
    """
    torch.set_num_threads(threads)
    what, impl = config.split(":")
    nets = network_specs(cnn_hidden, cnn_batch)
    if what.startswith("rep"):
        R = int(what[3:])
        step, _ = build_replicate_step(nets["sim2"], R if R > 1 else None)
    else:
        step, _ = build_step(nets[what], impl)
    gc.collect()
    setup_peak = _proc_status_bytes("VmHWM")
    before = _proc_status_bytes("VmRSS")
    reset = _reset_peak_rss()
    for _ in range(steps):
        step()
    steps_peak = _proc_status_bytes("VmHWM")
    print(
        json.dumps(
            {
                "config": config,
                "peak_rss": max(setup_peak, steps_peak),
                "rss_before": before,
                "steps_peak": steps_peak if reset else None,
            }
        )
    )


def measure_memory(
    configs: list[str], args: argparse.Namespace, workers: int = 1
) -> dict[str, dict[str, int] | str]:
    """Run one subprocess per configuration; returns bytes, or an error string.

    ``workers`` subprocesses may run at once: a process's peak RSS does not depend on
    what else the machine is doing (only run this after the timings).
    """
    root = Path(__file__).resolve().parent.parent

    def one(config: str) -> dict[str, int] | str:
        cmd = [sys.executable, "-m", "benchmarks.run", "--memory-child", config]
        cmd += ["--threads", str(args.threads), "--cnn-hidden", str(args.cnn_hidden)]
        cmd += ["--cnn-batch", str(args.cnn_batch), "--memory-steps", str(args.memory_steps)]
        if args.kernels is not None:
            cmd += ["--kernels", args.kernels]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=root, check=False)
        if proc.returncode != 0:
            return f"failed: {proc.stderr.strip().splitlines()[-1:]}"
        rec: dict[str, int] = json.loads(proc.stdout.strip().splitlines()[-1])
        return rec

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        results = list(pool.map(one, configs))
    return dict(zip(configs, results, strict=True))


# -- profiling -----------------------------------------------------------------------------
def profile_step(step: Callable[[], None], n_steps: int, row_limit: int = 15) -> str:
    """torch.profiler table (self CPU time) of ``n_steps`` training steps."""
    from torch.profiler import ProfilerActivity, profile

    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(n_steps):
            step()
    table: str = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=row_limit)
    return table


# -- results -------------------------------------------------------------------------------
@dataclass
class Row:
    """One measured quantity (the CSV/JSON record)."""

    section: str
    network: str
    implementation: str
    metric: str
    unit: str
    median: float | None
    q1: float | None = None
    q3: float | None = None
    n: int | None = None
    note: str = ""


@dataclass
class Target:
    """A pass/fail performance target."""

    name: str
    measured: float | None
    op: str  # "<=" or ">="
    threshold: float
    note: str = ""
    profile: str | None = None  # what to profile when missed: a network key or "rep30"

    @property
    def passed(self) -> bool | None:
        if self.measured is None:
            return None
        if self.op == "<=":
            return self.measured <= self.threshold
        return self.measured >= self.threshold


@dataclass
class Report:
    meta: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    markdown: list[str] = field(default_factory=list)
    profiles: dict[str, str] = field(default_factory=dict)
    breakdown: dict[str, dict[str, Timing]] = field(default_factory=dict)
    rep_breakdown: dict[str, Timing] = field(default_factory=dict)


def _fmt(t: Timing | None, scale: float = 1e3, digits: int = 3) -> str:
    if t is None:
        return "skipped"
    return f"{_sig(t.median * scale, digits)} [{_sig(t.q1 * scale, 2)}–{_sig(t.q3 * scale, 2)}]"


def _sig(v: float, digits: int) -> str:
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    places = max(0, digits - 1 - int(math.floor(math.log10(abs(v)))))
    return f"{v:.{places}f}"


def _fmt_ratio(r: tuple[float, float, float] | None) -> str:
    if r is None:
        return "skipped"
    return f"{r[0]:.2f}x [{r[1]:.2f}–{r[2]:.2f}]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


# -- the sections --------------------------------------------------------------------------
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
            report.rows.append(
                Row(
                    "train_step",
                    net.key,
                    impl,
                    "time_per_step",
                    "ms",
                    t.median * 1e3,
                    t.q1 * 1e3,
                    t.q3 * 1e3,
                    len(t.per_round),
                    f"{t.steps_per_block} steps per block",
                )
            )
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
        model = _svbnn_model(net, gen, R)

        def fn() -> None:
            train_model(model, X, y, lik, **kw)

    else:
        models = [_svbnn_model(net, gen) for _ in range(R)]

        def fn() -> None:
            for r, one in enumerate(models):
                train_model(one, X[r], y[r], lik, **kw)

    return fn, epochs * math.ceil(n / m)


def _per_step(t: Timing, steps: int) -> Timing:
    """A timing of calls that take ``steps`` steps each, as time per step."""
    return Timing([v / steps for v in t.per_round], t.steps_per_block * steps)


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
    b = _per_step(t["batched"], steps)
    s = _per_step(t["sequential"], steps * N_REPLICATES)
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
        ("batched/sequential", "throughput_ratio", "ratio", _rep_ratios(b, s)),
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


def _rep_ratios(b: Timing, s: Timing) -> list[float]:
    """Per-round throughput ratios: R sequential replicate-steps over one batched step."""
    return [N_REPLICATES * sv / bv for bv, sv in zip(b.per_round, s.per_round, strict=True)]


def sparse_mnist_model(net: NetSpec, target_density: float, seed: int) -> nn.Module:
    """An MNIST SVBNN whose inclusion probabilities mimic a fitted sparse network.

    A random ``target_density`` fraction of all weights and biases (seeded) gets
    ``phi = sigmoid(4) ~ 0.98``, the rest ``phi = sigmoid(-4) ~ 0.02``.
    """
    gen = torch.Generator().manual_seed(seed)
    model = _svbnn_model(net, gen)
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
    dense = _dense_model(net).eval()
    sizes = {"exported": rep.size_bytes, "dense": module_size_bytes(dense)}
    gen = torch.Generator().manual_seed(4)
    out: dict[str, Any] = {"sizes": sizes, "density": rep.density, "latency": {}}
    for batch in (1, 1000):
        x = torch.randn(batch, net.in_features, generator=gen)

        def fwd(m: nn.Module = exported, x: Tensor = x) -> None:
            with torch.inference_mode():
                m(x)

        def fwd_dense(m: nn.Module = dense, x: Tensor = x) -> None:
            with torch.inference_mode():
                m(x)

        t = time_interleaved(
            {"exported": fwd, "dense": fwd_dense},
            args.repeats,
            args.min_block_ms / 1e3,
            args.warmup,
        )
        out["latency"][batch] = t
        for name, tt in t.items():
            report.rows.append(
                Row(
                    "inference",
                    net.key,
                    name,
                    f"latency_batch_{batch}",
                    "ms",
                    tt.median * 1e3,
                    tt.q1 * 1e3,
                    tt.q3 * 1e3,
                    len(tt.per_round),
                )
            )
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
            rep.density,
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
    return out


# -- main ----------------------------------------------------------------------------------
def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--repeats", type=int, default=15, help="timed rounds per measurement (CNN: --cnn-repeats)"
    )
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    p.add_argument(
        "--quick",
        action="store_true",
        help="tiny smoke-test mode: few rounds, small CNN batch; numbers meaningless",
    )
    p.add_argument("--out", default="results/bench", help="output folder")
    p.add_argument(
        "--networks",
        default="sim2,uci,mnist,cnn",
        help="comma-separated subset of sim2,uci,mnist,cnn for sections 1, 2, 4",
    )
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    p.add_argument(
        "--no-profile",
        action="store_true",
        help="do not profile the SVBNN step of networks that miss a target",
    )
    p.add_argument(
        "--cnn-hidden",
        type=int,
        default=512,
        help="width of the CNN's hidden FC layer (the paper leaves it open)",
    )
    p.add_argument("--cnn-batch", type=int, default=1024)
    p.add_argument("--cnn-repeats", type=int, default=3)
    p.add_argument(
        "--min-block-ms",
        type=float,
        default=50.0,
        help="each timed block runs at least this long (many steps for small nets)",
    )
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument(
        "--rep-epochs",
        type=int,
        default=2,
        help="epochs of train() per timed round in the replication section",
    )
    p.add_argument("--rep-repeats", type=int, default=9, help="rounds of the replication section")
    p.add_argument(
        "--density",
        type=float,
        default=0.05,
        help="fraction of MNIST weights with phi > 0.5 for the export benchmark",
    )
    p.add_argument("--memory-steps", type=int, default=3)
    p.add_argument(
        "--memory-workers",
        type=int,
        default=2,
        help="memory subprocesses run at once (after the timings; peak RSS is unaffected)",
    )
    p.add_argument(
        "--kernels",
        choices=["eager", "compiled", "auto"],
        default=None,
        help="svbnn's elementwise kernel backend (default: the library's, i.e. SVBNN_KERNELS "
        "or eager); 'compiled' uses torch.compile (needs a C++ compiler), 'auto' compiles "
        "for large parameter tensors only",
    )
    p.add_argument("--memory-child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.quick:
        args.repeats, args.cnn_repeats, args.warmup = 3, 2, 1
        args.rep_epochs, args.rep_repeats = 1, 2
        args.min_block_ms, args.cnn_batch, args.memory_steps = 0.0, 16, 1
        args.no_profile = True
    if min(args.repeats, args.cnn_repeats, args.threads, args.rep_epochs, args.rep_repeats) < 1:
        p.error(
            "--repeats, --cnn-repeats, --threads, --rep-epochs and --rep-repeats must be positive"
        )
    return args


def main(argv: Sequence[str] | None = None) -> Report:
    """Run the benchmark; returns the report (also written to ``--out``)."""
    args = _parse(argv)
    torch.set_num_threads(args.threads)
    if args.kernels is not None:
        set_backend(args.kernels)
    if args.memory_child:
        memory_child(
            args.memory_child, args.threads, args.cnn_hidden, args.cnn_batch, args.memory_steps
        )
        return Report(meta={})
    try:
        torch.set_num_interop_threads(args.threads)
    except RuntimeError:
        pass
    all_nets = network_specs(args.cnn_hidden, args.cnn_batch)
    keys = [k.strip() for k in args.networks.split(",") if k.strip()]
    bad = [k for k in keys if k not in all_nets]
    if bad:
        raise SystemExit(f"unknown network(s) {bad}; choose from {sorted(all_nets)}")
    nets = [all_nets[k] for k in keys]
    bt_ok, bt_info = bayesian_torch_available()
    impls = [DENSE, SVBNN, REFERENCE] + ([BAYESIAN_TORCH] if bt_ok else [])
    started = time.perf_counter()
    report = Report(
        meta={
            "torch": torch.__version__,
            "threads": torch.get_num_threads(),
            "python": platform.python_version(),
            "machine": f"{platform.machine()}, {os.cpu_count()} logical CPUs",
            "processor": platform.processor() or platform.machine(),
            "bayesian_torch": bt_info if bt_ok else f"not importable ({bt_info})",
            "svbnn_kernels": backend().value,
            "quick": args.quick,
            "repeats": args.repeats,
            "cnn_repeats": args.cnn_repeats,
            "cnn_hidden": args.cnn_hidden,
            "cnn_batch": args.cnn_batch,
            "min_block_ms": args.min_block_ms,
            "density": args.density,
        }
    )

    print("timing training steps ...", file=sys.stderr)
    train = run_training(report, nets, impls, args)
    print("timing replications ...", file=sys.stderr)
    reps = run_replicates(report, all_nets["sim2"], args)
    print("timing inference ...", file=sys.stderr)
    inf = run_inference(report, all_nets["mnist"], args)
    mem: dict[str, dict[str, int] | str] = {}
    if not args.no_memory:
        print("measuring peak memory (one subprocess per configuration) ...", file=sys.stderr)
        configs = [f"{n.key}:{i}" for n in nets for i in impls]
        configs += [f"rep{N_REPLICATES}:{SVBNN}", f"rep1:{SVBNN}"]
        if args.quick:  # each subprocess pays the torch import: keep the smoke test short
            configs = [f"{nets[0].key}:{DENSE}", f"{nets[0].key}:{SVBNN}"]
        mem = measure_memory(configs, args, workers=args.memory_workers)
        for config, rec in mem.items():
            what, impl = config.split(":")
            if isinstance(rec, str):
                report.rows.append(Row("memory", what, impl, "peak_rss", "MiB", None, note=rec))
                continue
            report.rows.append(
                Row(
                    "memory",
                    what,
                    impl,
                    "peak_rss",
                    "MiB",
                    rec["peak_rss"] / 2**20,
                    note=f"{args.memory_steps} steps in a fresh process",
                )
            )
            if rec.get("steps_peak") is not None:
                report.rows.append(
                    Row(
                        "memory",
                        what,
                        impl,
                        "step_working_memory",
                        "MiB",
                        (rec["steps_peak"] - rec["rss_before"]) / 2**20,
                        note="peak during the steps - RSS before them",
                    )
                )

    _targets(report, train, reps, inf, all_nets)
    if not args.no_profile:
        print("profiling ...", file=sys.stderr)
        _profile_misses(report, all_nets, args)
        report.rep_breakdown = replicate_breakdown(all_nets["sim2"], args)
        _breakdown_rows(report, f"rep{N_REPLICATES}", report.rep_breakdown)
        for net in nets:
            if net.kind == "mlp":
                report.breakdown[net.key] = phase_breakdown(net, args)
                _breakdown_rows(report, net.key, report.breakdown[net.key])
    report.meta["wall_s"] = round(time.perf_counter() - started, 1)
    _markdown(report, nets, impls, train, reps, inf, mem, bt_ok, args)
    _write(report, Path(args.out))
    print("\n".join(report.markdown))
    return report


def _breakdown_rows(report: Report, what: str, pieces: dict[str, Timing]) -> None:
    """The CSV/JSON rows of one "where the time goes" table."""
    for piece, t in pieces.items():
        report.rows.append(
            Row(
                "breakdown",
                what,
                SVBNN,
                piece,
                "ms",
                t.median * 1e3,
                t.q1 * 1e3,
                t.q3 * 1e3,
                len(t.per_round),
            )
        )


def _targets(
    report: Report,
    train: dict[str, dict[str, Timing]],
    reps: dict[str, Timing],
    inf: dict[str, Any],
    nets: dict[str, NetSpec],
) -> None:
    def ratio(key: str, num: str, den: str) -> float | None:
        res = train.get(key, {})
        if num not in res or den not in res:
            return None
        return paired_ratio(res[num], res[den])[0]

    for key, limit in (("mnist", 1.5), ("sim2", 2.0), ("uci", 2.0)):
        report.targets.append(
            Target(
                f"SVBNN/dense step time, {nets[key].label}",
                ratio(key, SVBNN, DENSE),
                "<=",
                limit,
                profile=key,
            )
        )
    report.targets.append(
        Target(
            "SVBNN speedup over reference, MNIST",
            ratio("mnist", REFERENCE, SVBNN),
            ">=",
            2.0,
            profile="mnist",
        )
    )
    bt = ratio("mnist", BAYESIAN_TORCH, SVBNN)
    bt_ok = bayesian_torch_available()[0]
    bt_note = "" if bt_ok else f"bayesian-torch not importable: `{BT_INSTALL}`"
    report.targets.append(
        Target("SVBNN speedup over bayesian-torch, MNIST", bt, ">=", 2.0, bt_note, profile="mnist")
    )
    thr = statistics.median(_rep_ratios(reps["batched"], reps["single"]))
    report.targets.append(
        Target(
            f"throughput, {N_REPLICATES} batched / sequential replications",
            thr,
            ">=",
            10.0,
            profile=f"rep{N_REPLICATES}",
        )
    )
    sizes = inf["sizes"]
    report.targets.append(
        Target(
            "size on disk, dense / exported sparse MNIST",
            sizes["dense"] / sizes["exported"],
            ">=",
            10.0,
        )
    )


def _profile_misses(report: Report, nets: dict[str, NetSpec], args: argparse.Namespace) -> None:
    """torch.profiler tables of the SVBNN step behind every missed timing target."""
    missed = sorted({t.profile for t in report.targets if t.passed is False and t.profile})
    for key in missed:
        if key.startswith("rep"):
            # train() for one epoch a call: what the batched run really does per step.
            step, per_call = build_replicate_training(nets["sim2"], int(key[3:]), True, 1, seed=5)
            label = f"SVBNN training, {N_REPLICATES} batched Simulation II replications"
            n_calls = 3
        else:
            step, _ = build_step(nets[key], SVBNN, seed=5)
            label = f"SVBNN training step, {nets[key].label}"
            per_call, n_calls = 1, 10 if nets[key].kind != "mlp" or key == "mnist" else 200
        n_steps = n_calls * per_call
        report.profiles[label] = (
            f"{n_steps} steps; divide times by {n_steps} for per-step values\n"
            + profile_step(step, n_calls)
        )


def _forward_traffic(mu: Tensor, rho: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor]:
    """The least a draw + KL forward reads and writes: 3 arrays in, the weights and a sum out."""
    theta = mu + rho + alpha
    return theta, theta.sum(-1)


def _backward_traffic(*arrays: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The least its backward reads and writes: the incoming gradient and the 3 parameter
    arrays in, 3 gradients out."""
    g, mu, rho, alpha = arrays
    return g + mu, g + rho, g + alpha


def phase_breakdown(net: NetSpec, args: argparse.Namespace) -> dict[str, Timing]:
    """Where an SVBNN training step spends its time, piece by piece (DESIGN section 6).

    Pieces of the step ``SpikeSlabMLP`` runs, each timed on its own (interleaved): the
    noise (``rand`` + ``randn``; the compiled kernel hashes its noise inside instead); the
    draw of all weights with the exact KL, forward + backward, as the one fused function the
    step uses, and the memory floor of any such function (the arrays it must read and
    write, no arithmetic); the network forward + backward on those flat weights; the same
    network with plain ``nn.Linear`` weights (a dense step without its optimiser); the Adam
    step over the
    variational parameters; the full step.
    """
    from svbnn.nn.spike_slab import _FlatMLP

    step, model = build_step(net, SVBNN, seed=6)
    step()  # creates the gradients and the Adam state
    assert isinstance(model, SpikeSlabMLP)
    layers = model.layers()
    gen = torch.Generator().manual_seed(7)
    dense = _dense_model(net)
    x, y = _batch(net, gen)

    def draws() -> None:
        torch.rand(model.mu.shape, generator=gen)
        torch.randn(model.mu.shape, generator=gen)

    ones = torch.ones_like(model.mu)

    def draw_kl() -> None:
        model.zero_grad(set_to_none=True)
        theta, kl = model._draw_with_kl(layers[0])
        torch.autograd.backward([theta, kl], [ones, torch.ones_like(kl)])

    shapes = tuple((layer.out_features, layer.fan_in) for layer in layers)
    theta = (model.mu.detach() * 1.0).requires_grad_()

    def flat_net() -> None:
        theta.grad = None
        out = _FlatMLP.apply(theta, x, shapes, model.activation)
        loss = (
            F.mse_loss(out.squeeze(-1), y) if net.task == "regression" else F.cross_entropy(out, y)
        )
        loss.backward()

    def matmuls() -> None:
        dense.zero_grad(set_to_none=True)
        out = dense(x)
        loss = (
            F.mse_loss(out.squeeze(-1), y) if net.task == "regression" else F.cross_entropy(out, y)
        )
        loss.backward()

    # A separate Adam over the same parameters: it always finds gradients, because
    # ``draw_kl`` (run before it in every round) leaves them in place.
    adam_opt = make_optimizer(model.parameters(), "adam", net.lr)
    adam_opt.step()

    # Memory floor: compiled loops that read and write only what any draw + KL function must
    # (forward: mu, rho, alpha in, the weights out; backward: the weights' gradient and the
    # parameters in, their 3 gradients out), with one addition per output instead of the
    # noise and the transcendentals. The fused kernels move more than this: they save 5
    # factors for the backward instead of recomputing the noise and transcendentals.
    params = (model.mu.detach(), model.rho.detach(), model.alpha.detach())
    grad_theta = torch.randn(model.mu.shape, generator=gen)
    fwd_floor = torch.compile(_forward_traffic, dynamic=False)
    bwd_floor = torch.compile(_backward_traffic, dynamic=False)

    fns = {
        "rand + randn noise (eager kernels only)": draws,
        "draw + exact KL, fwd + bwd (one fused function)": draw_kl,
        "memory floor of that function (3 arrays in, 1 out; 4 in, 3 out)": lambda: (
            fwd_floor(*params),
            bwd_floor(grad_theta, *params),
        ),
        "network fwd + bwd on the flat weights": flat_net,
        "same network, plain nn.Linear weights (dense, no optimiser)": matmuls,
        "Adam step (3 x T parameters)": adam_opt.step,
        "full SVBNN step": step,
    }
    return time_interleaved(fns, args.repeats, args.min_block_ms / 1e3, args.warmup)


def replicate_breakdown(net: NetSpec, args: argparse.Namespace) -> dict[str, Timing]:
    """Pieces of the batched Simulation II step (R replicates), timed on their own: the
    minibatch gather (R x m x p floats from R data sets, which together exceed the cache;
    each call other rows, as in training), the first layer's two products on a gathered
    minibatch (forward ``W X^T``, backward ``G X``; the feature-major layout the
    replicated network runs), and the full step (``train``, one epoch a call)."""
    R, n, m, p = N_REPLICATES, net.n_train, net.batch, net.in_features
    h = net.hidden[0]
    gen = torch.Generator().manual_seed(8)
    X = torch.randn(R * n, p, generator=gen)
    order = replicate_orders(R, n, gen) + n * torch.arange(R).unsqueeze(1)
    batches = [order[:, i : i + m].reshape(-1) for i in range(0, n - m + 1, m)]
    xb = X.index_select(0, batches[0]).view(R, m, p)
    w = torch.randn(R, h, p, generator=gen)
    b = torch.randn(R, h, 1, generator=gen)
    g = torch.randn(R, h, m, generator=gen)
    step, steps = build_replicate_training(net, R, True, 1, seed=9)
    rows = itertools.cycle(batches)

    def gather() -> Tensor:
        return X.index_select(0, next(rows))

    fns = {
        f"minibatch gather ({R} x {m} x {p} floats)": gather,
        "first layer: forward + weight-gradient products": lambda: (
            torch.baddbmm(b, w, xb.transpose(1, 2)),
            torch.bmm(g, xb),
        ),
        "full batched step": step,
    }
    t = time_interleaved(fns, args.repeats, args.min_block_ms / 1e3, args.warmup)
    t["full batched step"] = _per_step(t["full batched step"], steps)
    return t


def _markdown(
    report: Report,
    nets: list[NetSpec],
    impls: list[str],
    train: dict[str, dict[str, Timing]],
    reps: dict[str, Timing],
    inf: dict[str, Any],
    mem: dict[str, dict[str, int] | str],
    bt_ok: bool,
    args: argparse.Namespace,
) -> None:
    md = report.markdown
    m = report.meta
    md.append("# svbnn benchmark")
    md.append("")
    md.append(
        f"torch {m['torch']}, **{m['threads']} thread(s)**, Python {m['python']}, "
        f"{m['machine']}; svbnn kernels: {m['svbnn_kernels']}; "
        f"bayesian-torch: {m['bayesian_torch']}."
    )
    md.append(
        f"Medians over {args.repeats} interleaved rounds (CNN: {args.cnn_repeats}) "
        "with [interquartile range]; ratios are medians of per-round ratios."
    )
    if args.quick:
        md.append("**Quick mode: smoke test only, the numbers are not measurements.**")
    if not bt_ok:
        md.append(f"bayesian-torch column skipped: not importable. Install with `{BT_INSTALL}`.")
    md.append("")
    md.append("## 1-2. Training step (forward, backward, Adam step), ms")
    md.append("")
    all_impls = [DENSE, SVBNN, REFERENCE, BAYESIAN_TORCH]
    header = ["network", "T (params)", "batch"] + [IMPL_LABELS[i] for i in all_impls]
    header += ["SVBNN/dense", "reference/SVBNN", "bayesian-torch/SVBNN"]
    rows = []
    for net in nets:
        res = train[net.key]
        row = [f"{net.label} ({net.arch()})", f"{net.n_params():,}", str(net.batch)]
        row += [_fmt(res.get(i)) for i in all_impls]
        row.append(_fmt_ratio(paired_ratio(res[SVBNN], res[DENSE])))
        for other in (REFERENCE, BAYESIAN_TORCH):
            row.append(
                _fmt_ratio(paired_ratio(res[other], res[SVBNN])) if other in res else "skipped"
            )
        rows.append(row)
    md += _table(header, rows)
    md.append("")
    md.append(
        "All use the same Adam (`svbnn.training.make_optimizer`). SVBNN: "
        "`SpikeSlabMLP`/`SpikeSlabConv2d` + `negative_elbo`; reference: "
        "`benchmarks/reference.py` (Algorithm 1 with plain autograd); bayesian-torch: "
        "`LinearReparameterization`/`Conv2dReparameterization` (Gaussian mean field). "
        "Data: one fixed synthetic minibatch. CNN: hidden FC width "
        f"{args.cnn_hidden} (the supplement gives only the 64*8*8 input), "
        f"{args.cnn_repeats} rounds of 1 step."
    )
    md.append("")
    md.append(f"## 3. {N_REPLICATES} replications of Simulation II")
    md.append("")
    b, s = reps["batched"], reps["single"]
    thr_b = [N_REPLICATES / v for v in b.per_round]
    thr_s = [1.0 / v for v in s.per_round]
    ratio = _rep_ratios(b, s)
    md += _table(
        ["mode", "time per step, ms", "replicate-steps/s", "throughput ratio"],
        [
            [
                f"batched: one `SpikeSlabMLP(..., n_replicates={N_REPLICATES})`, data "
                f"({N_REPLICATES}, n, p)",
                _fmt(b),
                f"{statistics.median(thr_b):,.0f}",
                f"{statistics.median(ratio):.1f}x [{np.percentile(ratio, 25):.1f}–"
                f"{np.percentile(ratio, 75):.1f}]",
            ],
            [
                f"sequential: {N_REPLICATES} one-replicate networks trained one after "
                "another (time per step of one replicate)",
                _fmt(s),
                f"{statistics.median(thr_s):,.0f}",
                "1x",
            ],
        ],
    )
    md.append("")
    md.append(
        f"Both are `svbnn.training.train` runs of {args.rep_epochs} epoch(s) a round (every "
        f"replicate: n = 3000, minibatches of 512, a new random order each epoch, the last "
        f"minibatch 440), on synthetic data of Simulation II's shape; {args.rep_repeats} "
        "interleaved rounds. Throughput ratio = (time of the 30 sequential runs) / (time of "
        "the batched run), per round."
    )
    md.append("")
    if mem:
        md.append("## 4. Peak memory, MiB: peak RSS of a fresh process (+ the steps' working set)")
        md.append("")
        md.append(
            f"Peak RSS (`VmHWM`) of one fresh subprocess per configuration that builds "
            f"the model and data and runs {args.memory_steps} training steps; in brackets "
            "the peak during the steps minus the RSS just before them (the steps' own "
            "working memory). The torch runtime alone (~300 MiB, imports included) is "
            "most of the total on small nets."
        )
        md.append("")

        def cell(config: str) -> str:
            rec = mem.get(config)
            if rec is None:
                return "skipped"
            if isinstance(rec, str):
                return rec
            total = f"{rec['peak_rss'] / 2**20:.0f}"
            if rec.get("steps_peak") is None:
                return total
            return f"{total} (+{(rec['steps_peak'] - rec['rss_before']) / 2**20:.1f})"

        md += _table(
            ["network"] + [IMPL_LABELS[i] for i in all_impls],
            [[net.label] + [cell(f"{net.key}:{i}") for i in all_impls] for net in nets]
            + [
                [label, "", cell(f"{config}:{SVBNN}"), "", ""]
                for label, config in (
                    (f"Sim II replications: {N_REPLICATES} batched", f"rep{N_REPLICATES}"),
                    ("Sim II replications: one replicate", "rep1"),
                )
            ],
        )
        md.append("")
    md.append("## 5. Inference: exported sparse MNIST network vs dense")
    md.append("")
    lat = inf["latency"]
    md += _table(
        [
            "model",
            "density",
            "size on disk, bytes",
            "latency batch 1, ms",
            "latency batch 1000, ms",
        ],
        [
            [
                "`export_sparse` (CSR `SparseLinear`)",
                f"{inf['density']:.2%}",
                f"{inf['sizes']['exported']:,}",
                _fmt(lat[1]["exported"], digits=3),
                _fmt(lat[1000]["exported"]),
            ],
            [
                "dense `nn.Linear` 784-512-512-10",
                "100%",
                f"{inf['sizes']['dense']:,}",
                _fmt(lat[1]["dense"], digits=3),
                _fmt(lat[1000]["dense"]),
            ],
        ],
    )
    md.append("")
    md.append(
        f"Sparsity is **not** trained (training MNIST is too long for a benchmark): "
        f"a seeded random {args.density:.0%} of the weights get phi = 0.98, the rest "
        "0.02, as SVBNN reaches about 5% on MNIST in the paper. Size = bytes of "
        "`torch.save(state_dict)` (`svbnn.selection.module_size_bytes`)."
    )
    md.append("")
    md.append("## Targets")
    md.append("")
    trows = []
    for t in report.targets:
        meas = "skipped" if t.measured is None else f"{t.measured:.2f}x"
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[t.passed]
        trows.append(
            [t.name, meas, f"{t.op} {t.threshold:g}x", verdict + (f" ({t.note})" if t.note else "")]
        )
    md += _table(["target", "measured", "required", "pass"], trows)
    md.append("")
    md.append(f"Total wall time {report.meta['wall_s']} s.")
    if report.breakdown:
        md.append("")
        md.append("## Where the time goes: pieces of the SVBNN step timed separately, ms")
        md.append("")
        keys = list(report.breakdown)
        pieces = list(report.breakdown[keys[0]])
        md += _table(
            ["piece"] + [next(n.label for n in nets if n.key == k) for k in keys],
            [[p] + [_fmt(report.breakdown[k][p]) for k in keys] for p in pieces],
        )
        md.append("")
        md.append(
            f"With `--kernels auto` the step of a network under {AUTO_MIN_NUMEL:,} parameters "
            "runs its draw, KL, layers and likelihood as one compiled graph "
            "(`svbnn._kernels.mlp_negative_elbo`); for those networks the pieces above are "
            "the eager kernels of the other path. Larger networks (MNIST) run the pieces as "
            "timed: the draw + KL function compiled. The memory floor row is what any draw + "
            "KL function must move (read the 3 parameter arrays and write the weights; read "
            "them and the weights' gradient and write 3 gradients), in compiled loops that do "
            "one addition per output."
        )
    if report.rep_breakdown:
        md.append("")
        md.append(f"## Where the time goes: the batched step of {N_REPLICATES} replicates, ms")
        md.append("")
        md += _table(["piece", "ms"], [[k, _fmt(t)] for k, t in report.rep_breakdown.items()])
    for key, prof in report.profiles.items():
        md.append("")
        md.append(f"## torch.profiler: {key} (a target missed; sorted by self CPU time)")
        md.append("")
        md.append("```")
        md.append(prof.rstrip())
        md.append("```")


def _write(report: Report, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.md").write_text("\n".join(report.markdown) + "\n")
    with open(out / "bench.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(asdict(report.rows[0]).keys()))
        writer.writeheader()
        for row in report.rows:
            writer.writerow(asdict(row))
    payload = {
        "meta": report.meta,
        "rows": [asdict(r) for r in report.rows],
        "targets": [{**asdict(t), "passed": t.passed} for t in report.targets],
        "profiles": report.profiles,
    }
    (out / "bench.json").write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
