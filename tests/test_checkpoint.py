"""Checkpoints: never code execution, corruption detected, errors naming the file, no stale
temporaries, resume still bit for bit."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest
import torch

from svbnn.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from svbnn.nn import SpikeSlabMLP
from svbnn.objectives import GaussianLikelihood
from svbnn.training import train


class _Exploit:
    """Pickles to a call of ``Path.touch`` on load (what ``os.system`` would do, harmlessly)."""

    def __init__(self, target: Path) -> None:
        self.target = target

    def __reduce__(self) -> tuple[object, tuple[object, ...]]:
        return (Path.touch, (self.target,))


def _fit(ckpt: Path, epochs: int, resume: bool = True) -> tuple[SpikeSlabMLP, list[float]]:
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(16, 3, generator=gen)
    y = X[:, 0] + 0.1 * torch.randn(16, generator=gen)
    model = SpikeSlabMLP(3, (4,), 1, generator=torch.Generator().manual_seed(1))
    hist = train(
        model,
        X,
        y,
        GaussianLikelihood(1.0),
        epochs=epochs,
        batch_size=4,
        lr=1e-2,
        generator=torch.Generator().manual_seed(2),
        checkpoint_path=ckpt,
        checkpoint_every=1,
        resume=resume,
    )
    return model, hist.loss


def test_planted_pickle_checkpoint_runs_no_code(tmp_path: Path) -> None:
    """The issue's reproduction: a checkpoint whose pickle calls a function on load."""
    marker = tmp_path / "PWNED"
    ckpt = tmp_path / "c.pt"
    torch.save({"model": _Exploit(marker)}, ckpt)  # a plain torch.save file, no header
    with pytest.raises(CheckpointError, match=str(ckpt)):
        _fit(ckpt, epochs=1)
    assert not marker.exists()


def test_planted_pickle_with_valid_header_and_hash_runs_no_code(tmp_path: Path) -> None:
    """An attacker who writes our header and a correct hash still cannot run code."""
    import hashlib
    import io

    marker = tmp_path / "PWNED"
    buf = io.BytesIO()
    torch.save({"model": _Exploit(marker)}, buf)
    payload = buf.getvalue()
    ckpt = tmp_path / "c.pt"
    ckpt.write_bytes(
        b"SVBNN-CHECKPOINT 1\n" + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload
    )
    with pytest.raises(CheckpointError, match="holds more than weights"):
        load_checkpoint(ckpt)
    with pytest.raises(CheckpointError):
        _fit(ckpt, epochs=1)
    assert not marker.exists()
    # Plain pickle files are refused the same way.
    ckpt.write_bytes(pickle.dumps({"model": _Exploit(marker)}))
    with pytest.raises(CheckpointError, match="not an svbnn checkpoint"):
        load_checkpoint(ckpt)
    assert not marker.exists()


def test_overwritten_bytes_are_detected(tmp_path: Path) -> None:
    """The issue's case: 14 bytes overwritten mid-file used to train on to loss 9.8e69."""
    ckpt = tmp_path / "c.pt"
    _fit(ckpt, epochs=2)
    raw = bytearray(ckpt.read_bytes())
    mid = len(raw) // 2
    raw[mid : mid + 14] = b"\xff" * 14
    ckpt.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="corrupted"):
        _fit(ckpt, epochs=3)


@pytest.mark.parametrize(
    "content, message",
    [(b"", "is empty"), (b"garbage" * 10, "not an svbnn checkpoint"), (None, "corrupted")],
)
def test_bad_files_name_the_file(tmp_path: Path, content: bytes | None, message: str) -> None:
    ckpt = tmp_path / "c.pt"
    if content is None:  # truncated
        save_checkpoint({"epoch": 1, "w": torch.randn(100)}, ckpt)
        content = ckpt.read_bytes()[:-50]
    ckpt.write_bytes(content)
    with pytest.raises(CheckpointError, match=message) as err:
        load_checkpoint(ckpt)
    assert str(ckpt) in str(err.value) and "delete it" in str(err.value)
    assert isinstance(err.value, ValueError)


def test_missing_file_and_wrong_model(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "none.pt")
    ckpt = tmp_path / "c.pt"
    save_checkpoint({"epoch": 1}, ckpt)  # well formed, but not a training state
    with pytest.raises(CheckpointError, match="does not fit this model"):
        _fit(ckpt, epochs=2)


def test_round_trip_and_no_stale_temporaries(tmp_path: Path) -> None:
    ckpt = tmp_path / "c.pt"
    state = {"epoch": 3, "w": torch.arange(5.0), "nested": {"a": [1, 2.5, "x"]}}
    # A temporary left by a save that was killed (SIGKILL cannot be cleaned up at the time).
    stale = tmp_path / "c.pt.abc123.tmp"
    stale.write_bytes(b"half a checkpoint")
    save_checkpoint(state, ckpt)
    assert not stale.exists()
    back = load_checkpoint(ckpt)
    assert back["epoch"] == 3 and back["nested"] == {"a": [1, 2.5, "x"]}
    assert torch.equal(back["w"], state["w"])
    assert sorted(os.listdir(tmp_path)) == ["c.pt"]
    stale.write_bytes(b"x")
    load_checkpoint(ckpt)  # loading cleans up too
    assert sorted(os.listdir(tmp_path)) == ["c.pt"]


def test_resume_is_bit_for_bit(tmp_path: Path) -> None:
    whole, loss_whole = _fit(tmp_path / "a.pt", epochs=4, resume=False)
    _fit(tmp_path / "b.pt", epochs=2)
    resumed, loss_resumed = _fit(tmp_path / "b.pt", epochs=4)
    assert loss_resumed == loss_whole
    for p, q in zip(whole.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(p, q)
