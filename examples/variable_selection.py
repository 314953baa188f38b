"""Variable selection on Simulation-II-like data, and the selected network as a sparse module.

Simulation II of the paper: ``y = 7 x2 / (1 + x1^2) + 5 sin(x3 x4) + 2 x5 + eps`` with
``p`` covariates of which only the first five matter. SVBNN with the prior inclusion
``lambda_opt`` of Theorem 4.1 selects an input when one of its first-layer edges has
``phi > 0.5``; the report gives FPR and FNR against the truth, the posterior sparsity, and
the size of the selected network exported as a plain PyTorch module.

    python examples/variable_selection.py          # p = 200, n = 3000, the paper's (minutes)
    python examples/variable_selection.py --quick  # p = 50, n = 1000 (seconds)
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from svbnn import SVBNNRegressor
from svbnn.data import simulation2
from svbnn.selection import fpr_fnr, module_size_bytes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="small problem (smoke test)")
    args = parser.parse_args()
    # The quick run is a smoke test, in float32, which svbnn's native loops take (float64
    # does not); the full run is the paper's.
    if args.quick:
        n, p, epochs, batch, lr, dtype = 1000, 50, 2000, 1000, 1e-2, "float32"
    else:  # the paper's Simulation II sizes and settings (Table 2), in float64 as the authors
        n, p, epochs, batch, lr, dtype = 3000, 200, 7000, 512, 5e-3, "float64"

    d = simulation2(n=n, n_test=2000, p=p, random_state=args.seed)
    reg = SVBNNRegressor(
        hidden_layer_sizes=(7, 7, 7),
        max_iter=epochs,
        batch_size=batch,
        learning_rate_init=lr,
        noise_std=1.0,  # the paper's known noise (y's units)
        tol=None,  # the paper's fixed number of epochs
        dtype=dtype,
        random_state=args.seed,
        mean_function="zero",  # the paper's model: the network alone
    )
    start = time.perf_counter()
    reg.fit(d.X_train, d.y_train)
    print(f"fit: n={n}, p={p}, {epochs} epochs in {time.perf_counter() - start:.1f} s")

    selected = reg.selected_features_
    fpr, fnr = fpr_fnr(selected, d.relevant, n_features=p)
    rmse = float(np.sqrt(np.mean((reg.predict(d.X_test) - d.y_test) ** 2)))
    print(f"selected inputs (0-based): {selected.tolist()}; relevant: {d.relevant.tolist()}")
    print(f"FPR {fpr:.1%}  FNR {fnr:.1%}  test RMSE {rmse:.2f} (noise sd 1)")
    print(
        f"lambda_opt {reg.lambda_:.3e}; sum(phi)/T {reg.sparsity_:.2%}; "
        f"phi > 0.5: {reg.density_:.2%}"
    )

    # Inclusion probabilities of the first layer: which edges survive, per input.
    phi1 = reg.inclusion_probs_[0]  # (hidden, p)
    edges = (phi1 > 0.5).sum(axis=0)
    print("edges kept out of each selected input:", {int(j): int(edges[j]) for j in selected})

    # The selected network (edges with phi > 0.5, weights mu) as a plain torch module.
    sparse, report = reg.export_sparse()
    dense_bytes = module_size_bytes(reg.module_)
    print(
        f"export_sparse: {report.n_nonzero} of {report.n_total} parameters kept "
        f"({report.density:.2%}), {report.size_bytes:,} bytes on disk "
        f"(the variational model: {dense_bytes:,})"
    )
    with torch.no_grad():
        Xt = torch.tensor(d.X_test, dtype=getattr(torch, dtype))
        median_pred = sparse(Xt).squeeze(-1).numpy()
    print(f"exported median model: test RMSE {np.sqrt(np.mean((median_pred - d.y_test) ** 2)):.2f}")


if __name__ == "__main__":
    main()
