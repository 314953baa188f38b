"""The whole training step of a network that svbnn's native loops run whole, without the
autograd graph of its pieces. Private.

Under the ``auto`` and ``native`` backends a float32 network of narrow layers (Table 2's
200-7-7-7-1, replicated or not, :func:`~svbnn.nn._fused_paths.native_loops`), and under
``native`` also one network of any widths with fewer than ``AUTO_MIN_NUMEL`` parameters (an
estimator's 10-50-1), can run its draw + KL and its layers in :mod:`svbnn._native`.
Through autograd, the step still builds a graph of about a dozen nodes (the draw, the
network, the Gaussian log-likelihood's operations, the ELBO's sum) and calls two Python
backward functions, which cost about a fifth of the step of 15 replicates (measured: 2.73
against 2.23 ms a step without them, docs/performance.md). :class:`NativeNegativeElbo`
computes the negative ELBO and, in the same call, its gradient, which its backward hands
over scaled by the incoming gradient: one autograd node. A network without replicates runs
as one replicate.

With a known noise level every operation is the one the autograd path runs, in the same
order (the draw, the layers, the likelihood's own ``log_prob``, the gradient of the mean,
``addcmul`` and the difference as autograd computes them), so a run gives the same
parameters bit for bit either way (tests/test_native.py). A learned noise level
(``GaussianLikelihood(learn_noise=True)``, one for the network) takes the same output
gradient at the current variance, and its own gradient ``1 - mean((y - out)^2) / var`` in
closed form: the same gradients to float32 rounding, not bit for bit.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from .. import _native
from .._kernels import AUTO_MIN_NUMEL, Backend, backend
from ..objectives import GaussianLikelihood
from ._fused_paths import flat_mlp_ok, fused_kl_ok, layer_shapes, native_loops

if TYPE_CHECKING:
    from .spike_slab import SpikeSlabLinear, SpikeSlabMLP

__all__ = ["NativeNegativeElbo", "native_negative_elbo", "native_step_ok", "step_noise"]


def step_noise(likelihood: Any, out_features: int) -> float | Tensor | None:
    """The noise of a Gaussian likelihood of one output as :class:`NativeNegativeElbo`
    takes it: the variance of a known noise level (a float), or the learned
    ``log_noise_std`` (one scalar parameter); ``None`` for any other likelihood (another
    class, a subclass with its own ``log_prob``, several outputs, a noise level per
    replicate)."""
    fused_spec = getattr(likelihood, "fused_spec", None)
    spec = fused_spec(out_features) if fused_spec is not None else None
    if spec is not None:
        return spec[1] if spec[0] == "gaussian" else None
    if (
        isinstance(likelihood, GaussianLikelihood)
        and type(likelihood).log_prob is GaussianLikelihood.log_prob
        and likelihood.learn_noise
        and out_features == 1
        and likelihood.log_noise_std.dim() == 0
    ):
        log_std: Tensor = likelihood.log_noise_std
        return log_std
    return None


def native_step_ok(
    model: SpikeSlabMLP,
    layers: list[SpikeSlabLinear],
    noise: float | Tensor | None,
    x: Tensor,
    y: Tensor,
) -> bool:
    """Whether :class:`NativeNegativeElbo` runs this training step: a network the native
    loops run whole (see :func:`~svbnn.nn._fused_paths.native_loops`; narrow layers, or
    under the native backend one network of fewer than ``AUTO_MIN_NUMEL`` parameters), a
    training draw (Gumbel,
    gradients on), a Gaussian likelihood of one output (``noise``, from
    :func:`step_noise`; a learned one float32 on the CPU), and float32 CPU data ``x``
    ``(R, m, p)`` and ``y`` ``(R, m)`` (one network: ``(m, p)`` and ``(m,)``), both
    contiguous, neither needing a gradient."""
    if noise is None:
        return False
    mu = model.mu
    # First the cheap tests that turn most other networks away (a step of 0.45 ms on UCI's
    # 8-50-1, where the full test costs about 14 us). Wider layers take the step under the
    # native backend only: auto's one-graph step of UCI's network is a few percent faster
    # (benchmarks.small_fits --steps), only it has to compile first.
    small = mu.dim() == 1 and mu.numel() < AUTO_MIN_NUMEL and backend() is Backend.NATIVE
    if not (small or max(model.hidden_sizes, default=0) <= _native.NARROW_MAX_OUT):
        return False
    if isinstance(noise, Tensor) and not (
        noise.dtype == torch.float32 and noise.device.type == "cpu"
    ):
        return False
    return (
        x.dtype == torch.float32
        and y.dtype == torch.float32
        and x.device.type == "cpu"
        and y.device.type == "cpu"
        and x.is_contiguous()
        and y.is_contiguous()
        and x.numel() > 0
        and not (x.requires_grad or y.requires_grad)
        and y.shape == x.shape[:-1]
        and native_loops(model, layers, max_out=mu.numel() if small else None)
        and fused_kl_ok(layers)
        and flat_mlp_ok(model, x, layers)
    )


class NativeNegativeElbo(torch.autograd.Function):
    """Per-replicate negative ELBO ``(loss, nll, kl / n)`` of one minibatch, each ``(R,)``,
    with the gradient of ``loss`` computed in the forward by the native loops.

    The forward draws the weights and the KL (:func:`svbnn._native.fused_forward`), runs
    each replicate's layers forward and back (:func:`svbnn._native.narrow_mlp_gaussian_step`,
    the output's gradient formed between the two), the likelihood, and the draw's backward
    (:func:`svbnn._native.fused_backward`). The backward scales those gradients by each
    replicate's incoming gradient (1 when the losses are summed: the same bits). ``nll``
    and ``kl / n`` are not differentiable, as :func:`svbnn.training.negative_elbo` returns
    them detached.

    Notes
    -----
    Shapes: ``mu``, ``rho``, ``alpha`` ``(R, T)``; ``x`` ``(R, m, p)``; ``y`` ``(R, m)``;
    one network: ``(T,)``, ``(m, p)``, ``(m,)`` and scalar losses (run as one replicate).
    ``consts``: ``(log_sigma0, 1 / sigma_0^2, 1 / tau)`` as :class:`FusedGumbelKL` passes
    them to the kernel; ``n_train``: the KL's divisor; ``noise``: a known variance or the
    learned ``log_noise_std`` (:func:`step_noise`), which then gets its gradient.
    """

    @staticmethod
    def forward(
        ctx: Any,
        mu: Tensor,
        rho: Tensor,
        alpha: Tensor,
        x: Tensor,
        y: Tensor,
        seed: Tensor,
        log_lam: Tensor,
        log_1mlam: Tensor,
        likelihood: Any,
        noise: float | Tensor,
        shapes: tuple[tuple[int, int], ...],
        activation: str,
        consts: tuple[float, float, float],
        n_train: float,
    ) -> tuple[Tensor, Tensor, Tensor]:
        theta, kl, *factors = _native.fused_forward(
            mu, rho, alpha, seed, log_lam, log_1mlam, *consts
        )
        # A learned noise level: its current variance, as the likelihood computes it.
        var = noise.detach().exp() ** 2 if isinstance(noise, Tensor) else None
        v = float(-0.5 / var) if var is not None else -0.5 / float(noise)
        # The layers forward and back, replicate by replicate; between them, d loss / d out
        # as autograd forms it from the log-likelihood const + v (y - out)^2: the mean's
        # backward of -1 (a float32 -1 / m), addcmul's two factors added, the difference's
        # sign.
        g_mean = float(y.new_full((), -1.0) / y.shape[-1])
        rows = theta.view(-1, theta.shape[-1])  # one network: one replicate
        x, y = x.view(-1, *x.shape[-2:]), y.view(-1, y.shape[-1])
        grad = torch.empty_like(rows)
        out = _native.narrow_mlp_gaussian_step(rows, x, y, shapes, activation, v, g_mean, grad)
        g_kl = kl.new_ones((*kl.shape, 1)) * (1.0 / n_train)
        saved: tuple[Tensor, ...] = _native.fused_backward(
            grad.view(theta.shape), g_kl, theta, *factors
        )
        ctx.learned = var is not None
        if var is None:
            # As the autograd path: the likelihood on the (R, m, 1) output, its mean negated.
            nll = likelihood.log_prob(out.transpose(1, 2), y).mean(dim=-1).neg().view(kl.shape)
        else:
            # nll = log(2 pi var) / 2 + q / 2 with q = mean((y - out)^2) / var, and its
            # derivative in log(noise sd) (var = exp(2 log sd)) 1 - q: per replicate.
            r = y - out.view(y.shape)
            q = ((r * r).mean(dim=-1) / var).view(kl.shape)
            nll = torch.log(2 * math.pi * var) * 0.5 + q * 0.5
            saved = (*saved, 1.0 - q)
        loss = torch.add(nll, kl, alpha=1.0 / n_train)  # the KL added with weight 1 / n
        ctx.save_for_backward(*saved)
        kl_n = kl / n_train
        ctx.mark_non_differentiable(nll, kl_n)
        return loss, nll, kl_n

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, g_loss: Tensor | None, g_nll: Tensor | None, g_kl: Tensor | None
    ) -> tuple[Tensor | None, ...]:
        grads: tuple[Tensor | None, ...] = (None, None, None)
        g_noise = None
        if g_loss is not None:
            saved = ctx.saved_tensors
            grads = saved[:3]
            if not bool(torch.all(g_loss == 1.0)):  # else the summed losses' gradient
                grads = tuple(g * g_loss.unsqueeze(-1) for g in saved[:3])
            if ctx.learned:  # one noise level shared by every replicate's loss
                g_noise = (saved[3] * g_loss).sum()
        return (*grads, *([None] * 6), g_noise, *([None] * 4))


def native_negative_elbo(
    model: SpikeSlabMLP,
    layers: list[SpikeSlabLinear],
    likelihood: Any,
    noise: float | Tensor,
    x: Tensor,
    y: Tensor,
    n_train: float,
    seed: Tensor,
    log_lams: tuple[Tensor, Tensor],
) -> tuple[Tensor, Tensor, Tensor]:
    """:class:`NativeNegativeElbo` of ``model`` (where :func:`native_step_ok` says so);
    ``layers``: its layers, input to output; ``noise``: from :func:`step_noise`."""
    first = layers[0]
    log_sigma0 = 0.5 * math.log(first.prior_variance)
    consts = (log_sigma0, math.exp(-2.0 * log_sigma0), 1.0 / float(first.temperature))
    out: tuple[Tensor, Tensor, Tensor] = NativeNegativeElbo.apply(
        model.mu,
        model.rho,
        model.alpha,
        x,
        y,
        seed,
        *log_lams,
        likelihood,
        noise,
        layer_shapes(layers),
        model.activation,
        consts,
        n_train,
    )
    return out
