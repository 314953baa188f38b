"""The local sampler's layers on svbnn's C++ loops against the eager layers, one thread.

Run ``python -m benchmarks.local_layers [--rounds 5]``. Times the forward and backward of
:class:`svbnn._engine.fused.LocalFlatMLP` (two products per layer, ReLU hidden layers, the
layers' draws included) with ``native=True`` and ``native=False``, alternating, on networks
from an estimator's 8-50-1 up to MNIST's 784-512-512-10, at several numbers of rows. The
loops multiply without BLAS, so they gain where a step's work (rows times parameters,
``m T``) is small and its tensor operations' fixed costs dominate; the table shows where
that stops (``svbnn._engine.native.LOCAL_LAYERS_MAX_WORK``, the limit the library uses).
Printed: the median time of each over the rounds and the median of the per-round ratios.
Needs the C++ compiler of the native loops.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import torch

# (widths, rows, calls a round): an estimator's networks, wider and deeper ones, larger
# minibatches, and MNIST's network.
CASES: tuple[tuple[tuple[int, ...], int, int], ...] = (
    ((8, 50, 1), 128, 400),
    ((20, 50, 1), 16, 400),
    ((20, 50, 1), 128, 400),
    ((40, 100, 1), 128, 200),
    ((50, 50, 50, 1), 128, 200),
    ((8, 50, 1), 1024, 100),
    ((40, 200, 1), 128, 100),
    ((20, 90, 1), 512, 100),
    ((100, 100, 100, 1), 128, 50),
    ((784, 512, 512, 10), 128, 3),
)


def time_case(widths: tuple[int, ...], rows: int, calls: int, rounds: int) -> dict[str, Any]:
    """Alternating rounds of ``calls`` forward + backward passes, native then eager."""
    from svbnn._engine.fused import LocalFlatMLP

    g = torch.Generator().manual_seed(0)
    shapes = tuple((o, i) for i, o in zip(widths[:-1], widths[1:], strict=True))
    n = sum(o * (i + 1) for o, i in shapes)
    mean = (torch.randn(n, generator=g) * 0.05).requires_grad_()
    var = (torch.rand(n, generator=g) * 0.01).requires_grad_()
    x = torch.randn(rows, widths[0], generator=g)
    gens = tuple(torch.Generator().manual_seed(k) for k in range(len(shapes)))
    us: dict[bool, list[float]] = {True: [], False: []}
    for r in range(rounds + 1):
        for native in (True, False):
            t0 = time.perf_counter()
            for _ in range(calls if r else 2):
                LocalFlatMLP.apply(mean, var, x, shapes, "relu", gens, native).sum().backward()
            if r:  # the first round warms up
                us[native].append((time.perf_counter() - t0) / calls * 1e6)
    ratios = sorted(a / b for a, b in zip(us[True], us[False], strict=True))
    return {
        "widths": widths,
        "rows": rows,
        "work": rows * n,
        "native_us": statistics.median(us[True]),
        "eager_us": statistics.median(us[False]),
        "ratio": statistics.median(ratios),
        "ratio_range": (ratios[0], ratios[-1]),
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
        lo, hi = r["ratio_range"]
        lines.append(
            f"| {'-'.join(map(str, r['widths']))} | {r['rows']} | {r['work']:,} | "
            f"{r['native_us']:.0f} | {r['eager_us']:.0f} | {r['ratio']:.2f} [{lo:.2f}, {hi:.2f}] |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=float, default=1.0, help="scale the calls a round")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.calls <= 0:
        ap.error("--rounds must be at least 1 and --calls positive")
    from svbnn._engine import native

    if not native.available():
        ap.error("the native loops are not available (no C++ compiler or ninja)")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        results = [
            time_case(widths, rows, max(1, round(calls * args.calls)), args.rounds)
            for widths, rows, calls in CASES
        ]
    finally:
        torch.set_num_threads(threads)
    print(markdown(results))
    return results


if __name__ == "__main__":
    main()
