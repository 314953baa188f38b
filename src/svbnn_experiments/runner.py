"""Run an artifact: resolve settings, train, write ``settings.json``, build the report."""

from __future__ import annotations

import json
import logging
import math
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from dataclasses import fields, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from svbnn import check_device, get_kernel_backend

from .common import COMMON_DEFAULTS, QUICK_DEFAULTS, Chunk, RunConfig, usable_cpus
from .engine import active_engine, execute_chunks
from .files import (
    atomic_write_text,
    environment_info,
    jsonable,
    lock_output,
    read_csv,
    read_settings,
    write_csv,
    write_settings,
)
from .methods import METHOD_NAMES, check_methods, method_options
from .registry import ARTIFACTS, Artifact, get_artifact
from .settings import _is_int, check_setting

__all__ = [
    "OPTIONAL_SETTINGS",
    "RunInterrupted",
    "estimate",
    "format_duration",
    "incomplete_note",
    "list_text",
    "merge_runs",
    "prepare_out",
    "reproduce",
    "resolve_config",
    "run_identity",
]

logger = logging.getLogger(__name__)

_CONFIG_KEYS = {f.name for f in fields(RunConfig)} - {"artifact", "out", "params", "quick"}

OPTIONAL_SETTINGS = ("covariates", "init", "methods", "dtype", "device")
"""Settings that only some artifacts use (each lists them in ``Artifact.options``)."""


def resolve_config(
    artifact: Artifact,
    overrides: Mapping[str, Any] | None = None,
    *,
    quick: bool = False,
    out: Path | None = None,
    strict: bool = True,
) -> RunConfig:
    """Merge common defaults < artifact defaults < ``--quick`` < explicit overrides.

    Within :func:`svbnn_experiments.engine.use_engine` (``--scheduler``, ``--cluster``),
    ``jobs`` not given explicitly is the engine's worker count.

    Parameters
    ----------
    artifact : Artifact
    overrides : mapping
        Explicit settings (``None`` values are ignored). Keys of :class:`RunConfig`, plus
        ``params`` (a dict of artifact-specific settings, from ``--set``).
    quick : bool
    out : Path, optional
        Output folder; ``results/<artifact>`` by default.
    strict : bool
        Raise for an optional setting or ``--set`` key the artifact does not use
        (``reproduce all`` passes ``False`` and such settings are ignored).
    """
    overrides = {k: v for k, v in (overrides or {}).items() if v is not None}
    merged, params = _layered_defaults(artifact, quick)
    given = _apply_overrides(artifact, merged, overrides, strict)
    _apply_set(artifact, merged, params, given, strict)
    cfg = RunConfig(
        artifact=artifact.name,
        out=Path(out) if out is not None else Path("results") / artifact.name,
        reps=int(merged["reps"]),
        epochs=int(merged["epochs"]),
        seed=int(merged["seed"]),
        methods=tuple(merged["methods"]),
        jobs=int(merged["jobs"]),
        threads=int(merged["threads"]),
        batch=int(merged["batch"]),
        covariates=str(merged["covariates"]),
        init=str(merged["init"]),
        dtype=str(merged["dtype"]),
        quick=quick,
        progress=bool(merged["progress"]),
        params=params,
        device=str(merged["device"]),
    )
    _validate(cfg)
    return cfg


def _layered_defaults(artifact: Artifact, quick: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(settings, params)`` before any explicit override: the common defaults, then the
    artifact's, then ``--quick``'s, then an active engine's worker count as ``jobs``.
    ``settings`` has the :class:`RunConfig` keys, ``params`` the artifact's own settings."""
    merged: dict[str, Any] = dict(COMMON_DEFAULTS)
    params: dict[str, Any] = {}
    layers: list[Mapping[str, Any]] = [artifact.defaults]
    if quick:
        layers += [QUICK_DEFAULTS, artifact.quick]
    engine = active_engine()
    if engine is not None:
        layers.append({"jobs": engine.workers})
    for layer in layers:
        for k, v in layer.items():
            if k in _CONFIG_KEYS:
                merged[k] = v
            else:
                params[k] = v
    return merged, params


def _apply_overrides(
    artifact: Artifact, merged: dict[str, Any], overrides: Mapping[str, Any], strict: bool
) -> dict[str, Any]:
    """Set the explicit overrides in ``merged``; return the ``--set`` ones (``params``).

    An unknown setting is refused; an optional one the artifact does not use is refused
    when ``strict``, else ignored.
    """
    given: dict[str, Any] = {}
    for k, v in overrides.items():
        if k == "params":
            given = dict(v)
            continue
        if k not in _CONFIG_KEYS:
            raise ValueError(f"unknown setting {k!r}")
        if k in OPTIONAL_SETTINGS and k not in artifact.options:
            if strict:
                users = [a.name for a in ARTIFACTS.values() if k in a.options]
                raise ValueError(
                    f"--{k} does not apply to {artifact.name}; it applies to: {', '.join(users)}"
                )
            continue
        merged[k] = v
    return given


def _apply_set(
    artifact: Artifact,
    merged: Mapping[str, Any],
    params: dict[str, Any],
    given: Mapping[str, Any],
    strict: bool,
) -> None:
    """Check the ``--set`` values ``given`` and set them in ``params``.

    A key is the artifact's setting or an option of a method it runs (those reach each
    method as ``FitSpec.options``); any other is refused when ``strict``, else ignored.
    """
    # check_methods validates the method names once, here.
    options = method_options(check_methods(tuple(merged["methods"])))
    for pk, pv in given.items():
        if pk in _CONFIG_KEYS:
            raise ValueError(f"--set {pk}: use the --{pk} option instead")
        if pk not in params and pk not in options:
            if strict:
                known = ", ".join(sorted({*params, *options})) or "(none)"
                raise ValueError(
                    f"--set {pk}: {artifact.name} with methods {','.join(merged['methods'])} "
                    f"has no such setting; known: {known}"
                )
            continue
        known_default = params[pk] if pk in params else options[pk]
        params[pk] = check_setting(artifact.name, pk, pv, known_default)


def check_run_device(text: str) -> None:
    """``--device``: ``cpu``, ``cuda`` or ``cuda:N`` that the host has (one-line error)."""
    if check_device(text, "--device").type not in ("cpu", "cuda"):
        raise ValueError(f"--device must be cpu, cuda or cuda:N, got {text!r}")


_COUNT_CAPS = {"reps": 10**6, "jobs": 4096, "threads": 4096, "batch": 10**6, "epochs": 10**7}
"""Upper bounds of the counts: beyond them a run would exhaust memory or never end, so it is
refused by name before any work."""


def _validate(cfg: RunConfig) -> None:
    for name in ("reps", "jobs", "threads", "batch"):
        if getattr(cfg, name) < 1:
            raise ValueError(f"--{name} must be positive, got {getattr(cfg, name)}")
    if cfg.epochs < 0:
        raise ValueError(f"--epochs must be >= 0, got {cfg.epochs}")
    for name, cap in _COUNT_CAPS.items():
        if getattr(cfg, name) > cap:
            raise ValueError(f"--{name} must be at most {cap}, got {getattr(cfg, name)}")
    if cfg.covariates not in ("uniform", "normal"):
        raise ValueError(f"--covariates must be uniform or normal, got {cfg.covariates!r}")
    if cfg.init not in ("torch", "authors"):
        raise ValueError(f"--init must be torch or authors, got {cfg.init!r}")
    if cfg.dtype not in ("float32", "float64"):
        raise ValueError(f"--dtype must be float32 or float64, got {cfg.dtype!r}")
    check_run_device(cfg.device)


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C (``KeyboardInterrupt``).

    Attributes
    ----------
    folder : Path
        The output folder: its ``settings.json`` says ``"status": "interrupted"`` and it
        holds whatever results the run had written.
    """

    def __init__(self, folder: Path) -> None:
        super().__init__(str(folder))
        self.folder = folder


def prepare_out(folder: Path, option: str = "--out") -> Path:
    """Create the output folder ``folder`` if needed and check that it can be written.

    Raises
    ------
    ValueError
        Naming ``option`` and the folder: it is a file, lies under a file, cannot be
        created or is not writable.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"{option} {folder}: exists and is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ValueError(f"{option} {folder}: cannot create the folder ({reason})") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ValueError(f"{option} {folder}: the folder is not writable")
    return folder


def _rebuild_report(artifact: Artifact, folder: Path) -> None:
    # --report-only reads files the user points at: a damaged file is their error to fix,
    # named with the folder, not a traceback (the original stays chained for debugging).
    try:
        artifact.report(folder)
    except (ValueError, TypeError, KeyError, IndexError) as exc:
        raise ValueError(
            f"--report-only {folder}: the saved results cannot be reported "
            f"({type(exc).__name__}: {exc}); re-run {artifact.name} without --report-only"
        ) from exc


def reproduce(
    name: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    quick: bool = False,
    report_only: bool = False,
    out: Path | None = None,
    strict: bool = True,
    restart: bool = False,
) -> Path:
    """Run one artifact (or only rebuild its report) and return its output folder.

    Every setting is checked before any work. The output folder is locked for the run
    (another run writing it is refused, see :func:`svbnn_experiments.files.lock_output`);
    ``settings.json`` says ``"status"``: ``"running"`` from the start, then ``"complete"``,
    ``"interrupted"`` (Ctrl-C: :class:`RunInterrupted` is raised) or ``"failed"``, and
    records the run's identity (:func:`run_identity`).

    A folder that holds a run with another identity is refused (one line naming the
    setting and both values), unless ``restart``: its results and checkpoints are then
    deleted and the run starts afresh. A folder holding a run with the same identity
    resumes it (the real-data artifacts continue from their checkpoints, also to a larger
    ``--epochs``: the same run trained longer).

    ``report_only`` on an incomplete run writes the report with a first line saying so
    (:func:`incomplete_note`; ``svbnn reproduce --report-only`` prints it as a warning).
    """
    artifact = get_artifact(name)
    if report_only:
        return _report_only(artifact, out)
    cfg = resolve_config(artifact, overrides, quick=quick, out=out, strict=strict)
    prepare_out(cfg.out)
    with lock_output(cfg.out):
        _check_folder_identity(cfg, restart)
        torch.set_num_threads(cfg.threads)
        _run_recorded(artifact, cfg)
        try:
            artifact.report(cfg.out)
        except KeyboardInterrupt:
            raise RunInterrupted(cfg.out) from None
    return cfg.out


def _report_only(artifact: Artifact, out: Path | None) -> Path:
    """``--report-only``: rebuild the report of the run saved in ``out`` (locked)."""
    name = artifact.name
    folder = Path(out) if out is not None else Path("results") / name
    if not folder.exists():
        raise FileNotFoundError(f"{folder} does not exist: run {name} first")
    if not folder.is_dir():
        raise ValueError(f"--out {folder}: exists and is not a folder")
    with lock_output(folder):
        _rebuild_report(artifact, folder)
        note = incomplete_note(folder)
        if note is not None:
            # Said in the report; the command line prints it as a warning.
            logger.info("%s: %s", folder, note)
            report = folder / "report.md"
            if report.exists():
                text = report.read_text(encoding="utf-8")
                atomic_write_text(report, f"> **{note}**\n\n{text}")
    return folder


_NOT_IDENTITY = ("out", "jobs", "threads", "progress", "quick")
"""Settings that change how fast a run goes, or where it writes, never its numbers."""


def run_identity(cfg: RunConfig, kernels: str | None = None) -> dict[str, Any]:
    """The settings that decide a run's numbers: a folder or checkpoint resumes only a run
    with the same identity.

    Every :class:`RunConfig` setting (artifact, seed, replications, epochs, methods,
    ``--batch``, covariates, initialisation, dtype, device and every ``--set`` value)
    except ``out``, ``jobs``, ``threads``, ``progress`` and ``quick``, plus the kernel
    backend (``--kernels``).

    Parameters
    ----------
    cfg : RunConfig
    kernels : str, optional
        The kernel backend's name; the active one (``svbnn.get_kernel_backend()``) when
        not given.

    Returns
    -------
    dict
        JSON-ready (lists, not tuples): as saved in ``settings.json`` under ``"identity"``.
    """
    ident = {k: v for k, v in cfg.as_dict().items() if k not in _NOT_IDENTITY}
    ident["kernels"] = kernels if kernels is not None else get_kernel_backend().value
    out: dict[str, Any] = json.loads(json.dumps(jsonable(ident), sort_keys=True))
    return out


def _saved_identity(settings: Mapping[str, Any]) -> dict[str, Any] | None:
    """The identity of the run recorded in ``settings`` (``settings.json``): saved, or
    rebuilt from the ``config`` of a folder written before identities were saved;
    ``None`` when the file records no run."""
    saved = settings.get("identity")
    if isinstance(saved, dict):
        return saved
    config = settings.get("config")
    if not isinstance(config, dict):
        return None
    ident = {k: v for k, v in config.items() if k not in _NOT_IDENTITY}
    kernels = settings.get("environment", {}).get("svbnn_kernels")
    ident["kernels"] = kernels if isinstance(kernels, str) else "eager"
    out: dict[str, Any] = json.loads(json.dumps(jsonable(ident), sort_keys=True))
    return out


def _option_text(key: str, value: Any) -> str:
    """A setting as the user gives it: ``--seed 7``, ``--methods svbnn,agp``,
    ``--set n_train=256``."""
    if isinstance(value, list) and key == "methods":
        return f"--methods {','.join(map(str, value))}"
    if key == "params":
        return "--set (none)"
    if key == "artifact":
        return f"artifact {value}"
    return f"--{key} {value}"


def identity_difference(old: Mapping[str, Any], new: Mapping[str, Any]) -> str | None:
    """The first setting in which two run identities differ, as ``"--seed 0, not --seed 7"``
    (``old``'s value first); ``None`` when they are the same."""
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if key == "params" and isinstance(a, dict) and isinstance(b, dict):
            for pk in sorted(set(a) | set(b)):
                if a.get(pk) != b.get(pk):
                    return (
                        f"--set {pk}={a.get(pk, '(not set)')}, not "
                        f"--set {pk}={b.get(pk, '(not set)')}"
                    )
        return f"{_option_text(key, a)}, not {_option_text(key, b)}"
    return None


_RUN_STATE = ("checkpoints", "results.csv")
"""What a run resumes from in its folder: deleted by ``--restart``."""


def _check_folder_identity(cfg: RunConfig, restart: bool) -> None:
    """Refuse a run into a folder holding a run with another identity (``restart``: delete
    that run's checkpoints and results first); record nothing yet."""
    folder = cfg.out
    previous = read_settings(folder) if (folder / "settings.json").exists() else {}
    had_state = any((folder / name).exists() for name in _RUN_STATE)
    if not previous and not had_state:
        return
    saved = _saved_identity(previous)
    if saved is not None and _continues(folder, saved, cfg):
        saved = {**saved, "epochs": cfg.epochs}
    diff = (
        identity_difference(saved, run_identity(cfg))
        if saved is not None
        else "no recorded settings"
    )
    if diff is None:
        return
    if not restart:
        raise ValueError(
            f"--out {folder} holds a run with {diff}; resume it with its settings, choose "
            "another --out, or add --restart to delete its results and checkpoints and "
            "start afresh"
        )
    logger.warning("--restart: deleting the run in %s (%s)", folder, diff)
    for name in _RUN_STATE:
        path = folder / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    (folder / "settings.json").unlink(missing_ok=True)


def _continues(folder: Path, saved: Mapping[str, Any], cfg: RunConfig) -> bool:
    """A run with per-epoch checkpoints in ``folder`` continues to more epochs: ``--epochs``
    at least the saved run's is the same run, trained longer (fewer is refused)."""
    old: Any = saved.get("epochs")
    if not (folder / "checkpoints").is_dir() or not _is_int(old):
        return False
    return bool(cfg.epochs >= old)


def incomplete_note(folder: Path) -> str | None:
    """``"incomplete: N of M epochs"`` (or replications) for the run saved in ``folder``
    when it did not finish; ``None`` for a complete run.

    Read from ``settings.json`` (its ``status`` and planned epochs, replications and
    methods) and ``results.csv`` (the epochs or replications each method has).
    """
    settings = read_settings(folder)
    status = str(settings.get("status", "complete"))
    config = settings.get("config", {})
    rows = read_csv(folder / "results.csv") if (folder / "results.csv").exists() else []
    methods = [str(m) for m in config.get("methods", [])] or sorted(
        {str(r.get("method")) for r in rows}
    )
    done: int | None = None
    planned: int | None = None
    unit = ""
    if rows and "epoch" in rows[0] and _is_int(config.get("epochs")):
        unit, planned = "epochs", int(config["epochs"])
        done = min(
            (max((int(r["epoch"]) for r in rows if r.get("method") == m), default=0))
            for m in methods
        )
    elif rows and "rep" in rows[0] and _is_int(config.get("reps")):
        unit, planned = "replications", int(config["reps"])
        done = min(len({r["rep"] for r in rows if r.get("method") == m}) for m in methods)
    short = done is not None and planned is not None and done < planned
    if status == "complete" and not short:
        return None
    count = f"{done} of {planned} {unit}" if done is not None else "no saved results"
    return f"incomplete: {count} (the run is {status}); this report covers only those"


def _run_recorded(artifact: Artifact, cfg: RunConfig) -> None:
    """Run the artifact, ``settings.json`` saying ``"running"`` throughout, then
    ``"complete"`` (with the run's wall time and records), ``"interrupted"`` (raising
    :class:`RunInterrupted`) or ``"failed"``."""
    base = {
        "artifact": artifact.name,
        "description": artifact.description,
        "config": cfg.as_dict(),
        "identity": run_identity(cfg),
        "environment": environment_info(),
        "started_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }
    t0 = time.perf_counter()
    try:
        # Written first, so that an output folder always says whether its results are
        # whole, even after a kill that no handler sees. Inside the try: a Ctrl-C that
        # lands just after it must still mark the run interrupted.
        write_settings(cfg.out, {**base, "status": "running"})
        extra = artifact.run(cfg)
    except KeyboardInterrupt:
        wall = round(time.perf_counter() - t0, 3)
        write_settings(cfg.out, {**base, "status": "interrupted", "wall_time_s": wall})
        raise RunInterrupted(cfg.out) from None
    except BaseException as exc:
        wall = round(time.perf_counter() - t0, 3)
        error = f"{type(exc).__name__}: {exc}"
        write_settings(cfg.out, {**base, "status": "failed", "error": error, "wall_time_s": wall})
        raise
    wall = round(time.perf_counter() - t0, 3)
    write_settings(cfg.out, {**base, "wall_time_s": wall, **extra, "status": "complete"})


def merge_runs(name: str, parts: Sequence[Path], out: Path) -> Path:
    """Merge runs of one artifact (e.g. each method run separately) into ``out``.

    ``results.csv`` rows are concatenated (a method may appear in one part only: two parts
    with the same method would count its replications twice, so that is refused);
    ``settings.json`` is the first part's, with the union of the methods, every part's chunk
    layout, the summed wall time and ``merged_from`` (each part's folder, methods,
    replications, epochs and git commit). Then the report is rebuilt.

    The parts must share their identity (:func:`run_identity`) but for the methods and the
    ``--set`` options one part has and another has not (a method's own options); ``out``
    may hold only a merge of the same identity. Otherwise the merge is refused, naming
    the setting.
    """
    artifact = get_artifact(name)
    if not parts:
        raise ValueError("nothing to merge")
    rows: list[dict[str, Any]] = []
    chunks: list[Any] = []
    merged: dict[str, Any] = {}
    sources = []
    seen: dict[str, Path] = {}
    wall = 0.0
    identity: dict[str, Any] | None = None
    for part in parts:
        part = Path(part)
        settings, part_rows, methods = _read_part(name, part, seen)
        identity = _merge_identity(identity, settings, part, parts[0])
        rows += part_rows
        chunks += list(settings.get("chunks", []))
        wall += float(settings.get("wall_time_s", 0.0))
        sources.append(_part_source(part, methods, settings))
        merged = _merge_settings(merged, settings)
    order = {m: i for i, m in enumerate(METHOD_NAMES)}
    merged["config"] = {
        **merged.get("config", {}),
        "methods": sorted(seen, key=lambda m: order.get(m, len(order))),
        "out": str(out),
    }
    merged.update(chunks=chunks, wall_time_s=round(wall, 3), merged_from=sources, status="complete")
    if identity is not None:
        merged["identity"] = {**identity, "methods": merged["config"]["methods"]}
    prepare_out(out)
    with lock_output(out):
        previous = read_settings(out) if (out / "settings.json").exists() else {}
        old = _saved_identity(previous) if previous else None
        diff = identity_difference(old, merged["identity"]) if old and identity else None
        if previous and (old is None or diff is not None):
            raise ValueError(
                f"--out {out} holds a run with {diff or 'no recorded settings'}; "
                "choose another --out for the merge"
            )
        write_csv(out / "results.csv", rows)
        write_settings(out, merged)
        artifact.report(out)
    return out


def _merge_identity(
    identity: dict[str, Any] | None, settings: Mapping[str, Any], part: Path, first: Path
) -> dict[str, Any] | None:
    """The identity of a merge so far (``identity``) with the next part's ``settings``.

    Raises
    ------
    ValueError
        When the part's identity differs from the earlier parts' in a setting other than
        the methods or a ``--set`` option the earlier parts do not have.
    """
    ident = _saved_identity(settings)
    if ident is None:
        return identity
    if identity is None:
        return dict(ident)
    ours, new = dict(identity.get("params", {})), dict(ident.get("params", {}))
    # A --set option of one part only is a method's own option: not compared.
    theirs = {**ours, **{k: v for k, v in new.items() if k in ours}}
    diff = identity_difference(
        identity, {**ident, "methods": identity.get("methods"), "params": theirs}
    )
    if diff is not None:
        raise ValueError(f"--merge {part}: the parts were run with other settings ({diff})")
    return {**identity, "params": {**new, **ours}}


def _read_part(
    name: str, part: Path, seen: dict[str, Path]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """A finished run of ``name`` in ``part``: ``(settings, rows, methods)``.

    Refused: a run that is not complete, a run of another artifact, or a method already in
    an earlier part (``seen``, method to part; this part's methods are added to it).
    """
    if not part.is_dir() or not (part / "settings.json").exists():
        why = "no such folder" if not part.exists() else "no settings.json there"
        raise ValueError(f"--merge {part}: no run found ({why})")
    settings = read_settings(part)
    status = settings.get("status", "complete")  # runs before the status field: whole
    if status != "complete":
        raise ValueError(f"--merge {part}: the run there is {status}, not complete")
    if settings.get("artifact") != name:
        other = settings.get("artifact")
        raise ValueError(f"--merge {part}: holds a run of {other!r}, not {name!r}")
    part_rows = read_csv(part / "results.csv")
    methods = sorted({str(r["method"]) for r in part_rows})
    for m in methods:
        if m in seen:
            raise ValueError(f"method {m!r} is in both {seen[m]} and {part}")
        seen[m] = part
    return settings, part_rows, methods


def _part_source(part: Path, methods: list[str], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The ``merged_from`` record of a part: folder, methods, replications, epochs, commit."""
    cfg = settings.get("config", {})
    return {
        "folder": str(part),
        "methods": methods,
        "reps": cfg.get("reps"),
        "epochs": cfg.get("epochs"),
        "git_commit": settings.get("environment", {}).get("git", {}).get("commit"),
    }


def _merge_settings(merged: dict[str, Any], settings: Mapping[str, Any]) -> dict[str, Any]:
    """``merged`` with a further part's ``settings``: the first part's settings, with the
    per-method records (``"runs"`` of the real-data artifacts) of every part united."""
    if not merged:
        return dict(settings)
    # Everything else (settings, environment, problem) is the first part's.
    for k, v in settings.items():
        if k not in merged:
            merged[k] = v
        elif k == "runs" and isinstance(v, dict) and isinstance(merged[k], dict):
            merged[k] = {**merged[k], **v}
    return merged


def estimate(
    name: str,
    overrides: Mapping[str, Any] | None = None,
    *,
    epochs: int = 200,
    out: Path | None = None,
) -> dict[str, Any]:
    """Time an artifact at full settings from a short run and extrapolate.

    Runs the first chunk of each distinct shape (method, problem, size) for ``epochs``
    epochs (including its full evaluation), and extrapolates the training time linearly in
    epochs. Total = sum over chunks / ``jobs`` (chunks run in parallel).

    Returns
    -------
    dict
        ``per_step_ms`` per chunk shape, ``estimated_total_s`` and the details.
    """
    artifact = get_artifact(name)
    if not _is_int(epochs) or epochs < 1:
        raise ValueError(f"--estimate-epochs must be a positive integer, got {epochs!r}")
    if artifact.plan is None:
        raise ValueError(f"{name} has no training plan to time; run it with --quick instead")
    cfg = resolve_config(artifact, overrides, out=out)
    if out is not None:
        prepare_out(Path(out))
    torch.set_num_threads(cfg.threads)
    chunks = artifact.plan(cfg)
    shapes: dict[tuple[Any, ...], list[Any]] = {}
    for ch in chunks:
        shapes.setdefault((ch.method, ch.problem.kind, ch.size), []).append(ch)
    details = [_time_shape(group, epochs, cfg.progress) for group in shapes.values()]
    total = 0.0
    for d in details:
        total += d["estimated_chunk_s"] * d["chunks"]
    result = {
        "artifact": name,
        "threads": cfg.threads,
        "jobs": cfg.jobs,
        "reps": cfg.reps,
        "n_chunks": len(chunks),
        "shapes": details,
        "estimated_total_s": total / min(cfg.jobs, len(chunks)),
        "environment": environment_info(),
    }
    if out is not None:
        with lock_output(Path(out)):
            atomic_write_text(Path(out) / "estimate.json", json.dumps(result, indent=2) + "\n")
    return result


def _time_shape(group: Sequence[Chunk], epochs: int, progress: bool) -> dict[str, Any]:
    """Time the first of ``group`` (chunks of one method, problem and size) for ``epochs``
    epochs, with its full evaluation, and extrapolate its training linearly in epochs."""
    ch = group[0]
    kind, size = ch.problem.kind, ch.size
    short = replace(ch, spec=replace(ch.spec, epochs=epochs))
    res = execute_chunks([short], 1, progress, desc=f"timing {kind} R={size}")[0]
    steps = epochs * ch.steps_per_epoch
    per_step = res.train_s / steps
    full = per_step * ch.spec.epochs * ch.steps_per_epoch + res.eval_s
    return {
        "method": ch.method,
        "problem": kind,
        "replicates_per_network": size,
        "chunks": len(group),
        "timed_epochs": epochs,
        "steps_per_epoch": ch.steps_per_epoch,
        "full_epochs": ch.spec.epochs,
        "per_step_ms": 1000 * per_step,
        "per_step_per_replicate_ms": 1000 * per_step / size,
        "eval_s": res.eval_s,
        "estimated_chunk_s": full,
    }


def format_duration(seconds: float | None) -> str:
    """``"42 s"``, ``"12 min"``, ``"3.4 h"``; ``"?"`` when unknown."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def list_text() -> str:
    """The ``svbnn reproduce --list`` table."""
    lines = []
    width = max((len(n) for n in ARTIFACTS), default=10)
    header = f"{'artifact':<{width}}  {'quick':>7}  {'full (1 thread, 1 job)':<24}  description"
    lines.append(header)
    lines.append("-" * len(header))
    for a in ARTIFACTS.values():
        t = a.timing
        quick = format_duration(t.quick_s)
        if t.full_s is None:
            full = "?"
        else:
            full = format_duration(t.full_s) + (" measured" if t.full_measured else " estimated")
        lines.append(f"{a.name:<{width}}  {quick:>7}  {full:<24}  {a.description}")
    known = [a.timing.full_s for a in ARTIFACTS.values()]
    if known and all(t is not None for t in known):
        total = sum(t for t in known if t is not None)
        lines.append(f"{'all':<{width}}  {'':>7}  {format_duration(total)} estimated")
    lines.append("")
    lines.append(
        "quick: measured wall time of `svbnn reproduce NAME --quick` (about 3 s of it is "
        "start-up) on a 2-core AMD EPYC with 1 torch thread. full: the paper's settings, "
        "estimated from per-step times measured with --estimate-epochs 200 (`measured` where "
        "the full run was timed), with the default eager kernels. --jobs N (default: the "
        f"usable CPUs, here {usable_cpus()}; --quick: 1) runs up to N of a simulation's "
        "chunks (one per method and problem, and per --batch replications) at once on free "
        "cores, without changing its numbers; --kernels auto compiles or runs natively the "
        "kernels of the artifacts' networks (docs/performance.md has step times)."
    )
    return "\n".join(lines)
