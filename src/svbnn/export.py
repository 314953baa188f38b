"""Export of a fitted spike-and-slab network: the median model as a plain PyTorch module.

Three exports:

* :func:`export_compact` (the deployment export): the median model of a
  :class:`~svbnn.nn.SpikeSlabMLP` (or a convolutional ``nn.Sequential``) with every unit
  that cannot change the output removed and what the removed units contribute folded into
  the next layer's bias. The result holds only ``torch.nn`` modules and plain tensor ops:
  one flat :class:`CompactMLP` whose layers are each stored dense or sparse (an
  ``F.embedding_bag`` sum per unit), whichever runs faster at its density and the batch
  size (see :func:`sparse_is_faster`); or, on request, the layered form of ``nn.Linear``
  and :class:`SparseLinear` (a CSR matrix product) modules. :func:`to_dense` makes every
  layer dense for ONNX (:func:`export_onnx`).
* :func:`export_draws`: posterior weight draws batched as one module (the posterior mean
  ``predict`` computes; the estimators' ``export_predictive``).
* :func:`export_sparse`: every spike-and-slab layer of any model replaced by its median
  model in place, at the original sizes (zeroed weights kept in the shapes).
"""

import copy
import io
import os
import warnings
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .checkpoint import atomic_write_bytes
from .nn.base import GatedLayer, activation_module, is_gated_layer
from .nn.spike_slab import (
    SpikeSlabConv2d,
    SpikeSlabLinear,
    SpikeSlabMLP,
    _SpikeSlabLayer,
    spike_slab_moments,
)

__all__ = [
    "MOMENT_MIN_INCLUSION",
    "SPARSE_DENSITY_BELOW",
    "SPARSE_COST_ONE_ROW",
    "SPARSE_DENSITY_BELOW_ONE_ROW",
    "SPARSE_DENSITY_BELOW_SMALL",
    "SPARSE_FIXED_COST_ONE_ROW",
    "SPARSE_MIN_WEIGHTS",
    "SPARSE_MIN_WEIGHTS_SMALL",
    "CompactMLP",
    "DrawLinear",
    "ExpOutput",
    "ExpandDraws",
    "ExportReport",
    "InputSelect",
    "LogNormalRate",
    "MeanDraws",
    "MomentLinear",
    "NormalMoments",
    "NormalPredictive",
    "OutputAffine",
    "PlusLinearMean",
    "ReLUMoments",
    "SoftmaxOfNormal",
    "SparseLinear",
    "export_compact",
    "export_draws",
    "export_moments",
    "export_onnx",
    "export_sparse",
    "module_size_bytes",
    "sparse_is_faster",
    "to_dense",
]

SPARSE_DENSITY_BELOW = 0.20
"""At batches of 16 rows and more, a linear layer is stored sparse when its density (kept
weights / ``out * in``) is below this value and it has at least
:data:`SPARSE_MIN_WEIGHTS` weights (see :func:`sparse_is_faster`)."""

SPARSE_MIN_WEIGHTS = 16384
"""Smallest ``out * in`` stored sparse at batches of 16 rows and more (128 x 128)."""

SPARSE_DENSITY_BELOW_SMALL = 0.05
"""At batches of 2 to 15 rows: the density below which a layer of at least
:data:`SPARSE_MIN_WEIGHTS_SMALL` weights is stored sparse."""

SPARSE_MIN_WEIGHTS_SMALL = 262144
"""Smallest ``out * in`` stored sparse at batches of 2 to 15 rows (512 x 512)."""

SPARSE_DENSITY_BELOW_ONE_ROW = 0.25
"""At batch 1: the density at or above which a layer is always stored dense."""

SPARSE_COST_ONE_ROW = 3
"""At batch 1: a nonzero of a sparse matrix-vector product costs about as much time as this
many weights of the dense one."""

SPARSE_FIXED_COST_ONE_ROW = 50_000
"""At batch 1: the fixed cost of a sparse matrix-vector product, in dense weights."""


def sparse_is_faster(
    n_nonzero: int, out_features: int, in_features: int, batch_size: int = 64
) -> bool:
    """The storage rule of :func:`export_compact`: which layers of a :class:`CompactMLP`
    are stored sparse.

    With ``size = out * in`` and ``density = n_nonzero / size``:

    * at ``batch_size >= 16`` a layer is stored sparse when ``density < 20%`` and
      ``size >= 16384`` (128 x 128);
    * at 2 to 15 rows when ``density < 5%`` and ``size >= 262144`` (512 x 512);
    * at batch 1 (a matrix-vector product) when ``3 * n_nonzero + 50000 < size`` and
      ``density < 25%``: a sparse product costs about 3 dense weights per nonzero plus a
      fixed 50,000.

    Dense otherwise.

    The rule follows the crossover measured with one thread (a sparse layer of
    :class:`CompactMLP` against the dense one, each in the layout the export uses at that
    batch size; ``python -m benchmarks.export_latency --crossover``,
    ``docs/performance.md``, "Exported networks: dense or sparse layers"): on layers
    from 128 x 128 up the sparse sum (``F.embedding_bag``) is faster up to 20-40% density
    at batch 1000, beyond 40% at batch 64, up to 10-20% (128 x 128) or 20-40% (larger) at
    batch 16; at 4 and 8 rows only from 512 x 512, up to 5-10% there and 20-25% on
    1024 x 1024. At batch 1 the sparse CSR matrix-vector product (``torch.addmv``) is faster
    from 256 x 256 up: up to 5-10% density there and 20-30% from 512 x 512.
    """
    size = out_features * in_features
    if batch_size == 1:
        return (
            SPARSE_COST_ONE_ROW * n_nonzero + SPARSE_FIXED_COST_ONE_ROW < size
            and n_nonzero < SPARSE_DENSITY_BELOW_ONE_ROW * size
        )
    if batch_size < 16:
        return size >= SPARSE_MIN_WEIGHTS_SMALL and n_nonzero < SPARSE_DENSITY_BELOW_SMALL * size
    return size >= SPARSE_MIN_WEIGHTS and n_nonzero < SPARSE_DENSITY_BELOW * size


def _csr_matrix(offsets: Tensor, columns: Tensor, values: Tensor, shape: tuple[int, int]) -> Tensor:
    """The sparse CSR matrix ``(out, in)`` of CSR arrays, with int32 indices (the index type
    torch's CPU sparse products run fastest on)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch flags sparse CSR as "beta"
        return torch.sparse_csr_tensor(
            offsets.to(torch.int32),
            columns.to(torch.int32),
            values,
            size=shape,
            check_invariants=False,  # built from a valid CSR by construction
        )


class _CSRModule(nn.Module):
    """A module holding sparse CSR matrices as non-persistent buffers (so that they follow
    ``.to()``), rebuilt from its persistent CSR arrays on loading and on copying (a CSR
    tensor has no storage ``copy.deepcopy`` can copy). Subclasses name the matrices in
    :meth:`_csr_matrices`."""

    def _csr_matrices(self) -> dict[str, Tensor]:
        raise NotImplementedError

    def _rebuild_csr(self) -> None:
        for name, matrix in self._csr_matrices().items():
            self.register_buffer(name, matrix, persistent=False)

    def _load_from_state_dict(self, *args: Any, **kwargs: Any) -> None:
        super()._load_from_state_dict(*args, **kwargs)
        self._rebuild_csr()

    def __deepcopy__(self, memo: dict[int, Any]) -> "_CSRModule":
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        skip = {k for k, v in self._buffers.items() if v is not None and v.is_sparse_csr}
        state = {k: v for k, v in self.__dict__.items() if k != "_buffers"}
        new.__dict__.update(copy.deepcopy(state, memo))
        buffers = {k: v for k, v in self._buffers.items() if k not in skip}
        new.__dict__["_buffers"] = copy.deepcopy(buffers, memo)
        new._rebuild_csr()
        return new


class SparseLinear(_CSRModule):
    """Linear layer that stores only its nonzero weights (CSR, compact index types).

    Storage per nonzero in the state dict: the float value plus an int16 column index
    (int32 when the layer has more than 32767 inputs); one int32 row pointer per output.
    The CSR matrix of ``forward`` (``weight``, a non-persistent buffer, so it follows
    ``.to()``) is rebuilt from them on loading. ``forward`` is one
    ``torch.addmm(bias, W, x^T)`` and can be scripted (``torch.jit.script``); for
    ``torch.export`` and ONNX convert it with :func:`to_dense`.

    Shapes: input ``(..., in)``, output ``(..., out)``.
    """

    values: Tensor
    col_indices: Tensor
    crow_indices: Tensor
    bias: Tensor
    weight: Tensor

    def __init__(self, weight: Tensor, bias: Tensor | None) -> None:
        super().__init__()
        w = weight.detach()
        self.in_features = int(w.shape[1])
        self.out_features = int(w.shape[0])
        self.has_bias = bias is not None
        with warnings.catch_warnings():
            # torch flags sparse CSR as "beta"; the conversion itself is exact.
            warnings.simplefilter("ignore", UserWarning)
            csr = w.to_sparse_csr()
        idx_dtype = torch.int16 if self.in_features <= torch.iinfo(torch.int16).max else torch.int32
        self.register_buffer("values", csr.values().clone())
        self.register_buffer("col_indices", csr.col_indices().to(idx_dtype))
        self.register_buffer("crow_indices", csr.crow_indices().to(torch.int32))
        b = torch.zeros(self.out_features, dtype=w.dtype, device=w.device)
        self.register_buffer("bias", b if bias is None else bias.detach().clone())
        self._rebuild_csr()

    def _csr_matrices(self) -> dict[str, Tensor]:
        shape = (self.out_features, self.in_features)
        return {"weight": _csr_matrix(self.crow_indices, self.col_indices, self.values, shape)}

    def nnz(self) -> int:
        """Number of stored nonzero weights (biases not counted)."""
        return int(self.values.numel())

    def dense_weight(self) -> Tensor:
        """The weight matrix, ``(out, in)``, zeros included."""
        return self.weight.to_dense()

    def forward(self, x: Tensor) -> Tensor:
        x2 = x.reshape(-1, self.in_features)
        # (out, in) @ (in, m): the output comes back transposed, the next layer's x.t()
        # is then contiguous again.
        out = torch.addmm(self.bias.unsqueeze(1), self.weight, x2.t()).t()
        return out.reshape(x.shape[:-1] + (self.out_features,))


class InputSelect(nn.Module):
    """The kept input columns, cast to the network's dtype: ``x[..., index]``.

    Shapes: ``(..., p) -> (..., len(index))``; any floating dtype in, ``like``'s out.
    """

    index: Tensor
    like: Tensor

    def __init__(self, index: Tensor, n_features: int, like: Tensor) -> None:
        super().__init__()
        self.n_features = int(n_features)
        self.register_buffer("index", index.to(torch.int64))
        self.register_buffer("like", torch.empty(0, dtype=like.dtype, device=like.device))

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.n_features:
            raise ValueError(
                f"x has {x.shape[-1]} columns; the network was fitted on {self.n_features}"
            )
        return x.index_select(-1, self.index).to(self.like)

    def extra_repr(self) -> str:
        return f"{self.index.numel()} of {self.n_features} inputs"


class OutputAffine(nn.Module):
    """``out[..., 0] * scale + shift``: a one-output network in the units of ``y``.

    Shapes: ``(..., 1) -> (...)``.
    """

    def __init__(self, scale: float, shift: float) -> None:
        super().__init__()
        self.scale = float(scale)
        self.shift = float(shift)

    def forward(self, x: Tensor) -> Tensor:
        return x[..., 0] * self.scale + self.shift

    def extra_repr(self) -> str:
        return f"scale={self.scale:g}, shift={self.shift:g}"


class PlusLinearMean(nn.Module):
    """``body(x)`` plus a linear function of ``x``'s columns: a network fitted to the
    residuals of a linear mean, and that mean (``SVBNNRegressor(mean_function=...)``).

    ``m(x) = intercept + x[:, index] @ coef``, cast to ``coef``'s dtype. Three forms, by
    what ``body`` returns for ``x`` ``(n, p)``:

    * ``coef`` ``(k,)``, no ``cov``: ``body(x)`` ``(n, 1)`` plus ``m(x)``;
    * ``coef`` ``(K, k)``, ``K`` coefficient draws: ``body(x)`` ``(K, n, 1)`` (``K``
      draws) plus each draw's ``m(x)``;
    * ``coef`` ``(k,)`` and ``cov`` ``(k, k)``, the coefficients' posterior covariance:
      ``body(x)`` ``(2, n, 1)`` (means, variances) plus ``m(x)`` and its variance
      ``x[:, index] cov x[:, index]^T`` (the two independent).
    """

    index: Tensor
    coef: Tensor
    cov: Tensor | None

    def __init__(
        self, body: nn.Module, index: Tensor, coef: Tensor, intercept: float, cov: Tensor | None
    ) -> None:
        super().__init__()
        if cov is not None and coef.ndim != 1:
            raise ValueError("cov goes with one coefficient vector (k,), not draws")
        self.body = body
        self.intercept = float(intercept)
        self.register_buffer("index", index.to(torch.int64))
        self.register_buffer("coef", coef.detach().clone())
        self.register_buffer("cov", None if cov is None else cov.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        out = self.body(x)
        xs = x.index_select(-1, self.index).to(self.coef)
        if self.coef.ndim == 2:  # (K, n, 1): one draw of the coefficients per draw
            return out + ((self.coef @ xs.T).unsqueeze(-1) + self.intercept).to(out)
        mean = (xs @ self.coef + self.intercept).unsqueeze(-1)
        if self.cov is None:
            return out + mean.to(out)
        var = ((xs @ self.cov) * xs).sum(-1).unsqueeze(-1)
        return out + torch.stack([mean, var]).to(out)

    def extra_repr(self) -> str:
        form = "draws" if self.coef.ndim == 2 else "moments" if self.cov is not None else "point"
        return f"{self.index.numel()} inputs, {form}, intercept={self.intercept:g}"


_ACTIVATION_NAMES: dict[type[nn.Module], str] = {
    nn.ReLU: "relu",
    nn.Tanh: "tanh",
    nn.Sigmoid: "sigmoid",
    nn.Identity: "identity",
}


_INPLACE_ACTIVATIONS: dict[str, Any] = {
    "relu": torch.relu_,
    "tanh": torch.tanh_,
    "sigmoid": torch.sigmoid_,
    "identity": None,
}


class CompactMLP(_CSRModule):
    """A compacted MLP as one flat module: kept inputs, then linear layers, no submodules.

    ``forward`` is a straight sequence of tensor ops (no module call per layer): the kept
    input columns, then per layer a dense product or, for a layer stored sparse, a sparse
    one, the bias and the activation. Two layouts:

    * ``"rows"``: activations ``(m, n)``. One row: matrix-vector products,
      ``torch.addmv`` of the layer's dense matrix or, for a sparse layer, of its sparse CSR
      matrix. Several rows: ``F.linear``, and for a sparse layer the
      ``F.embedding_bag`` sum of the ``"features"`` layout on the transposed activations.
    * ``"features"``: activations transposed, ``(n, m)``, one unit per row, so that a
      sparse layer is one ``F.embedding_bag`` (per unit, the sum of whole rows of ``m``
      values of its kept inputs times their weights: a CSR product) and a dense one is
      ``torch.addmm(bias, W, h)``; the inputs are gathered transposed first.

    :func:`export_compact` chooses both by the batch size (:func:`sparse_is_faster`).
    State: the kept input columns ``index``; per layer ``k`` either ``weight{k}``
    ``(out, in)`` (dense) or the CSR arrays of its weights, ``values{k}``,
    ``columns{k}`` (int32) and ``offsets{k}`` (int32, ``out + 1`` entries) (sparse), and
    ``bias{k}`` ``(out,)``; in the ``"rows"`` layout also ``csr{k}``, the sparse CSR
    matrix over those arrays (not saved: rebuilt on loading and copying).
    ``torch.export`` accepts it at any batch size;
    :meth:`to_dense` (or :func:`to_dense`) gives the all-dense ``"rows"`` form that
    :func:`export_onnx` writes. ``torch.jit.script`` does not (use the layered form,
    ``storage="dense"`` or ``"sparse"``, for that).

    Shapes: ``(..., n_features) -> (..., out)``; any floating dtype in, the weights' out.

    Parameters
    ----------
    index : Tensor of int
        The kept input columns, ``(k,)``.
    n_features : int
        Columns of ``x``.
    weights, biases : lists of Tensor
        Each layer's ``(out, in)`` weights (the first has ``in = k``) and ``(out,)``
        biases.
    storage : list of {"dense", "sparse"}
        Each layer's storage.
    activation : {"relu", "tanh", "sigmoid", "identity"}
        Between the layers.
    layout : {"rows", "features"}
        The activations' layout.
    """

    index: Tensor

    def __init__(
        self,
        index: Tensor,
        n_features: int,
        weights: list[Tensor],
        biases: list[Tensor],
        storage: list[str],
        activation: str,
        layout: str,
    ) -> None:
        super().__init__()
        if layout not in ("rows", "features"):
            raise ValueError(f"layout must be 'rows' or 'features', got {layout!r}")
        if activation not in _INPLACE_ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(_INPLACE_ACTIVATIONS)}, got {activation!r}"
            )
        self.n_features = int(n_features)
        self.in_features = int(weights[0].shape[1])
        self.out_features = int(weights[-1].shape[0])
        self.n_layers = len(weights)
        self.storage = list(storage)
        self.activation = activation
        self.layout = layout
        self.register_buffer("index", index.detach().to(torch.int64).clone())
        for k, (w, b, kind) in enumerate(zip(weights, biases, storage, strict=True)):
            w = w.detach()
            if kind == "sparse":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)  # sparse CSR is "beta"
                    csr = w.to_sparse_csr()
                self.register_buffer(f"values{k}", csr.values().clone())
                self.register_buffer(f"columns{k}", csr.col_indices().to(torch.int32))
                self.register_buffer(f"offsets{k}", csr.crow_indices().to(torch.int32))
            elif kind == "dense":
                self.register_buffer(f"weight{k}", w.clone().contiguous())
            else:
                raise ValueError(f"storage must be 'dense' or 'sparse', got {kind!r}")
            self.register_buffer(f"bias{k}", b.detach().clone())
        self._rebuild_csr()
        self.plan = self._plan()

    def _csr_matrices(self) -> dict[str, Tensor]:
        """The ``"rows"`` layout's sparse layers as CSR matrices, ``csr{k}``."""
        if self.layout != "rows":
            return {}
        buf = self._buffers
        out: dict[str, Tensor] = {}
        n_in = self.in_features
        for k, kind in enumerate(self.storage):
            n_out = int(buf[f"bias{k}"].shape[0])  # type: ignore[union-attr]
            if kind == "sparse":
                out[f"csr{k}"] = _csr_matrix(
                    buf[f"offsets{k}"],  # type: ignore[arg-type]
                    buf[f"columns{k}"],  # type: ignore[arg-type]
                    buf[f"values{k}"],  # type: ignore[arg-type]
                    (n_out, n_in),
                )
            n_in = n_out
        return out

    def _plan(self) -> list[tuple[bool, str, str, str, str, bool, str]]:
        """Per layer: (sparse, weight or values, columns, offsets, bias, activation after,
        CSR matrix)."""
        return [
            (
                kind == "sparse",
                f"values{k}" if kind == "sparse" else f"weight{k}",
                f"columns{k}",
                f"offsets{k}",
                f"bias{k}",
                k < self.n_layers - 1 and self.activation != "identity",
                f"csr{k}",
            )
            for k, kind in enumerate(self.storage)
        ]

    def forward(self, x: Tensor) -> Tensor:
        if x.shape[-1] != self.n_features:
            raise ValueError(
                f"x has {x.shape[-1]} columns; the network was fitted on {self.n_features}"
            )
        buf = self._buffers
        act = _INPLACE_ACTIVATIONS[self.activation]
        dtype = buf["bias0"].dtype  # type: ignore[union-attr]
        flat = x.dim() == 2  # the common case: no reshapes (each costs time at batch 1)
        x2 = x if flat else x.reshape(-1, self.n_features)
        index = buf["index"]
        if self.layout == "rows":
            if flat and x.shape[0] == 1:  # one row: matrix-vector products
                v = torch.take(x, index)  # type: ignore[arg-type]  # x[0, index], one op
                if v.dtype != dtype:
                    v = v.to(dtype)
                for sparse, w, _, _, b, after, csr in self.plan:
                    # A sparse layer: its CSR matrix (MKL's product where torch has it).
                    mat = buf[csr if sparse else w]
                    v = torch.addmv(buf[b], mat, v)  # type: ignore[arg-type]
                    if after:
                        v = act(v)
                return v.unsqueeze(0)
            h = x2.index_select(1, index)  # type: ignore[arg-type]
            if h.dtype != dtype:
                h = h.to(dtype)
            for sparse, w, c, o, b, after, _ in self.plan:
                if sparse:
                    h = self._bag(h.t(), buf[w], buf[c], buf[o], buf[b]).t()
                else:
                    h = F.linear(h, buf[w], buf[b])  # type: ignore[arg-type]
                if after:
                    h = act(h)
            return h if flat else h.reshape(x.shape[:-1] + (self.out_features,))
        h = x2.t().index_select(0, index)  # type: ignore[arg-type]
        if h.dtype != dtype:
            h = h.to(dtype)
        for sparse, w, c, o, b, after, _ in self.plan:
            if sparse:
                h = self._bag(h, buf[w], buf[c], buf[o], buf[b])
            else:
                h = torch.addmm(buf[b].unsqueeze(1), buf[w], h)  # type: ignore[union-attr, arg-type]
            if after:
                h = act(h)
        return h.t() if flat else h.t().reshape(x.shape[:-1] + (self.out_features,))

    @staticmethod
    def _bag(h: Tensor, values: Any, columns: Any, offsets: Any, bias: Any) -> Tensor:
        """A layer stored sparse on transposed activations: ``(in, m) -> (out, m)``."""
        out = F.embedding_bag(
            columns,
            h,
            offsets,
            mode="sum",
            per_sample_weights=values,
            include_last_offset=True,
        )
        return out.add_(bias.unsqueeze(1))

    def layer_weights(self) -> list[tuple[Tensor, Tensor]]:
        """Each layer's ``(weight (out, in), bias (out,))``, zeros included, dense."""
        out = []
        n_in = self.in_features
        for k in range(self.n_layers):
            b = self._buffers[f"bias{k}"]
            assert b is not None
            if self.storage[k] == "dense":
                w = self._buffers[f"weight{k}"]
                assert w is not None
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UserWarning)
                    w = torch.sparse_csr_tensor(
                        self._buffers[f"offsets{k}"].to(torch.int64),  # type: ignore[union-attr]
                        self._buffers[f"columns{k}"].to(torch.int64),  # type: ignore[union-attr]
                        self._buffers[f"values{k}"],  # type: ignore[arg-type]
                        size=(int(b.shape[0]), n_in),
                    ).to_dense()
            out.append((w, b))
            n_in = int(b.shape[0])
        return out

    def nnz(self) -> int:
        """Nonzero weights of all layers (biases not counted)."""
        return sum(int((w != 0).sum()) for w, _ in self.layer_weights())

    def to_dense(self) -> "CompactMLP":
        """The same network with every layer dense, ``"rows"`` layout (for ONNX)."""
        ws = self.layer_weights()
        return CompactMLP(
            self.index,
            self.n_features,
            [w for w, _ in ws],
            [b for _, b in ws],
            ["dense"] * self.n_layers,
            self.activation,
            "rows",
        ).eval()

    def extra_repr(self) -> str:
        return (
            f"{self.index.numel()} of {self.n_features} inputs, layers "
            f"{[tuple(w.shape) for w, _ in self.layer_weights()]} ({'/'.join(self.storage)}), "
            f"activation={self.activation}, layout={self.layout}"
        )


@dataclass
class ExportReport:
    """What :func:`export_sparse` or :func:`export_compact` produced.

    ``n_nonzero``: kept parameters (weights and biases with ``phi > threshold``);
    ``n_total``: the model's parameters; ``size_bytes``: ``torch.save`` of the module's
    state dict. :func:`export_compact` also fills ``layer_shapes`` (``(out, in)`` of each
    kept linear layer, or conv channels), ``layer_nonzero`` (nonzero weights each),
    ``layer_storage`` (``"dense"`` or ``"sparse"``) and ``kept_inputs``.
    """

    n_nonzero: int
    n_total: int
    size_bytes: int
    layer_shapes: list[tuple[int, int]] | None = None
    layer_nonzero: list[int] | None = None
    layer_storage: list[str] | None = None
    kept_inputs: list[int] | None = None

    @property
    def density(self) -> float:
        """Fraction of parameters kept."""
        return self.n_nonzero / self.n_total

    @property
    def multiply_adds(self) -> int | None:
        """Multiply-adds per row of the compacted linear layers (nonzero weights)."""
        return None if self.layer_nonzero is None else sum(self.layer_nonzero)


def module_size_bytes(module: nn.Module) -> int:
    """Size in bytes of ``torch.save(module.state_dict())``."""
    buf = io.BytesIO()
    torch.save(module.state_dict(), buf)
    return buf.getbuffer().nbytes


# -- export_sparse: the median model at the original sizes ---------------------------------
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


def _plain_linear(w: Tensor, b: Tensor | None) -> nn.Linear:
    """An ``nn.Linear`` holding weights ``w`` ``(out, in)`` and bias ``b``."""
    lin = nn.Linear(w.shape[1], w.shape[0], bias=b is not None).to(w)
    with torch.no_grad():
        lin.weight.copy_(w)
        if b is not None and lin.bias is not None:
            lin.bias.copy_(b)
    lin.requires_grad_(False)
    return lin


def _median(child: GatedLayer, threshold: float) -> tuple[Tensor, Tensor | None, int]:
    """The median model of one gated layer: weights (a convolution's as ``(out, fan_in)``
    rows), bias, kept count."""
    if child.n_replicates is not None:
        raise ValueError("cannot export a replicated model (export one replicate's parameters)")
    with torch.no_grad():
        keep = torch.sigmoid(child.alpha) > threshold
        if isinstance(child, _SpikeSlabLayer):
            w, b = child._split(child.mu * keep)
        else:  # another gated family: its own median model
            w, b = child.median_weights(threshold)
    return w.detach(), None if b is None else b.detach(), int(keep.sum())


def _export_layer(child: GatedLayer, threshold: float, storage: str) -> tuple[nn.Module, int]:
    """The median model of one spike-and-slab layer as a plain layer at its size."""
    w, b, kept = _median(child, threshold)
    new: nn.Module
    if isinstance(child, SpikeSlabConv2d):
        new = _plain_conv(child, w, b, w)
    elif storage == "sparse":
        new = SparseLinear(w, b)
    else:
        new = _plain_linear(w, b)
    return new, kept


def _check_threshold(threshold: float) -> None:
    if not 0.0 <= float(threshold) < 1.0:
        raise ValueError(f"threshold must be in [0, 1), got {threshold!r}")


def export_sparse(
    model: nn.Module, threshold: float = 0.5, storage: str = "sparse"
) -> tuple[nn.Module, ExportReport]:
    """Turn a fitted model into a plain PyTorch module: the selected network.

    Every spike-and-slab layer is replaced by its median model: weights ``mu`` on edges
    with ``phi > threshold``, zero elsewhere (biases alike). Linear layers become
    :class:`SparseLinear` (``storage="sparse"``) or ``nn.Linear`` (``storage="dense"``);
    convolutions become ``nn.Conv2d`` with zeroed kernels. Replicated models cannot be
    exported (export one replicate's parameters instead). Nothing is removed: for a
    smaller, faster network use :func:`export_compact`.

    Returns
    -------
    module : nn.Module
        A deep copy of ``model`` with plain layers, in eval mode.
    report : ExportReport
        Nonzero and total parameter counts and the size on disk of the module.
    """
    if storage not in ("sparse", "dense"):
        raise ValueError(f"storage must be 'sparse' or 'dense', got {storage!r}")
    _check_threshold(threshold)
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


# -- export_compact: only the units that reach the output ----------------------------------
def _reaching_output(edges: list[Tensor], lives: list[Tensor] | None = None) -> list[Tensor]:
    """Per layer's inputs (the network's, then each hidden layer's units), the units with a
    path of kept edges to some output; ``edges``: each layer's ``(out_l, in_l)`` mask of
    kept edges; ``lives`` (optional, each ``(in_l,)``): units kept only where it is true.
    The last entry is every output."""
    useful = torch.ones(edges[-1].shape[0], dtype=torch.bool, device=edges[-1].device)
    keeps = [useful]
    for k in range(len(edges) - 1, -1, -1):
        useful = edges[k][useful].any(dim=0)
        if lives is not None:
            useful = lives[k] & useful
        keeps.insert(0, useful)
    return keeps


def _compact_mlp(
    weights: list[Tensor], biases: list[Tensor], activation: nn.Module
) -> tuple[Tensor, list[Tensor], list[Tensor]]:
    """Remove the units that cannot change the output; fold constant units into biases.

    Parameters
    ----------
    weights : list of Tensor, each ``(out_l, in_l)``
        Median-model weights (zeros where ``phi <= threshold``), float64.
    biases : list of Tensor, each ``(out_l,)``
    activation : nn.Module
        The hidden activation.

    Returns
    -------
    inputs : Tensor of int64
        Kept input columns.
    weights, biases : lists of Tensor
        The compacted layers (the last keeps every output). A unit is kept when some kept
        input reaches it through nonzero weights (else it is the constant
        ``activation(bias)``, whose contribution is added to the next layer's biases) and
        it reaches some output. A network whose output depends on no input keeps one input
        with zero weights, so that the module still takes ``x``.
    """
    W = [w.clone() for w in weights]
    B = [b.clone() for b in biases]
    n = len(W)
    # Forward: which units depend on the inputs; the others are constants, folded.
    live = torch.ones(W[0].shape[1], dtype=torch.bool, device=W[0].device)
    lives = [live]
    for k in range(n):
        if k > 0:
            const = activation(B[k - 1][~live])  # the value of each constant unit
            B[k] = B[k] + W[k][:, ~live] @ const
            W[k][:, ~live] = 0.0
        if k < n - 1:
            live = (W[k] != 0).any(dim=1)
            lives.append(live)
    # Backward: which units reach an output through nonzero weights (and depend on x).
    keeps = _reaching_output([w != 0 for w in W], lives)
    if not bool(keeps[0].any()):
        # Constant network: the outputs are the last biases (every hidden unit that
        # reaches an output is a folded constant). Keep one input and one unit per hidden
        # layer, all with zero weights and biases, so that the module still takes x.
        zero = W[0].new_zeros
        Wc = [zero(1, 1) for _ in range(n - 1)] + [zero(W[-1].shape[0], 1)]
        Bc = [zero(1) for _ in range(n - 1)] + [B[-1]]
        return torch.zeros(1, dtype=torch.int64, device=W[0].device), Wc, Bc
    inputs = torch.nonzero(keeps[0]).flatten()
    Wc = [W[k][keeps[k + 1]][:, keeps[k]] for k in range(n)]
    Bc = [B[k][keeps[k + 1]] for k in range(n)]
    return inputs, Wc, Bc


def _linear_layer(w: Tensor, b: Tensor, storage: str) -> tuple[nn.Module, str]:
    if storage == "sparse":
        return SparseLinear(w, b), storage
    return _plain_linear(w, b), "dense"


def export_compact(
    model: nn.Module, threshold: float = 0.5, storage: str = "auto", batch_size: int = 64
) -> tuple[nn.Sequential, ExportReport]:
    """The median model with only the units that can change its output: small and fast.

    The median model keeps ``mu`` on the edges with ``phi > threshold`` (weights and
    biases) and zero elsewhere. Compaction then drops every input without a kept edge to a
    unit that reaches the output, every hidden unit that no kept input reaches (it
    outputs the constant ``activation(bias)``, whose contribution to the next layer is
    added to that layer's biases) and every hidden unit with no kept path to an output.
    The outputs are the median model's up to floating-point rounding.

    In a convolutional network each ``SpikeSlabConv2d`` becomes an ``nn.Conv2d`` without
    its dead output channels: a channel whose kernel is all zero is the constant
    ``activation(bias)``, added to the next layer's biases when that is exact (the next
    convolution has no padding, or the next layer is the linear one after the flatten)
    or dropped when the constant is 0; a channel with no nonzero weight into a kept
    channel of the next layer is dropped too, and so are the matching input channels of
    the next layer. The layers after the flatten are compacted as an MLP (the flattened
    features that reach the output are selected inside it).

    Parameters
    ----------
    model : SpikeSlabMLP or nn.Sequential
        A fitted, not replicated :class:`~svbnn.nn.SpikeSlabMLP`; or a convolutional
        ``nn.Sequential``: :class:`~svbnn.nn.SpikeSlabConv2d` layers (``groups=1``) with
        activations, ``nn.MaxPool2d`` or ``nn.Dropout`` between them, an ``nn.Flatten``,
        then :class:`~svbnn.nn.SpikeSlabLinear` layers with one kind of activation
        (the paper's CNN).
    threshold : float, default 0.5
        Gate threshold on ``phi``.
    storage : {"auto", "dense", "sparse"}, default "auto"
        ``"auto"`` (the fast form): the compacted linear layers as one
        :class:`CompactMLP`, each layer dense or sparse by :func:`sparse_is_faster` at
        ``batch_size``, in the layout that batch size runs fastest in (``"rows"`` at
        batch 1; else ``"features"`` when a layer is sparse or from 256 rows, else
        ``"rows"``). ``"dense"`` /
        ``"sparse"``: the layered form, an ``InputSelect`` then every layer as
        ``nn.Linear`` / :class:`SparseLinear` (CSR) with activation modules between them.
    batch_size : int, default 64
        The batch size the module will mostly run at (``"auto"`` storage only). It
        runs at any batch size.

    Returns
    -------
    module : nn.Sequential
        In eval mode, no gradients; shapes ``(m, p) -> (m, out)`` for any floating
        ``x`` (cast to the network's dtype inside). ``"auto"``: the convolutions (if
        any), then the :class:`CompactMLP`; ``torch.export`` accepts it at any batch
        size. The layered form: ``torch.jit.script`` and ``torch.export`` (at a fixed
        batch size when a layer is sparse) accept it. For ONNX use :func:`to_dense` of
        either (as :func:`export_onnx` does).
    report : ExportReport
        Counts (``n_nonzero``, ``n_total``: the median model's and the model's
        parameters), size on disk and, per compacted layer, its shape, nonzero weights
        and storage.
    """
    if storage not in ("auto", "sparse", "dense"):
        raise ValueError(f"storage must be 'auto', 'sparse' or 'dense', got {storage!r}")
    _check_threshold(threshold)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if isinstance(model, SpikeSlabMLP):
        return _export_compact_mlp(model, threshold, storage, batch_size)
    if isinstance(model, nn.Sequential) and any(
        isinstance(m, SpikeSlabConv2d) for m in model.children()
    ):
        return _export_compact_conv(model, threshold, storage, batch_size)
    raise TypeError(
        "model must be a SpikeSlabMLP or an nn.Sequential of SpikeSlabConv2d layers, "
        f"got {type(model).__name__}"
    )


def _compact_module(
    index: Tensor,
    n_features: int,
    weights: list[Tensor],
    biases: list[Tensor],
    activation: str,
    storage: str,
    batch_size: int,
    like: Tensor,
) -> tuple[list[nn.Module], list[str]]:
    """The compacted layers as modules: one :class:`CompactMLP` (``storage="auto"``), or
    ``InputSelect`` then ``nn.Linear`` / :class:`SparseLinear` layers and activations."""
    dtype = like.dtype
    if storage == "auto":
        kinds = [
            "sparse"
            if sparse_is_faster(int((w != 0).sum()), w.shape[0], w.shape[1], batch_size)
            else "dense"
            for w in weights
        ]
        # One row: "rows" (matrix-vector products, dense or CSR). All-dense networks:
        # "rows" up to batch 64 (as fast or faster), "features" beyond (the transposed
        # products were faster at batch 1000). Sparse layers: "features" (whole-row sums).
        many = batch_size >= 256 or "sparse" in kinds
        layout = "features" if batch_size > 1 and many else "rows"
        flat = CompactMLP(
            index,
            n_features,
            [w.to(dtype) for w in weights],
            [b.to(dtype) for b in biases],
            kinds,
            activation,
            layout,
        )
        return [flat.eval()], kinds
    mods: list[nn.Module] = [InputSelect(index, n_features, like)]
    kinds = []
    for k, (w, b) in enumerate(zip(weights, biases, strict=True)):
        layer, kind = _linear_layer(w.to(dtype), b.to(dtype), storage)
        mods.append(layer)
        if k < len(weights) - 1:
            mods.append(activation_module(activation))
        kinds.append(kind)
    return mods, kinds


def _export_compact_mlp(
    model: SpikeSlabMLP, threshold: float, storage: str, batch_size: int
) -> tuple[nn.Sequential, ExportReport]:
    layers = model.layers()
    medians = [_median(layer, threshold) for layer in layers]
    dtype = layers[0].mu.dtype
    device = layers[0].mu.device
    weights = [w.double() for w, _, _ in medians]
    biases = [
        torch.zeros(w.shape[0], dtype=torch.float64, device=device) if b is None else b.double()
        for w, b, _ in medians
    ]
    act = activation_module(model.activation)
    inputs, Wc, Bc = _compact_mlp(weights, biases, act)
    like = torch.empty(0, dtype=dtype, device=device)
    mods, kinds = _compact_module(
        inputs, model.in_features, Wc, Bc, model.activation, storage, batch_size, like
    )
    out = nn.Sequential(*mods).eval()
    report = ExportReport(
        n_nonzero=sum(k for _, _, k in medians),
        n_total=model.n_params(),
        size_bytes=module_size_bytes(out),
        layer_shapes=[(int(w.shape[0]), int(w.shape[1])) for w in Wc],
        layer_nonzero=[int((w != 0).sum()) for w in Wc],
        layer_storage=kinds,
        kept_inputs=[int(i) for i in inputs],
    )
    return out, report


def to_dense(module: nn.Module) -> nn.Module:
    """A copy of ``module`` with every :class:`SparseLinear` as an ``nn.Linear``.

    The form ``torch.export.export`` and ``torch.onnx.export`` take (neither traces a
    sparse CSR product); same outputs up to floating-point rounding.
    """
    out = copy.deepcopy(module)

    def replace(parent: nn.Module) -> None:
        for name, child in parent.named_children():
            if isinstance(child, SparseLinear):
                setattr(parent, name, _plain_linear(child.dense_weight(), child.bias))
            elif isinstance(child, CompactMLP):
                setattr(parent, name, child.to_dense())
            else:
                replace(child)

    if isinstance(out, SparseLinear):
        return _plain_linear(out.dense_weight(), out.bias)
    if isinstance(out, CompactMLP):
        return out.to_dense()
    replace(out)
    return out.eval()


_ONNX_DTYPES = {"float32": torch.float32, "float64": torch.float64}


def export_onnx(
    module: nn.Module, path: str | os.PathLike[str], n_features: int, dtype: str = "float32"
) -> None:
    """Write ``module`` (e.g. from :func:`export_compact`) as an ONNX model, atomically.

    The graph takes one input ``x`` of shape ``(batch, n_features)`` (any batch) and
    ``dtype``, and returns ``y``; :class:`SparseLinear` layers are stored dense
    (:func:`to_dense`). Needs the ``onnx`` and ``onnxscript`` packages (extra ``export``).

    Parameters
    ----------
    module : nn.Module
        Takes ``(batch, n_features)`` inputs.
    path : str or path-like
        Output file (``.onnx``).
    n_features : int
        Columns of ``x``.
    dtype : {"float32", "float64"}, default "float32"
        The input's element type (the module casts to its own inside).
    """
    if dtype not in _ONNX_DTYPES:
        raise ValueError(f"dtype must be 'float32' or 'float64', got {dtype!r}")
    if isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 1:
        raise ValueError(f"n_features must be a positive integer, got {n_features!r}")
    dense = to_dense(module).cpu()
    example = torch.zeros(2, n_features, dtype=_ONNX_DTYPES[dtype])
    batch = torch.export.Dim("batch")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(
            dense,
            (example,),
            input_names=["x"],
            output_names=["y"],
            dynamic_shapes=({0: batch},),
            dynamo=True,
            verbose=False,
        )
    assert program is not None
    atomic_write_bytes(path, program.model_proto.SerializeToString())


# -- convolutional networks -----------------------------------------------------------------
_PASS_THROUGH = (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.Identity, nn.MaxPool2d, nn.Dropout)


def _export_compact_conv(
    model: nn.Sequential, threshold: float, storage: str, batch_size: int
) -> tuple[nn.Sequential, ExportReport]:
    """:func:`export_compact` of ``[conv, act, pool]* , Flatten, [linear, act]*``."""
    children = list(model.children())
    flat_at = next((i for i, m in enumerate(children) if isinstance(m, nn.Flatten)), None)
    if flat_at is None:
        raise TypeError("a convolutional model must have an nn.Flatten before its linear layers")
    head, tail = children[:flat_at], children[flat_at + 1 :]
    for m in head:
        if not isinstance(m, (SpikeSlabConv2d, *_PASS_THROUGH)):
            raise TypeError(f"cannot compact a convolutional model holding {type(m).__name__}")
        if isinstance(m, SpikeSlabConv2d) and m.groups != 1:
            raise ValueError("cannot compact a grouped convolution (groups > 1)")
    lins = [m for m in tail if isinstance(m, SpikeSlabLinear)]
    acts = [m for m in tail if not isinstance(m, SpikeSlabLinear)]
    if not lins or not all(
        isinstance(m, (nn.ReLU, nn.Tanh, nn.Sigmoid, nn.Identity)) for m in acts
    ):
        raise TypeError("after nn.Flatten: SpikeSlabLinear layers and activations only")
    convs = [m for m in head if isinstance(m, SpikeSlabConv2d)]
    med = [_median(c, threshold) for c in convs]
    W = [
        w.reshape(c.kernel_shape).double().clone() for c, (w, _, _) in zip(convs, med, strict=True)
    ]
    B = [
        torch.zeros(w.shape[0], dtype=torch.float64, device=w.device) if b is None else b.double()
        for w, b, _ in med
    ]
    lw, lb, _ = _median(lins[0], threshold)
    W1 = lw.double().clone()
    B1 = (torch.zeros(W1.shape[0], dtype=torch.float64) if lb is None else lb.double()).to(W1)
    per = W1.shape[1] // W[-1].shape[0]  # flattened features per channel of the last conv

    def act_after(conv: SpikeSlabConv2d) -> nn.Module:
        i = head.index(conv)
        nxt = head[i + 1] if i + 1 < len(head) else None
        return nxt if isinstance(nxt, (nn.ReLU, nn.Tanh, nn.Sigmoid)) else nn.Identity()

    # Forward: a channel with an all-zero kernel is the constant activation(bias); fold it
    # into the next layer's bias where that is exact (a convolution without padding, or
    # the linear layer after the flatten), then zero its outgoing weights.
    for k, conv in enumerate(convs):
        dead = ~(W[k] != 0).flatten(1).any(dim=1)
        const = act_after(conv)(B[k])
        for j in torch.nonzero(dead).flatten().tolist():
            c = float(const[j])
            if k + 1 < len(convs):
                pad = convs[k + 1].padding
                no_pad = pad in (0, (0, 0)) or pad == "valid"
                if no_pad:
                    B[k + 1] += W[k + 1][:, j].sum(dim=(1, 2)) * c
                if no_pad or c == 0.0:
                    W[k + 1][:, j] = 0.0
            else:
                span = slice(j * per, (j + 1) * per)
                B1 += W1[:, span].sum(dim=1) * c
                W1[:, span] = 0.0
    # Backward: keep the channels with a nonzero outgoing weight into a kept channel.
    keep_cols = (W1 != 0).any(dim=0)
    keeps: list[Tensor] = [keep_cols.reshape(-1, per).any(dim=1)]
    for k in range(len(convs) - 1, 0, -1):
        nxt = W[k][keeps[0]]
        keeps.insert(0, (nxt != 0).flatten(2).any(dim=2).any(dim=0))
    new_head: list[nn.Module] = []
    ci = 0
    shapes: list[tuple[int, int]] = []
    nonzero: list[int] = []
    kinds: list[str] = []
    prev_keep: Tensor | None = None
    dtype = med[0][0].dtype
    for m in head:
        if not isinstance(m, SpikeSlabConv2d):
            new_head.append(copy.deepcopy(m))
            continue
        keep = keeps[ci]
        if not bool(keep.any()):
            keep = keep.clone()
            keep[0] = True  # a constant network: one channel, zero weights
            W[ci][0] = 0.0
            B[ci][0] = 0.0
        w = W[ci][keep] if prev_keep is None else W[ci][keep][:, prev_keep]
        plain = nn.Conv2d(
            w.shape[1],
            w.shape[0],
            m.kernel_size,
            m.stride,
            m.padding,
            m.dilation,
            bias=True,
        ).to(device=w.device, dtype=dtype)
        with torch.no_grad():
            plain.weight.copy_(w)
            assert plain.bias is not None
            plain.bias.copy_(B[ci][keep])
        plain.requires_grad_(False)
        new_head.append(plain)
        shapes.append((int(w.shape[0]), int(w.shape[1])))
        nonzero.append(int((w != 0).sum()))
        kinds.append("dense")
        prev_keep = keep
        ci += 1
    assert prev_keep is not None
    cols = prev_keep.repeat_interleave(per)
    # The linear tail on the kept channels' features, compacted as an MLP.
    tail_w = [W1[:, cols]] + [_median(lin, threshold)[0].double() for lin in lins[1:]]
    tail_b = [B1] + [
        torch.zeros(lin.out_features, dtype=torch.float64, device=W1.device)
        if (b := _median(lin, threshold)[1]) is None
        else b.double()
        for lin in lins[1:]
    ]
    act = acts[0] if acts else nn.Identity()
    inputs, Wc, Bc = _compact_mlp(tail_w, tail_b, act)
    like = torch.empty(0, dtype=dtype, device=W1.device)
    tail_mods, tail_kinds = _compact_module(
        inputs, int(cols.sum()), Wc, Bc, _ACTIVATION_NAMES[type(act)], storage, batch_size, like
    )
    mods: list[nn.Module] = [*new_head, nn.Flatten(), *tail_mods]
    shapes += [(int(w.shape[0]), int(w.shape[1])) for w in Wc]
    nonzero += [int((w != 0).sum()) for w in Wc]
    kinds += tail_kinds
    out = nn.Sequential(*mods).eval()
    layers = [*convs, *lins]
    report = ExportReport(
        n_nonzero=sum(_median(m, threshold)[2] for m in layers),
        n_total=sum(m.n_params() for m in layers),
        size_bytes=module_size_bytes(out),
        layer_shapes=shapes,
        layer_nonzero=nonzero,
        layer_storage=kinds,
        kept_inputs=[int(i) for i in inputs],
    )
    return out, report


# -- the predictive distribution: K posterior draws as one module ---------------------------
class DrawLinear(nn.Module):
    """``K`` linear layers applied to ``K`` stacks of rows: ``bias + x @ weight``.

    ``weight`` ``(K, in, out)`` (transposed), ``bias`` ``(K, 1, out)``. Shapes:
    ``(K, n, in) -> (K, n, out)``.
    """

    weight: Tensor
    bias: Tensor

    def __init__(self, weights: Tensor, biases: Tensor) -> None:
        super().__init__()
        self.register_buffer("weight", weights.detach().transpose(1, 2).contiguous())
        self.register_buffer("bias", biases.detach().unsqueeze(1).clone())

    def forward(self, x: Tensor) -> Tensor:
        return torch.baddbmm(self.bias, x, self.weight)


class ExpandDraws(nn.Module):
    """``(n, p) -> (K, n, p)``: the same rows for each of ``K`` draws (a view)."""

    def __init__(self, n_draws: int) -> None:
        super().__init__()
        self.n_draws = int(n_draws)

    def forward(self, x: Tensor) -> Tensor:
        return x.unsqueeze(0).expand(self.n_draws, x.shape[0], x.shape[1])


class MeanDraws(nn.Module):
    """``(K, n, ...) -> (n, ...)``: the average over the draws."""

    def forward(self, x: Tensor) -> Tensor:
        return x.mean(dim=0)


class NormalPredictive(nn.Module):
    """``(K, n, 1) -> (n, 2)``: a Gaussian posterior predictive from ``K`` draws of a
    one-output network on standardised ``y``, in ``y``'s units: column 0 the mean of the
    draws ``* scale + shift``, column 1 ``sqrt(var + noise**2) * scale`` with ``var`` the
    draws' variance (divided by ``K``) and ``noise`` the noise sd (standardised units)."""

    def __init__(self, scale: float, shift: float, noise: float) -> None:
        super().__init__()
        self.scale = float(scale)
        self.shift = float(shift)
        self.noise = float(noise)

    def forward(self, x: Tensor) -> Tensor:
        f = x[..., 0]
        mean = f.mean(dim=0)
        var = (f - mean).square().mean(dim=0) + self.noise**2
        return torch.stack([mean * self.scale + self.shift, var.sqrt() * self.scale], dim=-1)

    def extra_repr(self) -> str:
        return f"scale={self.scale:g}, shift={self.shift:g}, noise={self.noise:g}"


class ExpOutput(nn.Module):
    """``exp(out[..., 0] + shift)``: a log-link network's rate (Poisson counts).

    Shapes: ``(..., 1) -> (...)``.
    """

    def __init__(self, shift: float) -> None:
        super().__init__()
        self.shift = float(shift)

    def forward(self, x: Tensor) -> Tensor:
        return torch.exp(x[..., 0] + self.shift)

    def extra_repr(self) -> str:
        return f"shift={self.shift:g}"


def _bias_or_zeros(b: Tensor | None, w: Tensor) -> Tensor:
    return w.new_zeros(w.shape[1]) if b is None else b


def export_draws(
    draws: list[list[tuple[Tensor, Tensor | None]]],
    activation: str,
    n_features: int,
    dtype: torch.dtype | None = None,
) -> nn.Sequential:
    """``K`` posterior draws of an MLP as one batched module, ``(n, p) -> (K, n, out)``.

    Parameters
    ----------
    draws : list of K lists of ``(weight (out, in), bias (out,) or None)``
        Each draw's layers, input to output (e.g. recorded under
        :func:`~svbnn.nn.frozen_sample`).
    activation : str
        The hidden activation.
    n_features : int
        Columns of the inputs; those without a nonzero first-layer weight in any draw are
        dropped (an ``InputSelect`` first).
    dtype : torch.dtype, optional
        The module's dtype (default the draws').

    Returns
    -------
    nn.Sequential
        ``InputSelect``, ``ExpandDraws``, then ``DrawLinear`` layers with the activation
        between them. Cost: ``K`` times a dense network of the draws' sizes (less the
        dropped inputs).
    """
    if not draws:
        raise ValueError("draws must hold at least one posterior draw")
    n_layers = len(draws[0])
    stacked = []
    for k in range(n_layers):
        w = torch.stack([d[k][0] for d in draws])
        b = torch.stack([_bias_or_zeros(d[k][1], w) for d in draws])
        stacked.append((w, b))
    dt = stacked[0][0].dtype if dtype is None else dtype
    used = (stacked[0][0] != 0).any(dim=0).any(dim=0)
    if not bool(used.any()):
        used[0] = True
    inputs = torch.nonzero(used).flatten()
    like = torch.empty(0, dtype=dt, device=stacked[0][0].device)
    mods: list[nn.Module] = [InputSelect(inputs, n_features, like), ExpandDraws(len(draws))]
    for k, (w, b) in enumerate(stacked):
        if k == 0:
            w = w[:, :, used]
        mods.append(DrawLinear(w.to(dt), b.to(dt)))
        if k < n_layers - 1:
            mods.append(activation_module(activation))
    return nn.Sequential(*mods).eval()


# -- the predictive distribution by moments: one deterministic pass -------------------------
MOMENT_MIN_INCLUSION = 0.05
""":func:`export_moments` leaves out the edges (and biases) of ``phi`` at most this: each
adds at most 5% of its slab's mean and second moment to a unit's."""


class MomentLinear(nn.Module):
    """A spike-and-slab linear layer on independent random inputs: the mean and variance
    of its outputs.

    With weights independent of each other and of the inputs, means ``W`` and variances
    ``V`` (the bias ``b``, ``c``), inputs of means ``m`` and variances ``v``:
    ``E[y] = m W^T + b`` and, by the law of total variance,
    ``Var[y] = v (V + W^2)^T + m^2 V^T + c``. Shapes: ``(2, n, in) -> (2, n, out)``
    (means, variances); with ``known_inputs``, ``(n, in)`` inputs without variance.
    """

    weight: Tensor
    var_weight: Tensor
    second_moment: Tensor
    bias: Tensor
    var_bias: Tensor

    def __init__(
        self, weight: Tensor, var_weight: Tensor, bias: Tensor, var_bias: Tensor, known_inputs: bool
    ) -> None:
        super().__init__()
        self.known_inputs = bool(known_inputs)
        self.register_buffer("weight", weight.detach().clone())
        self.register_buffer("var_weight", var_weight.detach().clone())
        # E[w^2] = V + W^2, kept so that a call makes one product fewer.
        self.register_buffer("second_moment", (var_weight + weight * weight).detach().clone())
        self.register_buffer("bias", bias.detach().clone())
        self.register_buffer("var_bias", var_bias.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        if self.known_inputs:
            mean = F.linear(x, self.weight, self.bias)
            var = F.linear(x * x, self.var_weight, self.var_bias)
        else:
            m, v = x[0], x[1]
            mean = F.linear(m, self.weight, self.bias)
            var = F.linear(v, self.second_moment, self.var_bias) + F.linear(m * m, self.var_weight)
        return torch.stack([mean, var])

    def extra_repr(self) -> str:
        out, inp = self.weight.shape
        return f"in_features={inp}, out_features={out}, known_inputs={self.known_inputs}"


class ReLUMoments(nn.Module):
    """The mean and variance of ``relu(a)`` for ``a ~ N(m, v)`` (the rectified normal):
    ``E = m Phi(r) + s phi(r)``, ``E[.^2] = (m^2 + v) Phi(r) + m s phi(r)`` with
    ``s = sqrt(v)``, ``r = m / s``. Shapes: ``(2, n, d) -> (2, n, d)``."""

    def forward(self, x: Tensor) -> Tensor:
        m, v = x[0], x[1]
        # A unit of no variance (v = 0) is relu(m): s = 1e-15 makes r large (or 0 at
        # m = 0), where the formulas give relu(m) to 4e-16. (A floor at the dtype's
        # smallest normal becomes 0 in an ONNX graph's float32 constant: 0 / 0.)
        s = torch.sqrt(v.clamp_min(1e-30))
        r = m / s
        # erf in float32 (relative error ~1e-7): onnxruntime has no float64 Erf.
        cdf = 0.5 * (1.0 + torch.erf((r * 0.7071067811865476).float()).to(r.dtype))
        pdf = torch.exp(-0.5 * r * r) * 0.3989422804014327
        mean = m * cdf + s * pdf
        second = (m * m + v) * cdf + m * s * pdf
        return torch.stack([mean, (second - mean * mean).clamp_min(0.0)])


class SoftmaxOfNormal(nn.Module):
    """``E[softmax(z)]`` for logits ``z ~ N(m, diag(v))`` by the unscented transform: the
    weighted average of ``softmax`` at the ``2 C + 1`` sigma points ``m`` and
    ``m +- sqrt((C + kappa) v_k) e_k`` (weights ``kappa / (C + kappa)`` and
    ``1 / (2 (C + kappa))``, ``kappa = 1``: all positive, so the result is a probability
    vector). Exact for any function of degree 3 in ``z``; deterministic. Shapes:
    ``(2, n, C) -> (n, C)``."""

    offsets: Tensor
    weights: Tensor

    def __init__(self, n_classes: int, like: Tensor, kappa: float = 1.0) -> None:
        super().__init__()
        c = int(n_classes)
        eye = torch.eye(c, dtype=like.dtype, device=like.device) * (c + kappa) ** 0.5
        zero = torch.zeros(1, c, dtype=like.dtype, device=like.device)
        self.register_buffer("offsets", torch.cat([zero, eye, -eye]).unsqueeze(1))
        w = torch.full((2 * c + 1, 1, 1), 0.5 / (c + kappa), dtype=like.dtype, device=like.device)
        w[0] = kappa / (c + kappa)
        self.register_buffer("weights", w)

    def forward(self, x: Tensor) -> Tensor:
        z = x[0] + torch.sqrt(x[1]) * self.offsets  # (2C + 1, n, C)
        return (torch.softmax(z, dim=-1) * self.weights).sum(dim=0)


class NormalMoments(nn.Module):
    """A one-output network's moments on standardised ``y`` to ``y``'s units: ``(2, n, 1)
    -> (n,)``, the mean ``* scale + shift``; with ``return_std``, ``(n, 2)``: the mean and
    ``sqrt(var + noise**2) * scale`` (``noise``: the noise sd, standardised units)."""

    def __init__(self, scale: float, shift: float, noise: float, return_std: bool) -> None:
        super().__init__()
        self.scale = float(scale)
        self.shift = float(shift)
        self.noise = float(noise)
        self.return_std = bool(return_std)

    def forward(self, x: Tensor) -> Tensor:
        mean = x[0, :, 0] * self.scale + self.shift
        if not self.return_std:
            return mean
        sd = torch.sqrt(x[1, :, 0] + self.noise**2) * self.scale
        return torch.stack([mean, sd], dim=-1)

    def extra_repr(self) -> str:
        return f"scale={self.scale:g}, shift={self.shift:g}, noise={self.noise:g}"


class LogNormalRate(nn.Module):
    """A log-link network's mean rate from the moments of its output ``eta ~ N(m, v)``:
    ``E[exp(eta + shift)] = exp(m + v / 2 + shift)``. Shapes: ``(2, n, 1) -> (n,)``."""

    def __init__(self, shift: float) -> None:
        super().__init__()
        self.shift = float(shift)

    def forward(self, x: Tensor) -> Tensor:
        return torch.exp(x[0, :, 0] + 0.5 * x[1, :, 0] + self.shift)

    def extra_repr(self) -> str:
        return f"shift={self.shift:g}"


def _moment_activation(name: str) -> nn.Module | None:
    if name == "relu":
        return ReLUMoments()
    if name == "identity":
        return None
    raise ValueError(
        f"the moments export supports activation 'relu' or 'identity', not {name!r} "
        "(use export_draws for the predictive of other activations)"
    )


def export_moments(
    model: SpikeSlabMLP,
    n_features: int,
    min_inclusion: float = MOMENT_MIN_INCLUSION,
) -> nn.Sequential:
    """The posterior predictive of a spike-and-slab MLP as one deterministic pass of
    moments: ``(n, p) -> (2, n, out)``, each output's mean and variance.

    Each layer's pre-activations are taken as independent normals with the exact mean and
    variance they have under ``q`` given the layer's inputs' means and variances (the
    local reparameterisation's approximation, :func:`svbnn.nn.spike_slab_moments` for the
    weights); a ReLU's output moments are the rectified normal's
    (:class:`ReLUMoments`). Edges (and biases) of ``phi <= min_inclusion`` are left out;
    so are the inputs and hidden units that no kept edge connects to the output.

    Parameters
    ----------
    model : SpikeSlabMLP
        One network (not replicated), activation ``"relu"`` or ``"identity"``.
    n_features : int
        Columns of the inputs (an :class:`InputSelect` keeps the used ones).
    min_inclusion : float, default :data:`MOMENT_MIN_INCLUSION`
        In ``[0, 1)``.

    Returns
    -------
    nn.Sequential
        ``InputSelect``, then :class:`MomentLinear` layers with :class:`ReLUMoments`
        between them; in the model's dtype. Cost: about two dense networks of the kept
        sizes (three products a layer after the first).
    """
    if not 0.0 <= float(min_inclusion) < 1.0:
        raise ValueError(f"min_inclusion must be in [0, 1), got {min_inclusion!r}")
    act = model.activation
    layers = model.layers()
    if any(layer.n_replicates is not None for layer in layers):
        raise ValueError("export_moments takes one network, not replicates")
    moments = []
    for layer in layers:
        with torch.no_grad():
            mean, var = spike_slab_moments(layer.mu, layer.rho, layer.alpha)
            keep = torch.sigmoid(layer.alpha) > min_inclusion
            mean, var = mean * keep, var * keep
        w, b = layer._split(mean)
        vw, vb = layer._split(var)
        keep_w = layer._split(keep)[0]
        none = w.new_zeros(w.shape[0])  # (an MLP's layers have biases; the type allows none)
        moments.append([w, vw, none if b is None else b, none if vb is None else vb, keep_w])
    # A unit stays if a path of kept edges leads from it to an output (the edges left out
    # have mean and variance 0, so dropping the units only they leave from is exact).
    keeps = _reaching_output([m[4] for m in moments])
    if not bool(keeps[0].any()):
        keeps[0][0] = True  # a module needs an input; its weights are 0
    inputs = keeps[0]
    like = moments[0][0]
    mods: list[nn.Module] = [InputSelect(torch.nonzero(inputs).flatten(), n_features, like)]
    for k, (w, vw, b, vb, _) in enumerate(moments):
        rows, cols = keeps[k + 1], keeps[k]
        w, vw, b, vb = w[rows][:, cols], vw[rows][:, cols], b[rows], vb[rows]
        mods.append(MomentLinear(w, vw, b, vb, known_inputs=k == 0))
        if k < len(moments) - 1:
            a = _moment_activation(act)
            if a is not None:
                mods.append(a)
    return nn.Sequential(*mods).eval()
