"""A fitted estimator saved to and loaded from a weights-only file (issue 32, item 6): the
loaded one predicts bit for bit the same, and a crafted file cannot run code."""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LinearRegression

import svbnn
from svbnn import (
    EstimatorFileError,
    SVBNNClassifier,
    SVBNNRegressor,
    VBNNRegressor,
    load_estimator,
    save_estimator,
)
from svbnn import _estimator_io as io_mod


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 4))
    return X, X[:, 0] - 0.5 * X[:, 1] + 0.1 * rng.normal(size=60)


def _fit(est: Any, X: np.ndarray, y: np.ndarray) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a 3-epoch fit is not converged, by design
        return est.fit(X, y)


def _same_fitted(a: Any, b: Any) -> None:
    fitted = {k for k in vars(a) if k.endswith("_")}
    assert fitted == {k for k in vars(b) if k.endswith("_")}
    for k in fitted - {"module_", "history_"}:
        va, vb = getattr(a, k), getattr(b, k)
        if isinstance(va, list):
            assert len(va) == len(vb) and all(
                np.array_equal(u, v) for u, v in zip(va, vb, strict=True)
            ), k
        else:
            assert np.array_equal(va, vb), k
            assert type(va) is type(vb), k
    assert a.history_ == b.history_
    sa, sb = a.module_.state_dict(), b.module_.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)


@pytest.fixture(scope="module")
def regressor() -> SVBNNRegressor:
    X, y = _data()
    return _fit(SVBNNRegressor(hidden_layer_sizes=(8,), max_iter=3, random_state=0), X, y)


def test_regressor_round_trip_is_bit_for_bit(regressor: SVBNNRegressor, tmp_path: Path) -> None:
    X, _ = _data()
    path = tmp_path / "reg.svbnn"
    regressor.save(path)
    loaded = SVBNNRegressor.load(path)
    assert type(loaded) is SVBNNRegressor
    assert loaded.get_params() == regressor.get_params()
    _same_fitted(regressor, loaded)
    for a, b in zip(
        regressor.predict(X, return_std=True), loaded.predict(X, return_std=True), strict=True
    ):
        assert np.array_equal(a, b)
    for a, b in zip(regressor.predict_interval(X), loaded.predict_interval(X), strict=True):
        assert np.array_equal(a, b)
    # The module-level functions read the same file; the loaded model saves again, identically.
    again = load_estimator(path)
    assert np.array_equal(again.predict(X), regressor.predict(X))
    save_estimator(again, tmp_path / "again.svbnn")
    assert (tmp_path / "again.svbnn").read_bytes() == path.read_bytes()


def test_classifier_with_string_labels_round_trip(tmp_path: Path) -> None:
    X, y = _data()
    labels = np.where(y > 0, "up", "down")
    clf = _fit(
        SVBNNClassifier(hidden_layer_sizes=4, max_iter=3, random_state=np.random.default_rng(1)),
        X,
        labels,
    )
    clf.save(tmp_path / "clf.svbnn")
    loaded = SVBNNClassifier.load(tmp_path / "clf.svbnn")
    _same_fitted(clf, loaded)
    assert np.array_equal(loaded.predict(X), clf.predict(X))
    assert np.array_equal(loaded.predict_proba(X), clf.predict_proba(X))
    # A Generator seed source is not data: saved as None (the prediction seed is saved).
    assert loaded.random_state is None
    assert loaded.hidden_layer_sizes == 4


def test_a_baseline_round_trips(tmp_path: Path) -> None:
    X, y = _data()
    est = _fit(VBNNRegressor(hidden_layer_sizes=(8,), max_iter=2, random_state=0), X, y)
    save_estimator(est, tmp_path / "vb.svbnn")
    assert np.array_equal(load_estimator(tmp_path / "vb.svbnn").predict(X), est.predict(X))


def test_loading_another_class_is_refused(regressor: SVBNNRegressor, tmp_path: Path) -> None:
    regressor.save(tmp_path / "reg.svbnn")
    with pytest.raises(EstimatorFileError, match="holds a SVBNNRegressor, not a SVBNNClassifier"):
        SVBNNClassifier.load(tmp_path / "reg.svbnn")


def test_unfitted_and_foreign_estimators_are_refused(tmp_path: Path) -> None:
    with pytest.raises(NotFittedError):
        SVBNNRegressor().save(tmp_path / "x.svbnn")
    with pytest.raises(TypeError, match="estimator must be one of .*got LinearRegression"):
        save_estimator(LinearRegression(), tmp_path / "x.svbnn")
    assert not (tmp_path / "x.svbnn").exists()


def _with_header(payload: bytes) -> bytes:
    """``payload`` behind a valid header and SHA-256 (what anyone can write)."""
    digest = hashlib.sha256(payload).hexdigest().encode("ascii")
    return io_mod._MAGIC + digest + b"\n" + payload


class _Payload:
    """Unpickling this runs ``touch <marker>``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        import os

        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_pickle_runs_no_code(tmp_path: Path) -> None:
    marker = tmp_path / "PWNED"
    # The payload would run code under plain pickle or torch.load(weights_only=False)...
    buf = io.BytesIO()
    torch.save({"format": "svbnn-estimator", "version": 1, "meta": _Payload(marker)}, buf)
    torch.load(io.BytesIO(buf.getvalue()), weights_only=False)
    assert marker.exists()
    marker.unlink()
    # ...and is refused behind a valid header and hash, without running.
    crafted = tmp_path / "crafted.svbnn"
    crafted.write_bytes(_with_header(buf.getvalue()))
    with pytest.raises(EstimatorFileError, match="holds more than weights") as info:
        SVBNNRegressor.load(crafted)
    assert str(crafted) in str(info.value)
    # A plain pickle (what pickle.dump of an estimator writes) is not an estimator file.
    plain = tmp_path / "plain.pkl"
    plain.write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(EstimatorFileError, match="not an svbnn estimator file"):
        load_estimator(plain)
    assert not marker.exists()


def _rewrite(path: Path, change: Any) -> None:
    """Load the payload, let ``change(blob)`` alter it, and write it back with a valid hash."""
    raw = path.read_bytes()
    head = len(io_mod._MAGIC) + io_mod._HASH_LEN + 1
    blob = torch.load(io.BytesIO(raw[head:]), weights_only=True)
    change(blob)
    buf = io.BytesIO()
    torch.save(blob, buf)
    path.write_bytes(_with_header(buf.getvalue()))


def _set_meta(blob: dict[str, Any], **changes: Any) -> None:
    meta = json.loads(blob["meta"])
    meta.update(changes)
    blob["meta"] = json.dumps(meta)


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        (lambda b: b["module"].__setitem__("mu", b["module"]["mu"] * np.nan), "non-finite"),
        (lambda b: b["module"].__setitem__("mu", b["module"]["mu"][:3]), "do not fit"),
        (lambda b: _set_meta(b, **{"class": "os.system"}), "unknown estimator class"),
        (
            lambda b: _set_meta(b, params={**json.loads(b["meta"])["params"], "tol": -1.0}),
            "parameters that SVBNNRegressor refuses: tol",
        ),
        (
            lambda b: _set_meta(
                b, params={**json.loads(b["meta"])["params"], "prior_variance": 1e-300}
            ),
            "prior_variance",
        ),
        (lambda b: b.__setitem__("version", 99), "format version 99"),
        (lambda b: b.__setitem__("meta", "{not json"), "not a valid svbnn estimator file"),
    ],
)
def test_crafted_contents_are_refused(
    regressor: SVBNNRegressor, tmp_path: Path, change: Any, needle: str
) -> None:
    path = tmp_path / "m.svbnn"
    regressor.save(path)
    _rewrite(path, change)
    with pytest.raises(EstimatorFileError, match=needle) as info:
        SVBNNRegressor.load(path)
    assert str(path) in str(info.value)


def test_damaged_files_are_named(regressor: SVBNNRegressor, tmp_path: Path) -> None:
    path = tmp_path / "m.svbnn"
    regressor.save(path)
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(EstimatorFileError, match="is corrupted"):
        SVBNNRegressor.load(path)
    path.write_bytes(b"")
    with pytest.raises(EstimatorFileError, match="is empty"):
        SVBNNRegressor.load(path)
    with pytest.raises(EstimatorFileError, match="does not exist"):
        SVBNNRegressor.load(tmp_path / "nope.svbnn")


def test_a_failed_save_keeps_the_previous_file(
    regressor: SVBNNRegressor, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "m.svbnn"
    regressor.save(path)
    before = path.read_bytes()

    def fail(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(svbnn.checkpoint.os, "replace", fail)
    with pytest.raises(OSError, match=f"cannot write the estimator to {path}"):
        regressor.save(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.svbnn"]  # no temporary left


def test_saving_under_a_regular_file_names_it(regressor: SVBNNRegressor, tmp_path: Path) -> None:
    (tmp_path / "f").touch()
    with pytest.raises(OSError, match=f"{tmp_path / 'f'} is a file, not a folder"):
        regressor.save(tmp_path / "f" / "m.svbnn")
