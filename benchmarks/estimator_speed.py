"""``SVBNNClassifier.fit`` against a plain dense PyTorch loop doing the same steps.

Run ``python -m benchmarks.estimator_speed [--repeats 5] [--epochs 2] [--n 12800]
[--threads 1]``. Both fit a 784-512-512-10 ReLU MLP with Adam on MNIST-sized random data
(``n`` rows, batch 256, the same number of epochs, float32), side by side in one process,
alternating (A B A B ...) so machine noise hits both alike. The classifier runs with its
defaults except the architecture, the batch size, the epochs and ``tol=None`` (no early
stop, so both take exactly the same steps); its fit time includes everything ``fit``
does (validation, the posterior summaries, the collapse checks). One warm-up fit of each
comes first (it compiles the kernels). Printed: the median fit times and the median of
the per-round ratios (issue 13's target: at most 1.5).
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import torch
from torch import nn

from svbnn import SVBNNClassifier


def dense_fit(X: np.ndarray, y: np.ndarray, epochs: int, batch: int, seed: int) -> nn.Module:
    """The dense reference: the same architecture, optimiser, minibatching and steps."""
    gen = torch.Generator().manual_seed(seed)
    Xt, yt = torch.tensor(X, dtype=torch.float32), torch.tensor(y)
    net = nn.Sequential(
        nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    )
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, fused=True)
    for _ in range(epochs):
        order = torch.randperm(len(yt), generator=gen)
        for b in range(0, len(yt), batch):
            rows = order[b : b + batch]
            loss = nn.functional.cross_entropy(net(Xt[rows]), yt[rows])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return net


def svbnn_fit(X: np.ndarray, y: np.ndarray, epochs: int, batch: int, seed: int) -> None:
    clf = SVBNNClassifier(
        hidden_layer_sizes=(512, 512),
        batch_size=batch,
        max_iter=epochs,
        random_state=seed,
    )
    if "tol" in clf.get_params():
        clf.set_params(tol=None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a two-epoch fit has not converged: expected
        clf.fit(X, y)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--n", type=int, default=12_800)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    X = rng.uniform(size=(args.n, 784)).astype(np.float32)
    y = rng.integers(0, 10, args.n)
    times: dict[str, list[float]] = {"svbnn": [], "dense": []}
    fits = {"svbnn": svbnn_fit, "dense": dense_fit}
    for r in range(args.repeats + 1):  # round 0 warms up (compiles)
        for name, fit in fits.items():
            t0 = time.perf_counter()
            fit(X, y, args.epochs, args.batch, r)
            if r:
                times[name].append(time.perf_counter() - t0)
    ratios = [s / d for s, d in zip(times["svbnn"], times["dense"], strict=True)]
    steps = args.epochs * -(-args.n // args.batch)
    print(
        f"{steps} steps of 784-512-512-10, batch {args.batch}, {args.threads} thread(s), "
        f"{args.repeats} rounds: SVBNNClassifier.fit {statistics.median(times['svbnn']):.2f} s, "
        f"dense loop {statistics.median(times['dense']):.2f} s, "
        f"ratio (median per round) {statistics.median(ratios):.2f} "
        f"[{min(ratios):.2f}, {max(ratios):.2f}]"
    )


if __name__ == "__main__":
    main()
