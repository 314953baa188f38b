"""The ``mnist-uq`` artifact (supplement): three ambiguous images, each the pixel average of
two test images (digits 5+6, 2+3, 2+7), and their predictive distributions: SVBNN's average
of the softmax vectors of 100 posterior draws against AGP's softmax.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray
from torch import Tensor, nn

from svbnn.checkpoint import atomic_write_bytes
from svbnn.data import MNIST_MEAN, MNIST_STD, load_mnist
from svbnn.prediction import sample_outputs

from .classifier_runs import (
    build_on_device,
    checkpoint_identity,
    classifier_spec,
    fit_classifier,
    load_images,
    load_trained,
)
from .classifiers import SEED_UQ
from .common import RunConfig, derive_seed
from .files import atomic_savefig, read_csv, read_settings, write_csv
from .mnist import MNIST_DEFAULTS, MNIST_QUICK
from .paper_values import METHOD_LABELS
from .plotting import pyplot
from .realdata import (
    EpochBook,
    data_dir_param,
)
from .registry import Timing, register_artifact
from .report import markdown_table, settings_section, write_report

__all__ = ["UQ_DEFAULTS", "UQ_PAIRS", "mnist_uq", "overlay_images", "report_mnist_uq"]

UQ_PAIRS: tuple[tuple[int, int], ...] = ((5, 6), (2, 3), (2, 7))
"""Digit pairs of the supplement's overlaid images (top to bottom)."""


# --------------------------------------------------------------------- mnist-uq artifact
def overlay_images(
    images: NDArray[np.uint8],
    labels: NDArray[Any],
    pairs: Sequence[tuple[int, int]] = UQ_PAIRS,
    occurrence: int = 0,
) -> tuple[NDArray[np.float64], list[tuple[int, int]]]:
    """Pixel averages of two test images per digit pair.

    Parameters
    ----------
    images : ndarray, shape (n, 28, 28)
        0..255.
    labels : ndarray, shape (n,)
    pairs : sequence of (int, int)
    occurrence : int
        Use the ``occurrence``-th image (0-based) of each digit in test-set order.

    Returns
    -------
    overlays : ndarray, shape (len(pairs), 28, 28)
        On the 0..255 scale.
    indices : list of (int, int)
        Test-set indices of the two images of each pair.
    """
    out, idx = [], []
    for a, b in pairs:
        ia, ib = np.flatnonzero(labels == a), np.flatnonzero(labels == b)
        if len(ia) <= occurrence or len(ib) <= occurrence:
            raise ValueError(f"the test set has too few images of digits {a} and {b}")
        i, j = int(ia[occurrence]), int(ib[occurrence])
        out.append((images[i].astype(np.float64) + images[j].astype(np.float64)) / 2.0)
        idx.append((i, j))
    return np.stack(out), idx


def _normalise(img: NDArray[np.float64]) -> Tensor:
    x = (img / 255.0 - MNIST_MEAN) / MNIST_STD
    return torch.tensor(x.reshape(len(img), -1), dtype=torch.float32)


UQ_DEFAULTS: dict[str, Any] = {
    **MNIST_DEFAULTS,
    "epochs": 400,
    "source": "",
    "uq_draws": 100,
    "occurrence": 0,
}
"""``source``: folder of a finished ``mnist`` run whose checkpoints are reused, named
explicitly (``--set source=results/mnist``); without it, SVBNN and AGP are trained here.
Nothing is loaded from a folder the user did not name."""


def _train_here(
    cfg: RunConfig,
    method: str,
    data: tuple[Tensor, Tensor, Tensor, Tensor],
    book: EpochBook,
) -> tuple[nn.Module, dict[str, Any]]:
    """Train one of the two models in the run folder (resuming from its checkpoint).

    Parameters
    ----------
    cfg : RunConfig
    method : {"svbnn", "agp"}
    data : tuple
        ``X_train, y_train, X_test, y_test`` (:func:`load_images`).
    book : EpochBook
        Receives the per-epoch rows (``training.csv``).

    Returns
    -------
    model : nn.Module
    origin : dict
        How it was obtained: training information, sizes and the checkpoint.
    """
    spec = classifier_spec(cfg, method, "mlp")
    model, info = build_on_device(spec, int(data[0].shape[0]))
    ckpt_dir = cfg.out / "checkpoints"
    ident = checkpoint_identity(cfg, method)
    fit = fit_classifier(spec, model, data, ckpt_dir / f"{method}.pt", book, identity=ident)
    meta = {
        "arch": "mlp",
        "hidden": list(spec.hidden),
        "n_train": int(data[0].shape[0]),
        "methods": {method: {"lr": spec.lr}},
    }
    origin = {
        "origin": "trained here",
        **info,
        **fit,
        **meta,
        "checkpoint": str(ckpt_dir / f"{method}.pt"),
    }
    return model, origin


def _uq_models(cfg: RunConfig, source: Path | None) -> tuple[dict[str, nn.Module], dict[str, Any]]:
    """SVBNN and AGP: reused from ``source``'s checkpoints when there, else trained here.

    Parameters
    ----------
    cfg : RunConfig
    source : Path or None
        Folder of a finished ``mnist`` run (never the run folder itself).

    Returns
    -------
    models : dict
        ``svbnn`` and ``agp``.
    origins : dict
        Per method, where the model comes from (``settings.json``'s ``models``).
    """
    origins: dict[str, Any] = {}
    models: dict[str, nn.Module] = {}
    data: tuple[Tensor, Tensor, Tensor, Tensor] | None = None
    book: EpochBook | None = None
    for method in ("svbnn", "agp"):
        found = (
            load_trained(source, method)
            if source is not None and source.resolve() != cfg.out.resolve()
            else None
        )
        if found is not None:
            models[method], origins[method] = found
            models[method].to(cfg.device)
            origins[method]["origin"] = "reused"
            continue
        if data is None:
            data, data_info = load_images(cfg, fashion=False, flatten=True)
            book = EpochBook(cfg.out / "training.csv")
        assert book is not None
        models[method], origins[method] = _train_here(cfg, method, data, book)
    return models, origins


def _uq_rows(
    idx: list[tuple[int, int]],
    svbnn_p: NDArray[Any],
    svbnn_sd: NDArray[Any],
    agp_p: NDArray[Any],
) -> list[dict[str, Any]]:
    """Rows of ``results.csv``: per pair and method, the class probabilities and entropy.

    Parameters
    ----------
    idx : list of (int, int)
        Test-set indices of the two images of each pair of ``UQ_PAIRS``.
    svbnn_p, svbnn_sd : ndarray, shape (len(UQ_PAIRS), 10)
        Mean and sd over SVBNN's posterior draws of the softmax vectors.
    agp_p : ndarray, shape (len(UQ_PAIRS), 10)
        AGP's softmax vectors.

    Returns
    -------
    list of dict
    """
    rows = []
    for k, ((a, b), (i, j)) in enumerate(zip(UQ_PAIRS, idx, strict=True)):
        for method, probs, sds in (("svbnn", svbnn_p, svbnn_sd), ("agp", agp_p, None)):
            p = probs[k]
            row: dict[str, Any] = {
                "pair": f"{a}+{b}",
                "digit_a": a,
                "digit_b": b,
                "index_a": i,
                "index_b": j,
                "method": method,
                "top_class": int(p.argmax()),
                "top_prob": float(p.max()),
                "entropy": float(-(p * np.log(np.clip(p, 1e-300, None))).sum()),
            }
            for c in range(10):
                row[f"p{c}"] = float(p[c])
            if sds is not None:
                for c in range(10):
                    row[f"sd{c}"] = float(sds[k, c])
            rows.append(row)
    return rows


def _save_overlays(
    out: Path, images: NDArray[Any], idx: list[tuple[int, int]], overlays: NDArray[Any]
) -> None:
    """``overlays.npz``: the two test images of each pair and their overlay (for the report)."""
    buf = io.BytesIO()
    np.savez_compressed(
        buf,
        first=np.stack([images[i] for i, _ in idx]),
        second=np.stack([images[j] for _, j in idx]),
        overlay=overlays,
    )
    atomic_write_bytes(out / "overlays.npz", buf.getvalue())


@register_artifact(
    "mnist-uq",
    description="Supplement MNIST UQ figure: predictive distributions of overlaid digits vs AGP",
    report=lambda out: report_mnist_uq(out),
    defaults=UQ_DEFAULTS,
    quick={**MNIST_QUICK, "uq_draws": 10},
    options=("device",),
    group="real-data",
    # With the mnist artifact's SVBNN checkpoint in place: AGP, 400 epochs at 5.0 s.
    timing=Timing(quick_s=8.4, full_s=2000.0),
)
def mnist_uq(cfg: RunConfig) -> dict[str, Any]:
    P = cfg.params
    source = Path(P["source"]) if P.get("source") else None
    if source is not None and not (source / "checkpoints" / "meta.json").exists():
        raise ValueError(f"--set source={source}: no mnist run there (no checkpoints/meta.json)")
    raw = load_mnist(data_dir_param(P))
    models, origins = _uq_models(cfg, source)
    overlays, idx = overlay_images(raw.x_test, raw.y_test, UQ_PAIRS, int(P["occurrence"]))
    X = _normalise(overlays).to(cfg.device)
    gen = torch.Generator(device=cfg.device).manual_seed(derive_seed(cfg.seed, SEED_UQ))
    H = int(P["uq_draws"])
    draws = sample_outputs(models["svbnn"], X, H, generator=gen, transform="softmax").cpu()
    svbnn_p, svbnn_sd = draws.mean(0).double().numpy(), draws.std(0).double().numpy()  # (3, 10)
    with torch.no_grad():
        models["agp"].eval()
        agp_p = torch.softmax(models["agp"](X), -1).cpu().double().numpy()
    write_csv(cfg.out / "results.csv", _uq_rows(idx, svbnn_p, svbnn_sd, agp_p))
    _save_overlays(cfg.out, raw.x_test, idx, overlays)
    return {
        "source": str(source) if source is not None else "",
        "models": origins,
        "pairs": [list(p) for p in UQ_PAIRS],
        "indices": [list(t) for t in idx],
    }


def _plot_uq(
    rows: list[dict[str, Any]], images: dict[str, NDArray[Any]], path: Path, draws: Any
) -> None:
    plt = pyplot()
    pairs = list(dict.fromkeys(r["pair"] for r in rows))
    fig, axes = plt.subplots(
        len(pairs),
        4,
        figsize=(11, 2.4 * len(pairs)),
        gridspec_kw={"width_ratios": [1, 1, 1, 3.2]},
        squeeze=False,
    )
    for k, pair in enumerate(pairs):
        for c, key in enumerate(("first", "second", "overlay")):
            ax = axes[k, c]
            ax.imshow(images[key][k], cmap="gray_r", vmin=0, vmax=255)
            ax.set_xticks([])
            ax.set_yticks([])
            if k == 0:
                ax.set_title({"first": "image 1", "second": "image 2", "overlay": "overlaid"}[key])
        ax = axes[k, 3]
        width = 0.4
        cls = np.arange(10)
        for off, method, colour in ((-width / 2, "svbnn", "C0"), (width / 2, "agp", "C3")):
            r = next(x for x in rows if x["pair"] == pair and x["method"] == method)
            p = [float(r[f"p{c}"]) for c in cls]
            err = [float(r[f"sd{c}"]) for c in cls] if method == "svbnn" else None
            ax.bar(
                cls + off,
                p,
                width,
                color=colour,
                yerr=err,
                capsize=2,
                label=f"SVBNN ({draws} draws)" if method == "svbnn" else "AGP (softmax)",
            )
        ax.set_xticks(cls)
        ax.set_ylim(0, 1.05)
        ax.set_ylabel(f"P(class), {pair}")
        if k == 0:
            ax.legend(loc="upper right", fontsize=8)
    axes[-1, 3].set_xlabel("digit")
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=120)
    plt.close(fig)


def _probability_table(rows: list[dict[str, Any]]) -> str:
    """Per pair and method: the top class, the entropy and the ten class probabilities.

    Parameters
    ----------
    rows : list of dict
        Rows of ``results.csv``.

    Returns
    -------
    str
        A Markdown table.
    """
    headers = ["pair", "test indices", "method", "top class (prob.)", "entropy (nats)"] + [
        str(c) for c in range(10)
    ]
    table = []
    for r in rows:
        table.append(
            [
                r["pair"],
                f"{r['index_a']}, {r['index_b']}",
                METHOD_LABELS.get(r["method"], r["method"]),
                f"{r['top_class']} ({float(r['top_prob']):.3f})",
                f"{float(r['entropy']):.3f}",
                *[f"{float(r[f'p{c}']):.3f}" for c in range(10)],
            ]
        )
    return markdown_table(headers, table)


def _models_section(settings: dict[str, Any]) -> str:
    """``## Models``: where each model comes from (reused or trained here), and its epoch."""
    models = settings.get("models", {})
    origin = []
    for m, info in models.items():
        origin.append(
            f"- {METHOD_LABELS.get(m, m)}: {info.get('origin')} "
            f"({info.get('checkpoint')}, epoch {info.get('epoch', info.get('epochs_done'))})"
        )
    return "## Models\n\n" + "\n".join(origin)


_UQ_INTRO = (
    "Each ambiguous input is the pixel average of two MNIST test images (the first "
    "test image of each digit unless `occurrence` says otherwise). SVBNN's predictive "
    "distribution is the average of the softmax vectors of `uq_draws` posterior draws "
    "(error bars: their sd across draws); AGP's is the softmax of its pruned network. "
    "The paper's point: AGP is nearly certain of one digit, SVBNN spreads its "
    "probability over the two digits."
)

_UQ_SETTINGS = [
    ("config.params.uq_draws", "posterior draws"),
    ("source", "checkpoint folder looked up"),
    ("config.epochs", "epochs (if trained here)"),
    ("config.seed", "base seed"),
    ("config.quick", "quick mode"),
    ("wall_time_s", "wall time (s)"),
    ("environment.git.commit", "git commit"),
]


def report_mnist_uq(out: Path) -> None:
    """``report.md`` and ``mnist_uq.png`` of the ``mnist-uq`` artifact."""
    rows = read_csv(out / "results.csv")
    settings = read_settings(out)
    with np.load(out / "overlays.npz") as z:
        images = {k: z[k] for k in ("first", "second", "overlay")}
    draws = settings.get("config", {}).get("params", {}).get("uq_draws", "?")
    _plot_uq(rows, images, out / "mnist_uq.png", draws)
    write_report(
        out,
        "MNIST uncertainty quantification on overlaid digits (supplement figure)",
        [
            _UQ_INTRO,
            "![overlaid digits and predictive distributions](mnist_uq.png)",
            _probability_table(rows),
            _models_section(settings),
            "## Settings\n\n" + settings_section(settings, _UQ_SETTINGS),
        ],
    )
