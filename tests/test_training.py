"""The training loop: objective, replicates, checkpoints, errors, history."""

import itertools
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from svbnn import training
from svbnn._adam import Adam
from svbnn.checkpoint import CheckpointError
from svbnn.nn import SpikeSlabMLP, kl_divergence, set_generator
from svbnn.objectives import CategoricalLikelihood, GaussianLikelihood
from svbnn.prediction import predictive_mean
from svbnn.training import (
    LRSchedule,
    Minibatches,
    elbo_objective,
    kl_warmup_factor,
    loss_objective,
    lr_factor,
    negative_elbo,
    replicate_orders,
    train,
)

D = torch.float64


def _data(n: int = 64, p: int = 5, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(n, p, generator=g, dtype=D) * 2 - 1
    y = 3 * X[:, 0] - 2 * X[:, 1] + 0.1 * torch.randn(n, generator=g, dtype=D)
    return X, y


def _model(seed: int = 0, **kw: object) -> SpikeSlabMLP:
    return SpikeSlabMLP(
        5,
        (4,),
        1,
        generator=torch.Generator().manual_seed(seed),
        dtype=D,
        log_prior_inclusion=-3.0,
        **kw,
    )


def test_negative_elbo_is_per_datum() -> None:
    X, y = _data()
    model = _model()
    lik = GaussianLikelihood(0.5)
    g = torch.Generator().manual_seed(1)
    set_generator(model, g)
    loss, nll, kl = negative_elbo(model, lik, X[:16], y[:16], n_train=64)
    g.manual_seed(1)
    out = model(X[:16]).squeeze(-1)
    expected_nll = -(-0.5 * math.log(2 * math.pi * 0.25) - (y[:16] - out) ** 2 / (2 * 0.25)).mean()
    torch.testing.assert_close(nll, expected_nll.detach())
    torch.testing.assert_close(kl, kl_divergence(model).detach() / 64)
    torch.testing.assert_close(loss.detach(), nll + kl)


def test_training_reduces_loss_and_records_history() -> None:
    X, y = _data(128)
    model = _model()
    hist = train(
        model,
        X,
        y,
        GaussianLikelihood(0.1),
        epochs=60,
        batch_size=32,
        lr=0.02,
        generator=torch.Generator().manual_seed(0),
    )
    assert hist.epoch == list(range(1, 61))
    assert len(hist.loss) == len(hist.nll) == len(hist.kl) == len(hist.sparsity) == 60
    assert hist.loss[-1] < 0.5 * hist.loss[0]
    assert all(0.0 < s <= 1.0 for s in hist.sparsity)
    # The fit explains most of the variance of y (sd about 2.1; the noise sd is 0.1).
    rmse = float((predictive_mean(model, X, 30).squeeze(-1) - y).pow(2).mean().sqrt())
    assert rmse < 0.25 * float(y.std())


def _resume_12_epochs(
    X: torch.Tensor, y: torch.Tensor, lik: GaussianLikelihood, ckpt: Path, **kw: Any
) -> tuple[SpikeSlabMLP, Any]:
    """A 12-epoch run resumed from ``ckpt``: another initialisation and another generator
    seed, so that everything must come from the checkpoint."""
    resumed = _model(seed=99)
    history = train(
        resumed,
        X,
        y,
        lik,
        epochs=12,
        generator=torch.Generator().manual_seed(1234),
        checkpoint_path=ckpt,
        resume=True,
        **kw,
    )
    return resumed, history


def _interrupted_12_epochs(
    X: torch.Tensor, y: torch.Tensor, lik: GaussianLikelihood, ckpt: Path, **kw: Any
) -> None:
    """The 12-epoch run of seed 3, stopped by a callback after epoch 5 (checkpoint in
    ``ckpt``)."""
    train(
        _model(),
        X,
        y,
        lik,
        epochs=12,
        generator=torch.Generator().manual_seed(3),
        checkpoint_path=ckpt,
        callbacks=[lambda epoch, model, history: epoch == 5],
        **kw,
    )


def test_same_seed_same_fit_and_checkpoint_resume_is_bit_for_bit(tmp_path: Path) -> None:
    X, y = _data()
    lik = GaussianLikelihood(0.3)
    kw = dict(batch_size=16, lr=0.01)
    full = _model()
    h_full = train(full, X, y, lik, epochs=12, generator=torch.Generator().manual_seed(3), **kw)
    again = _model()
    train(again, X, y, lik, epochs=12, generator=torch.Generator().manual_seed(3), **kw)
    for a, b in zip(full.parameters(), again.parameters(), strict=True):
        assert torch.equal(a, b)
    # Interrupted after 5 epochs (checkpoint), resumed in a fresh process-like setting.
    ckpt = tmp_path / "run.pt"
    part = _model()
    train(
        part,
        X,
        y,
        lik,
        epochs=5,
        generator=torch.Generator().manual_seed(3),
        checkpoint_path=ckpt,
        checkpoint_every=5,
        **kw,
    )
    resumed, h_res = _resume_12_epochs(X, y, lik, ckpt, **kw)
    for a, b in zip(full.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    assert h_res.loss == h_full.loss
    assert h_res.epoch == list(range(1, 13))


def test_nan_loss_names_the_epoch() -> None:
    X, y = _data()
    y = y.clone()
    y[3] = 1e200  # squares to inf in float64
    with pytest.raises(FloatingPointError, match="epoch 1"):
        train(
            _model(),
            X,
            y,
            GaussianLikelihood(1.0),
            epochs=3,
            batch_size=64,
            lr=0.01,
            generator=torch.Generator().manual_seed(0),
        )


def test_kl_weight_scales_the_kl_term_only() -> None:
    X, y = _data()
    lik = GaussianLikelihood(0.5)
    model = _model()
    out = []
    for w in (1.0, 0.1):
        set_generator(model, torch.Generator().manual_seed(3))
        out.append(negative_elbo(model, lik, X[:8], y[:8], n_train=64, kl_weight=w))
    (l1, n1, k1), (l2, n2, k2) = out
    assert torch.equal(n1, n2) and torch.equal(k1, k2)  # same draw, same unweighted terms
    torch.testing.assert_close(l2, n2 + 0.1 * k2, rtol=1e-14, atol=0)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="kl_weight"):
            negative_elbo(model, lik, X[:8], y[:8], n_train=64, kl_weight=bad)
        with pytest.raises(ValueError, match="kl_weight"):
            train(model, X, y, lik, epochs=1, batch_size=8, lr=1e-3, kl_weight=bad)


def test_bad_arguments() -> None:
    X, y = _data()
    with pytest.raises(ValueError, match="disagree"):
        train(_model(), X, y[:10], GaussianLikelihood(), epochs=1, batch_size=8, lr=0.1)
    with pytest.raises(ValueError, match="learning rate"):
        train(_model(), X, y, GaussianLikelihood(), epochs=1, batch_size=8, lr=-1.0)
    with pytest.raises(ValueError, match="no training data"):
        train(_model(), X[:0], y[:0], GaussianLikelihood(), epochs=1, batch_size=8, lr=0.1)


def test_replicates_are_independent() -> None:
    """Each replicate's gradient depends on its own data only (the sum over replicates)."""
    R = 3
    g = torch.Generator().manual_seed(0)
    X = torch.randn(R, 32, 5, generator=g, dtype=D)
    y = torch.randn(R, 32, generator=g, dtype=D)
    grads = []
    for y_other in (y, y + torch.tensor([0.0, 5.0, -3.0], dtype=D).unsqueeze(1)):
        model = SpikeSlabMLP(
            5,
            (4,),
            1,
            n_replicates=R,
            generator=torch.Generator().manual_seed(1),
            dtype=D,
            log_prior_inclusion=torch.tensor([-1.0, -2.0, -3.0]),
        )
        set_generator(model, torch.Generator().manual_seed(2))
        loss, _, _ = negative_elbo(model, GaussianLikelihood(), X, y_other, n_train=32)
        assert loss.shape == (R,)
        loss.sum().backward()
        grads.append([p.grad[0].clone() for p in model.parameters()])  # replicate 0 only
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)


def test_replicated_training_runs() -> None:
    R = 4
    g = torch.Generator().manual_seed(0)
    X = torch.rand(R, 64, 5, generator=g, dtype=D)
    y = (3 * X[..., 0]) + 0.1 * torch.randn(R, 64, generator=g, dtype=D)
    model = SpikeSlabMLP(5, (4,), 1, n_replicates=R, generator=g, dtype=D, log_prior_inclusion=-3.0)
    hist = train(
        model,
        X,
        y,
        GaussianLikelihood(0.1),
        epochs=30,
        batch_size=16,
        lr=0.02,
        generator=torch.Generator().manual_seed(0),
    )
    assert len(hist.loss[-1]) == R and len(hist.sparsity[-1]) == R
    assert all(last < first for last, first in zip(hist.loss[-1], hist.loss[0], strict=True))


@pytest.mark.parametrize("R", [None, 3])
def test_minibatches_cover_every_row_once_an_epoch(R: int | None) -> None:
    n, p = 10, 2
    lead = () if R is None else (R,)
    # Row i of replicate r holds (r, i) in X and r n + i in y, to check the pairing.
    rep = torch.arange(R or 1, dtype=D).view(-1, 1, 1).expand(R or 1, n, 1)
    row = torch.arange(n, dtype=D).view(1, n, 1).expand(R or 1, n, 1)
    X = torch.cat([rep, row], dim=-1).reshape(*lead, n, p)
    y = (rep * n + row).reshape(*lead, n)
    batches = Minibatches(X, y, 4, torch.Generator().manual_seed(0), replicated=R is not None)
    assert (batches.n, batches.batch_size, batches.n_batches) == (n, 4, 3)
    orders = []
    for _ in range(2):
        seen = []
        for xb, yb in batches.epoch():
            assert xb.shape[:-2] == lead and xb.shape[-1] == p and yb.shape == xb.shape[:-1]
            torch.testing.assert_close(yb, xb[..., 0] * n + xb[..., 1], rtol=0, atol=0)
            seen.append(xb[..., 1].clone())
        assert [s.shape[-1] for s in seen] == [4, 4, 2]
        order = torch.cat(seen, dim=-1)
        assert torch.equal(order.sort(dim=-1).values, torch.arange(n, dtype=D).expand_as(order))
        orders.append(order)
    assert not torch.equal(orders[0], orders[1])  # a new order every epoch


def test_minibatches_reject_bad_data() -> None:
    gen = torch.Generator()
    with pytest.raises(ValueError, match="disagree on the number of samples"):
        Minibatches(torch.zeros(5, 2), torch.zeros(4), 2, gen)
    with pytest.raises(ValueError, match="disagree on the number of samples"):
        Minibatches(torch.zeros(3, 5, 2), torch.zeros(2, 5), 2, gen, replicated=True)
    with pytest.raises(ValueError, match=r"replicated data need X \(R, n, ...\)"):
        Minibatches(torch.zeros(5, 2), torch.zeros(5), 2, gen, replicated=True)
    with pytest.raises(ValueError, match=r"^data need X \(n, ...\)"):
        Minibatches(torch.zeros(()), torch.zeros(5), 2, gen)
    with pytest.raises(ValueError, match="no training data"):
        Minibatches(torch.zeros(0, 2), torch.zeros(0), 2, gen)
    with pytest.raises(ValueError, match="batch_size"):
        Minibatches(torch.zeros(5, 2), torch.zeros(5), 0, gen)


@pytest.mark.parametrize("R", [None, 3])
def test_reused_minibatch_buffer_fits_as_fresh_copies(R: int | None) -> None:
    # train gathers minibatches into one reused buffer, except for inputs that need
    # gradients; both must give the same fit bit for bit (ragged last minibatch included).
    g = torch.Generator().manual_seed(1)
    lead = () if R is None else (R,)
    X = torch.rand(*lead, 50, 5, generator=g, dtype=D)
    y = X[..., 0] + 0.1 * torch.randn(*lead, 50, generator=g, dtype=D)

    def fit(inputs: torch.Tensor) -> list[torch.Tensor]:
        model = SpikeSlabMLP(5, (4,), 1, n_replicates=R, generator=g, dtype=D)
        model.load_state_dict(template.state_dict())
        train(
            model,
            inputs,
            y,
            GaussianLikelihood(0.1),
            epochs=3,
            batch_size=16,
            lr=0.02,
            generator=torch.Generator().manual_seed(2),
        )
        return [p.detach() for p in model.parameters()]

    template = SpikeSlabMLP(5, (4,), 1, n_replicates=R, generator=g, dtype=D)
    reused = fit(X)
    copied = fit(X.clone().requires_grad_())
    assert all(torch.equal(a, b) for a, b in zip(reused, copied, strict=True))
    assert not all(torch.equal(a, b) for a, b in zip(reused, template.parameters(), strict=True))


def test_categorical_objective() -> None:
    g = torch.Generator().manual_seed(0)
    X = torch.randn(90, 5, generator=g, dtype=D)
    y = (X[:, 0] > 0).long() + (X[:, 1] > 1).long()
    model = SpikeSlabMLP(5, (8,), 3, generator=g, dtype=D, log_prior_inclusion=-3.0)
    hist = train(
        model,
        X,
        y,
        CategoricalLikelihood(),
        epochs=40,
        batch_size=30,
        lr=0.02,
        optimizer="rmsprop",
        generator=g,
    )
    assert hist.nll[-1] < 0.7 * hist.nll[0]


def test_per_replicate_noise_level() -> None:
    lik = GaussianLikelihood(torch.tensor([[0.5], [2.0]], dtype=D))
    out = torch.zeros(2, 3, 1, dtype=D)
    y = torch.ones(2, 3, dtype=D)
    lp = lik.log_prob(out, y)
    for r, s in enumerate([0.5, 2.0]):
        expected = -0.5 * (math.log(2 * math.pi * s * s) + 1 / (s * s))
        torch.testing.assert_close(lp[r], torch.full((3,), expected, dtype=D))
    with pytest.raises(ValueError):
        GaussianLikelihood(torch.tensor([1.0, -1.0]))


def test_replicate_orders_are_seeded_independent_uniform_permutations() -> None:
    R, n = 3, 4
    a = replicate_orders(R, n, torch.Generator().manual_seed(5))
    b = replicate_orders(R, n, torch.Generator().manual_seed(5))
    assert a.shape == (R, n) and a.dtype == torch.int64
    assert torch.equal(a, b)
    assert torch.equal(a.sort(dim=1).values, torch.arange(n).expand(R, n))
    # Uniform over the 24 permutations and independent across replicates: the pair of the
    # first two rows' permutations is uniform over 576 cells. Chi-square with 575 degrees
    # of freedom at 20 draws a cell; its 1e-4 upper quantile is 709.7.
    gen = torch.Generator().manual_seed(0)
    n_draws = 576 * 20
    perms = {p: i for i, p in enumerate(itertools.permutations(range(n)))}
    counts = torch.zeros(24, 24)
    for _ in range(n_draws):
        o = replicate_orders(2, n, gen)
        counts[perms[tuple(o[0].tolist())], perms[tuple(o[1].tolist())]] += 1
    expected = n_draws / 576
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 709.7, chi2


def _residual_sd(model: SpikeSlabMLP, X: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """sqrt(E_q mean (y - f)^2) per replicate: the noise sd that maximises the ELBO."""
    g = torch.Generator().manual_seed(7)
    set_generator(model, g)
    with torch.no_grad():
        sq = torch.stack([(y - model(X).squeeze(-1)) ** 2 for _ in range(400)])
    return sq.mean(dim=(0, -1)).sqrt()


def test_train_learns_the_noise_of_a_likelihood_per_replicate(tmp_path: Path) -> None:
    # Two replicates, the second with five times the noise; both noise levels start at 1.
    X, y = _data(256)
    g = torch.Generator().manual_seed(5)
    noise = torch.tensor([[0.1], [0.5]], dtype=D)
    yr = 3 * X[:, 0] - 2 * X[:, 1] + noise * torch.randn(2, 256, generator=g, dtype=D)
    Xr = X.expand(2, -1, -1)
    lik = GaussianLikelihood(torch.ones(2, 1, dtype=D), learn_noise=True)
    assert lik.log_noise_std.shape == (2, 1)
    model = _model(n_replicates=2)
    kw = dict(batch_size=64, lr=0.02, checkpoint_path=tmp_path / "run.pt", checkpoint_every=1)
    train(model, Xr, yr, lik, epochs=150, generator=g, **kw)
    learned = lik.noise_std.detach().squeeze(-1)
    # At a stationary point of the ELBO sigma^2 = E_q mean (y - f)^2, per replicate; Adam's
    # minibatch steps keep it within a few percent of that.
    torch.testing.assert_close(learned, _residual_sd(model, Xr, yr), rtol=0.1, atol=0.0)
    assert learned[1] > learned[0] + 0.1  # each replicate its own noise level
    # The checkpoint holds the learned noise: a resume restores it exactly.
    lik2 = GaussianLikelihood(torch.ones(2, 1, dtype=D), learn_noise=True)
    train(_model(n_replicates=2), Xr, yr, lik2, epochs=150, resume=True, **kw)
    assert torch.equal(lik2.log_noise_std, lik.log_noise_std)


def test_lr_factor_is_constant_then_half_a_cosine_to_one_percent() -> None:
    assert [lr_factor("constant", t, 100) for t in (0, 50, 99)] == [1.0, 1.0, 1.0]
    assert lr_factor("cosine", 0, 100) == 1.0
    assert lr_factor("cosine", 50, 100) == 1.0  # held for the first half
    assert lr_factor("cosine", 75, 100) == pytest.approx(0.01 + 0.99 * 0.5, abs=1e-15)
    assert lr_factor("cosine", 100, 100) == pytest.approx(0.01, abs=1e-15)
    assert lr_factor("cosine", 0, 1) == 1.0
    steps = [lr_factor("cosine", t, 40) for t in range(41)]
    assert all(a >= b for a, b in itertools.pairwise(steps))  # never rises
    with pytest.raises(ValueError):
        lr_factor("linear", 0, 10)


def _rates_seen(**kw: object) -> list[float]:
    """The learning rate of every optimiser step of one ``train`` call (step by step:
    the native epochs take their rates from the same schedule, tests/test_native_epoch.py)."""
    seen: list[float] = []
    real_step = Adam.step

    def step(self: Adam) -> None:
        seen.append(self.param_groups[0]["lr"])
        real_step(self)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Adam, "step", step)
        mp.setattr(training, "_native_epochs", lambda *args: None)
        X, y = _data()
        train(_model(), X, y, GaussianLikelihood(0.3), batch_size=16, lr=0.02, **kw)  # type: ignore[arg-type]
    return seen


@pytest.mark.parametrize("start", [0, 7])
def test_scheduled_rates_are_lambdalrs_to_the_bit(start: int) -> None:
    """The loop's schedule sets the rates torch's LambdaLR with the same factor sets, from
    the run's start or a resume at step ``start``, bit for bit."""
    total = 40

    def factor(t: int) -> float:
        return lr_factor("cosine", t, total)

    ours = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.03)
    theirs = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.03)
    if start:  # a resumed run's groups hold the rate the run started at
        for opt in (ours, theirs):
            opt.param_groups[0]["initial_lr"] = 0.03
            opt.param_groups[0]["lr"] = 0.0123  # the saved rate of its last step
    rate = training._ScheduledRate(ours, LRSchedule.COSINE, total, start)
    sched = torch.optim.lr_scheduler.LambdaLR(theirs, factor, last_epoch=start - 1)
    for t in range(start, total):
        assert ours.param_groups[0]["lr"] == theirs.param_groups[0]["lr"] == rate.rate(t)
        theirs.step()
        sched.step()
        training._scheduled_step(rate, None, t)


def test_train_steps_at_the_scheduled_rates() -> None:
    # 64 rows, batches of 16: 4 steps an epoch, 10 epochs.
    assert _rates_seen(epochs=10) == [0.02] * 40
    rates = _rates_seen(epochs=10, lr_schedule="cosine")
    assert rates == pytest.approx([0.02 * lr_factor("cosine", t, 40) for t in range(40)], rel=1e-12)
    with pytest.raises(ValueError):
        _rates_seen(epochs=1, lr_schedule="step")


def test_cosine_run_resumes_bit_for_bit_and_refuses_another_length(tmp_path: Path) -> None:
    X, y = _data()
    lik = GaussianLikelihood(0.3)
    kw = dict(batch_size=16, lr=0.02, lr_schedule="cosine")
    full = _model()
    h_full = train(full, X, y, lik, epochs=12, generator=torch.Generator().manual_seed(3), **kw)  # type: ignore[arg-type]
    # The same 12-epoch run, interrupted after epoch 5 (a callback stops it).
    ckpt = tmp_path / "run.pt"
    _interrupted_12_epochs(X, y, lik, ckpt, **kw)
    resumed, h_res = _resume_12_epochs(X, y, lik, ckpt, **kw)
    for a, b in zip(full.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    assert h_res.loss == h_full.loss
    # Another length is another schedule: refused, naming it.
    with pytest.raises(CheckpointError, match="schedule_steps"):
        train(_model(), X, y, lik, epochs=20, checkpoint_path=ckpt, resume=True, **kw)  # type: ignore[arg-type]


def test_kl_warmup_factor_rises_linearly_to_one() -> None:
    assert [kl_warmup_factor(t, 4) for t in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert kl_warmup_factor(0, 0) == kl_warmup_factor(10**9, 0) == 1.0
    assert kl_warmup_factor(0, 1) == 1.0


def test_warmed_objective_weighs_the_kl_of_each_step() -> None:
    """Call t of a warmed objective (counted from first_step) is negative_elbo with the KL
    weight kl_weight * kl_warmup_factor(t, warmup), draw for draw."""
    X, y = _data()
    model, lik = _model(), GaussianLikelihood(0.5)
    g = torch.Generator().manual_seed(0)
    set_generator(model, g)
    warmed = elbo_objective(lik, 64, kl_weight=0.5, kl_warmup=4, first_step=2)
    for t in range(2, 7):
        g.manual_seed(t)
        loss, nll, kl = warmed(model, X[:16], y[:16])
        g.manual_seed(t)
        w = 0.5 * kl_warmup_factor(t, 4)
        expected = negative_elbo(model, lik, X[:16], y[:16], 64, 1, w)
        assert torch.equal(loss, expected[0]) and torch.equal(kl, expected[2])
        assert torch.equal(loss.detach(), nll + w * kl)


def test_warmed_run_resumes_bit_for_bit_and_refuses_another_warmup(tmp_path: Path) -> None:
    X, y = _data()
    lik = GaussianLikelihood(0.3)
    kw = dict(batch_size=16, lr=0.02, kl_warmup=30)  # 4 steps an epoch: 7.5 epochs
    full = _model()
    h_full = train(full, X, y, lik, epochs=12, generator=torch.Generator().manual_seed(3), **kw)  # type: ignore[arg-type]
    plain = train(
        _model(),
        X,
        y,
        lik,
        epochs=12,
        generator=torch.Generator().manual_seed(3),
        batch_size=16,
        lr=0.02,
    )
    assert h_full.loss[0] < plain.loss[0]  # less KL in the first epoch's objective
    ckpt = tmp_path / "run.pt"
    _interrupted_12_epochs(X, y, lik, ckpt, **kw)  # stopped inside the warm-up
    resumed, h_res = _resume_12_epochs(X, y, lik, ckpt, **kw)
    for a, b in zip(full.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    assert h_res.loss == h_full.loss
    with pytest.raises(CheckpointError, match="kl_warmup"):
        _resume_12_epochs(X, y, lik, ckpt, **{**kw, "kl_warmup": 10})


@pytest.mark.parametrize("bad", [-1, 2.5, True, "3"])
def test_kl_warmup_must_be_whole_steps(bad: object) -> None:
    X, y = _data()
    with pytest.raises(ValueError, match="kl_warmup"):
        train(
            _model(), X, y, GaussianLikelihood(0.3), epochs=1, batch_size=16, lr=0.01, kl_warmup=bad
        )  # type: ignore[arg-type]


def test_kl_warmup_needs_the_elbo() -> None:
    X, y = _data()
    plain = loss_objective(torch.nn.functional.mse_loss)
    with pytest.raises(ValueError, match="kl_warmup"):
        train(_model(), X, y, objective=plain, epochs=1, batch_size=16, lr=0.01, kl_warmup=4)
