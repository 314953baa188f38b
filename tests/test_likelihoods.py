"""Likelihoods as extension points: the fast paths take only the closed set of kinds they
compute (``FastPath``); any other likelihood is trained by the general autograd path."""

import pytest
import torch

import svbnn._engine.fused as engine
import svbnn._engine.kernels as K
import svbnn._engine.paths as fused_paths
from svbnn._engine.graphs import mlp_negative_elbo
from svbnn._engine.native_step import step_likelihood
from svbnn.nn import SpikeSlabMLP, kl_divergence, set_generator
from svbnn.objectives import (
    CategoricalLikelihood,
    FastPath,
    GaussianLikelihood,
    Likelihood,
    PoissonLikelihood,
    fast_path_spec,
)
from svbnn.training import negative_elbo


class _Doubled(GaussianLikelihood):
    """A subclass with its own log_prob (and the parent's fused_spec)."""

    def log_prob(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return 2.0 * super().log_prob(output, target)


class _ClaimsGaussian(torch.nn.Module):
    """Not a GaussianLikelihood, but declares the Gaussian kind with a Poisson log_prob."""

    def log_prob(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return PoissonLikelihood().log_prob(output, target)

    def fused_spec(self, out_features: int) -> tuple[str, float]:
        return "gaussian", 1.0


class _ClaimsCategoricalCopy(torch.nn.Module):
    """Copies CategoricalLikelihood's declaration (the method itself) onto another formula."""

    fused_spec = CategoricalLikelihood.fused_spec

    def log_prob(self, output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return PoissonLikelihood().log_prob(output, target)


class _UnknownKind(PoissonLikelihood):
    """Declares a kind outside the closed set."""

    def fused_spec(self, out_features: int) -> tuple[str, float]:
        return "poisson", 1.0


_UNKNOWN = [_Doubled, _ClaimsGaussian, _ClaimsCategoricalCopy, _UnknownKind, PoissonLikelihood]


def test_fast_path_spec_takes_only_the_closed_set() -> None:
    assert fast_path_spec(GaussianLikelihood(0.5), 1) == (FastPath.GAUSSIAN, 0.25)
    assert fast_path_spec(CategoricalLikelihood(), 3) == (FastPath.CATEGORICAL, 1.0)
    assert fast_path_spec(GaussianLikelihood(0.5), 2) is None  # several outputs
    for cls in _UNKNOWN:
        assert fast_path_spec(cls(), 1) is None, cls
        assert step_likelihood(cls(), 1) is None, cls
    assert fast_path_spec(object(), 1) is None
    for cls in (GaussianLikelihood, CategoricalLikelihood, PoissonLikelihood):
        assert isinstance(cls(), Likelihood)


def test_the_fused_formula_refuses_an_unknown_kind() -> None:
    g = torch.Generator().manual_seed(0)
    shapes = ((3, 4), (1, 3))
    T = sum(o * (i + 1) for o, i in shapes)
    mu, rho, alpha = torch.randn(T, generator=g), torch.full((T,), -5.0), torch.full((T,), 3.0)
    x, y = torch.randn(8, 4, generator=g), torch.randn(8, generator=g)
    lam = torch.tensor(-3.0)
    args = (x, y, mu, rho, alpha, torch.tensor([1, 2]), lam, torch.log1p(-lam.exp()))
    scales = torch.tensor([0.01, 1.0])
    mlp_negative_elbo(*args, scales, shapes, "relu", "gaussian", 0.3, 2.0, 0.5)
    with pytest.raises(ValueError, match="poisson"):
        mlp_negative_elbo(*args, scales, shapes, "relu", "poisson", 0.3, 2.0, 0.5)


def _loss_and_grads(
    backend: str, likelihood: torch.nn.Module, general: bool
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """One training step's negative ELBO on a small float32 network (the size the native
    step and auto's one-graph step take) and its gradients: by ``negative_elbo``
    (``general=False``) or written out as the general path (forward, the likelihood's own
    log_prob, the KL)."""
    with K.backend_scope(backend):
        model = SpikeSlabMLP(5, (7,), 1, generator=torch.Generator().manual_seed(0))
        set_generator(model, torch.Generator().manual_seed(1))
        g = torch.Generator().manual_seed(2)
        x = torch.randn(16, 5, generator=g)
        y = torch.poisson(torch.full((16,), 2.0), generator=g)
        n = 100
        if general:
            nll = likelihood.log_prob(model(x), y).mean(dim=-1).neg()
            loss = nll + kl_divergence(model) / n
        else:
            loss = negative_elbo(model, likelihood, x, y, n)[0]
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize("backend", ["eager", "auto", "native"])
@pytest.mark.parametrize("likelihood", _UNKNOWN, ids=lambda c: c.__name__)
def test_an_unknown_likelihood_takes_the_general_path(
    backend: str,
    likelihood: type[torch.nn.Module],
    one_thread: None,
    native_steps: list[int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # auto's one-graph step runs its formulas eagerly here (the same code, no compile),
    # so that its dispatch is what is tested.
    monkeypatch.setattr(fused_paths, "use_whole_network", lambda *_: backend == "auto")
    monkeypatch.setattr(
        engine, "whole_network_kernel", lambda fn, *static: lambda *t: fn(*t, *static)
    )
    loss, grads = _loss_and_grads(backend, likelihood(), general=False)
    ref_loss, ref_grads = _loss_and_grads(backend, likelihood(), general=True)
    assert not native_steps  # the native step never ran
    torch.testing.assert_close(loss, ref_loss, rtol=1e-6, atol=1e-6)
    assert len(grads) == len(ref_grads) == 3
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_the_gaussian_likelihood_still_takes_the_native_step(
    one_thread: None, native_steps: list[int]
) -> None:
    # The control: the same step with the likelihood the native step knows runs it.
    _loss_and_grads("native", GaussianLikelihood(1.0), general=False)
    assert native_steps


@pytest.mark.parametrize(
    "likelihood, k",
    [(GaussianLikelihood(0.5), 1), (CategoricalLikelihood(), 3), (PoissonLikelihood(0.2), 1)],
    ids=["gaussian", "categorical", "poisson"],
)
def test_the_sampler_draws_from_the_law_whose_mean_is_mean(
    likelihood: torch.nn.Module, k: int
) -> None:
    # One output row repeated: the draws' average estimates likelihood.mean(output) (for
    # classes, the frequency of each class), within 4 standard errors.
    g = torch.Generator().manual_seed(0)
    row = torch.randn(1, k, generator=g, dtype=torch.float64)
    n = 40000
    draws = likelihood.sample(row.expand(n, k), g)
    assert draws.shape == (n,)
    mean = likelihood.mean(row)[0]
    if k > 1:
        freq = torch.bincount(draws, minlength=k).double() / n
        se = (mean * (1 - mean) / n).sqrt()
        assert bool(torch.all((freq - mean).abs() < 4 * se))
    else:
        se = draws.std() / n**0.5
        assert abs(float(draws.mean() - mean[0])) < 4 * float(se)
