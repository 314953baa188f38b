"""Use the spike-and-slab layers in your own PyTorch model.

A small network of ``SpikeSlabLinear`` layers (plus an ordinary ``nn.LayerNorm``, to show
that variational and plain modules mix) is trained twice on Simulation II data: once
with a hand-written loop on the per-datum negative ELBO (``svbnn.training.negative_elbo``),
once with the library's loop (``svbnn.training.train``). Then it is evaluated
deterministically (posterior-mean weights, median model) and by Monte Carlo averaging.

    python examples/custom_model.py
    python examples/custom_model.py --quick
"""

from __future__ import annotations

import argparse

import torch
from torch import Tensor, nn

from svbnn import log_lambda_opt
from svbnn.data import simulation2
from svbnn.nn import SpikeSlabLinear, forward_mode, kl_divergence, set_generator
from svbnn.objectives import GaussianLikelihood
from svbnn.prediction import predictive_mean
from svbnn.selection import sparsity
from svbnn.training import Minibatches, make_optimizer, negative_elbo, train


class SparseRegressor(nn.Module):
    """p -> 16 -> 16 -> 1, every weight and bias with a spike-and-slab posterior."""

    def __init__(self, p: int, log_lam: float, generator: torch.Generator) -> None:
        super().__init__()
        opts = dict(log_prior_inclusion=log_lam, generator=generator, dtype=torch.float64)
        self.l1 = SpikeSlabLinear(p, 16, **opts)
        self.norm = nn.LayerNorm(16, dtype=torch.float64)
        self.l2 = SpikeSlabLinear(16, 16, **opts)
        self.out = SpikeSlabLinear(16, 1, **opts)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.relu(self.norm(self.l1(x)))
        h = torch.relu(self.l2(h))
        return self.out(h)


def build(p: int, n: int, seed: int) -> tuple[SparseRegressor, torch.Generator]:
    gen = torch.Generator().manual_seed(seed)
    # lambda_opt of Theorem 4.1: T weights and biases, L hidden layers of width N.
    T = (p + 1) * 16 + (16 + 1) * 16 + (16 + 1) * 1
    log_lam = log_lambda_opt(n_params=T, n_hidden_layers=2, width=16, n_train=n, n_features=p)
    return SparseRegressor(p, log_lam, gen), gen


def rmse(a: Tensor, b: Tensor) -> float:
    return float(torch.sqrt(torch.mean((a.reshape(-1) - b.reshape(-1)) ** 2)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="few epochs (smoke test)")
    args = parser.parse_args()
    epochs, batch_size = (150, 500) if args.quick else (2000, 250)

    d = simulation2(n=1000, n_test=2000, p=20, random_state=args.seed)
    X = torch.tensor(d.X_train)  # float64, as the layers were built
    y = torch.tensor(d.y_train)
    Xt, ft = torch.tensor(d.X_test), torch.tensor(d.f_test)
    n, p = X.shape
    likelihood = GaussianLikelihood(noise_std=1.0)

    # 1. Your own loop. negative_elbo returns (loss, nll, kl) per datum:
    #    loss = -(1/m) sum_i log p(y_i | f_theta(x_i)) + KL(q || prior) / n,
    #    the KL of every variational layer summed by svbnn.nn.kl_divergence(model).
    model, gen = build(p, n, args.seed)
    set_generator(model, gen)  # the weight draws come from gen (reproducible)
    opt = make_optimizer(model.parameters(), "adam", lr=1e-2)
    batches = Minibatches(X, y, batch_size=batch_size, generator=gen)
    for epoch in range(1, epochs + 1):
        for xb, yb in batches.epoch():
            loss, nll, kl = negative_elbo(model, likelihood, xb, yb, n_train=n)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if epoch % max(1, epochs // 5) == 0:
            print(
                f"own loop: epoch {epoch:5d}  loss {loss.item():.3f}  nll {nll.item():.3f}  "
                f"kl/n {kl.item():.4f}"
            )
    with torch.no_grad():
        kl_per_datum = kl_divergence(model) / n
    print(f"own loop: KL/n {kl_per_datum.item():.4f}, sum(phi)/T {sparsity(model).item():.3f}")

    # Deterministic evaluation: posterior-mean weights E_q[theta] = phi * mu, or the median
    # model (mu where phi > 0.5, else 0); the layers go back to sampling afterwards.
    with torch.no_grad(), forward_mode(model, "mean"):
        mean_weights = model(Xt)
    with torch.no_grad(), forward_mode(model, "median"):
        median_model = model(Xt)
    f_h = predictive_mean(model, Xt, n_samples=30, generator=torch.Generator().manual_seed(1))
    print(
        f"own loop: test RMSE vs f0: posterior mean f_H {rmse(f_h, ft):.3f}, "
        f"mean weights {rmse(mean_weights, ft):.3f}, median model {rmse(median_model, ft):.3f}"
    )

    # 2. The library's loop: the same objective, plus history, NaN checks, checkpoints.
    model2, gen2 = build(p, n, args.seed)
    history = train(
        model2, X, y, likelihood, epochs=epochs, batch_size=batch_size, lr=1e-2, generator=gen2
    )
    f_h2 = predictive_mean(model2, Xt, n_samples=30, generator=torch.Generator().manual_seed(1))
    same = all(
        torch.equal(a, b) for a, b in zip(model.parameters(), model2.parameters(), strict=True)
    )
    print(
        f"train(): final loss {history.loss[-1]:.3f}, sum(phi)/T {history.sparsity[-1]:.3f}, "
        f"test RMSE vs f0 {rmse(f_h2, ft):.3f}"
    )
    # Same seed, same order of random draws (minibatch order, then weights): the same run.
    print(f"train(): same parameters as the hand-written loop: {same}")


if __name__ == "__main__":
    main()
