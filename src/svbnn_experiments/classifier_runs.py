"""Training runs of the real-data classifiers, resumable, with one row of test metrics per
epoch, and the report pieces the classification artifacts share.

Every method trains with a checkpoint written after each epoch into
``<out>/checkpoints/<method>.pt``; a rerun into the same folder resumes from it (the
continued run is the uninterrupted one, bit for bit, for the Bayesian methods) and
``results.csv`` keeps one row per method and finished epoch.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm.auto import tqdm

from svbnn.checkpoint import load_checkpoint
from svbnn.data import MNIST_MEAN, MNIST_STD, load_mnist
from svbnn.objectives import CategoricalLikelihood
from svbnn.pruning import AGPPruner, agp_schedule, apply_masks, ensure_masks
from svbnn.training import History, loss_objective, train

from .classifiers import (
    METHOD_CODE,
    SEED_CLS_EVAL,
    SEED_CLS_TRAIN,
    ClassifierSpec,
    build_classifier,
    evaluate_classifier,
    kept_fraction,
    set_flip_generator,
)
from .common import RunConfig, derive_seed
from .files import atomic_savefig, atomic_write_text
from .paper_values import METHOD_LABELS
from .plotting import pyplot
from .realdata import (
    EpochBook,
    check_real_methods,
    checkpoint_epoch,
    data_dir_param,
)
from .report import markdown_table, settings_section

__all__ = [
    "checkpoint_identity",
    "classifier_spec",
    "curve_table",
    "first_rows",
    "fit_classifier",
    "build_on_device",
    "load_images",
    "load_trained",
    "per_epoch_table",
    "plot_curves",
    "run_comparison",
    "settings_text",
]


def _agp_schedule(spec: ClassifierSpec, steps_per_epoch: int) -> dict[str, int]:
    """AGP's steps (:func:`svbnn.pruning.agp_schedule`): from the first step to
    ``agp_end_fraction`` of the run, a mask update every ``agp_frequency`` steps."""
    total = spec.epochs * steps_per_epoch
    n_updates = max(1, math.floor(spec.agp_end_fraction * total) // max(1, spec.agp_frequency))
    t0, n, dt = agp_schedule(total, 0.0, spec.agp_end_fraction, n_updates)
    return {"begin_step": t0, "frequency": dt, "n_updates": n}


def _agp_pruner(
    spec: ClassifierSpec, model: nn.Module, steps_per_epoch: int, ckpt: Path
) -> tuple[AGPPruner, dict[str, int]]:
    """AGP's pruner and its schedule, restored from ``ckpt`` when it exists.

    Parameters
    ----------
    spec : ClassifierSpec
    model : nn.Module
        The network, with masks (:func:`svbnn.pruning.ensure_masks`).
    steps_per_epoch : int
    ckpt : Path
        Checkpoint file; a resumed run keeps the schedule of the original run (so that it
        prunes as it would have) and its current sparsity.

    Returns
    -------
    pruner : AGPPruner
    schedule : dict
        ``begin_step``, ``frequency`` and ``n_updates``, saved with every checkpoint.
    """
    schedule = _agp_schedule(spec, steps_per_epoch)
    extra: dict[str, Any] = {}
    if ckpt.exists():
        extra = dict(load_checkpoint(ckpt).get("extra", {}))
        # The schedule of the original run is kept, so a resumed run prunes as it would have.
        schedule = dict(extra.get("schedule", schedule))
    pruner = AGPPruner(
        model,
        spec.agp_density,
        begin_step=schedule["begin_step"],
        n_updates=schedule["n_updates"],
        frequency=schedule["frequency"],
    )
    if "current_sparsity" in extra:
        pruner.current_sparsity = float(extra["current_sparsity"])
    return pruner, schedule


def _fit_agp(
    spec: ClassifierSpec,
    model: nn.Module,
    X: Tensor,
    y: Tensor,
    ckpt: Path,
    on_epoch: Callable[[int, nn.Module, dict[str, float]], None],
    identity: Mapping[str, Any] | None = None,
) -> None:
    """AGP training (cross-entropy, masks recomputed on Zhu & Gupta's cubic schedule) with a
    checkpoint after every epoch, resumed from ``ckpt`` when it exists."""
    n = int(X.shape[0])
    n_batches = math.ceil(n / min(spec.batch_size, n))
    ensure_masks(model)
    pruner, schedule = _agp_pruner(spec, model, n_batches, ckpt)

    def callback(epoch: int, model: nn.Module, history: History) -> None:
        on_epoch(epoch, model, {"train_loss": float(history.loss[-1])})

    train(
        model,
        X,
        y,
        objective=loss_objective(F.cross_entropy),
        epochs=spec.epochs,
        batch_size=spec.batch_size,
        lr=spec.lr,
        optimizer=spec.optimizer,
        generator=torch.Generator(device=spec.device).manual_seed(spec.seed),
        verbose=spec.progress,
        checkpoint_path=ckpt,
        checkpoint_every=1,
        resume=True,
        callbacks=[callback],
        track_sparsity=False,
        on_step=pruner.step,
        replicated=False,
        identity=identity,
        checkpoint_extra=lambda: {
            "schedule": schedule,
            "current_sparsity": pruner.current_sparsity,
        },
    )
    apply_masks(model)


def _fit_bayesian(
    spec: ClassifierSpec,
    model: nn.Module,
    X: Tensor,
    y: Tensor,
    ckpt: Path,
    on_epoch: Callable[[int, nn.Module, dict[str, float]], None],
    identity: Mapping[str, Any] | None = None,
) -> None:
    """Variational training (negative ELBO; SVBNN's KL term weighted by ``spec.kl_weight``)
    with a checkpoint after every epoch, resumed from ``ckpt`` when it exists.

    ``on_epoch`` receives the epoch's training loss, NLL and KL per datum.
    """
    gen = torch.Generator(device=spec.device).manual_seed(spec.seed)
    set_flip_generator(model, gen)

    def callback(epoch: int, model: nn.Module, history: History) -> None:
        losses = {
            "train_loss": float(history.loss[-1]),
            "train_nll": float(history.nll[-1]),
            "kl_per_datum": float(history.kl[-1]),
        }
        on_epoch(epoch, model, losses)

    train(
        model,
        X,
        y,
        CategoricalLikelihood(),
        epochs=spec.epochs,
        batch_size=spec.batch_size,
        lr=spec.lr,
        optimizer=spec.optimizer,
        generator=gen,
        verbose=spec.progress,
        checkpoint_path=ckpt,
        checkpoint_every=1,
        resume=True,
        callbacks=[callback],
        track_sparsity=False,
        kl_weight=spec.kl_weight if spec.method == "svbnn" else 1.0,
        identity=identity,
    )
    set_flip_generator(model, None)


def _epoch_recorder(
    spec: ClassifierSpec,
    X_test: Tensor,
    y_test: Tensor,
    book: EpochBook,
    extra: dict[str, Any] | None,
) -> Callable[[int, nn.Module, dict[str, float]], None]:
    """The per-epoch callback of :func:`fit_classifier`: evaluate on the test set, add a row.

    ``record(epoch, model, losses)`` adds (and saves) one row of ``book`` with the test
    metrics, the kept fraction, ``losses``, the epoch's training time (counted from this
    call or the previous record) and the columns of ``extra``.
    """
    method = spec.method
    chunk = 1000 if spec.arch == "cnn" else 2000
    clock = [time.perf_counter()]

    def record(epoch: int, model: nn.Module, losses: dict[str, float]) -> None:
        train_s = time.perf_counter() - clock[0]
        egen = torch.Generator(device=spec.device).manual_seed(derive_seed(spec.eval_seed, epoch))
        t0 = time.perf_counter()
        metrics = evaluate_classifier(
            model, method, X_test, y_test, spec.eval_draws, egen, chunk_size=chunk
        )
        sp, de = kept_fraction(model, method)
        row = {
            "method": method,
            "epoch": epoch,
            **metrics,
            "sparsity_pct": sp,
            "density_pct": de,
            **losses,
            "epoch_train_s": train_s,
            "eval_s": time.perf_counter() - t0,
            "eval_draws": spec.eval_draws if method != "agp" else 0,
            **(extra or {}),
        }
        book.add(row)
        book.save()
        clock[0] = time.perf_counter()

    return record


def build_on_device(spec: ClassifierSpec, n_train: int) -> tuple[nn.Module, dict[str, Any]]:
    """:func:`build_classifier` initialised by a CPU generator seeded with ``spec.seed``
    (one seed, one starting point on every device), then moved to ``spec.device``."""
    model, info = build_classifier(spec, n_train, torch.Generator().manual_seed(spec.seed))
    return model.to(spec.device), info


def fit_classifier(
    spec: ClassifierSpec,
    model: nn.Module,
    data: tuple[Tensor, Tensor, Tensor, Tensor],
    ckpt: Path,
    book: EpochBook,
    extra: dict[str, Any] | None = None,
    identity: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Train ``model`` (resuming from ``ckpt``), recording test metrics after every epoch.

    Parameters
    ----------
    spec : ClassifierSpec
    model : nn.Module
        From :func:`build_on_device`.
    data : tuple
        ``X_train, y_train, X_test, y_test``, on ``spec.device``.
    ckpt : Path
        Checkpoint file (written after every epoch; resumed from if present).
    book : EpochBook
        Receives one row per epoch (``method``, ``epoch``, accuracy, sparsity, ...).
    extra : dict, optional
        Columns added to every row.
    identity : mapping, optional
        The run's identity (:func:`checkpoint_identity`), saved in every checkpoint: a
        checkpoint of another run is refused, naming the setting.

    Returns
    -------
    dict
        ``resumed_from`` (epoch), ``epochs_done``, ``train_s`` (this call).
    """
    X, y, X_test, y_test = data
    start = checkpoint_epoch(ckpt)
    book.truncate(spec.method, start)
    book.save()
    t_start = time.perf_counter()
    record = _epoch_recorder(spec, X_test, y_test, book, extra)
    if spec.method == "agp":
        _fit_agp(spec, model, X, y, ckpt, record, identity)
    else:
        _fit_bayesian(spec, model, X, y, ckpt, record, identity)
    return {
        "resumed_from": start,
        "epochs_done": max(spec.epochs, start),
        "train_s": time.perf_counter() - t_start,
    }


def load_trained(folder: Path, method: str) -> tuple[nn.Module, dict[str, Any]] | None:
    """A classifier trained by the ``mnist`` artifact in ``folder`` (``None`` if absent)."""
    ckpt = folder / "checkpoints" / f"{method}.pt"
    meta_path = folder / "checkpoints" / "meta.json"
    if not (ckpt.exists() and meta_path.exists()):
        return None
    meta = json.loads(meta_path.read_text())
    if meta.get("arch") != "mlp" or method not in meta.get("methods", {}):
        return None
    spec = ClassifierSpec(
        method=method,
        arch="mlp",
        hidden=tuple(meta["hidden"]),
        epochs=0,
        batch_size=1,
        lr=1.0,
        optimizer="rmsprop",
    )
    model, _ = build_classifier(spec, int(meta["n_train"]), torch.Generator().manual_seed(0))
    state = load_checkpoint(ckpt)
    if method == "agp":
        ensure_masks(model)
    model.load_state_dict(state["model"])
    return model, {"checkpoint": str(ckpt), "epoch": int(state["epoch"]), **meta}


# ------------------------------------------------------------------------------- data
def first_rows(X: Tensor, y: Tensor, n: int) -> tuple[Tensor, Tensor]:
    """The first ``n`` rows (``n <= 0``: all). The official files are in random order."""
    if n <= 0 or n >= X.shape[0]:
        return X, y
    return X[:n], y[:n]


def load_images(
    cfg: RunConfig, *, fashion: bool, flatten: bool
) -> tuple[tuple[Tensor, Tensor, Tensor, Tensor], dict[str, Any]]:
    P = cfg.params
    raw = load_mnist(data_dir_param(P), fashion=fashion)
    mean = MNIST_MEAN if not fashion else raw.default_mean
    std = MNIST_STD if not fashion else raw.default_std
    X, y, Xt, yt = raw.to_tensors(mean, std, flatten=flatten)
    X, y = first_rows(X, y, int(P.get("n_train", 0)))
    Xt, yt = first_rows(Xt, yt, int(P.get("n_test", 0)))
    # The images go to the run's device once (the networks train there).
    X, y, Xt, yt = (t.to(cfg.device) for t in (X, y, Xt, yt))
    info = {
        "dataset": raw.name,
        "n_train": int(X.shape[0]),
        "n_test": int(Xt.shape[0]),
        "normalisation": [mean, std],
    }
    return (X, y, Xt, yt), info


def classifier_spec(cfg: RunConfig, method: str, arch: str) -> ClassifierSpec:
    P = cfg.params
    code = METHOD_CODE.get(method, 9)
    art = 1 if arch == "mlp" else 2
    lr = float(P["lr_svbnn"] if method == "svbnn" else P["lr_baselines"])
    hidden = tuple(int(h) for h in P["hidden"]) if arch == "mlp" else (int(P["fc_hidden"]),)
    return ClassifierSpec(
        method=method,
        arch=arch,
        hidden=hidden,
        epochs=cfg.epochs,
        batch_size=int(P["batch_size"]),
        lr=lr,
        optimizer=str(P["optimizer"]),
        prior_variance=float(P.get("prior_variance", 2.0)),
        kl_weight=float(P.get("kl_weight", 1.0)),
        eval_draws=int(P["eval_draws"]),
        flip=bool(P.get("flip", False)),
        agp_density=float(P.get("agp_density", 0.05)),
        agp_end_fraction=float(P.get("agp_end_fraction", 0.5)),
        agp_frequency=int(P.get("agp_frequency", 100)),
        seed=derive_seed(cfg.seed, SEED_CLS_TRAIN, art, code),
        eval_seed=derive_seed(cfg.seed, SEED_CLS_EVAL, art, code),
        progress=cfg.progress,
        device=cfg.device,
    )


def run_comparison(
    cfg: RunConfig, *, arch: str, allowed: Sequence[str], fashion: bool
) -> dict[str, Any]:
    methods = check_real_methods(cfg.methods, allowed, cfg.artifact)
    if cfg.epochs < 1:
        raise ValueError("--epochs must be at least 1")
    data, data_info = load_images(cfg, fashion=fashion, flatten=arch == "mlp")
    ckpt_dir = cfg.out / "checkpoints"
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    meta_path = ckpt_dir / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    hidden = (
        [int(h) for h in cfg.params["hidden"]] if arch == "mlp" else [int(cfg.params["fc_hidden"])]
    )
    if meta and (meta.get("hidden") != hidden or meta.get("arch") != arch):
        raise ValueError(
            f"{ckpt_dir} holds checkpoints of another network ({meta.get('arch')} "
            f"{meta.get('hidden')}); use another --out or delete the folder"
        )
    meta.update({"arch": arch, "hidden": hidden, "n_train": data_info["n_train"]})
    meta.setdefault("methods", {})
    book = EpochBook(cfg.out / "results.csv")
    runs: dict[str, Any] = {}
    for method in methods:
        spec = classifier_spec(cfg, method, arch)
        model, info = build_on_device(spec, data_info["n_train"])
        if cfg.progress:
            tqdm.write(
                f"{cfg.artifact}: {METHOD_LABELS.get(method, method)}, {spec.epochs} epochs, "
                f"lr {spec.lr:g}, T = {info['n_params']}"
            )
        old = meta["methods"].get(method, {})
        if (ckpt_dir / f"{method}.pt").exists() and (
            old.get("lr", spec.lr) != spec.lr
            or (method == "svbnn" and old.get("kl_weight", 1.0) != spec.kl_weight)
        ):
            raise ValueError(
                f"--out {cfg.out}: the {method} checkpoint there was trained with other settings "
                f"({old}); resume with them or use another --out"
            )
        meta["methods"][method] = {"lr": spec.lr, "epochs_planned": spec.epochs}
        if method == "svbnn":
            meta["methods"][method]["kl_weight"] = spec.kl_weight
        atomic_write_text(meta_path, json.dumps(meta, indent=2) + "\n")
        ident = checkpoint_identity(cfg, method)
        fit = fit_classifier(spec, model, data, ckpt_dir / f"{method}.pt", book, identity=ident)
        runs[method] = {**info, **fit, "lr": spec.lr, "seed": spec.seed}
    return {"data": data_info, "runs": runs, "checkpoints": str(ckpt_dir)}


def checkpoint_identity(cfg: RunConfig, method: str) -> dict[str, Any]:
    """The identity a checkpoint of ``method`` in the run ``cfg`` records: the run's
    (:func:`svbnn_experiments.runner.run_identity`) but for ``epochs`` (a run continues to
    more epochs; :func:`svbnn.training.train` refuses a checkpoint beyond them), ``--set``
    values as ``--set KEY``, and the method."""
    from .runner import run_identity  # runner imports the artifacts, hence this module

    ident = run_identity(cfg)
    ident.pop("epochs", None)
    params = ident.pop("params", {})
    return {**ident, **{f"--set {k}": v for k, v in params.items()}, "method": method}


def plot_curves(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    plt = pyplot()
    methods = list(dict.fromkeys(r["method"] for r in rows))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for m in methods:
        mr = sorted((r for r in rows if r["method"] == m), key=lambda r: int(r["epoch"]))
        ep = [int(r["epoch"]) for r in mr]
        label = METHOD_LABELS.get(m, m)
        ax1.plot(
            ep,
            [float(r["test_acc"]) for r in mr],
            marker="." if len(ep) < 40 else None,
            label=label,
        )
        ax2.plot(
            ep,
            [float(r["sparsity_pct"]) for r in mr],
            marker="." if len(ep) < 40 else None,
            label=label,
        )
    ax1.set_xlabel("epoch")
    ax1.set_ylabel("test accuracy (%)")
    ax1.set_title("Test accuracy")
    ax2.set_xlabel("epoch")
    ax2.set_ylabel("kept (%)")
    ax2.set_yscale("log")
    ax2.set_title("Sparsity (SVBNN: sum(phi)/T)")
    for ax in (ax1, ax2):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    atomic_savefig(fig, path, dpi=120)
    plt.close(fig)


def curve_table(rows: list[dict[str, Any]], paper: dict[str, Any] | None) -> str:
    methods = list(dict.fromkeys(r["method"] for r in rows))
    headers = [
        "Method",
        "epochs",
        "final test acc. (%)",
        "best test acc. (%) [epoch]",
        "final sparsity (%)",
    ]
    if paper is not None:
        headers.append("final sparsity (paper, 400 epochs)")
    headers += ["density phi>0.5 (%)", "s/epoch (train)", "eval draws"]
    table = []
    for m in methods:
        mr = sorted((r for r in rows if r["method"] == m), key=lambda r: int(r["epoch"]))
        last = mr[-1]
        best = max(mr, key=lambda r: float(r["test_acc"]))
        line = [
            METHOD_LABELS.get(m, m),
            str(last["epoch"]),
            f"{float(last['test_acc']):.2f}",
            f"{float(best['test_acc']):.2f} [{best['epoch']}]",
            f"{float(last['sparsity_pct']):.2f}",
        ]
        if paper is not None:
            v = paper.get(m)
            line.append("-" if v is None else f"{v[0]:.2f}")
        line += [
            f"{float(last['density_pct']):.2f}" if m == "svbnn" else "-",
            f"{np.median([float(r['epoch_train_s']) for r in mr]):.1f}",
            str(last.get("eval_draws", "")),
        ]
        table.append(line)
    return markdown_table(headers, table)


def per_epoch_table(rows: list[dict[str, Any]], max_rows: int = 60) -> str:
    methods = list(dict.fromkeys(r["method"] for r in rows))
    epochs = sorted({int(r["epoch"]) for r in rows})
    if len(epochs) > max_rows:
        step = math.ceil(len(epochs) / max_rows)
        keep = set(epochs[::step]) | {epochs[-1]}
        epochs = [e for e in epochs if e in keep]
    by = {(r["method"], int(r["epoch"])): r for r in rows}
    headers = ["epoch"]
    for m in methods:
        lab = METHOD_LABELS.get(m, m)
        headers += [f"{lab} acc. (%)", f"{lab} sparsity (%)"]
    table = []
    for e in epochs:
        line = [str(e)]
        for m in methods:
            r = by.get((m, e))
            line += (
                [f"{float(r['test_acc']):.2f}", f"{float(r['sparsity_pct']):.2f}"]
                if r
                else ["", ""]
            )
        table.append(line)
    return markdown_table(headers, table)


def settings_text(settings: dict[str, Any]) -> str:
    return settings_section(
        settings,
        [
            ("config.methods", "methods"),
            ("config.epochs", "epochs"),
            ("data.dataset", "data"),
            ("data.n_train", "training images"),
            ("data.n_test", "test images"),
            ("config.params.hidden", "hidden layers"),
            ("config.params.fc_hidden", "FC hidden width"),
            ("config.params.batch_size", "minibatch"),
            ("config.params.optimizer", "optimizer"),
            ("config.params.lr_svbnn", "learning rate SVBNN"),
            ("config.params.lr_baselines", "learning rate baselines"),
            ("config.params.prior_variance", "prior variance sigma_0^2"),
            ("config.params.kl_weight", "SVBNN's KL weight (1: exact ELBO)"),
            ("config.params.eval_draws", "posterior draws per evaluation"),
            ("config.params.agp_density", "AGP final density"),
            ("config.seed", "base seed"),
            ("config.threads", "torch threads"),
            ("config.quick", "quick mode"),
            ("wall_time_s", "wall time (s)"),
            ("environment.git.commit", "git commit"),
            ("environment.command", "command"),
        ],
    )
