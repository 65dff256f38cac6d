"""Statistics and verdict rule, checked by seeded simulation (A/A false positives, power) and against
textbook values computed independently (scipy's own one-sample calls, closed forms)."""

import math

import numpy as np
import pytest
from scipy import stats as sps

from abtest.compare import stats, verdict

R = 2000  # simulated comparisons per scenario (>= 1000 required)


def _directional_rate(a, b, lower_is_better=True, policy=verdict.Policy()):
    codes = verdict.directional_batch(a, b, lower_is_better, policy)
    return float(np.mean(codes != 0)), codes


@pytest.mark.parametrize("n", [3, 5, 8, 12])
def test_aa_false_positive_rate_normal(n):
    rng = np.random.default_rng(1000 + n)
    a = rng.normal(500.0, 10.0, (R, n))  # CV 2 %
    b = rng.normal(500.0, 10.0, (R, n))
    rate, _ = _directional_rate(a, b)
    assert rate <= 0.05, f"A/A regression-or-improvement rate {rate:.3f} at n={n}"


@pytest.mark.parametrize("n", [5, 10])
def test_aa_false_positive_rate_skewed_and_outliers(n):
    rng = np.random.default_rng(77 + n)
    # skewed (lognormal, CV ~ 30 %) and contaminated (10 % of iterations 1.3x: thermal throttling)
    a = rng.lognormal(3.0, 0.3, (R, n))
    b = rng.lognormal(3.0, 0.3, (R, n))
    assert _directional_rate(a, b)[0] <= 0.05
    a = rng.normal(100, 2, (R, n)) * np.where(rng.random((R, n)) < 0.1, 1.3, 1.0)
    b = rng.normal(100, 2, (R, n)) * np.where(rng.random((R, n)) < 0.1, 1.3, 1.0)
    assert _directional_rate(a, b)[0] <= 0.05


@pytest.mark.parametrize(
    "lower_is_better,shift,expected",
    [
        (True, +0.05, 1),  # power up 5 %: regression
        (True, -0.05, -1),  # power down 5 %: improvement
        (False, -0.05, 1),  # fps down 5 %: regression
        (False, +0.05, -1),  # fps up 5 %: improvement
    ],
)
def test_power_5pct_shift_cv2_n5(lower_is_better, shift, expected):
    rng = np.random.default_rng(5)
    a = rng.normal(100.0, 2.0, (R, 5))
    b = rng.normal(100.0 * (1 + shift), 2.0, (R, 5))
    codes = verdict.directional_batch(a, b, lower_is_better)
    detected = float(np.mean(codes == expected))
    assert detected >= 0.80, f"detected {detected:.3f}"
    assert np.mean(codes == -expected) == 0.0  # never the wrong direction


def test_batch_and_single_paths_agree():
    rng = np.random.default_rng(11)
    a = rng.normal(100, 2, (300, 5))
    b = rng.normal(103, 2, (300, 5))
    codes = verdict.directional_batch(a, b, True)
    for i in range(300):
        v = verdict.decide(a[i], b[i], True)
        expect = {1: verdict.REGRESSION, -1: verdict.IMPROVEMENT}.get(int(codes[i]))
        if expect:
            assert v.verdict == expect
        else:
            assert v.verdict in (verdict.NO_CHANGE, verdict.INCONCLUSIVE)


def test_aa_full_decide_no_change_needs_equivalence():
    rng = np.random.default_rng(3)
    # tight data (CV 0.2 %), many iterations: equivalence within +/-1 % is shown
    v = verdict.decide(rng.normal(100, 0.2, 10), rng.normal(100, 0.2, 10), True)
    assert v.verdict == verdict.NO_CHANGE and v.need_more_iterations is None
    # noisy data (CV 5 %), 3 iterations: cannot claim anything -> inconclusive with an estimate
    v = verdict.decide(rng.normal(100, 5, 3), rng.normal(100, 5, 3), True)
    assert v.verdict == verdict.INCONCLUSIVE
    assert v.need_more_iterations and v.need_more_iterations >= 10
    assert f"need ~{v.need_more_iterations} more iterations" in v.text


def test_iterations_needed_matches_noncentral_t():
    # power of the two-sample t-test at the returned n reaches the target, and n - 1 does not
    for cv, e in ((0.02, 5.0), (0.05, 3.0), (0.10, 5.0)):
        n = stats.iterations_needed(cv, e, power=0.8)
        for m, ok in ((n, True), (n - 1, False)):
            df, nc = 2 * m - 2, (e / 100 / cv) * math.sqrt(m / 2)
            crit = sps.t.ppf(0.975, df)
            pw = sps.nct.sf(crit, df, nc) + sps.nct.cdf(-crit, df, nc)
            assert (pw >= 0.8) == ok, (cv, e, m, pw)
    assert stats.iterations_needed(None, 5.0) is None and stats.iterations_needed(0.02, 0.0) is None


@pytest.mark.parametrize("cv,shift_pct", [(0.02, 2.0), (0.05, 3.0), (0.01, 1.5)])
def test_need_more_iterations_estimate_delivers(cv, shift_pct):
    """'inconclusive (need ~N more iterations)': running the suggested total really detects the shift about
    80 % of the time under this rule (simulated)."""
    rng = np.random.default_rng(int(cv * 1000 + shift_pct * 10))
    a0 = 100 * (1 + cv * np.array([-1.0, 0.0, 1.0]))
    v = verdict.decide(a0, a0 * (1 + shift_pct / 100), True)  # 3 vs 3 at this CV and shift: inconclusive
    assert v.verdict == verdict.INCONCLUSIVE and v.need_more_iterations
    n = 3 + v.need_more_iterations
    a = rng.normal(100, 100 * cv, (R, n))
    b = rng.normal(100 * (1 + shift_pct / 100), 100 * cv, (R, n))
    assert np.mean(verdict.directional_batch(a, b, True) == 1) >= 0.78


def test_significant_but_tiny_is_not_a_regression():
    a = np.array([100.0, 100.01, 99.99, 100.0, 100.02, 99.98, 100.0, 100.01])
    b = a + 0.3  # +0.3 %, hugely significant, below the 1 % minimum effect
    v = verdict.decide(a, b, True)
    assert v.significant and v.verdict == verdict.NO_CHANGE


def test_single_iteration_is_insufficient():
    v = verdict.decide([1.0], [2.0, 2.1, 2.2], True)
    assert v.verdict == verdict.INSUFFICIENT and "n = 1 vs 3" in v.text


def test_rank_test_cannot_decide_at_3v3():
    assert stats.mannwhitney_min_p(3, 3) == pytest.approx(0.1)
    assert stats.mannwhitney_min_p(5, 5) == pytest.approx(2 / 252)
    v = verdict.decide([100, 101, 99], [110, 111, 109], True)
    assert v.decision_test == "welch" and v.verdict == verdict.REGRESSION
    v = verdict.decide([100, 101, 99, 100.5, 102], [110, 111, 109, 110.5, 108], True)  # no ties: exact
    assert v.decision_test == "welch+mannwhitney" and v.p_mannwhitney == pytest.approx(2 / 252)


def test_welch_and_describe_match_scipy():
    rng = np.random.default_rng(9)
    a, b = rng.normal(10, 1, 7), rng.normal(11, 2, 6)
    assert stats.welch_p(a, b)[0] == pytest.approx(sps.ttest_ind(a, b, equal_var=False).pvalue)
    s = stats.describe(a)
    assert s.stdev == pytest.approx(np.std(a, ddof=1))
    assert s.gmean == pytest.approx(math.exp(np.mean(np.log(a))))
    assert stats.describe([-1.0, 2.0]).gmean is None


def test_bootstrap_ci_is_seeded_and_brackets_delta():
    a, b = [913.0, 915.1, 912.2, 914.0, 913.7], [720.1, 721.0, 719.8, 720.6, 720.5]
    ci1 = stats.bootstrap_delta_ci_pct(a, b)
    ci2 = stats.bootstrap_delta_ci_pct(a, b)
    assert ci1 == ci2
    d = stats.delta_pct(np.mean(a), np.mean(b))
    assert ci1[0] < d < ci1[1]


def test_delta_pct_seed_value():
    assert round(stats.delta_pct(913.6, 720.4), 2) == -21.15


def test_bootstrap_indices_shared_across_metrics_give_the_unshared_numbers():
    """The resampling indices are cached per (seed, resamples, n A, n B): a second metric of the same sizes gets
    the interval a fresh generator would give (the previous implementation), and the cached arrays are read-only."""
    rng = np.random.default_rng(stats.BOOTSTRAP_SEED)
    a, b = np.array([1.0, 1.1, 0.9, 1.05]), np.array([1.2, 1.3, 1.15, 1.25, 1.22])
    ma = a[rng.integers(0, 4, (stats.BOOTSTRAP_RESAMPLES, 4))].mean(axis=1)
    mb = b[rng.integers(0, 5, (stats.BOOTSTRAP_RESAMPLES, 5))].mean(axis=1)
    expected = tuple(np.quantile(100 * (mb - ma) / np.abs(ma), [0.025, 0.975]))
    stats.bootstrap_delta_ci_pct([5.0, 6.0, 7.0, 8.0], [1.0, 2.0, 3.0, 4.0, 5.0])  # another metric, same sizes
    assert stats.bootstrap_delta_ci_pct(a, b) == pytest.approx(expected, abs=0, rel=0)
    ia, _ = stats._resample_indices(stats.BOOTSTRAP_SEED, stats.BOOTSTRAP_RESAMPLES, 4, 5)
    assert not ia.flags.writeable
