"""Smoke test of ``python -m benchmarks.engine_paths``: every variant takes the path it names
(or the run stops), and the report is written. No timing assertions: the machine's speed is
not under test."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from benchmarks import engine_paths as ep
from benchmarks.networks import NetSpec
from svbnn._engine import native as _native

TINY = NetSpec("tiny", "tiny MLP", "mlp", 6, (4,), 1, "regression", 16, 100, 1e-3)


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def _read(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_eager_variants_are_timed_and_written(tmp_path: Path) -> None:
    case = ep.Case("tiny", "tiny", TINY, "a test", ("L1", "F2"), (("F2", "L1"),))
    rows, variants = ep.run([case], rounds=2, block_ms=1.0, out=tmp_path, warmup=0)
    assert [(r["path"], r["other_path"]) for r in rows] == [(2, 1)]
    assert rows[0]["rounds"] == 2
    assert rows[0]["ratio_q1"] <= rows[0]["ratio_median"] <= rows[0]["ratio_q3"]
    assert rows[0]["verdict"] == ("KEEP" if rows[0]["ratio_q3"] < 0.91 else "DROP candidate")
    assert [v["path"] for v in variants] == [1, 2]
    saved = _read(tmp_path / "results.csv")
    assert [(r["fast"], r["other"], r["verdict"]) for r in saved] == [
        ("F2", "L1", rows[0]["verdict"])
    ]
    assert len(_read(tmp_path / "variants.csv")) == 2
    report = (tmp_path / "report.md").read_text()
    for text in ("- CPU: ", "torch " + torch.__version__, "- date (UTC): ", "| 2 | tiny | F2 |"):
        assert text in report


def test_a_variant_that_takes_another_path_stops_the_run(monkeypatch: pytest.MonkeyPatch) -> None:
    # fused=True under eager takes path 2, not the 1 it claims
    monkeypatch.setitem(ep.VARIANTS, "X", ep.Variant("X", 1, "mislabelled", "eager"))
    case = ep.Case("tiny", "tiny", TINY, "a test", ("X",), ())
    with pytest.raises(RuntimeError, match="should take path 1 but took 2"):
        ep.measure_case(case, rounds=1, block_s=0.0, warmup=0, log=lambda s: None)


@pytest.mark.skipif(not _native.available(), reason="no C++ compiler for the native loops")
@pytest.mark.parametrize(("replicates", "variants"), [(None, ("N4n", "N7n")), (3, ("N4s", "N7"))])
def test_native_variants_take_their_paths(
    replicates: int | None, variants: tuple[str, str]
) -> None:
    # path 7 turned away by the benchmark's patch: the draw + KL on the loops (path 4)
    case = ep.Case(
        "tiny",
        "tiny",
        TINY,
        "a test",
        variants,
        ((variants[1], variants[0]),),
        learn_noise=replicates is None,
        replicates=replicates,
    )
    rows, timed = ep.run([case], rounds=1, block_ms=0.0, out=None, warmup=0, log=lambda s: None)
    assert [v["path"] for v in timed] == [4, 7]
    assert rows[0]["path"] == 7 and rows[0]["other_path"] == 4
    # the patch is gone after the run: the native backend takes path 7 again
    step = ep.build_step(case, ep.VARIANTS[variants[1]])
    with ep.variant_scope(ep.Variant("plain", 7, "native", ep.VARIANTS[variants[1]].backend)):
        assert 7 in ep.observed_paths(step)


def test_unknown_network_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        ep.main(["--networks", "nope"])
    assert "unknown --networks ['nope']" in capsys.readouterr().err


@pytest.mark.slow
def test_every_default_variant_takes_its_path() -> None:
    # one step of each variant of each default network (compiles the graphs of I3, G5, G6)
    for case in ep.default_cases().values():
        for key in case.variants:
            variant = ep.VARIANTS[key]
            with ep.variant_scope(variant):
                step = ep.build_step(case, variant)
                step()
                seen = ep.observed_paths(step)
            assert ep._path_taken(seen) == variant.path, (case.key, key, seen)
