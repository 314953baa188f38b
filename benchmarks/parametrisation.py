"""What ``sigma = exp(rho)`` (log sigma as the free parameter) would save over the library's
``sigma = softplus(rho)`` in the compiled draw + KL forward.

Issue 17 asked to reconsider the parametrisation for speed. This times the library's
kernel (:func:`svbnn._engine.kernels.fused_forward`, compiled) against a prototype of the same
kernel with ``sigma = exp(rho)``: ``log sigma = rho`` needs no logarithm and
``d sigma / d rho = sigma`` no sigmoid, so the prototype drops one ``log1p`` and one ``log``
an element and keeps everything else (noise, gate, KL, saved factors) as it is. The
backward kernel reads the same saved factors either way, so the forward is the whole
difference. The prototype is checked first: fed ``rho' = log(softplus(rho))``, the same
``sigma``, it must give the library kernel's weights, KL and factors to float32 rounding.

Run: ``python -m benchmarks.parametrisation [--rounds 30] [--threads 1]``; prints a
Markdown table of the two kernels side by side and their ratio (medians of per-round
ratios, interleaved rounds). Not used by the library: the decision it measures is in
``docs/performance.md`` ("The parametrisation of sigma").
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from functools import partial
from typing import Any

import torch
from torch import Tensor

from svbnn._engine.fused_math import _exp_nonpositive, _softplus_parts, counter_noise
from svbnn._engine.kernels import _slab_kl, fused_forward

from .timing import paired_ratio, time_interleaved

Kernel = Callable[..., tuple[Tensor, ...]]
# The paper's networks by their parameter count: MNIST 784-512-512-10, and 15 replications
# of Simulation II's 200-7-7-7-1 as one network (a worker's chunk of Table 2).
SIZES = {"MNIST (784-512-512-10)": 669_706, "Simulation II, 15 replicates": 15 * 1_527}


def _exp(x: Tensor) -> Tensor:
    # exp of any sign from the library's inline exp of a non-positive argument: one exp.
    e = _exp_nonpositive(-x.abs())
    return torch.where(x > 0, 1.0 / e, e)


def fused_forward_log_sigma(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    seed: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    log_sigma0: float,
    prec0: float,
    inv_tau: float,
) -> tuple[Tensor, ...]:
    """:func:`fused_forward` with ``sigma = exp(rho)``, for ``tau = 0.5`` (the paper's;
    ``prec0 = 1 / sigma_0^2``, ``inv_tau = 1 / tau``, as the library kernel takes them):
    the same outputs, ``r_fac = eps sigma`` and ``kl_rho = phi (prec0 sigma^2 - 1)``."""
    if inv_tau != 2.0:
        raise ValueError("the prototype is written for tau = 0.5")
    u, eps = counter_noise(mu, seed)
    sigma = _exp(rho)
    sp_alpha, log_phi, phi, one_m_phi = _softplus_parts(alpha)
    slab_w = mu + sigma * eps
    theta = torch.where(u > one_m_phi, slab_w, torch.zeros_like(mu))
    slab = _slab_kl(mu, sigma, rho, log_sigma0, prec0)
    kl = phi * (log_phi - log_lam) + one_m_phi * (-sp_alpha - log_1mlam) + phi * slab
    a = phi * u
    b = one_m_phi * (1.0 - u)
    ab = (a * b) / (a * a + b * b)
    a_fac = slab_w * (ab * ab) * 2.0
    phi_v = phi * prec0
    kl_rho = phi_v * sigma * sigma - phi
    kl_alpha = phi * one_m_phi * (alpha - log_lam + log_1mlam + slab)
    return theta, kl.sum(-1), a_fac, eps * sigma, phi_v * mu, kl_rho, kl_alpha


def _arguments(numel: int, log_sigma: bool) -> tuple[Any, ...]:
    # Posterior-like values: small sigmas (the layers start at rho = -6), gates on both sides.
    g = torch.Generator().manual_seed(0)
    mu = torch.randn(numel, generator=g) * 0.05
    rho = -6.0 + torch.randn(numel, generator=g)
    alpha = torch.randn(numel, generator=g) * 3.0
    if log_sigma:
        rho = torch.log(torch.nn.functional.softplus(rho))  # the same sigma
    seed = torch.tensor([12345, 678], dtype=torch.int32)
    var0 = 2.0
    return (
        mu,
        rho,
        alpha,
        seed,
        torch.tensor(-16.5),
        torch.tensor(-6.8e-8),
        0.5 * math.log(var0),
        1.0 / var0,
        2.0,  # 1 / tau
    )


def max_difference(library: Kernel, prototype: Kernel) -> float:
    """Largest relative difference of the outputs both define alike (all but ``r_fac`` and
    ``kl_rho``, whose chain-rule factor differs by design), on the same sigmas; eager or
    compiled."""
    a = library(*_arguments(40_000, False))
    b = prototype(*_arguments(40_000, True))
    worst = 0.0
    for i in (0, 1, 2, 4, 6):
        scale = a[i].abs().max().clamp_min(1e-30)
        worst = max(worst, float((a[i] - b[i]).abs().max() / scale))
    return worst


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--min-block-ms", type=float, default=50.0)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    library = torch.compile(fused_forward, dynamic=True)
    prototype = torch.compile(fused_forward_log_sigma, dynamic=True)
    with torch.no_grad():
        diff = max_difference(library, prototype)
        if diff > 1e-5:
            raise SystemExit(f"the prototype disagrees with the library kernel: {diff:.2e}")
        print(f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} rounds")
        print(f"prototype against the library kernel, same sigma: max rel. diff {diff:.1e}\n")
        print("| parameters | softplus (library), ms | exp (prototype), ms | exp / softplus |")
        print("|---|---|---|---|")
        for label, numel in SIZES.items():
            soft, log = _arguments(numel, False), _arguments(numel, True)
            t = time_interleaved(
                {"softplus": partial(library, *soft), "exp": partial(prototype, *log)},
                args.rounds,
                args.min_block_ms / 1e3,
                warmup=3,
            )
            med, q1, q3 = paired_ratio(t["exp"], t["softplus"])
            print(
                f"| {label}: {numel:,} | {t['softplus'].median * 1e3:.3f} | "
                f"{t['exp'].median * 1e3:.3f} | {med:.3f} [{q1:.3f}-{q3:.3f}] |"
            )


if __name__ == "__main__":
    main()
