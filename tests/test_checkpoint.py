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
    with pytest.raises(CheckpointError, match="field 'model' is missing"):
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


def _tamper(ckpt: Path, **changes: object) -> None:
    """Rewrite the checkpoint ``ckpt`` with some fields changed (header and hash valid)."""
    state = load_checkpoint(ckpt)
    state.update(changes)
    save_checkpoint(state, ckpt)


def _resume_with(ckpt: Path, epochs: int = 4, **kw: object) -> None:
    gen = torch.Generator().manual_seed(0)
    X = torch.randn(16, 3, generator=gen)
    y = X[:, 0]
    model = SpikeSlabMLP(3, (4,), 1, generator=torch.Generator().manual_seed(1))
    args: dict[str, object] = {"epochs": epochs, "batch_size": 4, "lr": 1e-2, **kw}
    train(model, X, y, GaussianLikelihood(1.0), checkpoint_path=ckpt, resume=True, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"lr": 2e-2}, "lr=0.01"),
        ({"optimizer": "sgd"}, "optimizer='adam'"),
        ({"optimizer": "rmsprop"}, "optimizer='adam'"),
        ({"batch_size": 8}, "batch_size=4"),
        ({"n_mc": 2}, "n_mc=1"),
        ({"kl_weight": 0.5}, "kl_weight=1.0"),
        ({"identity": {"seed": 7}}, "seed="),
    ],
)
def test_resume_under_other_settings_is_refused_naming_them(
    tmp_path: Path, change: dict[str, object], named: str
) -> None:
    """A checkpoint resumes only the run that wrote it: any other hyperparameter is refused
    in one message naming the setting and both values (not kept silently, no KeyError)."""
    ckpt = tmp_path / "c.pt"
    _fit(ckpt, epochs=2)
    before = ckpt.read_bytes()
    with pytest.raises(CheckpointError, match=str(ckpt)) as err:
        _resume_with(ckpt, **change)
    assert named in str(err.value)
    key = next(iter(change)) if "identity" not in change else "seed"
    assert f"not {key}=" in str(err.value)
    assert ckpt.read_bytes() == before  # nothing trained, nothing overwritten


def test_resume_with_the_same_identity_continues(tmp_path: Path) -> None:
    ckpt = tmp_path / "c.pt"
    _resume_with(ckpt, epochs=2, identity={"seed": 3, "data": "x"})
    _resume_with(ckpt, epochs=3, identity={"seed": 3, "data": "x"})
    assert load_checkpoint(ckpt)["epoch"] == 3


@pytest.mark.parametrize(
    ("optimizer", "other"), [("adam", "sgd"), ("rmsprop", "sgd"), ("sgd", "adam")]
)
def test_checkpoint_without_identity_is_still_checked_for_the_optimiser(
    tmp_path: Path, optimizer: str, other: str
) -> None:
    """A checkpoint written before identities were recorded: its optimiser state says which
    optimiser and learning rate wrote it (RMSprop's state also holds a ``momentum``)."""
    ckpt = tmp_path / "c.pt"
    _resume_with(ckpt, epochs=2, optimizer=optimizer)
    state = load_checkpoint(ckpt)
    del state["identity"]
    save_checkpoint(state, ckpt)
    with pytest.raises(CheckpointError, match=f"optimizer='{optimizer}'"):
        _resume_with(ckpt, optimizer=other)
    with pytest.raises(CheckpointError, match="lr=0.01"):
        _resume_with(ckpt, lr=0.5, optimizer=optimizer)
    _resume_with(ckpt, epochs=3, optimizer=optimizer)  # same settings: resumes
    assert load_checkpoint(ckpt)["epoch"] == 3


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("epoch", -5, "field 'epoch' must be >= 0"),
        ("epoch", 2.7, "field 'epoch' must be an integer"),
        ("epoch", True, "field 'epoch' must be an integer"),
        ("epoch", 9, "field 'epoch' is 9, more than this run's epochs=4"),
        ("epoch", 1, "field 'history' does not match"),
        ("history", {"epoch": [1, 1]}, "field 'history' does not match"),
        ("history", [1, 2], "field 'history' is not a training history"),
        ("generator", torch.zeros(3), "field 'generator' is not a generator state"),
    ],
)
def test_bad_fields_are_refused_naming_file_and_field(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    ckpt = tmp_path / "c.pt"
    _fit(ckpt, epochs=2)
    _tamper(ckpt, **{field: value})
    with pytest.raises(CheckpointError, match=message) as err:
        _resume_with(ckpt)
    assert str(ckpt) in str(err.value)


def test_non_finite_or_misshapen_weights_are_refused(tmp_path: Path) -> None:
    ckpt = tmp_path / "c.pt"
    _fit(ckpt, epochs=2)
    model = load_checkpoint(ckpt)["model"]
    name = next(iter(model))
    model[name] = torch.full_like(model[name], float("nan"))
    _tamper(ckpt, model=model)
    nan = f"field 'model' holds non-finite values \\(in {name}"
    with pytest.raises(CheckpointError, match=nan):
        _resume_with(ckpt)
    _fit(ckpt, epochs=2, resume=False)
    model = load_checkpoint(ckpt)["model"]
    model[name] = torch.zeros(7, 7)
    _tamper(ckpt, model=model)
    with pytest.raises(CheckpointError, match=f"'model' holds {name} of shape \\(7, 7\\)"):
        _resume_with(ckpt)
    _fit(ckpt, epochs=2, resume=False)
    opt = load_checkpoint(ckpt)["optimizer"]
    opt["state"][0]["exp_avg"] = torch.zeros(9)
    _tamper(ckpt, optimizer=opt)
    with pytest.raises(CheckpointError, match="'optimizer' holds exp_avg of parameter 0"):
        _resume_with(ckpt)


@pytest.mark.parametrize("where", ["file/sub/c.pt", "file/c.pt"])
def test_unwritable_checkpoint_path_names_the_users_path(tmp_path: Path, where: str) -> None:
    (tmp_path / "file").touch()
    target = tmp_path / where
    with pytest.raises(OSError, match=f"cannot write {target}: {tmp_path / 'file'} is a file"):
        save_checkpoint({"epoch": 1}, target)
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())
