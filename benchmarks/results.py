"""The benchmark's results: measured rows (the CSV/JSON records), targets, the whole report."""

from __future__ import annotations

import argparse
import statistics
from dataclasses import dataclass, field
from typing import Any

from .networks import BAYESIAN_TORCH, BT_INSTALL, DENSE, N_REPLICATES, REFERENCE, SVBNN, NetSpec
from .timing import Timing, paired_ratio, rep_ratios


@dataclass
class Row:
    """One measured quantity (the CSV/JSON record)."""

    section: str
    network: str
    implementation: str
    metric: str
    unit: str
    median: float | None
    q1: float | None = None
    q3: float | None = None
    n: int | None = None
    note: str = ""


@dataclass
class Target:
    """A pass/fail performance target."""

    name: str
    measured: float | None
    op: str  # "<=" or ">="
    threshold: float
    note: str = ""
    profile: str | None = None  # what to profile when missed: a network key or "rep30"

    @property
    def passed(self) -> bool | None:
        if self.measured is None:
            return None
        if self.op == "<=":
            return self.measured <= self.threshold
        return self.measured >= self.threshold


@dataclass
class Report:
    """Everything one run measured, and the Markdown written from it."""

    meta: dict[str, Any]
    rows: list[Row] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    markdown: list[str] = field(default_factory=list)
    profiles: dict[str, str] = field(default_factory=dict)
    breakdown: dict[str, dict[str, Timing]] = field(default_factory=dict)
    rep_breakdown: dict[str, Timing] = field(default_factory=dict)


def timing_row(
    section: str, network: str, implementation: str, metric: str, t: Timing, note: str = ""
) -> Row:
    """The row of one timing, in milliseconds: median, quartiles and number of rounds."""
    return Row(
        section,
        network,
        implementation,
        metric,
        "ms",
        t.median * 1e3,
        t.q1 * 1e3,
        t.q3 * 1e3,
        len(t.per_round),
        note,
    )


def add_breakdown_rows(report: Report, what: str, pieces: dict[str, Timing]) -> None:
    """The CSV/JSON rows of one "where the time goes" table."""
    for piece, t in pieces.items():
        report.rows.append(timing_row("breakdown", what, SVBNN, piece, t))


def add_memory_rows(
    report: Report, mem: dict[str, dict[str, int] | str], args: argparse.Namespace
) -> None:
    """The rows of section 4: peak RSS and the steps' working memory per configuration."""
    for config, rec in mem.items():
        what, impl = config.split(":")
        if isinstance(rec, str):
            report.rows.append(Row("memory", what, impl, "peak_rss", "MiB", None, note=rec))
            continue
        report.rows.append(
            Row(
                "memory",
                what,
                impl,
                "peak_rss",
                "MiB",
                rec["peak_rss"] / 2**20,
                note=f"{args.memory_steps} steps in a fresh process",
            )
        )
        if rec.get("steps_peak") is not None:
            report.rows.append(
                Row(
                    "memory",
                    what,
                    impl,
                    "step_working_memory",
                    "MiB",
                    (rec["steps_peak"] - rec["rss_before"]) / 2**20,
                    note="peak during the steps - RSS before them",
                )
            )


def _speed_targets(
    train: dict[str, dict[str, Timing]], nets: dict[str, NetSpec], bt_ok: bool
) -> list[Target]:
    """The step-time targets: SVBNN against a dense step per profile, and its speedup over
    the reference implementation and bayesian-torch on MNIST. The step-time ratios and the
    bayesian-torch speedup are issue 17's (MNIST <= 1.5x, Simulation II and UCI <= 1.6x,
    bayesian-torch / SVBNN >= 1.3x)."""

    def ratio(key: str, num: str, den: str) -> float | None:
        res = train.get(key, {})
        if num not in res or den not in res:
            return None
        return paired_ratio(res[num], res[den])[0]

    targets = [
        Target(
            f"SVBNN/dense step time, {nets[key].label}",
            ratio(key, SVBNN, DENSE),
            "<=",
            limit,
            profile=key,
        )
        for key, limit in (("mnist", 1.5), ("sim2", 1.6), ("uci", 1.6))
    ]
    targets.append(
        Target(
            "SVBNN speedup over reference, MNIST",
            ratio("mnist", REFERENCE, SVBNN),
            ">=",
            2.0,
            profile="mnist",
        )
    )
    bt = ratio("mnist", BAYESIAN_TORCH, SVBNN)
    bt_note = "" if bt_ok else f"bayesian-torch not importable: `{BT_INSTALL}`"
    targets.append(
        Target("SVBNN speedup over bayesian-torch, MNIST", bt, ">=", 1.3, bt_note, profile="mnist")
    )
    return targets


def add_targets(
    report: Report,
    train: dict[str, dict[str, Timing]],
    reps: dict[str, Timing],
    inf: dict[str, Any],
    nets: dict[str, NetSpec],
    bt_ok: bool,
) -> None:
    """The pass/fail targets, from the measured sections (``bt_ok``: bayesian-torch imports)."""
    report.targets += _speed_targets(train, nets, bt_ok)
    thr = statistics.median(rep_ratios(reps["batched"], reps["single"]))
    report.targets.append(
        Target(
            f"throughput, {N_REPLICATES} batched / sequential replications",
            thr,
            ">=",
            10.0,
            profile=f"rep{N_REPLICATES}",
        )
    )
    sizes = inf["sizes"]
    report.targets.append(
        Target(
            "size on disk, dense / exported sparse MNIST",
            sizes["dense"] / sizes["exported"],
            ">=",
            10.0,
        )
    )
