"""Descriptive statistics and two-sample tests for A/B iteration samples.

Every function takes plain numbers (one value per iteration, in the metric's unit) and returns plain numbers.
The tests are vectorised over rows so that simulations (thousands of A/B comparisons) run in milliseconds:
`welch_p(a, b)` and `mannwhitney_p(a, b)` accept arrays of shape (n,) or (R, n) and return a p-value per row.

Conventions:
  delta_pct = 100 * (mean(B) - mean(A)) / |mean(A)|    (percent of A; the seeds' "perc_diff")
  CV        = stdev / |mean|                            (sample stdev, ddof = 1; a fraction, printed as %)
"""

from __future__ import annotations

import functools
import math
from dataclasses import asdict, dataclass

import numpy as np
from scipy import special as sc

BOOTSTRAP_RESAMPLES = 4000
BOOTSTRAP_SEED = 20240229


@dataclass(frozen=True)
class Summary:
    """Descriptive statistics of one sample (units: the metric's unit; cv is a fraction).

    gmean is None unless every value is > 0 (a geometric mean of ratios/scores/latencies is meaningful only
    then). ci95_low/high: 95 % confidence interval of the mean (Student t), None when n < 2.
    """

    n: int
    mean: float
    median: float
    stdev: float | None
    cv: float | None
    gmean: float | None
    minimum: float
    maximum: float
    ci95_low: float | None
    ci95_high: float | None

    def to_json(self) -> dict:
        return {k: _json_num(v) for k, v in asdict(self).items()}


def _json_num(v):
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def describe(values) -> Summary:
    """Summary of a 1-D sample. NaNs must have been removed by the caller (they are an input error)."""
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError("describe() needs a non-empty 1-D sample")
    if not np.all(np.isfinite(x)):
        raise ValueError("describe() got NaN or infinite values; drop or report them first")
    n = int(x.size)
    big = float(np.max(np.abs(x)))
    scale = big if big > 1e100 else 1.0  # values near 1e308 would overflow the sums: compute on x / scale
    xs = x / scale
    mean = float(xs.mean()) * scale
    stdev = float(xs.std(ddof=1)) * scale if n >= 2 else None
    cv = (stdev / abs(mean)) if (stdev is not None and mean != 0) else None
    gmean = float(np.exp(np.mean(np.log(x)))) if np.all(x > 0) else None
    lo = hi = None
    if n >= 2:
        half = float(sc.stdtrit(n - 1, 0.975)) * stdev / math.sqrt(n)
        lo, hi = mean - half, mean + half
    return Summary(
        n=n,
        mean=mean,
        median=float(np.median(x)),
        stdev=stdev,
        cv=cv,
        gmean=gmean,
        minimum=float(x.min()),
        maximum=float(x.max()),
        ci95_low=lo,
        ci95_high=hi,
    )


def delta_pct(mean_a: float, mean_b: float) -> float | None:
    """Percent change of B vs A: 100 * (B - A) / |A|. None when A's mean is 0."""
    if mean_a == 0:
        return None
    return 100.0 * (mean_b - mean_a) / abs(mean_a)


def welch_p(a, b) -> np.ndarray:
    """Two-sided Welch's t-test p-value per row (unequal variances). NaN when a side has < 2 values or
    both sides have zero variance (identical constants)."""
    a, b = np.atleast_2d(np.asarray(a, float)), np.atleast_2d(np.asarray(b, float))
    if a.shape[1] < 2 or b.shape[1] < 2:
        return np.full(a.shape[0], np.nan)
    va, vb = a.var(axis=1, ddof=1) / a.shape[1], b.var(axis=1, ddof=1) / b.shape[1]
    se2 = va + vb
    diff = b.mean(axis=1) - a.mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = diff / np.sqrt(se2)
        df = se2**2 / (va**2 / (a.shape[1] - 1) + vb**2 / (b.shape[1] - 1))
    p = 2.0 * sc.stdtr(df, -np.abs(t))  # Student t survival function: cdf at -|t|
    # zero variance on both sides: identical means -> p = 1, different constants -> p = 0
    const = se2 == 0
    p = np.where(const, np.where(diff == 0, 1.0, 0.0), p)
    return p


def mannwhitney_p(a, b) -> np.ndarray:
    """Two-sided Mann-Whitney U p-value per row, as scipy.stats.mannwhitneyu(method="auto") computes it: the exact
    null distribution when a side has <= 8 values and no row has ties, else the normal approximation with tie
    correction and continuity correction. Computed here (ranks by comparison, `_mwu_exact_sf`) because importing
    scipy.stats costs ~1 s of every `abtest compare`; tests/test_stats.py checks it against scipy."""
    a, b = np.atleast_2d(np.asarray(a, float)), np.atleast_2d(np.asarray(b, float))
    n1, n2 = a.shape[1], b.shape[1]
    if n1 < 1 or n2 < 1:
        return np.full(a.shape[0], np.nan)
    ranks, tie_counts = _ranks(np.concatenate([a, b], axis=1))
    u1 = ranks[:, :n1].sum(axis=1) - n1 * (n1 + 1) / 2
    u = np.maximum(u1, n1 * n2 - u1)
    if (n1 > 8 and n2 > 8) or np.any(tie_counts > 1):
        n = n1 + n2
        tie_term = np.sum(tie_counts**2 - 1.0, axis=1)  # = sum over tie groups of t^3 - t
        sd = np.sqrt(n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1))))
        with np.errstate(divide="ignore", invalid="ignore"):
            z = (u - n1 * n2 / 2 - 0.5) / sd
        p = 2.0 * sc.ndtr(-z)
    else:
        p = 2.0 * _mwu_exact_sf(n1, n2)[np.rint(u).astype(np.int64)]
    return np.clip(p, 0.0, 1.0)


def _ranks(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Average ranks (1-based, ties share their mean rank) of each row of x (R, N), and per element the size of
    its tie group. Pairwise comparison, in row chunks of at most ~2e7 comparisons."""
    r_all, n = x.shape
    ranks, ties = np.empty_like(x), np.empty_like(x)
    step = max(1, int(2e7 // max(n * n, 1)))
    for i in range(0, r_all, step):
        c = x[i : i + step]
        less = (c[:, None, :] < c[:, :, None]).sum(axis=2)
        equal = (c[:, None, :] == c[:, :, None]).sum(axis=2)
        ranks[i : i + step] = less + (equal + 1) / 2
        ties[i : i + step] = equal
    return ranks, ties


@functools.lru_cache(maxsize=64)
def _mwu_exact_sf(n1: int, n2: int) -> np.ndarray:
    """P(U >= k) for k = 0 .. n1 n2 under the null (no ties): U's distribution by the recursion
    P_{m,n}(k) = m / (m + n) P_{m-1,n}(k - n) + n / (m + n) P_{m,n-1}(k) over the smaller side (<= 8 here)."""
    m, n = min(n1, n2), max(n1, n2)
    prev = [np.ones(1) for _ in range(n + 1)]  # prev[j]: distribution for (0, j): U = 0
    for i in range(1, m + 1):
        cur = [np.ones(1)]  # (i, 0): U = 0
        for j in range(1, n + 1):
            d = np.zeros(i * j + 1)
            d[j : j + prev[j].size] += i / (i + j) * prev[j]
            d[: cur[j - 1].size] += j / (i + j) * cur[j - 1]
            cur.append(d)
        prev = cur
    pmf = prev[n]
    return np.cumsum(pmf[::-1])[::-1]


def mannwhitney_min_p(n_a: int, n_b: int) -> float:
    """Smallest two-sided p-value the exact Mann-Whitney test can give for these sample sizes:
    2 / C(n_a + n_b, n_a) (complete separation). E.g. 3 vs 3 -> 0.1, 5 vs 5 -> 0.0079."""
    if n_a < 1 or n_b < 1:
        return 1.0
    log_comb = math.lgamma(n_a + n_b + 1) - math.lgamma(n_a + 1) - math.lgamma(n_b + 1)
    return min(1.0, 2.0 * math.exp(-log_comb))  # exp underflows to 0.0 for large n, never overflows


def welch_diff_ci(a, b, level: float) -> tuple[float, float] | None:
    """Welch (Satterthwaite) confidence interval of mean(B) - mean(A) in the values' unit; None when a
    side has fewer than 2 values."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 2:
        return None
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    diff = float(b.mean() - a.mean())
    if se == 0:
        return (diff, diff)
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = float(sc.stdtrit(df, 0.5 + level / 2)) * se
    return (diff - half, diff + half)


def welch_delta_ci_pct(a, b, level: float) -> tuple[float, float] | None:
    """Welch (Satterthwaite) confidence interval of mean(B) - mean(A), as percent of |mean(A)|.
    Used for the equivalence ("no change") decision. None when undefined."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 2 or a.mean() == 0:
        return None
    va, vb = a.var(ddof=1) / a.size, b.var(ddof=1) / b.size
    se = math.sqrt(va + vb)
    diff = b.mean() - a.mean()
    if se == 0:
        return (100 * diff / abs(a.mean()),) * 2
    df = (va + vb) ** 2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    half = float(sc.stdtrit(df, 0.5 + level / 2)) * se
    scale = 100.0 / abs(a.mean())
    return ((diff - half) * scale, (diff + half) * scale)


@functools.lru_cache(maxsize=64)
def _resample_indices(seed: int, resamples: int, na: int, nb: int) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap's resampling indices (A's, then B's, from one generator seeded with `seed`): they depend on
    the sizes only, so every metric of a comparison with the same iteration counts shares them (read-only)."""
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, na, (resamples, na))
    ib = rng.integers(0, nb, (resamples, nb))
    ia.flags.writeable = False
    ib.flags.writeable = False
    return ia, ib


def bootstrap_delta_ci_pct(
    a,
    b,
    *,
    level: float = 0.95,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    aggregation: str = "mean",
) -> tuple[float, float] | None:
    """Percentile bootstrap CI of delta_pct (B vs A), resampling each side independently with replacement.

    Seeded, so the same data always prints the same interval. Reported, not used for the verdict: with
    n <= 5 per side the percentile bootstrap is too narrow (it ignores the uncertainty of the variance).
    None when a side has fewer than 2 values or mean(A) resamples to 0.
    """
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.size < 2 or b.size < 2:
        return None
    gmean = aggregation == "gmean" and np.all(a > 0) and np.all(b > 0)
    if gmean:
        a, b = np.log(a), np.log(b)
    else:
        big = float(max(np.max(np.abs(a)), np.max(np.abs(b))))
        if big > 1e100:
            a, b = a / big, b / big
    ia, ib = _resample_indices(seed, resamples, a.size, b.size)
    ma, mb = a[ia], b[ib]
    if gmean:
        d = 100.0 * np.expm1(mb.mean(axis=1) - ma.mean(axis=1))
        lo, hi = np.quantile(d, [(1 - level) / 2, 1 - (1 - level) / 2])
        return float(lo), float(hi)
    if aggregation == "median":
        ma, mb = np.median(ma, axis=1), np.median(mb, axis=1)
    else:
        ma, mb = ma.mean(axis=1), mb.mean(axis=1)
    if np.any(ma == 0):
        return None
    d = 100.0 * (mb - ma) / np.abs(ma)
    tail = (1 - level) / 2
    lo, hi = np.quantile(d, [tail, 1 - tail])
    return float(lo), float(hi)


def t_test_power(n: int, d: float, *, alpha: float = 0.05, two_sided: bool = True) -> float:
    """Power (probability, 0..1) of the two-sample t-test with n per side (df = 2n - 2) against a standardised
    effect d = effect / sigma: noncentral t with noncentrality d * sqrt(n / 2). scipy.special's ufuncs (the
    functions behind scipy.stats' t and nct, without their per-call overhead): a few microseconds."""
    df = 2 * n - 2
    crit = sc.stdtrit(df, 1 - alpha / 2 if two_sided else 1 - alpha)
    nc = d * math.sqrt(n / 2)
    # the lower tail (rejecting in the wrong direction) is ~0 for a large nc, where scipy can return NaN for it
    lower = float(np.nan_to_num(sc.nctdtr(df, nc, -crit), nan=0.0)) if two_sided else 0.0
    return float(1.0 - sc.nctdtr(df, nc, crit)) + lower


def iterations_needed(
    cv: float | None,
    effect_pct: float,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    two_sided: bool = True,
    max_n: int = 1000,
) -> int | None:
    """Iterations per side for a two-sample t-test to detect `effect_pct` (percent of the mean) with the given
    power, for a metric with coefficient of variation `cv` (fraction): the smallest n whose noncentral-t power
    (`t_test_power`, df = 2n - 2, noncentrality = (e / cv) sqrt(n / 2)) reaches `power`. None when cv is unknown
    or the effect is 0; max_n when even that is not enough.

    Start from the normal approximation n0 = 2 ((z_a + z_power) / d)^2, bracket the answer by doubling steps
    around it and bisect on the exact power: O(log n) power evaluations (typically 3-5), not one per n."""
    if cv is None or not math.isfinite(cv) or effect_pct <= 0:
        return None
    if cv == 0:
        return 2
    d = (effect_pct / 100.0) / cv

    def ok(n: int) -> bool:
        return t_test_power(n, d, alpha=alpha, two_sided=two_sided) >= power

    z = sc.ndtri(1 - alpha / 2 if two_sided else 1 - alpha) + sc.ndtri(power)
    n0 = 2.0 * (z / d) ** 2 if math.isfinite(d) else 2.0
    guess = int(min(max(math.ceil(n0), 2), max_n))
    if ok(guess):  # answer in (lo, guess]: step down by doubling to a failing n (n = 1 counts as failing)
        hi, step, lo = guess, 1, 1
        while hi - step >= 2:
            if not ok(hi - step):
                lo = hi - step
                break
            hi, step = hi - step, step * 2
    else:  # answer above guess: step up by doubling until power is reached (or max_n fails)
        lo, step = guess, 1
        while True:
            hi = min(lo + step, max_n)
            if ok(hi):
                break
            if hi == max_n:
                return max_n
            lo, step = hi, step * 2
    while hi - lo > 1:  # invariant: power(lo) < target (or lo = 1), power(hi) >= target
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi
