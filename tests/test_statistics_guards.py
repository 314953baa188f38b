"""Statistics that cannot be silently wrong (issue 32, item 4): prior variances that make a
fit meaningless are refused by name, and a diverged regression fit (training R^2 < -1)
warns in ``train`` and, naming the method and replications, in the harness."""

from __future__ import annotations

import math
import re
import warnings

import numpy as np
import pytest
import torch

from svbnn import SVBNNRegressor, VBNNRegressor
from svbnn.nn import SpikeSlabMLP
from svbnn.nn.gaussian import GaussianLinear
from svbnn.nn.spike_slab import SpikeSlabLinear
from svbnn.objectives import GaussianLikelihood
from svbnn.priors import PRIOR_VARIANCE_RANGE, check_prior_variance
from svbnn.training import DIVERGED_R2, DivergenceWarning, History, train, training_r2
from svbnn_experiments.common import named_divergence

torch.set_num_threads(1)


# -- prior variance --------------------------------------------------------------------------
@pytest.mark.parametrize("value", [1e-300, 1e-40, 1e-13, 1e31, 1e300, 0.0, -2.0, math.inf])
def test_prior_variance_out_of_range_is_refused_by_name(value: float) -> None:
    for build in (
        lambda: SpikeSlabLinear(3, 2, prior_variance=value),
        lambda: SpikeSlabMLP(3, (4,), 1, prior_variance=value),
        lambda: GaussianLinear(2, 3, True, prior_variance=value),
    ):
        with pytest.raises(ValueError, match="prior_variance must lie in"):
            build()
    X, y = np.ones((8, 2)), np.arange(8.0)
    for est in (SVBNNRegressor, VBNNRegressor):
        with pytest.raises(
            ValueError, match=rf"prior_variance must lie in .* got {re.escape(repr(value))}"
        ):
            est(prior_variance=value, max_iter=1).fit(X, y)


def test_prior_variance_range_ends_are_accepted() -> None:
    low, high = PRIOR_VARIANCE_RANGE
    assert check_prior_variance(low) == low and check_prior_variance(high) == high
    SpikeSlabMLP(3, (4,), 1, prior_variance=low)
    with pytest.raises(TypeError, match="prior_variance must be a real number"):
        check_prior_variance("2")


# -- training R^2 ----------------------------------------------------------------------------
def test_training_r2_from_the_gaussian_nll() -> None:
    # NLL = log(2 pi s^2)/2 + MSE/(2 s^2): with s = 2, var(y) = 1.25 and MSE = 5, R^2 = -3.
    y = torch.tensor([0.0, 1.0, 2.0, 3.0])
    s2, mse = 4.0, 5.0
    history = History(epoch=[1], nll=[0.5 * math.log(2 * math.pi * s2) + mse / (2 * s2)])
    r2 = training_r2(GaussianLikelihood(2.0), y, history)
    assert r2 is not None and r2[0] == pytest.approx(1 - mse / 1.25, abs=1e-12)
    # Replicated: one value per replicate, each with its own noise level and variance.
    yr = torch.stack([y, 2 * y])
    noise = torch.tensor([[2.0], [1.0]])
    nll = [0.5 * math.log(2 * math.pi * 4.0) + 5.0 / 8.0, 0.5 * math.log(2 * math.pi) + 2.5]
    r2 = training_r2(GaussianLikelihood(noise), yr, History(epoch=[1], nll=[nll]))
    assert r2 == pytest.approx([1 - 5.0 / 1.25, 1 - 5.0 / 5.0], abs=1e-12)
    # No answer for a constant y, another likelihood or no epoch.
    assert training_r2(GaussianLikelihood(1.0), torch.ones(4), history) is None
    assert training_r2(object(), y, history) is None
    assert training_r2(GaussianLikelihood(1.0), y, History()) is None


def _fit(lr: float) -> tuple[list[warnings.WarningMessage], list[float] | None]:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(200, 4, generator=g)
    y = X[:, 0]
    lik = GaussianLikelihood(0.5, learn_noise=True)
    model = SpikeSlabMLP(4, (50,), 1, generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        history = train(
            model,
            X,
            y,
            lik,
            epochs=10,
            batch_size=128,
            lr=lr,
            optimizer="sgd",
            generator=torch.Generator().manual_seed(0),
        )
    return caught, training_r2(lik, y, history)


def test_a_diverged_fit_warns_by_name() -> None:
    # SGD at lr 0.2 on this problem ends finite but with training R^2 about -4.
    caught, r2 = _fit(0.2)
    assert r2 is not None and r2[0] < DIVERGED_R2
    diverged = [w for w in caught if issubclass(w.category, DivergenceWarning)]
    assert len(diverged) == 1
    message = str(diverged[0].message)
    assert "the fit diverged: training R^2" in message
    assert "lr=0.2 with optimizer='sgd'" in message
    assert diverged[0].message.r2 == pytest.approx(r2)  # type: ignore[union-attr]


def test_a_sane_fit_does_not_warn() -> None:
    caught, r2 = _fit(0.05)
    assert r2 is not None and r2[0] > 0
    assert not [w for w in caught if issubclass(w.category, DivergenceWarning)]


def test_the_harness_names_method_and_replications() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with named_divergence("svbnn on sim2 (p=7, n=300)", ["rep 4", "rep 5", "rep 6"]):
            warnings.warn(DivergenceWarning("the fit diverged", (0.9, -7.5, -2.0)), stacklevel=1)
            warnings.warn("something else", RuntimeWarning, stacklevel=1)
    assert [w.category for w in caught] == [DivergenceWarning, RuntimeWarning]
    assert str(caught[1].message) == "something else"
    named = str(caught[0].message)
    assert named.startswith("svbnn on sim2 (p=7, n=300): rep 5 (R^2 -7.5), rep 6 (R^2 -2)")
    assert "rep 4" not in named and named.endswith("the fit diverged")


# -- other settings that would make a fit meaningless ------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        (dict(temperature=1e-300), "temperature must lie in"),
        (dict(noise_std=1e-300), "noise_std=1e-300 is"),
        (dict(noise_std=1e-30), "noise_std=1e-30 is"),
        (dict(kl_weight=1e300), "kl_weight must lie in"),
        (dict(log_prior_inclusion=-1e300), "log_prior_inclusion must be a finite number in"),
    ],
)
def test_settings_outside_float32_range_are_refused_by_name(
    kwargs: dict[str, float], needle: str
) -> None:
    X, y = np.ones((8, 2)), np.arange(8.0)
    with pytest.raises(ValueError, match=re.escape(needle)):
        SVBNNRegressor(max_iter=1, **kwargs).fit(X, y)


def test_constructors_refuse_them_too() -> None:
    with pytest.raises(ValueError, match="temperature must lie in"):
        SpikeSlabLinear(3, 2, temperature=1e-300)
    with pytest.raises(ValueError, match="noise_std must lie in"):
        GaussianLikelihood(1e-300)
    with pytest.raises(ValueError, match="log_prior_inclusion"):
        SpikeSlabMLP(3, (4,), 1, log_prior_inclusion=-1e300)
    X, y = torch.randn(8, 3), torch.randn(8)
    with pytest.raises(ValueError, match="kl_weight must lie in"):
        train(
            SpikeSlabMLP(3, (4,), 1),
            X,
            y,
            GaussianLikelihood(1.0),
            epochs=1,
            batch_size=4,
            lr=1e-3,
            kl_weight=1e300,
        )


def test_an_unresolvable_training_r2_is_nan_not_a_false_alarm() -> None:
    # With s = 1e6 the NLL is about 14.5 and its float32 rounding (1.7e-6) times 2 s^2 is
    # 3.5e6: the MSE is not known to within var(y), so no R^2 (and no warning) is given.
    y = torch.tensor([0.0, 1.0, 2.0, 3.0])
    s2 = 1e12
    history = History(epoch=[1], nll=[0.5 * math.log(2 * math.pi * s2) + 1.0 / (2 * s2)])
    r2 = training_r2(GaussianLikelihood(1e6), y, history)
    assert r2 is not None and math.isnan(r2[0])
