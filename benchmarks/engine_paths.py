"""Each fast path of a ``SpikeSlabMLP`` training step against the plain path it replaces.

Run ``python -m benchmarks.engine_paths --rounds 15 --out DIR``. DESIGN section 6.1 lists
the seven paths a training step can take; paths 2-7 are fast paths. For each network on
which the library picks a fast path (the networks of ``make bench``, an estimator-sized one,
and MNIST's network with hidden layers of 64 to 384 units, where the eager backend stops
taking path 2 at ``EAGER_FUSED_MAX_NUMEL`` parameters), this forces that path and the paths
that would run without it, through the switches that exist (the ``kernel_backend`` scope,
``SpikeSlabMLP(fused=False)``, ``SVBNN_NATIVE=0``) and, where path 7 must be turned away
alone (no switch of the library does that: ``SVBNN_NATIVE=0`` turns every native loop off),
a patch local to this benchmark of ``svbnn._engine.fused.native_step_ok`` to ``False``, so
that the native backend's or ``auto``'s next choice runs. Before timing, one step of every
variant runs with the engine's entry points watched (:func:`observed_paths`); a variant that
takes another path than the one it names stops the run instead of timing the wrong thing.

Method: one torch thread; every variant has its own model, optimiser (svbnn's Adam) and
fixed minibatch; a step is what ``svbnn.training.train`` runs (zero grad, ``negative_elbo``,
backward, optimiser step). Warm-up first (the first step's time is reported apart: it
includes ``torch.compile``'s compile of the compiled variants, or loading it from
inductor's on-disk cache). Then ``--rounds`` rounds; in each, every variant of a network
runs one untimed step and then ``N`` timed steps (``N`` the same for all variants of a
network, chosen so that the slowest variant's block lasts about ``--block-ms``), in an order
rotated by one each round. Per comparison, the per-round ratios fast / other give the
median and quartiles; the issue's rule keeps a fast path where the upper quartile is below
:data:`KEEP_BELOW` (``KEEP``), else it is a ``DROP`` candidate.

Writes ``report.md`` and ``results.csv`` (one row per comparison) and ``variants.csv`` (one
row per variant) into ``--out``, atomically, with the command, CPU, torch version and date.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as _dt
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

import svbnn.nn.spike_slab as _spike_slab
from svbnn._engine import fused as _fused
from svbnn._engine import native as _native
from svbnn._engine import paths as _paths
from svbnn._engine.kernels import backend_scope
from svbnn.nn.base import set_generator
from svbnn.nn.spike_slab import SpikeSlabMLP
from svbnn.objectives import CategoricalLikelihood, GaussianLikelihood
from svbnn.training import make_optimizer, negative_elbo
from svbnn_experiments.files import atomic_write_text, environment_info, write_csv

from .export_latency import _cpu_model
from .networks import NetSpec, network_specs

KEEP_BELOW = 0.91
"""The issue's rule: keep a fast path where the upper quartile of its time over the other
path's, over the rounds, is below this."""


@dataclass(frozen=True)
class Variant:
    """One way to run a training step: the path it should take and the switches that
    force it (kernel backend, ``fused``, ``SVBNN_NATIVE``, path 7 turned away)."""

    key: str
    path: int
    what: str
    backend: str
    fused: bool = True
    native: bool = True
    native_step: bool = True
    force_path2: bool = False


VARIANTS: dict[str, Variant] = {
    v.key: v
    for v in (
        Variant("L1", 1, "layer by layer, eager kernels (fused=False)", "eager", fused=False),
        Variant(
            "E1",
            1,
            "the eager backend on a network of EAGER_FUSED_MAX_NUMEL parameters or more: "
            "layer by layer",
            "eager",
        ),
        Variant(
            "F2",
            2,
            "fused draw + KL, eager (the eager backend; at any size: EAGER_FUSED_MAX_NUMEL raised)",
            "eager",
            force_path2=True,
        ),
        Variant("I3", 3, "fused draw + KL compiled by inductor (compiled backend)", "compiled"),
        Variant("N4", 4, "fused draw + KL on the C++ loops (native backend)", "native"),
        Variant(
            "N4s",
            4,
            "fused draw + KL on the C++ loops, path 7 turned away (auto, below 12,288 parameters)",
            "auto",
            native_step=False,
        ),
        Variant(
            "N4n",
            4,
            "fused draw + KL on the C++ loops, path 7 turned away (native backend)",
            "native",
            native_step=False,
        ),
        Variant("G5", 5, "whole negative ELBO as one compiled graph (auto)", "auto", native=False),
        Variant("G6", 6, "draw + forward as one compiled graph (auto)", "auto", native=False),
        Variant("N7", 7, "whole step as one autograd node on the C++ loops (auto)", "auto"),
        Variant(
            "N7n",
            7,
            "whole step as one autograd node on the C++ loops (native backend)",
            "native",
        ),
    )
}


@dataclass(frozen=True)
class Case:
    """A network, its likelihood and minibatch, the variants timed on it, and the
    comparisons ``(fast, other)`` made (variant keys)."""

    key: str
    label: str
    net: NetSpec
    where: str
    variants: tuple[str, ...]
    comparisons: tuple[tuple[str, str], ...]
    learn_noise: bool = False
    replicates: int | None = None


def _mnist_width(width: int) -> NetSpec:
    # MNIST's network and minibatch with two hidden layers of `width` units
    spec = network_specs(512, 1024)["mnist"]
    return dataclasses.replace(spec, key=f"mnist{width}", hidden=(width, width))


def _estimator_net(batch: int) -> NetSpec:
    return NetSpec(f"est{batch}", "estimator", "mlp", 30, (50,), 1, "regression", batch, 300, 1e-3)


def default_cases() -> dict[str, Case]:
    """The networks of ``make bench`` and an estimator-sized one, each with the fast paths
    the library picks on it and what would run in their place."""
    bench = network_specs(512, 1024)
    sim2, uci, mnist = bench["sim2"], bench["uci"], bench["mnist"]
    est = "SVBNNRegressor's default fit (kernel_backend='auto' runs native, noise learned)"
    cases = [
        Case(
            "sim2",
            "Simulation II 200-7-7-7-1, batch 512",
            sim2,
            "make bench, section 1 (auto: path 7)",
            ("L1", "F2", "G5", "N7"),
            (("F2", "L1"), ("G5", "L1"), ("G5", "F2"), ("N7", "L1"), ("N7", "F2"), ("N7", "G5")),
        ),
        Case(
            "sim2x5",
            "Simulation II x 5 replicates, batch 512",
            sim2,
            "auto below 12,288 parameters: path 7; path 4 where 7 does not apply",
            ("L1", "F2", "N4s", "N7"),
            (
                ("F2", "L1"),
                ("N4s", "L1"),
                ("N4s", "F2"),
                ("N7", "L1"),
                ("N7", "F2"),
                ("N7", "N4s"),
            ),
            replicates=5,
        ),
        Case(
            "sim2x30",
            "Simulation II x 30 replicates, batch 512",
            sim2,
            "make bench, section 3 (auto: path 7; path 3 where 7 does not apply)",
            ("L1", "F2", "I3", "N4n", "N7"),
            (
                ("F2", "L1"),
                ("I3", "L1"),
                ("I3", "F2"),
                ("N4n", "L1"),
                ("N4n", "F2"),
                ("N4n", "I3"),
                ("N7", "L1"),
                ("N7", "F2"),
                ("N7", "I3"),
                ("N7", "N4n"),
            ),
            replicates=30,
        ),
        Case(
            "uci",
            "UCI 8-50-1, batch 128",
            uci,
            "make bench, section 1 (auto: path 5)",
            ("L1", "F2", "G5"),
            (("F2", "L1"), ("G5", "L1"), ("G5", "F2")),
        ),
        Case(
            "uci-ln",
            "UCI 8-50-1, batch 128, noise learned",
            uci,
            "train(kernel_backend='auto') with GaussianLikelihood(learn_noise=True): path 6",
            ("L1", "F2", "G6"),
            (("F2", "L1"), ("G6", "L1"), ("G6", "F2")),
            learn_noise=True,
        ),
        Case(
            "mnist",
            "MNIST 784-512-512-10, batch 256",
            mnist,
            "make bench, section 1; benchmarks.estimator_speed (auto: path 3)",
            ("L1", "E1", "F2", "I3", "N4"),
            (
                ("F2", "L1"),
                ("F2", "E1"),
                ("I3", "L1"),
                ("I3", "F2"),
                ("N4", "L1"),
                ("N4", "F2"),
                ("N4", "I3"),
            ),
        ),
    ]
    for width in (64, 96, 128, 256, 384):
        net = _mnist_width(width)
        large = net.n_params() >= _paths.EAGER_FUSED_MAX_NUMEL
        cases.append(
            Case(
                net.key,
                f"MNIST's network with hidden widths {width}: {net.arch()} "
                f"({net.n_params():,} parameters), batch {net.batch}",
                net,
                "the eager backend (auto and compiled: path 3): where path 2 stops keeping",
                ("L1", "E1", "F2") if large else ("L1", "F2"),
                (("F2", "L1"), ("F2", "E1")) if large else (("F2", "L1"),),
            )
        )
    for batch in (128, 300):
        cases.append(
            Case(
                f"est{batch}",
                f"estimator 30-50-1, batch {batch} of 300 rows, noise learned",
                _estimator_net(batch),
                est + ("; auto under train(): path 6" if batch == 128 else ", full batch"),
                ("L1", "F2", "G6", "N4n", "N7n"),
                (
                    ("F2", "L1"),
                    ("G6", "L1"),
                    ("G6", "F2"),
                    ("N4n", "L1"),
                    ("N4n", "F2"),
                    ("N7n", "L1"),
                    ("N7n", "F2"),
                    ("N7n", "N4n"),
                ),
                learn_noise=True,
            )
        )
    return {c.key: c for c in cases}


# ---------------------------------------------------------------------- the steps
@contextlib.contextmanager
def _env(name: str, value: str | None) -> Iterator[None]:
    before = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


@contextlib.contextmanager
def _replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    original = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, original)


@contextlib.contextmanager
def variant_scope(variant: Variant) -> Iterator[None]:
    """The switches of ``variant``, for the steps run inside."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(backend_scope(variant.backend))
        stack.enter_context(_env("SVBNN_NATIVE", None if variant.native else "0"))
        if not variant.native_step:
            stack.enter_context(_replaced(_fused, "native_step_ok", lambda *a, **k: False))
        if variant.force_path2:
            stack.enter_context(_replaced(_paths, "EAGER_FUSED_MAX_NUMEL", 2**62))
        yield


def build_step(case: Case, variant: Variant, seed: int = 0) -> Callable[[], None]:
    """One training step of ``case``'s network as ``variant`` builds it (to be called
    inside :func:`variant_scope`): the model, likelihood, optimiser and minibatch."""
    net = case.net
    gen = torch.Generator().manual_seed(seed)
    R = case.replicates
    model = SpikeSlabMLP(
        net.in_features,
        net.hidden,
        net.out_features,
        fused=variant.fused,
        n_replicates=R,
        log_prior_inclusion=net.log_lambda(),
        generator=gen,
    )
    set_generator(model, gen)
    lead = () if R is None else (R,)
    x = torch.randn((*lead, net.batch, net.in_features), generator=gen)
    lik: nn.Module
    if net.task == "regression":
        y: Tensor = torch.randn((*lead, net.batch), generator=gen)
        lik = GaussianLikelihood(1.0, learn_noise=case.learn_noise)
    else:
        y = torch.randint(0, net.out_features, (*lead, net.batch), generator=gen)
        lik = CategoricalLikelihood()
    params = [*model.parameters(), *lik.parameters()]
    opt = make_optimizer(params, "adam", net.lr)

    def step() -> None:  # as svbnn.training.train steps
        opt.zero_grad(set_to_none=True)
        loss, _, _ = negative_elbo(model, lik, x, y, net.n_train)
        loss.sum().backward()
        opt.step()

    return step


@contextlib.contextmanager
def _watched(seen: set[int]) -> Iterator[None]:
    """Record into ``seen`` the paths whose entry points are called while open."""

    def spy(path: int | Callable[..., int], original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            seen.add(path(*args, **kwargs) if callable(path) else path)
            return original(*args, **kwargs)

        return call

    def graph(fn: Callable[..., Any], *static: Any) -> int:
        return 5 if fn.__name__ == "mlp_negative_elbo" else 6

    with contextlib.ExitStack() as stack:
        for owner, name, path in (
            (_spike_slab, "gumbel_spike_slab", 1),
            (_fused, "kernels", lambda compiled=None: 3 if compiled else 2),
            (_native, "fused_forward", 4),
            (_fused, "whole_network_kernel", graph),
            (_fused, "native_negative_elbo", 7),
        ):
            stack.enter_context(_replaced(owner, name, spy(path, getattr(owner, name))))
        yield


def observed_paths(step: Callable[[], None]) -> set[int]:
    """The paths (DESIGN 6.1's numbers) whose entry points one call of ``step`` reaches: 1
    the layers' own draw, 2 or 3 the eager or compiled fused draw + KL, 4 the native draw +
    KL, 5 or 6 a whole-network graph, 7 the native step (which draws with the loops of 4)."""
    seen: set[int] = set()
    with _watched(seen):
        step()
    return seen


def _path_taken(seen: set[int]) -> int | None:
    # 7 runs 4's loops
    for path in (7, 5, 6, 4, 3, 2, 1):
        if path in seen:
            return path
    return None


# ---------------------------------------------------------------------- measuring
@dataclass
class Timed:
    """One variant of one case: its per-step time of each round, in seconds."""

    variant: Variant
    step: Callable[[], None]
    first_step_s: float = math.nan
    observed: int | None = None
    per_round: list[float] = field(default_factory=list)


def _quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    q1, med, q3 = np.percentile(values, [25, 50, 75])
    return float(med), float(q1), float(q3)


def _block(step: Callable[[], None], n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        step()
    return (time.perf_counter() - t) / n


def measure_case(
    case: Case, rounds: int, block_s: float, warmup: int = 3, log: Callable[[str], None] = print
) -> tuple[dict[str, Timed], int]:
    """Warm up, check and time every variant of ``case`` (see the module docstring):
    ``({variant key: Timed}, N)``."""
    timed: dict[str, Timed] = {}
    for key in case.variants:
        v = VARIANTS[key]
        with variant_scope(v):
            t = Timed(v, build_step(case, v))
            t0 = time.perf_counter()
            t.step()
            t.first_step_s = time.perf_counter() - t0
            for _ in range(warmup):
                t.step()
            t.observed = _path_taken(observed_paths(t.step))
        if t.observed != v.path:
            raise RuntimeError(
                f"{case.key}: variant {key} should take path {v.path} but took {t.observed}"
            )
        log(f"{case.key} {key}: path {t.observed}, first step {t.first_step_s:.2f} s")
        timed[key] = t
    slowest = 0.0
    for t in timed.values():
        with variant_scope(t.variant):
            slowest = max(slowest, min(_block(t.step, 1) for _ in range(3)))
    n = max(1, math.ceil(block_s / max(slowest, 1e-9)))
    order = list(timed)
    for r in range(rounds):
        shift = r % len(order)
        for key in order[shift:] + order[:shift]:
            t = timed[key]
            with variant_scope(t.variant):
                t.step()  # untimed: the first step after another variant's
                t.per_round.append(_block(t.step, n))
    return timed, n


def compare(case: Case, timed: dict[str, Timed], n: int) -> list[dict[str, Any]]:
    """One row per comparison of ``case``: per-round ratios' median and quartiles, and the
    rule's verdict."""
    rows = []
    for fast, other in case.comparisons:
        a, b = timed[fast], timed[other]
        ratios = [x / y for x, y in zip(a.per_round, b.per_round, strict=True)]
        med, q1, q3 = _quartiles(ratios)
        rows.append(
            {
                "path": a.variant.path,
                "network": case.key,
                "fast": fast,
                "other": other,
                "other_path": b.variant.path,
                "fast_ms": statistics.median(a.per_round) * 1e3,
                "other_ms": statistics.median(b.per_round) * 1e3,
                "ratio_median": med,
                "ratio_q1": q1,
                "ratio_q3": q3,
                "rounds": len(ratios),
                "steps_per_round": n,
                "verdict": "KEEP" if q3 < KEEP_BELOW else "DROP candidate",
            }
        )
    return rows


def variant_rows(case: Case, timed: dict[str, Timed], n: int) -> list[dict[str, Any]]:
    """One row per variant of ``case``: path, first step, step time median and quartiles."""
    rows = []
    for key, t in timed.items():
        med, q1, q3 = _quartiles(t.per_round)
        rows.append(
            {
                "network": case.key,
                "variant": key,
                "path": t.observed,
                "what": t.variant.what,
                "first_step_s": t.first_step_s,
                "step_ms": med * 1e3,
                "step_ms_q1": q1 * 1e3,
                "step_ms_q3": q3 * 1e3,
                "steps_per_round": n,
            }
        )
    return rows


# ---------------------------------------------------------------------- report
def _header(meta: dict[str, Any]) -> list[str]:
    git = meta["git"]
    commit = git.get("commit") or "unknown"
    if git.get("dirty"):
        commit += " (with uncommitted changes)"
    return [
        "# Fast paths of a training step, each against the paths it replaces",
        "",
        f"- command: `{meta['command']}`",
        f"- date (UTC): {meta['date']}",
        f"- CPU: {meta['cpu']}, {meta['cpu_count']} logical CPUs; torch {meta['torch']}, "
        f"{meta['threads']} thread(s); svbnn commit {commit}",
        f"- native loops: {meta['native_loops']}; inductor cache: {meta['compile_cache']}",
        f"- {meta['rounds']} interleaved rounds; each round runs, per variant, one untimed "
        f"step and N timed training steps (N per network, a block of about "
        f"{meta['block_ms']:g} ms for its slowest variant)",
        f"- verdict: KEEP where the upper quartile (q3) of the per-round ratio fast / other "
        f"is below {KEEP_BELOW}, else DROP candidate",
        f"- wall time {meta['wall_s']:.0f} s; load average (1 minute) {meta['load'][0]:.2f} "
        f"at the start, {meta['load'][1]:.2f} at the end",
        "",
    ]


def markdown(
    meta: dict[str, Any],
    cases: Sequence[Case],
    comparisons: list[dict[str, Any]],
    variants: list[dict[str, Any]],
) -> str:
    """``report.md``: the comparisons by path, then every variant's timing."""
    lines = _header(meta)
    lines += [
        "## Comparisons",
        "",
        "| path | network | fast | other (path) | fast ms | other ms | ratio median "
        "[q1, q3] | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in sorted(comparisons, key=lambda r: (r["path"], r["other_path"])):
        lines.append(
            f"| {r['path']} | {r['network']} | {r['fast']} | {r['other']} ({r['other_path']}) "
            f"| {r['fast_ms']:.3f} | {r['other_ms']:.3f} | {r['ratio_median']:.3f} "
            f"[{r['ratio_q1']:.3f}, {r['ratio_q3']:.3f}] | {r['verdict']} |"
        )
    lines += ["", "## Networks", ""]
    for c in cases:
        lines.append(f"- `{c.key}`: {c.label}; {c.where}")
    lines += [
        "",
        "## Variants",
        "",
        "| network | variant | path | what | first step, s | step ms median [q1, q3] | N |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in variants:
        lines.append(
            f"| {r['network']} | {r['variant']} | {r['path']} | {r['what']} | "
            f"{r['first_step_s']:.2f} | {r['step_ms']:.3f} [{r['step_ms_q1']:.3f}, "
            f"{r['step_ms_q3']:.3f}] | {r['steps_per_round']} |"
        )
    lines += [
        "",
        "First step: the first training step after building the model, which includes "
        "`torch.compile`'s compile for the compiled variants (I3, G5, G6), or its load from "
        "inductor's on-disk cache where an earlier run compiled the same graph (see the "
        "header).",
    ]
    return "\n".join(lines) + "\n"


def _native_state() -> str:
    if os.environ.get("SVBNN_NATIVE", "1") == "0":
        return "off (SVBNN_NATIVE=0): the native variants cannot run"
    return "built and loaded" if _native.available() else "did not compile"


def run(
    cases: Sequence[Case],
    rounds: int,
    block_ms: float,
    out: Path | None,
    warmup: int = 3,
    log: Callable[[str], None] = print,
    command: str = "",
    fresh_cache: bool = False,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Measure ``cases`` and write the report into ``out`` (if given): the comparison rows
    and the variant rows. ``command``: the command line the report names; ``fresh_cache``:
    whether inductor's cache was empty at the start (the report says so)."""
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    env = environment_info()
    comparisons: list[dict[str, Any]] = []
    variants: list[dict[str, Any]] = []
    for case in cases:
        timed, n = measure_case(case, rounds, block_ms / 1e3, warmup, log)
        comparisons += compare(case, timed, n)
        variants += variant_rows(case, timed, n)
    meta = {
        "command": command or env["command"],
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "git": env["git"],
        "native_loops": _native_state(),
        "compile_cache": (
            "empty at the start (--fresh-compile-cache): a compiled variant's first step "
            "is a cold compile"
            if fresh_cache
            else "as found on disk: a compiled variant's first step may load its graph from it"
        ),
        "rounds": rounds,
        "block_ms": block_ms,
        "wall_s": time.perf_counter() - started,
        "load": (load_before, os.getloadavg()[0]),
    }
    text = markdown(meta, cases, comparisons, variants)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        write_csv(out / "results.csv", comparisons)
        write_csv(out / "variants.csv", variants)
        atomic_write_text(out / "report.md", text)
    log(text)
    return comparisons, variants


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """The command line; returns the comparison rows."""
    cases = default_cases()
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.engine_paths",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rounds", type=int, default=15, help="interleaved rounds (default 15)")
    p.add_argument(
        "--block-ms", type=float, default=300.0, help="timed block of the slowest variant"
    )
    p.add_argument("--warmup", type=int, default=3, help="untimed steps after the first")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument(
        "--networks",
        default=",".join(cases),
        help=f"comma-separated subset of {','.join(cases)}",
    )
    p.add_argument("--out", type=Path, default=None, help="folder for the report")
    p.add_argument(
        "--fresh-compile-cache",
        action="store_true",
        help="compile into an empty inductor cache (a temporary folder), so that the first "
        "step of a compiled variant is a cold compile",
    )
    given = list(sys.argv[1:] if argv is None else argv)
    args = p.parse_args(given)
    keys = [k.strip() for k in args.networks.split(",") if k.strip()]
    unknown = [k for k in keys if k not in cases]
    if unknown:
        p.error(f"unknown --networks {unknown}; choose from {sorted(cases)}")
    if args.rounds < 1 or args.warmup < 0 or args.threads < 1 or args.block_ms < 0:
        p.error("--rounds and --threads must be positive, --warmup and --block-ms >= 0")
    torch.set_num_threads(args.threads)
    chosen = [cases[k] for k in keys]
    needs_native = any(VARIANTS[v].path in (4, 7) for c in chosen for v in c.variants)
    if needs_native and not _native.available():
        p.error("the native loops did not compile here: choose networks without them")
    with contextlib.ExitStack() as stack:
        if args.fresh_compile_cache:
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="inductor-"))
            stack.enter_context(_env("TORCHINDUCTOR_CACHE_DIR", folder))
        rows, _ = run(
            chosen,
            args.rounds,
            args.block_ms,
            args.out,
            args.warmup,
            log=lambda s: print(s, file=sys.stderr),
            command=" ".join(["python -m benchmarks.engine_paths", *given]),
            fresh_cache=args.fresh_compile_cache,
        )
    return rows


if __name__ == "__main__":
    main()
