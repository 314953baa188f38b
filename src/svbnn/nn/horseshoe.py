"""Horseshoe BNN layers with node-wise shrinkage (HS-BNN; Ghosh, Yao & Doshi-Velez, 2018).

Model (one layer, ``d = fan_in + 1`` inputs with the bias as the last one). The weights into
output node ``k`` are ``w_k = tau_k * v * beta_k`` (the *non-centred* parameterisation):

* ``beta_k ~ N(0, I_d)``;
* ``tau_k ~ C+(0, b_0)``, one local scale per node (``local_scale = b_0``, default 1);
* ``v ~ C+(0, b_g)``, one global scale per layer (``global_scale = b_g``, default 1).

A layer built with ``node_scales=False`` has only the layer-wide scale (the paper's output
layer: ``w ~ N(0, kappa^2 I)``, ``kappa ~ C+(0, b_kappa)``).

Each half-Cauchy scale ``a ~ C+(0, b)`` is written with the inverse-gamma auxiliary
representation ``a^2 | l ~ IG(1/2, 1/l)``, ``l ~ IG(1/2, 1/b^2)`` (shape, rate), which makes
every KL term closed form.

Variational posterior (the paper's structured approximation, as far as this library
reproduces it; every choice is listed here):

* ``q(B)`` for the layer's ``d x out`` matrix ``B = [beta_1 ... beta_out]`` is matrix normal,
  ``vec(B) ~ N(vec(M), V kron U)`` with input-side covariance ``U = diag(a^2) + h h^T``
  (diagonal plus rank one: correlated weights into a node) and output-side covariance
  ``V = diag(c^2)``; ``a = softplus(row_rho)``, ``c = softplus(col_rho)``. ``M`` is stored
  transposed as ``weight_mu`` ``(out, d)``, like the other layers (bias last).
  ``(s U, V / s)`` give the same law for any ``s > 0``; the redundancy is harmless.
* ``q(log tau_k) = N(node_loc_k, softplus(node_rho_k)^2)`` and
  ``q(log v) = N(layer_loc, softplus(layer_rho)^2)``: log-normal scales.
* ``q(l)`` of each auxiliary variable is inverse gamma. Its optimum given the rest is known
  in closed form, ``IG(1, E_q[1/a^2] + 1/b^2)`` (the paper's fixed-point update), and the
  KL is evaluated *at that optimum*, i.e. with ``q(l)`` profiled out. The gradient of the
  profiled KL equals the gradient with ``q(l)`` held at its optimum (envelope theorem), so
  every optimiser step does what the paper's "gradient step, then closed-form update"
  does, with no extra state.

KL terms (all exact): ``KL(q(B) || N(0, I))`` for the matrix normal (matrix determinant
lemma for ``log|U|``) plus, for each scale, ``KL(q(a^2) q(l) || p(a^2 | l) p(l))``, which
with the profiled ``q(l)`` simplifies to (:func:`half_cauchy_scale_kl`)

``m + log(exp(-2 m + 2 s^2) + 1/b^2) - log(2 s) + log b + log(pi/2)/2 - 1/2``

for ``q(log a) = N(m, s^2)``.

Forward passes: in training (``"sample"``, no frozen draw) the node scales are drawn once
per forward pass (shared by the minibatch) and the pre-activations of ``beta`` by the local
reparameterisation trick: for an input row ``x`` (with a 1 appended),
``x^T B ~ N(x^T M, (x^T U x) V)``, independently per row. Frozen posterior draws (used for
prediction) sample the whole weight matrix. ``"mean"`` uses ``E_q[w] = E[tau] E[v] M``;
``"median"`` uses the median scales ``exp(node_loc + layer_loc)`` times ``M``.

Node pruning (:meth:`HorseshoeLinear.kept_mask`): a node is kept when the norm of its
posterior-mean incoming weight vector, ``E[tau_k v] ||M_k||`` (weights only), is at least
``prune_ratio`` (default 0.1) times the largest such norm in its layer. The rule is
relative so that it does not depend on the scale of the data; layers without node scales
keep every node. HS-BNN prunes nodes, not inputs: variable selection (FPR/FNR) is not
defined for it, as the paper notes.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..kl import (
    Horseshoe,
    HorseshoePrior,
    half_cauchy_scale_kl,
    kl_divergence,
    matrix_normal_kl,
)
from .base import ForwardMode, VariationalLayer
from .gaussian import VariationalMLP, _check_sizes

__all__ = [
    "HorseshoeLinear",
    "HorseshoeMLP",
    "half_cauchy_scale_kl",
    "matrix_normal_kl",
]


def _inv_softplus(x: float) -> float:
    return x + math.log(-math.expm1(-x))


def _check_settings(local_scale: float, global_scale: float, prune_ratio: float) -> None:
    """Refuse non-positive (or non-finite) prior scales and a ``prune_ratio`` outside [0, 1)."""
    for name, v in (("local_scale", local_scale), ("global_scale", global_scale)):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"{name} must be positive, got {v}")
    if not (0.0 <= prune_ratio < 1.0):
        raise ValueError(f"prune_ratio must lie in [0, 1), got {prune_ratio}")


class HorseshoeLinear(VariationalLayer):
    """Fully connected layer with a node-wise horseshoe prior and a structured posterior.

    Parameters
    ----------
    in_features, out_features : int
        Layer sizes.
    bias : bool
        Whether the layer has biases (scaled with their node, like its weights).
    node_scales : bool
        Node-wise scales ``tau_k`` (hidden layers); ``False`` keeps only the layer scale.
    local_scale : float
        ``b_0`` of ``tau_k ~ C+(0, b_0)``.
    global_scale : float
        ``b_g`` of the layer scale ``v ~ C+(0, b_g)``.
    prune_ratio : float
        Relative threshold of :meth:`kept_mask`, in ``[0, 1)``.
    init_rho : float
        Initial ``row_rho`` (``a = softplus(init_rho)``, the weights' initial spread; ``h``
        starts ``U(-a, a)``; ``c`` starts at 1).
    init_mu_range : float, optional
        Half-range of the uniform initial ``M`` (``None``: ``1/sqrt(fan_in)``).
    init_log_scale, init_scale_rho : float
        Initial location and ``rho`` of the log-normal scales (default: scales near 1).
    n_replicates : int, optional
        Hold ``R`` independent copies; inputs ``(R, m, in)`` map to ``(R, m, out)``.
    generator : torch.Generator, optional
        Source of the layer's randomness.

    Notes
    -----
    Shapes: input ``(..., in)`` (``(R, m, in)`` replicated), output ``(..., out)``.
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        node_scales: bool = True,
        local_scale: float = 1.0,
        global_scale: float = 1.0,
        prune_ratio: float = 0.1,
        init_rho: float = -6.0,
        init_mu_range: float | None = None,
        init_log_scale: float = 0.0,
        init_scale_rho: float = -6.0,
        n_replicates: int | None = None,
        generator: torch.Generator | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        _check_sizes(out_features, in_features, n_replicates)
        _check_settings(local_scale, global_scale, prune_ratio)
        self.in_features = in_features
        self.fan_in = in_features
        self.out_features = out_features
        self.has_bias = bias
        self.node_scales = bool(node_scales)
        self.local_scale = float(local_scale)
        self.global_scale = float(global_scale)
        self.prune_ratio = float(prune_ratio)
        self.n_replicates = n_replicates
        self.generator = generator
        self._allocate_parameters({"device": device, "dtype": dtype})
        self.reset_parameters(init_rho, init_mu_range, init_log_scale, init_scale_rho)

    def _allocate_parameters(self, factory: dict[str, Any]) -> None:
        """Create the variational parameters, uninitialised (``factory``: device and dtype).

        The weight means ``(out, d)`` (``d`` inputs plus the bias column), the row (input)
        and column (output) scales, the node scales (when ``node_scales``) and the layer
        scale, each with a leading replicate axis when the layer is replicated.
        """
        out_features = self.out_features
        d = self.in_features + int(self.has_bias)
        lead: tuple[int, ...] = () if self.n_replicates is None else (self.n_replicates,)
        self.weight_mu = nn.Parameter(torch.empty((*lead, out_features, d), **factory))
        self.row_rho = nn.Parameter(torch.empty((*lead, d), **factory))
        self.row_factor = nn.Parameter(torch.empty((*lead, d), **factory))
        self.col_rho = nn.Parameter(torch.empty((*lead, out_features), **factory))
        if self.node_scales:
            self.node_loc = nn.Parameter(torch.empty((*lead, out_features), **factory))
            self.node_rho = nn.Parameter(torch.empty((*lead, out_features), **factory))
        else:
            self.register_parameter("node_loc", None)
            self.register_parameter("node_rho", None)
        self.layer_loc = nn.Parameter(torch.empty((*lead, 1), **factory))
        self.layer_rho = nn.Parameter(torch.empty((*lead, 1), **factory))

    def reset_parameters(
        self,
        init_rho: float = -6.0,
        init_mu_range: float | None = None,
        init_log_scale: float = 0.0,
        init_scale_rho: float = -6.0,
    ) -> None:
        """Initialise (draws from ``self.generator``); see the class docstring."""
        r = 1.0 / math.sqrt(self.fan_in) if init_mu_range is None else float(init_mu_range)
        a0 = float(F.softplus(torch.tensor(init_rho, dtype=torch.float64)))
        with torch.no_grad():
            self.weight_mu.uniform_(-r, r, generator=self.generator)
            self.row_rho.fill_(init_rho)
            # h = 0 is a stationary point of the objective (every gradient of h is
            # proportional to h), so it starts small but nonzero.
            self.row_factor.uniform_(-a0, a0, generator=self.generator)
            self.col_rho.fill_(_inv_softplus(1.0))
            if self.node_loc is not None and self.node_rho is not None:
                self.node_loc.fill_(init_log_scale)
                self.node_rho.fill_(init_scale_rho)
            self.layer_loc.fill_(init_log_scale)
            self.layer_rho.fill_(init_scale_rho)

    # -- summaries ---------------------------------------------------------------------
    def n_params(self) -> int:
        return self.out_features * (self.fan_in + int(self.has_bias))

    def _split(self, t: Tensor) -> tuple[Tensor, Tensor | None]:
        if self.has_bias:
            return t[..., : self.fan_in], t[..., self.fan_in]
        return t, None

    def _log_scale_moments(self) -> tuple[Tensor, Tensor]:
        """Location and variance of ``log(tau_k v)``, each ``(out,)`` or ``(R, out)``."""
        loc = self.layer_loc.expand(*self.layer_loc.shape[:-1], self.out_features)
        var = F.softplus(self.layer_rho).pow(2).expand_as(loc)
        if self.node_loc is not None and self.node_rho is not None:
            loc = loc + self.node_loc
            var = var + F.softplus(self.node_rho).pow(2)
        return loc, var

    def expected_scales(self) -> Tensor:
        """``E_q[tau_k v]`` per node, ``(out,)`` or ``(R, out)``."""
        loc, var = self._log_scale_moments()
        return torch.exp(loc + 0.5 * var)

    def sample_scales(self) -> Tensor:
        """One draw of the node scales ``tau_k v`` (``v`` alone without node scales).

        Returns
        -------
        Tensor
            ``(out,)`` or ``(R, out)``.
        """
        p = self.layer_loc
        eps_g = torch.randn(p.shape, generator=self.generator, dtype=p.dtype, device=p.device)
        log_s = self.layer_loc + F.softplus(self.layer_rho) * eps_g
        log_s = log_s.expand(*p.shape[:-1], self.out_features)
        if self.node_loc is not None and self.node_rho is not None:
            eps = torch.randn(
                self.node_loc.shape, generator=self.generator, dtype=p.dtype, device=p.device
            )
            log_s = log_s + self.node_loc + F.softplus(self.node_rho) * eps
        return torch.exp(log_s)

    def node_kept(self) -> Tensor:
        """Nodes kept by the relative rule of the module docstring, ``(out,)`` or ``(R, out)``."""
        with torch.no_grad():
            if not self.node_scales:
                return torch.ones(
                    self.weight_mu.shape[:-1], dtype=torch.bool, device=self.weight_mu.device
                )
            w, _ = self._split(self.weight_mu)
            norms = self.expected_scales() * w.norm(dim=-1)
            top = norms.amax(dim=-1, keepdim=True)
            return norms >= self.prune_ratio * top

    def kept_mask(self) -> Tensor:
        """Weights into kept nodes, ``(out, in)`` (``(R, out, in)``) bool."""
        keep = self.node_kept()
        return keep.unsqueeze(-1).expand(*keep.shape, self.fan_in)

    def kept_bias_mask(self) -> Tensor | None:
        """Biases of kept nodes; ``None`` without bias."""
        return self.node_kept() if self.has_bias else None

    def kl_divergence(self) -> Tensor:
        """Exact KL of weights and scales (auxiliaries profiled); ``(R,)`` when replicated."""
        q = Horseshoe(
            self.weight_mu,
            self.row_rho,
            self.row_factor,
            self.col_rho,
            self.layer_loc,
            self.layer_rho,
            self.node_loc,
            self.node_rho,
        )
        return kl_divergence(q, HorseshoePrior(self.global_scale, self.local_scale))

    # -- sampling ----------------------------------------------------------------------
    def _row_factors(self) -> tuple[Tensor, Tensor, Tensor]:
        return F.softplus(self.row_rho), self.row_factor, F.softplus(self.col_rho)

    def sample_flat(self) -> Tensor:
        """Weights (bias column included) under the current mode, ``weight_mu``-shaped."""
        m = self.weight_mu
        if self.mode is ForwardMode.MEAN:
            return m * self.expected_scales().unsqueeze(-1)
        if self.mode is ForwardMode.MEDIAN:
            return m * torch.exp(self._log_scale_moments()[0]).unsqueeze(-1)
        a, h, c = self._row_factors()
        e1 = torch.randn(m.shape, generator=self.generator, dtype=m.dtype, device=m.device)
        e2 = torch.randn(m.shape[:-1], generator=self.generator, dtype=m.dtype, device=m.device)
        # Row k of the draw: M_k + c_k (a * e1_k + e2_k h), covariance c_k^2 (diag(a^2) + h h^T).
        noise = a.unsqueeze(-2) * e1 + e2.unsqueeze(-1) * h.unsqueeze(-2)
        beta = m + c.unsqueeze(-1) * noise
        return beta * self.sample_scales().unsqueeze(-1)

    def sample_weights(self) -> tuple[Tensor, Tensor | None]:
        return self._split(self.sample_flat())

    def _local_reparam(self, x: Tensor) -> Tensor:
        a, h, c = self._row_factors()
        w_mu, b_mu = self._split(self.weight_mu)
        a_w, a_b = self._split(a)
        h_w, h_b = self._split(h)
        if self.n_replicates is None:
            mean = F.linear(x, w_mu, b_mu)
            quad = (x * x) @ (a_w * a_w)
            proj = x @ h_w
        else:
            if x.dim() != 3 or x.shape[0] != self.n_replicates:
                raise ValueError(
                    f"replicated layer expects input (R={self.n_replicates}, m, in), "
                    f"got {tuple(x.shape)}"
                )
            mean = torch.bmm(x, w_mu.transpose(1, 2))
            if b_mu is not None:
                mean = mean + b_mu.unsqueeze(1)
            quad = torch.einsum("rmi,ri->rm", x * x, a_w * a_w)
            proj = torch.einsum("rmi,ri->rm", x, h_w)
        if a_b is not None and h_b is not None:
            # The bias input is the constant 1: it adds a_b^2 and h_b to every row.
            if self.n_replicates is None:
                quad, proj = quad + a_b * a_b, proj + h_b
            else:
                quad, proj = quad + (a_b * a_b).unsqueeze(-1), proj + h_b.unsqueeze(-1)
        # x^T U x for every row, times the output-side variances c_k^2.
        var = (quad + proj * proj).unsqueeze(-1) * (c * c).unsqueeze(-2)
        eps = torch.randn(mean.shape, generator=self.generator, dtype=x.dtype, device=x.device)
        # var > 0 mathematically; the floor only guards the square root's gradient against
        # underflow of very small a and h in float32.
        pre = torch.addcmul(mean, torch.sqrt(var.clamp_min(torch.finfo(var.dtype).tiny)), eps)
        scales = self.sample_scales()
        return pre * (scales if self.n_replicates is None else scales.unsqueeze(1))

    def forward(self, x: Tensor) -> Tensor:
        if self._frozen is None and self.mode is ForwardMode.SAMPLE:
            return self._local_reparam(x)
        w, b = self._weights()
        if self.n_replicates is None:
            return F.linear(x, w, b)
        if x.dim() != 3 or x.shape[0] != self.n_replicates:
            raise ValueError(
                f"replicated layer expects input (R={self.n_replicates}, m, in), "
                f"got {tuple(x.shape)}"
            )
        out = torch.bmm(x, w.transpose(1, 2))
        return out if b is None else out + b.unsqueeze(1)

    def extra_repr(self) -> str:
        rep = f", n_replicates={self.n_replicates}" if self.n_replicates is not None else ""
        return (
            f"in={self.fan_in}, out={self.out_features}, bias={self.has_bias}, "
            f"node_scales={self.node_scales}, local_scale={self.local_scale}, "
            f"global_scale={self.global_scale}{rep}"
        )


class HorseshoeMLP(VariationalMLP):
    """HS-BNN: hidden layers with node-wise horseshoe scales, an output layer with one scale.

    Parameters
    ----------
    in_features, hidden_sizes, out_features, activation :
        As :class:`svbnn.nn.SpikeSlabMLP`.
    local_scale, global_scale : float
        ``b_0`` and ``b_g`` of the hidden layers.
    output_scale : float
        ``b_kappa`` of the output layer's single scale (default 1).
    **layer_kwargs
        Passed to every :class:`HorseshoeLinear` (init, replicates, generator, ...).
    """

    def __init__(
        self,
        in_features: int,
        hidden_sizes: tuple[int, ...] | list[int],
        out_features: int,
        activation: str = "relu",
        *,
        local_scale: float = 1.0,
        global_scale: float = 1.0,
        output_scale: float = 1.0,
        **layer_kwargs: Any,
    ) -> None:
        super().__init__(
            in_features,
            hidden_sizes,
            out_features,
            activation,
            layer_cls=HorseshoeLinear,
            output_kwargs={"node_scales": False, "global_scale": output_scale},
            local_scale=local_scale,
            global_scale=global_scale,
            **layer_kwargs,
        )
