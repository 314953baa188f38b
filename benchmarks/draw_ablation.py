"""What each part of the native draw + KL forward costs inside a training step, and how close
to the dense step a cheaper forward could bring the MNIST step: the measurement behind
issue 17's missed 1.5x (``docs/performance.md``, "What 1.5x on MNIST would take").

Variants of ``svbnn/_engine/native/fused_forward.cpp`` are made by replacing one piece of the
loop's source (each replacement is checked to apply, so a changed source stops the run
instead of timing the wrong thing), compiled alone with the library's flags into a plain
shared library called through ``ctypes`` (the library's own loop too, as the first
variant), and swapped in for the extension's forward loop one after another, in
interleaved rounds in one process, while the training step of
``benchmarks.networks.build_step`` runs beside the dense step. The variants that drop a
piece compute wrong draws: they are for timing only, and say what the piece costs (an
upper bound on what a cheaper version of it could save). The two ``exp parametrisation``
variants compute what a loop with ``sigma = exp(rho)`` computes (the operations issue 17
allows if the simulation tables stay within their error bars); fed the library's ``rho``
they draw other weights, so they too are for timing only.

Run: ``python -m benchmarks.draw_ablation [--rounds 15] [--steps 10]`` (the MNIST network);
prints a Markdown table (medians over rounds, [interquartile range], ratios as medians of
per-round ratios); ``--out DIR`` also writes ``draw_ablation.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from svbnn import kernel_backend
from svbnn._engine import native as _native
from svbnn_experiments.files import atomic_write_text

from .networks import DENSE, SVBNN, NetSpec, build_step, network_specs

_NOISE = "float eps = std::sqrt(-2.0f * log_(v1)) * cos_2pi(v2);"
_LOG_SIGMA = "float log_sigma = tiny ? rho[i] : log_(sigma_or_1);"
_HASH_BASE = """uint32_t base =
                hash32(hash32(static_cast<uint32_t>(index0 + i) ^ static_cast<uint32_t>(seed0)) +
                       static_cast<uint32_t>(seed1));"""
_HASH_2 = "uint32_t h2 = hash32(base + 0x5BD1E995u);"
_SOFTPLUS_RHO = """float sigma, unused, d_sigma, unused2;
            softplus_parts(rho[i], sigma, unused, d_sigma, unused2);"""
_KL_RHO_TAIL = "phi * (tiny ? 1.0f - 0.5f * d_sigma : d_sigma / sigma_or_1);"
# sigma = exp(rho) (log sigma as the free parameter): one exp for softplus' exp, log1p and
# division, log sigma = rho, d sigma / d rho = sigma, and kl_rho = phi (prec0 sigma^2 - 1).
# The library's exp of a non-positive argument serves up to float32's overflow at 88.
_EXP_PARAMETRISATION = [
    (
        _SOFTPLUS_RHO,
        "float sigma = exp_nonpositive(rho[i] > 88.0f ? 88.0f : rho[i]);\n"
        "            float d_sigma = sigma;",
    ),
    (_LOG_SIGMA, "float log_sigma = rho[i];"),
    (_KL_RHO_TAIL, "phi;"),
]
_CHEAP = {
    "noise": [(_NOISE, "float eps = v1 - v2;")],
    "log sigma": [(_LOG_SIGMA, "float log_sigma = tiny ? rho[i] : sigma_or_1;")],
    "hashes": [
        (_HASH_BASE, "uint32_t base = static_cast<uint32_t>(index0 + i) * 0x7FEB352Du;"),
        (_HASH_2, "uint32_t h2 = base ^ 0x5BD1E995u;"),
    ],
}


@dataclass(frozen=True)
class Variant:
    """One build of the forward loop: source replacements and whether multiply-adds are
    contracted into FMAs (``-ffp-contract=fast``; the library keeps them apart)."""

    name: str
    what: str
    replace: tuple[tuple[str, str], ...] = ()
    contract: bool = False


VARIANTS = (
    Variant("library", "the library's loop, as shipped"),
    Variant("contracted", "the same loop, multiply-adds contracted", contract=True),
    Variant(
        "no normal noise",
        "eps = v1 - v2: Box-Muller's log, sqrt and cos dropped",
        tuple(_CHEAP["noise"]),
    ),
    Variant("no log sigma", "log sigma = sigma: one log dropped", tuple(_CHEAP["log sigma"])),
    Variant(
        "one multiply for the hashes",
        "the three 32-bit hashes replaced by one multiply",
        tuple(_CHEAP["hashes"]),
    ),
    Variant(
        "bound",
        "all three dropped and contracted",
        tuple(r for v in _CHEAP.values() for r in v),
        contract=True,
    ),
    Variant(
        "exp parametrisation",
        "sigma = exp(rho): log sigma = rho, no softplus, no log",
        tuple(_EXP_PARAMETRISATION),
    ),
    Variant(
        "exp parametrisation, contracted",
        "the same, multiply-adds contracted",
        tuple(_EXP_PARAMETRISATION),
        contract=True,
    ),
)


def variant_source(source: str, variant: Variant) -> str:
    """``source`` with ``variant``'s replacements, each of which must match exactly once."""
    for old, new in variant.replace:
        if source.count(old) != 1:
            raise ValueError(f"{variant.name}: the loop's source no longer has {old!r}")
        source = source.replace(old, new)
    return source


_P, _I = ctypes.c_void_p, ctypes.c_int64
# fused_forward.cpp's functions (loops.h): mu, rho, alpha, rows, n, the two seed words,
# log lambda, log(1 - lambda), log sigma_0, 1 / sigma_0^2, the six outputs and the rows' KL;
# and the backward: g_theta, g_kl, theta, a_fac, r_fac, kl_mu, kl_rho, kl_alpha, rows, n.
_FORWARD_ARGTYPES: list[type] = [
    *([_P] * 3),
    _I,
    _I,
    ctypes.c_int32,
    ctypes.c_int32,
    *([ctypes.c_float] * 4),
    *([_P] * 7),
]
_BACKWARD_ARGTYPES: list[type] = [*([_P] * 8), _I, _I]


class VariantLoops:
    """A variant's draw + KL loops (a plain shared library of ``fused_forward.cpp`` alone,
    built in seconds), called as the extension's ``fused_forward`` and ``fused_backward``
    are. Every variant, the library's own loop included, runs through this same glue."""

    def __init__(self, lib: ctypes.CDLL) -> None:
        self._lib = lib
        for name in ("svbnn_fused_forward_k2", "svbnn_fused_forward_k1"):
            getattr(lib, name).argtypes = _FORWARD_ARGTYPES
            getattr(lib, name).restype = None
        lib.svbnn_fused_backward.argtypes = _BACKWARD_ARGTYPES
        lib.svbnn_fused_backward.restype = None

    @staticmethod
    def _rows(t: torch.Tensor) -> tuple[int, int]:
        return (t.shape[0], t.shape[1]) if t.dim() == 2 else (1, t.numel())

    def fused_forward(
        self,
        mu: Any,
        rho: Any,
        alpha: Any,
        seed: Any,
        log_lam: Any,
        log_1mlam: Any,
        log_sigma0: float,
        prec0: float,
        inv_tau: float,
    ) -> Any:
        fn = (
            self._lib.svbnn_fused_forward_k2 if inv_tau == 2.0 else self._lib.svbnn_fused_forward_k1
        )
        outs = [torch.empty_like(mu) for _ in range(6)]
        kl = mu.new_empty(mu.shape[:-1])
        seed0, seed1 = seed.tolist()
        fn(
            mu.data_ptr(),
            rho.data_ptr(),
            alpha.data_ptr(),
            *self._rows(mu),
            seed0,
            seed1,
            float(log_lam),
            float(log_1mlam),
            log_sigma0,
            prec0,
            *(o.data_ptr() for o in outs),
            kl.data_ptr(),
        )
        theta, a_fac, r_fac, kl_mu, kl_rho, kl_alpha = outs
        return theta, kl, a_fac, r_fac, kl_mu, kl_rho, kl_alpha

    def fused_backward(
        self,
        g_theta: Any,
        g_kl: Any,
        theta: Any,
        a_fac: Any,
        r_fac: Any,
        kl_mu: Any,
        kl_rho: Any,
        kl_alpha: Any,
    ) -> None:
        g_kl = g_kl.contiguous()
        self._lib.svbnn_fused_backward(
            *(t.data_ptr() for t in (g_theta, g_kl, theta, a_fac, r_fac, kl_mu, kl_rho, kl_alpha)),
            *self._rows(theta),
        )


def build(variant: Variant, directory: Path) -> VariantLoops:
    """Compile ``variant`` of ``fused_forward.cpp`` with the library's flags."""
    src = directory / f"{variant.name.replace(' ', '_')}.cpp"
    src.write_text(variant_source(_native._SOURCES[0].read_text(), variant))
    flags = [
        ("-ffp-contract=fast" if variant.contract else f) if f.startswith("-ffp-contract") else f
        for f in _native._FLAGS
    ]
    out = src.with_suffix(".so")
    compiler = os.environ.get("CXX", "c++")
    include = f"-I{_native._SOURCES[0].parent}"  # loops.h, elementwise.h
    subprocess.run(
        [compiler, *flags, "-shared", "-fPIC", include, str(src), "-o", str(out)],
        check=True,
        capture_output=True,
    )
    return VariantLoops(ctypes.CDLL(str(out)))


class _Swapped:
    """The loaded extension with its draw + KL functions taken from a variant's build."""

    def __init__(self, fused: VariantLoops, rest: Any) -> None:
        self._fused, self._rest = fused, rest

    def __getattr__(self, name: str) -> Any:
        return getattr(self._fused if name.startswith("fused_") else self._rest, name)


@contextlib.contextmanager
def _timed_forward(spent: list[float]) -> Iterator[None]:
    """Adds the time of every native forward call to ``spent[0]`` while open."""
    original = _native.fused_forward

    def timed(*args: Any) -> Any:
        t = time.perf_counter()
        out = original(*args)
        spent[0] += time.perf_counter() - t
        return out

    _native.fused_forward = timed
    try:
        yield
    finally:
        _native.fused_forward = original


def _stats(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4) if len(values) > 1 else [values[0]] * 3
    return {"median": statistics.median(values), "q1": q[0], "q3": q[2]}


def measure(
    net: NetSpec, rounds: int, steps: int, variants: tuple[Variant, ...] = VARIANTS
) -> dict[str, Any]:
    """Interleaved rounds of ``steps`` training steps of ``net`` with each variant's forward
    loop, and of the dense step; per variant the forward's time inside the step, the step,
    and the per-round ratios to the library's step and to the dense step (milliseconds).
    The step runs under the ``native`` backend, the one that draws with this loop; ``net``
    must be one it trains outside its whole native step (12,288 parameters or more and
    layers wider than 16 outputs), whose draw + KL is this loop alone."""
    if not _native.available():
        raise SystemExit("the native loops do not compile here (see svbnn._engine.native)")
    library = _native.library
    assert library() is not None
    per_step: dict[str, list[float]] = {v.name: [] for v in variants}
    forward: dict[str, list[float]] = {v.name: [] for v in variants}
    dense: list[float] = []
    spent = [0.0]

    def block(step: Callable[[], None]) -> float:
        t = time.perf_counter()
        for _ in range(steps):
            step()
        return (time.perf_counter() - t) / steps * 1e3

    with tempfile.TemporaryDirectory() as tmp, kernel_backend("native"):
        libs = {v.name: _Swapped(build(v, Path(tmp)), library()) for v in variants}
        svbnn_step, _ = build_step(net, SVBNN, seed=5)
        dense_step, _ = build_step(net, DENSE, seed=5)
        try:
            with _timed_forward(spent):
                for v in variants:  # warm every variant once
                    _native.library = lambda lib=libs[v.name]: lib  # type: ignore[misc]
                    svbnn_step()
                dense_step()
                for _ in range(rounds):
                    for v in variants:
                        _native.library = lambda lib=libs[v.name]: lib  # type: ignore[misc]
                        svbnn_step()  # the first step after a swap is not timed
                        spent[0] = 0.0
                        per_step[v.name].append(block(svbnn_step))
                        forward[v.name].append(spent[0] / steps * 1e3)
                    dense.append(block(dense_step))
        finally:
            _native.library = library  # type: ignore[method-assign]
    base = per_step[variants[0].name]
    rows = []
    for v in variants:
        s = per_step[v.name]
        rows.append(
            {
                "variant": v.name,
                "what": v.what,
                "forward_ms": _stats(forward[v.name]),
                "step_ms": _stats(s),
                "step_over_library": _stats([a / b for a, b in zip(s, base, strict=True)]),
                "svbnn_over_dense": _stats([a / b for a, b in zip(s, dense, strict=True)]),
            }
        )
    return {
        "network": net.label,
        "rounds": rounds,
        "steps": steps,
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "dense_ms": _stats(dense),
        "rows": rows,
    }


def markdown(res: dict[str, Any]) -> str:
    """The result as a Markdown table."""

    def cell(s: dict[str, float], digits: int = 3) -> str:
        return f"{s['median']:.{digits}f} [{s['q1']:.{digits}f}-{s['q3']:.{digits}f}]"

    lines = [
        f"{res['network']} training step with variants of the native draw + KL forward loop "
        f"(torch {res['torch']}, {res['threads']} thread(s), {res['rounds']} interleaved "
        f"rounds of {res['steps']} steps; dense step {cell(res['dense_ms'], 2)} ms).",
        "",
        "| variant | what | forward in the step, ms | step, ms | step / library's | "
        "SVBNN / dense |",
        "|---|---|---|---|---|---|",
    ]
    for r in res["rows"]:
        lines.append(
            f"| {r['variant']} | {r['what']} | {cell(r['forward_ms'], 2)} | "
            f"{cell(r['step_ms'], 2)} | {cell(r['step_over_library'])} | "
            f"{cell(r['svbnn_over_dense'])} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be positive")
    torch.set_num_threads(args.threads)
    res = measure(network_specs(512, 1024)["mnist"], args.rounds, args.steps)
    text = markdown(res)
    print(text, end="")
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out / "draw_ablation.md", text)
        atomic_write_text(args.out / "draw_ablation.json", json.dumps(res, indent=2) + "\n")
    return res


if __name__ == "__main__":
    main()
