"""The ``svbnn`` command: ``svbnn reproduce ARTIFACT`` and ``svbnn demo``.

Application layer: prints to the terminal. The library itself never imports this module.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from svbnn_experiments.common import RunConfig

__all__ = ["build_parser", "main", "run"]


def _parse_set(items: Sequence[str] | None) -> dict[str, str]:
    """``--set KEY=VALUE`` items as ``{KEY: VALUE}`` (text; the last of a repeated key wins).

    The values stay text here: each artifact reads them against the type of its own
    setting (:func:`svbnn_experiments.settings.check_setting`), so that ``n_test=1.5`` is
    refused for an integer setting and ``datasets=1`` kept as text for a text one.
    """
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        if not key.isidentifier():
            # Every setting name is an identifier; anything else is a typo (shown quoted,
            # so that a stray newline or quote cannot break the one-line message).
            raise ValueError(f"--set {key!r}: not a setting name (--set expects KEY=VALUE)")
        out[key] = value
    return out


class _Parser(argparse.ArgumentParser):
    """An argument parser whose errors are one line on stderr (no usage block), status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {_one_line(message)}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expects a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be positive (an integer >= 1), got {text!r}")
    return value


def _cluster(text: str) -> str:
    from svbnn_experiments.distributed import parse_cluster  # light: Dask is imported later

    try:
        parse_cluster(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``svbnn`` command."""
    from svbnn import __version__

    parser = _Parser(
        prog="svbnn",
        description="Sparse Bayesian deep learning with spike-and-slab priors "
        "(Bai, Song & Cheng, NeurIPS 2020).",
    )
    parser.add_argument("--version", action="version", version=f"svbnn {__version__}")
    sub = parser.add_subparsers(dest="command")
    _add_reproduce_parser(sub)
    _add_demo_parser(sub)
    return parser


def _add_reproduce_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``svbnn reproduce``: its options, group by group, in the order ``--help`` lists them."""
    rep = sub.add_parser(
        "reproduce",
        help="reproduce a table or figure of the paper",
        description="Reproduce a table or figure of the paper at its settings "
        "(see --list), writing results.csv, settings.json, report.md and figures.",
    )
    rep.add_argument("artifact", nargs="?", help="artifact name, or 'all'")
    rep.add_argument("--list", action="store_true", help="list the artifacts and their run times")
    rep.add_argument("--quick", action="store_true", help="tiny settings (a smoke run, ~1 min)")
    _add_run_options(rep)
    _add_execution_options(rep)
    _add_simulation_options(rep)
    _add_mode_options(rep)
    _kernels_option(rep)


def _add_run_options(rep: argparse.ArgumentParser) -> None:
    """What a run repeats and where it writes: replications, epochs, seed, --out, methods."""
    rep.add_argument("--reps", type=_positive_int, help="replications (paper: 30; 60 for coverage)")
    rep.add_argument("--epochs", type=_positive_int, help="training epochs")
    rep.add_argument("--seed", type=int, help="base seed (default 0); every seed derives from it")
    rep.add_argument("--out", type=Path, help="output folder (default results/<artifact>)")
    rep.add_argument(
        "--methods",
        help="comma list of methods (default svbnn): svbnn,vbnn,vd,hsbnn,agp,lot for table1-*, "
        "table2 and coverage; svbnn,vbnn,vd,agp for mnist; svbnn,vbnn,vd for fmnist-cnn",
    )


def _add_execution_options(rep: argparse.ArgumentParser) -> None:
    """Where and how the chunks run: --jobs, a Dask --scheduler or --cluster, --threads,
    --batch."""
    rep.add_argument(
        "--jobs",
        type=_positive_int,
        help="worker processes for chunks of replications (default: the usable CPUs; "
        "--quick: 1); changes the speed only, never the numbers",
    )
    where = rep.add_mutually_exclusive_group()
    where.add_argument(
        "--scheduler",
        metavar="tcp://HOST:PORT",
        help="run the chunks on this Dask scheduler's workers (pip install "
        "'svbnn[distributed]'); --jobs defaults to its worker threads",
    )
    where.add_argument(
        "--cluster",
        type=_cluster,
        metavar="local:N",
        help="run the chunks on a Dask LocalCluster of N worker processes (1 thread each) "
        "started for the run; the same chunks and numbers as --jobs N",
    )
    rep.add_argument("--threads", type=_positive_int, help="torch threads per process (default 1)")
    rep.add_argument("--batch", type=_positive_int, help="most replications trained as one network")


def _add_simulation_options(rep: argparse.ArgumentParser) -> None:
    """The data and networks: covariate law, initialisation, precision, device, --set."""
    rep.add_argument(
        "--covariates",
        choices=["uniform", "normal"],
        help="Simulation II covariate law (default uniform, as the authors' code)",
    )
    rep.add_argument(
        "--init",
        choices=["torch", "authors"],
        help="initial means: torch U(+-1/sqrt(fan_in)) (default) or authors U(+-0.6)",
    )
    rep.add_argument("--dtype", choices=["float32", "float64"], help="precision (default float32)")
    rep.add_argument(
        "--device",
        metavar="{cpu,cuda,cuda:N}",
        help="where the networks train (default cpu); the simulation artifacts (table1-*, "
        "table2, coverage, the sweeps) and the real-data ones (mnist, fmnist-cnn, mnist-uq, uci)",
    )
    rep.add_argument(
        "--set",
        action="append",
        metavar="KEY=VALUE",
        help="artifact setting, e.g. --set n_test=1000 (repeatable)",
    )


def _add_mode_options(rep: argparse.ArgumentParser) -> None:
    """What the command does instead of (or beside) a plain run: --report-only, --merge,
    --estimate-epochs, --no-progress."""
    rep.add_argument(
        "--report-only", action="store_true", help="rebuild report.md and figures from saved CSVs"
    )
    rep.add_argument(
        "--restart",
        action="store_true",
        help="the --out folder holds a run with other settings: delete its results and "
        "checkpoints and start afresh (without it, such a folder is refused)",
    )
    rep.add_argument(
        "--merge",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="merge finished runs of the artifact (e.g. one per method) into --out and "
        "rebuild the report",
    )
    rep.add_argument(
        "--estimate-epochs",
        type=_positive_int,
        metavar="E",
        help="time E epochs at full settings and extrapolate the full run time",
    )
    rep.add_argument("--no-progress", action="store_true", help="no progress bars")


def _add_demo_parser(sub: argparse._SubParsersAction[_Parser]) -> None:
    """``svbnn demo`` and its options."""
    demo = sub.add_parser(
        "demo",
        help="Simulation II with SVBNN at reduced epochs (about a minute)",
        description="Fit Simulation II (p = 200, n = 3000) with SVBNN for a few hundred epochs "
        "and print the selected variables, RMSE, sparsity and FPR/FNR beside Table 2.",
    )
    demo.add_argument(
        "--epochs", type=_positive_int, default=3000, help="epochs (paper: 7000; default 3000)"
    )
    demo.add_argument(
        "--reps", type=_positive_int, default=2, help="replications, batched (default 2)"
    )
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--threads", type=_positive_int, default=1)
    demo.add_argument("--covariates", choices=["uniform", "normal"], default="uniform")
    demo.add_argument("--init", choices=["torch", "authors"], default="torch")
    demo.add_argument("--no-progress", action="store_true")
    _kernels_option(demo)


def _kernels_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kernels",
        choices=["eager", "compiled", "auto", "native"],
        help="spike-and-slab kernel backend (default: SVBNN_KERNELS, else the artifact's: "
        "auto for table2, eager for the others). 'auto' compiles the kernels of large "
        "networks with torch.compile and needs a C++ compiler; compiling takes time once "
        "per process (docs/performance.md has step and compile times). 'native' runs "
        "svbnn's C++ loops where they serve and never compiles a graph. A seed reproduces "
        "a run within one backend.",
    )


def _reproduce(args: argparse.Namespace) -> int:
    from svbnn_experiments import list_text

    _check_engine_option(args)
    if args.list:
        print(list_text())
        return 0
    if not args.artifact:
        raise ValueError("give an artifact name, 'all', or --list")
    if args.device is not None:
        # Before any run starts (``all`` runs hours of CPU artifacts first).
        from svbnn_experiments.runner import check_run_device

        check_run_device(args.device)
    if args.restart:
        for given, name in [
            (args.report_only, "--report-only"),
            (args.merge, "--merge"),
            (args.estimate_epochs is not None, "--estimate-epochs"),
        ]:
            if given:
                raise ValueError(f"--restart starts a run afresh; not with {name}")
    overrides = _overrides(args)
    if args.estimate_epochs is not None:
        return _estimate(args, overrides)
    if args.merge:
        return _merge(args)
    names = _artifacts_to_run(args)
    with _engine(args):
        for name in names:
            _reproduce_one(args, name, overrides)
    return 0


def _check_engine_option(args: argparse.Namespace) -> None:
    """``--scheduler`` / ``--cluster`` run chunks: refused with the options that run none."""
    engine_option = (
        "--scheduler" if args.scheduler is not None else "--cluster" if args.cluster else None
    )
    if engine_option is None:
        return
    for given, name in [
        (args.list, "--list"),
        (args.estimate_epochs is not None, "--estimate-epochs"),
        (args.merge, "--merge"),
        (args.report_only, "--report-only"),
    ]:
        if given:
            raise ValueError(f"{engine_option} runs an artifact's chunks; not with {name}")


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The run settings given on the command line (``None``: not given), ``--set`` ones
    under ``params``."""
    overrides: dict[str, Any] = {
        "reps": args.reps,
        "epochs": args.epochs,
        "seed": args.seed,
        "jobs": args.jobs,
        "threads": args.threads,
        "batch": args.batch,
        "covariates": args.covariates,
        "init": args.init,
        "dtype": args.dtype,
        "device": args.device,
        "methods": tuple(m.strip() for m in args.methods.split(",") if m.strip())
        if args.methods
        else None,
        "progress": False if args.no_progress else None,
    }
    params = _parse_set(args.set)
    if params:
        overrides["params"] = params
    return overrides


def _estimate(args: argparse.Namespace, overrides: dict[str, Any]) -> int:
    """``--estimate-epochs``: time the artifact's chunk shapes and print the estimate."""
    from svbnn_experiments import estimate
    from svbnn_experiments.runner import format_duration

    if args.artifact == "all":
        raise ValueError("--estimate-epochs needs one artifact")
    with _kernel_setting(_artifact_kernels(args, args.artifact)):
        res = estimate(args.artifact, overrides, epochs=args.estimate_epochs, out=args.out)
    for s in res["shapes"]:
        print(
            f"{s['method']} {s['problem']}: {s['replicates_per_network']} replicates per "
            f"network, {s['chunks']} chunk(s): {s['per_step_ms']:.2f} ms/step "
            f"({s['per_step_per_replicate_ms']:.3f} ms per replicate), "
            f"{s['steps_per_epoch']} steps/epoch, eval {s['eval_s']:.1f} s, "
            f"chunk at {s['full_epochs']} epochs ~ {format_duration(s['estimated_chunk_s'])}"
        )
    print(
        f"estimated total ({res['threads']} thread(s), {res['jobs']} job(s)): "
        f"{format_duration(res['estimated_total_s'])} ({res['estimated_total_s']:.0f} s)"
    )
    return 0


def _merge(args: argparse.Namespace) -> int:
    """``--merge DIR...``: merge finished runs into ``--out`` and print the report."""
    from svbnn_experiments.runner import merge_runs

    if args.artifact == "all" or args.out is None:
        print("svbnn: error: --merge needs one artifact and --out", file=sys.stderr)
        return 2
    folder = merge_runs(args.artifact, args.merge, args.out)
    print((folder / "report.md").read_text())
    return 0


def _artifacts_to_run(args: argparse.Namespace) -> list[str]:
    """The artifact named, or every artifact for ``all`` (less the real-data ones, with a
    note on stderr, when there is no data directory)."""
    from svbnn_experiments import artifact_names, get_artifact

    names = artifact_names() if args.artifact == "all" else [args.artifact]
    if args.artifact == "all" and not _real_data_available():
        skipped = [n for n in names if get_artifact(n).group == "real-data"]
        if skipped:
            print(
                f"skipping {', '.join(skipped)}: no data directory (set SVBNN_DATA)",
                file=sys.stderr,
            )
        names = [n for n in names if n not in skipped]
    return names


@contextlib.contextmanager
def _engine(args: argparse.Namespace) -> Iterator[None]:
    """The Dask engine of ``--scheduler`` / ``--cluster`` for the block, if one is given."""
    if args.scheduler is None and args.cluster is None:
        yield
        return
    from svbnn_experiments.distributed import dask_engine

    with dask_engine(args.scheduler, args.cluster, jobs=args.jobs):
        yield


def _reproduce_one(args: argparse.Namespace, name: str, overrides: dict[str, Any]) -> None:
    from svbnn_experiments import reproduce

    out = None
    if args.out is not None:
        out = args.out / name if args.artifact == "all" else args.out
    t0 = time.perf_counter()
    with _kernel_setting(_artifact_kernels(args, name)):
        folder = reproduce(
            name,
            overrides,
            quick=args.quick,
            report_only=args.report_only,
            out=out,
            strict=args.artifact != "all",
            restart=args.restart,
        )
    wall = time.perf_counter() - t0
    if args.artifact != "all":
        print((folder / "report.md").read_text())
    if args.report_only:
        from svbnn_experiments.runner import incomplete_note

        note = incomplete_note(folder)
        if note is not None:
            print(f"svbnn: warning: {folder}: {note}", file=sys.stderr)
    print(f"{name}: wrote {folder}/ in {wall:.1f} s", file=sys.stderr)


def _real_data_available() -> bool:
    from svbnn.data import DataNotFoundError, data_dir

    try:
        data_dir()
    except DataNotFoundError:
        return False
    return True


def _demo(args: argparse.Namespace) -> int:
    import torch

    from svbnn_experiments.engine import execute_chunks
    from svbnn_experiments.simulations import plan_table2

    torch.set_num_threads(args.threads)
    cfg = _demo_config(args)
    chunk = plan_table2(cfg)
    _print_demo_setup(args, cfg)
    t0 = time.perf_counter()
    rows = [r for res in execute_chunks(chunk, 1, cfg.progress) for r in res.rows]
    wall = time.perf_counter() - t0
    _print_demo_results(rows)
    print(f"\nwall time {wall:.1f} s. Full reproduction: svbnn reproduce table2")
    if not all(math.isfinite(r["test_rmse"]) for r in rows):
        return 1
    return 0


def _demo_config(args: argparse.Namespace) -> RunConfig:
    """Table 2's settings with the demo's epochs, replications, seed and options."""
    from svbnn_experiments.registry import get_artifact
    from svbnn_experiments.runner import resolve_config

    return resolve_config(
        get_artifact("table2"),
        {
            "reps": args.reps,
            "epochs": args.epochs,
            "seed": args.seed,
            "jobs": 1,  # the replications as one network, in this process
            "threads": args.threads,
            "covariates": args.covariates,
            "init": args.init,
            "progress": not args.no_progress,
        },
        out=Path("."),
    )


def _print_demo_setup(args: argparse.Namespace, cfg: RunConfig) -> None:
    """The problem and the network the demo fits."""
    print(
        f"Simulation II: f0 = 7 x2/(1+x1^2) + 5 sin(x3 x4) + 2 x5 + N(0,1), p = 200 "
        f"({args.covariates} covariates), n = {cfg.params['n_train']}, "
        f"{cfg.params['n_test']} test points"
    )
    print(
        f"SVBNN 200-7-7-7-1 ReLU, lambda_opt, {args.epochs} epochs (paper: 7000), "
        f"{args.reps} replication(s) trained as one network, {args.threads} thread(s)"
    )


def _print_demo_results(rows: list[dict[str, Any]]) -> None:
    """Each replication's selection and metrics, then their means beside Table 2's SVBNN."""
    import numpy as np

    from svbnn_experiments.paper_values import TABLE2

    print()
    for r in rows:
        print(
            f"replication {r['rep']}: selected {r['selected'] or '(none)'} (truth x1-x5); "
            f"test RMSE {r['test_rmse']:.3f}, sparsity {r['sparsity_pct']:.2f}%, "
            f"FPR {r['fpr_pct']:.1f}%, FNR {r['fnr_pct']:.1f}%"
        )
    print()
    paper = TABLE2["svbnn"]
    keys = [
        ("train_rmse", "train RMSE", 3),
        ("test_rmse", "test RMSE", 3),
        ("fpr_pct", "FPR (%)", 2),
        ("fnr_pct", "FNR (%)", 2),
        ("sparsity_pct", "sparsity sum(phi)/T (%)", 2),
        ("density_pct", "density phi>0.5 (%)", 2),
    ]
    print(f"{'':<26}{'this run (mean)':>18}{'paper Table 2 (7000 epochs)':>30}")
    for key, label, d in keys:
        mean = float(np.mean([r[key] for r in rows]))
        pv = paper.get(key)
        ptxt = "-" if pv is None else f"{pv[0]:.2f} ± {pv[1]:.2f}"
        print(f"{label:<26}{mean:>18.{d}f}{ptxt:>30}")


@contextlib.contextmanager
def _kernel_setting(name: str | None) -> Iterator[None]:
    """``--kernels`` for the duration of the command (worker processes and Dask workers are
    given it with each chunk)."""
    if name is None:
        yield
        return
    from svbnn import kernel_backend

    with kernel_backend(name):
        yield


def _artifact_kernels(args: argparse.Namespace, name: str) -> str | None:
    """The artifact's own kernel backend, where neither ``--kernels`` nor ``SVBNN_KERNELS``
    names one (``None``: leave the backend as it is)."""
    if args.kernels is not None or "SVBNN_KERNELS" in os.environ:
        return None
    from svbnn._engine import native as _native
    from svbnn_experiments import get_artifact

    kernels = get_artifact(name).kernels
    if kernels == "auto" and not _native.available():
        # auto without svbnn's native loops would compile with torch.compile, which needs
        # the same C++ compiler: stay eager rather than fail.
        print(
            f"{name}: svbnn's native loops could not be compiled (no C++ compiler?); "
            "running with the eager kernels",
            file=sys.stderr,
        )
        return None
    return kernels


def _one_line(message: object) -> str:
    """``message`` as one line: whitespace runs become one space, other control characters
    (from a user's argument, say) are shown escaped."""
    text = " ".join(str(message).split())
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``svbnn`` console script; returns the exit status.

    A user error (a bad option or setting, an unusable ``--out``, a locked or damaged output
    folder) is one line on stderr and status 2; Ctrl-C is one line and status 130, with
    ``settings.json`` of the run marked ``"status": "interrupted"``. Anything else is a bug
    and keeps its traceback.
    """
    try:
        parser = build_parser()
        try:
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help, --version, or a one-line parse error
            return exc.code if isinstance(exc.code, int) else 2
        if args.command is None:
            parser.print_help()
            return 2
        try:
            with _kernel_setting(args.kernels):
                if args.command == "reproduce":
                    return _reproduce(args)
                return _demo(args)
        except (ValueError, OSError) as exc:
            # OSError covers FileNotFoundError, PermissionError and OutputLockedError.
            print(f"svbnn: error: {_one_line(exc) or type(exc).__name__}", file=sys.stderr)
            return 2
    except KeyboardInterrupt as exc:
        # A run's RunInterrupted names its folder (not imported here: it pulls in torch).
        folder = getattr(exc, "folder", None)
        where = f"; partial results in {folder}" if folder is not None else ""
        print(f"svbnn: interrupted{where}", file=sys.stderr)
        return 130


def run() -> NoReturn:
    """The ``svbnn`` console script: :func:`main`, and its status as the process's; SIGTERM
    (``kill``) interrupts a run as Ctrl-C does, with status 143.

    After Ctrl-C, CPython itself would end the process by SIGINT (status -2, not 130) when
    the interrupt crossed one of its ``PyRun_*`` calls during the run (torch's C++ code makes
    them), even though :func:`main` handled it; so the interrupted exit leaves directly, once
    everything is flushed (results files are already complete and renamed into place).
    """
    # `kill` (SIGTERM) stops a run as Ctrl-C does: without a handler the process would end
    # at once, its worker processes left training their chunks to the end, the folder
    # saying "running". Raised as KeyboardInterrupt, it stops the workers, marks the folder
    # "interrupted" and releases its lock; the exit status is then 143 (128 + SIGTERM).
    terminated = False

    def on_sigterm(signum: int, frame: object) -> None:
        nonlocal terminated
        terminated = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    code = main()
    if code == 130:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signal.SIGTERM if terminated else 130)
    sys.exit(code)


if __name__ == "__main__":
    run()
