"""A plain PyTorch implementation of the paper's Algorithm 1: the benchmark's reference point.

This is spike-and-slab variational inference written the obvious way, the way one would
first type it from the paper: separate weight and bias parameters, two fresh random draws
per parameter, the relaxed gate ``sigmoid(eta / tau)`` with a straight-through hard gate,
``theta = gate * (mu + sigma * eps)``, and the exact KL as a chain of elementwise torch ops,
all differentiated by autograd. Nothing is fused and nothing is written by hand.

It exists only to be timed against :mod:`svbnn` (which computes the same quantities with
fused kernels and closed-form gradients); the library never imports it.

Per parameter (Algorithm 1, ``phi = sigmoid(alpha)``, ``sigma = softplus(rho)``):

``u ~ U(0, 1)``, ``eps ~ N(0, 1)``, ``eta = alpha + log(u / (1 - u))``,
``g~ = sigmoid(eta / tau)`` (backward pass), ``g = 1[g~ > 0.5]`` (forward pass),
``theta = g * (mu + sigma * eps)``.

``KL = phi log(phi / lambda) + (1 - phi) log((1 - phi) / (1 - lambda))
+ phi [log(sigma_0 / sigma) + (sigma^2 + mu^2) / (2 sigma_0^2) - 1/2]``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = [
    "ReferenceSpikeSlabConv2d",
    "ReferenceSpikeSlabLinear",
    "reference_cnn",
    "reference_kl",
    "reference_mlp",
]


class _ReferenceSpikeSlab(nn.Module):
    """Parameters, the Gumbel-softmax straight-through draw and the KL, written plainly."""

    def __init__(
        self,
        weight_shape: tuple[int, ...],
        fan_in: int,
        *,
        log_prior_inclusion: float,
        prior_variance: float = 2.0,
        temperature: float = 0.5,
        init_inclusion: float = 0.99,
        init_rho: float = -6.0,
    ) -> None:
        super().__init__()
        out = weight_shape[0]
        bound = 1.0 / math.sqrt(fan_in)
        logit = math.log(init_inclusion / (1.0 - init_inclusion))
        self.w_mu = nn.Parameter(torch.empty(weight_shape).uniform_(-bound, bound))
        self.w_rho = nn.Parameter(torch.full(weight_shape, init_rho))
        self.w_alpha = nn.Parameter(torch.full(weight_shape, logit))
        self.b_mu = nn.Parameter(torch.empty(out).uniform_(-bound, bound))
        self.b_rho = nn.Parameter(torch.full((out,), init_rho))
        self.b_alpha = nn.Parameter(torch.full((out,), logit))
        self.log_lam = float(log_prior_inclusion)
        self.prior_variance = float(prior_variance)
        self.temperature = float(temperature)

    def _sample(self, mu: Tensor, rho: Tensor, alpha: Tensor) -> Tensor:
        u = torch.rand_like(mu)
        eps = torch.randn_like(mu)
        sigma = F.softplus(rho)
        eta = alpha + torch.log(u) - torch.log(1.0 - u)
        soft = torch.sigmoid(eta / self.temperature)
        hard = (soft > 0.5).to(soft.dtype)
        gate = hard + soft - soft.detach()  # straight-through: hard forward, soft backward
        return gate * (mu + sigma * eps)

    def _kl(self, mu: Tensor, rho: Tensor, alpha: Tensor) -> Tensor:
        phi = torch.sigmoid(alpha)
        sigma = F.softplus(rho)
        log_lam = self.log_lam
        log_1mlam = math.log(-math.expm1(log_lam))
        var0 = self.prior_variance
        kl_gamma = phi * (F.logsigmoid(alpha) - log_lam) + (1.0 - phi) * (
            F.logsigmoid(-alpha) - log_1mlam
        )
        kl_slab = 0.5 * math.log(var0) - torch.log(sigma) + (sigma**2 + mu**2) / (2 * var0) - 0.5
        return (kl_gamma + phi * kl_slab).sum()

    def weights(self) -> tuple[Tensor, Tensor]:
        """One draw of ``(weight, bias)``."""
        return (
            self._sample(self.w_mu, self.w_rho, self.w_alpha),
            self._sample(self.b_mu, self.b_rho, self.b_alpha),
        )

    def kl(self) -> Tensor:
        """Exact KL(q || prior) of the layer's weights and biases (a scalar)."""
        return self._kl(self.w_mu, self.w_rho, self.w_alpha) + self._kl(
            self.b_mu, self.b_rho, self.b_alpha
        )


class ReferenceSpikeSlabLinear(_ReferenceSpikeSlab):
    """Spike-and-slab linear layer: ``(m, in) -> (m, out)``, one fresh draw per call."""

    def __init__(self, in_features: int, out_features: int, **kwargs: float) -> None:
        super().__init__((out_features, in_features), in_features, **kwargs)

    def forward(self, x: Tensor) -> Tensor:
        w, b = self.weights()
        return F.linear(x, w, b)


class ReferenceSpikeSlabConv2d(_ReferenceSpikeSlab):
    """Spike-and-slab 2-D convolution: ``(m, C_in, H, W) -> (m, C_out, H', W')``."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        padding: int = 0,
        **kwargs: float,
    ) -> None:
        shape = (out_channels, in_channels, kernel_size, kernel_size)
        super().__init__(shape, in_channels * kernel_size**2, **kwargs)
        self.padding = padding

    def forward(self, x: Tensor) -> Tensor:
        w, b = self.weights()
        return F.conv2d(x, w, b, padding=self.padding)


def reference_kl(model: nn.Module) -> Tensor:
    """Sum of the KL of every reference layer of ``model``."""
    terms = [m.kl() for m in model.modules() if isinstance(m, _ReferenceSpikeSlab)]
    return torch.stack(terms).sum()


def reference_mlp(
    in_features: int,
    hidden_sizes: tuple[int, ...] | list[int],
    out_features: int,
    *,
    log_prior_inclusion: float,
) -> nn.Sequential:
    """ReLU MLP of :class:`ReferenceSpikeSlabLinear` layers."""
    sizes = [in_features, *hidden_sizes, out_features]
    mods: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        mods.append(
            ReferenceSpikeSlabLinear(
                sizes[i], sizes[i + 1], log_prior_inclusion=log_prior_inclusion
            )
        )
        if i < len(sizes) - 2:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


def reference_cnn(hidden: int, *, log_prior_inclusion: float) -> nn.Sequential:
    """The Fashion-MNIST 2-Conv-2-FC network of the paper's supplement, spike-and-slab.

    ``(m, 1, 28, 28) -> (m, 10)``: conv 32 5x5 pad 2, ReLU, maxpool 2; conv 64 3x3 pad 2,
    ReLU, maxpool 2; FC ``64*8*8 -> hidden``, ReLU; FC ``hidden -> 10``.
    """
    kw = {"log_prior_inclusion": log_prior_inclusion}
    return nn.Sequential(
        ReferenceSpikeSlabConv2d(1, 32, 5, padding=2, **kw),
        nn.ReLU(),
        nn.MaxPool2d(2),
        ReferenceSpikeSlabConv2d(32, 64, 3, padding=2, **kw),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        ReferenceSpikeSlabLinear(64 * 8 * 8, hidden, **kw),
        nn.ReLU(),
        ReferenceSpikeSlabLinear(hidden, 10, **kw),
    )
