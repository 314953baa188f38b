"""A small MLP's whole training step as one compiled graph (the ``auto`` backend).

Where the per-operation cost dominates (networks of a few thousand parameters), the
``auto`` kernel backend runs the draw of every weight, the exact KL, the layers and the
likelihood as one function that ``torch.compile`` turns into one generated graph forward
and one backward (:func:`mlp_draw_forward`, :func:`mlp_negative_elbo`; chosen by
:func:`svbnn._engine.kernels.use_whole_network`). The layers on flat weights
(:func:`layer_views`, :func:`mlp_layers`) also serve the eager
:class:`svbnn._engine.fused.FlatMLP`. Private.
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..objectives import gaussian_nll
from . import native as _native
from .fused_math import counter_noise
from .kernels import COMPILE_OPTIONS, kl_sum_forward, softplus

__all__ = [
    "activate",
    "layer_views",
    "mlp_draw_forward",
    "mlp_layers",
    "mlp_negative_elbo",
    "whole_network_kernel",
]


def activate(h: Tensor, name: str) -> Tensor:
    """A hidden activation by name: ``relu``, ``tanh``, ``sigmoid``/``logistic`` or identity."""
    if name == "relu":
        return torch.relu(h)
    if name == "tanh":
        return torch.tanh(h)
    if name in ("sigmoid", "logistic"):
        return torch.sigmoid(h)
    return h


def mlp_draw_forward(
    x: Tensor,
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    seed: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    shapes: tuple[tuple[int, int], ...],
    activation: str,
    log_sigma0: float,
    var0: float,
    tau: float,
) -> tuple[Tensor, Tensor]:
    """A whole training forward of a small MLP, written for autograd and ``torch.compile``:
    Gumbel straight-through draw of the flat weights with the counter noise, the exact KL,
    and the layers. Returns ``(output (m, out), kl ())``, or for R replicates (``mu``
    ``(R, T)``, ``x`` ``(R, m, p)``) ``(output (R, m, out), kl (R,))``.

    Same draw, KL and gradients as :func:`fused_forward` + :func:`fused_backward` with the
    flat network (``tests/test_fused.py`` checks it): the straight-through gate is
    ``hard + soft - soft.detach()``, so the forward sees exactly the hard gate and autograd
    the relaxed one. Compiled, the forward and the backward become one generated graph each
    (matrix products as BLAS calls), which removes the per-operation cost that dominates
    networks of a few thousand parameters. The layers read the drawn weights as
    :func:`layer_views` says.
    """
    u, eps = counter_noise(mu, seed)
    sigma = softplus(rho)
    slab_w = mu + sigma * eps
    soft = torch.sigmoid((alpha + (torch.log(u) - torch.log1p(-u))) / tau)
    hard = (u > torch.sigmoid(-alpha)).to(mu.dtype)
    theta = (hard + (soft - soft.detach())) * slab_w
    kl = kl_sum_forward(mu, rho, alpha, log_lam, log_1mlam, log_sigma0, 1.0 / var0)
    return mlp_layers(theta, x, shapes, activation)[1], kl


def layer_views(theta: Tensor, shapes: tuple[tuple[int, int], ...]) -> list[tuple[Tensor, Tensor]]:
    """Each layer's weight and bias as views of flat weights (or of their gradient).

    Layer ``i`` is ``theta[..., start_i:end_i]`` as an ``(out, in + 1)`` matrix with the
    bias in the last column: ``(W (out, in), b (out,))`` for ``theta`` ``(T,)``, and
    ``(W (R, out, in), b (R, out, 1))`` for replicates, ``(R, T)``. BLAS reads ``W`` with
    its row stride ``in + 1`` without a copy."""
    views = []
    start = 0
    for n_out, n_in in shapes:
        chunk = theta[..., start : start + n_out * (n_in + 1)]
        start += n_out * (n_in + 1)
        if theta.dim() == 2:
            wb = chunk.view(-1, n_out, n_in + 1)
            views.append((wb[..., :n_in], wb[..., n_in:]))
        else:
            wb = chunk.view(n_out, n_in + 1)
            views.append((wb[:, :n_in], wb[:, n_in]))
    return views


def mlp_layers(
    theta: Tensor, x: Tensor, shapes: tuple[tuple[int, int], ...], activation: str
) -> tuple[list[Tensor], Tensor]:
    """A fully connected network on flat weights (:func:`layer_views`): the input and every
    hidden activation, ``[h_0, ..., h_{L-1}]`` (what a backward needs), and the output.

    ``theta`` ``(T,)`` and ``x`` ``(m, p)``: ``h_i`` ``(m, width_i)``, output ``(m, out)``.
    Replicated, ``(R, T)`` and ``(R, m, p)``: the layers run feature-major, ``h_i``
    ``(R, width_i, m)`` with ``h_0 = x^T``, as the layers' own path runs replicates
    (``h = W h``; BLAS is several times faster on it for narrow layers, see
    ``run_feature_major``); the output is ``(R, m, out)``.
    """
    replicated = theta.dim() == 2
    if replicated and _native.narrow_mlp_usable(theta, x, shapes, activation):
        # Layers of few outputs (Simulation II: 200-7-7-7-1) by svbnn's own loops: BLAS
        # repacks the minibatch for the first, and each small layer is a dozen torch
        # operations (docs/performance.md).
        hs, out = _native.narrow_mlp_forward(theta, x, shapes, activation)
        return hs, out.transpose(1, 2)
    hs = [x.transpose(1, 2) if replicated else x]
    views = layer_views(theta, shapes)
    for i, (w, b) in enumerate(views):
        h = torch.baddbmm(b, w, hs[-1]) if replicated else torch.addmm(b, hs[-1], w.t())
        if i == len(views) - 1:
            return hs, (h.transpose(1, 2) if replicated else h)
        hs.append(activate(h, activation))
    raise ValueError("a network needs at least one layer")


def mlp_negative_elbo(
    x: Tensor,
    y: Tensor,
    mu: Tensor,
    rho: Tensor,
    alpha: Tensor,
    seed: Tensor,
    log_lam: Tensor,
    log_1mlam: Tensor,
    scales: Tensor,
    shapes: tuple[tuple[int, int], ...],
    activation: str,
    likelihood: str,
    log_sigma0: float,
    var0: float,
    tau: float,
) -> tuple[Tensor, Tensor, Tensor]:
    """A small MLP's per-datum negative ELBO on one minibatch in one graph (the forward of
    :func:`mlp_draw_forward` and the likelihood): ``(loss, nll, kl / n)``, scalars (``(R,)``
    for R replicates), the last two detached, as :func:`svbnn.training.negative_elbo`
    returns them.

    ``likelihood``: ``"gaussian"`` (``x`` ``(m, p)``, ``y`` ``(m,)``, one output) or
    ``"categorical"`` (``y`` ``(m,)`` class indices); replicated, ``x`` ``(R, m, p)`` and
    ``y`` ``(R, m)``. ``scales``: ``(1 / n_train, noise variance)`` (the variance unused for
    ``"categorical"``), a tensor so that a new training set size or noise level does not
    compile a new graph. Compiled, the backward of the whole step is one graph too, which
    on networks of a few thousand parameters removes most of the per-operation cost left
    outside :func:`mlp_draw_forward`'s graph.
    """
    out, kl = mlp_draw_forward(
        x, mu, rho, alpha, seed, log_lam, log_1mlam, shapes, activation, log_sigma0, var0, tau
    )
    if likelihood == "categorical":
        # Classes in dimension 1, as cross_entropy wants them for (R, m, C) outputs.
        logits = out if out.dim() == 2 else out.transpose(1, 2)
        nll = F.cross_entropy(logits, y.long(), reduction="none").mean(-1)
    elif likelihood == "gaussian":
        var = scales[1]
        d = y - out.squeeze(-1)
        nll = gaussian_nll((d * d).mean(-1), var)
    else:  # the closed set of svbnn.objectives.FastPath: never another kind's formula
        raise ValueError(f"no fused formula for the likelihood kind {likelihood!r}")
    kl_n = kl * scales[0]
    return nll + kl_n, nll.detach(), kl_n.detach()


_WHOLE_NETWORK: dict[tuple[Any, ...], Callable[..., Any]] = {}


def whole_network_kernel(fn: Callable[..., Any], *static: Any) -> Callable[..., Any]:
    """``fn`` (:func:`mlp_draw_forward` or :func:`mlp_negative_elbo`) compiled with its
    trailing non-tensor arguments ``static`` (architecture, likelihood, prior) fixed.

    Each ``(fn, static)`` gets its own copy of a code object, hence its own torch.compile
    cache: its graph is specialised to the layer sizes (measured, UCI network: 0.63 against
    0.72 ms a training step for one symbolic-shape graph shared by all sizes) and holds the
    constants (as arguments, each float costs a tensor conversion a call). A new batch size
    (a training run's smaller last minibatch) compiles a second graph, also static
    (``dynamic=False``): a graph symbolic in the batch size, which torch would otherwise
    switch to, makes every step slower (``docs/performance.md``), which outweighs one more
    compile (once: inductor caches it on disk). A shared cache would turn symbolic in every
    size at the second architecture and stop compiling at torch's recompilation limit.
    """
    key = (fn.__name__, static)
    compiled = _WHOLE_NETWORK.get(key)
    if compiled is None:

        def bound(*tensors: Tensor) -> Any:
            return fn(*tensors, *static)

        code = bound.__code__.replace()  # a new code object: a new compile cache
        copy = types.FunctionType(code, bound.__globals__, fn.__name__, None, bound.__closure__)
        compiled = _WHOLE_NETWORK[key] = torch.compile(copy, dynamic=False, options=COMPILE_OPTIONS)
    return compiled
