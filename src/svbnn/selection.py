"""Posterior summaries of spike-and-slab networks: sparsity, variable selection, sparse export."""

from __future__ import annotations

import copy
import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from .nn.base import GatedLayer, is_gated_layer
from .nn.spike_slab import SpikeSlabConv2d, SpikeSlabLinear

__all__ = [
    "ExportReport",
    "SparseLinear",
    "density",
    "export_sparse",
    "feature_inclusion",
    "fpr_fnr",
    "unresolved_fraction",
    "module_size_bytes",
    "selected_features",
    "sparsity",
    "spike_slab_layers",
]


def spike_slab_layers(model: nn.Module) -> list[GatedLayer]:
    """All gated layers of ``model`` (:class:`svbnn.nn.GatedLayer`, e.g. spike-and-slab
    layers) in registration order."""
    return [m for m in model.modules() if is_gated_layer(m)]


def _phi_sums(model: nn.Module, threshold: float | None) -> Tensor:
    layers = spike_slab_layers(model)
    if not layers:
        raise ValueError("model has no spike-and-slab layers")
    total: Tensor | None = None
    count = 0
    for layer in layers:
        with torch.no_grad():
            phi = torch.sigmoid(layer.alpha)
            vals = phi if threshold is None else (phi > threshold).to(phi.dtype)
            s = vals.sum(dim=(-2, -1))
        total = s if total is None else total + s
        count += layer.n_params()
    assert total is not None
    return total / count


def sparsity(model: nn.Module) -> Tensor:
    """Posterior sparsity ``s = sum_i phi_i / T`` over all weights and biases (the paper's).

    This is a density: the expected fraction of parameters kept. Returns a scalar, or
    ``(R,)`` for a replicated model.
    """
    return _phi_sums(model, None)


def density(model: nn.Module, threshold: float = 0.5) -> Tensor:
    """Fraction of parameters with ``phi > threshold`` (the authors' code's "sparsity")."""
    return _phi_sums(model, threshold)


def selected_features(
    model: nn.Module, threshold: float = 0.5
) -> NDArray[np.int64] | list[NDArray[np.int64]]:
    """Input variables with at least one first-layer edge of ``phi > threshold``.

    Returns sorted 0-based indices; a list of such arrays for a replicated model.
    """
    layers = spike_slab_layers(model)
    if not layers or not isinstance(layers[0], SpikeSlabLinear):
        raise ValueError("variable selection needs a SpikeSlabLinear first layer")
    phi = layers[0].inclusion_probs()["weight"]  # (out, p) or (R, out, p)
    keep = (phi > threshold).any(dim=-2)
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
    layers = spike_slab_layers(model)
    if not layers:
        raise ValueError("model has no spike-and-slab layers")
    total: Tensor | None = None
    count = 0
    with torch.no_grad():
        for layer in layers:
            phi = torch.sigmoid(layer.alpha)
            s = ((phi > low) & (phi < high)).to(phi.dtype).sum(dim=(-2, -1))
            total = s if total is None else total + s
            count += layer.n_params()
    assert total is not None
    return total / count


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


class SparseLinear(nn.Module):
    """Linear layer that stores only its nonzero weights (CSR, compact index types).

    Storage per nonzero: the float value plus an int16 column index (int32 when the layer
    has more than 32767 inputs); one int32 row pointer per output. The CSR matrix used by
    ``forward`` is rebuilt once after loading.

    Shapes: input ``(..., in)``, output ``(..., out)``.
    """

    values: Tensor
    col_indices: Tensor
    crow_indices: Tensor
    bias: Tensor | None

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        w = weight.detach()
        self.in_features = int(w.shape[1])
        self.out_features = int(w.shape[0])
        with warnings.catch_warnings():
            # torch flags sparse CSR as "beta"; the conversion itself is exact.
            warnings.simplefilter("ignore", UserWarning)
            csr = w.to_sparse_csr()
        idx_dtype = torch.int16 if self.in_features <= torch.iinfo(torch.int16).max else torch.int32
        self.register_buffer("values", csr.values().clone())
        self.register_buffer("col_indices", csr.col_indices().to(idx_dtype))
        self.register_buffer("crow_indices", csr.crow_indices().to(torch.int32))
        self.register_buffer("bias", None if bias is None else bias.detach().clone())
        self._csr: Tensor | None = None

    def _matrix(self) -> Tensor:
        if self._csr is None:
            self._csr = torch.sparse_csr_tensor(
                self.crow_indices.to(torch.int64),
                self.col_indices.to(torch.int64),
                self.values,
                size=(self.out_features, self.in_features),
                check_invariants=False,  # built from a valid CSR by construction
            )
        return self._csr

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        self._csr = None
        super()._load_from_state_dict(*args, **kwargs)

    def _apply(self, fn: Any, recurse: bool = True) -> SparseLinear:
        # .to(device), .cuda(), .double() replace the buffers: the cached matrix, built
        # from the old ones, would stay on the old device or dtype.
        self._csr = None
        return super()._apply(fn, recurse)

    def nnz(self) -> int:
        """Number of stored nonzero weights (biases not counted)."""
        return int(self.values.numel())

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape
        x2 = x.reshape(-1, self.in_features)
        out = torch.sparse.mm(self._matrix(), x2.t()).t()
        if self.bias is not None:
            out = out + self.bias
        return out.reshape(*shape[:-1], self.out_features)


@dataclass
class ExportReport:
    """What :func:`export_sparse` produced."""

    n_nonzero: int
    n_total: int
    size_bytes: int

    @property
    def density(self) -> float:
        """Fraction of parameters kept."""
        return self.n_nonzero / self.n_total


def module_size_bytes(module: nn.Module) -> int:
    """Size in bytes of ``torch.save(module.state_dict())``."""
    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    return buf.getbuffer().nbytes


def _plain_conv(child: SpikeSlabConv2d, w: Tensor, b: Tensor | None, like: Tensor) -> nn.Conv2d:
    """An ``nn.Conv2d`` of ``child``'s geometry with weights ``w`` and bias ``b``."""
    conv = nn.Conv2d(
        child.in_channels,
        child.out_channels,
        child.kernel_size,
        child.stride,
        child.padding,
        child.dilation,
        child.groups,
        bias=b is not None,
    ).to(like)
    with torch.no_grad():
        conv.weight.copy_(w.reshape(child.kernel_shape))
        if b is not None and conv.bias is not None:
            conv.bias.copy_(b)
    return conv


def _plain_linear(w: Tensor, b: Tensor | None, like: Tensor) -> nn.Linear:
    """An ``nn.Linear`` with weights ``w`` ``(out, in)`` and bias ``b``."""
    lin = nn.Linear(w.shape[1], w.shape[0], bias=b is not None).to(like)
    with torch.no_grad():
        lin.weight.copy_(w)
        if b is not None and lin.bias is not None:
            lin.bias.copy_(b)
    return lin


def _export_layer(child: GatedLayer, threshold: float, storage: str) -> tuple[nn.Module, int]:
    """The median model of one spike-and-slab layer as a plain layer.

    Parameters
    ----------
    child : spike-and-slab layer
        Not replicated.
    threshold : float
        Edges with ``phi > threshold`` keep ``mu``; the others are zero.
    storage : {"sparse", "dense"}
        Linear layers as :class:`SparseLinear` or ``nn.Linear``.

    Returns
    -------
    module : nn.Module
    nnz : int
        Kept parameters (weights and biases).
    """
    if child.n_replicates is not None:
        raise ValueError("cannot export a replicated model")
    with torch.no_grad():
        keep = torch.sigmoid(child.alpha) > threshold
    w, b = child.median_weights(threshold)
    new: nn.Module
    if isinstance(child, SpikeSlabConv2d):
        new = _plain_conv(child, w, b, w)
    elif storage == "sparse":
        new = SparseLinear(w, b)
    else:
        new = _plain_linear(w, b, w)
    return new, int(keep.sum())


def export_sparse(
    model: nn.Module, threshold: float = 0.5, storage: str = "sparse"
) -> tuple[nn.Module, ExportReport]:
    """Turn a fitted model into a plain PyTorch module: the selected network.

    Every spike-and-slab layer is replaced by its median model: weights ``mu`` on edges
    with ``phi > threshold``, zero elsewhere (biases alike). Linear layers become
    :class:`SparseLinear` (``storage="sparse"``) or ``nn.Linear`` (``storage="dense"``);
    convolutions become ``nn.Conv2d`` with zeroed kernels. Replicated models cannot be
    exported (export one replicate's parameters instead).

    Returns
    -------
    module : nn.Module
        A deep copy of ``model`` with plain layers, in eval mode.
    report : ExportReport
        Nonzero and total parameter counts and the size on disk of the module.
    """
    if storage not in ("sparse", "dense"):
        raise ValueError(f"storage must be 'sparse' or 'dense', got {storage!r}")
    out = copy.deepcopy(model)
    nnz = total = 0

    def replace(parent: nn.Module) -> None:
        nonlocal nnz, total
        for name, child in parent.named_children():
            if is_gated_layer(child):
                new, kept = _export_layer(child, threshold, storage)
                nnz += kept
                total += child.n_params()
                setattr(parent, name, new)
            else:
                replace(child)

    replace(out)
    for module in out.modules():
        release = getattr(module, "_release_flat_storage", None)
        if release is not None:
            release()
    out.eval()
    for p in out.parameters():
        p.requires_grad_(False)
    return out, ExportReport(nnz, total, module_size_bytes(out))
