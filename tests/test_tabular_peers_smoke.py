"""Smoke test of ``benchmarks.tabular_peers`` (issue 31): a tiny configuration runs every
peer and an svbnn variant, writes its cache and report, and a rerun of svbnn alone reuses
the peers' cached rows. No timing or accuracy assertions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import benchmarks.tabular_peers as tp

TINY = ["--max-splits", "1", "--in-process", "--smoke"]


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_tiny_run_caches_the_peers_and_reports(tmp_path: Path) -> None:
    out = tmp_path / "peers"
    args = ["--out", str(out), "--datasets", "wine", "diabetes", *TINY]
    tp.main([*args, "--svbnn", 'SVBNN={"max_iter": 3, "hidden_layer_sizes": [4]}'])
    rows = tp.read_rows(out / "results.csv")
    methods = {(r["dataset"], r["method"]) for r in rows}
    assert methods == {("wine", m) for m in (*tp.CLF_PEERS, "SVBNN")} | {
        ("diabetes", m) for m in (*tp.REG_PEERS, "SVBNN")
    }
    for r in rows:
        assert r["split"] == 0 and r["p"] == (23 if r["dataset"] == "wine" else 20)
        if r["dataset"] == "wine":
            assert 0 <= r["accuracy"] <= 1 and 0 <= r["ece"] <= 1
        else:
            assert np.isfinite(r["rmse"])
    sv = next(r for r in rows if r["dataset"] == "diabetes" and r["method"] == "SVBNN")
    assert sv["sel_true"] + sv["sel_noise"] >= 0 and np.isfinite(sv["nll"])
    assert 0 <= sv["coverage"] <= 1
    md = (out / "report.md").read_text()
    for part in ("## wine", "## diabetes", "RMSE <= 1.05x best", "ECE <=", "no collapse"):
        assert part in md, part
    # The defaults at a glance: a line per data set with its count of targets met.
    glance = md[md.index("## At a glance: `SVBNN`") : md.index("## wine")]
    assert "| wine | classification | 134 | " in glance and " of 6 |" in glance
    assert "| diabetes | regression | 332 | " in glance
    # A rerun of one svbnn variant fits it alone: the peers' rows are the cached ones.
    peers = {(r["dataset"], r["method"]): r["fit_s"] for r in rows if r["method"] != "SVBNN"}
    tp.main([*args, "--no-peers", "--svbnn", 'SVBNN-eb={"max_iter": 3, "prior_inclusion": "eb"}'])
    again = tp.read_rows(out / "results.csv")
    assert {
        (r["dataset"], r["method"]): r["fit_s"] for r in again if "SVBNN" not in r["method"]
    } == (peers)
    assert {r["method"] for r in again if r["dataset"] == "wine"} >= {"SVBNN", "SVBNN-eb"}
    assert "SVBNN-eb:" in (out / "report.md").read_text()
    # The report is rebuilt from the saved files alone, notes.md's words after the command.
    (out / "report.md").unlink()
    (out / "notes.md").write_text("How the rows were made: by this test.\n")
    tp.main(["--out", str(out), "--report-only"])
    md = (out / "report.md").read_text()
    assert "SVBNN-eb:" in md
    assert md.index("Command: ") < md.index("How the rows were made: by this test.\n\n")
    assert md.index("by this test.") < md.index("## At a glance")


def test_splits_follow_the_table_size() -> None:
    assert tp.n_splits("wine") == 10 and tp.n_splits("digits") == 3
    d = tp.make_split("wine", 0)
    assert d["Xtr"].shape == (134, 23) and d["Xte"].shape == (44, 23)
    # The noise columns are N(0, 1) and differ between splits.
    assert abs(d["Xtr"][:, -10:].std() - 1) < 0.1
    assert not np.array_equal(d["Xtr"][:, -1], tp.make_split("wine", 1)["Xtr"][:, -1])
    assert list(tp.DATASETS)[:3] == ["wine", "yacht", "diabetes"]
    # regression-20: a linear target of 20 inputs, all of them true.
    d = tp.make_split("regression-20", 0)
    assert d["kind"] == "regression" and d["n_true"] is None
    assert d["Xtr"].shape == (375, 30) and tp.n_splits("regression-20") == 10


def test_rows_draws_a_small_table_per_split() -> None:
    # --rows: each split draws its own rows of the table (digits then has 10 splits).
    assert tp.n_splits("digits", 110) == 10 and tp.n_splits("digits", 1500) == 3
    a, b = tp.make_split("digits", 0, 110), tp.make_split("digits", 1, 110)
    assert a["Xtr"].shape == (82, 74) and a["Xte"].shape == (28, 74)
    full = tp.make_split("digits", 0)
    original = {tuple(r) for r in np.vstack([full["Xtr"], full["Xte"]])[:, :64]}
    assert {tuple(r) for r in a["Xtr"][:, :64]} <= original
    assert not np.array_equal(a["ytr"], b["ytr"])
    np.testing.assert_array_equal(a["Xtr"], tp.make_split("digits", 0, 110)["Xtr"])
    with pytest.raises(ValueError, match="--rows"):
        tp.make_split("wine", 0, 500)


def test_rows_beyond_a_table_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        tp.main(["--out", str(tmp_path / "out"), "--rows", "500", "--datasets", "wine"])
    assert exit_.value.code == 2
    assert "--rows must be in [8, 178]" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_a_failing_peer_is_a_recorded_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Broken:
        def fit(self, X: np.ndarray, y: np.ndarray) -> None:
            raise ValueError("Input y contains infinity")

    builders = tp.peer_builders
    monkeypatch.setattr(
        tp,
        "peer_builders",
        lambda *a: {**builders(*a), "NGBoost": lambda p: tp._pipe(Broken())},
    )
    out = tmp_path / "peers"
    tp.main(["--out", str(out), "--datasets", "wine", *TINY, "--svbnn", 'SVBNN={"max_iter": 3}'])
    rows = {r["method"]: r for r in tp.read_rows(out / "results.csv")}
    assert rows["NGBoost"]["warnings"] == "failed: ValueError: Input y contains infinity"
    assert rows["NGBoost"]["accuracy"] is None and rows["SVBNN"]["accuracy"] is not None
    md = (out / "report.md").read_text()
    assert "- NGBoost failed on split 0: ValueError: Input y contains infinity" in md
    assert "SVBNN: " in md  # the targets are still checked against the peers that fitted


def test_the_regression_tables_are_every_table_but_the_classification_ones() -> None:
    from benchmarks.tabular_peers import (
        CLASSIFICATION_TABLES,
        DATASETS,
        REGRESSION_TABLES,
        UCI_SETS,
        load_table,
    )

    assert set(REGRESSION_TABLES) | set(CLASSIFICATION_TABLES) == set(DATASETS)
    assert not set(REGRESSION_TABLES) & set(CLASSIFICATION_TABLES)
    assert set(UCI_SETS) <= set(REGRESSION_TABLES)
    for name in DATASETS:
        if name not in UCI_SETS:  # the UCI tables need the data folder
            want = "regression" if name in REGRESSION_TABLES else "classification"
            assert load_table(name)[2] == want, name


def test_a_regressor_only_variant_applies_to_the_regression_tables() -> None:
    from benchmarks.tabular_peers import svbnn_applies

    assert svbnn_applies("regression", {"mean_function": "zero"})
    assert not svbnn_applies("classification", {"mean_function": "zero"})
    assert svbnn_applies("classification", {"kl_weight": 0.35})
    assert svbnn_applies("regression", {})
