"""Loops compiled by the C++ compiler itself (float32, CPU). Private.

* :func:`fused_forward` and :func:`fused_backward` run ``fused_forward.cpp`` (next to this
  file): the loops of :func:`svbnn._engine.kernels.fused_forward` and
  :func:`svbnn._engine.kernels.fused_backward`, operation for operation, that the compiler
  vectorises on its own, for one network or R replicates (one torch thread). Their
  elementwise outputs are the inductor kernels' bit for bit (no multiply-adds are
  contracted, every operation rounds as torch's does), so a run is the same whichever of the
  two drew its weights; only the KL sum adds in another order (its value is reported, its
  gradient is a constant). Timings: ``docs/performance.md``.
* :func:`gather_rows`, :func:`narrow_mlp_forward` and :func:`narrow_mlp_backward` run
  ``replicated_layers.cpp``: a minibatch's gather with prefetching, and a replicated
  network of narrow layers (Simulation II's 200-7-7-7-1), where MKL's packing of the
  minibatch costs more than the first layer's products and the small layers are a dozen
  torch operations each; :func:`narrow_mlp_gaussian_step` runs both, replicate by
  replicate, for the training step under a Gaussian likelihood.

The library is built with ``$CXX`` (default ``c++``): at install by ``python -m
svbnn._engine.native`` (``make install`` runs it) into the package's own ``_build`` folder, with its
SHA-256 in a manifest there, and loaded only if the file matches it; otherwise compiled on
first use for the process alone, in a private temporary folder (see ``SECURITY.md``). Without
a compiler, or where it fails, the callers keep torch's operations (:func:`available` says
which).
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import logging
import os
import platform
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

__all__ = [
    "BUILD_DIR",
    "available",
    "build_into_package",
    "backward_usable",
    "fused_backward",
    "fused_forward",
    "gather_rows",
    "gather_usable",
    "narrow_mlp_backward",
    "narrow_mlp_forward",
    "narrow_mlp_gaussian_step",
    "narrow_mlp_usable",
    "narrow_network",
    "usable",
]

logger = logging.getLogger(__name__)

_SOURCES = [
    Path(__file__).with_name(name) for name in ("fused_forward.cpp", "replicated_layers.cpp")
]
_FLAGS = [
    "-std=c++20",
    "-O3",
    "-march=native",
    # x86: the full width of AVX-512 where the CPU has it (GCC otherwise prefers 256 bits;
    # docs/performance.md, "The draw + KL loops built by the C++ compiler").
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
# mu, rho, alpha; rows, n, the two seed words; log lambda, log(1 - lambda), log sigma_0,
# 1 / sigma_0^2; the six outputs and the rows' KL.
_ARGTYPES: list[type] = [
    *([ctypes.c_void_p] * 3),
    ctypes.c_int64,
    ctypes.c_int64,
    ctypes.c_int32,
    ctypes.c_int32,
    *([ctypes.c_float] * 4),
    *([ctypes.c_void_p] * 7),
]
_P, _I = ctypes.c_void_p, ctypes.c_int64
# name: argument types (svbnn_fused_backward and replicated_layers.cpp's functions)
_SIGNATURES: dict[str, list[type]] = {
    # g_theta, g_kl (one per row), theta, a_fac, r_fac, kl_mu, kl_rho, kl_alpha, rows, n
    "svbnn_fused_backward": [*([_P] * 8), _I, _I],
    # src, rows, n_rows, row_bytes, out
    "svbnn_gather_rows": [_P, _P, _I, _I, _P],
    # x, R, m, p, theta, theta_stride, n_layers, outs, relu, hs, out
    "svbnn_narrow_mlp_forward": [_P, _I, _I, _I, _P, _I, _I, _P, ctypes.c_int32, _P, _P],
    # x, R, m, p, theta, theta_stride, n_layers, outs, relu, hs, g, grad, grad_stride
    "svbnn_narrow_mlp_backward": [_P, _I, _I, _I, _P, _I, _I, _P, ctypes.c_int32, _P, _P, _P, _I],
    # x, R, m, p, theta, theta_stride, n_layers, outs, relu, hs, out, y, v, g_mean, grad,
    # grad_stride
    "svbnn_narrow_mlp_gaussian_step": [
        *[_P, _I, _I, _I, _P, _I, _I, _P, ctypes.c_int32, _P, _P, _P],
        *[ctypes.c_float, ctypes.c_float, _P, _I],
    ],
}

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


BUILD_DIR = Path(__file__).with_name("_build")
"""Where ``python -m svbnn._engine.native`` (run by ``make install``) builds the library, inside the
installed package, beside a manifest of its SHA-256: trusted as the package's own code is."""
_MANIFEST = "manifest.json"


def _build_key(compiler: str) -> str:
    """A hash of what the library is built from: the sources, the flags, the compiler and its
    version, and the CPU that ``-march=native`` compiles for."""
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return hashlib.sha256(
        "\0".join(
            [*(src.read_text() for src in _SOURCES), " ".join(_FLAGS), compiler, version]
            + [_cpu_signature()]
        ).encode()
    ).hexdigest()[:20]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _build(compiler: str, target: Path) -> None:
    """Compile the sources into ``target``: written beside it and renamed into place, so that
    another process finds either no library or a whole one."""
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
    os.close(fd)
    try:
        logger.info("compiling %s with %s", [src.name for src in _SOURCES], compiler)
        subprocess.run(
            [compiler, *_FLAGS, *map(str, _SOURCES), "-o", tmp],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        os.replace(tmp, target)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build_into_package(build_dir: Path | None = None) -> Path:
    """Build the library into the installed package (``BUILD_DIR``) and record its SHA-256
    in the manifest there; returns the library's path. Raises on any failure."""
    build_dir = BUILD_DIR if build_dir is None else build_dir
    compiler = os.environ.get("CXX", "c++")
    key = _build_key(compiler)
    build_dir.mkdir(parents=True, exist_ok=True)
    target = build_dir / f"svbnn_native-{key}.so"
    _build(compiler, target)
    manifest = _read_manifest(build_dir)
    manifest[key] = _sha256(target)
    fd, tmp = tempfile.mkstemp(suffix=".json", dir=build_dir)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    os.replace(tmp, build_dir / _MANIFEST)
    return target


def _read_manifest(build_dir: Path) -> dict[str, str]:
    try:
        data = json.loads((build_dir / _MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _compile() -> ctypes.CDLL:
    """Load the library; raises on any failure.

    The install's build (``BUILD_DIR``) is loaded only if its SHA-256 equals the one the
    package's manifest recorded for these sources, flags, compiler and CPU. Otherwise (no
    install build, another compiler or CPU, a file that does not match) the library is
    compiled for this process alone into a fresh private temporary folder: nothing is ever
    loaded from a folder that another user or process could have written into.
    """
    compiler = os.environ.get("CXX", "c++")
    key = _build_key(compiler)
    installed = BUILD_DIR / f"svbnn_native-{key}.so"
    expected = _read_manifest(BUILD_DIR).get(key)
    if expected is not None and installed.is_file():
        if _sha256(installed) == expected:
            return _bind(ctypes.CDLL(str(installed)))
        logger.warning(
            "%s does not match the SHA-256 in svbnn's manifest; not loaded (building a "
            "private copy; `python -m svbnn._engine.native` rebuilds the installed one)",
            installed,
        )
    with tempfile.TemporaryDirectory(prefix="svbnn-native-") as private:
        target = Path(private) / "svbnn_native.so"
        _build(compiler, target)
        # Loaded (mapped) before the folder goes: the process keeps the mapping.
        return _bind(ctypes.CDLL(str(target)))


def _bind(lib: ctypes.CDLL) -> ctypes.CDLL:
    for name in _FUNCTIONS.values():
        fn = getattr(lib, name)
        fn.argtypes = _ARGTYPES
        fn.restype = None
    for name, argtypes in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.argtypes = argtypes
        fn.restype = None
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
                    "svbnn's native loops did not compile (%s); using torch's kernels instead",
                    str(detail).strip().splitlines()[-1:] or err,
                )
    return _library is not None


def _enabled() -> bool:
    # Inside a caller's torch.compile torch's operations trace into its graph; a ctypes call
    # would break it. SVBNN_NATIVE=0 turns every native loop off (read at each use).
    setting = os.environ.get("SVBNN_NATIVE", "1")
    if setting not in ("0", "1"):
        raise ValueError(f"SVBNN_NATIVE must be 0 or 1, got {setting!r}")
    return setting == "1" and not torch.compiler.is_compiling()


def _cpu_float32(*tensors: Tensor) -> bool:
    return all(
        t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous() for t in tensors
    )


def _parameter_rows(*tensors: Tensor, any_threads: bool = False) -> bool:
    """One network's flat float32 CPU arrays ``(T,)``, or R replicates' ``(R, T)``, alike and
    contiguous, fewer than 2^31 elements, with one torch thread unless ``any_threads``."""
    first = tensors[0]
    return (
        _enabled()
        # The inductor kernel splits its loop among threads; with one it and this loop agree.
        # A caller that never runs inductor's kernel (the native backend) needs no agreement.
        and (any_threads or torch.get_num_threads() == 1)
        and first.dim() in (1, 2)
        and 0 < first.numel() < 2**31
        and _cpu_float32(*tensors)
        and all(t.shape == first.shape for t in tensors)
    )


def usable(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    log_lam: Tensor,
    inv_tau: float,
    any_threads: bool = False,
) -> bool:
    """Whether :func:`fused_forward` serves this call: one network's flat float32 CPU
    parameters ``(T,)`` or R replicates' ``(R, T)`` (contiguous, fewer than 2^31), a scalar
    prior, ``1 / tau`` of 1 or 2, one torch thread (the inductor kernel splits its loop among
    several; ``any_threads`` for a caller that never runs that kernel), outside a caller's
    ``torch.compile``, no ``SVBNN_NATIVE=0``, and the library compiled. Otherwise the
    inductor kernel runs, with the same results."""
    return (
        inv_tau in _FUNCTIONS
        and log_lam.dim() == 0
        and _parameter_rows(mu, rho, alpha, any_threads=any_threads)
        and available()
    )


def backward_usable(
    g_theta: Tensor, g_kl: Tensor, saved: tuple[Tensor, ...], any_threads: bool = False
) -> bool:
    """Whether :func:`fused_backward` serves this call: as :func:`usable`, for the incoming
    gradient ``g_theta`` and the six saved arrays, with one float32 ``g_kl`` per row."""
    rows = g_theta.shape[0] if g_theta.dim() == 2 else 1
    return (
        g_kl.numel() == rows
        and g_kl.dtype == torch.float32
        and g_kl.device.type == "cpu"
        and _parameter_rows(g_theta, *saved, any_threads=any_threads)
        and available()
    )


def _rows(t: Tensor) -> tuple[int, int]:
    return (t.shape[0], t.shape[1]) if t.dim() == 2 else (1, t.numel())


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
    """:func:`svbnn._engine.kernels.fused_forward` in the compiled library; call it where
    :func:`usable` says so. Same arguments and outputs (``kl`` of shape ``mu.shape[:-1]``)."""
    assert _library is not None
    fn = getattr(_library, _FUNCTIONS[inv_tau])
    outs = [torch.empty_like(mu) for _ in range(6)]
    kl = mu.new_empty(mu.shape[:-1])
    seeds = seed.tolist()
    fn(
        mu.data_ptr(),
        rho.data_ptr(),
        alpha.data_ptr(),
        *_rows(mu),
        seeds[0],
        seeds[1],
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
    g_theta: Tensor,
    g_kl: Tensor,
    theta: Tensor,
    a_fac: Tensor,
    r_fac: Tensor,
    kl_mu: Tensor,
    kl_rho: Tensor,
    kl_alpha: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`svbnn._engine.kernels.fused_backward` with ``into_factors=True`` in the compiled
    library (where :func:`backward_usable` says so): the gradients over ``kl_mu, kl_rho,
    kl_alpha``, which it returns. ``g_kl``: one value per row (``()``, ``(1,)`` or ``(R, 1)``)."""
    assert _library is not None
    g_kl = g_kl.contiguous()  # autograd may hand over an expanded (stride 0) gradient
    _library.svbnn_fused_backward(
        g_theta.data_ptr(),
        g_kl.data_ptr(),
        theta.data_ptr(),
        a_fac.data_ptr(),
        r_fac.data_ptr(),
        kl_mu.data_ptr(),
        kl_rho.data_ptr(),
        kl_alpha.data_ptr(),
        *_rows(theta),
    )
    return kl_mu, kl_rho, kl_alpha


def gather_usable(src: Tensor, rows: Tensor, out: Tensor) -> bool:
    """Whether :func:`gather_rows` serves ``torch.index_select(src, 0, rows, out=out)``: CPU
    tensors, ``src`` and ``out`` contiguous and alike in dtype, ``rows`` a contiguous
    ``int64`` vector, one torch thread (``index_select`` splits the rows among several)."""
    return (
        _enabled()
        and torch.get_num_threads() == 1
        and src.dim() >= 1
        and rows.dim() == 1
        and rows.dtype == torch.int64
        and src.dtype == out.dtype
        and all(t.device.type == "cpu" and t.is_contiguous() for t in (src, rows, out))
        and out.shape == (rows.numel(), *src.shape[1:])
        and available()
    )


def gather_rows(src: Tensor, rows: Tensor, out: Tensor) -> Tensor:
    """``out[i] = src[rows[i]]`` (``index_select`` along dimension 0, the same bytes), the
    next rows prefetched while one is copied (``docs/performance.md``, "Replicated networks:
    the gather and the narrow layers"). The rows must be in range (the caller draws them);
    nothing is checked here."""
    assert _library is not None
    row_bytes = src.element_size() * (src.numel() // max(src.shape[0], 1))
    _library.svbnn_gather_rows(
        src.data_ptr(), rows.data_ptr(), rows.numel(), row_bytes, out.data_ptr()
    )
    return out


# The widest layer left to these loops: beyond it, MKL's products win.
NARROW_MAX_OUT = 16
# The hidden activations they know (as svbnn._engine.graphs.activate names them).
_NARROW_ACTIVATIONS = {"relu": 1, "identity": 0}


def narrow_network(
    shapes: tuple[tuple[int, int], ...], activation: str, max_out: int | None = None
) -> bool:
    """Whether the narrow-network loops know this architecture: chained layers
    (``shapes``: ``(out, in)``) of 1 to ``max_out`` outputs (default
    :data:`NARROW_MAX_OUT`), ReLU or no hidden activation. The loops run any width; the
    limit says where MKL's products stop paying more than they win."""
    widest = NARROW_MAX_OUT if max_out is None else max_out
    chained = all(n_in == prev for (_, n_in), (prev, _) in zip(shapes[1:], shapes, strict=False))
    return (
        bool(shapes)
        and chained
        and activation in _NARROW_ACTIVATIONS
        and all(0 < n_out <= widest for n_out, _ in shapes)
    )


def narrow_mlp_usable(
    theta: Tensor, x: Tensor, shapes: tuple[tuple[int, int], ...], activation: str
) -> bool:
    """Whether :func:`narrow_mlp_forward` and :func:`narrow_mlp_backward` serve a replicated
    network: ``theta`` ``(R, T)`` and ``x`` ``(R, m, p)`` contiguous float32 on the CPU,
    layers of at most :data:`NARROW_MAX_OUT` outputs (``shapes``: ``(out, in)``, chained
    from ``p``), ReLU or no hidden activation, nothing autograd would record, outside a
    caller's ``torch.compile``, no ``SVBNN_NATIVE=0``, the library compiled. Any thread
    count: the loops run on one, in a fixed order, so the results do not depend on it."""
    if not (shapes and theta.dim() == 2 and x.dim() == 3 and x.shape[0] == theta.shape[0]):
        return False
    return (
        _enabled()
        # A forward that autograd would record needs torch's operations (callers run these
        # loops inside their own autograd.Function).
        and not (torch.is_grad_enabled() and (theta.requires_grad or x.requires_grad))
        and narrow_network(shapes, activation)
        and shapes[0][1] == x.shape[2]
        and theta.shape[1] >= sum(o * (i + 1) for o, i in shapes)
        and x.numel() > 0
        and _cpu_float32(theta, x)
        and available()
    )


def _outs(shapes: tuple[tuple[int, int], ...]) -> ctypes.Array[ctypes.c_int64]:
    return (ctypes.c_int64 * len(shapes))(*(o for o, _ in shapes))


def _pointers(tensors: list[Tensor]) -> ctypes.Array[ctypes.c_void_p]:
    return (ctypes.c_void_p * max(len(tensors), 1))(*(t.data_ptr() for t in tensors))


def _network_args(
    x: Tensor, theta: Tensor, shapes: tuple[tuple[int, int], ...], activation: str
) -> tuple[Any, ...]:
    """The arguments both narrow-network functions begin with: x, R, m, p, theta, its row
    stride, the number of layers, their outputs, ReLU or none."""
    R, m, p = x.shape
    return (
        x.data_ptr(),
        R,
        m,
        p,
        theta.data_ptr(),
        theta.stride(0),
        len(shapes),
        _outs(shapes),
        _NARROW_ACTIVATIONS[activation],
    )


def narrow_mlp_forward(
    theta: Tensor, x: Tensor, shapes: tuple[tuple[int, int], ...], activation: str
) -> tuple[list[Tensor], Tensor]:
    """:func:`svbnn._engine.graphs.mlp_layers` of R replicates, where
    :func:`narrow_mlp_usable` says so: the hidden activations ``[x^T, h_1, ...]``
    (``(R, width, m)``, ``x^T`` a view) and the output ``(R, out, m)``, feature-major."""
    assert _library is not None
    R, m, p = x.shape
    hs = [x.new_empty((R, o, m)) for o, _ in shapes[:-1]]
    out = x.new_empty((R, shapes[-1][0], m))
    _library.svbnn_narrow_mlp_forward(
        *_network_args(x, theta, shapes, activation), _pointers(hs), out.data_ptr()
    )
    return [x.transpose(1, 2), *hs], out


def narrow_mlp_gaussian_step(
    theta: Tensor,
    x: Tensor,
    y: Tensor,
    shapes: tuple[tuple[int, int], ...],
    activation: str,
    v: float,
    g_mean: float,
    grad: Tensor,
) -> Tensor:
    """:func:`narrow_mlp_forward` and :func:`narrow_mlp_backward` of a network of one output,
    replicate by replicate, with the output's gradient between them formed from the targets
    ``y`` ``(R, m)`` as autograd forms it from a Gaussian log-likelihood ``c + v (y - out)^2``
    averaged over the ``m`` rows and negated (``g_mean = -1 / m`` as a float32). Returns the
    output ``(R, 1, m)``; the weight gradient goes into ``grad`` as there. Where
    :func:`narrow_mlp_usable` says so, with ``y`` contiguous float32."""
    assert _library is not None
    R, m, _ = x.shape
    hs = [x.new_empty((R, o, m)) for o, _ in shapes[:-1]]
    out = x.new_empty((R, 1, m))
    _library.svbnn_narrow_mlp_gaussian_step(
        *_network_args(x, theta, shapes, activation),
        _pointers(hs),
        out.data_ptr(),
        y.data_ptr(),
        v,
        g_mean,
        grad.data_ptr(),
        grad.stride(0),
    )
    return out


def narrow_mlp_backward(
    theta: Tensor,
    hs: list[Tensor],
    g: Tensor,
    shapes: tuple[tuple[int, int], ...],
    activation: str,
    grad: Tensor,
) -> None:
    """The weight and bias gradient of :func:`narrow_mlp_forward`'s network from the
    output's gradient ``g`` ``(R, out, m)`` (feature-major) and the activations ``hs`` it
    returned, written into ``grad`` ``(R, T)``, laid out as ``theta`` (the rest of ``grad``
    is not touched)."""
    assert _library is not None
    g = g.contiguous()
    hidden = [h.contiguous() for h in hs[1:]]
    _library.svbnn_narrow_mlp_backward(
        *_network_args(hs[0].transpose(1, 2), theta, shapes, activation),
        _pointers(hidden),
        g.data_ptr(),
        grad.data_ptr(),
        grad.stride(0),
    )
