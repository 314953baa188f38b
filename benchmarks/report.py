"""The report writer: the Markdown summary (one function per section), the CSV and the JSON.

:func:`write_markdown` fills ``report.markdown``; :func:`write_files` writes ``bench.md``,
``bench.csv`` (one :class:`~benchmarks.results.Row` a line) and ``bench.json`` (meta, rows,
targets, profiles) into the output folder.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from svbnn._engine.kernels import AUTO_MIN_NUMEL

from .networks import (
    BAYESIAN_TORCH,
    BT_INSTALL,
    DENSE,
    IMPL_LABELS,
    N_REPLICATES,
    REFERENCE,
    SVBNN,
    NetSpec,
)
from .results import Report
from .timing import Timing, paired_ratio, rep_ratios

# Every table has a column per implementation, measured or not ("skipped").
_ALL_IMPLS = [DENSE, SVBNN, REFERENCE, BAYESIAN_TORCH]

Memory = dict[str, dict[str, int] | str]


def _fmt(t: Timing | None, scale: float = 1e3, digits: int = 3) -> str:
    if t is None:
        return "skipped"
    return f"{_sig(t.median * scale, digits)} [{_sig(t.q1 * scale, 2)}–{_sig(t.q3 * scale, 2)}]"


def _sig(v: float, digits: int) -> str:
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    places = max(0, digits - 1 - int(math.floor(math.log10(abs(v)))))
    return f"{v:.{places}f}"


def _fmt_ratio(r: tuple[float, float, float] | None) -> str:
    if r is None:
        return "skipped"
    return f"{r[0]:.2f}x [{r[1]:.2f}–{r[2]:.2f}]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


def write_markdown(
    report: Report,
    nets: list[NetSpec],
    train: dict[str, dict[str, Timing]],
    reps: dict[str, Timing],
    inf: dict[str, Any],
    mem: Memory,
    bt_ok: bool,
    args: argparse.Namespace,
) -> None:
    """Fill ``report.markdown`` with the summary, section by section (empty ones left out)."""
    md = report.markdown
    md += _header(report.meta, bt_ok, args)
    md += _training_section(nets, train, args)
    md += _replicates_section(reps, args)
    if mem:
        md += _memory_section(nets, mem, args)
    md += _inference_section(inf, args)
    md += _targets_section(report)
    if report.breakdown:
        md += _breakdown_section(report, nets)
    if report.rep_breakdown:
        md += _rep_breakdown_section(report)
    for key, prof in report.profiles.items():
        md += _profile_section(key, prof)


def _header(m: dict[str, Any], bt_ok: bool, args: argparse.Namespace) -> list[str]:
    md = ["# svbnn benchmark", ""]
    md.append(
        f"torch {m['torch']}, **{m['threads']} thread(s)**, Python {m['python']}, "
        f"{m['machine']}; svbnn kernels: {m['svbnn_kernels']} "
        f"(native draw + KL loops: {m.get('native_loops', 'not recorded')}); "
        f"bayesian-torch: {m['bayesian_torch']}."
    )
    md.append(
        f"Medians over {args.repeats} interleaved rounds (CNN: {args.cnn_repeats}) "
        "with [interquartile range]; ratios are medians of per-round ratios."
    )
    if args.quick:
        md.append("**Quick mode: smoke test only, the numbers are not measurements.**")
    if not bt_ok:
        md.append(f"bayesian-torch column skipped: not importable. Install with `{BT_INSTALL}`.")
    md.append("")
    return md


def _training_section(
    nets: list[NetSpec], train: dict[str, dict[str, Timing]], args: argparse.Namespace
) -> list[str]:
    md = ["## 1-2. Training step (forward, backward, Adam step), ms", ""]
    header = ["network", "T (params)", "batch"] + [IMPL_LABELS[i] for i in _ALL_IMPLS]
    header += ["SVBNN/dense", "reference/SVBNN", "bayesian-torch/SVBNN"]
    rows = []
    for net in nets:
        res = train[net.key]
        row = [f"{net.label} ({net.arch()})", f"{net.n_params():,}", str(net.batch)]
        row += [_fmt(res.get(i)) for i in _ALL_IMPLS]
        row.append(_fmt_ratio(paired_ratio(res[SVBNN], res[DENSE])))
        for other in (REFERENCE, BAYESIAN_TORCH):
            row.append(
                _fmt_ratio(paired_ratio(res[other], res[SVBNN])) if other in res else "skipped"
            )
        rows.append(row)
    md += _table(header, rows)
    md.append("")
    md.append(
        "All use the same Adam (`svbnn.training.make_optimizer`). SVBNN: "
        "`SpikeSlabMLP`/`SpikeSlabConv2d` + `negative_elbo`; reference: "
        "`benchmarks/reference.py` (Algorithm 1 with plain autograd); bayesian-torch: "
        "`LinearReparameterization`/`Conv2dReparameterization` (Gaussian mean field). "
        "Data: one fixed synthetic minibatch. CNN: hidden FC width "
        f"{args.cnn_hidden} (the supplement gives only the 64*8*8 input), "
        f"{args.cnn_repeats} rounds of 1 step."
    )
    md.append("")
    return md


def _replicates_section(reps: dict[str, Timing], args: argparse.Namespace) -> list[str]:
    md = [f"## 3. {N_REPLICATES} replications of Simulation II", ""]
    b, s = reps["batched"], reps["single"]
    thr_b = [N_REPLICATES / v for v in b.per_round]
    thr_s = [1.0 / v for v in s.per_round]
    ratio = rep_ratios(b, s)
    md += _table(
        ["mode", "time per step, ms", "replicate-steps/s", "throughput ratio"],
        [
            [
                f"batched: one `SpikeSlabMLP(..., n_replicates={N_REPLICATES})`, data "
                f"({N_REPLICATES}, n, p)",
                _fmt(b),
                f"{statistics.median(thr_b):,.0f}",
                f"{statistics.median(ratio):.1f}x [{np.percentile(ratio, 25):.1f}–"
                f"{np.percentile(ratio, 75):.1f}]",
            ],
            [
                f"sequential: {N_REPLICATES} one-replicate networks trained one after "
                "another (time per step of one replicate)",
                _fmt(s),
                f"{statistics.median(thr_s):,.0f}",
                "1x",
            ],
        ],
    )
    md.append("")
    md.append(
        f"Both are `svbnn.training.train` runs of {args.rep_epochs} epoch(s) a round (every "
        f"replicate: n = 3000, minibatches of 512, a new random order each epoch, the last "
        f"minibatch 440), on synthetic data of Simulation II's shape; {args.rep_repeats} "
        "interleaved rounds. Throughput ratio = (time of the 30 sequential runs) / (time of "
        "the batched run), per round."
    )
    md.append("")
    return md


def _memory_cell(mem: Memory, config: str) -> str:
    """Peak RSS in MiB, with the steps' working memory in brackets when measured."""
    rec = mem.get(config)
    if rec is None:
        return "skipped"
    if isinstance(rec, str):
        return rec
    total = f"{rec['peak_rss'] / 2**20:.0f}"
    if rec.get("steps_peak") is None:
        return total
    return f"{total} (+{(rec['steps_peak'] - rec['rss_before']) / 2**20:.1f})"


def _memory_section(nets: list[NetSpec], mem: Memory, args: argparse.Namespace) -> list[str]:
    md = ["## 4. Peak memory, MiB: peak RSS of a fresh process (+ the steps' working set)", ""]
    md.append(
        f"Peak RSS (`VmHWM`) of one fresh subprocess per configuration that builds "
        f"the model and data and runs {args.memory_steps} training steps; in brackets "
        "the peak during the steps minus the RSS just before them (the steps' own "
        "working memory). The torch runtime alone (~300 MiB, imports included) is "
        "most of the total on small nets."
    )
    md.append("")
    md += _table(
        ["network"] + [IMPL_LABELS[i] for i in _ALL_IMPLS],
        [[net.label] + [_memory_cell(mem, f"{net.key}:{i}") for i in _ALL_IMPLS] for net in nets]
        + [
            [label, "", _memory_cell(mem, f"{config}:{SVBNN}"), "", ""]
            for label, config in (
                (f"Sim II replications: {N_REPLICATES} batched", f"rep{N_REPLICATES}"),
                ("Sim II replications: one replicate", "rep1"),
            )
        ],
    )
    md.append("")
    return md


def _inference_section(inf: dict[str, Any], args: argparse.Namespace) -> list[str]:
    md = ["## 5. Inference: exported sparse MNIST network vs dense", ""]
    lat = inf["latency"]
    md += _table(
        [
            "model",
            "density",
            "size on disk, bytes",
            "latency batch 1, ms",
            "latency batch 1000, ms",
        ],
        [
            [
                "`export_sparse` (CSR `SparseLinear`)",
                f"{inf['density']:.2%}",
                f"{inf['sizes']['exported']:,}",
                _fmt(lat[1]["exported"], digits=3),
                _fmt(lat[1000]["exported"]),
            ],
            [
                "dense `nn.Linear` 784-512-512-10",
                "100%",
                f"{inf['sizes']['dense']:,}",
                _fmt(lat[1]["dense"], digits=3),
                _fmt(lat[1000]["dense"]),
            ],
        ],
    )
    md.append("")
    md.append(
        f"Sparsity is **not** trained (training MNIST is too long for a benchmark): "
        f"a seeded random {args.density:.0%} of the weights get phi = 0.98, the rest "
        "0.02, as SVBNN reaches about 5% on MNIST in the paper. Size = bytes of "
        "`torch.save(state_dict)` (`svbnn.selection.module_size_bytes`)."
    )
    md.append("")
    return md


def _targets_section(report: Report) -> list[str]:
    md = ["## Targets", ""]
    trows = []
    for t in report.targets:
        # Three decimals: a ratio just under its threshold (1.298 against 1.3) must not
        # read as the threshold itself next to FAIL.
        meas = "skipped" if t.measured is None else f"{t.measured:.3f}x"
        verdict = {True: "PASS", False: "FAIL", None: "n/a"}[t.passed]
        trows.append(
            [t.name, meas, f"{t.op} {t.threshold:g}x", verdict + (f" ({t.note})" if t.note else "")]
        )
    md += _table(["target", "measured", "required", "pass"], trows)
    md.append("")
    md.append(f"Total wall time {report.meta['wall_s']} s.")
    return md


def _breakdown_section(report: Report, nets: list[NetSpec]) -> list[str]:
    md = ["", "## Where the time goes: pieces of the SVBNN step timed separately, ms", ""]
    keys = list(report.breakdown)
    pieces = list(report.breakdown[keys[0]])
    md += _table(
        ["piece"] + [next(n.label for n in nets if n.key == k) for k in keys],
        [[p] + [_fmt(report.breakdown[k][p]) for k in keys] for p in pieces],
    )
    md.append("")
    md.append(
        "With `--kernels auto` a network of narrow layers (at most 16 outputs, ReLU: "
        "Simulation II's) under a Gaussian likelihood runs its step on svbnn's native loops "
        "as one autograd node (`svbnn._engine.native_step`); another network under "
        f"{AUTO_MIN_NUMEL:,} parameters (UCI's) runs its draw, KL, layers and likelihood as "
        "one compiled graph (`svbnn._engine.graphs.mlp_negative_elbo`). For those networks "
        "the pieces above are the eager kernels of the other path. Larger networks (MNIST) "
        "run the pieces as "
        "timed: the draw + KL function compiled. The memory floor row is what any draw + "
        "KL function must move (read the 3 parameter arrays and write the weights; read "
        "them and the weights' gradient and write 3 gradients), in compiled loops that do "
        "one addition per output."
    )
    return md


def _rep_breakdown_section(report: Report) -> list[str]:
    md = ["", f"## Where the time goes: the batched step of {N_REPLICATES} replicates, ms", ""]
    md += _table(["piece", "ms"], [[k, _fmt(t)] for k, t in report.rep_breakdown.items()])
    return md


def _profile_section(key: str, prof: str) -> list[str]:
    return [
        "",
        f"## torch.profiler: {key} (a target missed; sorted by self CPU time)",
        "",
        "```",
        prof.rstrip(),
        "```",
    ]


def write_files(report: Report, out: Path) -> None:
    """Write ``bench.md``, ``bench.csv`` and ``bench.json`` into ``out`` (created if needed)."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.md").write_text("\n".join(report.markdown) + "\n")
    with open(out / "bench.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(asdict(report.rows[0]).keys()))
        writer.writeheader()
        for row in report.rows:
            writer.writerow(asdict(row))
    payload = {
        "meta": report.meta,
        "rows": [asdict(r) for r in report.rows],
        "targets": [{**asdict(t), "passed": t.passed} for t in report.targets],
        "profiles": report.profiles,
    }
    (out / "bench.json").write_text(json.dumps(payload, indent=2) + "\n")
