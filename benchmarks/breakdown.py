"""Where the time goes: the SVBNN step timed piece by piece, and profiles of missed targets."""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Callable

import torch
from torch import Tensor, nn

from svbnn._engine import native as _native
from svbnn._engine.graphs import layer_views
from svbnn.nn.spike_slab import SpikeSlabMLP
from svbnn.training import make_optimizer, replicate_orders

from .measure import build_replicate_training
from .networks import (
    N_REPLICATES,
    SVBNN,
    NetSpec,
    build_step,
    dense_model,
    plain_loss,
    synthetic_batch,
)
from .results import Report
from .timing import Timing, per_step, profile_step, time_interleaved


def profile_misses(report: Report, nets: dict[str, NetSpec], args: argparse.Namespace) -> None:
    """torch.profiler tables of the SVBNN step behind every missed timing target."""
    missed = sorted({t.profile for t in report.targets if t.passed is False and t.profile})
    for key in missed:
        if key.startswith("rep"):
            # train() for one epoch a call: what the batched run really does per step.
            step, per_call = build_replicate_training(nets["sim2"], int(key[3:]), True, 1, seed=5)
            label = f"SVBNN training, {N_REPLICATES} batched Simulation II replications"
            n_calls = 3
        else:
            step, _ = build_step(nets[key], SVBNN, seed=5)
            label = f"SVBNN training step, {nets[key].label}"
            per_call, n_calls = 1, 10 if nets[key].kind != "mlp" or key == "mnist" else 200
        n_steps = n_calls * per_call
        report.profiles[label] = (
            f"{n_steps} steps; divide times by {n_steps} for per-step values\n"
            + profile_step(step, n_calls)
        )


def _forward_traffic(mu: Tensor, rho: Tensor, alpha: Tensor) -> tuple[Tensor, Tensor]:
    """The least a draw + KL forward reads and writes: 3 arrays in, the weights and a sum out."""
    theta = mu + rho + alpha
    return theta, theta.sum(-1)


def _backward_traffic(*arrays: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The least its backward reads and writes: the incoming gradient and the 3 parameter
    arrays in, 3 gradients out."""
    g, mu, rho, alpha = arrays
    return g + mu, g + rho, g + alpha


def _draw_pieces(
    model: SpikeSlabMLP, gen: torch.Generator
) -> tuple[Callable[[], None], Callable[[], None]]:
    """The weight-draw pieces of the step: the eager kernels' noise (``rand`` + ``randn``),
    and the draw of all weights with the exact KL, forward + backward (one fused function).
    """
    layers = model.layers()

    def draws() -> None:
        torch.rand(model.mu.shape, generator=gen)
        torch.randn(model.mu.shape, generator=gen)

    ones = torch.ones_like(model.mu)

    def draw_kl() -> None:
        model.zero_grad(set_to_none=True)
        theta, kl = model._fused.draw_with_kl(model, layers[0])
        torch.autograd.backward([theta, kl], [ones, torch.ones_like(kl)])

    return draws, draw_kl


def _network_pieces(
    net: NetSpec, model: SpikeSlabMLP, dense: nn.Module, x: Tensor, y: Tensor
) -> tuple[Callable[[], None], Callable[[], None]]:
    """The network pieces of the step: forward + backward on a copy of the current flat
    weights ``mu``, and the same network with plain ``nn.Linear`` weights (``dense``)."""
    from svbnn._engine.fused import FlatMLP

    shapes = tuple((layer.out_features, layer.fan_in) for layer in model.layers())
    theta = (model.mu.detach() * 1.0).requires_grad_()

    def flat_net() -> None:
        theta.grad = None
        out = FlatMLP.apply(theta, x, shapes, model.activation)
        plain_loss(net, out, y).backward()

    def matmuls() -> None:
        dense.zero_grad(set_to_none=True)
        out = dense(x)
        plain_loss(net, out, y).backward()

    return flat_net, matmuls


def phase_breakdown(net: NetSpec, args: argparse.Namespace) -> dict[str, Timing]:
    """Where an SVBNN training step spends its time, piece by piece (DESIGN section 6).

    Pieces of the step ``SpikeSlabMLP`` runs, each timed on its own (interleaved): the
    noise (``rand`` + ``randn``; the compiled kernel hashes its noise inside instead); the
    draw of all weights with the exact KL, forward + backward, as the one fused function the
    step uses, and the memory floor of any such function (the arrays it must read and
    write, no arithmetic); the network forward + backward on those flat weights; the same
    network with plain ``nn.Linear`` weights (a dense step without its optimiser); the Adam
    step over the variational parameters; the full step.
    """
    step, model = build_step(net, SVBNN, seed=6)
    step()  # creates the gradients and the Adam state
    assert isinstance(model, SpikeSlabMLP)
    gen = torch.Generator().manual_seed(7)
    dense = dense_model(net)
    x, y = synthetic_batch(net, gen)

    draws, draw_kl = _draw_pieces(model, gen)
    flat_net, matmuls = _network_pieces(net, model, dense, x, y)

    # A separate Adam over the same parameters: it always finds gradients, because
    # ``draw_kl`` (run before it in every round) leaves them in place.
    adam_opt = make_optimizer(model.parameters(), "adam", net.lr)
    adam_opt.step()

    memory_floor = _memory_floor(model, gen)

    fns = {
        "rand + randn noise (eager kernels only)": draws,
        "draw + exact KL, fwd + bwd (one fused function)": draw_kl,
        "memory floor of that function (3 arrays in, 1 out; 4 in, 3 out)": memory_floor,
        "network fwd + bwd on the flat weights": flat_net,
        "same network, plain nn.Linear weights (dense, no optimiser)": matmuls,
        "Adam step (3 x T parameters)": adam_opt.step,
        "full SVBNN step": step,
    }
    return time_interleaved(fns, args.repeats, args.min_block_ms / 1e3, args.warmup)


def _memory_floor(model: SpikeSlabMLP, gen: torch.Generator) -> Callable[[], object]:
    """What any draw + KL function must move, as compiled loops with no real arithmetic."""
    # Compiled loops that read and write only what any draw + KL function must (forward:
    # mu, rho, alpha in, the weights out; backward: the weights' gradient and the
    # parameters in, their 3 gradients out), with one addition per output instead of the
    # noise and the transcendentals. The fused kernels move more than this: they save 5
    # factors for the backward instead of recomputing the noise and transcendentals.
    params = (model.mu.detach(), model.rho.detach(), model.alpha.detach())
    grad_theta = torch.randn(model.mu.shape, generator=gen)
    fwd_floor = torch.compile(_forward_traffic, dynamic=False)
    bwd_floor = torch.compile(_backward_traffic, dynamic=False)
    return lambda: (fwd_floor(*params), bwd_floor(grad_theta, *params))


def replicate_breakdown(net: NetSpec, args: argparse.Namespace) -> dict[str, Timing]:
    """Pieces of the batched Simulation II step (R replicates), timed on their own: the
    minibatch gather (R x m x p floats from R data sets, which together exceed the cache;
    each call other rows, as in training) and the first layer's two products on a gathered
    minibatch (forward ``b + W X^T``, backward ``G X``; the feature-major layout the
    replicated network runs), each by torch (``index_select``, MKL's ``baddbmm`` and ``bmm``)
    and by svbnn's native loops (what training runs where they are compiled), and the full
    step (``train``, one epoch a call)."""
    R, n, m, p = N_REPLICATES, net.n_train, net.batch, net.in_features
    h = net.hidden[0]
    gen = torch.Generator().manual_seed(8)
    X = torch.randn(R * n, p, generator=gen)
    order = replicate_orders(R, n, gen) + n * torch.arange(R).unsqueeze(1)
    batches = [order[:, i : i + m].reshape(-1) for i in range(0, n - m + 1, m)]
    buffer = torch.empty(R * m, p)
    xb = X.index_select(0, batches[0]).view(R, m, p)
    # The drawn weights of the first layer as the network lays them out: layer 0 of flat
    # rows, weights and a bias per output.
    theta = torch.randn(R, h * (p + 1), generator=gen)
    grad = torch.empty_like(theta)
    w, b = layer_views(theta, ((h, p),))[0]
    g_w, g_b = layer_views(grad, ((h, p),))[0]
    g = torch.randn(R, h, m, generator=gen)
    step, steps = build_replicate_training(net, R, True, 1, seed=9)
    rows = itertools.cycle(batches)

    def first_layer_torch() -> None:
        torch.baddbmm(b, w, xb.transpose(1, 2))
        g_w.copy_(torch.bmm(g, xb))
        torch.sum(g, -1, keepdim=True, out=g_b)

    one_layer = ((h, p),)

    def first_layer_native() -> None:
        # the narrow network's loops on the first layer alone
        hs, _ = _native.narrow_mlp_forward(theta, xb, one_layer, "identity")
        _native.narrow_mlp_backward(theta, hs, g, one_layer, "identity", grad)

    gather = f"minibatch gather ({R} x {m} x {p} floats)"
    layer = "first layer: forward + weight-gradient products"
    fns: dict[str, Callable[[], object]] = {
        f"{gather}, torch": lambda: torch.index_select(X, 0, next(rows), out=buffer),
        f"{layer}, torch": first_layer_torch,
    }
    if _native.gather_usable(X, batches[0], buffer) and _native.narrow_mlp_usable(
        theta, xb, one_layer, "identity"
    ):
        fns[f"{gather}, native"] = lambda: _native.gather_rows(X, next(rows), buffer)
        fns[f"{layer}, native"] = first_layer_native
    fns["full batched step"] = step
    t = time_interleaved(fns, args.repeats, args.min_block_ms / 1e3, args.warmup)
    t["full batched step"] = per_step(t["full batched step"], steps)
    return t
