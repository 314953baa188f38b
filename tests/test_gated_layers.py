"""Gated layers as an extension point: selection, training's record and the export find
them by the public protocol ``svbnn.nn.GatedLayer``, not by a private class."""

import torch
from torch import nn

from svbnn.nn import (
    GatedLayer,
    GaussianLinear,
    HorseshoeLinear,
    SpikeSlabConv2d,
    SpikeSlabLinear,
    SpikeSlabMLP,
    VariationalDropoutLinear,
    VariationalLayer,
    is_gated_layer,
)
from svbnn.objectives import GaussianLikelihood
from svbnn.selection import export_sparse, sparsity, spike_slab_layers, unresolved_fraction
from svbnn.training import train


class _HardGateLinear(VariationalLayer):
    """A gated layer of another family (not a spike-and-slab class): weights ``mu`` gated
    by ``alpha > 0``, a made-up KL that pulls the gates towards 0."""

    def __init__(self, n_in: int, n_out: int, alpha: torch.Tensor) -> None:
        super().__init__()
        self.mu = nn.Parameter(torch.ones(n_out, n_in))
        self.alpha = nn.Parameter(alpha.clone())

    def inclusion_probs(self) -> dict[str, torch.Tensor]:
        return {"weight": torch.sigmoid(self.alpha.detach())}

    def kl_divergence(self) -> torch.Tensor:
        return torch.sigmoid(self.alpha).sum()

    def n_params(self) -> int:
        return self.mu.numel()

    def mean_weights(self) -> tuple[torch.Tensor, None]:
        return (torch.sigmoid(self.alpha) * self.mu).detach(), None

    def median_weights(self, threshold: float = 0.5) -> tuple[torch.Tensor, None]:
        return (self.mu * (torch.sigmoid(self.alpha) > threshold)).detach(), None

    def sample_weights(self) -> tuple[torch.Tensor, None]:
        return self.mu * torch.sigmoid(self.alpha), None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self._weights()[0].t()


def test_the_library_gated_layers_and_only_they_satisfy_the_protocol() -> None:
    mlp = SpikeSlabMLP(3, (4,), 1)
    own = _HardGateLinear(3, 2, torch.ones(2, 3))
    gated = [SpikeSlabLinear(3, 2), SpikeSlabConv2d(1, 2, 3), own]
    others = [mlp, GaussianLinear(3, 2), HorseshoeLinear(3, 2), VariationalDropoutLinear(3, 2)]
    for module in gated + others + [nn.Linear(2, 2)]:
        assert is_gated_layer(module) == (module in gated)
    # The library's layers subclass the protocol; a layer of another family need not.
    assert isinstance(gated[0], GatedLayer) and GatedLayer not in type(own).__mro__
    assert len(spike_slab_layers(mlp)) == 2  # the container is not a layer; its layers are
    w, b = SpikeSlabLinear(3, 2).median_weights()
    assert w.shape == (2, 3) and b is not None and b.shape == (2,)


def test_a_new_gated_family_is_selected_trained_and_exported() -> None:
    alpha = torch.tensor([[4.0, -4.0, 4.0], [-4.0, -4.0, 4.0]])
    layer = _HardGateLinear(3, 2, alpha)
    model = nn.Sequential(layer, nn.Tanh(), nn.Linear(2, 1))
    assert spike_slab_layers(model) == [layer]
    phi = torch.sigmoid(alpha)
    torch.testing.assert_close(sparsity(model), phi.mean())
    assert float(unresolved_fraction(model)) == 0.0
    exported, report = export_sparse(model, storage="dense")
    assert (report.n_nonzero, report.n_total) == (3, 6)
    torch.testing.assert_close(exported[0].weight, (alpha > 0).float())
    g = torch.Generator().manual_seed(0)
    X, y = torch.randn(32, 3, generator=g), torch.randn(32, generator=g)
    history = train(
        model, X, y, GaussianLikelihood(1.0), epochs=2, batch_size=16, lr=1e-2, generator=g
    )
    assert len(history.sparsity) == 2  # the record of its gates, every epoch
