"""The fused draw + KL loops compiled by the C++ compiler itself (float32, CPU, 1 thread).

Private. :func:`fused_forward` and :func:`fused_backward` run ``fused_forward.cpp`` (next to
this file): the loops of :func:`svbnn._kernels.fused_forward` and
:func:`svbnn._kernels.fused_backward`, operation for operation, that the compiler vectorises
on its own. Their elementwise outputs are the inductor kernels' bit for bit (no
multiply-adds are contracted, every operation rounds as torch's does), so a run is the same
whichever of the two drew its weights; only the KL sum adds in another order (its value is
reported, its gradient is a constant). A training step of the MNIST network takes 0.94 of
its time with the inductor kernels (``docs/performance.md``).

The library is compiled on first use with ``$CXX`` (default ``c++``) into
``$SVBNN_CACHE_DIR`` (default ``~/.cache/svbnn``), named by a hash of the source, the
flags, the compiler and the CPU, and reused from there. Without a compiler, or where it
fails, the caller keeps the inductor kernel (:func:`available` says which).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import subprocess
import tempfile
import threading
from pathlib import Path

import torch
from torch import Tensor

__all__ = ["available", "backward_usable", "fused_backward", "fused_forward", "usable"]

logger = logging.getLogger(__name__)

_SOURCE = Path(__file__).with_name("fused_forward.cpp")
_FLAGS = [
    "-std=c++20",
    "-O3",
    "-march=native",
    # x86: the full width of AVX-512 where the CPU has it (GCC otherwise prefers 256 bits,
    # measured 0.96 of inductor's time against 0.66-0.69 with 512, both contracted).
    *(["-mprefer-vector-width=512"] if platform.machine().lower() in ("x86_64", "amd64") else []),
    "-fopenmp-simd",
    "-fno-math-errno",
    "-fno-trapping-math",
    # Every operation rounds on its own, as in torch: the outputs stay the inductor kernel's.
    "-ffp-contract=off",
    "-shared",
    "-fPIC",
]
_FUNCTIONS = {2.0: "svbnn_fused_forward_k2", 1.0: "svbnn_fused_forward_k1"}
# mu, rho, alpha; n, the two seed words; log lambda, log(1 - lambda), log sigma_0, 1 / sigma_0^2;
# the six outputs.
_ARGTYPES: list[type] = [
    *([ctypes.c_void_p] * 3),
    ctypes.c_int64,
    ctypes.c_int32,
    ctypes.c_int32,
    *([ctypes.c_float] * 4),
    *([ctypes.c_void_p] * 6),
]

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_failed = False


def _cpu_signature() -> str:
    """What ``-march=native`` compiles for: the CPU's model and flags."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            lines = [ln for ln in f if ln.startswith(("model name", "flags"))][:2]
    except OSError:
        lines = []
    return platform.machine() + platform.processor() + "".join(lines)


def _compile() -> ctypes.CDLL:
    """Compile (or find in the cache) and load the library; raises on any failure."""
    compiler = os.environ.get("CXX", "c++")
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    key = hashlib.sha256(
        "\0".join(
            [_SOURCE.read_text(), " ".join(_FLAGS), compiler, version, _cpu_signature()]
        ).encode()
    ).hexdigest()[:20]
    cache = Path(os.environ.get("SVBNN_CACHE_DIR", Path.home() / ".cache" / "svbnn"))
    target = cache / f"fused_forward-{key}.so"
    if not target.exists():
        cache.mkdir(parents=True, exist_ok=True)
        # Compiled beside the target and renamed into place: another process finds either
        # no library or a whole one.
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=cache)
        os.close(fd)
        try:
            logger.info("compiling %s with %s", _SOURCE.name, compiler)
            subprocess.run(
                [compiler, *_FLAGS, str(_SOURCE), "-o", tmp],
                capture_output=True,
                text=True,
                check=True,
                timeout=300,
            )
            os.replace(tmp, target)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    lib = ctypes.CDLL(str(target))
    for name in _FUNCTIONS.values():
        fn = getattr(lib, name)
        fn.argtypes = _ARGTYPES
        fn.restype = ctypes.c_double
    # g_theta, g_kl, theta, a_fac, r_fac, kl_mu, kl_rho, kl_alpha, n
    lib.svbnn_fused_backward.argtypes = [
        ctypes.c_void_p,
        ctypes.c_float,
        *([ctypes.c_void_p] * 6),
        ctypes.c_int64,
    ]
    lib.svbnn_fused_backward.restype = None
    return lib


def available() -> bool:
    """Whether the compiled library is loaded, compiling it on the first call. A failure
    (no compiler, a compile error) is logged once and the answer stays ``False``."""
    global _library, _failed
    if _library is not None or _failed:
        return _library is not None
    with _lock:
        if _library is None and not _failed:
            try:
                _library = _compile()
            except (OSError, RuntimeError, subprocess.SubprocessError, AttributeError) as err:
                _failed = True
                detail = getattr(err, "stderr", "") or err
                logger.warning(
                    "the native draw + KL kernel did not compile (%s); using the inductor kernel",
                    str(detail).strip().splitlines()[-1:] or err,
                )
    return _library is not None


def _flat_float32(*tensors: Tensor) -> bool:
    """One network's flat float32 CPU arrays: contiguous, ``(T,)`` alike, T < 2^31."""
    first = tensors[0]
    return (
        # Inside a caller's torch.compile the inductor kernel traces into its graph; a
        # ctypes call would break it.
        not torch.compiler.is_compiling()
        and os.environ.get("SVBNN_NATIVE", "1") != "0"
        and torch.get_num_threads() == 1
        and first.dim() == 1
        and first.numel() < 2**31
        and all(
            t.device.type == "cpu"
            and t.dtype == torch.float32
            and t.is_contiguous()
            and t.shape == first.shape
            for t in tensors
        )
    )


def usable(mu: Tensor, rho: Tensor, alpha: Tensor, log_lam: Tensor, inv_tau: float) -> bool:
    """Whether :func:`fused_forward` serves this call: one network's flat float32 CPU
    parameters (contiguous, ``(T,)``, fewer than 2^31), a scalar prior, ``1 / tau`` of 1
    or 2, one torch thread (the inductor kernel splits its loop among several), outside a
    caller's ``torch.compile``, no ``SVBNN_NATIVE=0``, and the library compiled. Otherwise
    the inductor kernel runs, with the same results."""
    return (
        inv_tau in _FUNCTIONS
        and log_lam.dim() == 0
        and _flat_float32(mu, rho, alpha)
        and available()
    )


def backward_usable(g_theta: Tensor, g_kl: Tensor, saved: tuple[Tensor, ...]) -> bool:
    """Whether :func:`fused_backward` serves this call: as :func:`usable`, for the incoming
    gradient ``g_theta`` and the six saved arrays, with one ``g_kl``."""
    return g_kl.numel() == 1 and _flat_float32(g_theta, *saved) and available()


def fused_forward(
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
    """:func:`svbnn._kernels.fused_forward` in the compiled library; call it where
    :func:`usable` says so. Same arguments and outputs (``kl`` a 0-dim tensor)."""
    assert _library is not None
    fn = getattr(_library, _FUNCTIONS[inv_tau])
    outs = [torch.empty_like(mu) for _ in range(6)]
    seeds = seed.tolist()
    kl = fn(
        mu.data_ptr(),
        rho.data_ptr(),
        alpha.data_ptr(),
        mu.numel(),
        seeds[0],
        seeds[1],
        float(log_lam),
        float(log_1mlam),
        log_sigma0,
        prec0,
        *(o.data_ptr() for o in outs),
    )
    theta, a_fac, r_fac, kl_mu, kl_rho, kl_alpha = outs
    return theta, mu.new_tensor(kl), a_fac, r_fac, kl_mu, kl_rho, kl_alpha


def fused_backward(
    g_theta: Tensor,
    g_kl: Tensor,
    theta: Tensor,
    a_fac: Tensor,
    r_fac: Tensor,
    kl_mu: Tensor,
    kl_rho: Tensor,
    kl_alpha: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`svbnn._kernels.fused_backward` with ``into_factors=True`` in the compiled
    library (where :func:`backward_usable` says so): the gradients over ``kl_mu, kl_rho,
    kl_alpha``, which it returns."""
    assert _library is not None
    _library.svbnn_fused_backward(
        g_theta.data_ptr(),
        float(g_kl),
        theta.data_ptr(),
        a_fac.data_ptr(),
        r_fac.data_ptr(),
        kl_mu.data_ptr(),
        kl_rho.data_ptr(),
        kl_alpha.data_ptr(),
        theta.numel(),
    )
    return kl_mu, kl_rho, kl_alpha
