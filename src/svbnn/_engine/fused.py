"""The speed path of the spike-and-slab layers: fused draw + KL, flat network, one graph.

:class:`GumbelSpikeSlab` is one layer's straight-through draw with a fused backward. A
:class:`~svbnn.nn.SpikeSlabMLP` keeps the variational parameters of all its layers in one
flat ``(T,)`` (or ``(R, T)``) tensor each; this module holds what makes a training step of
such a network cheap (DESIGN section 6), so that the model itself only says *what* it
computes:

* :class:`FusedGumbelKL`: the Gumbel straight-through draw of every weight and the exact KL
  in one elementwise pass (one more for the backward), instead of a draw and a KL per layer;
* :class:`FlatMLP`: the network on the flat weights, writing its weight gradient straight
  into one flat buffer;
* under the ``auto`` backend, small networks run their whole training forward
  (:func:`~svbnn._engine.graphs.mlp_draw_forward`), or their whole negative ELBO with the
  likelihood (:func:`~svbnn._engine.graphs.mlp_negative_elbo`), as one compiled graph.

:class:`FusedEngine` decides which of these applies and holds their caches (the KL computed
with the draw, ``log(lambda)`` and ``log(1 - lambda)``, the ELBO's scale tensor). Every path
gives the same values as the general, layer-by-layer one up to rounding (tests/test_fused.py).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from ..nn.base import VariationalLayer
from ..objectives import fast_path_spec, spike_slab_kl
from ..priors import log1mexp
from . import native as _native
from . import paths as _fused_paths
from .graphs import (
    activate,
    layer_views,
    mlp_draw_forward,
    mlp_layers,
    mlp_negative_elbo,
    whole_network_kernel,
)
from .kernels import (
    Backend,
    backend,
    gumbel_backward_saved,
    gumbel_forward_saving,
    kernels,
    local_moments_kl_backward,
    local_moments_kl_forward,
    native_kernels,
    spike_slab_moments,
    use_compiled,
)
from .native_step import (
    StepLoss,
    may_step,
    native_local_negative_elbo,
    native_local_step_ok,
    native_negative_elbo,
    native_step_ok,
    step_likelihood,
    target_shape,
)
from .paths import (
    draw_ok,
    eager_fused_ok,
    flat_mlp_ok,
    fused_kl_ok,
    layer_shapes,
    local_flat_ok,
    native_draw,
    native_network,
    one_prior_variance,
    whole_network_ok,
)

if TYPE_CHECKING:
    from ..nn.spike_slab import SpikeSlabLinear, SpikeSlabMLP

__all__ = [
    "FlatMLP",
    "FusedEngine",
    "FusedGumbelKL",
    "GumbelSpikeSlab",
    "LocalFlatMLP",
    "LocalMomentsKL",
    "activation_grad",
    "run_feature_major",
]

# The draw + KL uses the counter-based noise and the compiled kernel where the kernels run
# compiled (a name of its own so that tests can run that path eagerly).
_fused_path = use_compiled


class GumbelSpikeSlab(torch.autograd.Function):
    """Straight-through Gumbel-softmax spike-and-slab draw with a fused backward pass.

    Forward: ``theta = 1[eta > 0] (mu + sigma eps)``, ``eta = alpha + logit(u)``.
    Backward uses the relaxed gate ``g~ = sigmoid(eta / tau)`` (Algorithm 1), i.e. the same
    gradients as autograd through ``gate = g + g~ - g~.detach()``. One layer's parameters
    (any shape ``S``, all inputs alike), through the per-layer kernels.
    """

    @staticmethod
    def forward(
        ctx: Any,
        mu: Tensor,
        rho: Tensor,
        alpha: Tensor,
        u: Tensor,
        eps: Tensor,
        tau: float,
        compiled: bool | None = None,
    ) -> Tensor:
        # compiled: None as the backend says for this size, False for the eager kernels
        ctx.tau = tau
        ctx.compiled = use_compiled(mu.numel(), mu.device) if compiled is None else compiled
        if ctx.compiled:
            # Fused kernels on 1-D views; the backward recomputes from the inputs.
            flat = [t.reshape(-1) for t in (mu, rho, alpha, u, eps)]
            ctx.save_for_backward(*flat)
            out: Tensor = kernels(True)["gumbel_forward"](*flat).view(mu.shape)
            return out
        w, saved = gumbel_forward_saving(mu, rho, alpha, u, eps, 1.0 / tau)
        ctx.save_for_backward(*saved)
        return w

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        if ctx.compiled:
            shape = grad.shape
            grads = kernels(True)["gumbel_backward"](
                grad.reshape(-1), *ctx.saved_tensors, 1.0 / ctx.tau
            )
            g_mu, g_rho, g_alpha = (g.view(shape) for g in grads)
        else:
            g_mu, g_rho, g_alpha = gumbel_backward_saved(grad, ctx.saved_tensors)
        return g_mu, g_rho, g_alpha, None, None, None, None


class FusedGumbelKL(torch.autograd.Function):
    """Gumbel straight-through draw and exact KL of flat parameters in one fused pass.

    Forward returns ``(theta, kl)``; the backward takes both incoming gradients and returns
    ``d/dmu, d/drho, d/dalpha`` of ``<g_theta, theta> + <g_kl, kl>`` in one more pass from
    elementwise factors the forward saved. Noise: either ``u, eps`` (drawn from torch's
    generator, eager kernels) or a two-word ``seed`` for the counter-based noise of the
    compiled kernel (:func:`svbnn._engine.fused_math.counter_noise`). ``compiled``: that
    kernel compiled (else run eagerly); ``native``: on the native loops instead
    (:func:`~svbnn._engine.kernels.native_kernels`).

    Notes
    -----
    Shapes: ``mu, rho, alpha`` (and ``u, eps``) ``(T,)`` or ``(R, T)``; ``log_lam`` and
    ``log_1mlam`` ``()`` or ``(R, 1)``; ``theta`` like ``mu``, ``kl`` ``()`` or ``(R,)``.
    """

    @staticmethod
    def forward(
        ctx: Any,
        mu: Tensor,
        rho: Tensor,
        alpha: Tensor,
        log_lam: Tensor,
        log_1mlam: Tensor,
        noise: tuple[Tensor, ...],
        tau: float,
        log_sigma0: float,
        compiled: bool,
        native: bool = False,
    ) -> tuple[Tensor, Tensor]:
        # The kernels take 1 / sigma_0^2 and 1 / tau (see fused_forward).
        consts = (log_lam, log_1mlam, log_sigma0, math.exp(-2.0 * log_sigma0), 1.0 / tau)
        if len(noise) == 1:
            table = native_kernels() if native else kernels(compiled)
            out = table["fused_forward"](mu, rho, alpha, noise[0], *consts)
        else:
            compiled = native = False
            out = kernels(False)["fused_forward_given_noise"](mu, rho, alpha, *noise, *consts)
        ctx.compiled = compiled
        ctx.native = native
        theta, kl, *saved = out
        ctx.save_for_backward(theta, *saved)
        return theta, kl

    @staticmethod
    def backward(
        ctx: Any, g_theta: Tensor | None, g_kl: Tensor | None
    ) -> tuple[Tensor | None, ...]:
        saved = ctx.saved_tensors
        shape = saved[0].shape
        if g_theta is None:
            g_theta = torch.zeros(shape, dtype=saved[0].dtype, device=saved[0].device)
        if g_kl is None:
            g_kl = torch.zeros(shape[:-1], dtype=saved[0].dtype, device=saved[0].device)
        # Compiled or native, the saved factors become the gradients (one loop storing into
        # what it reads), unless this graph is kept for another backward (retain_graph,
        # create_graph: e.g. the KL and the likelihood backpropagated separately), which
        # reads them again. Eager, that would be one more pass, so never.
        into_factors = (ctx.compiled or ctx.native) and not _graph_is_kept()
        table = native_kernels() if ctx.native else kernels(ctx.compiled)
        grads = table["fused_backward"](g_theta, g_kl.unsqueeze(-1), *saved, into_factors)
        return (*grads, None, None, None, None, None, None, None)


class LocalMomentsKL(torch.autograd.Function):
    """The means and variances of all weights (:func:`~svbnn._engine.kernels.spike_slab_moments`)
    and the exact KL of flat parameters in one elementwise pass, one more for the backward:
    what the local sampler's training step needs of the parameters, in place of the two
    separate autograd computations (:func:`~svbnn._engine.kernels.local_moments_kl_forward`).
    ``native``: on the native loops (:func:`svbnn._engine.native.local_moments_kl`), else
    eager.

    Notes
    -----
    Shapes: ``mu, rho, alpha`` ``(T,)``, ``log_lam`` and ``log_1mlam`` ``()``; returns
    ``mean`` and ``var`` ``(T,)`` and ``kl`` ``()``.
    """

    @staticmethod
    def forward(
        ctx: Any,
        mu: Tensor,
        rho: Tensor,
        alpha: Tensor,
        log_lam: Tensor,
        log_1mlam: Tensor,
        log_sigma0: float,
        native: bool,
    ) -> tuple[Tensor, Tensor, Tensor]:
        args = (mu, rho, alpha, log_lam, log_1mlam, log_sigma0, math.exp(-2.0 * log_sigma0))
        if native:
            mean, var, kl, saved = _native.local_moments_kl(*args)
        else:
            mean, var, kl, saved = local_moments_kl_forward(*args)
        ctx.native = native
        ctx.save_for_backward(*saved)
        return mean, var, kl

    @staticmethod
    @once_differentiable
    def backward(
        ctx: Any, g_mean: Tensor, g_var: Tensor, g_kl: Tensor
    ) -> tuple[Tensor | None, ...]:
        saved = ctx.saved_tensors
        if ctx.native:  # float32 CPU parameters, so float32 CPU gradients
            grads = _native.local_moments_kl_backward(g_mean, g_var, g_kl, saved)
        else:
            grads = local_moments_kl_backward(g_mean, g_var, g_kl.unsqueeze(-1), saved)
        return (*grads, None, None, None, None)


def _graph_is_kept() -> bool:
    """Whether the running backward keeps its graph (``retain_graph`` or ``create_graph``).
    A private torch function tells; without it, assume kept (nothing is overwritten)."""
    keep = getattr(torch._C._autograd, "_get_current_graph_task_keep_graph", None)
    return True if keep is None else bool(keep())


def activation_grad(g: Tensor, out: Tensor, name: str) -> Tensor:
    """``g * act'(pre)`` from the activation's output ``out`` (all of one shape)."""
    if name == "relu":
        return torch.ops.aten.threshold_backward(g, out, 0.0)
    if name == "tanh":
        return g * (1.0 - out * out)
    if name in ("sigmoid", "logistic"):
        return g * (out * (1.0 - out))
    return g


class FlatMLP(torch.autograd.Function):
    """A whole fully connected network on flat weights ``theta``: its gradient is written
    straight into one flat buffer.

    Each layer reads its rows of ``theta`` as a weight matrix and a bias without copying
    (:func:`~svbnn._engine.graphs.layer_views`); the backward copies each layer's weight gradient
    (and writes its bias gradient) into the same views of the flat gradient. Through
    ``split`` and per-layer views, autograd would instead zero-fill a padded copy of every
    weight gradient and concatenate them (three extra passes over the parameters), and a
    replicated network would run its layers as
    modules, one autograd node per operation.

    Notes
    -----
    Shapes: ``theta`` ``(T,)``, ``x`` ``(m, in)``, output ``(m, out)``; replicated
    ``(R, T)``, ``(R, m, in)`` and ``(R, m, out)``, the layers run feature-major
    (:func:`~svbnn._engine.graphs.mlp_layers`). ``shapes``: the layers' ``(out, in)``.
    """

    @staticmethod
    def forward(
        ctx: Any,
        theta: Tensor,
        x: Tensor,
        shapes: tuple[tuple[int, int], ...],
        activation: str,
        buffer: GradientBuffer | None = None,
    ) -> Tensor:
        hs, out = mlp_layers(theta, x, shapes, activation)
        ctx.shapes = shapes
        ctx.activation = activation
        ctx.buffer = buffer
        ctx.save_for_backward(theta, *hs)
        return out

    @staticmethod
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        theta, *hs = ctx.saved_tensors
        replicated = theta.dim() == 2
        weights = layer_views(theta, ctx.shapes)
        grad = torch.empty_like(theta) if ctx.buffer is None else ctx.buffer.take(theta)
        grads = layer_views(grad, ctx.shapes)
        if replicated:
            g = g.transpose(1, 2)  # feature-major, (R, out, m)
            if not ctx.needs_input_grad[1] and _native.narrow_mlp_usable(
                theta, hs[0].mT, ctx.shapes, ctx.activation
            ):
                # as mlp_layers' forward ran it
                _native.narrow_mlp_backward(theta, hs, g, ctx.shapes, ctx.activation, grad)
                return grad, None, None, None, None
        g_x = None
        for i in range(len(weights) - 1, -1, -1):
            g_w, g_b = grads[i]
            # Into a contiguous product and copied: MKL writes an output of row stride
            # in + 1 slower than the copy costs (docs/performance.md).
            if replicated:
                g_w.copy_(torch.bmm(g, hs[i].transpose(1, 2)))
                torch.sum(g, -1, keepdim=True, out=g_b)
            else:
                g_w.copy_(torch.mm(g.t(), hs[i]))
                torch.sum(g, 0, out=g_b)
            if i > 0 or ctx.needs_input_grad[1]:
                w = weights[i][0]
                g = torch.bmm(w.transpose(1, 2), g) if replicated else g @ w
                if i > 0:
                    g = activation_grad(g, hs[i], ctx.activation)
                else:
                    g_x = g.transpose(1, 2) if replicated else g
        return grad, g_x, None, None, None


class LocalFlatMLP(torch.autograd.Function):
    """A whole fully connected network under local reparameterisation, on the flat means
    and variances of its weights (:func:`~svbnn._engine.kernels.spike_slab_moments`).

    Layer by layer, as :class:`~svbnn.nn.SpikeSlabLinear` computes it under
    ``Sampler.LOCAL``: ``m = h Wm^T + bm``, ``v = h^2 Wv^T + bv``, the pre-activation
    ``m + sqrt(v) eps`` with one ``N(0, 1)`` draw per entry from that layer's generator
    (in the same order, so the same numbers), then the activation. The backward writes
    both gradients into flat arrays through views (:func:`~svbnn._engine.graphs.layer_views`),
    as :class:`FlatMLP` does, instead of autograd's per-layer slices of the flat storage,
    each of which zero-fills a flat-sized gradient.

    With ``native`` (where :func:`svbnn._engine.native.local_mlp_usable` says so) the layers
    and their backward run on svbnn's C++ loops (``local_layers.cpp``), on the same draws,
    drawn first layer by layer: the same values to float32 rounding (the products sum in
    another order).

    Notes
    -----
    Shapes: ``mean`` and ``var`` ``(T,)``, ``x`` ``(m, in)``, output ``(m, out)``;
    ``shapes``: the layers' ``(out, in)``; ``generators``: one per layer.
    """

    @staticmethod
    def forward(
        ctx: Any,
        mean: Tensor,
        var: Tensor,
        x: Tensor,
        shapes: tuple[tuple[int, int], ...],
        activation: str,
        generators: tuple[torch.Generator | None, ...],
        native: bool = False,
    ) -> Tensor:
        ctx.shapes = shapes
        ctx.activation = activation
        ctx.native = native
        if native:
            outs = [n_out for n_out, _ in shapes]
            # The eager layers' draws, in their order (each layer's generator, or torch's
            # default one layer after layer).
            draws = [
                torch.randn((x.shape[0], n_out), generator=gen, dtype=x.dtype, device=x.device)
                for n_out, gen in zip(outs, generators, strict=True)
            ]
            # (draws then hold the backward's factors eps / (2 s))
            out, hidden = _native.local_mlp_forward(mean, var, x, outs, draws)
            ctx.save_for_backward(mean, var, x, *hidden, *draws)
            return out
        means, variances = layer_views(mean, shapes), layer_views(var, shapes)
        tiny = torch.finfo(var.dtype).tiny
        saved: list[Tensor] = []
        h = x
        for i, ((wm, bm), (wv, bv)) in enumerate(zip(means, variances, strict=True)):
            h2 = h * h
            m = torch.addmm(bm, h, wm.t())
            s = torch.addmm(bv, h2, wv.t()).clamp_min_(tiny).sqrt_()
            eps = torch.randn(m.shape, generator=generators[i], dtype=m.dtype, device=m.device)
            out = m + s * eps
            saved += [h, h2, eps.div_(s).mul_(0.5)]  # d out / d v = eps / (2 sqrt(v))
            h = out if i == len(shapes) - 1 else activate(out, activation)
        ctx.save_for_backward(mean, var, *saved)
        return h

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
        mean, var, *saved = ctx.saved_tensors
        shapes = ctx.shapes
        if ctx.native:
            x, rest = saved[0], saved[1:]
            n_hidden = len(shapes) - 1
            g_mean_n, g_var_n, g_x_n = _native.local_mlp_backward(
                mean,
                var,
                x,
                [n_out for n_out, _ in shapes],
                list(rest[:n_hidden]),
                list(rest[n_hidden:]),
                g,
                bool(ctx.needs_input_grad[2]),
            )
            return g_mean_n, g_var_n, g_x_n, None, None, None, None
        means, variances = layer_views(mean, shapes), layer_views(var, shapes)
        g_mean, g_var = torch.empty_like(mean), torch.empty_like(var)
        grads_m, grads_v = layer_views(g_mean, shapes), layer_views(g_var, shapes)
        g_x = None
        for i in range(len(shapes) - 1, -1, -1):
            h, h2, half_eps_over_s = saved[3 * i : 3 * i + 3]
            g_v = g * half_eps_over_s
            # Into contiguous products, then copied (see FlatMLP.backward).
            grads_m[i][0].copy_(torch.mm(g.t(), h))
            torch.sum(g, 0, out=grads_m[i][1])
            grads_v[i][0].copy_(torch.mm(g_v.t(), h2))
            torch.sum(g_v, 0, out=grads_v[i][1])
            if i > 0 or ctx.needs_input_grad[2]:
                g_h = torch.addcmul(g @ means[i][0], g_v @ variances[i][0], h, value=2.0)
                if i > 0:
                    g = activation_grad(g_h, h, ctx.activation)
                else:
                    g_x = g_h
        return g_mean, g_var, g_x, None, None, None, None


class GradientBuffer:
    """One array like the flat weights that :class:`FlatMLP`'s backward writes their
    gradient into, step after step, while nothing else holds it.

    That gradient lives only until the draw's backward has read it, but a fresh array of
    a large network's size each step makes the C allocator hand pages back to the system
    and take them again (first-touch page faults; ``docs/performance.md``, "Memory traffic
    of the compiled step").

    :meth:`take` hands out a view of the held array, so that whoever keeps what it
    handed out (e.g. a gradient hook, or a leaf's ``.grad`` that autograd made of it)
    raises the array's reference count; the array is handed out again only when that
    count says no one else holds it, and otherwise (or where torch does not tell the
    count) a fresh array takes its place.
    """

    def __init__(self) -> None:
        self.array: Tensor | None = None

    def take(self, like: Tensor) -> Tensor:
        """An uninitialised array like ``like``, to be written whole."""
        held = self.array
        use_count = getattr(held, "_use_count", None)
        if not (
            held is not None
            and use_count is not None
            and use_count() == 1
            and held.shape == like.shape
            and held.dtype == like.dtype
            and held.device == like.device
        ):
            held = self.array = torch.empty_like(like)
        return held.view(held.shape)


def run_feature_major(net: nn.Sequential, x: Tensor) -> Tensor:
    """A replicated network's layers one by one, feature-major: ``h = W h`` with ``h`` of
    shape ``(R, features, m)``: BLAS is faster on ``(R, out, in) @ (R, in, m)`` than on
    ``(R, m, in) @ (R, in, out)`` for the narrow layers of these networks
    (``docs/performance.md``).

    Notes
    -----
    Shapes: ``x`` ``(R, m, in)`` to ``(R, m, out)``; ``net`` holds replicated
    :class:`~svbnn.nn.SpikeSlabLinear` layers and activations.
    """
    h = x.transpose(1, 2)
    for module in net:
        if isinstance(module, VariationalLayer):  # the linear layers; the rest activations
            if h.shape[0] != module.n_replicates:
                raise ValueError(
                    f"replicated network expects input (R={module.n_replicates}, m, in), "
                    f"got {tuple(x.shape)}"
                )
            w, b = module._weights()
            h = torch.bmm(w, h) if b is None else torch.baddbmm(b.unsqueeze(-1), w, h)
        else:
            h = module(h)
    return h.transpose(1, 2)


def _kl_key(model: SpikeSlabMLP) -> tuple[Any, ...]:
    # Identity and version of everything the KL depends on: a cached KL is valid only
    # while none of them changed (an optimiser step bumps the parameters' versions).
    # (The caches hold the tensors they were computed from, so an id is never reused
    # while a cache refers to it.) Read through the module dictionaries: this runs twice
    # a step, and nn.Module's attribute lookup is most of its cost on small networks.
    params = model._parameters
    mu = params["mu"]
    lam = model._buffers["log_prior_inclusion"]
    assert mu is not None and lam is not None
    return (
        mu._version,
        params["rho"]._version,  # type: ignore[union-attr]
        params["alpha"]._version,  # type: ignore[union-attr]
        id(mu),
        next(iter(model.net._modules.values())).prior_variance,
        id(lam),
        lam._version,
    )


def _counter_seed(model: SpikeSlabMLP, first: SpikeSlabLinear) -> Tensor:
    """The two seed words of one counter-based draw, from the layers' generator."""
    # On the parameters' device, where the layers' generator lives (a CUDA generator
    # cannot draw a CPU tensor), as every other draw of the layers.
    device = model.mu.device
    return torch.randint(
        -(2**31), 2**31 - 1, (2,), generator=first.generator, dtype=torch.int32, device=device
    )


def native_gumbel_step(
    model: SpikeSlabMLP,
    layers: list[SpikeSlabLinear],
    likelihood: object,
    x: Tensor,
    y: Tensor,
) -> StepLoss | None:
    """The likelihood as :class:`~svbnn._engine.native_step.NativeNegativeElbo` takes it
    (:data:`~svbnn._engine.native_step.StepLoss`) where :meth:`FusedEngine.negative_elbo`
    runs this Gumbel sampler's training step on ``x``, ``y`` as that native step: under the
    ``auto`` or ``native`` backend (or a network ``auto`` would run as one graph), a network
    the native loops run whole (:func:`~svbnn._engine.native_step.may_step`,
    :func:`~svbnn._engine.native_step.native_step_ok`), its weights drawn whole; else
    ``None``."""
    mu = model.mu
    whole = _fused_paths.use_whole_network(mu.numel(), mu.device)
    if not (whole or backend() in (Backend.AUTO, Backend.NATIVE)) or not may_step(model):
        return None
    step = step_likelihood(likelihood, model.out_features)
    if step is None or not (y.shape == target_shape(x, step[2]) and draw_ok(model, layers)):
        return None  # a likelihood the native step lacks
    return step if native_step_ok(model, layers, step, x, y) else None


class FusedEngine:
    """The fused training path of one :class:`~svbnn.nn.SpikeSlabMLP`, and its caches.

    The model holds one engine and hands itself to every call (the engine holds no
    reference to it). Each entry point returns ``None`` where its fast path does not apply;
    the model then runs its general path, which gives the same values up to rounding.
    Copies and pickles of an engine start with empty caches: a cached KL holds an autograd
    graph (neither copyable nor worth saving), and the others are recomputed on first use.
    """

    def __init__(self) -> None:
        self.kl_cache: tuple[Tensor, tuple[Any, ...]] | None = None
        self.log_lam_cache: tuple[tuple[Any, ...], Tensor, Tensor] | None = None
        self.scales_cache: tuple[tuple[Any, ...], Tensor] | None = None
        self.gradient_buffer = GradientBuffer()

    def __reduce__(self) -> tuple[type[FusedEngine], tuple[()]]:
        return FusedEngine, ()

    # -- the entry points --------------------------------------------------------------
    def forward(self, model: SpikeSlabMLP, x: Tensor) -> Tensor | None:
        """The network's sampling forward on its flat storage, ``None`` where the layers
        must run on their own (not sampling, not fused, frozen or unlike layers).

        Training (Gumbel, grad enabled), the KL is computed in the same pass as the draw
        and cached; :meth:`kl_divergence` returns it once, if the parameters are unchanged.
        Shapes as :meth:`SpikeSlabMLP.forward`.
        """
        layers = model.layers()
        if local_flat_ok(model, x, layers):
            # Local reparameterisation: the moments of all weights (and the KL, cached as
            # the Gumbel draw's is) at once, then the layers.
            mean_var = self._local_moments_kl(model, layers)
            generators = tuple(layer.generator for layer in layers)
            # The native loops where they compute the moments (_local_moments_kl).
            mode = backend()
            native = mode in (Backend.NATIVE, Backend.AUTO) and _native.local_mlp_usable(
                *mean_var, x, model.activation, any_threads=mode is Backend.NATIVE
            )
            out_local: Tensor = LocalFlatMLP.apply(
                *mean_var, x, layer_shapes(layers), model.activation, generators, native
            )
            return out_local
        if not draw_ok(model, layers):
            return None
        first = layers[0]
        self.kl_cache = None
        if whole_network_ok(model, x, layers):
            # Small network, training step: draw, KL and layers as one compiled graph.
            key = _kl_key(model)
            tensors, static = self._whole_network_inputs(model, layers, key)
            out, kl = whole_network_kernel(mlp_draw_forward, *static)(x, *tensors)
            self.kl_cache = (kl, key)
            out_whole: Tensor = out
            return out_whole
        if fused_kl_ok(layers):
            kernels = self._kernels_for(model, first)
            if not eager_fused_ok(model) and self._eager_draw(model, kernels):
                return None  # a large network on the eager kernels: layer by layer
            key = _kl_key(model)
            flat, kl = self.draw_with_kl(model, first, key, kernels)
            self.kl_cache = (kl, key)
        else:
            flat = model._draw_flat(first)
        if flat_mlp_ok(model, x, layers):
            out_flat: Tensor = FlatMLP.apply(
                flat, x, layer_shapes(layers), model.activation, self.gradient_buffer
            )
            return out_flat
        return self._run_layers(model, layers, flat, x)

    def kl_divergence(self, model: SpikeSlabMLP) -> Tensor | None:
        """The KL cached by the last training forward (once, while the parameters are
        unchanged), else one fused KL of the flat storage: ``()`` or ``(R,)``. ``None``
        where the layers must sum their own (no flat storage, unlike prior variances)."""
        cache, self.kl_cache = self.kl_cache, None
        if cache is not None and cache[1] == _kl_key(model) and torch.is_grad_enabled():
            return cache[0]
        layers = model.layers()
        if not (model.fused and "mu" in model._parameters and one_prior_variance(layers)):
            return None
        batch_dims = 0 if layers[0].n_replicates is None else 1
        return spike_slab_kl(
            model.mu,
            model.rho,
            model.alpha,
            model.log_prior_inclusion,
            layers[0].prior_variance,
            batch_dims=batch_dims,
        )

    def negative_elbo(
        self, model: SpikeSlabMLP, likelihood: object, x: Tensor, y: Tensor, n_train: float
    ) -> tuple[Tensor, Tensor, Tensor] | None:
        """One-draw :func:`svbnn.training.negative_elbo` in one piece under the ``auto``
        backend: on svbnn's native loops as one autograd node where they run the network
        whole under a Gaussian likelihood (:mod:`svbnn._engine.native_step`), else as one
        compiled graph with the likelihood where ``auto`` runs this network's training
        forward as one graph: ``(loss, nll, kl / n)``, scalars, or ``(R,)`` for R
        replicates. ``x`` ``(m, p)`` and ``y`` ``(m,)``, or ``(R, m, p)`` and ``(R, m)``.
        ``None`` where neither applies (see :meth:`SpikeSlabMLP.fused_negative_elbo`).
        """
        mu = model._parameters.get("mu")
        if mu is None:
            return None
        layers = model.layers()
        if layers and layers[0]._local_step():
            # The local sampler: one graph-free node where the native loops would run the
            # autograd step's moments and layers; else that step.
            local = step_likelihood(likelihood, model.out_features)
            if local is None or not native_local_step_ok(model, layers, local, x, y):
                return None
            self.kl_cache = None
            log_lams = self._log_lams(model, _kl_key(model))
            return native_local_negative_elbo(
                model, layers, likelihood, local, x, y, n_train, log_lams
            )
        # The native step (auto or native, a likelihood it knows), else the one-graph step
        # (auto, a small network).
        step = native_gumbel_step(model, layers, likelihood, x, y)
        if step is not None:
            # A network the native loops run whole: the step without its autograd graph.
            self.kl_cache = None
            log_lams = self._log_lams(model, _kl_key(model))
            seed = _counter_seed(model, layers[0])
            return native_negative_elbo(
                model, layers, likelihood, step, x, y, n_train, seed, log_lams
            )
        whole = _fused_paths.use_whole_network(mu.numel(), mu.device)
        if not (whole and y.shape == x.shape[:-1] and draw_ok(model, layers)):
            return None  # a large network's step, or one off the one-graph step
        spec = fast_path_spec(likelihood, model.out_features)  # a FastPath kind, or None
        if spec is None or not whole_network_ok(model, x, layers):
            return None
        kind, var = spec[0].value, spec[1]
        self.kl_cache = None
        tensors, static = self._whole_network_inputs(model, layers, _kl_key(model))
        shapes, activation, *prior = static
        kernel = whole_network_kernel(mlp_negative_elbo, shapes, activation, kind, *prior)
        elbo: tuple[Tensor, Tensor, Tensor] = kernel(x, y, *tensors, self._scales(mu, n_train, var))
        return elbo

    def draw_with_kl(
        self,
        model: SpikeSlabMLP,
        first: SpikeSlabLinear,
        key: tuple[Any, ...] | None = None,
        kernels: tuple[bool, bool] | None = None,
    ) -> tuple[Tensor, Tensor]:
        """One training draw of all weights and the exact KL, as one fused function:
        ``(theta, kl)``, flat ``(T,)`` or ``(R, T)`` and ``()`` or ``(R,)``. ``first``: the
        first layer (sampler settings, generator); ``key``: the current KL key and
        ``kernels``: :meth:`_kernels_for`'s answer, if the caller has them."""
        mu = model.mu
        compiled, native = self._kernels_for(model, first) if kernels is None else kernels
        if _fused_path(mu.numel(), mu.device) or compiled or native:
            noise: tuple[Tensor, ...] = (_counter_seed(model, first),)
        else:  # torch's generator, in the order of the unfused draw (u, then eps)
            gen = first.generator
            u = torch.rand(mu.shape, generator=gen, dtype=mu.dtype, device=mu.device)
            noise = (u, torch.randn(mu.shape, generator=gen, dtype=mu.dtype, device=mu.device))
        log_lam, log_1mlam = self._log_lams(model, _kl_key(model) if key is None else key)
        flat, kl = FusedGumbelKL.apply(
            mu,
            model.rho,
            model.alpha,
            log_lam,
            log_1mlam,
            noise,
            float(first.temperature),
            0.5 * math.log(first.prior_variance),
            compiled,
            native,
        )
        return flat, kl

    # -- helpers -----------------------------------------------------------------------
    def _local_moments_kl(
        self, model: SpikeSlabMLP, layers: list[SpikeSlabLinear]
    ) -> tuple[Tensor, Tensor]:
        """The flat means and variances of the local sampler's training forward; with one
        prior variance, computed with the KL in one pass (:class:`LocalMomentsKL`), which
        :meth:`kl_divergence` then returns."""
        self.kl_cache = None
        first = layers[0]
        if not one_prior_variance(layers):
            return spike_slab_moments(model.mu, model.rho, model.alpha)
        key = _kl_key(model)
        log_lam, log_1mlam = self._log_lams(model, key)
        mu, rho, alpha = model.mu, model.rho, model.alpha
        # The native loops where they would draw a Gumbel network's weights (_kernels_for):
        # at any thread count under the native backend, with one torch thread under auto.
        mode = backend()
        native = mode in (Backend.NATIVE, Backend.AUTO) and _native.local_moments_kl_usable(
            mu, rho, alpha, log_lam, any_threads=mode is Backend.NATIVE
        )
        mean, var, kl = LocalMomentsKL.apply(
            mu, rho, alpha, log_lam, log_1mlam, 0.5 * math.log(first.prior_variance), native
        )
        self.kl_cache = (kl, key)
        return mean, var

    @staticmethod
    def _kernels_for(model: SpikeSlabMLP, first: SpikeSlabLinear) -> tuple[bool, bool]:
        """Whether :meth:`draw_with_kl` runs inductor's kernel, and whether the native
        loops: ``(compiled, native)``."""
        mu = model.mu
        # Inductor's kernel where the kernels run compiled. The native loops draw under the
        # native backend wherever they serve, and under auto a network they run whole
        # (narrow layers) where the eager kernels would draw it: in place of inductor's
        # kernel they gain too little (docs/performance.md, "Fast paths of a training step").
        compiled = use_compiled(mu.numel(), mu.device)
        native = (backend() is Backend.NATIVE and native_draw(model, first, any_threads=True)) or (
            not compiled and native_network(model, model.layers())
        )
        return compiled, native

    @staticmethod
    def _eager_draw(model: SpikeSlabMLP, kernels: tuple[bool, bool]) -> bool:
        """Whether :meth:`draw_with_kl` would draw with torch's generator and the eager
        kernels (path 2); ``kernels``: :meth:`_kernels_for`'s answer."""
        mu = model.mu
        return not (_fused_path(mu.numel(), mu.device) or any(kernels))

    def _whole_network_inputs(
        self, model: SpikeSlabMLP, layers: list[SpikeSlabLinear], key: tuple[Any, ...]
    ) -> tuple[tuple[Tensor, ...], tuple[Any, ...]]:
        """The tensors ``(mu, rho, alpha, seed, log_lam, log_1mlam)`` and the static
        arguments ``(shapes, activation, log_sigma0, var0, tau)`` of
        :func:`~svbnn._engine.graphs.mlp_draw_forward`; draws the seed."""
        first = layers[0]
        log_lam, log_1mlam = self._log_lams(model, key)
        seed = _counter_seed(model, first)
        static = (
            layer_shapes(layers),
            model.activation,
            0.5 * math.log(first.prior_variance),
            float(first.prior_variance),
            float(first.temperature),
        )
        return (model.mu, model.rho, model.alpha, seed, log_lam, log_1mlam), static

    def _log_lams(self, model: SpikeSlabMLP, key: tuple[Any, ...]) -> tuple[Tensor, Tensor]:
        """``log(lambda)`` as ``(R, 1)`` or ``()``, and ``log(1 - lambda)``: recomputed only
        when the prior changes (``key``: the current KL key)."""
        if self.log_lam_cache is None or self.log_lam_cache[0] != key[-2:]:
            lam = model.log_prior_inclusion
            lam = lam.reshape(-1, 1) if lam.dim() > 0 else lam
            self.log_lam_cache = (key[-2:], lam, log1mexp(lam))
        return self.log_lam_cache[1], self.log_lam_cache[2]

    def _scales(self, mu: Tensor, n_train: float, var: float) -> Tensor:
        """``(1 / n_train, var)`` as a tensor like ``mu`` (an argument of the compiled
        graph, so that a new value does not compile a new one); made once per value."""
        key = (n_train, var, mu.dtype, mu.device)
        if self.scales_cache is None or self.scales_cache[0] != key:
            scales = torch.tensor([1.0 / n_train, var], dtype=mu.dtype, device=mu.device)
            self.scales_cache = (key, scales)
        return self.scales_cache[1]

    @staticmethod
    def _run_layers(
        model: SpikeSlabMLP, layers: list[SpikeSlabLinear], flat: Tensor, x: Tensor
    ) -> Tensor:
        # Hooks, replicates or layers without bias: the modules run one by one, each on
        # its chunk of the one draw.
        widths = [layer.n_params() for layer in layers]
        try:
            for layer, chunk in zip(layers, flat.split(widths, dim=-1), strict=True):
                layer._frozen = layer._weights_from_flat(chunk.view(layer._param_shape))
            out = model._run(x)
        finally:
            for layer in layers:
                layer._frozen = None
        return out
