"""Loops compiled by the C++ compiler itself (float32, CPU), as a PyTorch C++ extension. Private.

* :func:`fused_forward` and :func:`fused_backward` run ``fused_forward.cpp`` (next to this
  file): the loops of :func:`svbnn._engine.kernels.fused_forward` and
  :func:`svbnn._engine.kernels.fused_backward`, operation for operation, that the compiler
  vectorises on its own, for one network or R replicates (one torch thread). Their
  elementwise outputs are the inductor kernels' bit for bit (no multiply-adds are
  contracted, every operation rounds as torch's does), so a run is the same whichever of the
  two drew its weights; only the KL sum adds in another order (its value is reported, its
  gradient is a constant). Timings: ``docs/performance.md``.
* :func:`local_moments_kl` and :func:`local_moments_kl_backward` run the loops of
  :func:`svbnn._engine.kernels.local_moments_kl_forward` and
  :func:`~svbnn._engine.kernels.local_moments_kl_backward` (``local_moments.cpp``), with
  the draw's elementwise functions (``elementwise.h``): the means, variances and KL of one network's
  weights for the local sampler's training step, close to the eager kernel's values (not
  bit for bit).
* :func:`local_mlp_forward` and :func:`local_mlp_backward` run ``local_layers.cpp``: the
  local sampler's network on those means and variances
  (:class:`~svbnn._engine.fused.LocalFlatMLP`), its products as plain loops, with torch's
  draws; the eager layers' values to float32 rounding.
* :func:`gather_rows`, :func:`narrow_mlp_forward` and :func:`narrow_mlp_backward` run
  ``replicated_layers.cpp``: a minibatch's gather with prefetching, and a replicated
  network of narrow layers (Simulation II's 200-7-7-7-1), where MKL's packing of the
  minibatch costs more than the first layer's products and the small layers are a dozen
  torch operations each; :func:`narrow_mlp_gaussian_step` runs both, replicate by
  replicate, for the training step under a Gaussian likelihood.
* The extension's ``local_gaussian_epoch`` and ``gumbel_categorical_epoch`` run
  ``epochs.cpp``: an epoch of the local sampler's training steps under a Gaussian
  likelihood, or of the Gumbel sampler's under a categorical one (the loops above, torch's
  draws and its fused Adam kernel), for :mod:`svbnn._engine.native_epoch`, which says when
  they serve.

``bindings.cpp`` makes the loops a Python extension module of functions on tensors
(pybind11, torch's headers), which :func:`torch.utils.cpp_extension.load` builds with ninja
and ``$CXX`` (default ``c++``): at install by ``python -m svbnn._engine.native`` (``make
install`` runs it) into the package's own ``_build`` folder, with its SHA-256 in a manifest
there, and imported only if the file matches it; otherwise built on first use for the
process alone, in a private temporary folder (never torch's cache folder; see
``SECURITY.md``). Without a compiler or ninja, or where the build fails, the callers keep
torch's operations (:func:`available` says which).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import logging
import os
import platform
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType

import torch
from torch import Tensor

__all__ = [
    "BUILD_DIR",
    "LOCAL_LAYERS_MAX_WORK",
    "available",
    "build_into_package",
    "backward_usable",
    "fused_backward",
    "fused_forward",
    "gather_rows",
    "gather_usable",
    "library",
    "local_moments_kl",
    "local_moments_kl_backward",
    "local_moments_kl_usable",
    "local_mlp_backward",
    "local_mlp_forward",
    "local_mlp_usable",
    "narrow_mlp_backward",
    "narrow_mlp_forward",
    "narrow_mlp_gaussian_step",
    "narrow_mlp_usable",
    "narrow_network",
    "usable",
]

logger = logging.getLogger(__name__)

_HERE = Path(__file__).parent
_SOURCES = [
    _HERE / name
    for name in (
        "fused_forward.cpp",
        "local_moments.cpp",
        "local_layers.cpp",
        "replicated_layers.cpp",
        "epochs.cpp",
        "bindings.cpp",
    )
]
_HEADERS = [_HERE / "elementwise.h", _HERE / "epochs.h", _HERE / "loops.h", _HERE / "vectors.h"]
# The compiler's flags beside torch's own (its include folders, -fPIC, -std=c++20, the
# extension's name and ABI).
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
]
# 1 / tau values the draw's loops know (the Gumbel-softmax temperature 1/2 or 1).
_INV_TAUS = (2.0, 1.0)

_lock = threading.Lock()


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
# The library files a manifest may name: the extension's name (``svbnn_native_`` and the
# build key; torch adds ``_v1``... to a name built twice in one process) and ``.so``.
_LIBRARY_NAME = re.compile(r"svbnn_native_[0-9a-f]{20}(_v[0-9]+)?\.so")


def _build_key(compiler: str) -> str:
    """A hash of what the library is built from: the sources, the flags, the compiler and its
    version, the CPU that ``-march=native`` compiles for, and the torch and Python whose
    headers and binary interface the extension uses."""
    version = subprocess.run(
        [compiler, "--version"], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    return hashlib.sha256(
        "\0".join(
            [*(src.read_text() for src in _SOURCES + _HEADERS), " ".join(_FLAGS), compiler]
            + [version, _cpu_signature(), torch.__version__, sys.version]
        ).encode()
    ).hexdigest()[:20]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _build(build_directory: Path, name: str) -> ModuleType:
    """Build the extension module ``name`` in ``build_directory`` (an empty folder of the
    caller's) with :func:`torch.utils.cpp_extension.load`, which also imports it."""
    # Imported here: it imports setuptools, which only a build needs.
    from torch.utils import cpp_extension

    logger.info("building %s into %s", [src.name for src in _SOURCES], build_directory)
    module: ModuleType = cpp_extension.load(
        name=name,
        sources=[str(src) for src in _SOURCES],
        extra_cflags=_FLAGS,
        build_directory=str(build_directory),
        is_python_module=True,
        verbose=False,
    )
    return module


def _import(path: Path) -> ModuleType:
    """Import the extension module in the file ``path`` (its name: the file's stem)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not an extension module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_into_package(build_dir: Path | None = None) -> Path:
    """Build the library into the installed package (``BUILD_DIR``) and record its SHA-256
    in the manifest there; returns the library's path. Raises on any failure."""
    build_dir = BUILD_DIR if build_dir is None else build_dir
    compiler = os.environ.get("CXX", "c++")
    key = _build_key(compiler)
    build_dir.mkdir(parents=True, exist_ok=True)
    # torch's build files (ninja's, the objects) stay in a folder of their own, removed after.
    with tempfile.TemporaryDirectory(prefix="build-", dir=build_dir) as work:
        _build(Path(work), f"svbnn_native_{key}")
        # The library built there: not the module's __file__, which is the file first
        # imported under that name where this process imported one before (pybind11 hands
        # out the module it made then).
        (built,) = (p for p in Path(work).iterdir() if _LIBRARY_NAME.fullmatch(p.name))
        digest = _sha256(built)
        target = build_dir / built.name
        os.replace(built, target)
    manifest = _read_manifest(build_dir)
    manifest[key] = {"library": target.name, "sha256": digest}
    fd, tmp = tempfile.mkstemp(suffix=".json", dir=build_dir)
    os.fchmod(fd, 0o644)  # readable as the package's other files (mkstemp: the owner only)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    os.replace(tmp, build_dir / _MANIFEST)
    return target


def _read_manifest(build_dir: Path) -> dict[str, dict[str, str]]:
    """The manifest's entries, build key: ``{"library": file name, "sha256": hex}``; an
    entry of another form is left out."""
    try:
        data = json.loads((build_dir / _MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(key): {"library": entry["library"], "sha256": entry["sha256"]}
        for key, entry in data.items()
        if isinstance(entry, dict)
        and isinstance(entry.get("library"), str)
        and _LIBRARY_NAME.fullmatch(entry["library"])
        and isinstance(entry.get("sha256"), str)
    }


def _load() -> ModuleType:
    """Load the library; raises on any failure.

    The install's build (``BUILD_DIR``) is imported only if its SHA-256 equals the one the
    package's manifest recorded for these sources, flags, compiler, CPU, torch and Python.
    Otherwise (no install build, another compiler or CPU, a file that does not match) the
    library is built for this process alone into a fresh private temporary folder: nothing
    is ever loaded from a folder that another user or process could have written into
    (torch's own cache of extensions, ``~/.cache/torch_extensions``, is never used).
    """
    compiler = os.environ.get("CXX", "c++")
    key = _build_key(compiler)
    entry = _read_manifest(BUILD_DIR).get(key)
    if entry is None and (BUILD_DIR / _MANIFEST).is_file():
        # An install build exists, for other sources, flags, compiler, CPU, torch or Python
        # (an upgrade without a rebuild): every process would pay a private build, silently.
        logger.warning(
            "svbnn's installed native build does not match these sources, compiler, CPU, "
            "torch and Python; building a private copy for this process (`python -m "
            "svbnn._engine.native` rebuilds the installed one)"
        )
    if entry is not None:
        installed = BUILD_DIR / entry["library"]
        if installed.is_file():
            if _sha256(installed) == entry["sha256"]:
                return _import(installed)
            logger.warning(
                "%s does not match the SHA-256 in svbnn's manifest; not loaded (building a "
                "private copy; `python -m svbnn._engine.native` rebuilds the installed one)",
                installed,
            )
    with tempfile.TemporaryDirectory(prefix="svbnn-native-") as private:
        # Imported (mapped) before the folder goes: the process keeps the mapping.
        return _build(Path(private), f"svbnn_native_{key}")


@functools.cache
def _load_once() -> ModuleType | None:
    try:
        return _load()
    except (OSError, RuntimeError, ImportError, subprocess.SubprocessError) as err:
        detail = getattr(err, "stderr", "") or err
        logger.warning(
            "svbnn's native loops did not compile (%s); using torch's kernels instead",
            str(detail).strip().splitlines()[-1:] or err,
        )
        logger.debug("the native build's output:\n%s", detail)
        return None


def library() -> ModuleType | None:
    """The loops' extension module, loaded (built if need be) on the first call and then
    kept for the process, as an imported module is: a fact of the environment, not an
    option, and no call changes it. ``None`` where it cannot be built (no compiler, a
    compile error: logged once)."""
    with _lock:  # one build, whatever the threads
        return _load_once()


def available() -> bool:
    """Whether the compiled library is loaded, compiling it on the first call."""
    return library() is not None


def _enabled() -> bool:
    # Inside a caller's torch.compile torch's operations trace into its graph; a call into
    # the extension would break it. SVBNN_NATIVE=0 turns every native loop off (read at each use).
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
        # These loops run on one thread: auto takes them only where torch has one too (with
        # several, the kernels in their place split their loops among them); the native
        # backend takes them at any count.
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
    prior, ``1 / tau`` of 1 or 2, one torch thread unless ``any_threads`` (the native
    backend), outside a caller's ``torch.compile``, no ``SVBNN_NATIVE=0``, and the library
    compiled. Otherwise the caller's other kernel runs: inductor's gives the same results
    bit for bit."""
    return (
        inv_tau in _INV_TAUS
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
    lib = library()
    assert lib is not None
    out: tuple[Tensor, ...] = lib.fused_forward(
        mu, rho, alpha, seed, log_lam, log_1mlam, log_sigma0, prec0, inv_tau
    )
    return out


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
    lib = library()
    assert lib is not None
    # autograd may hand over an expanded (stride 0) g_kl: the extension makes it contiguous
    lib.fused_backward(g_theta, g_kl, theta, a_fac, r_fac, kl_mu, kl_rho, kl_alpha)
    return kl_mu, kl_rho, kl_alpha


def local_moments_kl_usable(
    mu: Tensor, rho: Tensor, alpha: Tensor, log_lam: Tensor, any_threads: bool = False
) -> bool:
    """Whether :func:`local_moments_kl` serves this call: one network's flat float32 CPU
    parameters ``(T,)`` and a scalar prior, otherwise as :func:`usable`."""
    return (
        mu.dim() == 1
        and log_lam.dim() == 0
        and _parameter_rows(mu, rho, alpha, any_threads=any_threads)
        and available()
    )


def local_moments_kl(
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    log_sigma0: float,
    prec0: float,
) -> tuple[Tensor, Tensor, Tensor, tuple[Tensor, ...]]:
    """:func:`svbnn._engine.kernels.local_moments_kl_forward` in the compiled library, where
    :func:`local_moments_kl_usable` says so: ``(mean, var, kl, factors)``, the KL's sum a
    0-dim tensor."""
    lib = library()
    assert lib is not None
    mean, var, kl, *factors = lib.local_moments_kl(
        mu, rho, alpha, log_lam, log_1mlam, log_sigma0, prec0
    )
    return mean, var, kl, tuple(factors)


def local_moments_kl_backward(
    g_mean: Tensor, g_var: Tensor, g_kl: Tensor, saved: tuple[Tensor, ...]
) -> tuple[Tensor, Tensor, Tensor]:
    """:func:`svbnn._engine.kernels.local_moments_kl_backward` in the compiled library, on
    the factors :func:`local_moments_kl` returned (float32 CPU gradients, ``g_kl`` one
    value)."""
    lib = library()
    assert lib is not None
    out: tuple[Tensor, Tensor, Tensor] = lib.local_moments_kl_backward(g_mean, g_var, g_kl, *saved)
    return out


# The local layers' loops multiply without BLAS: they gain where a step's work (rows times
# parameters, m T) is small and the eager layers' fixed cost per tensor operation dominates.
# LocalFlatMLP's forward + backward, one thread (python -m benchmarks.local_layers;
# docs/performance.md, "The local sampler's step"): 0.45x the eager time for 8-50-1 at 128
# rows, 0.80x at m T = 0.66e6; about even at 1e6 (0.97x, 1.20x); MNIST's network 2.51x.
LOCAL_LAYERS_MAX_WORK = 750_000
"""The most rows times parameters (``m T``) that :func:`local_mlp_forward` runs."""


def local_mlp_usable(
    mean: Tensor, var: Tensor, x: Tensor, activation: str, any_threads: bool = False
) -> bool:
    """Whether :func:`local_mlp_forward` serves :class:`~svbnn._engine.fused.LocalFlatMLP`:
    one network's flat float32 CPU means and variances ``(T,)``, a contiguous float32 CPU
    input ``(m, p)``, at most :data:`LOCAL_LAYERS_MAX_WORK` rows times parameters, ReLU
    hidden layers, otherwise as :func:`usable`."""
    return (
        activation == "relu"
        and mean.dim() == 1
        and x.dim() == 2
        and 0 < x.shape[0] * mean.numel() <= LOCAL_LAYERS_MAX_WORK
        and _cpu_float32(x)
        and _parameter_rows(mean, var, any_threads=any_threads)
        and available()
    )


def local_mlp_forward(
    mean: Tensor, var: Tensor, x: Tensor, outs: list[int], eps: list[Tensor]
) -> tuple[Tensor, list[Tensor]]:
    """:class:`~svbnn._engine.fused.LocalFlatMLP`'s forward in the compiled library, where
    :func:`local_mlp_usable` says so, with ``eps`` the layers' ``N(0, 1)`` draws ``(m,
    outs[l])``, which become the backward's factors ``eps / (2 s)`` in place: the output
    and the hidden layers' activations."""
    lib = library()
    assert lib is not None
    out, *hidden = lib.local_mlp_forward(mean, var, x, outs, True, eps)
    return out, hidden


def local_mlp_backward(
    mean: Tensor,
    var: Tensor,
    x: Tensor,
    outs: list[int],
    hidden: list[Tensor],
    half_eps: list[Tensor],
    g_out: Tensor,
    input_grad: bool,
) -> tuple[Tensor, Tensor, Tensor | None]:
    """:class:`~svbnn._engine.fused.LocalFlatMLP`'s backward in the compiled library, on
    what :func:`local_mlp_forward` returned and left in ``half_eps``: the gradients of
    ``mean`` and ``var``, and of ``x`` with ``input_grad``."""
    lib = library()
    assert lib is not None
    g_mean, g_var, *g_x = lib.local_mlp_backward(
        mean, var, x, outs, True, hidden, half_eps, g_out, input_grad
    )
    return g_mean, g_var, (g_x[0] if g_x else None)


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
    the gather and the narrow layers"). A row out of range is an error (``RuntimeError``)."""
    lib = library()
    assert lib is not None
    lib.gather_rows(src, rows, out)
    return out


# The widest layer left to these loops: beyond it, MKL's products win.
NARROW_MAX_OUT = 16
# The hidden activations they know (as svbnn._engine.graphs.activate names them).
_NARROW_ACTIVATIONS = ("relu", "identity")


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


def _outs(shapes: tuple[tuple[int, int], ...]) -> list[int]:
    return [o for o, _ in shapes]


def narrow_mlp_forward(
    theta: Tensor, x: Tensor, shapes: tuple[tuple[int, int], ...], activation: str
) -> tuple[list[Tensor], Tensor]:
    """:func:`svbnn._engine.graphs.mlp_layers` of R replicates, where
    :func:`narrow_mlp_usable` says so: the hidden activations ``[x^T, h_1, ...]``
    (``(R, width, m)``, ``x^T`` a view) and the output ``(R, out, m)``, feature-major."""
    lib = library()
    assert lib is not None
    hs, out = lib.narrow_mlp_forward(theta, x, _outs(shapes), activation == "relu")
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
    lib = library()
    assert lib is not None
    out: Tensor = lib.narrow_mlp_gaussian_step(
        theta, x, y, _outs(shapes), activation == "relu", v, g_mean, grad
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
    lib = library()
    assert lib is not None
    lib.narrow_mlp_backward(
        theta, hs[0].transpose(1, 2), hs[1:], g, _outs(shapes), activation == "relu", grad
    )
