"""Latency, accuracy and size of the compacted export (:func:`svbnn.export.export_compact`)
against the plain dense network, on trained networks.

Usage::

    python -m benchmarks.export_latency --mnist LABEL=CHECKPOINT [...] [--tabular]
        [--crossover] [--rounds 15] [--out docs/results/export]

* ``--mnist LABEL=CHECKPOINT``: an MNIST 784-512-512-10 SVBNN checkpoint written by
  ``svbnn reproduce mnist`` (``<out>/checkpoints/svbnn.pt``). Its median model is timed as
  a plain float32 ``nn.Linear`` network at full size ("dense") against the export, in the
  same runtime: PyTorch against PyTorch, onnxruntime against onnxruntime
  (``intra_op_num_threads=1``); batch 1, 64 and 1000, one thread, interleaved rounds,
  medians. Also the multiply-add ratio (dense / the export's nonzero weights: the
  physical limit of the speed-up), the median model's accuracy on the 10,000 test images
  (and whether the export's argmax equals the dense median model's on every row) and the
  sizes on disk.
* ``--tabular``: ``SVBNNClassifier`` defaults on digits and breast cancer with 10 added
  N(0, 1) columns (75/25 split, seed 0): ``torch.export`` of the export, ONNX export,
  onnxruntime's classes against ``predict_proba``'s; ``SVBNNRegressor`` defaults on
  diabetes and Friedman #1 (with 10 noise columns): how far the median model's
  predictions are from ``predict``'s posterior mean. Latency as above.
* ``--agreement-seeds K``: how often the median model's classes agree with
  ``predict_proba``'s, over ``K`` fits of ``SVBNNClassifier`` defaults on digits and breast
  cancer (10 noise columns), split and estimator seeded ``0 .. K-1``; also against 1,000
  posterior draws, and ``predict_proba``'s own agreement with those; the same for the
  dense posterior-mean network (``phi * mu`` on every edge) and the moments export
  (``export_moments()``). No timings.
* ``--crossover``: one linear layer as a :class:`~svbnn.export.CompactMLP`, stored dense
  against sparse, at several densities and batch 1, 16, 64, 1000 (the storage rule of the
  export, :func:`~svbnn.export.sparse_is_faster`).

Writes ``results.csv`` (one row per measured quantity), ``report.md`` and
``settings.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from svbnn.checkpoint import load_checkpoint
from svbnn.export import (
    MOMENT_MIN_INCLUSION,
    CompactMLP,
    MomentLinear,
    SparseLinear,
    _csr_matrix,
    export_compact,
    export_draws,
    export_onnx,
    module_size_bytes,
)
from svbnn.nn import SpikeSlabMLP

from .timing import Timing, time_interleaved

BATCHES = (1, 64, 1000)


def _cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or platform.machine()
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.machine()


def dense_median(model: SpikeSlabMLP, threshold: float = 0.5) -> nn.Sequential:
    """The median model at full size as plain float32 ``nn.Linear`` layers."""
    mods: list[nn.Module] = []
    layers = model.layers()
    for k, layer in enumerate(layers):
        with torch.no_grad():
            flat = (layer.mu * (torch.sigmoid(layer.alpha) > threshold)).float()
        w, b = layer._split(flat)
        lin = nn.Linear(layer.fan_in, layer.out_features)
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(b if b is not None else torch.zeros(layer.out_features))
        mods.append(lin)
        if k < len(layers) - 1:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods).eval().requires_grad_(False)


def dense_macs(module: nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


def export_macs(module: nn.Module) -> int:
    """Multiply-adds per row with zero weights skipped (nonzero weights of every layer)."""
    n = 0
    for m in module.modules():
        if isinstance(m, nn.Linear):
            n += int((m.weight != 0).sum())
        elif isinstance(m, (SparseLinear, CompactMLP)):
            n += m.nnz()
    return n


def storage_of(module: nn.Module) -> str:
    """Each linear layer's storage, ``/``-joined (and a :class:`CompactMLP`'s layout)."""
    for m in module.modules():
        if isinstance(m, CompactMLP):
            return "/".join(m.storage) + f" ({m.layout})"
    return "/".join(
        "sparse" if isinstance(m, SparseLinear) else "dense"
        for m in module.modules()
        if isinstance(m, (SparseLinear, nn.Linear))
    )


def _ort_session(path: Path) -> Any:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])


def time_pair(
    fns: dict[str, Any], rounds: int, min_block_s: float = 0.02, warmup: int = 3
) -> dict[str, Timing]:
    return time_interleaved(fns, rounds, min_block_s, warmup)


def latency_rows(
    name: str,
    dense: nn.Module,
    exports: dict[int, nn.Module],
    p: int,
    rounds: int,
    tmp: Path,
    macs: tuple[int, int],
) -> list[dict[str, Any]]:
    """PyTorch vs PyTorch and onnxruntime vs onnxruntime at each batch size.

    ``exports``: the export made for each batch size (its storage rule's choice); the
    ONNX graph stores every layer dense, so one serves all batches.
    """
    rows: list[dict[str, Any]] = []
    export_onnx(dense, tmp / f"{name}-dense.onnx", n_features=p)
    export_onnx(exports[BATCHES[0]], tmp / f"{name}-export.onnx", n_features=p)
    sess = {k: _ort_session(tmp / f"{name}-{k}.onnx") for k in ("dense", "export")}
    gen = torch.Generator().manual_seed(0)
    for batch in BATCHES:
        x = torch.randn(batch, p, generator=gen)
        xn = x.numpy()
        export = exports[batch]

        def run_torch(m: nn.Module, x: torch.Tensor = x) -> None:
            with torch.inference_mode():
                m(x)

        t = time_pair(
            {"dense": lambda: run_torch(dense), "export": lambda e=export: run_torch(e)}, rounds
        )
        o = time_pair(
            {
                "dense": lambda xn=xn: sess["dense"].run(None, {"x": xn}),
                "export": lambda xn=xn: sess["export"].run(None, {"x": xn}),
            },
            rounds,
        )
        for runtime, tt in (("pytorch", t), ("onnxruntime", o)):
            per = zip(tt["dense"].per_round, tt["export"].per_round, strict=True)
            ratios = [a / b for a, b in per]
            speedup = float(np.median(ratios))
            rows.append(
                {
                    "network": name,
                    "runtime": runtime,
                    "batch": batch,
                    "storage": "dense (ONNX)" if runtime == "onnxruntime" else storage_of(export),
                    "dense_ms": tt["dense"].median * 1e3,
                    "export_ms": tt["export"].median * 1e3,
                    "speedup": speedup,
                    "speedup_q1": float(np.percentile(ratios, 25)),
                    "speedup_q3": float(np.percentile(ratios, 75)),
                    "mac_ratio": macs[0] / macs[1],
                    "speedup_over_mac_ratio": speedup / (macs[0] / macs[1]),
                    "rounds": rounds,
                }
            )
    return rows


def breakdown(
    name: str, dense: nn.Module, export: nn.Module, p: int, batch: int, rounds: int
) -> list[dict[str, Any]]:
    """Where the export's time goes at one batch size: each step of its forward alone,
    and each layer's product in the other storages torch has on the CPU (dense, the
    ``F.embedding_bag`` sum of the export's sparse layers, CSR and COO ``addmm``, and at
    one row the CSR ``torch.addmv`` of the export's sparse layers), on
    the layer's own input, in the layout the export runs at this batch size."""
    (flat,) = [m for m in export.modules() if isinstance(m, CompactMLP)]
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(batch, p, generator=gen)
    idx = flat.index
    vector = flat.layout == "rows" and batch == 1
    fns: dict[str, Any] = {
        "dense network (all of it)": lambda: dense(x),
        "export (all of it)": lambda: export(x),
    }
    if vector:
        fns["input selection"] = lambda: x.view(-1).index_select(0, idx)
        h = x.view(-1).index_select(0, idx).unsqueeze(1)
    else:
        fns["input selection"] = lambda: x.t().index_select(0, idx)
        h = x.t().index_select(0, idx)
    layers = flat.layer_weights()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        for k, (w, b) in enumerate(layers):
            bc = b.unsqueeze(1)
            csr = w.to_sparse_csr()
            coo = w.to_sparse_coo().coalesce()
            cols, offs = csr.col_indices(), csr.crow_indices()
            vals = csr.values()
            tag = f"layer {k + 1} {tuple(w.shape)}"
            if vector:
                v = h[:, 0].contiguous()
                fns[f"{tag} dense"] = lambda b=b, w=w, v=v: torch.addmv(b, w, v)
            else:
                fns[f"{tag} dense"] = lambda bc=bc, w=w, h=h: torch.addmm(bc, w, h)
            fns[f"{tag} embedding_bag"] = lambda c=cols, o=offs, v=vals, h=h, bc=bc: (
                F.embedding_bag(
                    c, h, o, mode="sum", per_sample_weights=v, include_last_offset=True
                ).add_(bc)
            )
            if vector:  # the export's sparse product at one row (int32 indices)
                c32 = _csr_matrix(offs, cols, vals, (w.shape[0], w.shape[1]))
                fns[f"{tag} CSR addmv"] = lambda b=b, c32=c32, v=v: torch.addmv(b, c32, v)
            fns[f"{tag} CSR addmm"] = lambda bc=bc, csr=csr, h=h: torch.addmm(bc, csr, h)
            fns[f"{tag} COO addmm"] = lambda bc=bc, coo=coo, h=h: torch.sparse.addmm(bc, coo, h)
            if k < len(layers) - 1:
                nxt = torch.addmm(bc, w, h)
                fns[f"{tag} activation"] = lambda nxt=nxt: torch.relu(nxt)
                h = nxt.relu()
    with torch.inference_mode():
        t = time_pair(fns, rounds)
    return [
        {"network": name, "batch": batch, "step": k, "us": v.median * 1e6} for k, v in t.items()
    ]


def mnist_network(label: str, ckpt: Path, rounds: int, tmp: Path, n_test: int) -> dict[str, Any]:
    from svbnn.data import MNIST_MEAN, MNIST_STD, load_mnist

    state = load_checkpoint(ckpt)
    model = SpikeSlabMLP(784, (512, 512), 10)
    model.load_state_dict(state["model"])
    model.eval()
    epoch = int(state.get("epoch", -1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch's sparse-is-beta notice
        exports = {b: export_compact(model, batch_size=b)[0] for b in BATCHES}
        export, rep = export_compact(model)
    dense = dense_median(model)
    raw = load_mnist()
    _, _, Xt, yt = raw.to_tensors(MNIST_MEAN, MNIST_STD, flatten=True)
    Xt, yt = Xt[:n_test], yt[:n_test]
    with torch.inference_mode():
        pe, pd = export(Xt).argmax(1), dense(Xt).argmax(1)
        # Every export timed below (one per batch size) gives the dense median model's
        # argmax on every row; each run at its batch size (the code path timed: the
        # batch-1 export one row at a time, its matrix-vector products).
        equal_by_batch = {
            b: int((torch.cat([m(x) for x in Xt.split(b)]).argmax(1) == pd).sum())
            for b, m in exports.items()
        }
    macs = (dense_macs(dense), export_macs(export))
    info = {
        "network": label,
        "checkpoint": str(ckpt),
        "epoch": epoch,
        "density": rep.density,
        "layer_shapes": rep.layer_shapes,
        "layer_nonzero": rep.layer_nonzero,
        "layer_storage": rep.layer_storage,
        "kept_inputs": len(rep.kept_inputs or []),
        "test_rows": int(len(yt)),
        "accuracy_export": float((pe == yt).float().mean()),
        "accuracy_dense_median": float((pd == yt).float().mean()),
        "argmax_equal_rows": int((pe == pd).sum()),
        "argmax_equal_rows_by_batch": equal_by_batch,
        "dense_macs": macs[0],
        "export_macs": macs[1],
        "size_dense_bytes": module_size_bytes(dense),
        "size_export_bytes": rep.size_bytes,
    }
    rows = latency_rows(label, dense, exports, 784, rounds, tmp, macs)
    info["breakdown"] = [
        r for b in (1, 1000) for r in breakdown(label, dense, exports[b], 784, b, rounds)
    ]
    info["size_dense_onnx_bytes"] = (tmp / f"{label}-dense.onnx").stat().st_size
    info["size_export_onnx_bytes"] = (tmp / f"{label}-export.onnx").stat().st_size
    return {"info": info, "rows": rows}


def _noisy(X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return np.hstack([X, rng.normal(size=(len(X), 10))])


def _split(X: Any, y: Any, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``X`` with 10 N(0, 1) columns added, split 75/25 and standardised on the training
    rows (seed ``seed`` for the noise columns and the split)."""
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    X = _noisy(np.asarray(X, dtype=np.float64), np.random.default_rng(seed))
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=seed)
    sc = StandardScaler().fit(Xtr)
    return sc.transform(Xtr), sc.transform(Xte), ytr, yte


MOMENT_CUTS = (0.01, 0.05, 0.1, 0.2, 0.5)
"""The ``min_inclusion`` values of ``export_moments`` the agreement run compares (the
default, :data:`~svbnn.export.MOMENT_MIN_INCLUSION`, among them)."""
assert MOMENT_MIN_INCLUSION in MOMENT_CUTS


def moment_weights(module: nn.Module) -> int:
    """Nonzero mean weights of a moments export's layers."""
    return sum(int((m.weight != 0).sum()) for m in module if isinstance(m, MomentLinear))


def agreement(seeds: int, quick: bool) -> list[dict[str, Any]]:
    """Per classifier set and seed: the median model's (``est.export()``) classes against
    ``predict_proba``'s (its default draws) and against 1,000 posterior draws."""
    from sklearn.datasets import load_breast_cancer, load_digits

    from svbnn import SVBNNClassifier

    rows = []
    for name, load in (("digits", load_digits), ("breast_cancer", load_breast_cancer)):
        X, y = load(return_X_y=True)
        for seed in range(seeds):
            Xtr, Xte, ytr, yte = _split(X, y, seed)
            est = SVBNNClassifier(random_state=seed, **({"max_iter": 5} if quick else {}))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                est.fit(Xtr, ytr)
                module = est.export()
            with torch.inference_mode():
                median = module(torch.from_numpy(Xte)).numpy().argmax(1)
            proba = est.predict_proba(Xte).argmax(1)
            many = est.predict_proba(Xte, n_samples=1000).argmax(1)
            # The posterior-mean network, phi * mu on every edge (not sparse): what the
            # median model leaves out is the edges of phi <= 0.5, together.
            layers = est.module_.layers()
            mean_net = export_draws(
                [[layer.mean_weights() for layer in layers]],
                est.activation,
                int(est.n_features_in_),
                dtype=torch.float64,
            )
            with torch.inference_mode():
                mean = mean_net(torch.from_numpy(Xte))[0].numpy().argmax(1)
                # The moments export by the inclusion below which it leaves edges out (the
                # default among them).
                by_inclusion = {}
                for cut in MOMENT_CUTS:
                    mod = est.export_moments(min_inclusion=cut)
                    got = mod(torch.from_numpy(Xte)).numpy().argmax(1)
                    if cut == MOMENT_MIN_INCLUSION:
                        moments = got
                    by_inclusion[str(cut)] = [
                        float(np.mean(got == proba)),
                        float(np.mean(got == many)),
                        moment_weights(mod),
                    ]
            rows.append(
                {
                    "network": name,
                    "seed": seed,
                    "test_rows": len(Xte),
                    "class_agreement": float(np.mean(median == proba)),
                    "class_agreement_1000_draws": float(np.mean(median == many)),
                    "predict_vs_1000_draws": float(np.mean(proba == many)),
                    "mean_network_vs_predict": float(np.mean(mean == proba)),
                    "mean_network_vs_1000_draws": float(np.mean(mean == many)),
                    "moments_vs_predict": float(np.mean(moments == proba)),
                    "moments_vs_1000_draws": float(np.mean(moments == many)),
                    "moments_by_inclusion": by_inclusion,
                    "accuracy_predict": float(np.mean(est.classes_[proba] == yte)),
                    "accuracy_export": float(np.mean(est.classes_[median] == yte)),
                    "unresolved": float(est.unresolved_),
                }
            )
    return rows


def tabular(rounds: int, tmp: Path, quick: bool) -> dict[str, Any]:
    """Classifier defaults (digits, breast cancer) and regressor defaults (diabetes,
    Friedman #1), each with 10 noise columns, standardised on the training rows."""
    import onnxruntime as ort
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits, make_friedman1

    from svbnn import SVBNNClassifier, SVBNNRegressor

    sets: list[tuple[str, str, Any]] = [
        ("digits", "clf", load_digits(return_X_y=True)),
        ("breast_cancer", "clf", load_breast_cancer(return_X_y=True)),
        ("diabetes", "reg", load_diabetes(return_X_y=True)),
        ("friedman1", "reg", make_friedman1(n_samples=1000, n_features=10, random_state=0)),
    ]
    infos, rows = [], []
    for name, task, (X, y) in sets:
        Xtr, Xte, ytr, yte = _split(X, y, 0)
        kw: dict[str, Any] = {"random_state": 0}
        if quick:
            kw["max_iter"] = 5
        est = (SVBNNClassifier if task == "clf" else SVBNNRegressor)(**kw)
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est.fit(Xtr, ytr)
            module = est.export()
            fit_s = time.perf_counter() - t0
            path = tmp / f"{name}.onnx"
            est.export_onnx(path)
        info: dict[str, Any] = {"network": name, "task": task, "fit_s": fit_s}
        xt = torch.from_numpy(Xte)
        try:
            torch.export.export(module, (xt,))
            info["torch_export"] = "ok"
        except Exception as err:  # noqa: BLE001 - recorded, not raised
            info["torch_export"] = f"failed: {type(err).__name__}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            pred_module = est.export_predictive()
            est.export_onnx(tmp / f"{name}-pred.onnx", predictive=True)
            moments_module = est.export_moments()
            est.export_onnx(tmp / f"{name}-moments.onnx", predictive="moments")
        pred_onnx = ort.InferenceSession(str(tmp / f"{name}-pred.onnx")).run(None, {"x": Xte})[0]
        moments_onnx = ort.InferenceSession(str(tmp / f"{name}-moments.onnx")).run(
            None, {"x": Xte}
        )[0]
        with torch.inference_mode():
            moments_out = moments_module(xt).numpy()
        info["moments_onnx_vs_torch_max_abs"] = float(np.abs(moments_onnx - moments_out).max())
        info["moments_weights"] = moment_weights(moments_module)
        out = ort.InferenceSession(str(path)).run(None, {"x": Xte})[0]
        with torch.inference_mode():
            mod_out = module(xt).numpy()
        info["onnx_vs_torch_max_abs"] = float(np.abs(out - mod_out).max())
        info["test_rows"] = len(Xte)
        info["unresolved"] = est.unresolved_
        info["density"] = est.density_
        if task == "clf":
            proba = est.predict_proba(Xte)
            info["class_agreement"] = float(np.mean(out.argmax(1) == proba.argmax(1)))
            info["accuracy_predict"] = float(np.mean(est.classes_[proba.argmax(1)] == yte))
            info["accuracy_export"] = float(np.mean(est.classes_[out.argmax(1)] == yte))
            info["max_abs_proba_diff"] = float(np.abs(out - proba).max())
            info["predictive_class_agreement"] = float(
                np.mean(pred_onnx.argmax(1) == proba.argmax(1))
            )
            # predict_proba's own Monte Carlo error: its classes with the default draws
            # against 1,000 draws (the posterior predictive to within MC error), and the
            # export's agreement with those.
            proba_many = est.predict_proba(Xte, n_samples=1000)
            info["predict_vs_1000_draws_class_agreement"] = float(
                np.mean(proba.argmax(1) == proba_many.argmax(1))
            )
            info["class_agreement_1000_draws"] = float(
                np.mean(out.argmax(1) == proba_many.argmax(1))
            )
            info["predictive_max_abs_diff"] = float(np.abs(pred_onnx - proba).max())
            info["moments_class_agreement"] = float(
                np.mean(moments_onnx.argmax(1) == proba.argmax(1))
            )
            info["moments_class_agreement_1000_draws"] = float(
                np.mean(moments_onnx.argmax(1) == proba_many.argmax(1))
            )
            info["moments_max_abs_proba_diff"] = float(np.abs(moments_onnx - proba).max())
        else:
            pred = est.predict(Xte)
            sd = float(np.std(ytr))
            info["rms_export_vs_predict_over_sd_y"] = float(
                np.sqrt(np.mean((out - pred) ** 2)) / sd
            )
            info["max_abs_export_vs_predict_over_sd_y"] = float(np.abs(out - pred).max() / sd)
            info["rmse_predict_over_sd_y"] = float(np.sqrt(np.mean((pred - yte) ** 2)) / sd)
            info["rmse_export_over_sd_y"] = float(np.sqrt(np.mean((out - yte) ** 2)) / sd)
            info["predictive_max_abs_diff_over_sd_y"] = float(np.abs(pred_onnx - pred).max() / sd)
            info["rms_moments_vs_predict_over_sd_y"] = float(
                np.sqrt(np.mean((moments_onnx - pred) ** 2)) / sd
            )
        dense = dense_median(est.module_)
        head = est._export_head()
        dense_full = nn.Sequential(*dense, *head).eval()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compact, rep = export_compact(est.module_)
        macs = (dense_macs(dense), export_macs(compact))
        info.update(
            layer_shapes=rep.layer_shapes,
            kept_inputs=len(rep.kept_inputs or []),
            n_features=Xtr.shape[1],
            dense_macs=macs[0],
            export_macs=macs[1],
            size_dense_bytes=module_size_bytes(dense_full),
            size_export_bytes=module_size_bytes(module),
        )
        # Dense on float32 inputs as a plain network would take them; the export on the
        # same float32 rows (its cast is then a no-op).
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            exports = {b: est.export(batch_size=b) for b in BATCHES}
        rows += latency_rows(name, dense_full, exports, Xtr.shape[1], rounds, tmp, macs)
        # The predictive export (n_samples_predict draws, float64) against the dense median
        # model, PyTorch, at batch 1 and 1000.
        for batch in (1, 1000):
            xb = torch.from_numpy(Xte[np.arange(batch) % len(Xte)].astype(np.float32))

            def fwd(m: nn.Module, x: torch.Tensor = xb) -> None:
                with torch.inference_mode():
                    m(x)

            tt = time_pair(
                {
                    "dense": lambda d=dense_full: fwd(d),
                    "pred": lambda m=pred_module: fwd(m),
                    "moments": lambda m=moments_module: fwd(m),
                },
                rounds,
            )
            info[f"predictive_ms_batch{batch}"] = tt["pred"].median * 1e3
            info[f"moments_ms_batch{batch}"] = tt["moments"].median * 1e3
            info[f"dense_ms_batch{batch}"] = tt["dense"].median * 1e3
        infos.append(info)
    return {"info": infos, "rows": rows}


CROSSOVER_BATCHES = (1, 4, 8, 16, 64, 1000)


def crossover(rounds: int) -> list[dict[str, Any]]:
    """One linear layer as :class:`CompactMLP`, stored dense against sparse, by density.

    Each in the layout :func:`export_compact` gives it at that batch size: at batch 1 the
    ``"rows"`` layout (matrix-vector products, ``torch.addmv`` of the dense or the CSR
    matrix), otherwise ``"features"`` (sparse: ``F.embedding_bag``), except a
    dense layer below 16 rows (``"rows"``).
    """
    rows = []
    gen = torch.Generator().manual_seed(0)
    for out_f, in_f in ((128, 128), (256, 256), (512, 512), (512, 784), (1024, 1024)):
        for dens in (0.01, 0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4):
            w = torch.randn(out_f, in_f, generator=gen)
            w = w * (torch.rand(out_f, in_f, generator=gen) < dens)
            b = torch.randn(out_f, generator=gen)
            idx = torch.arange(in_f)
            for batch in CROSSOVER_BATCHES:
                layout = "rows" if batch < 16 else "features"
                lin = CompactMLP(idx, in_f, [w], [b], ["dense"], "relu", layout).eval()
                sp_layout = "rows" if batch == 1 else "features"
                sp = CompactMLP(idx, in_f, [w], [b], ["sparse"], "relu", sp_layout).eval()
                x = torch.randn(batch, in_f, generator=gen)

                def fwd(m: nn.Module, x: torch.Tensor = x) -> None:
                    with torch.inference_mode():
                        m(x)

                fns = {"dense": lambda m=lin: fwd(m), "sparse": lambda m=sp: fwd(m)}
                t = time_pair(fns, rounds)
                per = zip(t["dense"].per_round, t["sparse"].per_round, strict=True)
                ratios = [a / c for a, c in per]
                rows.append(
                    {
                        "network": f"layer {out_f}x{in_f}",
                        "runtime": "pytorch",
                        "batch": batch,
                        "density": dens,
                        "dense_ms": t["dense"].median * 1e3,
                        "export_ms": t["sparse"].median * 1e3,
                        "speedup": float(np.median(ratios)),
                        "rounds": rounds,
                    }
                )
    return rows


def _fmt_rows(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| network | runtime | batch | export layers | dense ms | export ms | speed-up [IQR] | "
        "multiply-add ratio | speed-up / ratio |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['network']} | {r['runtime']} | {r['batch']} | {r['storage']} | "
            f"{r['dense_ms']:.4g} | "
            f"{r['export_ms']:.4g} | {r['speedup']:.2f}x [{r['speedup_q1']:.2f}-"
            f"{r['speedup_q3']:.2f}] | {r['mac_ratio']:.1f} | {r['speedup_over_mac_ratio']:.2f} |"
        )
    return "\n".join(lines)


def _fmt_crossover(rows: list[dict[str, Any]]) -> str:
    dens = sorted({r["density"] for r in rows})
    lines = [
        "| layer | batch | " + " | ".join(f"{100 * d:g}%" for d in dens) + " |",
        "|---|---|" + "---|" * len(dens),
    ]
    keys = sorted({(r["network"], r["batch"]) for r in rows}, key=lambda k: (k[0], k[1]))
    for net, batch in keys:
        cells = []
        for d in dens:
            r = next(
                x for x in rows if x["network"] == net and x["batch"] == batch and x["density"] == d
            )
            cells.append(f"{r['speedup']:.2f}")
        lines.append(f"| {net} | {batch} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mnist", action="append", default=[], metavar="LABEL=CHECKPOINT")
    ap.add_argument("--tabular", action="store_true")
    ap.add_argument("--crossover", action="store_true")
    ap.add_argument("--agreement-seeds", type=int, default=0, metavar="K")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--n-test", type=int, default=10000, help="MNIST test rows (all: 10000)")
    ap.add_argument("--quick", action="store_true", help="tabular fits of 5 epochs (smoke)")
    ap.add_argument("--out", type=Path, default=Path("results/export"))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    started = datetime.datetime.now(datetime.timezone.utc)
    t0 = time.perf_counter()
    result: dict[str, Any] = {
        "mnist": [],
        "tabular": [],
        "rows": [],
        "crossover": [],
        "agreement": [],
    }
    with tempfile.TemporaryDirectory() as td:
        tmp = Path(td)
        for spec in args.mnist:
            label, _, path = spec.partition("=")
            if not path:
                ap.error(f"--mnist {spec!r}: expected LABEL=CHECKPOINT")
            r = mnist_network(label, Path(path), args.rounds, tmp, args.n_test)
            result["mnist"].append(r["info"])
            result["rows"] += r["rows"]
        if args.tabular:
            r = tabular(args.rounds, tmp, args.quick)
            result["tabular"] = r["info"]
            result["rows"] += r["rows"]
    if args.crossover:
        result["crossover"] = crossover(args.rounds)
    if args.agreement_seeds > 0:
        result["agreement"] = agreement(args.agreement_seeds, args.quick)
    settings = {
        "command": "python -m benchmarks.export_latency " + " ".join(argv or sys.argv[1:]),
        "date_utc": started.strftime("%Y-%m-%d %H:%M"),
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "threads": 1,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "wall_s": round(time.perf_counter() - t0, 1),
    }
    try:
        import onnxruntime

        settings["onnxruntime"] = onnxruntime.__version__
    except ImportError:
        pass
    write(args.out, result, settings)
    return result


def write(out: Path, result: dict[str, Any], settings: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rows = result["rows"] + result["crossover"] + result["agreement"]
    if rows:
        fields: list[str] = []
        for r in rows:
            fields += [k for k in r if k not in fields]
        with open(out / "results.csv.tmp", "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            w.writerows(rows)
        os.replace(out / "results.csv.tmp", out / "results.csv")
    details = {"settings": settings, "mnist": result["mnist"], "tabular": result["tabular"]}
    (out / "settings.json.tmp").write_text(json.dumps(details, indent=2) + "\n")
    os.replace(out / "settings.json.tmp", out / "settings.json")
    timed = bool(result["rows"] or result["crossover"])
    md = [
        "# Export latency: the compacted median model against the dense network"
        if timed
        else "# Export: the median model's classes against predict_proba's",
        "",
        f"Command: `{settings['command']}`; {settings['date_utc']} UTC; CPU: "
        f"{settings['cpu']} ({settings['logical_cpus']} logical CPUs, shared), one thread; "
        f"torch {settings['torch']}, onnxruntime {settings.get('onnxruntime', '-')}.",
        "",
    ]
    if result["rows"]:
        md += ["## Latency (medians of interleaved rounds)", "", _fmt_rows(result["rows"]), ""]
    for info in result["mnist"]:
        md += [
            f"## MNIST `{info['network']}` (epoch {info['epoch']})",
            "",
            f"- Median model density {100 * info['density']:.2f}% of the weights and biases;"
            f" compacted layers {info['layer_shapes']} ({info['layer_storage']}), nonzero "
            f"weights {info['layer_nonzero']}; {info['kept_inputs']} of 784 inputs kept.",
            f"- Accuracy of the export (median model) on {info['test_rows']} test rows: "
            f"{100 * info['accuracy_export']:.2f}%; its argmax equals the dense median "
            f"model's on {info['argmax_equal_rows']} of {info['test_rows']} rows.",
            f"- Multiply-adds per row: dense {info['dense_macs']:,}, export "
            f"{info['export_macs']:,} (ratio {info['dense_macs'] / info['export_macs']:.1f}).",
            f"- Argmax equal to the dense median model's, the export made for each batch "
            f"size: {info['argmax_equal_rows_by_batch']} of {info['test_rows']} rows.",
            f"- Size on disk (state dict): dense {info['size_dense_bytes']:,} B, export "
            f"{info['size_export_bytes']:,} B; ONNX: dense {info['size_dense_onnx_bytes']:,} B,"
            f" export {info['size_export_onnx_bytes']:,} B.",
            "",
        ]
    for info in result["mnist"]:
        if not info.get("breakdown"):
            continue
        md += [
            f"### Where the time goes: `{info['network']}`, microseconds (medians)",
            "",
            "| step | batch 1 | batch 1000 |",
            "|---|---|---|",
        ]
        steps = list(dict.fromkeys(r["step"] for r in info["breakdown"]))
        for step in steps:
            cells = []
            for b in (1, 1000):
                r = [x for x in info["breakdown"] if x["step"] == step and x["batch"] == b]
                cells.append(f"{r[0]['us']:.4g}" if r else "-")
            md.append(f"| {step} | " + " | ".join(cells) + " |")
        md.append("")
    if result["tabular"]:
        md += ["## Tabular fits (estimator defaults, 10 noise columns)", ""]
        for info in result["tabular"]:
            md.append(
                f"- **{info['network']}**: "
                + ", ".join(
                    f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                    for k, v in info.items()
                    if k not in ("network",)
                )
            )
        md.append("")
    if result["agreement"]:
        md += [
            "## The median model's classes against predict_proba's, over seeds",
            "",
            "| set | seed | test rows | median = predict_proba | median = 1,000 draws "
            "| predict_proba = 1,000 draws | mean network = predict_proba / 1,000 draws "
            "| moments export = predict_proba / 1,000 draws "
            "| accuracy: predict / median | unresolved gates |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for a in result["agreement"]:
            md.append(
                f"| {a['network']} | {a['seed']} | {a['test_rows']} | "
                f"{a['class_agreement']:.4f} | {a['class_agreement_1000_draws']:.4f} | "
                f"{a['predict_vs_1000_draws']:.4f} | {a['mean_network_vs_predict']:.4f} / "
                f"{a['mean_network_vs_1000_draws']:.4f} | {a['moments_vs_predict']:.4f} / "
                f"{a['moments_vs_1000_draws']:.4f} | {a['accuracy_predict']:.4f} / "
                f"{a['accuracy_export']:.4f} | {a['unresolved']:.4f} |"
            )
        for name in dict.fromkeys(a["network"] for a in result["agreement"]):
            md.append("")
            for key, what in (
                ("class_agreement", f"{name}: median"),
                ("mean_network_vs_predict", "The mean network (`phi * mu` on every edge, dense)"),
                ("moments_vs_predict", "The moments export (`export_moments()`)"),
            ):
                vals = [a[key] for a in result["agreement"] if a["network"] == name]
                md.append(
                    f"{what} = predict_proba on {min(vals):.4f}-{max(vals):.4f} of the test "
                    f"rows (mean {np.mean(vals):.4f}); at least 0.99 in "
                    f"{sum(v >= 0.99 for v in vals)} of {len(vals)} fits."
                )
            md += [
                "",
                f"{name}, the moments export by `min_inclusion` (means over the fits; the "
                "default is "
                f"{MOMENT_MIN_INCLUSION}):",
                "",
                "| min_inclusion | = predict_proba | fits >= 0.99 | = 1,000 draws | nonzero "
                "mean weights |",
                "|---|---|---|---|---|",
            ]
            for cut in MOMENT_CUTS:
                cells = np.array(
                    [
                        a["moments_by_inclusion"][str(cut)]
                        for a in result["agreement"]
                        if a["network"] == name
                    ]
                )
                md.append(
                    f"| {cut} | {cells[:, 0].mean():.4f} | {int((cells[:, 0] >= 0.99).sum())} "
                    f"of {len(cells)} | {cells[:, 1].mean():.4f} | {cells[:, 2].mean():.0f} |"
                )
        md.append("")
    if result["crossover"]:
        md += [
            "## Dense or sparse: one CompactMLP layer, speed-up of sparse over dense by density",
            "",
            _fmt_crossover(result["crossover"]),
            "",
        ]
    (out / "report.md.tmp").write_text("\n".join(md))
    os.replace(out / "report.md.tmp", out / "report.md")


if __name__ == "__main__":
    main()
