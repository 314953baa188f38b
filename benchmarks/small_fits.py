"""The estimators on small tabular data: ``fit`` with the ``native`` kernels (what ``auto``
chooses for a network of fewer than ``AUTO_MIN_NUMEL`` parameters) against the ``eager``
kernels (its choice before), both on the Gumbel sampler, side by side with the local
sampler (the regressor's default; under ``auto`` with one thread its moments pass and
layers run on svbnn's C++ loops) and a dense PyTorch loop of the same steps for scale.

Run ``python -m benchmarks.small_fits [--repeats 3] [--epochs 300] [--threads N]
[--steps ROUNDS]``. Data
sets shipped with scikit-learn (no download): diabetes (442 x 10, regression), breast
cancer (569 x 30, two classes), and Friedman #1 (2,000 x 10, regression, generated), each
split 75/25 with a fixed seed. Every fit runs the estimator's defaults except ``max_iter``
and ``tol=None``, so both backends take the same steps; the fits alternate (eager, native,
dense, eager, ...) so machine noise hits all alike, after one warm-up round (it builds the
native library, once per machine). Printed: median fit times, the median of the per-round
ratios, and each fit's held-out score (R^2 or accuracy) of the last round (a seed
reproduces a fit within one backend; the two backends draw different noise). The fits
share the estimator's other defaults, so every regressor fit runs at the regressor's
learning rate 0.02 and every classifier fit at 0.01 (the same number of steps:
``max_iter`` is fixed).
``--steps ROUNDS`` first times UCI's training step: the native step against ``auto``'s
one-graph step and the local sampler's, under ``auto`` and under ``eager``, and the graph-free
steps with their gradients handed over without autograd's engine, as the training loop
does (:func:`time_steps`).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import torch
from sklearn.datasets import load_breast_cancer, load_diabetes, make_friedman1
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn

from svbnn import SVBNNClassifier, SVBNNRegressor

Data = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def data_sets() -> dict[str, tuple[Data, bool]]:
    """``name -> ((X_train, X_test, y_train, y_test), is_classification)``."""
    diabetes = load_diabetes(return_X_y=True)
    cancer = load_breast_cancer(return_X_y=True)
    friedman = make_friedman1(2000, 10, noise=1.0, random_state=0)
    out = {}
    for name, (X, y), clf in (
        ("diabetes", diabetes, False),
        ("breast cancer", cancer, True),
        ("Friedman #1", friedman, False),
    ):
        split = train_test_split(X, y, test_size=0.25, random_state=0)
        out[name] = (tuple(split), clf)
    return out  # type: ignore[return-value]


def dense_fit(X: np.ndarray, y: np.ndarray, clf: bool, epochs: int, seed: int) -> float:
    """A 50-unit ReLU MLP with Adam (the estimators' architecture, optimiser, batch 128
    and learning rate) on standardised inputs, the same number of steps."""
    gen = torch.Generator().manual_seed(seed)
    Xt = torch.tensor(StandardScaler().fit_transform(X), dtype=torch.float32)
    yt = torch.tensor(y, dtype=torch.long if clf else torch.float32)
    n_out = int(yt.max()) + 1 if clf else 1
    net = nn.Sequential(nn.Linear(Xt.shape[1], 50), nn.ReLU(), nn.Linear(50, n_out))
    opt = torch.optim.Adam(net.parameters(), lr=3e-3, fused=True)
    for _ in range(epochs):
        order = torch.randperm(len(yt), generator=gen)
        for b in range(0, len(yt), 128):
            rows = order[b : b + 128]
            out = net(Xt[rows])
            loss = (
                nn.functional.cross_entropy(out, yt[rows])
                if clf
                else nn.functional.mse_loss(out.squeeze(-1), yt[rows])
            )
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return float("nan")  # not scored: it is there for its time


def svbnn_fit(
    data: Data, clf: bool, epochs: int, seed: int, backend: str, sampler: str = "gumbel"
) -> float:
    """Fit with ``backend`` and ``sampler`` for ``epochs`` epochs; the held-out score."""
    X_train, X_test, y_train, y_test = data
    cls: Any = SVBNNClassifier if clf else SVBNNRegressor
    est = cls(max_iter=epochs, tol=None, random_state=seed, kernel_backend=backend, sampler=sampler)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fixed budget has not converged: expected
        est.fit(X_train, y_train)
    return float(est.score(X_test, y_test))


def _ratio(times: dict[str, list[float]], a: str, b: str) -> str:
    q = [x / y for x, y in zip(times[a], times[b], strict=True)]
    return f"{statistics.median(q):.2f} [{min(q):.2f}, {max(q):.2f}]"


def time_fits(data: Data, clf: bool, epochs: int, repeats: int) -> dict[str, Any]:
    """Alternating fits of one data set (eager, native, local, dense, ...): times and the
    svbnn fits' held-out scores of the last round."""
    fits: dict[str, Callable[[int], Any]] = {
        "eager": partial(svbnn_fit, data, clf, epochs, backend="eager"),
        "native": partial(svbnn_fit, data, clf, epochs, backend="native"),
        "local": partial(svbnn_fit, data, clf, epochs, backend="auto", sampler="local"),
        "dense": partial(dense_fit, data[0], data[2], clf, epochs),
    }
    times: dict[str, list[float]] = {key: [] for key in fits}
    scores: dict[str, float] = {}
    for r in range(repeats + 1):  # round 0 warms up
        for key, fit in fits.items():
            t0 = time.perf_counter()
            score = fit(seed=r)
            if r:
                times[key].append(time.perf_counter() - t0)
                if key != "dense":
                    scores[key] = score
    return {"times": times, "scores": scores, "steps": epochs * -(-len(data[2]) // 128)}


def time_steps(rounds: int, steps: int = 200) -> str:
    """The training step of UCI's network (8-50-1, batch 128, known noise): the native step
    (the ``native`` backend) against ``auto``'s one-graph step, beside the eager kernels,
    the local sampler's graph-free step and its step through autograd (with the known
    noise level and with a learned one, as the regressor has), the native and the local
    learned-noise steps whose gradients skip autograd's engine (the training loop's), and a
    dense step;
    interleaved rounds of ``steps`` steps in one process, after one warm-up (the graph
    compiles then). A Markdown table of medians and of the median per-round ratios."""
    from svbnn import kernel_backend
    from svbnn._engine.native_step import backward_without_graph
    from svbnn.nn import SpikeSlabMLP
    from svbnn.objectives import GaussianLikelihood
    from svbnn.training import make_optimizer, negative_elbo

    g = torch.Generator().manual_seed(0)
    X, y = torch.randn(128, 8, generator=g), torch.randn(128, generator=g)

    def svbnn_step(
        backend: str,
        sampler: str = "gumbel",
        learn: bool = False,
        graph: bool = False,
        handover: bool = False,
    ) -> Callable[[], None]:
        """``graph``: the loss formed by hand, so that the step runs through autograd (the
        local sampler: the same native moments and layers, LocalMomentsKL and
        LocalFlatMLP, without negative_elbo's graph-free NativeLocalNegativeElbo).
        ``handover``: a graph-free step's gradients handed to the parameters without
        autograd's engine, as :func:`svbnn.training.train` does
        (``backward_without_graph``); the other rows run ``loss.backward()``."""
        model = SpikeSlabMLP(
            8, (50,), 1, sampler=sampler, generator=torch.Generator().manual_seed(1)
        )
        lik = GaussianLikelihood(1.0, learn_noise=learn)
        opt = make_optimizer([*model.parameters(), *lik.parameters()], "adam", 1e-3)

        def step() -> None:
            with kernel_backend(backend):
                opt.zero_grad(set_to_none=True)
                if graph:
                    nll = lik.log_prob(model(X), y).mean().neg()
                    loss = torch.add(nll, model.kl_divergence(), alpha=1.0 / 8192)
                else:
                    loss, _, _ = negative_elbo(model, lik, X, y, 8192)
                if not (handover and backward_without_graph(loss)):
                    loss.backward()
                opt.step()

        return step

    dense = nn.Sequential(nn.Linear(8, 50), nn.ReLU(), nn.Linear(50, 1))
    dense_opt = torch.optim.Adam(dense.parameters(), lr=1e-3, fused=True)

    def dense_step() -> None:
        dense_opt.zero_grad(set_to_none=True)
        nn.functional.mse_loss(dense(X).squeeze(-1), y).backward()
        dense_opt.step()

    runs = {
        "native step": svbnn_step("native"),
        "native step, gradients without the engine": svbnn_step("native", handover=True),
        "auto, one graph": svbnn_step("auto"),
        "eager": svbnn_step("eager"),
        "local sampler": svbnn_step("auto", "local"),
        "local sampler, through autograd": svbnn_step("auto", "local", graph=True),
        "local sampler, learned noise": svbnn_step("auto", "local", learn=True),
        "local sampler, learned noise, gradients without the engine": svbnn_step(
            "auto", "local", learn=True, handover=True
        ),
        "local sampler, learned noise, through autograd": svbnn_step(
            "auto", "local", learn=True, graph=True
        ),
        "local sampler, eager": svbnn_step("eager", "local"),
        "dense": dense_step,
    }
    us: dict[str, list[float]] = {k: [] for k in runs}
    for r in range(rounds + 1):
        for key, step in runs.items():
            t0 = time.perf_counter()
            for _ in range(steps if r else 1):
                step()
            if r:
                us[key].append((time.perf_counter() - t0) / steps * 1e6)
    lines = [
        f"UCI's network (8-50-1), batch 128, known noise (unless a row says learned), "
        f"{torch.get_num_threads()} "
        f"thread(s), {rounds} interleaved rounds of {steps} steps",
        "",
        "| step | us | / native step | / dense |",
        "|---|---|---|---|",
    ]
    for key in runs:
        lines.append(
            f"| {key} | {statistics.median(us[key]):.0f} | "
            f"{_ratio(us, key, 'native step')} | {_ratio(us, key, 'dense')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--epochs", type=int, default=300)
    ap.add_argument("--threads", type=int, default=None, help="default: torch's")
    ap.add_argument("--steps", type=int, default=0, metavar="ROUNDS", help="also time UCI's step")
    args = ap.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.steps:
        print(time_steps(args.steps), end="\n\n")
    rows = []
    lines = [
        f"{args.epochs} epochs a fit, batch 128, {torch.get_num_threads()} thread(s), "
        f"{args.repeats} rounds; medians, [min, max] of the per-round ratios",
        "",
        "| data | n x p | steps | eager, s | native, s | native / eager | local, s | "
        "local / native | dense loop, s | native / dense | held-out score eager / native / "
        "local |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, (data, clf) in data_sets().items():
        res = time_fits(data, clf, args.epochs, args.repeats)
        times, scores = res["times"], res["scores"]
        med = {k: statistics.median(v) for k, v in times.items()}
        lines.append(
            f"| {name} | {data[0].shape[0]} x {data[0].shape[1]} | {res['steps']} | "
            f"{med['eager']:.2f} | {med['native']:.2f} | {_ratio(times, 'native', 'eager')} | "
            f"{med['local']:.2f} | {_ratio(times, 'local', 'native')} | "
            f"{med['dense']:.2f} | {_ratio(times, 'native', 'dense')} | "
            f"{scores['eager']:.3f} / {scores['native']:.3f} / {scores['local']:.3f} |"
        )
        rows.append({"data": name, **res})
    print("\n".join(lines))
    return rows


if __name__ == "__main__":
    main()
