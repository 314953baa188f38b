"""The local sampler's layers on svbnn's C++ loops against the eager layers, one thread.

Run ``python -m benchmarks.local_layers [--rounds 7] [--min-block-s 0.05]``. Times the
forward and backward of :class:`svbnn._engine.fused.LocalFlatMLP` (two products per layer,
ReLU hidden layers, the layers' draws included) with ``native=True`` and ``native=False``,
round-robin (:func:`benchmarks.timing.time_interleaved`), on networks from an estimator's
8-50-1 up to MNIST's 784-512-512-10, at several numbers of rows. The loops multiply
without BLAS, so they gain where a step's work (rows times parameters, ``m T``) is small
and its tensor operations' fixed costs dominate; the table shows where that stops
(``svbnn._engine.native.LOCAL_LAYERS_MAX_WORK``, the limit the library uses). Printed: the
median time of each and the median [quartiles] of the per-round ratios. Needs the C++
compiler of the native loops.
"""

from __future__ import annotations

import argparse
from typing import Any

import torch

from .timing import paired_ratio, time_interleaved

# (widths, rows): an estimator's networks, wider and deeper ones, larger minibatches, and
# MNIST's network.
CASES: tuple[tuple[tuple[int, ...], int], ...] = (
    ((8, 50, 1), 128),
    ((20, 50, 1), 16),
    ((20, 50, 1), 128),
    ((40, 100, 1), 128),
    ((50, 50, 50, 1), 128),
    ((8, 50, 1), 1024),
    ((40, 200, 1), 128),
    ((20, 90, 1), 512),
    ((100, 100, 100, 1), 128),
    ((784, 512, 512, 10), 128),
)


def time_case(
    widths: tuple[int, ...], rows: int, rounds: int, min_block_s: float
) -> dict[str, Any]:
    """One forward + backward pass, native against eager, round-robin."""
    from svbnn._engine.fused import LocalFlatMLP

    g = torch.Generator().manual_seed(0)
    shapes = tuple((o, i) for i, o in zip(widths[:-1], widths[1:], strict=True))
    n = sum(o * (i + 1) for o, i in shapes)
    mean = (torch.randn(n, generator=g) * 0.05).requires_grad_()
    var = (torch.rand(n, generator=g) * 0.01).requires_grad_()
    x = torch.randn(rows, widths[0], generator=g)
    gens = tuple(torch.Generator().manual_seed(k) for k in range(len(shapes)))

    def step(native: bool) -> None:
        LocalFlatMLP.apply(mean, var, x, shapes, "relu", gens, native).sum().backward()

    t = time_interleaved(
        {"native": lambda: step(True), "eager": lambda: step(False)},
        rounds,
        min_block_s,
        warmup=2,
    )
    ratio, q1, q3 = paired_ratio(t["native"], t["eager"])
    return {
        "widths": widths,
        "rows": rows,
        "work": rows * n,
        "native_us": t["native"].median * 1e6,
        "eager_us": t["eager"].median * 1e6,
        "ratio": ratio,
        "ratio_quartiles": (q1, q3),
    }


def markdown(results: list[dict[str, Any]]) -> str:
    from svbnn._engine import native

    lines = [
        f"LocalFlatMLP forward + backward, 1 thread; the library's limit: m T <= "
        f"{native.LOCAL_LAYERS_MAX_WORK:,}",
        "",
        "| network | rows m | m T | native, us | eager, us | native / eager |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        q1, q3 = r["ratio_quartiles"]
        lines.append(
            f"| {'-'.join(map(str, r['widths']))} | {r['rows']} | {r['work']:,} | "
            f"{r['native_us']:.0f} | {r['eager_us']:.0f} | {r['ratio']:.2f} [{q1:.2f}, {q3:.2f}] |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument(
        "--min-block-s", type=float, default=0.05, help="calls a block run at least this long"
    )
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.min_block_s < 0:
        ap.error("--rounds must be at least 1 and --min-block-s not negative")
    from svbnn._engine import native

    if not native.available():
        ap.error("the native loops are not available (no C++ compiler or ninja)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        results = [time_case(widths, rows, args.rounds, args.min_block_s) for widths, rows in CASES]
    finally:
        torch.set_num_threads(threads)
    print(markdown(results))
    return results


if __name__ == "__main__":
    main()
