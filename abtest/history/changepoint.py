"""Change points of one series (one value per build, in build order): E-divisive candidates, a deterministic
t-test, a minimum magnitude and a minimum segment length.

Algorithm (Matteson & James 2014 E-divisive for the candidates, as Apache Otava/Hunter; significance by a
t-test instead of the permutation test, as Otava and MongoDB moved to, so the same series always gives the
same answer):
1. Candidates. The series is cut into windows of `window` builds (half-overlapping). In each window the split
   that maximises the energy statistic Q(tau) = tau*m/(tau+m) * (2 E|X-Y| - E|X-X'| - E|Y-Y'|) is taken when the
   two sides differ at p < CANDIDATE_P, and each side is split again the same way (binary segmentation).
2. Pruning and placement. Over the whole series, each candidate is tested against its neighbours: the segment from the
   previous candidate to it against the segment from it to the next one. A candidate fails when
   p >= p_max, |delta| < min_change_pct, or a segment beside it is shorter than min_segment builds (the last
   segment, which ends at the newest build, may be as short as min_tail). The failing candidate with the
   largest p is dropped and the rest re-tested, until every candidate passes; each survivor is then moved to
   the maximum-likelihood position of a mean shift between its neighbours and the whole is re-checked.
The test is Student's two-sample t-test with pooled variance on the per-build values: the model is a shift
of the mean with the lab's noise the same on both sides, which also keeps the test usable on a 2-build tail.

Defaults and why:
- p_max = 0.001: Otava's default; 500-build series run ~500 implicit tests, so 0.05 would flag noise weekly.
- min_change_pct = 2.0 %: Perfherder's minimum change; under it a step is below a power lab's day-to-day
  repeatability (1-2 %); chromeperf uses 1 % with far more samples per point.
- min_segment = 3 builds: one odd build (a spike: thermal, a flaky run) must not open a change point
  (Otava PR #150); chromeperf requires 6 points, with one point per build; each build here already averages
  several iterations, so 3 builds are enough evidence.
- min_tail = 2 builds: the newest segment may be shorter so that CI hears of a step on the build after it
  (one build alone cannot be told from a spike).
- window = 50 builds: Otava's and chromeperf's window.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

CANDIDATE_P = 0.05  # liberal: candidates are pruned by the real test in step 2


@dataclass(frozen=True)
class Settings:
    """p_max: significance level; min_change_pct: smallest |relative change| in percent; min_segment /
    min_tail: builds per segment (interior / newest); window: builds per candidate window."""

    p_max: float = 0.001
    min_change_pct: float = 2.0
    min_segment: int = 3
    min_tail: int = 2
    window: int = 50


DEFAULTS = Settings()


@dataclass(frozen=True)
class Step:
    """A change point: `index` is the first build of the new segment (0-based in the series); mean_before /
    mean_after: the means of the segments beside it; delta_pct: relative change in percent (nan when
    mean_before is 0); p: t-test p-value."""

    index: int
    mean_before: float
    mean_after: float
    delta_pct: float
    p: float


def _pooled_t(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sided p of Student's t-test with pooled variance (1.0 when undefined: no residual degrees)."""
    if len(a) + len(b) < 3 or len(a) == 0 or len(b) == 0:
        return 1.0
    va = a.var(ddof=1) if len(a) > 1 else 0.0
    vb = b.var(ddof=1) if len(b) > 1 else 0.0
    df = len(a) + len(b) - 2
    sp2 = ((len(a) - 1) * va + (len(b) - 1) * vb) / df
    diff = b.mean() - a.mean()
    if sp2 <= 0:
        return 0.0 if diff != 0 else 1.0
    t = diff / np.sqrt(sp2 * (1 / len(a) + 1 / len(b)))
    return float(2 * stats.t.sf(abs(t), df))


def energy_split(x: np.ndarray, min_size: int = 2) -> int | None:
    """The split tau (first index of the right part) maximising the energy statistic, sides >= min_size."""
    n = len(x)
    if n < 2 * min_size:
        return None
    d = np.abs(x[:, None] - x[None, :])
    p = np.zeros((n + 1, n + 1))
    p[1:, 1:] = d.cumsum(0).cumsum(1)
    total = p[n, n]
    tau = np.arange(min_size, n - min_size + 1)
    s_ll = p[tau, tau]
    s_lr = p[tau, n] - s_ll
    s_rr = total - 2 * s_lr - s_ll
    m = n - tau
    q = tau * m / n * (2 * s_lr / (tau * m) - s_ll / (tau * (tau - 1)) - s_rr / (m * (m - 1)))
    return int(tau[int(np.argmax(q))])


def _candidates(x: np.ndarray, lo: int, hi: int, min_size: int, out: set[int]) -> None:
    tau = energy_split(x[lo:hi], min_size)
    if tau is None:
        return
    if _pooled_t(x[lo : lo + tau], x[lo + tau : hi]) >= CANDIDATE_P:
        return
    out.add(lo + tau)
    _candidates(x, lo, lo + tau, min_size, out)
    _candidates(x, lo + tau, hi, min_size, out)


def candidates(x: np.ndarray, s: Settings) -> list[int]:
    """Candidate split indices from binary energy segmentation in half-overlapping windows."""
    n = len(x)
    out: set[int] = set()
    w = max(s.window, 2 * s.min_segment + 2)
    starts = range(0, max(n - w, 0) + 1, max(w // 2, 1))
    ends = sorted({min(st + w, n) for st in starts} | {n})
    for st in starts:
        _candidates(x, st, min(st + w, n), s.min_tail, out)
    if n - w > 0 and (n - w) % max(w // 2, 1):
        _candidates(x, n - w, n, s.min_tail, out)  # the newest window, aligned to the end
    del ends
    return sorted(i for i in out if 0 < i < n)


def _assess(x: np.ndarray, cps: list[int], s: Settings) -> list[tuple[bool, Step]]:
    n = len(x)
    bounds = [0, *cps, n]
    out = []
    for k, i in enumerate(cps):
        a, b = x[bounds[k] : i], x[i : bounds[k + 2]]
        p = _pooled_t(a, b)
        ma, mb = float(a.mean()), float(b.mean())
        delta = (mb - ma) / abs(ma) * 100 if ma != 0 else float("nan")
        right_min = s.min_tail if bounds[k + 2] == n else s.min_segment
        ok = (
            p < s.p_max
            and len(a) >= s.min_segment
            and len(b) >= right_min
            and (abs(delta) >= s.min_change_pct if np.isfinite(delta) else mb != ma)
        )
        out.append((ok, Step(i, ma, mb, delta, p)))
    return out


def _refine(x: np.ndarray, cps: list[int], s: Settings) -> list[int]:
    """Each change point moved to the maximum-likelihood split of a mean shift between its neighbours
    (argmax of tau*m/n * (mean_right - mean_left)^2), keeping segment minimums."""
    out = list(cps)
    for k in range(len(out)):
        lo = out[k - 1] if k else 0
        hi = out[k + 1] if k + 1 < len(out) else len(x)
        seg = x[lo:hi]
        n = len(seg)
        tail = s.min_tail if hi == len(x) else s.min_segment
        tau = np.arange(s.min_segment, n - tail + 1)
        if len(tau) == 0:
            continue
        c = np.concatenate([[0.0], np.cumsum(seg)])
        diff = (c[n] - c[tau]) / (n - tau) - c[tau] / tau
        out[k] = lo + int(tau[int(np.argmax(tau * (n - tau) / n * diff**2))])
    return out


def change_points(values, settings: Settings = Settings()) -> list[Step]:
    """Change points of `values` (one number per build, oldest first). NaN values are not allowed."""
    x = np.asarray(values, dtype=float)
    if not np.isfinite(x).all():
        raise ValueError("change_points: the series has NaN or infinite values")
    cps = candidates(x, settings)
    while cps:
        assessed = _assess(x, cps, settings)
        failing = [
            (st.p, -abs(st.delta_pct) if np.isfinite(st.delta_pct) else 0.0, st.index) for ok, st in assessed if not ok
        ]
        if not failing:
            refined = _refine(x, cps, settings)
            if refined == cps:
                return [st for _, st in assessed]
            cps = sorted(set(refined))
            continue
        worst = max(failing)[2]
        cps.remove(worst)
    return []
