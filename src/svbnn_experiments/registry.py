"""Registry of reproducible paper artifacts (tables and figures).

An artifact is one entry: a name, a one-line description, default and ``--quick``
settings, a ``run`` function that trains and writes ``results.csv`` (and whatever else it
needs) into the output folder, and a ``report`` function that rebuilds ``report.md`` and
the figures from those saved files alone (``--report-only``). Real-data artifacts join the
same registry with :func:`register_artifact`; nothing else has to change.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .common import RunConfig

__all__ = [
    "ARTIFACTS",
    "Artifact",
    "Timing",
    "artifact_names",
    "get_artifact",
    "register_artifact",
]

RunFn = Callable[["RunConfig"], dict[str, Any]]
"""Trains and writes result files; returns extra entries for ``settings.json``."""
ReportFn = Callable[[Path], None]
"""Rebuilds ``report.md`` and figures from the files in an output folder."""
PlanFn = Callable[["RunConfig"], list[Any]]
"""Lists the training chunks a run would execute (used by ``--estimate-epochs``)."""


@dataclass(frozen=True)
class Timing:
    """Run time on the reference machine (2-core AMD EPYC, 1 torch thread, one job).

    Attributes
    ----------
    quick_s : float or None
        Measured wall time of ``--quick`` (seconds, including the report).
    full_s : float or None
        Wall time at the paper's settings, estimated from measured per-step times
        (``--estimate-epochs``); ``None`` when unknown.
    full_measured : bool
        ``True`` when ``full_s`` was measured rather than estimated.
    """

    quick_s: float | None = None
    full_s: float | None = None
    full_measured: bool = False


@dataclass(frozen=True)
class Artifact:
    """One reproducible table or figure of the paper.

    Attributes
    ----------
    name : str
        CLI name, e.g. ``"table2"``.
    description : str
        One line for ``svbnn reproduce --list``.
    run : callable
        ``run(config) -> dict``; writes its files into ``config.out``.
    report : callable
        ``report(out_dir)``; rebuilds ``report.md`` and figures from saved files.
    defaults : mapping
        Settings at the paper's values (keys of :class:`svbnn_experiments.common.RunConfig`
        such as ``reps`` and ``epochs``, anything else goes to ``config.params``).
    quick : mapping
        Overrides applied by ``--quick``.
    options : frozenset of str
        Optional CLI settings the artifact uses (``covariates``, ``init``, ``methods``...).
    plan : callable, optional
        Lists the training chunks; enables ``--estimate-epochs``.
    group : str
        ``"simulation"``, ``"figure"``, ``"real-data"``...
    timing : Timing
        Run-time figures for ``--list``.
    kernels : str, optional
        The kernel backend ``svbnn reproduce`` runs the artifact with when neither
        ``--kernels`` nor ``SVBNN_KERNELS`` names one (``None``: the library's, eager).
    """

    name: str
    description: str
    run: RunFn
    report: ReportFn
    defaults: Mapping[str, Any] = field(default_factory=dict)
    quick: Mapping[str, Any] = field(default_factory=dict)
    options: frozenset[str] = frozenset()
    plan: PlanFn | None = None
    group: str = "simulation"
    timing: Timing = Timing()
    kernels: str | None = None


_ARTIFACTS: dict[str, Artifact] = {}
ARTIFACTS: Mapping[str, Artifact] = MappingProxyType(_ARTIFACTS)
"""Read-only view of the registered artifacts, in registration order."""


def register_artifact(
    name: str,
    *,
    description: str,
    report: ReportFn,
    defaults: Mapping[str, Any] | None = None,
    quick: Mapping[str, Any] | None = None,
    options: tuple[str, ...] | frozenset[str] = (),
    plan: PlanFn | None = None,
    group: str = "simulation",
    timing: Timing | None = None,
    kernels: str | None = None,
) -> Callable[[RunFn], RunFn]:
    """Decorator that registers ``run`` as the artifact ``name``.

    Examples
    --------
    >>> @register_artifact("uci", description="UCI regression (Table 4)", report=uci_report,
    ...                    defaults={"reps": 20, "epochs": 500}, quick={"reps": 1, "epochs": 2})
    ... def uci(config):
    ...     ...
    """
    if not name or name != name.strip() or " " in name or name == "all":
        raise ValueError(f"invalid artifact name {name!r}")

    def deco(run: RunFn) -> RunFn:
        if name in _ARTIFACTS:
            raise ValueError(f"artifact {name!r} is already registered")
        _ARTIFACTS[name] = Artifact(
            name=name,
            description=description,
            run=run,
            report=report,
            defaults=MappingProxyType(dict(defaults or {})),
            quick=MappingProxyType(dict(quick or {})),
            options=frozenset(options),
            plan=plan,
            group=group,
            timing=timing or Timing(),
            kernels=kernels,
        )
        return run

    return deco


def artifact_names() -> list[str]:
    """Names of all registered artifacts, in registration order."""
    return list(_ARTIFACTS)


def get_artifact(name: str) -> Artifact:
    """The registered artifact ``name``; a ``ValueError`` lists the known ones otherwise."""
    try:
        return _ARTIFACTS[name]
    except KeyError:
        known = ", ".join(_ARTIFACTS) or "(none)"
        raise ValueError(f"unknown artifact {name!r}; known artifacts: {known}") from None
