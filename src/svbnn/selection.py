"""Posterior summaries of spike-and-slab networks: sparsity, variable selection.

``export_sparse``, ``SparseLinear``, ``ExportReport`` and ``module_size_bytes`` live in
:mod:`svbnn.export` and are re-exported here for existing callers.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from .export import ExportReport, SparseLinear, _reaching_output, export_sparse, module_size_bytes
from .nn.base import GatedLayer, is_gated_layer
from .nn.spike_slab import SpikeSlabLinear, SpikeSlabMLP

__all__ = [
    "ExportReport",
    "SparseLinear",
    "density",
    "export_sparse",
    "feature_inclusion",
    "fpr_fnr",
    "gate_statistics",
    "module_size_bytes",
    "selected_features",
    "sparsity",
    "spike_slab_layers",
    "unresolved_fraction",
]


def spike_slab_layers(model: nn.Module) -> list[GatedLayer]:
    """All gated layers of ``model`` (:class:`svbnn.nn.GatedLayer`, e.g. spike-and-slab
    layers) in registration order."""
    return [m for m in model.modules() if is_gated_layer(m)]


def gate_statistics(
    model: nn.Module, threshold: float | None = None, low: float = 0.1, high: float = 0.9
) -> tuple[Tensor, Tensor]:
    """In one pass over the gates of all weights and biases (``T`` of them): the mean of
    ``phi`` (or of ``1[phi > threshold]``) and the fraction with ``low < phi < high``.

    Each is a scalar, or ``(R,)`` for a replicated model. :func:`sparsity`,
    :func:`density` and :func:`unresolved_fraction` are its parts; training records both
    of the first every epoch.
    """
    # A fused SpikeSlabMLP's layers hold views of one flat (T,) or (R, T) gate parameter:
    # one pass over it, a few operations whatever the depth (training records this every
    # epoch, and on a small table an epoch is one short step). The fraction is the same
    # count as layer by layer; the mean can differ from the layers' sums in the last bits.
    parts: list[tuple[Tensor, tuple[int, ...]]]
    if isinstance(model, SpikeSlabMLP) and model.fused:
        parts, count = [(model.alpha, (-1,))], model.alpha.shape[-1]
    else:
        layers = spike_slab_layers(model)
        if not layers:
            raise ValueError("model has no spike-and-slab layers")
        parts = [(layer.alpha, (-2, -1)) for layer in layers]
        count = sum(layer.n_params() for layer in layers)
    with torch.no_grad():
        sums = [_gate_sums(alpha, dims, threshold, low, high) for alpha, dims in parts]
        total, opened = sums[0]
        for s, u in sums[1:]:
            total, opened = total + s, opened + u
    return total / count, opened / count


def _gate_sums(
    alpha: Tensor, dims: tuple[int, ...], threshold: float | None, low: float, high: float
) -> tuple[Tensor, Tensor]:
    """Over ``dims`` of the gates' logits ``alpha``: the sum of ``phi`` (or of
    ``1[phi > threshold]``) and the number with ``low < phi < high``."""
    phi = torch.sigmoid(alpha)
    vals = phi if threshold is None else (phi > threshold).to(phi.dtype)
    opened = ((phi > low) & (phi < high)).to(phi.dtype)
    return vals.sum(dim=dims), opened.sum(dim=dims)


def sparsity(model: nn.Module) -> Tensor:
    """Posterior sparsity ``s = sum_i phi_i / T`` over all weights and biases (the paper's).

    This is a density: the expected fraction of parameters kept. Returns a scalar, or
    ``(R,)`` for a replicated model.
    """
    return gate_statistics(model)[0]


def density(model: nn.Module, threshold: float = 0.5) -> Tensor:
    """Fraction of parameters with ``phi > threshold`` (the authors' code's "sparsity")."""
    return gate_statistics(model, threshold)[0]


def selected_features(
    model: nn.Module, threshold: float = 0.5, reach: bool = False
) -> NDArray[np.int64] | list[NDArray[np.int64]]:
    """Input variables with at least one first-layer edge of ``phi > threshold``.

    With ``reach``, only an edge on a path of such edges to some output counts: the inputs
    of the median model (the network :func:`svbnn.export.export_sparse` returns at
    ``threshold``), the median probability model of Barbieri & Berger (2004) taken edge by
    edge. A gate the data did not move stays near the prior inclusion ``lambda``, far
    below 0.5, so such gates select nothing however many of them an input has (in
    :func:`feature_inclusion` many of them add up).

    Parameters
    ----------
    model : nn.Module
        A network whose first gated layer is a :class:`SpikeSlabLinear` (with ``reach``,
        a network of them, input to output).
    threshold : float
        The edge's inclusion probability above which it is kept.
    reach : bool
        Count only the edges on a path of kept edges to some output.

    Returns
    -------
    ndarray of int64 or list of them
        Sorted 0-based indices; a list of such arrays for a replicated model.
    """
    layers = spike_slab_layers(model)
    if not layers or not isinstance(layers[0], SpikeSlabLinear):
        raise ValueError("variable selection needs a SpikeSlabLinear first layer")
    if reach and not all(isinstance(layer, SpikeSlabLinear) for layer in layers):
        raise ValueError("selection by reach needs a network of SpikeSlabLinear layers")
    with torch.no_grad():
        kept = [m.inclusion_probs()["weight"] > threshold for m in layers[: None if reach else 1]]
    if not reach:
        keep = kept[0].any(dim=-2)  # (p,) or (R, p)
    elif kept[0].dim() == 2:
        keep = _reaching_output(kept)[0]
    else:  # one network a replicate: (R, out, in) masks
        keep = torch.stack([_reaching_output(list(masks))[0] for masks in zip(*kept, strict=True)])
    if keep.dim() == 1:
        return np.flatnonzero(keep.cpu().numpy())
    return [np.flatnonzero(k) for k in keep.cpu().numpy()]


def feature_inclusion(model: nn.Module) -> NDArray[np.float64]:
    """Per input, the posterior probability that it reaches the output through the gates.

    With independent gates ``z ~ Bernoulli(phi)`` (the mean-field posterior), let
    ``r_l(j)`` be the probability that unit ``j`` of hidden layer ``l`` has a path of
    included edges to some output. For the last hidden layer
    ``r_L(j) = 1 - prod_o (1 - phi[o, j])`` and, going back,
    ``r_l(j) = 1 - prod_k (1 - phi_{l+1}[k, j] r_{l+1}(k))``; input ``i`` gets
    ``1 - prod_j (1 - phi_1[j, i] r_1(j))``. Exact for one hidden layer; with more, the
    paths through a shared unit are not independent and this is the standard
    approximation of the path-reachability probability (biases are ignored: they carry
    no input). Unlike "some first-layer edge has ``phi > 0.5``", many edges of middling
    ``phi`` add up, and an edge into a unit that reaches nothing counts for nothing.

    Parameters
    ----------
    model : nn.Module
        A network of :class:`SpikeSlabLinear` layers (input to output, not replicated),
        e.g. :class:`~svbnn.nn.SpikeSlabMLP`.

    Returns
    -------
    ndarray of float64, shape (p,)
    """
    layers = spike_slab_layers(model)
    if not layers or not all(isinstance(layer, SpikeSlabLinear) for layer in layers):
        raise ValueError("feature inclusion needs a network of SpikeSlabLinear layers")
    if any(layer.n_replicates is not None for layer in layers):
        raise ValueError("feature inclusion of a replicated model: use one replicate")
    with torch.no_grad():
        phis = [layer.inclusion_probs()["weight"].double().cpu() for layer in layers]
        reach = torch.ones(phis[-1].shape[0], dtype=torch.float64)  # outputs reach themselves
        for phi in reversed(phis):  # phi: (out, in); reach: (out,) -> (in,)
            # log1p(-x) keeps products of many probabilities close to 1 accurate.
            reach = -torch.expm1(torch.log1p(-(phi * reach[:, None]).clamp(max=1.0)).sum(0))
    return reach.numpy()


def unresolved_fraction(model: nn.Module, low: float = 0.1, high: float = 0.9) -> Tensor:
    """Fraction of all gates with ``low < phi < high`` (scalar, or ``(R,)`` replicated)."""
    return gate_statistics(model, None, low, high)[1]


def fpr_fnr(
    selected: Sequence[int] | NDArray[np.int64],
    relevant: Sequence[int] | NDArray[np.int64],
    n_features: int,
) -> tuple[float, float]:
    """False positive and false negative rates of a variable selection.

    FPR = selected irrelevant / irrelevant; FNR = missed relevant / relevant (0 when the
    denominator is 0).
    """
    sel = set(int(i) for i in selected)
    rel = set(int(i) for i in relevant)
    if any(i < 0 or i >= n_features for i in sel | rel):
        raise ValueError("indices out of range")
    n_irrelevant = n_features - len(rel)
    fp = len(sel - rel)
    fn = len(rel - sel)
    fpr = fp / n_irrelevant if n_irrelevant else 0.0
    fnr = fn / len(rel) if rel else 0.0
    return fpr, fnr
