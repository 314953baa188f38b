"""Training-step time of the dense and the spike-and-slab networks on one device.

``python -m benchmarks.gpu_speed --device cuda --out docs/results/bench-gpu`` times the
training step (forward, KL, backward, Adam) of the benchmark's networks
(``benchmarks.networks``: Simulation II, UCI, the MNIST MLP and the Fashion-MNIST CNN),
dense and SVBNN side by side (interleaved rounds), under each kernel backend, and writes
``gpu_speed.json`` and ``gpu_speed.md`` into ``--out``. On CUDA every step ends with
``torch.cuda.synchronize()``, so a time is that of the work, not of its launch. The main
benchmark (``benchmarks.run``) is CPU-only: its memory section measures the process's RSS
and its comparison points (the reference and bayesian-torch) run on the CPU.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from svbnn import kernel_backend
from svbnn._device import check_device
from svbnn.checkpoint import atomic_write_bytes

from .networks import DENSE, SVBNN, NetSpec, build_step, network_specs
from .timing import paired_ratio, time_interleaved

NETWORKS = ("uci", "sim2", "mnist", "cnn")


def _synced(step: Callable[[], None], device: torch.device) -> Callable[[], None]:
    if device.type != "cuda":
        return step

    def run() -> None:
        step()
        torch.cuda.synchronize(device)

    return run


def time_network(
    device: torch.device, backend: str, net: NetSpec, rounds: int, min_block_s: float
) -> dict[str, Any]:
    """Dense and SVBNN step times (ms; median and quartiles of ``rounds`` interleaved
    blocks) and their paired ratio; ``first_step_s`` is SVBNN's first step, compilation
    included."""
    with kernel_backend(backend):
        fns = {}
        first = 0.0
        for impl in (DENSE, SVBNN):
            step = _synced(build_step(net, impl, seed=0, device=device)[0], device)
            t0 = time.perf_counter()
            step()
            if impl == SVBNN:
                first = time.perf_counter() - t0
            fns[impl] = step
        t = time_interleaved(fns, rounds, min_block_s, warmup=3)
    ratio, r1, r3 = paired_ratio(t[SVBNN], t[DENSE])
    return {
        "network": net.label,
        "batch": net.batch,
        "backend": backend,
        "dense_ms": 1e3 * t[DENSE].median,
        "svbnn_ms": 1e3 * t[SVBNN].median,
        "svbnn_ms_q1": 1e3 * t[SVBNN].q1,
        "svbnn_ms_q3": 1e3 * t[SVBNN].q3,
        "ratio": ratio,
        "ratio_q1": r1,
        "ratio_q3": r3,
        "first_step_s": first,
    }


def _markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        f"# Training-step time on {meta['device_name']}",
        "",
        f"torch {meta['torch']}, device `{meta['device']}`; {meta['rounds']} interleaved "
        f"rounds of dense and SVBNN blocks of at least {meta['min_block_s']} s each (median "
        "ms per step; SVBNN's quartiles; ratio = median of the per-round SVBNN/dense ratios "
        "with quartiles). The first step includes compilation. Written by "
        "`python -m benchmarks.gpu_speed`.",
        "",
        "| network | batch | backend | dense ms | SVBNN ms (q1 - q3) | SVBNN/dense (q1 - q3) "
        "| first step (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['network']} | {r['batch']} | {r['backend']} | {r['dense_ms']:.3f} | "
            f"{r['svbnn_ms']:.3f} ({r['svbnn_ms_q1']:.3f} - {r['svbnn_ms_q3']:.3f}) | "
            f"{r['ratio']:.2f} ({r['ratio_q1']:.2f} - {r['ratio_q3']:.2f}) | "
            f"{r['first_step_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the timings and write ``gpu_speed.json`` and ``gpu_speed.md`` into ``--out``."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_speed", description=__doc__)
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--out", default="docs/results/bench-gpu", help="output folder")
    ap.add_argument("--backends", default="eager,compiled,auto", help="comma list")
    ap.add_argument("--networks", default=",".join(NETWORKS), help="comma list")
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds")
    ap.add_argument("--min-block-s", type=float, default=0.2, help="seconds per block")
    ap.add_argument("--quick", action="store_true", help="the UCI network, 2 short rounds")
    args = ap.parse_args(argv)
    try:
        device = check_device(args.device, "--device")
    except ValueError as exc:
        ap.error(str(exc))
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    specs = network_specs(cnn_hidden=512, cnn_batch=1024)
    keys = [k.strip() for k in args.networks.split(",") if k.strip()]
    unknown = sorted(set(keys) - set(specs))
    if unknown:
        ap.error(f"--networks: unknown {', '.join(unknown)}; choose from {', '.join(specs)}")
    if args.quick:
        keys, args.rounds, args.min_block_s = ["uci"], 2, 0.0
    rows = [
        time_network(device, b, specs[k], args.rounds, args.min_block_s)
        for k in keys
        for b in backends
    ]
    meta = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "CPU",
        "torch": torch.__version__,
        "rounds": args.rounds,
        "min_block_s": args.min_block_s,
        "threads": torch.get_num_threads(),
    }
    out = Path(args.out)
    result = {"meta": meta, "rows": rows}
    atomic_write_bytes(out / "gpu_speed.json", (json.dumps(result, indent=2) + "\n").encode())
    atomic_write_bytes(out / "gpu_speed.md", _markdown(meta, rows).encode())
    return result


if __name__ == "__main__":
    main()
