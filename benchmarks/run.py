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
import os
import platform
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from svbnn import KernelBackend
from svbnn._engine import native as _native
from svbnn._engine.kernels import backend, backend_scope

from .breakdown import phase_breakdown, profile_misses, replicate_breakdown
from .measure import run_inference, run_replicates, run_training
from .memory import measure_memory, memory_child
from .networks import (
    BAYESIAN_TORCH,
    DENSE,
    N_REPLICATES,
    REFERENCE,
    SVBNN,
    NetSpec,
    bayesian_torch_available,
    network_specs,
)
from .report import write_files, write_markdown
from .results import Report, add_breakdown_rows, add_memory_rows, add_targets

# The modules: networks (what is benchmarked, one training step each), timing (interleaved
# timing), measure (sections 1-3 and 5), memory (section 4, subprocesses), breakdown (where
# the time goes, profiles), results (rows, targets) and report (Markdown, CSV, JSON).


def _parser() -> argparse.ArgumentParser:
    """The command line: what to run, then how long to measure it."""
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
    _add_measurement_options(p)
    return p


def _add_measurement_options(p: argparse.ArgumentParser) -> None:
    """Sizes, rounds and block lengths (``--quick`` overrides several), kernels, memory child."""
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
        choices=[b.value for b in KernelBackend],
        default=None,
        help="svbnn's elementwise kernel backend (default: the library's, i.e. SVBNN_KERNELS "
        "or eager); 'compiled' uses torch.compile (needs a C++ compiler), 'auto' compiles "
        "for large parameter tensors only, 'native' runs svbnn's C++ loops where they serve "
        "and never compiles",
    )
    p.add_argument("--memory-child", help=argparse.SUPPRESS)


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = _parser()
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
    # --kernels for the whole run (this thread; the memory children get it as an argument)
    with backend_scope(args.kernels):
        return _run(args)


def _run(args: argparse.Namespace) -> Report:
    torch.set_num_threads(args.threads)
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
    report = Report(meta=_meta(args, bt_info if bt_ok else f"not importable ({bt_info})"))

    print("timing training steps ...", file=sys.stderr)
    train = run_training(report, nets, impls, args)
    print("timing replications ...", file=sys.stderr)
    reps = run_replicates(report, all_nets["sim2"], args)
    print("timing inference ...", file=sys.stderr)
    inf = run_inference(report, all_nets["mnist"], args)
    mem: dict[str, dict[str, int] | str] = {}
    if not args.no_memory:
        mem = _memory(report, nets, impls, args)
    add_targets(report, train, reps, inf, all_nets, bt_ok)
    if not args.no_profile:
        _profile(report, all_nets, nets, args)
    report.meta["wall_s"] = round(time.perf_counter() - started, 1)
    write_markdown(report, nets, train, reps, inf, mem, bt_ok, args)
    write_files(report, Path(args.out))
    print("\n".join(report.markdown))
    return report


def _native_loops() -> str:
    """Where svbnn._engine.native's draw + KL loops run under this run's backend: under
    ``native`` wherever they serve, under ``auto`` (one thread) for networks of narrow
    layers only (inductor's kernels draw the others), never under ``eager`` or ``compiled``."""
    mode = backend().value
    if mode in ("eager", "compiled"):
        return f"not used ({mode} kernels)"
    if os.environ.get("SVBNN_NATIVE", "1") == "0":
        return "off (SVBNN_NATIVE=0)"
    if not _native.available():
        return "off (did not compile)"
    if mode == "native":
        return "on"
    if torch.get_num_threads() != 1:
        return "not used (more than one thread)"
    return "on for narrow layers (at most 16 outputs a layer); inductor's kernels elsewhere"


def _meta(args: argparse.Namespace, bayesian_torch: str) -> dict[str, Any]:
    """The run's settings and machine, as the report's header and the JSON's ``meta``."""
    return {
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} logical CPUs",
        "processor": platform.processor() or platform.machine(),
        "bayesian_torch": bayesian_torch,
        "svbnn_kernels": backend().value,
        "native_loops": _native_loops(),
        "quick": args.quick,
        "repeats": args.repeats,
        "cnn_repeats": args.cnn_repeats,
        "cnn_hidden": args.cnn_hidden,
        "cnn_batch": args.cnn_batch,
        "min_block_ms": args.min_block_ms,
        "density": args.density,
    }


def _memory(
    report: Report, nets: list[NetSpec], impls: list[str], args: argparse.Namespace
) -> dict[str, dict[str, int] | str]:
    """Section 4: one subprocess per configuration (after the timings); adds its rows."""
    print("measuring peak memory (one subprocess per configuration) ...", file=sys.stderr)
    configs = [f"{n.key}:{i}" for n in nets for i in impls]
    configs += [f"rep{N_REPLICATES}:{SVBNN}", f"rep1:{SVBNN}"]
    if args.quick:  # each subprocess pays the torch import: keep the smoke test short
        configs = [f"{nets[0].key}:{DENSE}", f"{nets[0].key}:{SVBNN}"]
    mem = measure_memory(configs, args, workers=args.memory_workers)
    add_memory_rows(report, mem, args)
    return mem


def _profile(
    report: Report, all_nets: dict[str, NetSpec], nets: list[NetSpec], args: argparse.Namespace
) -> None:
    """Profiles of missed targets and the "where the time goes" breakdowns, with their rows."""
    print("profiling ...", file=sys.stderr)
    profile_misses(report, all_nets, args)
    report.rep_breakdown = replicate_breakdown(all_nets["sim2"], args)
    add_breakdown_rows(report, f"rep{N_REPLICATES}", report.rep_breakdown)
    for net in nets:
        if net.kind == "mlp":
            report.breakdown[net.key] = phase_breakdown(net, args)
            add_breakdown_rows(report, net.key, report.breakdown[net.key])


if __name__ == "__main__":
    main()
