"""Verdicts: regression / improvement / no change / inconclusive, from two samples of one metric.

The rule (documented in docs/compare.md, tested by simulation in tests/test_stats.py):

1. Not enough data: fewer than `min_iterations` (default 2) values on a side -> "insufficient data".
2. Significance (`Policy.significant`): a difference is significant when BOTH
     - Welch's t-test two-sided p < alpha, and
     - the Mann-Whitney U two-sided p < alpha,
   at every sample size where the rank test can reach p < alpha. Where it cannot (its smallest possible p is
   2 / C(n_a + n_b, n_a): 0.1 for 3 vs 3, 0.057 for 3 vs 4), `Policy.small_n` says what happens, and the
   footer of every report says so for the sizes it shows (`Policy.describe`): WELCH_ALONE (default) — Welch's t
   decides alone, `decision_test` = "welch"; NO_VERDICT — no regression/improvement, `decision_test` = "none".
   Why: at the 3..10 iterations per side kernel A/B runs afford, Welch's t has the most power (5 % shift at
   CV 2 %, n = 5: 92.0 % vs 85.4 % for the exact rank test, whose p-values at 5 vs 5 are 0.0079, 0.016,
   0.032, 0.056 ...). Requiring the rank test to agree stops one outlier iteration (a thermal throttle, a
   background job) from producing a verdict on its own, and keeps the A/A false-positive rate below alpha
   (2.5 % at n = 5) at a small cost in power (84.4 % at n = 5). Welch's t alone at 3 vs 3 keeps the A/A rate
   below alpha too (measured: bench/decision_rule.py, table in docs/compare.md).
3. Size: a significant difference is a regression/improvement only if |delta_pct| >= min_effect_pct
   (default 1 %). Direction follows lower_is_better (power, latency, jank: lower is better; fps, score:
   higher is better). Metrics without a preferred direction (lower_is_better None) say "changed".
4. Otherwise "no change" is claimed only when the data show equivalence: the 90 % Welch confidence interval
   of delta_pct lies inside +/- min_effect_pct (two one-sided tests at alpha = 5 %). Anything else is
   "inconclusive (need ~N more iterations)", N from a noncentral-t power calculation (85 % power of the
   t-test, so that this rule reaches about 80 %; at least 4 per side) with the pooled CV: to detect the
   observed delta when it is >= min_effect_pct, else to show equivalence.

The bootstrap CI of the delta is reported next to the verdict but does not decide it: with 5 iterations per
side the percentile bootstrap is too narrow (A/A false-positive rate 12.5 % at n = 5 if it were used as the
test; `python -m abtest.compare.simulate`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from abtest.compare import stats

REGRESSION = "regression"
IMPROVEMENT = "improvement"
NO_CHANGE = "no change"
INCONCLUSIVE = "inconclusive"
CHANGED = "changed"
INSUFFICIENT = "insufficient data"
MAX_MORE_ITERATIONS = 999
NEED_POWER = 0.85  # t-test power targeted by the "need ~N more iterations" estimate


WELCH_ALONE = "welch"  # Policy.small_n: Welch's t decides alone where the rank test cannot reach alpha
NO_VERDICT = "none"  # Policy.small_n: no regression/improvement where the rank test cannot reach alpha
BOTH_TESTS = "welch+mannwhitney"


@dataclass(frozen=True)
class Policy:
    """The decision rule: one object that decides (`significant`, used by `decide` and `significant_batch`) and
    states itself as applied (`describe`, used by every report footer and docs/compare.md).

    alpha: significance level (two-sided). min_effect_pct: smallest change (percent of A's aggregate) worth
    calling a regression/improvement. min_iterations: per side. small_n: what happens at sample sizes where
    Mann-Whitney U cannot reach p < alpha (its smallest two-sided p, 2 / C(n_a + n_b, n_a), is >= alpha:
    3 vs 3, 3 vs 4, 2 vs anything at alpha 0.05): WELCH_ALONE (Welch's t decides alone) or NO_VERDICT."""

    alpha: float = 0.05
    min_effect_pct: float = 1.0
    min_iterations: int = 2
    small_n: str = WELCH_ALONE

    def __post_init__(self) -> None:
        if self.small_n not in (WELCH_ALONE, NO_VERDICT):
            raise ValueError(f"Policy.small_n must be {WELCH_ALONE!r} or {NO_VERDICT!r}, not {self.small_n!r}")

    def rank_test_can_decide(self, n_a: int, n_b: int) -> bool:
        """True when Mann-Whitney U can give p < alpha at these sample sizes."""
        return stats.mannwhitney_min_p(n_a, n_b) < self.alpha

    def decision_test(self, n_a: int, n_b: int) -> str:
        """Which tests decide at n_a vs n_b: BOTH_TESTS, WELCH_ALONE, or NO_VERDICT (no test can)."""
        return BOTH_TESTS if self.rank_test_can_decide(n_a, n_b) else self.small_n

    def significant(self, p_welch: np.ndarray, p_mannwhitney: np.ndarray, n_a: int, n_b: int) -> np.ndarray:
        """Rule 2, per row: is the difference significant, given both p-values at sample sizes n_a vs n_b."""
        test = self.decision_test(n_a, n_b)
        p_welch = np.asarray(p_welch, float)
        if test == NO_VERDICT:
            return np.zeros(p_welch.shape, bool)
        sig = p_welch < self.alpha
        return sig & (np.asarray(p_mannwhitney, float) < self.alpha) if test == BOTH_TESTS else sig

    def min_rank_n(self) -> int:
        """Smallest n per side (n vs n) at which Mann-Whitney U can reach p < alpha."""
        n = 2
        while not self.rank_test_can_decide(n, n):
            n += 1
        return n

    def describe(self, sizes=None) -> str:
        """The rule as applied, one sentence for a report footer. sizes: the (n_a, n_b) pairs the verdicts
        were decided at (None: the general rule, as docs/compare.md states it)."""
        base = (
            f"a regression/improvement needs p < {self.alpha:g} from Welch's t and Mann-Whitney U both, "
            f"and |delta| >= {self.min_effect_pct:g} %"
        )
        then = "Welch's t decides alone" if self.small_n == WELCH_ALONE else "no regression/improvement is called"
        if sizes is None:
            return (
                f"{base}; where the sample sizes make p < {self.alpha:g} impossible for the rank test (its "
                f"smallest p, 2 / C(nA + nB, nA), is 0.1 at 3 vs 3), {then}"
            )
        decided = sorted({(a, b) for a, b in sizes if min(a, b) >= self.min_iterations})
        small = [s for s in decided if not self.rank_test_can_decide(*s)]
        if not small:
            return base
        where = ", ".join(f"{a} vs {b}" for a, b in small[:4]) + (" ..." if len(small) > 4 else "")
        worst = min(stats.mannwhitney_min_p(a, b) for a, b in small)
        clause = (
            f"at {where} iterations Mann-Whitney U cannot reach p < {self.alpha:g}, its smallest p being "
            f"{worst:.2g}, so {then}"
        )
        if len(small) == len(decided) and self.small_n == WELCH_ALONE:
            return (
                f"a regression/improvement needs p < {self.alpha:g} from Welch's t and |delta| >= "
                f"{self.min_effect_pct:g} % ({clause})"
            )
        return f"{base}; {clause}"


@dataclass(frozen=True)
class Verdict:
    """Outcome for one metric. verdict: one of the constants above. text: human form, e.g.
    "inconclusive (need ~4 more iterations)". need_more_iterations: per side, only for inconclusive.
    decision_test: Policy.decision_test at these n: "welch+mannwhitney", "welch" (the rank test could not reach
    alpha, Welch's t decided alone) or "none" (Policy.small_n = NO_VERDICT at such n)."""

    verdict: str
    text: str
    significant: bool
    delta_pct: float | None
    p_welch: float | None
    p_mannwhitney: float | None
    decision_test: str
    equivalence_ci90_pct: tuple[float, float] | None
    need_more_iterations: int | None
    aggregation: str = "mean"
    note: str = ""


def significant_batch(a: np.ndarray, b: np.ndarray, policy: Policy) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows of A (R, n_a) vs rows of B (R, n_b): (significant, p_welch, p_mannwhitney) per row, rule 2 as
    `policy.significant` applies it."""
    a, b = np.atleast_2d(np.asarray(a, float)), np.atleast_2d(np.asarray(b, float))
    pw = stats.welch_p(a, b)
    pm = stats.mannwhitney_p(a, b)
    return policy.significant(pw, pm, a.shape[1], b.shape[1]), pw, pm


def directional_batch(a, b, lower_is_better: bool, policy: Policy = Policy()) -> np.ndarray:
    """Vectorised rules 2-3 for simulations: per row +1 = regression, -1 = improvement, 0 = neither.
    Same code path as `decide` for the significance and size rules."""
    a, b = np.atleast_2d(np.asarray(a, float)), np.atleast_2d(np.asarray(b, float))
    sig, _, _ = significant_batch(a, b, policy)
    ma, mb = a.mean(axis=1), b.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = 100.0 * (mb - ma) / np.abs(ma)
    big = sig & (np.abs(d) >= policy.min_effect_pct)
    worse = d > 0 if lower_is_better else d < 0
    return np.where(big, np.where(worse, 1, -1), 0)


def scale_free(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """a and b divided by their largest magnitude when it is huge or tiny (values near 1e308 would overflow a
    mean or a variance). Every test and percent change here is invariant to a common scale."""
    big = float(max(np.max(np.abs(a)) if a.size else 0.0, np.max(np.abs(b)) if b.size else 0.0))
    if big > 1e100 or 0 < big < 1e-100:
        return a / big, b / big
    return a, b


def aggregate(x, aggregation: str) -> float | None:
    """The value a table prints for one side: mean, gmean (None unless every value > 0) or median."""
    x = np.asarray(x, float)
    if x.size == 0:
        return None
    if aggregation == "gmean":
        return float(np.exp(np.mean(np.log(x)))) if np.all(x > 0) else None
    if aggregation == "median":
        return float(np.median(x))
    big = float(np.max(np.abs(x)))
    return float(np.mean(x / big) * big) if big > 1e100 else float(np.mean(x))


def decide(a, b, lower_is_better: bool | None, policy: Policy = Policy(), aggregation: str = "mean") -> Verdict:
    """The verdict for one metric: A (baseline) and B samples, NaN-free 1-D sequences.

    aggregation (the metric's declaration): "mean" — tests and delta on the values; "gmean" — on their
    logarithms (delta = ratio of geometric means - 1; defined only when every value is > 0, otherwise the
    arithmetic means decide and `note` says why); "median" — delta between medians, tests as for "mean".
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    n_a, n_b = a.size, b.size
    note = ""
    if aggregation == "gmean" and n_a and n_b and not (np.all(a > 0) and np.all(b > 0)):
        zeros = int(np.sum(a <= 0) + np.sum(b <= 0))
        note = f"gmean not defined ({zeros} of {n_a + n_b} iteration values are <= 0): decided on arithmetic means"
        aggregation = "mean"
    if aggregation == "gmean" and n_a and n_b:
        xa, xb = np.log(a), np.log(b)
        d = 100.0 * math.expm1(float(xb.mean() - xa.mean()))
    else:
        xa, xb = scale_free(a, b)
        if aggregation == "median":
            d = stats.delta_pct(float(np.median(xa)), float(np.median(xb))) if n_a and n_b else None
        else:
            d = stats.delta_pct(float(xa.mean()), float(xb.mean())) if n_a and n_b else None
    if n_a < policy.min_iterations or n_b < policy.min_iterations:
        return Verdict(
            INSUFFICIENT,
            f"insufficient data (n = {n_a} vs {n_b}; need >= {policy.min_iterations} per side)",
            False,
            d,
            None,
            None,
            "none",
            None,
            max(policy.min_iterations - min(n_a, n_b), 1),
            aggregation,
            note,
        )
    sig_arr, pw_arr, pm_arr = significant_batch(xa, xb, policy)
    sig, pw, pm = bool(sig_arr[0]), float(pw_arr[0]), float(pm_arr[0])
    test = policy.decision_test(n_a, n_b)
    level = 1 - 2 * policy.alpha
    if aggregation == "gmean":
        lo_hi = stats.welch_diff_ci(xa, xb, level)
        eq_ci = None if lo_hi is None else (100.0 * math.expm1(lo_hi[0]), 100.0 * math.expm1(lo_hi[1]))
    else:
        eq_ci = stats.welch_delta_ci_pct(xa, xb, level=level)

    def out(v, text, need=None):
        return Verdict(v, text, sig, d, _finite(pw), _finite(pm), test, eq_ci, need, aggregation, note)

    if d is None:  # A's aggregate is 0: no percent scale; judge on significance and direction only
        if sig:
            if lower_is_better is None:
                return out(CHANGED, "changed (A's mean is 0, no percent change)")
            worse = (xb.mean() > xa.mean()) if lower_is_better else (xb.mean() < xa.mean())
            return out(
                REGRESSION if worse else IMPROVEMENT,
                f"{REGRESSION if worse else IMPROVEMENT} (A's mean is 0: a significant change from 0 "
                "exceeds any percent threshold)",
            )
        both_zero = not np.any(a) and not np.any(b)
        return out(
            NO_CHANGE if both_zero else INCONCLUSIVE, "no change" if both_zero else "inconclusive (A's mean is 0)"
        )
    if sig and abs(d) >= policy.min_effect_pct:
        if lower_is_better is None:
            return out(CHANGED, f"changed ({'higher' if d > 0 else 'lower'})")
        worse = d > 0 if lower_is_better else d < 0
        return out(REGRESSION if worse else IMPROVEMENT, REGRESSION if worse else IMPROVEMENT)
    if eq_ci is not None and -policy.min_effect_pct < eq_ci[0] and eq_ci[1] < policy.min_effect_pct:
        return out(NO_CHANGE, NO_CHANGE)
    need = _more_iterations(xa, xb, d, policy, log_scale=(aggregation == "gmean"))
    if need is None:
        text = "inconclusive"
    elif need >= MAX_MORE_ITERATIONS:
        text = (
            f"inconclusive (need > {MAX_MORE_ITERATIONS} more iterations: the difference is too small for this noise)"
        )
    else:
        text = f"inconclusive (need ~{need} more iterations)"
    return out(INCONCLUSIVE, text, need)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _more_iterations(a: np.ndarray, b: np.ndarray, d: float, policy: Policy, *, log_scale: bool = False) -> int | None:
    """Extra iterations per side (rule 4), capped at MAX_MORE_ITERATIONS. On a log scale (gmean) the spread
    of the logarithms is the coefficient of variation and effects are log-ratios."""
    if log_scale:
        sd_a = float(a.std(ddof=1)) if a.size > 1 else 0.0
        sd_b = float(b.std(ddof=1)) if b.size > 1 else 0.0
        cv = math.sqrt((sd_a**2 + sd_b**2) / 2)

        def to_eff(pct):  # percent change -> percent on the log scale
            return 100.0 * abs(math.log1p(pct / 100.0)) if pct > -100 else math.inf
    else:
        sa, sb = stats.describe(a), stats.describe(b)
        if not sa.mean:
            return None
        cva = (sa.stdev or 0.0) / abs(sa.mean)
        cvb = (sb.stdev or 0.0) / abs(sa.mean)  # B's spread on A's scale
        cv = math.sqrt((cva**2 + cvb**2) / 2)

        def to_eff(pct):
            return abs(pct)

    # Target 85 % power of the t-test: the rule (rank test must agree, minimum effect) then reaches about
    # 80 % (simulated in tests/test_stats.py); at least policy.min_rank_n() per side (4 at alpha 0.05) so that
    # the rank test can agree.
    if abs(d) >= policy.min_effect_pct:
        n = stats.iterations_needed(cv, to_eff(d), alpha=policy.alpha, power=NEED_POWER)
    else:
        margin = to_eff(policy.min_effect_pct) - to_eff(d)
        n = stats.iterations_needed(cv, margin, alpha=policy.alpha, power=NEED_POWER, two_sided=False)
    if n is None:
        return None
    n = max(n, policy.min_rank_n())
    return min(MAX_MORE_ITERATIONS, max(1, n - min(a.size, b.size)))
