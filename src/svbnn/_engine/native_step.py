"""The whole training step of a network that svbnn's native loops run whole, without the
autograd graph of its pieces. Private.

Under the ``auto`` and ``native`` backends a float32 network of narrow layers (Table 2's
200-7-7-7-1, replicated or not, :func:`~svbnn._engine.paths.native_loops`), and under
``native`` also one network of any widths with fewer than ``AUTO_MIN_NUMEL`` parameters (an
estimator's 10-50-1), can run its draw + KL and its layers in :mod:`svbnn._engine.native`.
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
closed form: the same gradients to float32 rounding, not bit for bit. Under a categorical
likelihood the output's gradient is torch's own (the mean's, then log_softmax's backward),
between the loops' forward and backward: bit for bit again.

The local sampler's step (:class:`NativeLocalNegativeElbo`) is the same idea for one
network whose moments and layers the native loops run (``local_moments.cpp``,
``local_layers.cpp``) under a Gaussian likelihood of one output: its gradients are the
autograd step's to float32 rounding, known noise level or learned.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable

from ..objectives import (
    FastPath,
    GaussianLikelihood,
    RowWeightedLikelihood,
    fast_path_spec,
    gaussian_nll,
)
from . import native as _native
from .kernels import AUTO_MIN_NUMEL, Backend, backend
from .paths import (
    flat_mlp_ok,
    fused_kl_ok,
    layer_shapes,
    local_flat_ok,
    native_loops,
    one_prior_variance,
)

if TYPE_CHECKING:
    from ..nn.spike_slab import SpikeSlabLinear, SpikeSlabMLP

__all__ = [
    "NativeLocalNegativeElbo",
    "NativeNegativeElbo",
    "StepLoss",
    "may_step",
    "native_local_negative_elbo",
    "native_local_step_ok",
    "native_negative_elbo",
    "native_step_ok",
    "split_targets",
    "step_likelihood",
    "target_shape",
]


StepLoss = tuple[str, "float | Tensor | None", bool]
"""What :class:`NativeNegativeElbo` needs of the likelihood (:func:`step_likelihood`):
``("gaussian", var, weighted)`` for a known noise level, ``("gaussian", log_noise_std,
weighted)`` for a learned one, ``("categorical", None, weighted)``. ``weighted``: a
:class:`~svbnn.objectives.RowWeightedLikelihood` of that likelihood, whose targets
``(..., m, 2)`` carry each row's response and weight; the step's negative log-likelihood
is ``-mean_i w_i log p(y_i | f(x_i))``, as its ``log_prob`` says."""


def step_likelihood(likelihood: Any, out_features: int) -> StepLoss | None:
    """The likelihood as :class:`NativeNegativeElbo` takes it (see :data:`StepLoss`): a
    Gaussian of one output with a known noise level (its variance, a float) or one learned
    level (``log_noise_std``, a scalar parameter), or a categorical one; ``None`` for any
    other (another class, a subclass with its own ``log_prob``, a Gaussian of several
    outputs or with a noise level per replicate). A
    :class:`~svbnn.objectives.RowWeightedLikelihood` (the class itself) of one of these is
    its base's, weighted."""
    if type(likelihood) is RowWeightedLikelihood:
        base = step_likelihood(likelihood.base, out_features)
        return None if base is None or base[2] else (base[0], base[1], True)
    if isinstance(likelihood, GaussianLikelihood) and likelihood.learn_noise:
        # (first: its fused_spec would compute the noise level only to say None)
        if (
            type(likelihood).log_prob is GaussianLikelihood.log_prob
            and out_features == 1
            and likelihood.log_noise_std.dim() == 0
        ):
            return ("gaussian", likelihood.log_noise_std, False)
        return None
    spec = fast_path_spec(likelihood, out_features)
    if spec is None:
        return None
    if spec[0] is FastPath.GAUSSIAN:
        return ("gaussian", spec[1], False)
    if spec[0] is FastPath.CATEGORICAL:
        return ("categorical", None, False)
    return None  # a kind this step has no formula for


def may_step(model: SpikeSlabMLP) -> bool:
    """The cheap first test of :func:`native_step_ok`, which turns most other networks
    away (a step of 0.45 ms on UCI's 8-50-1, where the full test costs about 14 us): narrow
    layers, or under the native backend one network of fewer than ``AUTO_MIN_NUMEL``
    parameters. Wider layers take the step under the native backend only: ``auto``'s
    one-graph step of UCI's network is a few percent faster (``benchmarks.small_fits
    --steps``), only it has to compile first."""
    return _small_native(model) or max(model.hidden_sizes, default=0) <= _native.NARROW_MAX_OUT


def _small_native(model: SpikeSlabMLP) -> bool:
    """Under the native backend, one network of fewer than ``AUTO_MIN_NUMEL`` parameters:
    the native step takes it whatever its widths."""
    mu = model.mu
    return mu.dim() == 1 and mu.numel() < AUTO_MIN_NUMEL and backend() is Backend.NATIVE


def native_step_ok(
    model: SpikeSlabMLP,
    layers: list[SpikeSlabLinear],
    spec: StepLoss,
    x: Tensor,
    y: Tensor,
) -> bool:
    """Whether :class:`NativeNegativeElbo` runs this training step: a network the native
    loops run whole (see :func:`may_step` and
    :func:`~svbnn._engine.paths.native_loops`), a training draw (Gumbel, gradients on),
    a likelihood it knows (``spec``, from :func:`step_likelihood`; a learned noise level
    float32 on the CPU; weighted rows under a categorical likelihood only), and CPU data
    ``x`` ``(R, m, p)`` float32 and ``y`` ``(R, m)`` (float32 for a Gaussian, int64 class
    indices for a categorical likelihood; weighted, ``(R, m, 2)`` float32, each row's class
    and weight; one network: ``(m, p)`` and ``(m,)`` or ``(m, 2)``), both contiguous,
    neither needing a gradient."""
    kind, noise, weighted = spec
    if kind not in ("gaussian", "categorical") or not may_step(model):
        return False
    if weighted and kind != "categorical":
        return False
    if isinstance(noise, Tensor) and not (
        noise.dtype == torch.float32 and noise.device.type == "cpu"
    ):
        return False
    return (
        x.dtype == torch.float32
        and y.dtype == (torch.float32 if kind == "gaussian" or weighted else torch.int64)
        and x.device.type == "cpu"
        and y.device.type == "cpu"
        and x.is_contiguous()
        and y.is_contiguous()
        and x.numel() > 0
        and not (x.requires_grad or y.requires_grad)
        and y.shape == target_shape(x, weighted)
        and native_loops(model, layers, max_out=model.mu.numel() if _small_native(model) else None)
        and fused_kl_ok(layers)
        and flat_mlp_ok(model, x, layers)
    )


def target_shape(x: Tensor, weighted: bool) -> tuple[int, ...]:
    """The targets' shape a native step takes with inputs ``x`` ``(..., m, p)``:
    ``(..., m)``, or weighted (each row's response and weight) ``(..., m, 2)``."""
    rows = tuple(x.shape[:-1])
    return (*rows, 2) if weighted else rows


def split_targets(y: Tensor, weighted: bool, classes: bool) -> tuple[Tensor, Tensor | None]:
    """The responses (``classes``: as int64 class indices) and the rows' weights of
    targets ``y`` of :func:`target_shape`; unweighted, ``y`` and ``None``."""
    if not weighted:
        return y, None
    # Contiguous, as the native epochs gather them: the same reductions, bit for bit.
    response = y[..., 0].contiguous()
    return (response.to(torch.int64) if classes else response), y[..., 1].contiguous()


class _GraphFreeStep(torch.autograd.Function):
    """A training step whose forward computes its loss and the loss's gradient in
    ``mu``, ``rho`` and ``alpha`` (its first three inputs) and of a learned noise level:
    :meth:`finish` ends the forward, and the backward hands those gradients over, scaled
    by each loss's incoming gradient."""

    @staticmethod
    def finish(
        ctx: Any,
        nll: Tensor,
        kl: Tensor,
        n_train: float,
        grads: tuple[Tensor, ...] | list[Tensor],
        one_minus_q: Tensor | None,
        noise_input: int,
        targets: tuple[Tensor, Tensor, Tensor, Any],
    ) -> tuple[Tensor, Tensor, Tensor]:
        """The forward's end: saves ``grads`` (of ``mu``, ``rho``, ``alpha``) and, for a
        learned noise level (the forward's input number ``noise_input``), its ``1 - q``
        per loss; returns ``(loss, nll, kl / n)``, ``loss = nll + kl / n``, the other two
        not differentiable. ``targets``: the forward's ``mu``, ``rho``, ``alpha`` and
        noise input, which :func:`backward_without_graph` hands the gradients to."""
        ctx.noise_input = None if one_minus_q is None else noise_input
        ctx.grad_targets = targets[:3] if one_minus_q is None else targets
        ctx.save_for_backward(*grads, *(() if one_minus_q is None else (one_minus_q,)))
        loss = torch.add(nll, kl, alpha=1.0 / n_train)  # the KL added with weight 1 / n
        kl_n = kl / n_train
        ctx.mark_non_differentiable(nll, kl_n)
        return loss, nll, kl_n

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, g_loss: Tensor | None, g_nll: Tensor | None, g_kl: Tensor | None
    ) -> tuple[Tensor | None, ...]:
        # The saved gradients scaled by each loss's incoming gradient ``(R,)`` (a scalar
        # for one network); None for every other input.
        out: list[Tensor | None] = [None] * len(ctx.needs_input_grad)
        if g_loss is not None:
            saved = ctx.saved_tensors
            grads = saved[:3]
            if not bool(torch.all(g_loss == 1.0)):  # else the summed losses' gradient
                grads = tuple(g * g_loss.unsqueeze(-1) for g in saved[:3])
            out[:3] = grads
            if ctx.noise_input is not None:  # one level shared by every replicate's loss
                out[ctx.noise_input] = (saved[3] * g_loss).sum()
        return tuple(out)


def backward_without_graph(loss: Tensor) -> bool:
    """``loss.sum().backward()`` without the autograd engine, where ``loss`` is the loss
    of a :class:`_GraphFreeStep` (its first output, ``()`` or ``(R,)``) whose gradients go
    to leaves that need them and have no hooks: the saved gradients (those the backward
    hands over when the losses are summed, the same values) are accumulated into their
    ``.grad`` as the engine does (set where it is ``None``, else added in place). Returns
    whether it did; otherwise nothing is done and the caller runs the engine.

    A training loop calls this before ``backward()``: the engine's pass over the step's
    one node is a cost the step need not pay (docs/performance.md, "A graph-free step's
    gradients without the engine").
    """
    node = loss.grad_fn
    forward_cls = getattr(node, "_forward_cls", None)
    if not (
        isinstance(forward_cls, type)
        and issubclass(forward_cls, _GraphFreeStep)
        and loss.output_nr == 0
        and loss._backward_hooks is None
        and not torch.is_anomaly_enabled()
    ):
        return False
    targets: tuple[Tensor, ...] = node.grad_targets  # type: ignore[union-attr]
    for t in targets:
        if not (
            isinstance(t, Tensor)
            and t.is_leaf
            and t.requires_grad
            and not t._backward_hooks
            and getattr(t, "_post_accumulate_grad_hooks", None) is None
            and (t.grad is None or t.grad.shape == t.shape)
        ):
            return False
    saved = node.saved_tensors  # type: ignore[union-attr]
    grads = list(saved[:3])
    if len(targets) > 3:  # a learned noise level: its 1 - q summed over the losses
        grads.append(saved[3].sum())
    with torch.no_grad():
        for t, g in zip(targets, grads, strict=True):
            if t.grad is None:
                t.grad = g  # a fresh tensor of the step's, as the engine takes it
            else:
                t.grad += g
    return True


class NativeNegativeElbo(_GraphFreeStep):
    """Per-replicate negative ELBO ``(loss, nll, kl / n)`` of one minibatch, each ``(R,)``,
    with the gradient of ``loss`` computed in the forward by the native loops.

    The forward draws the weights and the KL (:func:`svbnn._engine.native.fused_forward`), runs
    the layers forward and back (under a Gaussian likelihood replicate by replicate,
    :func:`svbnn._engine.native.narrow_mlp_gaussian_step`; under a categorical one all replicates
    forward, the output's gradient by torch's operations, then all back), the likelihood,
    and the draw's backward (:func:`svbnn._engine.native.fused_backward`). The backward scales
    those gradients by each replicate's incoming gradient (1 when the losses are summed:
    the same bits). ``nll`` and ``kl / n`` are not differentiable, as
    :func:`svbnn.training.negative_elbo` returns them detached.

    Notes
    -----
    Shapes: ``mu``, ``rho``, ``alpha`` ``(R, T)``; ``x`` ``(R, m, p)``; ``y`` ``(R, m)``
    (weighted: ``(R, m, 2)``); one network: ``(T,)``, ``(m, p)``, ``(m,)`` (``(m, 2)``) and
    scalar losses (run as one replicate). ``consts``: ``(log_sigma0, 1 / sigma_0^2, 1 /
    tau)`` as :class:`FusedGumbelKL` passes them to the kernel; ``n_train``: the KL's
    divisor; ``kind, noise, weighted``: the likelihood's :data:`StepLoss` (a learned
    ``log_noise_std`` gets its gradient).
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
        kind: str,
        noise: float | Tensor | None,
        weighted: bool,
        shapes: tuple[tuple[int, int], ...],
        activation: str,
        consts: tuple[float, float, float],
        n_train: float,
    ) -> tuple[Tensor, Tensor, Tensor]:
        theta, kl, *factors = _native.fused_forward(
            mu, rho, alpha, seed, log_lam, log_1mlam, *consts
        )
        y, w = split_targets(y, weighted, classes=kind == "categorical")
        # The gradient of the mean over the m rows, as autograd forms it: a float32 -1 / m.
        g_mean = float(x.new_full((), -1.0, dtype=torch.float32) / y.shape[-1])
        rows = theta.view(-1, theta.shape[-1])  # one network: one replicate
        x, y = x.view(-1, *x.shape[-2:]), y.view(-1, y.shape[-1])
        w = None if w is None else w.view(y.shape)
        grad = torch.empty_like(rows)
        learned = None
        if kind == "categorical":
            nll = _categorical_step(rows, x, y, shapes, activation, g_mean, grad, w)
        elif kind != "gaussian":  # the closed set of StepLoss kinds
            raise ValueError(f"the native step has no formula for the likelihood kind {kind!r}")
        else:
            assert w is None  # native_step_ok: weighted rows under a categorical likelihood
            # A learned noise level: its current variance, as the likelihood computes it.
            learned = noise.detach().exp() ** 2 if isinstance(noise, Tensor) else None
            if learned is not None:
                v = float(-0.5 / learned)
            else:
                assert isinstance(noise, float)  # a known variance
                v = -0.5 / noise
            # The layers forward and back, replicate by replicate; between them, d loss /
            # d out as autograd forms it from the log-likelihood const + v (y - out)^2: the
            # mean's gradient, addcmul's two factors added, the difference's sign.
            out = _native.narrow_mlp_gaussian_step(rows, x, y, shapes, activation, v, g_mean, grad)
            if learned is None:
                # As the autograd path: the likelihood on the (R, m, 1) output, its mean
                # negated.
                nll = likelihood.log_prob(out.transpose(1, 2), y).mean(dim=-1).neg()
            else:
                # nll = log(2 pi var) / 2 + q / 2 with q = mean((y - out)^2) / var, and its
                # derivative in log(noise sd) (var = exp(2 log sd)) 1 - q: per replicate.
                r = y - out.view(y.shape)
                mse = (r * r).mean(dim=-1)
                q = mse / learned
                nll = gaussian_nll(mse, learned)
        nll = nll.view(kl.shape)
        g_kl = kl.new_ones((*kl.shape, 1)) * (1.0 / n_train)
        grads = _native.fused_backward(grad.view(theta.shape), g_kl, theta, *factors)
        one_minus_q = None if learned is None else 1.0 - q.view(kl.shape)
        return _GraphFreeStep.finish(
            ctx, nll, kl, n_train, grads, one_minus_q, 10, (mu, rho, alpha, noise)
        )


def _categorical_step(
    rows: Tensor,
    x: Tensor,
    y: Tensor,
    shapes: tuple[tuple[int, int], ...],
    activation: str,
    g_mean: float,
    grad: Tensor,
    w: Tensor | None = None,
) -> Tensor:
    """The layers forward and back under a categorical likelihood: the weight gradient of
    the mean negative log-likelihood into ``grad``; returns that nll per replicate ``(R,)``.
    The output's gradient is formed as autograd forms it: the mean's ``g_mean`` at each
    row's class (times its weight ``w`` ``(R, m)``, when given), then log_softmax's
    backward."""
    hs, out = _native.narrow_mlp_forward(rows, x, shapes, activation)
    log_p = torch.log_softmax(out.transpose(1, 2), dim=-1)  # (R, m, C)
    target = y.unsqueeze(-1)
    # As CategoricalLikelihood.log_prob (RowWeightedLikelihood's: times w), its mean negated.
    log_lik = log_p.gather(-1, target).squeeze(-1)
    if w is None:
        nll = log_lik.mean(dim=-1).neg()
        g = torch.zeros_like(log_p).scatter_(-1, target, g_mean)
    else:
        nll = (w * log_lik).mean(dim=-1).neg()
        g = torch.zeros_like(log_p).scatter_(-1, target, (w * g_mean).unsqueeze(-1))
    # log_softmax's backward as autograd runs it (its exp is not torch.exp's, bit for bit)
    g = torch.ops.aten._log_softmax_backward_data(g, log_p, -1, log_p.dtype)
    _native.narrow_mlp_backward(rows, hs, g.transpose(1, 2), shapes, activation, grad)
    return nll


def native_negative_elbo(
    model: SpikeSlabMLP,
    layers: list[SpikeSlabLinear],
    likelihood: Any,
    spec: StepLoss,
    x: Tensor,
    y: Tensor,
    n_train: float,
    seed: Tensor,
    log_lams: tuple[Tensor, Tensor],
) -> tuple[Tensor, Tensor, Tensor]:
    """:class:`NativeNegativeElbo` of ``model`` (where :func:`native_step_ok` says so);
    ``layers``: its layers, input to output; ``spec``: from :func:`step_likelihood`."""
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
        *spec,
        layer_shapes(layers),
        model.activation,
        consts,
        n_train,
    )
    return out


def native_local_step_ok(
    model: SpikeSlabMLP,
    layers: list[SpikeSlabLinear],
    spec: StepLoss,
    x: Tensor,
    y: Tensor,
) -> bool:
    """Whether :class:`NativeLocalNegativeElbo` runs this training step: the local
    sampler's training forward of one network on flat storage
    (:func:`~svbnn._engine.paths.local_flat_ok`) with one prior variance, whose moments and
    KL and whose layers the native loops compute under this backend (where the autograd
    step would take them from the loops too), a Gaussian likelihood of one output
    (``spec``; a learned noise level float32 on the CPU), and CPU data ``x`` ``(m, p)`` and
    ``y`` ``(m,)`` (weighted: ``(m, 2)``, each row's response and weight), float32,
    contiguous, neither needing a gradient."""
    kind, noise, weighted = spec
    mode = backend()
    if kind != "gaussian" or mode not in (Backend.AUTO, Backend.NATIVE):
        return False
    if isinstance(noise, Tensor) and not (
        noise.dtype == torch.float32 and noise.device.type == "cpu"
    ):
        return False
    any_threads = mode is Backend.NATIVE
    mu = model.mu
    return (
        torch.is_grad_enabled()
        and model.out_features == 1
        and x.dim() == 2
        and y.shape == target_shape(x, weighted)
        and x.dtype == torch.float32
        and y.dtype == torch.float32
        and y.device.type == "cpu"
        and y.is_contiguous()
        and not (x.requires_grad or y.requires_grad)
        and local_flat_ok(model, x, layers)
        and one_prior_variance(layers)
        and _native.local_moments_kl_usable(
            mu, model.rho, model.alpha, model.log_prior_inclusion, any_threads=any_threads
        )
        and _native.local_mlp_usable(mu, model.rho, x, model.activation, any_threads=any_threads)
    )


class NativeLocalNegativeElbo(_GraphFreeStep):
    """The negative ELBO ``(loss, nll, kl / n)`` of one minibatch under the local sampler,
    with the gradient of ``loss`` computed in the forward, for one network: the autograd
    step's native calls (:class:`~svbnn._engine.fused.LocalMomentsKL` and
    :class:`~svbnn._engine.fused.LocalFlatMLP` on the loops) without its graph.

    The forward computes the weights' moments and the KL
    (:func:`svbnn._engine.native.local_moments_kl`), draws the pre-activations' noise from
    the layers' generators in the autograd step's order (the same numbers), runs the layers
    forward (:func:`svbnn._engine.native.local_mlp_forward`), forms the Gaussian
    likelihood's gradient in the output, ``-(y - out) / (m var)``, runs the layers back
    and the moments' backward with the KL's gradient ``1 / n``. The backward scales those
    gradients by the incoming one. A learned noise level (``log_noise_std``) gets ``1 -
    mean((y - out)^2) / var``. The gradients equal the autograd step's to float32
    rounding (the output's gradient is formed in another order); ``nll`` and ``kl / n``
    are not differentiable, as :func:`svbnn.training.negative_elbo` returns them detached.

    Notes
    -----
    Shapes: ``mu``, ``rho``, ``alpha`` ``(T,)``; ``x`` ``(m, p)``; ``y`` ``(m,)`` (weighted:
    ``(m, 2)``, each row's response and weight: the residual's gradient and the noise
    level's ``1 - q`` become ``w r`` and ``mean(w) - q``); scalar losses. ``outs``: each
    layer's output width; ``generators``: each layer's generator; ``log_sigma0``: the
    slab's log sd; ``n_train``: the KL's divisor; ``kind, noise, weighted``: the
    likelihood's :data:`StepLoss`.
    """

    @staticmethod
    def forward(
        ctx: Any,
        mu: Tensor,
        rho: Tensor,
        alpha: Tensor,
        x: Tensor,
        y: Tensor,
        log_lam: Tensor,
        log_1mlam: Tensor,
        likelihood: Any,
        kind: str,
        noise: float | Tensor | None,
        weighted: bool,
        outs: tuple[int, ...],
        generators: tuple[torch.Generator | None, ...],
        log_sigma0: float,
        n_train: float,
    ) -> tuple[Tensor, Tensor, Tensor]:
        if kind != "gaussian":  # the only kind native_local_step_ok passes
            raise ValueError(f"the native local step has no formula for the likelihood {kind!r}")
        mean, var, kl, saved = _native.local_moments_kl(
            mu, rho, alpha, log_lam, log_1mlam, log_sigma0, math.exp(-2.0 * log_sigma0)
        )
        m = x.shape[0]
        # LocalFlatMLP's draws, in its order (each layer's generator, or torch's default).
        draws = [
            torch.randn((m, n_out), generator=gen, dtype=x.dtype, device=x.device)
            for n_out, gen in zip(outs, generators, strict=True)
        ]
        out, hidden = _native.local_mlp_forward(mean, var, x, list(outs), draws)
        response, w = split_targets(y, weighted, classes=False)
        r = response - out.view(response.shape)
        # Weighted: the residuals' gradient is w r, the noise level's mean(w) - q.
        wr = r if w is None else w * r
        learned = noise.detach().exp() ** 2 if isinstance(noise, Tensor) else None
        if learned is None:
            assert isinstance(noise, float)  # a known variance (StepLoss)
            # As the autograd step: the likelihood's log density, its mean negated.
            nll = likelihood.log_prob(out, y).mean(dim=-1).neg()
            g_out = wr * (-1.0 / (m * noise))
        else:
            mse = (wr * r).mean()
            q = mse / learned
            nll = (
                gaussian_nll(mse, learned)
                if w is None
                else (w * gaussian_nll(r * r, learned)).mean()
            )
            g_out = wr / learned * (-1.0 / m)
        # The layers' backward writes the moments' gradients; draws now hold its factors.
        g_mean, g_var, _ = _native.local_mlp_backward(
            mean, var, x, list(outs), list(hidden), draws, g_out.view(m, 1), False
        )
        g_kl = kl.new_full(kl.shape, 1.0 / n_train)
        grads = _native.local_moments_kl_backward(g_mean, g_var, g_kl, saved)
        one_minus_q = None if learned is None else (1.0 if w is None else w.mean()) - q
        return _GraphFreeStep.finish(
            ctx, nll, kl, n_train, grads, one_minus_q, 9, (mu, rho, alpha, noise)
        )


def native_local_negative_elbo(
    model: SpikeSlabMLP,
    layers: list[SpikeSlabLinear],
    likelihood: Any,
    spec: StepLoss,
    x: Tensor,
    y: Tensor,
    n_train: float,
    log_lams: tuple[Tensor, Tensor],
) -> tuple[Tensor, Tensor, Tensor]:
    """:class:`NativeLocalNegativeElbo` of ``model`` (where :func:`native_local_step_ok`
    says so); ``layers``: its layers, input to output; ``spec``: from
    :func:`step_likelihood`."""
    out: tuple[Tensor, Tensor, Tensor] = NativeLocalNegativeElbo.apply(
        model.mu,
        model.rho,
        model.alpha,
        x,
        y,
        *log_lams,
        likelihood,
        *spec,
        tuple(layer.out_features for layer in layers),
        tuple(layer.generator for layer in layers),
        0.5 * math.log(layers[0].prior_variance),
        n_train,
    )
    return out
