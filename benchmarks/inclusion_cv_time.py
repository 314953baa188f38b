"""Fit time of ``prior_inclusion="cv"`` against the default prior, side by side.

Run ``python -m benchmarks.inclusion_cv_time [--datasets diabetes classification-2]
[--rounds 2]``: on split 0 of each table of :mod:`benchmarks.tabular_peers` (10 added
noise columns, a ``StandardScaler`` pipeline, one thread), the regressor or classifier
is fitted with ``prior_inclusion="opt"`` (at the default width, the default ``"auto"``'s
lambda) and ``"cv"`` in alternating order, ``--rounds`` times; it prints each fit's
wall-clock time and epochs, and per table the ratios cv / opt of the rounds and their
median.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

from benchmarks.tabular_peers import DATASETS, make_split, svbnn_builder


def main(argv: list[str] | None = None) -> None:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--datasets", nargs="+", default=["diabetes", "classification-2"], choices=DATASETS
    )
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    for name in args.datasets:
        d = make_split(name, 0)
        ratios = []
        for rnd in range(args.rounds):
            times = {}
            for prior in ("opt", "cv") if rnd % 2 == 0 else ("cv", "opt"):
                pipe = svbnn_builder(d["kind"], 7, {"prior_inclusion": prior})(d["p"])
                t = time.perf_counter()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    pipe.fit(d["Xtr"], d["ytr"])
                times[prior] = time.perf_counter() - t
                print(
                    f"{name} round {rnd} {prior}: {times[prior]:.1f} s, {pipe[-1].n_iter_} epochs",
                    flush=True,
                )
            ratios.append(times["cv"] / times["opt"])
        print(
            f"{name}: cv / opt {', '.join(f'{r:.2f}' for r in ratios)}; "
            f"median {statistics.median(ratios):.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
