"""Peak memory: one fresh subprocess per configuration reports its peak resident set size.

Torch's CPU allocations are ordinary heap memory, so RSS sees them (``tracemalloc`` does
not). The subprocess is ``python -m benchmarks.run --memory-child CONFIG``.
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from .networks import build_replicate_step, build_step, network_specs


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
