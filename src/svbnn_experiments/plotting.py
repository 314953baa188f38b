"""Matplotlib figures of the artifacts (Agg backend, PNG files)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from .files import atomic_savefig

__all__ = [
    "draw_network",
    "plot_gumbel",
    "plot_lambda_sweep",
    "plot_linear_toy",
    "plot_network",
    "pyplot",
]


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _network_inputs(
    masks: Sequence[NDArray[Any]],
    shown_inputs: Sequence[int] | None,
    rel: list[int],
    max_inputs: int,
) -> tuple[list[int], NDArray[Any]]:
    """The inputs to draw, and all inputs with a first-layer edge.

    Parameters
    ----------
    masks : sequence of bool arrays
        Per layer, ``(out, in)`` masks of the edges.
    shown_inputs : sequence of int or None
        Inputs asked for; ``None``: inputs with an edge plus ``rel``, at most ``max_inputs``
        (the relevant ones first) when the first layer is not pruned.
    rel : list of int
        Truly relevant inputs.
    max_inputs : int

    Returns
    -------
    inputs : list of int
        0-based inputs to draw.
    used : ndarray of int
        0-based inputs with an edge.
    """
    used = np.flatnonzero(masks[0].any(axis=0))
    if shown_inputs is None:
        inputs = sorted(set(used.tolist()) | set(rel))
        if len(inputs) > max_inputs:
            # An unpruned first layer: draw the relevant inputs and the first others only.
            others = [j for j in inputs if j not in rel][: max(0, max_inputs - len(rel))]
            inputs = sorted(set(rel) | set(others))
    else:
        inputs = list(shown_inputs)
    return inputs, used


def _node_positions(layer_nodes: list[list[int]]) -> list[dict[int, tuple[float, float]]]:
    """Per layer, the ``(x, y)`` of each node: layers spread over ``x`` in [0, 1], nodes
    centred on ``y = 0`` (spread over up to [-0.5, 0.5] with their number)."""
    n_layers = len(layer_nodes)
    pos: list[dict[int, tuple[float, float]]] = []
    for li, nodes in enumerate(layer_nodes):
        k = len(nodes)
        ys = np.linspace(0.5, -0.5, k) * (min(1.0, k / 8) if k > 1 else 0)
        pos.append(
            {node: (li / (n_layers - 1), float(y)) for node, y in zip(nodes, ys, strict=True)}
        )
    return pos


def _active_nodes(masks: Sequence[NDArray[Any]], used: NDArray[Any]) -> list[set[int]]:
    """Per layer, the nodes touched by an edge (drawn solid; the rest are faded)."""
    active: list[set[int]] = [set(used.tolist())]
    for li, m in enumerate(masks):
        active.append(set(np.flatnonzero(m.any(axis=1)).tolist()))
        if li > 0:
            active[li] |= set(np.flatnonzero(m.any(axis=0)).tolist())
    return active


def _draw_edges(
    ax: Any,
    masks: Sequence[NDArray[Any]],
    pos: list[dict[int, tuple[float, float]]],
    weights: Sequence[NDArray[Any]] | None,
) -> None:
    """Draw the kept edges between drawn nodes: grey, or coloured by the weight's sign
    (red positive, blue negative) with widths by its magnitude."""
    wmax = max(
        (float(np.abs(w[masks[i]]).max()) for i, w in enumerate(weights or []) if masks[i].any()),
        default=1.0,
    )
    for li, m in enumerate(masks):
        outs, ins = np.nonzero(m)
        for o, i in zip(outs.tolist(), ins.tolist(), strict=True):
            if i not in pos[li] or o not in pos[li + 1]:
                continue
            (x0, y0), (x1, y1) = pos[li][i], pos[li + 1][o]
            if weights is not None:
                w = float(weights[li][o, i])
                color = "tab:red" if w > 0 else "tab:blue"
                lw = 0.5 + 2.5 * abs(w) / wmax
            else:
                color, lw = "0.3", 1.0
            ax.plot([x0, x1], [y0, y1], color=color, lw=lw, alpha=0.7, zorder=1)


def _draw_nodes(
    ax: Any,
    layer_nodes: list[list[int]],
    pos: list[dict[int, tuple[float, float]]],
    active: list[set[int]],
    rel: list[int],
) -> None:
    """Draw the nodes, the inputs labelled ``x1, x2, ...`` (relevant ones bold), output ``y``."""
    n_layers = len(layer_nodes)
    for li, nodes in enumerate(layer_nodes):
        for node in nodes:
            x, y = pos[li][node]
            on = node in active[li]
            ax.scatter(
                [x],
                [y],
                s=160,
                zorder=2,
                color="white" if on else "0.92",
                edgecolors="black" if on else "0.7",
            )
            if li == 0:
                bold = node in rel
                ax.annotate(
                    f"x{node + 1}",
                    (x, y),
                    xytext=(-8, 0),
                    textcoords="offset points",
                    ha="right",
                    va="center",
                    fontsize=8,
                    fontweight="bold" if bold else "normal",
                )
            elif li == n_layers - 1:
                ax.annotate(
                    "y",
                    (x, y),
                    xytext=(8, 0),
                    textcoords="offset points",
                    ha="left",
                    va="center",
                    fontsize=9,
                )


def _note_undrawn(ax: Any, hidden: int, n_undrawn: int, edge_word: str) -> None:
    """Note below the drawing how many inputs with an edge are not drawn (``n_undrawn``)
    and how many have none (``hidden``)."""
    notes = []
    if n_undrawn:
        notes.append(f"{n_undrawn} more inputs with a\n{edge_word}, not drawn")
    if hidden > 0:
        notes.append(f"{hidden} other inputs,\nno {edge_word}")
    if notes:
        ax.text(0.0, -0.62, "(" + ";\n".join(notes) + ")", ha="center", va="top", fontsize=7)


def draw_network(
    ax: Any,
    masks: Sequence[NDArray[Any]],
    *,
    weights: Sequence[NDArray[Any]] | None = None,
    shown_inputs: Sequence[int] | None = None,
    relevant: Sequence[int] = (),
    title: str = "",
    edge_word: str = "kept edge",
    max_inputs: int = 30,
) -> None:
    """Draw a layered network: nodes per layer, the kept edges (``masks[l]`` of ``(out, in)``).

    Parameters
    ----------
    ax : matplotlib Axes
    masks : sequence of bool arrays
        Per layer, ``(out, in)`` masks of the edges to draw.
    weights : sequence of arrays, optional
        Same shapes; edge colour by sign, width by magnitude.
    shown_inputs : sequence of int, optional
        0-based inputs to draw (default: inputs with an edge, plus ``relevant``).
    relevant : sequence of int
        Truly relevant inputs, labelled in bold.
    title : str
    """
    p = masks[0].shape[1]
    rel = [int(j) for j in relevant]
    inputs, used = _network_inputs(masks, shown_inputs, rel, max_inputs)
    n_undrawn = len(set(used.tolist()) - set(inputs))
    layer_nodes: list[list[int]] = [inputs] + [list(range(m.shape[0])) for m in masks]
    pos = _node_positions(layer_nodes)
    _draw_edges(ax, masks, pos, weights)
    _draw_nodes(ax, layer_nodes, pos, _active_nodes(masks, used), rel)
    _note_undrawn(ax, p - len(inputs) - n_undrawn, n_undrawn, edge_word)
    ax.set_xlim(-0.15, 1.1)
    ax.set_ylim(-0.75, 0.62)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=10)


def plot_network(
    path: Path,
    masks: Sequence[NDArray[Any]],
    *,
    weights: Sequence[NDArray[Any]] | None = None,
    relevant: Sequence[int] = (),
    title: str = "",
) -> Path:
    """Save a single network drawing as PNG."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    draw_network(ax, masks, weights=weights, relevant=relevant, title=title)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=150)
    plt.close(fig)
    return path


def _sweep_panel(
    ax: Any, panel: str, summary: Sequence[Mapping[str, Any]], log10_opt: float
) -> None:
    """One RMSE panel of the lambda figure: train and test RMSE (mean ± sd) against lambda.

    Parameters
    ----------
    ax : matplotlib Axes
    panel : {"a", "b"}
        ``"a"``: the lambdas <= lambda_opt against log10(lambda); ``"b"``: those >=
        lambda_opt against lambda.
    summary, log10_opt
        As in :func:`plot_lambda_sweep`.
    """
    pts = sorted((s for s in summary if panel in s["panel"]), key=lambda s: s["log10_lambda"])
    if panel == "a":
        x = np.array([s["log10_lambda"] for s in pts])
        xo = log10_opt
        ax.set_xlabel("log10(lambda)")
        ax.set_title("(a) lambda <= lambda_opt", fontsize=10)
    else:
        x = np.array([10.0 ** s["log10_lambda"] for s in pts])
        xo = 10.0**log10_opt
        ax.set_xlabel("lambda")
        ax.set_title("(b) lambda >= lambda_opt", fontsize=10)
    for key, label, color in (
        ("train", "train RMSE", "tab:blue"),
        ("test", "test RMSE", "tab:orange"),
    ):
        mean = np.array([s[f"{key}_mean"] for s in pts], dtype=float)
        sd = np.array([s[f"{key}_sd"] for s in pts], dtype=float)
        sd = np.where(np.isfinite(sd), sd, 0.0)
        ax.errorbar(x, mean, yerr=sd, marker="o", ms=4, capsize=3, label=label, color=color)
    ax.axvline(xo, color="0.4", ls="--", lw=1)
    ylim = ax.get_ylim()
    ax.text(xo, ylim[1], " lambda_opt", va="top", ha="left", fontsize=8, color="0.3")
    ax.set_ylabel("RMSE")
    ax.legend(fontsize=8)


def plot_lambda_sweep(
    path: Path,
    summary: Sequence[Mapping[str, Any]],
    log10_opt: float,
    *,
    title: str = "",
    teacher: tuple[Sequence[NDArray[Any]], Sequence[NDArray[Any]], Sequence[int]] | None = None,
) -> Path:
    """The paper's lambda figure: (a) lambda <= lambda_opt, (b) lambda >= lambda_opt, (c) teacher.

    Parameters
    ----------
    summary : sequence of dict
        Per lambda: ``log10_lambda``, ``panel`` ("a", "b" or "ab"), and the means and sds
        ``train_mean``, ``train_sd``, ``test_mean``, ``test_sd``.
    log10_opt : float
        ``log10(lambda_opt)``, marked with a dashed line.
    teacher : (masks, weights, relevant), optional
        Draw the teacher network as panel (c).
    """
    plt = pyplot()
    n_panels = 3 if teacher is not None else 2
    fig, axes = plt.subplots(1, n_panels, figsize=(4.6 * n_panels, 3.8))
    for ax, panel in zip(axes[:2], ("a", "b"), strict=True):
        _sweep_panel(ax, panel, summary, log10_opt)
    if teacher is not None:
        masks, weights, relevant = teacher
        draw_network(
            axes[2],
            masks,
            weights=weights,
            relevant=relevant,
            title="(c) teacher network",
            edge_word="edge",
        )
    if title:
        fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=150)
    plt.close(fig)
    return path


def plot_linear_toy(path: Path, beta: NDArray[Any], estimates: Mapping[str, NDArray[Any]]) -> Path:
    """Posterior means ``E[beta_j] = phi_j mu_j`` against the truth, one panel per sampler."""
    plt = pyplot()
    fig, axes = plt.subplots(1, len(estimates), figsize=(5.2 * len(estimates), 3.6), sharey=True)
    axes = np.atleast_1d(axes)
    j = np.arange(1, len(beta) + 1)
    names = {"gumbel": "(a) Gumbel-softmax", "inverse_cdf": "(b) inverse CDF"}
    for ax, (name, est) in zip(axes, estimates.items(), strict=True):
        ax.plot(j, beta, color="tab:red", lw=1.2, label="true beta")
        ax.plot(j, est, color="tab:blue", lw=1.0, label="posterior mean phi*mu")
        ax.set_title(names.get(name, name), fontsize=10)
        ax.set_xlabel("j")
        ax.legend(fontsize=8)
    axes[0].set_ylabel("beta_j")
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=150)
    plt.close(fig)
    return path


def plot_gumbel(
    path: Path,
    u: NDArray[Any],
    alpha: NDArray[Any],
    curves_u: Mapping[float, NDArray[Any]],
    curves_alpha: Mapping[float, NDArray[Any]],
    hard_u: NDArray[Any],
    hard_alpha: NDArray[Any],
    phi: float,
    u_fixed: float,
) -> Path:
    """``g_tau`` against ``u`` (fixed phi) and against alpha (fixed u), with the hard gate."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for ax, x, curves, hard, xlabel, title in (
        (axes[0], u, curves_u, hard_u, "u", f"(a) phi = {phi}"),
        (axes[1], alpha, curves_alpha, hard_alpha, "alpha = logit(phi)", f"(b) u = {u_fixed}"),
    ):
        for tau, g in curves.items():
            ax.plot(x, g, lw=1.2, label=f"g_tau, tau = {tau:g}")
        ax.plot(x, hard, color="black", lw=1.5, ls="--", label="g (hard gate)")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("gate")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=150)
    plt.close(fig)
    return path


def finite(v: Any) -> float:
    """``float(v)``, NaN for missing values."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return math.nan
    return f
