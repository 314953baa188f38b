"""What the simulation artifacts share: run settings, seeds, problems, chunks and metrics.

Replications are batched: a *chunk* is a set of replications (each with its own training
data, drawn from its own seed) that one method fits as a single replicated network. The
chunk layout depends only on the run's settings (the number of replications and
``--batch``, the most replicates per network), never on ``--jobs`` or a cluster's size,
and is recorded in ``settings.json``: for given settings and ``--seed`` a run is
reproducible bit for bit whichever engine runs the chunks
(:mod:`svbnn_experiments.engine`) and however many workers it has: this process,
``--jobs N`` worker processes or a Dask cluster (:mod:`svbnn_experiments.distributed`).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from svbnn.data import dense_teacher, sim2_function, sparse_teacher_function
from svbnn.priors import mlp_log_lambda_opt
from svbnn.selection import fpr_fnr
from svbnn.training import DIVERGED_R2, DivergenceWarning

from .methods import FitSpec, FittedReplicates, get_method

__all__ = [
    "COMMON_DEFAULTS",
    "QUICK_DEFAULTS",
    "Chunk",
    "ChunkResult",
    "CoverageSpec",
    "Problem",
    "RunConfig",
    "derive_seed",
    "layout_chunks",
    "run_chunk",
    "usable_cpus",
]

# Purposes of derived seeds: one stream per purpose, so that changing, e.g., the number of
# test points never changes the training data.
SEED_DATA, SEED_TRAIN, SEED_TEST = 1, 2, 3


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; else ``os.cpu_count()``; at least 1)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # no sched_getaffinity (macOS, Windows)
        return max(1, os.cpu_count() or 1)


COMMON_DEFAULTS: dict[str, Any] = {
    "reps": 30,
    "epochs": 1,
    "seed": 0,
    "methods": ("svbnn",),
    "jobs": usable_cpus(),
    "threads": 1,
    "batch": 60,
    "covariates": "uniform",
    "init": "torch",
    "dtype": "float32",
    "progress": True,
    "device": "cpu",
}
"""Settings every artifact has; artifacts override them in their ``defaults``.

``jobs`` is the number of usable CPUs (one worker process per CPU, one torch thread each);
``--quick`` runs use one (see :data:`QUICK_DEFAULTS`)."""

QUICK_DEFAULTS: dict[str, Any] = {"jobs": 1}
"""What ``--quick`` changes for every artifact (before the artifact's own ``quick``): one
job, since starting worker processes takes longer than a smoke run's training."""


@dataclass
class RunConfig:
    """Resolved settings of one ``svbnn reproduce`` run.

    Attributes
    ----------
    artifact : str
    out : Path
        Output folder.
    reps, epochs, seed : int
        Replications, training epochs and the base seed every other seed derives from.
    methods : tuple of str
    jobs, threads : int
        Worker processes and torch threads per process.
    batch : int
        Most replications trained as one network.
    covariates, init, dtype : str
        Simulation II covariate law, initialisation of the means, float precision.
    quick : bool
        Whether ``--quick`` settings are in force.
    progress : bool
        Show progress bars.
    params : dict
        Artifact-specific settings (sizes, learning rate, coverage draws...).
    device : str
        Where the networks train: ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (``--device``).
    """

    artifact: str
    out: Path
    reps: int
    epochs: int
    seed: int
    methods: tuple[str, ...]
    jobs: int
    threads: int
    batch: int
    covariates: str
    init: str
    dtype: str
    quick: bool = False
    progress: bool = True
    params: dict[str, Any] = field(default_factory=dict)
    device: str = "cpu"

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        d = asdict(self)
        d["out"] = str(self.out)
        d["methods"] = list(self.methods)
        return d


def derive_seed(base: int, *keys: int) -> int:
    """A 32-bit seed for the stream ``keys`` of the base seed (numpy ``SeedSequence``)."""
    return int(
        np.random.SeedSequence([int(base) & 0xFFFFFFFF, *map(int, keys)]).generate_state(1)[0]
    )


# --------------------------------------------------------------------------- problems
@lru_cache(maxsize=64)
def _dense_teacher_layers(
    teacher_seed: int, signal_sd: float | None = None
) -> tuple[tuple[NDArray[Any], NDArray[Any]], ...]:
    # The library draws the teacher and the data from one stream; the harness wants one
    # fixed teacher for all replications (a teacher-student study has one teacher, and the
    # coverage protocol needs one f0), so it takes the teacher of a fixed seed and draws
    # each replication's data itself.
    params = dense_teacher(n=1, n_test=1, random_state=teacher_seed, signal_sd=signal_sd).params
    return tuple((params[f"W{i}"], params[f"b{i}"]) for i in (1, 2, 3))


def _dense_teacher_function(
    x: NDArray[Any], teacher_seed: int, signal_sd: float | None = None
) -> NDArray[Any]:
    h = x
    layers = _dense_teacher_layers(teacher_seed, signal_sd)
    for i, (w, b) in enumerate(layers):
        h = h @ w.T + b
        if i < len(layers) - 1:
            h = 1.0 / (1.0 + np.exp(-h))
    out: NDArray[Any] = h[:, 0]
    return out


_TEACHER_STREAM = 7
"""Seed-stream key of a replication's own dense teacher (drawn from its data seed)."""


@dataclass(frozen=True)
class Problem:
    """A simulated regression problem of the paper.

    Attributes
    ----------
    kind : {"dense-teacher", "sparse-teacher", "sim2"}
        Simulation I (A), Simulation I (B), Simulation II.
    p : int
        Number of covariates.
    covariates : {"uniform", "normal"}
        Covariate law: U(-1, 1) or N(0, 1), iid. Simulation I is always uniform.
    teacher_seed : int
        Seed of the dense teacher's U(0, 1) parameters (fixed across replications).
    noise_std : float
        Noise sd (1 in every simulation of the paper).
    teacher_sd : float, optional
        Dense teacher only: rescale its output to this sd about its mean (see
        :func:`svbnn.data.dense_teacher`, ``signal_sd``); ``None``: the paper's teacher.
    redraw_teacher : bool
        Dense teacher only: every replication has its own teacher, drawn from its data
        seed (:meth:`teacher_seed_for`), instead of the one teacher of ``teacher_seed``.
    """

    kind: str
    p: int
    covariates: str = "uniform"
    teacher_seed: int = 2020
    noise_std: float = 1.0
    teacher_sd: float | None = None
    redraw_teacher: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("dense-teacher", "sparse-teacher", "sim2"):
            raise ValueError(f"unknown problem kind {self.kind!r}")
        if self.covariates not in ("uniform", "normal"):
            raise ValueError(f"covariates must be 'uniform' or 'normal', got {self.covariates!r}")
        expected = {"dense-teacher": 20, "sparse-teacher": 100}.get(self.kind)
        if expected is not None and self.p != expected:
            raise ValueError(f"{self.kind} has p = {expected}, got {self.p}")
        if (self.teacher_sd is not None or self.redraw_teacher) and self.kind != "dense-teacher":
            raise ValueError("teacher_sd and redraw_teacher apply to the dense teacher only")
        if self.teacher_sd is not None and not (
            math.isfinite(self.teacher_sd) and self.teacher_sd > 0
        ):
            raise ValueError(f"teacher_sd must be a positive number, got {self.teacher_sd}")

    def teacher_seed_for(self, data_seed: int) -> int:
        """Seed of the dense teacher of the replication whose data seed is ``data_seed``."""
        if self.redraw_teacher:
            return derive_seed(data_seed, _TEACHER_STREAM)
        return self.teacher_seed

    @property
    def relevant(self) -> NDArray[np.int64]:
        """0-based indices of the inputs f0 depends on."""
        if self.kind == "dense-teacher":
            return np.arange(20)
        if self.kind == "sparse-teacher":
            return np.array([0, 1])
        return np.arange(5)

    def f0(self, X: NDArray[Any], data_seed: int | None = None) -> NDArray[Any]:
        """Noise-free regression function, ``(m, p) -> (m,)``.

        ``data_seed`` names the replication whose teacher to use when every replication
        has its own (``redraw_teacher``); otherwise it is ignored.
        """
        if self.kind == "dense-teacher":
            if self.redraw_teacher and data_seed is None:
                raise ValueError("a redrawn teacher needs the replication's data seed")
            seed = self.teacher_seed if data_seed is None else self.teacher_seed_for(data_seed)
            return _dense_teacher_function(X, seed, self.teacher_sd)
        if self.kind == "sparse-teacher":
            return sparse_teacher_function(X)
        return sim2_function(X)

    def draw_covariates(self, m: int, rng: np.random.Generator) -> NDArray[Any]:
        """``(m, p)`` covariates from the problem's law."""
        if self.covariates == "normal":
            return rng.standard_normal((m, self.p))
        return rng.uniform(-1.0, 1.0, size=(m, self.p))

    def draw(self, m: int, seed: int) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any]]:
        """``m`` observations from the seed: covariates ``(m, p)``, responses, f0 values."""
        rng = np.random.default_rng(seed)
        X = self.draw_covariates(m, rng)
        f = self.f0(X, seed if self.redraw_teacher else None)
        y = f + self.noise_std * rng.standard_normal(m)
        return X, y, f


@dataclass(frozen=True)
class CoverageSpec:
    """The coverage protocol of supplement B.5.

    Attributes
    ----------
    x_star : tuple of float
        The fixed point ``x*`` (length p).
    coords : tuple of int
        0-based coordinates varied in turn over the grid.
    levels : tuple of float
        Credible levels.
    n_draws : int
        Posterior draws per interval (paper: 600).
    n_grid : int
        Equidistant grid points in [-1, 1] (paper: 1000).
    noise_std : float
        ``0`` (the supplement's reading): credible intervals of the response mean
        ``f_theta(x)``. Otherwise predictive intervals of a new response: each posterior
        draw of ``f_theta(x)`` gets its own ``N(0, noise_std^2)`` noise, the model's noise.
        Both are checked against ``f0(x)``.
    """

    x_star: tuple[float, ...]
    coords: tuple[int, ...] = (0, 1, 2)
    levels: tuple[float, ...] = (0.90, 0.95)
    n_draws: int = 600
    n_grid: int = 1000
    noise_std: float = 0.0

    def grid(self, coord: int) -> NDArray[np.float64]:
        """``(n_grid, p)``: ``x*`` with coordinate ``coord`` running over [-1, 1]."""
        X = np.tile(np.asarray(self.x_star, dtype=np.float64), (self.n_grid, 1))
        X[:, coord] = np.linspace(-1.0, 1.0, self.n_grid)
        return X


# ----------------------------------------------------------------------------- chunks
@dataclass(frozen=True)
class Chunk:
    """Replications fitted as one network by one method (picklable: runs in a worker).

    Attributes
    ----------
    index : int
        Position in the run's chunk list.
    method : str
    problem : Problem
    spec : FitSpec
        Network and training settings (``spec.log_prior_inclusion`` per replicate or None).
    reps : tuple of int
        Replication indices (the rows' ``rep``).
    data_seeds : tuple of int
        One training-data seed per replication.
    train_seed : int
        Seed of the chunk's torch generator (initialisation, minibatches, weight draws).
    n_train : int
        Training-set size n.
    test_seed, n_test : int
        The shared test set (the authors' Simulation II code shares one test set too).
    n_predict : int
        H, draws of the posterior mean estimator (paper: 30).
    coverage : CoverageSpec, optional
    want_network : bool
        Return each replicate's per-layer ``(phi, mu)``.
    labels : tuple of dict
        Extra columns per replication (e.g. the lambda of a sweep).
    threads : int
        torch threads in the process that runs the chunk.
    """

    index: int
    method: str
    problem: Problem
    spec: FitSpec
    reps: tuple[int, ...]
    data_seeds: tuple[int, ...]
    train_seed: int
    n_train: int
    test_seed: int
    n_test: int
    n_predict: int = 30
    coverage: CoverageSpec | None = None
    want_network: bool = False
    labels: tuple[dict[str, Any], ...] = ()
    threads: int = 1

    @property
    def size(self) -> int:
        """Number of replications in the chunk."""
        return len(self.reps)

    @property
    def steps_per_epoch(self) -> int:
        """Optimiser steps per epoch."""
        return math.ceil(self.n_train / min(self.spec.batch_size, self.n_train))


@dataclass
class ChunkResult:
    """Rows (one per replication) and optional per-replicate networks of one chunk.

    ``coverage_points`` (with a coverage protocol) maps ``"coverage{level}_x{j}"`` to the
    ``(R, n_grid)`` booleans "the interval covers f0 at this grid point", from which the
    per-grid-point coverage frequencies over replications are computed.
    """

    index: int
    rows: list[dict[str, Any]]
    networks: list[list[tuple[NDArray[Any], NDArray[Any]]]] | None
    train_s: float
    eval_s: float
    coverage_points: dict[str, NDArray[np.bool_]] | None = None


def layout_chunks(n_items: int, batch: int) -> list[range]:
    """Split ``n_items`` replications into ``ceil(n_items / batch)`` near-equal consecutive
    chunks (at most ``batch`` per chunk).

    The layout decides the numbers (each chunk is one network with its own seed, and its
    replicates share that network's random draws), so it depends on the settings only,
    never on how many workers run the chunks: ``--jobs 1``, ``--jobs N``, ``--cluster
    local:N`` and a Dask scheduler of any size give the same chunks and the same results.
    To spread one method's replications over N workers, give ``--batch`` at most
    ``ceil(reps / N)`` (a setting, recorded in ``settings.json`` with the ``chunks``).
    """
    if n_items < 1:
        raise ValueError("nothing to run")
    if batch < 1:
        raise ValueError("batch must be positive")
    n_chunks = math.ceil(n_items / batch)
    bounds = np.linspace(0, n_items, n_chunks + 1).round().astype(int)
    return [range(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:], strict=True)]


def _rmse(pred: NDArray[Any], target: NDArray[Any]) -> NDArray[np.float64]:
    out: NDArray[np.float64] = np.sqrt(np.mean((pred - target) ** 2, axis=-1))
    return out


@dataclass(frozen=True)
class _ChunkData:
    """A chunk's data: per-replication training sets and the shared test set, as tensors
    for the network and arrays for the metrics.

    ``X``, ``y``: ``(R, n, p)``, ``(R, n)`` tensors; ``f_train``: ``(R, n)`` f0 values.
    ``X_test``: the ``(n_test, p)`` test points expanded to ``(R, n_test, p)``; ``y_test``,
    ``f_test``: ``(n_test,)``, or ``(R, n_test)`` when every replication has its own teacher.
    """

    X: torch.Tensor
    y: torch.Tensor
    f_train: NDArray[Any]
    X_test: torch.Tensor
    y_test: NDArray[Any]
    f_test: NDArray[Any]


def _draw_chunk_data(chunk: Chunk) -> _ChunkData:
    """Each replication's training data (from its data seed) and the shared test set."""
    dtype, device = chunk.spec.torch_dtype, torch.device(chunk.spec.device)
    prob = chunk.problem
    train_sets = [prob.draw(chunk.n_train, s) for s in chunk.data_seeds]
    X = torch.tensor(np.stack([t[0] for t in train_sets]), dtype=dtype, device=device)
    y = torch.tensor(np.stack([t[1] for t in train_sets]), dtype=dtype, device=device)
    f_train = np.stack([t[2] for t in train_sets])
    X_test_np, y_test, f_test = prob.draw(chunk.n_test, chunk.test_seed)
    if prob.redraw_teacher:
        # One teacher per replication: the shared test points and noise, each replication's
        # own f0 (arrays (R, n_test) broadcast wherever the shared (n_test,) ones did).
        noise = y_test - f_test
        f_test = np.stack([prob.f0(X_test_np, s) for s in chunk.data_seeds])
        y_test = f_test + noise
    X_test = torch.tensor(X_test_np, dtype=dtype, device=device).expand(chunk.size, -1, -1)
    return _ChunkData(X, y, f_train, X_test, y_test, f_test)


def _prediction_columns(
    chunk: Chunk, fitted: FittedReplicates, data: _ChunkData, gen: torch.Generator
) -> dict[str, NDArray[Any]]:
    """Per-replicate RMSEs of f_H (against the responses and f0), the tuning grid's columns,
    the median model's test RMSE, sparsity and density (those the method has)."""
    H = chunk.n_predict
    # Methods with a tuning grid (AGP, LOT) keep the value with the best test RMSE, as the
    # paper does; they return per-replicate columns describing the grid.
    tuned = fitted.tune_on_test(data.X_test, data.y_test, H, gen)
    pred_train = fitted.sample_outputs(data.X, H, gen).mean(0).double().cpu().numpy()
    pred_test = fitted.sample_outputs(data.X_test, H, gen).mean(0).double().cpu().numpy()
    cols: dict[str, NDArray[Any]] = {
        "train_rmse": _rmse(pred_train, data.y.double().cpu().numpy()),
        "test_rmse": _rmse(pred_test, data.y_test),
        "train_rmse_f": _rmse(pred_train, data.f_train),
        "test_rmse_f": _rmse(pred_test, data.f_test),
        **tuned,
    }
    med = fitted.median_outputs(data.X_test)
    if med is not None:
        cols["test_rmse_median"] = _rmse(med.double().cpu().numpy(), data.y_test)
    sp, de, noise = fitted.sparsity(), fitted.density(), fitted.noise_std()
    if noise is not None:
        cols["noise_std"] = noise
    if sp is not None:
        cols["sparsity_pct"] = 100.0 * sp
    if de is not None:
        cols["density_pct"] = 100.0 * de
    return cols


def _coverage_columns(
    chunk: Chunk, cov: CoverageSpec, fitted: FittedReplicates, gen: torch.Generator
) -> tuple[dict[str, NDArray[Any]], dict[str, NDArray[np.bool_]]]:
    """The coverage protocol on a Bayesian fit: per-replicate coverage percentages (columns
    ``coverage{level}_x{j}_pct``) and the per-grid-point booleans behind them."""
    prob, R = chunk.problem, chunk.size
    dtype, device = chunk.spec.torch_dtype, torch.device(chunk.spec.device)
    cols: dict[str, NDArray[Any]] = {}
    points: dict[str, NDArray[np.bool_]] = {}
    for c in cov.coords:
        grid = cov.grid(c)
        truth = (
            np.stack([prob.f0(grid, s) for s in chunk.data_seeds])
            if prob.redraw_teacher
            else prob.f0(grid)
        )
        Xg = torch.tensor(grid, dtype=dtype, device=device).expand(R, -1, -1)
        draws = fitted.sample_outputs(Xg, cov.n_draws, gen)  # (H, R, n_grid)
        if cov.noise_std > 0:
            noise = torch.randn(draws.shape, generator=gen, dtype=draws.dtype, device=device)
            draws = draws + cov.noise_std * noise
        for level in cov.levels:
            a = (1.0 - level) / 2.0
            q = torch.tensor([a, 1.0 - a], dtype=draws.dtype, device=draws.device)
            # One replicate at a time: older torch refuses quantile() on > 2^24 elements.
            bounds = torch.stack([torch.quantile(draws[:, r], q, dim=0) for r in range(R)], 1)
            lo, hi = bounds.double().cpu().numpy()  # each (R, n_grid)
            inside = (lo <= truth) & (truth <= hi)
            cols[f"coverage{round(100 * level)}_x{c + 1}_pct"] = 100.0 * inside.mean(-1)
            points[f"coverage{round(100 * level)}_x{c + 1}"] = inside
    return cols, points


def _chunk_rows(
    chunk: Chunk,
    cols: Mapping[str, NDArray[Any]],
    selected: list[NDArray[np.int64]] | None,
    train_s: float,
    eval_s: float,
) -> list[dict[str, Any]]:
    """One ``results.csv`` row per replication: its seeds and chunk, labels, metric columns,
    variable selection (FPR/FNR), and its share of the chunk's wall time."""
    prob, R = chunk.problem, chunk.size
    rows: list[dict[str, Any]] = []
    for i, rep in enumerate(chunk.reps):
        row: dict[str, Any] = {
            "method": chunk.method,
            "rep": rep,
            "data_seed": chunk.data_seeds[i],
            "chunk": chunk.index,
            "chunk_size": R,
            "train_seed": chunk.train_seed,
        }
        if i < len(chunk.labels):
            row.update(chunk.labels[i])
        for k, v in cols.items():
            row[k] = float(v[i])
        if selected is not None:
            fpr, fnr = fpr_fnr(selected[i], prob.relevant, prob.p)
            row["fpr_pct"] = 100.0 * fpr
            row["fnr_pct"] = 100.0 * fnr
            row["n_selected"] = len(selected[i])
            row["selected"] = " ".join(f"x{j + 1}" for j in selected[i])
        row["wall_s"] = (train_s + eval_s) / R
        row["chunk_train_s"] = train_s
        rows.append(row)
    return rows


def run_chunk(chunk: Chunk) -> ChunkResult:
    """Draw the chunk's data, fit the method, compute every metric per replication."""
    torch.set_num_threads(chunk.threads)
    data = _draw_chunk_data(chunk)
    gen = torch.Generator(device=torch.device(chunk.spec.device)).manual_seed(chunk.train_seed)
    method = get_method(chunk.method)
    t0 = time.perf_counter()
    what = f"{chunk.method} on {chunk.problem.kind} (p={chunk.problem.p}, n={chunk.n_train})"
    with named_divergence(what, [f"rep {r}" for r in chunk.reps]):
        fitted = method.fit(data.X, data.y, chunk.spec, gen)
    train_s = time.perf_counter() - t0

    t0 = time.perf_counter()
    cols = _prediction_columns(chunk, fitted, data, gen)
    selected = fitted.selected_features()
    points: dict[str, NDArray[np.bool_]] = {}
    if chunk.coverage is not None and fitted.bayesian:
        coverage_cols, points = _coverage_columns(chunk, chunk.coverage, fitted, gen)
        cols.update(coverage_cols)
    eval_s = time.perf_counter() - t0

    rows = _chunk_rows(chunk, cols, selected, train_s, eval_s)
    networks = None
    if chunk.want_network:
        nets = [fitted.layer_inclusion(i) for i in range(chunk.size)]
        networks = [n for n in nets if n is not None] or None
    return ChunkResult(chunk.index, rows, networks, train_s, eval_s, points or None)


@contextlib.contextmanager
def named_divergence(what: str, labels: Sequence[str]) -> Iterator[None]:
    """A :class:`~svbnn.training.DivergenceWarning` of a fit in the block is issued again
    naming ``what`` (the method and problem) and the replicates that diverged, by their
    ``labels`` (one per replicate, e.g. ``"rep 3"``); any other warning is passed on as it
    was."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", DivergenceWarning)
        yield
    for w in caught:
        msg = w.message
        if not isinstance(msg, DivergenceWarning):
            warnings.warn_explicit(msg, w.category, w.filename, w.lineno, source=w.source)
            continue
        r2 = msg.r2
        if len(r2) == len(labels):
            bad = [(lab, v) for lab, v in zip(labels, r2, strict=True) if v < DIVERGED_R2]
        else:
            bad = [(lab, min(r2, default=math.nan)) for lab in labels]
        shown = ", ".join(f"{lab} (R^2 {v:.3g})" for lab, v in bad)
        warnings.warn(
            DivergenceWarning(
                f"{what}: {shown} diverged; its results are not a fit of the method. {msg}",
                r2,
            ),
            stacklevel=3,
        )


def lambda_opt_for(problem: Problem, hidden: Sequence[int], n_train: int) -> float:
    """``log(lambda_opt)`` of the student network ``p - hidden - 1`` for ``n`` data."""
    return mlp_log_lambda_opt(problem.p, tuple(hidden), 1, n_train)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    """``(fn(), seconds)``."""
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0
