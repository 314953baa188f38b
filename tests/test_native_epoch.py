"""svbnn._engine.native_epoch: whole epochs of the local sampler's network in one native call
train bit for bit as the step-by-step loop (parameters, Adam's state, the generator, the
history), and step aside wherever one of their conditions fails."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from svbnn import SVBNNClassifier, SVBNNRegressor, training
from svbnn._engine import native as _native
from svbnn.nn import SpikeSlabMLP
from svbnn.objectives import CategoricalLikelihood, GaussianLikelihood, RowWeightedLikelihood
from svbnn.training import History, train


def _count_epochs(mp: pytest.MonkeyPatch, calls: list[int] | None = None) -> list[int]:
    """Counts the native epochs run from now on (one entry each; ``calls`` gets one entry
    per native call, the number of epochs it ran)."""
    runs: list[int] = []
    real = training.native_epochs

    def counted(*args: Any) -> Any:
        out = real(*args)
        runs.extend([1] * out[0].shape[0])
        if calls is not None:
            calls.append(out[0].shape[0])
        return out

    mp.setattr(training, "native_epochs", counted)
    return runs


def _run(
    native: bool,
    *,
    hidden: tuple[int, ...] = (9,),
    p: int = 5,
    n: int = 40,
    batch: int = 16,
    epochs: int = 3,
    seed: int = 0,
    learn_noise: bool = True,
    kernel_backend: str = "auto",
    classes: int = 0,
    weighted: bool = False,
    **kwargs: Any,
) -> tuple[dict[str, torch.Tensor], list[torch.Tensor], History, torch.Tensor, int]:
    """``train`` (under ``kernel_backend``) with the native epoch (``native``) or the step
    loop, of a local-sampler regression network, or with ``classes`` a Gumbel-sampler
    classifier of that many classes (``weighted``: under a
    :class:`~svbnn.objectives.RowWeightedLikelihood`, weights of mean 1): its parameters and
    noise level, Adam's state, the history, the generator's state afterwards, and how many
    native epochs ran."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, p, generator=g)
    lik: Any
    if classes:
        model = SpikeSlabMLP(p, hidden, classes, generator=g, log_prior_inclusion=-3.0)
        score = X[:, :1] * torch.arange(classes) + 0.5 * torch.randn(n, classes, generator=g)
        y = score.argmax(-1)
        lik = CategoricalLikelihood()
    else:
        model = SpikeSlabMLP(p, hidden, 1, sampler="local", generator=g, log_prior_inclusion=-3.0)
        y = X[:, 0] - 0.5 * X[:, -1] + 0.3 * torch.randn(n, generator=g)
        lik = GaussianLikelihood(0.7, learn_noise=learn_noise)
    if weighted:
        w = torch.rand(n, generator=g) * 3.0 + 0.1
        y = torch.stack([y.to(torch.float32), w / w.mean()], dim=-1)
        lik = RowWeightedLikelihood(lik)
    gen = torch.Generator().manual_seed(seed + 1)
    states: list[torch.Tensor] = []
    real_make = training._loop_optimizer

    def make(*args: Any) -> Any:
        opt = real_make(*args)
        made.append(opt)
        return opt

    made: list[Any] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(training, "_loop_optimizer", make)
        runs = _count_epochs(mp)
        if not native:
            mp.setattr(training, "_native_epochs", lambda *args: None)
        history = train(
            model,
            X,
            y,
            lik,
            epochs=epochs,
            batch_size=batch,
            lr=0.01,
            generator=gen,
            warn_divergence=False,
            kernel_backend=kernel_backend,
            **kwargs,
        )
    for state in made[0].state.values():
        states.extend(state[k] for k in sorted(state))
    params = {**model.state_dict(), **{f"lik.{k}": v for k, v in lik.state_dict().items()}}
    return params, states, history, gen.get_state(), len(runs)


def _assert_same(a: tuple[Any, ...], b: tuple[Any, ...]) -> None:
    pa, sa, ha, ga, _ = a
    pb, sb, hb, gb, _ = b
    assert pa.keys() == pb.keys()
    for k in pa:
        assert torch.equal(pa[k], pb[k]), k
    assert len(sa) == len(sb) > 0
    assert all(torch.equal(u, v) for u, v in zip(sa, sb, strict=True))
    assert ha.as_dict() == hb.as_dict()
    assert torch.equal(ga, gb)


def _both_ways_alike(**kw: Any) -> None:
    """Four epochs of :func:`_run` (one torch thread) with the native epochs and step by
    step: epochs 2-4 ran natively, and the two runs are the same in every bit."""
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        fast, slow = _run(True, epochs=4, **kw), _run(False, epochs=4, **kw)
    finally:
        torch.set_num_threads(n_threads)
    assert fast[4] == 3 and slow[4] == 0
    _assert_same(fast, slow)


@settings(max_examples=40, deadline=None)
@given(
    hidden=st.sampled_from([(1,), (9,), (50,), (6, 4)]),
    classes=st.sampled_from([0, 0, 2, 3, 5]),
    p=st.integers(1, 12),
    n=st.integers(2, 70),
    batch=st.integers(1, 32),
    lr_schedule=st.sampled_from(["constant", "cosine"]),
    kl_warmup=st.sampled_from([0, 1, 7, 40]),
    kl_weight=st.sampled_from([1.0, 0.3]),
    mode=st.sampled_from(["auto", "native"]),
    weighted=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_a_native_epoch_trains_bit_for_bit_as_the_step_loop(
    hidden: tuple[int, ...],
    classes: int,
    p: int,
    n: int,
    batch: int,
    lr_schedule: str,
    kl_warmup: int,
    kl_weight: float,
    mode: str,
    weighted: bool,
    seed: int,
) -> None:
    """Every epoch after the first (whose first step sets up Adam's state) runs natively;
    the run is the step loop's in every bit: parameters, noise level, Adam's moments and
    step counts, the recorded history and the generator's state (so the minibatch orders
    and the draws were the same numbers). Both kinds: the local sampler's regression
    network (``classes`` 0) and the Gumbel sampler's classifier of 2-5 classes. Covers a
    last minibatch smaller than the rest, the KL warm-up ending inside an epoch, both
    schedules, one or two hidden layers, and rows weighted by a
    :class:`~svbnn.objectives.RowWeightedLikelihood`. (Under ``auto`` the classifier's native step
    takes narrow layers only: one of 50 hidden units would compile its one-graph step
    there, so it runs under ``native``.)"""
    if classes and max(hidden) > 16:
        mode = "native"
    _both_ways_alike(
        hidden=hidden,
        classes=classes,
        p=p,
        n=n,
        batch=batch,
        seed=seed,
        lr_schedule=lr_schedule,
        kl_warmup=kl_warmup,
        kl_weight=kl_weight,
        kernel_backend=mode,
        weighted=weighted,
    )


@settings(max_examples=25, deadline=None)
@given(
    classes=st.sampled_from([0, 0, 3]),
    n=st.integers(2, 60),
    batch=st.integers(1, 32),
    period=st.integers(1, 120),
    epochs=st.integers(2, 14),
    checkpoint_every=st.sampled_from([0, 0, 3]),
    lr_schedule=st.sampled_from(["constant", "cosine"]),
    kl_warmup=st.sampled_from([0, 9]),
    seed=st.integers(0, 2**16),
)
def test_epochs_up_to_a_monitor_s_period_end_run_in_one_call(
    classes: int,
    n: int,
    batch: int,
    period: int,
    epochs: int,
    checkpoint_every: int,
    lr_schedule: str,
    kl_warmup: int,
    seed: int,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Under a ConvergenceMonitor (which reads the network only at its periods' ends) the
    epochs run in calls that end at each period's end, at a due checkpoint or at the end;
    the run, the history's gate statistics (computed in the native call) and the monitor's
    decisions are the step loop's in every bit."""
    from svbnn.convergence import ConvergenceMonitor

    n_batches = -(-n // batch)
    kw: dict[str, Any] = dict(
        classes=classes,
        n=n,
        batch=batch,
        epochs=epochs,
        seed=seed,
        lr_schedule=lr_schedule,
        kl_warmup=kl_warmup,
    )
    if checkpoint_every:
        kw.update(checkpoint_every=checkpoint_every)
    monitors, calls = [], []
    n_threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for native in (True, False):
            monitor = ConvergenceMonitor(n_batches, check_steps=period, n_iter_no_change=1)
            monitors.append(monitor)
            if checkpoint_every:
                kw["checkpoint_path"] = tmp_path_factory.mktemp("ckpt") / "run.pt"
            with pytest.MonkeyPatch.context() as mp:
                if native:
                    _count_epochs(mp, calls)
                out = _run(native, callbacks=[monitor], **kw)
            if native:
                fast = out
            else:
                slow = out
    finally:
        torch.set_num_threads(n_threads)
    _assert_same(fast, slow)
    assert vars(monitors[0]).keys() == vars(monitors[1]).keys()
    for key, value in vars(monitors[0]).items():
        other = vars(monitors[1])[key]
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, other), key
        else:
            assert value == other or (value != value and other != other), key
    # Each call ran up to the next period end, due checkpoint or the run's end.
    per = monitors[0].epochs_per_period
    done = 1  # the call's first epoch runs step by step
    for ran in calls:
        ends = [per - done % per, epochs - done]
        if checkpoint_every:
            ends.append(checkpoint_every - done % checkpoint_every)
        assert ran == min(ends), (calls, per)
        done += ran
    assert len(fast[2].epoch) == done


def test_a_monitor_s_period_runs_in_one_native_call(one_thread: None) -> None:
    """40 rows in minibatches of 16 (3 steps an epoch), a period of 5 epochs: after the
    first epoch, epochs 2-5, 6-10 and 11-12 in three calls."""
    from svbnn.convergence import ConvergenceMonitor

    calls: list[int] = []
    monitor = ConvergenceMonitor(3, check_steps=15, n_iter_no_change=100)
    with pytest.MonkeyPatch.context() as mp:
        _count_epochs(mp, calls)
        _run(True, epochs=12, callbacks=[monitor])
    assert monitor.epochs_per_period == 5 and calls == [4, 5, 2]


def test_a_resumed_run_takes_native_epochs_and_is_the_uninterrupted_run(
    one_thread: None, tmp_path: Any
) -> None:
    """After a resume, the epochs after the call's first run natively; the run ends where
    the uninterrupted one does."""
    ckpt = tmp_path / "run.pt"
    kw: dict[str, Any] = dict(epochs=5, lr_schedule="cosine", kl_warmup=20)
    whole = _run(True, **kw)
    # interrupted after epoch 2 (a callback stops it there, its checkpoint written)
    _run(True, **kw, checkpoint_path=ckpt, callbacks=[lambda epoch, *_: epoch == 2])
    resumed = _run(True, **kw, checkpoint_path=ckpt, resume=True)
    assert resumed[4] == 2
    pa, pb = whole[0], resumed[0]
    assert all(torch.equal(pa[k], pb[k]) for k in pa)


def test_the_native_epoch_steps_aside_where_its_conditions_fail(one_thread: None) -> None:
    """The step loop, and nothing drawn or changed by the native path, wherever one condition
    fails: a caller's on_step, a known noise level, another optimiser, the eager backend,
    several torch threads under auto, a profiler, a replicated network (its own test)."""
    base = _run(True)
    assert base[4] == 2
    for kwargs in (
        dict(on_step=lambda t: None),
        dict(learn_noise=False),
        dict(optimizer="rmsprop"),
        dict(kernel_backend="eager"),
        dict(n_mc=2),
    ):
        assert _run(True, **kwargs)[4] == 0, kwargs  # type: ignore[arg-type]
    with torch.profiler.profile():
        assert _run(True)[4] == 0
    _assert_same(_run(False), base)  # the same run step by step
    torch.set_num_threads(2)
    assert _run(True, kernel_backend="auto")[4] == 0


def test_what_a_callback_changes_between_epochs_is_seen(one_thread: None) -> None:
    """The run's path is checked once, then again when the backend, the thread count or a
    layer's mode changes; a hook or another rate added by a callback is seen at the next
    epoch: a hook sends the steps back to the loop (which calls it), a new rate is used."""
    calls: list[int] = []

    def add_hook(epoch: int, model: SpikeSlabMLP, history: History) -> None:
        if epoch == 2:
            model.mu.register_hook(lambda g: calls.append(1))

    hooked = _run(True, epochs=5, callbacks=[add_hook])
    assert hooked[4] == 1  # epoch 2 only: epochs 3-5 step by step, each step the hook
    assert len(calls) == 3 * 3  # 40 rows in minibatches of 16: 3 steps an epoch

    def threads(epoch: int, *_: object) -> None:
        torch.set_num_threads(2 if epoch == 2 else 1)

    try:
        assert _run(True, epochs=5, callbacks=[threads])[4] == 3  # not epoch 3
    finally:
        torch.set_num_threads(1)

    def slower(epoch: int, *_: object) -> None:
        if epoch == 2:
            opt_box[-1].param_groups[0]["lr"] = 0.002

    opt_box: list[Any] = []
    real = training._loop_optimizer
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(training, "_loop_optimizer", lambda *a: opt_box.append(real(*a)) or opt_box[-1])
        fast = _run(True, epochs=4, callbacks=[slower])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(training, "_loop_optimizer", lambda *a: opt_box.append(real(*a)) or opt_box[-1])
        slow = _run(False, epochs=4, callbacks=[slower])
    assert fast[4] == 3
    _assert_same(fast, slow)
    assert not torch.equal(fast[0]["mu"], _run(True, epochs=4)[0]["mu"])  # the rate mattered


def test_the_extension_refuses_an_epoch_it_cannot_run() -> None:
    """The extension checks what it is handed before it changes anything."""
    assert _native.available()
    lib = _native.library()
    assert lib is not None
    T = 5 * (3 + 1) + 1 * (5 + 1)
    params = [torch.zeros(T), torch.zeros(T), torch.zeros(T), torch.zeros(())]
    avgs = [torch.zeros_like(t) for t in params]
    steps = [torch.ones(()) for _ in params]
    X, y = torch.zeros(6, 3), torch.zeros(6)
    lam = torch.tensor(-2.0)

    def call(**over: Any) -> None:
        a = dict(
            params=params,
            n_epochs=1,
            outs=[5, 1],
            gens=[None, None],
            n_train=[6.0, 6.0],
            X=X,
            w=None,
        )
        a.update(over)
        lib.local_gaussian_epochs(
            a["params"],
            avgs,
            avgs,
            steps,
            lam,
            lam,
            0.0,
            1.0,
            a["X"],
            y,
            a["w"],
            torch.Generator().manual_seed(0),
            a["n_epochs"],
            True,
            3,
            a["outs"],
            a["gens"],
            a["n_train"],
            [1.0, 1.0],
            [0.01, 0.01],
            0.9,
            0.999,
            1e-8,
            0.0,
        )

    call()  # the well-formed call runs
    call(w=torch.ones(6))  # and with the rows' weights
    bad: list[dict[str, Any]] = [
        dict(n_epochs=0),
        dict(n_epochs=2),  # two epochs, the schedules of one
        dict(outs=[4, 1]),  # widths that do not match T
        dict(outs=[5, 2]),  # two outputs
        dict(gens=[None]),
        dict(n_train=[6.0]),  # not one per step
        dict(X=X.double()),
        dict(params=[*params[:3], torch.zeros(2)]),
        dict(w=torch.ones(5)),  # not one weight per row
        dict(w=torch.ones(6, dtype=torch.float64)),
    ]
    for over in bad:
        with pytest.raises(RuntimeError):
            call(**over)
    # the classifier's epoch: 3 classes, and a class index out of their range
    T3 = 5 * (3 + 1) + 3 * (5 + 1)
    three = [torch.zeros(T3), torch.zeros(T3), torch.zeros(T3)]
    moments = [torch.zeros(T3) for _ in three]
    args: list[Any] = [three, moments, moments, [torch.ones(()) for _ in three], lam, lam]
    args += [0.0, 1.0, 2.0, X]
    rest = (None, None, 1, False, 3, [5, 3], True, None, [6.0, 6.0], [1.0, 1.0], [0.01, 0.01])
    adam = (0.9, 0.999, 1e-8, 0.0)
    lib.gumbel_categorical_epochs(*args, torch.zeros(6, dtype=torch.long), *rest, *adam)
    for labels in (torch.full((6,), 3), torch.zeros(6)):  # out of range; not int64
        with pytest.raises(RuntimeError):
            lib.gumbel_categorical_epochs(*args, labels, *rest, *adam)


@pytest.mark.parametrize("weighted", [False, True])
def test_the_regressor_s_default_fit_runs_native_epochs(
    one_thread: None, monkeypatch: pytest.MonkeyPatch, weighted: bool
) -> None:
    """The defaults take the native epoch (the speed of a whole fit rests on it), with
    ``sample_weight`` too, and the fit is the step loop's bit for bit."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 6)).astype(np.float32)
    y = X[:, 0] - X[:, 1] + 0.3 * rng.standard_normal(120)
    weights = {"sample_weight": rng.uniform(0.2, 3.0, 120)} if weighted else {}
    with pytest.MonkeyPatch.context() as mp:
        runs = _count_epochs(mp)
        fast = SVBNNRegressor(random_state=0).fit(X, y, **weights)
    assert len(runs) > 0
    monkeypatch.setattr(training, "_native_epochs", lambda *args: None)
    slow = SVBNNRegressor(random_state=0).fit(X, y, **weights)
    a, b = fast.module_.state_dict(), slow.module_.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert fast.noise_std_ == slow.noise_std_
    np.testing.assert_array_equal(fast.predict(X), slow.predict(X))


@pytest.mark.parametrize("class_weight", [None, "balanced"])
def test_the_classifier_s_default_fit_runs_native_epochs(
    one_thread: None, monkeypatch: pytest.MonkeyPatch, class_weight: str | None
) -> None:
    """The classifier's defaults (the Gumbel sampler, the native backend for its small
    network) take the native epoch too, with ``class_weight`` as well, and the fit is the
    step loop's bit for bit."""
    rng = np.random.default_rng(1)
    X = rng.standard_normal((150, 5)).astype(np.float32)
    y = (X[:, 0] + 0.5 * rng.standard_normal(150) > 0).astype(int) + (X[:, 1] > 1)
    with pytest.MonkeyPatch.context() as mp:
        runs = _count_epochs(mp)
        fast = SVBNNClassifier(random_state=0, class_weight=class_weight).fit(X, y)
    assert len(runs) > 0
    monkeypatch.setattr(training, "_native_epochs", lambda *args: None)
    slow = SVBNNClassifier(random_state=0, class_weight=class_weight).fit(X, y)
    a, b = fast.module_.state_dict(), slow.module_.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
    np.testing.assert_array_equal(fast.predict_proba(X), slow.predict_proba(X))
