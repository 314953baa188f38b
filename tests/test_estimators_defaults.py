"""The estimators on a user's data: no silent collapse, honest convergence and selection,
learned noise and calibrated prediction intervals (issue 13). Fast and seeded; the
tolerances come from the sampling error of the quantity checked."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
import torch
from sklearn.exceptions import ConvergenceWarning

from svbnn import SVBNNClassifier, SVBNNRegressor, training
from svbnn._engine import native as _native
from svbnn.estimators import CollapseWarning
from svbnn.selection import selected_features

# Small budgets keep the file fast; everything else is the default.
FAST = dict(max_iter=400, random_state=0)


def _sparse_problem(n: int, seed: int, noise: float = 0.5, p: int = 10):
    """Simulation-II-like: y depends on the first 3 of p inputs (nonlinearly)."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, p))
    f = 2 * X[:, 0] + 2 * np.sin(np.pi * X[:, 1]) + 2 * X[:, 2] ** 2 + 10
    return X, 100 * (f + noise * rng.standard_normal(n)), 100 * f  # user units: x100


def test_fit_with_signal_is_not_constant() -> None:
    X, y, f = _sparse_problem(400, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg = SVBNNRegressor(**FAST).fit(X, y)
    pred = reg.predict(X)
    # Non-constant and far better than the mean (R^2 of the noiseless f above 0.8).
    assert np.std(pred) > 0.5 * np.std(f)
    assert 1 - np.mean((pred - f) ** 2) / np.var(f) > 0.8


def test_forced_collapse_warns() -> None:
    X, y, _ = _sparse_problem(200, 1)
    # A prior inclusion of exp(-5000) prunes everything: the fit is a constant.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg = SVBNNRegressor(
            log_prior_inclusion=-5000.0,
            learning_rate_init=0.05,
            max_iter=200,
            random_state=0,
            mean_function="zero",  # the network alone (a linear mean would explain y)
        ).fit(X, y)
    collapse = [str(w.message) for w in caught if issubclass(w.category, CollapseWarning)]
    # One warning with every reason, and the remedies that fitted where defaults collapsed.
    assert len(collapse) == 1, collapse
    for part in ("no input selected", "no path", "training R^2", "'eb'", "'cv'"):
        assert part in collapse[0], (part, collapse[0])
    # The local sampler (the regressor's default) is not told to temper: its tempered fit
    # overfits (test_tempered_fit_takes_its_noise_from_held_out_rows).
    assert "kl_weight=0.2" not in collapse[0]
    assert reg.collapsed_
    assert sum(w.startswith("CollapseWarning: ") for w in reg.fit_warnings_) == 1

    def advice(**kwargs: object) -> str:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            warnings.simplefilter("ignore", ConvergenceWarning)
            SVBNNRegressor(
                log_prior_inclusion=-5000.0,
                learning_rate_init=0.05,
                max_iter=200,
                random_state=0,
                sampler="gumbel",
                mean_function="zero",
                **kwargs,  # type: ignore[arg-type]
            ).fit(X, y)
        collapse = [str(w.message) for w in caught if issubclass(w.category, CollapseWarning)]
        assert len(collapse) == 1 and "'cv'" in collapse[0]
        return collapse[0]

    # The Gumbel sampler is told to temper, unless it is already tempered that far.
    assert "kl_weight=0.2" in advice()
    assert "kl_weight=0.2" not in advice(kl_weight=0.2)


def test_collapse_reason_reads_the_reported_selection() -> None:
    """ "no input selected" is said only where ``selected_features_`` is empty: an input
    the median model keeps with a path probability (``feature_inclusion_``) at or below
    0.5 is selected, and is no reason."""
    X, y, _ = _sparse_problem(200, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = SVBNNRegressor(max_iter=200, random_state=0, mean_function="zero").fit(X, y)
    assert reg.selected_features_.size > 0 and not reg.collapsed_
    # Path probabilities below 0.5 beside a median model that reaches the output: two
    # edges of phi 0.7 on one path make 0.49.
    reg.feature_inclusion_ = np.full_like(reg.feature_inclusion_, 0.49)
    reg.unresolved_ = 0.0  # gates resolved: the reasons that read the selection apply
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg._warn_if_collapsed([])
    assert not [w for w in caught if issubclass(w.category, CollapseWarning)]
    reg.selected_features_ = np.zeros(0, dtype=np.intp)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg._warn_if_collapsed([])
    (message,) = [str(w.message) for w in caught if issubclass(w.category, CollapseWarning)]
    assert "no input selected" in message and "largest feature_inclusion_ 0.49" in message


def test_majority_class_collapse_warns_and_is_recorded() -> None:
    # The imbalanced binary case of issue 31: a weak signal (12% positives, P(y=1) above
    # 0.5 only for x0 > 2.3) gives a fit whose log-loss is below the class frequencies'
    # but which predicts the majority class for >= 99% of the rows: a CollapseWarning.
    rng = np.random.default_rng(0)
    X = rng.standard_normal((600, 5))
    y = (rng.random(600) < 1 / (1 + np.exp(2.3 - X[:, 0]))).astype(int)
    assert 0.10 <= y.mean() < 0.2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        clf = SVBNNClassifier(max_iter=60, random_state=0).fit(X, y)
    collapse = [str(w.message) for w in caught if issubclass(w.category, CollapseWarning)]
    assert len(collapse) == 1, collapse
    assert "predicts class 0 for" in collapse[0] and "another class has" in collapse[0]
    assert np.mean(clf.predict(X) == 0) >= 0.99
    assert clf.collapsed_
    assert [w for w in clf.fit_warnings_ if w.startswith("CollapseWarning")] == [
        f"CollapseWarning: {collapse[0]}"
    ]


def test_classifier_collapse_reads_the_predictive_not_the_history(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The log-loss reason compares the posterior predictive's training log-loss with the
    # entropy of the class frequencies. The history's log-loss (the expected log-loss
    # under q, above the predictive's) is not read: set high, it raises nothing.
    from svbnn import _estimator_tasks as T

    rng = np.random.default_rng(0)
    X = rng.standard_normal((200, 3))
    y = (np.arange(200) % 10 == 0).astype(int)  # 10% positives
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = SVBNNClassifier(hidden_layer_sizes=(4,), max_iter=2, random_state=0).fit(X, y)
    clf.history_.nll[-1] = 10.0
    freq = np.bincount(y) / y.size
    entropy = float(-np.sum(freq * np.log(freq)))

    def proba_of(p: np.ndarray) -> None:
        monkeypatch.setattr(T, "predict_proba", lambda *a, **k: torch.as_tensor(p))

    # Probabilities that carry the signal: log-loss well below the entropy.
    informative = np.where(y[:, None] == 1, [0.4, 0.6], [0.95, 0.05])
    proba_of(informative)
    assert clf._collapse_reasons(X, y, None) == []
    # The class frequencies for every row: the log-loss reason (the majority class is
    # predicted for every row, but the minority has 10%: the share reason too).
    proba_of(np.tile(freq, (200, 1)))
    reasons = clf._collapse_reasons(X, y, None)
    assert len(reasons) == 2
    assert f"({entropy:.3g})" in reasons[0] and "class frequencies" in reasons[0]
    # Row weights weigh both sides: the weighted entropy and the weighted log-loss.
    w = np.where(y == 1, 4.0, 1.0)
    w = w / w.mean()
    wfreq = np.bincount(y, w) / w.sum()
    proba_of(np.tile(wfreq, (200, 1)))
    assert "class frequencies" in clf._collapse_reasons(X, y, w)[0]


def test_collapse_does_not_change_converged() -> None:
    # Pure-noise y: the stopping rule fires (converged_ says the objective settled) and
    # the fit explains nothing (training R^2 <= 0.02): both are recorded, apart.
    rng = np.random.default_rng(3)
    X, y = rng.standard_normal((300, 5)), rng.standard_normal(300)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg = SVBNNRegressor(
            hidden_layer_sizes=(8,),
            learning_rate_init=0.03,
            tol=1e-3,
            n_iter_no_change=2,
            random_state=0,
        ).fit(X, y)
    assert reg.converged_ and reg.collapsed_
    assert any(issubclass(w.category, CollapseWarning) for w in caught)
    assert any("training R^2" in w for w in reg.fit_warnings_)


def test_clean_fit_records_no_warnings() -> None:
    X, y, _ = _sparse_problem(300, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        reg = SVBNNRegressor(max_iter=100, tol=None, random_state=0).fit(X, y)
    assert not reg.collapsed_ and reg.fit_warnings_ == []


def test_exhausted_budget_warns_with_unresolved_fraction() -> None:
    X, y, _ = _sparse_problem(200, 2)
    with pytest.warns(ConvergenceWarning, match=r"phi in \(0\.1, 0\.9\)"):
        reg = SVBNNRegressor(max_iter=3, random_state=0).fit(X, y)
    assert reg.n_iter_ == 3 and not reg.converged_


def test_history_records_the_diagnostics() -> None:
    X, y, _ = _sparse_problem(200, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg = SVBNNRegressor(max_iter=20, random_state=0).fit(X, y)
    h = reg.history_
    assert len(h.loss) == len(h.nll) == len(h.kl) == len(h.sparsity) == len(h.unresolved) == 20
    assert all(0 <= u <= 1 for u in h.unresolved)


SIGMA, N_TRAIN, N_TEST = 0.5, 1000, 2000


@pytest.fixture(scope="module")
def sparse_fit():  # type: ignore[no-untyped-def]
    """A fit with the defaults but twice the default step budget (1,000 epochs: 8,000
    steps) on a Simulation-II-like problem, shared by the checks below. Within the
    default 4,000 steps one of the seven pure-noise inputs is still unresolved here
    (``feature_inclusion_`` 0.95 at seed 0; user guide, "How the defaults were chosen")."""
    X, y, _ = _sparse_problem(N_TRAIN + N_TEST, 4, noise=SIGMA)
    reg = SVBNNRegressor(random_state=0, max_iter=1000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # it must converge
        reg.fit(X[:N_TRAIN], y[:N_TRAIN])
    return reg, X, y


def test_selection_agrees_with_prediction(sparse_fit) -> None:  # type: ignore[no-untyped-def]
    reg, X, y = sparse_fit
    assert reg.converged_
    assert reg.feature_inclusion_.shape == (10,)
    # The median model's inputs; here, with the gates resolved, also the inputs whose
    # path probability is above 0.5.
    np.testing.assert_array_equal(
        reg.selected_features_, selected_features(reg.module_, reach=True)
    )
    np.testing.assert_array_equal(
        reg.selected_features_, np.flatnonzero(reg.feature_inclusion_ > 0.5)
    )
    assert set(reg.selected_features_) == {0, 1, 2}
    # Prediction uses what is selected and ignores the rest: scrambling an unselected
    # input moves the predictions by far less than scrambling a selected one.
    rng = np.random.default_rng(0)
    Xt = X[:N_TRAIN]
    base = reg.predict(Xt)
    change = []
    for j in range(10):
        Xs = Xt.copy()
        Xs[:, j] = rng.permutation(Xs[:, j])
        change.append(np.sqrt(np.mean((reg.predict(Xs) - base) ** 2)) / np.std(y))
    change_arr = np.array(change)
    assert change_arr[[0, 1, 2]].min() > 0.2
    assert change_arr[3:].max() < 0.05
    # The median model predicts like the posterior once the gates are resolved.
    module, _ = reg.export_sparse()
    with torch.no_grad():
        median = module(torch.tensor(Xt, dtype=torch.float32))[:, 0].numpy()
    assert np.sqrt(np.mean((median - base) ** 2)) < 0.1 * np.std(y)


def test_learned_noise_and_interval_coverage(sparse_fit) -> None:  # type: ignore[no-untyped-def]
    reg, X, y = sparse_fit
    # noise_std_ in user units (y was scaled by 100). The sampling sd of a variance-based
    # estimate is sigma / sqrt(2 n); the fitted function's own error adds a little: allow
    # 4 sampling sd plus 10%.
    tol = 4 * SIGMA / math.sqrt(2 * N_TRAIN) + 0.1 * SIGMA
    assert abs(reg.noise_std_ / 100 - SIGMA) < tol
    lo, hi = reg.predict_prediction_interval(X[N_TRAIN:], level=0.95)
    cover = np.mean((y[N_TRAIN:] >= lo) & (y[N_TRAIN:] <= hi))
    # Binomial sd of the coverage of 2000 points: sqrt(0.95 * 0.05 / 2000) = 0.0049.
    assert abs(cover - 0.95) < 4 * math.sqrt(0.95 * 0.05 / N_TEST)
    mean, sd = reg.predict(X[N_TRAIN:], return_std=True)
    assert mean.shape == sd.shape == (N_TEST,) and np.all(sd > 0)
    z = (y[N_TRAIN:] - mean) / sd
    assert abs(np.mean(np.abs(z) < 1.96) - 0.95) < 4 * math.sqrt(0.95 * 0.05 / N_TEST)


def test_tempered_fit_takes_its_noise_from_held_out_rows() -> None:
    # scikit-learn's diabetes with 10 noise columns, kl_weight=0.2: the tempered fit
    # overfits its training rows, whose residuals alone gave 95% intervals covering 0.55
    # of held-out rows (docs/results/tabular-peers, SVBNN-kl0.2); the noise fitted on
    # held-out rows covers 0.955 there. Measured with the Gumbel sampler at learning rate
    # 0.01: under the regressor's default local sampler a tempered fit overfits further
    # (test RMSE 79-88 against 63-70, seeds 0-2) and the held-out noise covers 0.86-0.94
    # (user guide, "When to change the defaults").
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    rng = np.random.default_rng(0)
    X = np.hstack([X, rng.standard_normal((len(X), 10))])
    X = (X - X.mean(0)) / X.std(0)
    test = rng.permutation(len(X))[:110]
    train = np.setdiff1d(np.arange(len(X)), test)
    reg = SVBNNRegressor(
        kl_weight=0.2,
        sampler="gumbel",
        learning_rate_init=0.01,
        random_state=0,
        mean_function="zero",  # the network's residuals are the point
    ).fit(X[train], y[train])
    Xt = reg._validate_X(X[train]).numpy()
    at_train = reg._predictive_noise(Xt, (y[train] - reg._y_mean_) / reg._y_scale_)
    at_train *= reg._y_scale_
    assert reg.noise_std_held_out_ is not None and reg.noise_std_held_out_ > 1.5 * at_train
    # The likelihood's level, times the Student-t's sd of its 66 held-out rows (20% of
    # 332), floored by the covering level.
    level = math.sqrt(66 / 64) * max(at_train, reg.noise_std_held_out_)
    assert reg.noise_std_ == pytest.approx(max(level, reg.noise_std_covering_), rel=1e-12)
    lo, hi = reg.predict_prediction_interval(X[test], level=0.95)
    cover = np.mean((y[test] >= lo) & (y[test] <= hi))
    # 110 rows: the binomial sd of the coverage is 0.021; 0.55 is 19 sd below 0.95.
    assert cover > 0.95 - 4 * math.sqrt(0.95 * 0.05 / len(test))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        # 1,000 rows or more, untempered (no refit): the training rows' noise level alone.
        many = SVBNNRegressor(max_iter=5, random_state=0, refit_kl_weight=None)
        many.fit(np.tile(X, (3, 1))[:1000], np.tile(y, 3)[:1000])
        known = SVBNNRegressor(kl_weight=0.2, noise_std=50.0, max_iter=5, random_state=0)
        known.fit(X[:50], y[:50])
    assert many.noise_std_held_out_ is None and known.noise_std_held_out_ is None


def test_few_rows_take_their_noise_from_a_short_held_out_fit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Fewer than 1,000 rows, untempered: a second fit on 80% of the rows over 0.3 of the
    # budget gives noise_std_held_out_, and noise_std_ is the larger level; a tempered fit's
    # second fit has half the budget. On the benchmark's small tables this lifted the 95%
    # coverage of yacht, Boston housing and energy from 0.91-0.92 to 0.93-0.96
    # (docs/results/tabular-peers).
    from svbnn._estimator_base import _VariationalEstimator

    budgets: list[int] = []
    train = _VariationalEstimator._train

    def spy(self: object, *args: object, **kwargs: object) -> object:
        budgets.append(int(args[5]))  # type: ignore[call-overload]
        return train(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(_VariationalEstimator, "_train", spy)
    X, y, _ = _sparse_problem(300, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        # The network alone, the first fit only (a linear mean would fit it again, the
        # default refit fit a tempered second network).
        few = SVBNNRegressor(
            max_iter=20, random_state=0, mean_function="zero", refit_kl_weight=None
        ).fit(X, y)
        assert budgets == [20, 6]
        budgets.clear()
        SVBNNRegressor(
            max_iter=20, kl_weight=0.2, random_state=0, mean_function="zero", refit_kl_weight=None
        ).fit(X, y)
        assert budgets == [20, 10]
    assert few.noise_std_held_out_ is not None and few.noise_std_held_out_ > 0
    Xt = few._validate_X(X).numpy()
    at_train = few._predictive_noise(Xt, (y - few._y_mean_) / few._y_scale_) * few._y_scale_
    level = math.sqrt(60 / 58) * max(at_train, few.noise_std_held_out_)  # 60 held out
    assert few.noise_std_ == pytest.approx(max(level, few.noise_std_covering_), rel=1e-12)


def test_a_level_estimated_from_m_rows_widens_to_its_student_t() -> None:
    from scipy import stats

    from svbnn._estimator_tasks import _estimated_level_factor

    # Exact values: sqrt(m / (m - 2)), the effective number of rows under weights, and
    # the cap at 3 rows.
    assert _estimated_level_factor(None, 16) == math.sqrt(16 / 14)
    assert _estimated_level_factor(np.full(16, 3.0), 16) == pytest.approx(math.sqrt(16 / 14))
    w = np.array([1.0] * 10 + [0.0] * 10)  # 10 effective rows of 20
    assert _estimated_level_factor(w, 20) == pytest.approx(math.sqrt(10 / 8))
    assert _estimated_level_factor(None, 3) == _estimated_level_factor(None, 1) == math.sqrt(3)
    assert 1 < _estimated_level_factor(None, 5000) < 1.0003
    # Why: Gaussian data, the level estimated from m = 16 held-out residuals. Its 95%
    # intervals with the estimate plugged in hold P(|t_16| <= 1.96) = 0.932 of new rows;
    # with the factor, P(|t_16| <= 1.96 * 1.069) = 0.948. 40,000 repeats: Monte Carlo sd
    # 0.0011, so 4 sd apart at most.
    rng = np.random.default_rng(0)
    m, reps = 16, 40_000
    level = np.sqrt((rng.standard_normal((reps, m)) ** 2).mean(1))
    new = np.abs(rng.standard_normal(reps))
    q = stats.norm.ppf(0.975)
    plug_in = np.mean(new <= q * level)
    widened = np.mean(new <= q * level * _estimated_level_factor(None, m))
    tol = 4 * math.sqrt(0.95 * 0.05 / reps)
    assert plug_in == pytest.approx(2 * stats.t.cdf(q, m) - 1, abs=tol)
    assert widened == pytest.approx(2 * stats.t.cdf(q * math.sqrt(m / (m - 2)), m) - 1, abs=tol)
    assert abs(widened - 0.95) < abs(plug_in - 0.95) - 3 * tol


def test_covering_noise_is_the_quantile_at_position_level_times_k_plus_1() -> None:
    from scipy import stats

    from svbnn._estimator_tasks import _covering_noise

    q = stats.norm.ppf(0.975)
    rng = np.random.default_rng(0)
    k = 59
    r = rng.standard_t(3, k)
    m, z = torch.zeros(k, dtype=torch.float64), r
    # Without the draws' spread: position 0.95 (k + 1) = 57, the 57th smallest |r| / q.
    s = _covering_noise(m, torch.zeros(k, dtype=torch.float64), z, None, 0.95)
    # (float rounding apart: the quantile q and sqrt(r^2 / q^2) against |r| / q)
    assert s == pytest.approx(np.sort(np.abs(r))[56] / q, rel=1e-12)
    inside = np.abs(r) <= q * s * (1 + 1e-12)
    assert inside.sum() == 57
    # The draws' variance v is counted in the interval, sqrt(v + s^2); a row inside on
    # v alone needs no noise (0), and equal weights are no weights.
    v = torch.full((k,), 0.5, dtype=torch.float64)
    got = _covering_noise(m, v, z, np.full(k, 2.0), 0.95)
    need = np.sqrt(np.clip(r**2 / q**2 - 0.5, 0, None))
    assert got == _covering_noise(m, v, z, None, 0.95)
    assert got == pytest.approx(np.sort(need)[56], rel=1e-12)
    # A row of weight 0 counts for nothing: its need, however large, is never the answer.
    w = np.ones(k)
    big = np.argmax(np.abs(r))
    w[big] = 0.0
    z2 = r.copy()
    z2[big] = 1e6
    assert _covering_noise(m, torch.zeros(k, dtype=torch.float64), z2, w, 0.5) < 1e5
    # Too few rows for the level: the largest need.
    top = _covering_noise(m[:5], torch.zeros(5, dtype=torch.float64), r[:5], None, 0.95)
    assert top == pytest.approx(np.abs(r[:5]).max() / q, rel=1e-12)
    # Between two positions, the straight line between their needs: 30 rows, position
    # 0.95 * 31 = 29.45, 0.45 of the way from the 29th smallest to the 30th.
    low = np.sort(np.abs(r[:30])) / q
    got = _covering_noise(m[:30], torch.zeros(30, dtype=torch.float64), r[:30], None, 0.95)
    assert got == pytest.approx(low[28] + 0.45 * (low[29] - low[28]), rel=1e-12)
    # Weights are positions: a row of weight 2 spans two.
    w2 = np.ones(30)
    w2[np.argsort(np.abs(r[:30]))[27]] = 2.0  # the 28th smallest, doubled
    twice = np.sort(np.append(np.abs(r[:30]), np.sort(np.abs(r[:30]))[27])) / q
    got = _covering_noise(m[:30], torch.zeros(30, dtype=torch.float64), r[:30], w2, 0.95)
    # Its 31 positions scaled to the 30 rows: position 29.45 of 30 is 29.45 * 31 / 30 =
    # 30.43 of the 31, between the 30th and 31st of the needs with that row twice.
    h = 0.95 * 31 * 31 / 30
    assert got == pytest.approx(twice[29] + (h - 30) * (twice[30] - twice[29]), rel=1e-12)


@pytest.mark.parametrize("k", [30, 100])
def test_covering_noise_holds_new_rows_at_the_level(k: int) -> None:
    # Student-t(3) residuals, whose tails the Gaussian likelihood's noise level
    # understates: over 1,000 draws of k held-out rows, the floor's intervals hold about
    # 0.95 of new rows on average (position 0.95 (k + 1): at 100 rows within 4 Monte
    # Carlo sds, 0.0007, of 0.95; at 30, where the line between the two largest needs
    # runs above these tails' quantiles, 0.958), the likelihood's noise alone fewer
    # (0.944 measured at 100). Split conformal's whole position, the largest need at 30
    # rows, holds 30 / 31 = 0.968.
    from scipy import stats

    from svbnn._estimator_tasks import _covering_noise, _likelihood_noise

    rng = np.random.default_rng(1)
    q = stats.norm.ppf(0.975)
    zero = torch.zeros(k, dtype=torch.float64)
    held_cover, fit_cover, whole = [], [], []
    for _ in range(1000):
        held, new = rng.standard_t(3, k), rng.standard_t(3, 2000)
        s_floor = _covering_noise(zero, zero, held, None, 0.95)
        s_fit = _likelihood_noise(zero, zero, held, None)
        s_whole = np.sort(np.abs(held))[math.ceil(0.95 * (k + 1)) - 1] / q
        held_cover.append(np.mean(np.abs(new) <= q * s_floor))
        fit_cover.append(np.mean(np.abs(new) <= q * s_fit))
        whole.append(np.mean(np.abs(new) <= q * s_whole))
    sd = np.std(held_cover) / math.sqrt(len(held_cover))
    if k == 100:
        assert abs(np.mean(held_cover) - 0.95) < 4 * sd
    else:  # at least 0.95, and nearer it than the whole position (0.968)
        assert 0.95 - 4 * sd < np.mean(held_cover) < np.mean(whole) - 4 * sd
    assert np.mean(fit_cover) < np.mean(held_cover) - 0.003


def test_known_noise_float_is_kept() -> None:
    X, y, _ = _sparse_problem(200, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg = SVBNNRegressor(noise_std=50.0, max_iter=5, random_state=0).fit(X, y)
    assert reg.noise_std_ == 50.0


def test_classifier_fits_and_is_not_majority() -> None:
    rng = np.random.default_rng(7)
    X = rng.standard_normal((400, 6))
    y = (X[:, 0] + X[:, 1] > 0.8).astype(int)  # unbalanced: 29% positives
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        clf = SVBNNClassifier(**FAST).fit(X, y)
    assert clf.score(X, y) > 0.9
    assert set(clf.selected_features_) >= {0, 1}


def test_median_model_export_warns_when_gates_unresolved() -> None:
    X, y, _ = _sparse_problem(200, 8)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        reg = SVBNNRegressor(max_iter=2, random_state=0).fit(X, y)
    with torch.no_grad():  # every gate at phi = 0.5: nothing resolved
        reg.module_.alpha.zero_()
    with pytest.warns(UserWarning, match="unresolved"):
        module, _ = reg.export_sparse()
    assert module is not None


def test_compile_failure_falls_back_to_eager_in_each_fit(monkeypatch, caplog) -> None:  # type: ignore[no-untyped-def]
    import logging

    import svbnn._estimator_base as E
    from svbnn import get_kernel_backend

    class FakeCompileError(RuntimeError):  # what inductor raises without a C++ compiler
        __module__ = "torch._inductor.exc"

    real_train = E.train
    seen = []

    def train(*args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(get_kernel_backend().value)
        if seen[-1] != "eager":
            raise FakeCompileError("no working C++ compiler found")
        return real_train(*args, **kwargs)

    monkeypatch.setattr(E, "train", train)
    X, y, _ = _sparse_problem(100, 9)
    before = get_kernel_backend()
    with caplog.at_level(logging.WARNING, logger="svbnn.estimators"):
        for _ in range(2):
            # A known noise level, no refit: one training per fit (no held-out noise fit).
            SVBNNRegressor(
                kernel_backend="compiled",
                noise_std=1.0,
                refit_kl_weight=None,
                max_iter=2,
                tol=None,
                random_state=0,
            ).fit(X, y)
    # Each fit tries to compile and falls back alone: no fit changes what the next does.
    assert seen == ["compiled", "eager", "compiled", "eager"]
    assert sum("could not be built" in r.getMessage() for r in caplog.records) == 2
    assert get_kernel_backend() == before  # the process-wide setting is untouched


@pytest.mark.skipif(not _native.available(), reason="no C++ compiler for the native loops")
def test_small_networks_fit_on_the_native_loops_without_compiling(
    native_steps: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    # auto fits a small network with the native backend: a Gumbel regressor's (its noise
    # learned) and a classifier's whole step on svbnn's loops, at any thread count, and
    # never torch.compile (30 s to minutes, more than such a fit). The regressor's default
    # local sampler has no native step: its layers run as one autograd node.
    def no_compile(*args: object, **kwargs: object) -> None:
        raise AssertionError("torch.compile was called")

    monkeypatch.setattr(torch, "compile", no_compile)
    draws: list[int] = []
    real_forward = _native.fused_forward

    def spy(*args: object) -> object:
        draws.append(1)
        return real_forward(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(_native, "fused_forward", spy)
    X, y, _ = _sparse_problem(300, 3)  # 10-50-1: 611 parameters
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        reg = SVBNNRegressor(
            max_iter=3,
            tol=None,
            random_state=0,
            sampler="gumbel",
            mean_function="zero",
            refit_kl_weight=None,  # the first fit alone
        )
        assert reg._backend_for(611) == "native"
        assert SVBNNRegressor(dtype="float64")._backend_for(611) == "eager"
        reg.fit(X, y)
        # 3 epochs of 3 minibatches of 128, then the noise level's held-out fit (fewer than
        # 1,000 rows): 1 epoch (0.3 of 3) of 2 minibatches of the 240 rows it fits
        assert len(native_steps) == 3 * 3 + 2
        SVBNNRegressor(max_iter=3, tol=None, random_state=0, refit_kl_weight=None).fit(X, y)
        assert len(native_steps) == 11  # the local sampler: no native step
        draws.clear()
        epochs: list[str] = []
        real_epoch = training.native_epochs
        monkeypatch.setattr(
            training, "native_epochs", lambda kind, *a: epochs.append(kind) or real_epoch(kind, *a)
        )
        # refit_kl_weight=None: the one fit alone (the default adds its held-out check).
        SVBNNClassifier(max_iter=3, tol=None, random_state=0, refit_kl_weight=None).fit(
            X, y > np.median(y)
        )
        # The first epoch's 3 steps draw natively; the other two epochs run whole in the
        # native loops, in one call (tests/test_native_epoch.py).
        assert len(native_steps) == 14 and len(draws) == 3
        assert epochs == ["categorical"]
    finally:
        torch.set_num_threads(threads)
    assert reg.history_.loss[-1] < reg.history_.loss[0]


def test_default_step_budget() -> None:
    from svbnn.convergence import default_max_steps

    # 4,000 steps on small tables, 160 epochs on larger ones, at most 20,000 steps (and at
    # least 20 epochs), always whole epochs.
    assert default_max_steps(100, 128) == 4000  # one full batch a step
    assert default_max_steps(750, 128) == 667 * 6
    assert default_max_steps(6144, 128) == 160 * 48
    assert default_max_steps(45_000, 128) == 57 * 352
    assert default_max_steps(1_000_000, 128) == 20 * 7813
    # min_steps: the floor of steps; the 160 epochs and the 20,000-step cap stay.
    assert default_max_steps(100, 128, 2000) == 2000
    assert default_max_steps(1500, 128, 2000) == 167 * 12  # 2,000 steps of 12 batches
    assert default_max_steps(2000, 128, 2000) == 160 * 16  # 160 epochs from 1,600 rows
    assert default_max_steps(45_000, 128, 2000) == default_max_steps(45_000, 128)
    with pytest.raises(ValueError, match="min_steps"):
        default_max_steps(100, 128, 0)
    # max_iter="auto" in epochs: that budget; under the local sampler (the regressor's
    # default) with half the floor of steps, so half the budget on a table under 1,600
    # rows and the same 160 epochs from 3,200 rows; at least 20 epochs.
    for n, full in ((100, 4000), (750, 667), (6144, 160), (45_000, 57), (1_000_000, 20)):
        assert SVBNNClassifier()._epoch_budget(n) == full
        assert SVBNNRegressor(sampler="gumbel")._epoch_budget(n) == full
        assert SVBNNRegressor()._epoch_budget(n) == (round(full / 2) if n < 1600 else full)
    assert SVBNNRegressor()._epoch_budget(100) == 2000
    assert SVBNNRegressor()._epoch_budget(1_000_000) == 20
    assert SVBNNRegressor()._epoch_budget(1500) == 167
    assert SVBNNRegressor()._epoch_budget(2800) == 160  # not 2,000 steps (91 epochs)
    assert SVBNNRegressor(max_iter=7)._epoch_budget(100) == 7
