"""lambda_opt (Theorem 4.1), the estimators' "auto" prior, and prior inputs given as lambda
or log-lambda."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from svbnn import lambda_opt, log_lambda_opt, mlp_log_lambda_auto, mlp_log_lambda_opt
from svbnn.nn import SpikeSlabLinear, SpikeSlabMLP
from svbnn.priors import REFERENCE_HIDDEN, resolve_log_inclusion


def test_lambda_opt_formula_simulation2() -> None:
    # 200-7-7-7-1: T = 201*7 + 8*7 + 8*7 + 8*1 = 1527, L = 3, N = 7, n = 3000, p = 200.
    T = 201 * 7 + 8 * 7 + 8 * 7 + 8
    assert T == 1527
    expected = -(math.log(T) + 0.1 * (4 * math.log(7) + math.log(math.sqrt(3000) * 200)))
    assert log_lambda_opt(T, 3, 7, 3000, 200) == pytest.approx(expected, rel=1e-14)
    assert mlp_log_lambda_opt(200, (7, 7, 7), 1, 3000) == pytest.approx(expected, rel=1e-14)
    assert lambda_opt(T, 3, 7, 3000, 200) == pytest.approx(math.exp(expected), rel=1e-12)


def test_unequal_widths_use_largest() -> None:
    T = 11 * 5 + 6 * 9 + 10 * 1
    assert mlp_log_lambda_opt(10, (5, 9), 1, 100) == pytest.approx(log_lambda_opt(T, 2, 9, 100, 10))


@pytest.mark.parametrize(
    "bad", [dict(n_params=0), dict(width=0), dict(n_train=0), dict(n_features=0)]
)
def test_lambda_opt_rejects_bad_sizes(bad: dict[str, int]) -> None:
    args = dict(n_params=10, n_hidden_layers=1, width=3, n_train=5, n_features=2) | bad
    with pytest.raises(ValueError):
        log_lambda_opt(**args)


def test_lambda_or_log_lambda_everywhere() -> None:
    assert resolve_log_inclusion(inclusion=0.25) == pytest.approx(math.log(0.25))
    assert resolve_log_inclusion(log_inclusion=-1000.0) == -1000.0
    for bad in [
        dict(inclusion=0.0),
        dict(inclusion=1.0),
        dict(log_inclusion=0.0),
        dict(log_inclusion=float("nan")),
        dict(),
        dict(inclusion=0.1, log_inclusion=-1.0),
    ]:
        with pytest.raises(ValueError):
            resolve_log_inclusion(**bad)  # type: ignore[arg-type]
    assert resolve_log_inclusion(log_inclusion=-1000.0) == -1000.0
    assert resolve_log_inclusion(inclusion=0.5) == pytest.approx(math.log(0.5))
    layer = SpikeSlabLinear(3, 2, log_prior_inclusion=-1000.0)
    assert torch.isfinite(layer.kl_divergence())
    layer = SpikeSlabLinear(3, 2, prior_inclusion=1e-200, dtype=torch.float64)
    assert float(layer.log_prior_inclusion) == pytest.approx(-200 * math.log(10))
    net = SpikeSlabMLP(3, (4,), 1)
    net.set_log_prior_inclusion(-1000.0)
    assert torch.isfinite(net(torch.randn(2, 3))).all()
    with pytest.raises(ValueError):
        net.set_log_prior_inclusion(0.5)


# -- prior_inclusion="auto": mlp_log_lambda_auto -------------------------------------------
def _size(p: int, hidden: tuple[int, ...], out: int) -> int:
    sizes = [p, *hidden, out]
    return sum((sizes[i] + 1) * sizes[i + 1] for i in range(len(sizes) - 1))


@settings(max_examples=300, deadline=None)
@given(
    p=st.integers(1, 500),
    hidden=st.lists(st.integers(1, 2000), min_size=0, max_size=4).map(tuple),
    out=st.integers(1, 20),
    n=st.integers(1, 10**6),
)
def test_auto_lambda_is_lambda_opt_up_to_the_reference_size_and_scaled_beyond(
    p: int, hidden: tuple[int, ...], out: int, n: int
) -> None:
    opt = mlp_log_lambda_opt(p, hidden, out, n)
    auto = mlp_log_lambda_auto(p, hidden, out, n)
    ratio = _size(p, hidden, out) / _size(p, REFERENCE_HIDDEN, out)
    if ratio <= 1.0:
        assert auto == opt  # exactly: the theorem's value, bit for bit
        return
    base = mlp_log_lambda_opt(p, REFERENCE_HIDDEN, out, n) + math.log(ratio)
    assert auto == max(opt, min(base, math.log(0.1)))
    assert opt <= auto  # never a stronger prior than lambda_opt
    assert auto <= max(opt, math.log(0.1))


def test_auto_lambda_values() -> None:
    # The default network is the reference: lambda_opt itself.
    assert mlp_log_lambda_auto(20, (50,), 1, 332) == mlp_log_lambda_opt(20, (50,), 1, 332)
    # One hidden layer of 500: the reference's lambda_opt times T / T_ref.
    ref = mlp_log_lambda_opt(20, (50,), 1, 332)
    ratio = (21 * 500 + 501) / (21 * 50 + 51)
    assert mlp_log_lambda_auto(20, (500,), 1, 332) == pytest.approx(
        ref + math.log(ratio), abs=1e-12
    )
    # Two hidden layers of 50: the same rule on their T.
    ratio2 = (21 * 50 + 51 * 50 + 51) / (21 * 50 + 51)
    assert mlp_log_lambda_auto(20, (50, 50), 1, 332) == pytest.approx(
        ref + math.log(ratio2), abs=1e-12
    )
    # Continuous in the width of one hidden layer at the reference.
    assert abs(mlp_log_lambda_auto(20, (51,), 1, 332) - ref) < 0.03
    # The cap.
    assert mlp_log_lambda_auto(20, (10**6,), 1, 332) == math.log(0.1)
    assert mlp_log_lambda_auto(20, (10**6,), 1, 332, max_log_inclusion=-5.0) == -5.0
    for bad in (0.0, 1.0, math.nan, -math.inf):
        with pytest.raises(ValueError, match="max_log_inclusion"):
            mlp_log_lambda_auto(20, (500,), 1, 332, max_log_inclusion=bad)
