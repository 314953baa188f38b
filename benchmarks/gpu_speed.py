"""Training-step time of a SpikeSlabMLP on one device under each kernel backend.

``python -m benchmarks.gpu_speed --device cuda --out docs/results/bench-gpu`` times the
training step (forward, KL, backward, Adam) of the UCI-sized and MNIST-sized networks
with the eager, compiled and auto backends and writes ``gpu_speed.json`` and
``gpu_speed.md`` into ``--out``. On CUDA every timed block ends with
``torch.cuda.synchronize()``, so the times are of the work, not of its launch. The main
benchmark (``benchmarks.run``) has no ``--device`` option yet: its memory section measures
the process's RSS and its comparison points are CPU-only.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from svbnn import kernel_backend
from svbnn._device import check_device
from svbnn.nn import SpikeSlabMLP, set_generator
from svbnn.objectives import CategoricalLikelihood, GaussianLikelihood
from svbnn.training import make_optimizer, negative_elbo

# (name, inputs, hidden, outputs, batch): the UCI network and the paper's MNIST network.
NETWORKS = [("uci-8-50-1", 8, (50,), 1, 128), ("mnist-784-400-400-10", 784, (400, 400), 10, 256)]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_steps(
    device: torch.device, backend: str, net: tuple[Any, ...], steps: int, rounds: int
) -> dict[str, Any]:
    """Median and quartiles (ms) of ``rounds`` blocks of ``steps`` training steps, after
    a warm-up that includes any compilation (reported as ``first_step_s``)."""
    name, p, hidden, out, batch = net
    gen = torch.Generator(device=device).manual_seed(0)
    model = SpikeSlabMLP(p, hidden, out, generator=gen, device=device)
    set_generator(model, gen)
    x = torch.randn(batch, p, generator=gen, device=device)
    if out == 1:
        lik: torch.nn.Module = GaussianLikelihood(1.0)
        y = torch.randn(batch, generator=gen, device=device)
    else:
        lik = CategoricalLikelihood()
        y = torch.randint(0, out, (batch,), generator=gen, device=device)
    opt = make_optimizer(list(model.parameters()), "adam", 1e-3)

    def step() -> None:
        loss, _, _ = negative_elbo(model, lik, x, y, n_train=60_000)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    with kernel_backend(backend):
        t0 = time.perf_counter()
        step()
        _sync(device)
        first = time.perf_counter() - t0
        for _ in range(3):
            step()
        per_step = []
        for _ in range(rounds):
            _sync(device)
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            _sync(device)
            per_step.append(1e3 * (time.perf_counter() - t0) / steps)
    q1, q3 = (float(v) for v in np.percentile(per_step, [25, 75]))
    return {
        "network": name,
        "batch": batch,
        "backend": backend,
        "ms_per_step_median": statistics.median(per_step),
        "ms_per_step_q1": q1,
        "ms_per_step_q3": q3,
        "first_step_s": first,
    }


def _markdown(meta: dict[str, Any], rows: list[dict[str, Any]]) -> str:
    lines = [
        f"# Training-step time on {meta['device_name']}",
        "",
        f"torch {meta['torch']}, device `{meta['device']}`, {meta['rounds']} rounds of "
        f"{meta['steps']} steps (median and quartiles, ms per step; the first step "
        "includes compilation). Written by `python -m benchmarks.gpu_speed`.",
        "",
        "| network | batch | backend | ms/step (median) | q1 - q3 | first step (s) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['network']} | {r['batch']} | {r['backend']} | "
            f"{r['ms_per_step_median']:.3f} | {r['ms_per_step_q1']:.3f} - "
            f"{r['ms_per_step_q3']:.3f} | {r['first_step_s']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the timings and write ``gpu_speed.json`` and ``gpu_speed.md`` into ``--out``."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.gpu_speed", description=__doc__)
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (default cuda)")
    ap.add_argument("--out", default="docs/results/bench-gpu", help="output folder")
    ap.add_argument("--backends", default="eager,compiled,auto", help="comma list")
    ap.add_argument("--steps", type=int, default=50, help="steps per timed round")
    ap.add_argument("--rounds", type=int, default=7, help="timed rounds")
    ap.add_argument("--quick", action="store_true", help="the small network, 2 x 5 steps")
    args = ap.parse_args(argv)
    try:
        device = check_device(args.device, "--device")
    except ValueError as exc:
        ap.error(str(exc))
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    nets = NETWORKS[:1] if args.quick else NETWORKS
    steps, rounds = (5, 2) if args.quick else (args.steps, args.rounds)
    rows = [time_steps(device, b, net, steps, rounds) for net in nets for b in backends]
    meta = {
        "device": str(device),
        "device_name": torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else platform.processor() or "CPU",
        "torch": torch.__version__,
        "steps": steps,
        "rounds": rounds,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result = {"meta": meta, "rows": rows}
    (out / "gpu_speed.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "gpu_speed.md").write_text(_markdown(meta, rows))
    return result


if __name__ == "__main__":
    main()
