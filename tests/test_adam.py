"""The training loop's Adam (svbnn._adam.Adam) against torch.optim.Adam: the same steps
bit for bit, interchangeable state, and no import of PyTorch's compiler."""

from __future__ import annotations

import copy
import subprocess
import sys
import textwrap

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from svbnn._adam import Adam


def _params(seed: int, shapes: list[tuple[int, ...]], dtype: torch.dtype) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=dtype).requires_grad_() for s in shapes]


def _grads(seed: int, params: list[torch.Tensor], skip: int | None) -> list[torch.Tensor | None]:
    """One step's gradients; parameter ``skip`` gets none (a step leaves it alone)."""
    g = torch.Generator().manual_seed(seed)
    return [
        None if i == skip else torch.randn(p.shape, generator=g, dtype=p.dtype) * 10.0**i
        for i, p in enumerate(params)
    ]


def _run(opt: object, params: list[torch.Tensor], steps: int, seed: int, skip: int | None) -> None:
    for t in range(steps):
        for p, grad in zip(params, _grads(seed + t, params, skip if t == 0 else None), strict=True):
            p.grad = grad
        opt.step()  # type: ignore[attr-defined]
        opt.param_groups[0]["lr"] *= 0.9  # type: ignore[attr-defined]  # a schedule's change


@settings(max_examples=30, deadline=None)
@given(
    shapes=st.lists(st.sampled_from([(), (1,), (7,), (3, 4)]), min_size=1, max_size=4),
    fused=st.booleans(),
    double=st.booleans(),
    weight_decay=st.sampled_from([0.0, 0.01]),
    lr=st.floats(1e-4, 0.5),
    seed=st.integers(0, 2**16),
    skip=st.sampled_from([None, 0]),
)
def test_adam_steps_as_torch_adam_bit_for_bit(
    shapes: list[tuple[int, ...]],
    fused: bool,
    double: bool,
    weight_decay: float,
    lr: float,
    seed: int,
    skip: int | None,
) -> None:
    """Parameters, moments and step counts after five steps (a changing rate, a parameter
    without a gradient at the first) are torch.optim.Adam's to the bit, and so is the
    ``state_dict``."""
    dtype = torch.float64 if double else torch.float32
    ours, theirs = _params(seed, shapes, dtype), _params(seed, shapes, dtype)
    kw = {"lr": lr, "betas": (0.8, 0.99), "eps": 1e-7, "weight_decay": weight_decay}
    a = Adam(ours, fused=fused, **kw)  # type: ignore[arg-type]
    b = torch.optim.Adam(theirs, fused=fused, foreach=None if fused else True, **kw)  # type: ignore[arg-type]
    _run(a, ours, 5, seed, skip)
    _run(b, theirs, 5, seed, skip)
    for p, q in zip(ours, theirs, strict=True):
        assert torch.equal(p, q)
    sa, sb = a.state_dict(), b.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    assert sa["state"].keys() == sb["state"].keys()
    for i, state in sa["state"].items():
        assert state.keys() == sb["state"][i].keys()
        for key, value in state.items():
            assert value.dtype == sb["state"][i][key].dtype, key
            assert torch.equal(value, sb["state"][i][key]), key


@pytest.mark.parametrize("fused", [True, False])
def test_adam_state_loads_both_ways_with_torch_adam(fused: bool) -> None:
    """A ``state_dict`` of either loads into the other, and the runs go on alike."""
    shapes = [(5,), (2, 3), ()]
    opts = {"fused": fused, "foreach": None if fused else True}
    p0, p1 = _params(1, shapes, torch.float32), _params(1, shapes, torch.float32)
    ours, theirs = Adam(p0, 0.05, fused=fused), torch.optim.Adam(p1, lr=0.05, **opts)  # type: ignore[arg-type]
    _run(ours, p0, 3, 7, None)
    _run(theirs, p1, 3, 7, None)
    # Swap the states: each optimiser over fresh copies of the parameters.
    q0 = [p.detach().clone().requires_grad_() for p in p1]
    q1 = [p.detach().clone().requires_grad_() for p in p0]
    ours2, theirs2 = Adam(q0, 1.0, fused=fused), torch.optim.Adam(q1, lr=1.0, **opts)  # type: ignore[arg-type]
    # Copies, as a checkpoint holds them: a loaded state shares the tensors it is given.
    ours2.load_state_dict(copy.deepcopy(theirs.state_dict()))
    theirs2.load_state_dict(copy.deepcopy(ours.state_dict()))
    assert ours2.param_groups[0]["lr"] == pytest.approx(0.05 * 0.9**3)
    _run(ours2, q0, 2, 11, None)
    _run(theirs2, q1, 2, 11, None)
    _run(ours, p0, 2, 11, None)
    _run(theirs, p1, 2, 11, None)
    for u, v, w, x in zip(q0, q1, p0, p1, strict=True):
        assert torch.equal(u, v) and torch.equal(u, w) and torch.equal(u, x)


def test_adam_refuses_a_state_of_another_shape() -> None:
    p = _params(0, [(3,), (2,)], torch.float32)
    opt = Adam(p, 0.1)
    other = torch.optim.Adam(_params(0, [(3,)], torch.float32), lr=0.1)
    with pytest.raises(ValueError, match="groups of \\[1\\] parameters"):
        opt.load_state_dict(other.state_dict())
    state = Adam(p, 0.1).state_dict()
    state["state"] = {5: {"step": torch.zeros(())}}
    with pytest.raises(ValueError, match="parameter 5 of 2"):
        opt.load_state_dict(state)


def test_adam_zero_grad() -> None:
    p = _params(0, [(3,), (2,)], torch.float32)
    opt = Adam(p, 0.1)
    p[0].grad = torch.ones(3)
    opt.zero_grad(set_to_none=False)
    assert torch.equal(p[0].grad, torch.zeros(3)) and p[1].grad is None
    opt.zero_grad()
    assert p[0].grad is None


def test_a_fit_does_not_import_torchs_compiler() -> None:
    """A default fit of each estimator in a fresh interpreter leaves ``torch._dynamo``
    unimported: its import is a process's first ``torch.optim`` call's cost."""
    code = textwrap.dedent(
        """
        import sys
        import numpy as np
        from svbnn import SVBNNClassifier, SVBNNRegressor
        rng = np.random.default_rng(0)
        X = rng.standard_normal((60, 4))
        SVBNNRegressor(random_state=0, max_iter=50).fit(X, X[:, 0])
        SVBNNClassifier(random_state=0, max_iter=50).fit(X, X[:, 0] > 0)
        print("torch._dynamo" in sys.modules)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert out.stdout.strip() == "False", out.stderr
