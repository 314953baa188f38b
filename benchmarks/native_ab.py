"""The native engine of this tree against another checkout's: the same bits, and the time.

Two worker processes, one per source tree (``svbnn`` imported from ``--baseline-src`` in one,
from this tree in the other; one torch thread each; the ``native`` kernel backend), run:

* **bits**: a few epochs of :func:`svbnn.training.train` on small networks whose steps take
  every native loop (a replicated Simulation II network: the gather and the narrow Gaussian
  step; the UCI network: the small-network step; a narrow classifier: the narrow layers
  forward and back), and compare every parameter and every epoch's loss bit for bit;
* **per call**: the draw + KL forward and backward of the UCI network's 501 parameters
  and a 128-row gather, called directly, median of ``--rounds`` interleaved blocks;
* **binding** (``--binding``): what a call costs through each way of binding C++ to Python,
  a no-op taking three tensors as a pybind11 function, a ``ctypes`` function of their
  pointers and a ``torch.library`` operator (``torch.ops``), from one small extension;
* **steps**: a training step of the Simulation II and UCI networks of ``make bench``
  (``benchmarks/networks.py``), the two trees' blocks interleaved for ``--rounds`` rounds:
  medians, the paired ratio (this tree over the baseline) and its interquartile range;
* **fits** (``--fits K``): the estimators' default fits, whose steps run in the native
  epochs, on four tables (``FIT_TABLES``, 10 N(0, 1) noise columns added to each):
  ``SVBNNClassifier`` (the narrow layers) on a ``make_classification`` table of 750
  training rows x 40 inputs and on digits, 1,347 x 74; ``SVBNNRegressor`` (the local
  sampler's layers) on diabetes, 331 x 20, and Friedman #1, 750 x 20. ``K`` rounds, the
  trees alternating which fits first: each tree's median fit time, the paired ratio's
  quartiles, and whether the two trees' fits predicted the same (probabilities, or means
  and standard deviations) on the test rows to the bit.

``python -m benchmarks.native_ab --baseline-src ../main/src`` (the trees' native libraries
are built or loaded as each tree does). Prints a JSON report.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
_NATIVE_FUNCTIONS = (
    "fused_forward",
    "fused_backward",
    "gather_rows",
    "narrow_mlp_forward",
    "narrow_mlp_backward",
    "narrow_mlp_gaussian_step",
)


# ---------------------------------------------------------------- worker side
def _count_calls(native: Any) -> dict[str, int]:
    calls = dict.fromkeys(_NATIVE_FUNCTIONS, 0)
    for name in _NATIVE_FUNCTIONS:
        real = getattr(native, name)

        def spy(*args: Any, _real: Any = real, _name: str = name) -> Any:
            calls[_name] += 1
            return _real(*args)

        setattr(native, name, spy)
    return calls


def _bits(out_dir: Path) -> dict[str, Any]:
    import torch

    from svbnn._engine import native
    from svbnn.nn import SpikeSlabMLP
    from svbnn.objectives import CategoricalLikelihood, GaussianLikelihood
    from svbnn.training import train

    calls = _count_calls(native)
    cases: dict[str, Any] = {
        "sim2_replicated": ((200, (7, 7, 7), 1, 4), "gaussian"),
        "uci": ((8, (50,), 1, None), "gaussian"),
        "narrow_classifier": ((20, (7, 7), 3, 4), "categorical"),
    }
    losses = {}
    for name, ((p, hidden, out, reps), kind) in cases.items():
        g = torch.Generator().manual_seed(7)
        lead = (reps,) if reps else ()
        n = 300
        X = torch.randn(*lead, n, p, generator=g)
        if kind == "gaussian":
            y = torch.randn(*lead, n, generator=g)
            lik: Any = GaussianLikelihood(1.0)
        else:
            y = torch.randint(0, out, (*lead, n), generator=g)
            lik = CategoricalLikelihood()
        model = SpikeSlabMLP(p, hidden, out, n_replicates=reps, generator=g)
        with torch.no_grad():  # some weights far out, as training finds them
            model.rho.view(-1)[::17] = -60.0
            model.alpha.view(-1)[::13] = 25.0
        hist = train(
            model,
            X,
            y,
            lik,
            epochs=3,
            batch_size=64,
            lr=1e-2,
            generator=g,
            kernel_backend="native",
        )
        torch.save(model.state_dict(), out_dir / f"{name}.pt")
        losses[name] = json.loads(json.dumps(hist.loss, default=lambda v: v.tolist()))
    return {"available": native.available(), "calls": calls, "losses": losses}


def _per_call(rounds: int) -> dict[str, float]:
    import torch

    from svbnn._engine import native

    g = torch.Generator().manual_seed(3)
    T = 501  # the UCI network's 8-50-1
    mu, rho, alpha = (torch.randn(T, generator=g) for _ in range(3))
    seed = torch.tensor([5, -9], dtype=torch.int32)
    lam, lam1 = torch.tensor(-6.0), torch.tensor(-2.5e-3)
    X = torch.randn(8192, 8, generator=g)
    rows = torch.randint(0, 8192, (128,), generator=g)
    out = torch.empty(128, 8)
    g_theta, g_kl = torch.randn(T, generator=g), torch.tensor([1e-4])
    assert native.usable(mu, rho, alpha, lam, 2.0) and native.gather_usable(X, rows, out)

    def fwd() -> None:
        native.fused_forward(mu, rho, alpha, seed, lam, lam1, 0.1, 0.8, 2.0)

    saved = native.fused_forward(mu, rho, alpha, seed, lam, lam1, 0.1, 0.8, 2.0)

    def bwd() -> None:
        native.fused_backward(g_theta, g_kl, saved[0], *saved[2:])

    def gather() -> None:
        native.gather_rows(X, rows, out)

    result = {}
    for name, fn in (("fused_forward", fwd), ("fused_backward", bwd), ("gather_rows", gather)):
        blocks = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            for _ in range(2000):
                fn()
            blocks.append((time.perf_counter() - t0) / 2000)
        result[name] = statistics.median(blocks)
    return result


def _steps() -> tuple[dict[str, Any], Any]:
    from benchmarks.networks import SVBNN, build_step, network_specs
    from svbnn._engine.kernels import backend_scope

    nets = network_specs(cnn_hidden=128, cnn_batch=128)
    return {key: build_step(nets[key], SVBNN, seed=1)[0] for key in ("sim2", "uci")}, backend_scope


FIT_TABLES = ("classification-750x40", "digits", "diabetes", "friedman1-750x20")


def _fit_table(name: str) -> tuple[Any, Any, Any]:
    """``name``'s training rows, standardised, their targets and the test rows (10 added
    N(0, 1) columns each, seeded)."""
    import numpy as np
    from sklearn.datasets import load_diabetes, load_digits, make_classification, make_friedman1
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    if name == "classification-750x40":
        X, y = make_classification(
            n_samples=1000, n_features=30, n_informative=10, flip_y=0.1, random_state=0
        )
    elif name == "digits":
        X, y = load_digits(return_X_y=True)
    elif name == "diabetes":
        X, y = load_diabetes(return_X_y=True)
    elif name == "friedman1-750x20":
        X, y = make_friedman1(n_samples=1000, n_features=10, noise=1.0, random_state=0)
    else:
        raise ValueError(name)
    X = np.hstack([X, np.random.default_rng(0).standard_normal((X.shape[0], 10))])
    X_train, X_test, y_train, _ = train_test_split(X, y, test_size=0.25, random_state=0)
    scale = StandardScaler().fit(X_train)
    return scale.transform(X_train), y_train, scale.transform(X_test)


def _fit(name: str, seed: int, max_iter: int | str = "auto") -> dict[str, Any]:
    """One default fit of table ``name`` (``SVBNNClassifier``, or ``SVBNNRegressor`` for a
    regression table; ``max_iter`` for tests): seconds, and a digest of its predictions on
    the test rows."""
    import hashlib
    import warnings

    import numpy as np

    from svbnn import SVBNNClassifier, SVBNNRegressor

    X, y, X_test = _fit_table(name)
    regression = name in ("diabetes", "friedman1-750x20")
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if regression:
            model: Any = SVBNNRegressor(random_state=seed, max_iter=max_iter).fit(X, y)
        else:
            model = SVBNNClassifier(random_state=seed, max_iter=max_iter).fit(X, y)
    seconds = time.perf_counter() - t0
    if regression:
        predicted = np.stack(model.predict(X_test, return_std=True))
    else:
        predicted = model.predict_proba(X_test)
    return {"s": seconds, "predictions_sha256": hashlib.sha256(predicted.tobytes()).hexdigest()}


def worker() -> None:
    """Answer one JSON command a line on stdin, one JSON answer a line on stdout."""
    import torch

    torch.set_num_threads(1)
    steps: dict[str, Any] = {}
    scope: Any = None
    for line in sys.stdin:
        cmd: dict[str, Any] = json.loads(line)
        if cmd["cmd"] == "bits":
            answer: Any = _bits(Path(cmd["out"]))
        elif cmd["cmd"] == "per_call":
            answer = _per_call(cmd["rounds"])
        elif cmd["cmd"] == "fit":
            answer = _fit(cmd["table"], cmd["seed"])
        elif cmd["cmd"] == "time":
            if not steps:
                steps, scope = _steps()
            with scope("native"):
                fn = steps[cmd["net"]]
                for _ in range(cmd["warmup"]):
                    fn()
                t0 = time.perf_counter()
                for _ in range(cmd["steps"]):
                    fn()
                answer = (time.perf_counter() - t0) / cmd["steps"]
        else:
            raise ValueError(cmd)
        print(json.dumps(answer), flush=True)


_NOOP_SOURCE = r"""
#include <ATen/core/Tensor.h>
#include <torch/csrc/utils/pybind.h>
#include <torch/library.h>
extern "C" void noop_c(const float* a, const float* b, const float* c, int64_t n) {
    (void)a; (void)b; (void)c; (void)n;
}
void noop_py(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
    pybind11::gil_scoped_release unlocked;
    noop_c(a.const_data_ptr<float>(), b.const_data_ptr<float>(), c.const_data_ptr<float>(),
           a.numel());
}
void noop_op(const at::Tensor& a, const at::Tensor& b, const at::Tensor& c) {
    noop_c(a.const_data_ptr<float>(), b.const_data_ptr<float>(), c.const_data_ptr<float>(),
           a.numel());
}
TORCH_LIBRARY(svbnn_ab, m) { m.def("noop(Tensor a, Tensor b, Tensor c) -> ()"); }
TORCH_LIBRARY_IMPL(svbnn_ab, CPU, m) { m.impl("noop", &noop_op); }
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("noop", &noop_py); }
"""


def _binding_overhead(rounds: int) -> dict[str, float]:
    """Median seconds a call of a no-op on three tensors: pybind11, ctypes, torch.ops."""
    import ctypes
    import tempfile

    import torch
    from torch.utils.cpp_extension import load_inline

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory(prefix="svbnn-ab-") as folder:
        module = load_inline(
            "svbnn_ab_noop", [_NOOP_SOURCE], build_directory=folder, extra_cflags=["-O3"]
        )
        lib = ctypes.CDLL(module.__file__)
    lib.noop_c.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64]
    lib.noop_c.restype = None
    a, b, c = (torch.randn(501) for _ in range(3))
    op = torch.ops.svbnn_ab.noop
    fns = {
        "pybind11": lambda: module.noop(a, b, c),
        "ctypes": lambda: lib.noop_c(a.data_ptr(), b.data_ptr(), c.data_ptr(), a.numel()),
        "torch.ops": lambda: op(a, b, c),
    }
    per: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(20_000):
                fn()
            per[name].append((time.perf_counter() - t0) / 20_000)
    return {name: statistics.median(v) for name, v in per.items()}


# ---------------------------------------------------------------- parent side
class _Worker:
    def __init__(self, src: Path) -> None:
        env = {**os.environ, "PYTHONPATH": f"{src}{os.pathsep}{ROOT}", "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks.native_ab", "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )

    def ask(self, **cmd: Any) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=60)


def _fits(workers: dict[str, _Worker], rounds: int) -> dict[str, Any]:
    """``rounds`` rounds of each ``FIT_TABLES`` fit in both trees, alternating which fits
    first, after one warm-up fit each (round r fits with seed r in both)."""
    fits: dict[str, Any] = {}
    for table in FIT_TABLES:
        for w in workers.values():
            w.ask(cmd="fit", table=table, seed=rounds)
        per: dict[str, list[dict[str, Any]]] = {name: [] for name in workers}
        for r in range(rounds):
            for name in list(workers) if r % 2 == 0 else list(workers)[::-1]:
                per[name].append(workers[name].ask(cmd="fit", table=table, seed=r))
        ratios = [t["s"] / b["s"] for t, b in zip(per["this"], per["baseline"], strict=True)]
        fits[table] = {
            "median_s": {name: statistics.median(f["s"] for f in v) for name, v in per.items()},
            "ratio_this_over_baseline_q1_median_q3": _quartiles(ratios),
            "same_predictions": [
                t["predictions_sha256"] == b["predictions_sha256"]
                for t, b in zip(per["this"], per["baseline"], strict=True)
            ],
        }
    return fits


def _quartiles(values: list[float]) -> tuple[float, float, float]:
    q = statistics.quantiles(values, n=4, method="inclusive")
    return q[0], statistics.median(values), q[2]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline-src", type=Path, help="the other tree's src folder")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--block-s", type=float, default=0.25, help="seconds per timed block")
    p.add_argument("--out", type=Path, default=Path("/tmp/svbnn-native-ab"))
    p.add_argument("--binding", action="store_true", help="also time the three bindings")
    p.add_argument("--fits", type=int, default=0, help="rounds of the classifier's fits (0: none)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        worker()
        return {}
    if args.baseline_src is None:
        p.error("--baseline-src is needed")
    trees = {"baseline": args.baseline_src.resolve(), "this": (ROOT / "src").resolve()}
    workers = {name: _Worker(src) for name, src in trees.items()}
    report: dict[str, Any] = {"trees": {k: str(v) for k, v in trees.items()}}
    try:
        # bits
        bits = {}
        for name, w in workers.items():
            out = args.out / name
            out.mkdir(parents=True, exist_ok=True)
            bits[name] = w.ask(cmd="bits", out=str(out))
        import torch

        same = {}
        for case in bits["this"]["losses"]:
            a, b = (torch.load(args.out / name / f"{case}.pt", weights_only=True) for name in trees)
            same[case] = all(torch.equal(a[k], b[k]) for k in a) and (
                bits["baseline"]["losses"][case] == bits["this"]["losses"][case]
            )
        report["bits"] = {"same": same, **{name: bits[name] for name in trees}}
        # per call: one block of each function a round, the trees alternating
        calls: dict[str, list[dict[str, float]]] = {name: [] for name in workers}
        for r in range(args.rounds):
            for name in list(workers) if r % 2 == 0 else list(workers)[::-1]:
                calls[name].append(workers[name].ask(cmd="per_call", rounds=1))
        report["per_call_s"] = {
            name: {fn: statistics.median(b[fn] for b in blocks) for fn in blocks[0]}
            for name, blocks in calls.items()
        }
        # steps, interleaved (the order alternates each round)
        steps: dict[str, Any] = {}
        for net in ("sim2", "uci"):
            one = {
                name: w.ask(cmd="time", net=net, warmup=20, steps=5) for name, w in workers.items()
            }
            k = max(5, int(args.block_s / max(min(one.values()), 1e-6)))
            per: dict[str, list[float]] = {name: [] for name in workers}
            for r in range(args.rounds):
                order = list(workers) if r % 2 == 0 else list(workers)[::-1]
                for name in order:
                    per[name].append(workers[name].ask(cmd="time", net=net, warmup=0, steps=k))
            ratios = [t / b for t, b in zip(per["this"], per["baseline"], strict=True)]
            steps[net] = {
                "steps_per_block": k,
                "median_s": {name: statistics.median(v) for name, v in per.items()},
                "ratio_this_over_baseline_q1_median_q3": _quartiles(ratios),
            }
        report["steps"] = steps
        if args.fits:
            report["fits"] = _fits(workers, args.fits)
        if args.binding:
            report["binding_call_s"] = _binding_overhead(args.rounds)
    finally:
        for w in workers.values():
            w.close()
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
