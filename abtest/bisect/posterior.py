"""The culprit posterior: where in a revision range did a metric step from the good level to the bad one.

Revisions are positions 0..N of the range: 0 is the known-good endpoint, N the known-bad one. The culprit is the
first bad position c (1 <= c <= N). Model: every run of a revision before c is drawn from the good side's
distribution, every run of a revision at or after c from the bad side's; both sides share the within-revision
spread. Evidence is kept as per-revision sufficient statistics (run count, sum, sum of squares, in the metric's
unit), so every run ever taken at any revision counts, whatever step took it.

Likelihood of one revision's runs (n of them, mean m) being on side k: the mean m under a Student t with the
pooled within-revision degrees of freedom, centred on side k's mean (from the endpoints' runs) with the scale
sqrt(v / n + v / n_k) (v: pooled within-revision variance; the second term is the uncertainty of the side's mean).
The within-revision scatter is the same under both sides and cancels. Posterior over c = uniform prior x the
product over measured revisions; computed with cumulative sums, O(N) per update.

Untestable revisions (a build or boot failed) carry no evidence, so a culprit among them cannot be told apart from
the next testable revision: the posterior is reported per *block* (the testable revision plus the untestable ones
right before it), as `git bisect` reports "one of these commits".

Every function takes arrays with any leading batch shape (H, R) (R = N + 1 revisions), so the simulation bench
(bench/bisect_sim.py) runs thousands of histories through the same code as `abtest bisect`.
"""

from __future__ import annotations

from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

MIN_SPREAD = 1e-12  # relative floor of the pooled sd (all runs identical: a step is then exact)


@dataclass
class Evidence:
    """Per-revision sufficient statistics, arrays of shape (..., R): runs, sum and sum of squares of the values
    (the metric's unit), and `untestable` (bool: a build/boot failed or the revision was given up)."""

    n: np.ndarray
    s: np.ndarray
    ss: np.ndarray
    untestable: np.ndarray

    @classmethod
    def empty(cls, revisions: int, batch: tuple[int, ...] = ()) -> Evidence:
        shape = (*batch, revisions)
        return cls(np.zeros(shape, np.int64), np.zeros(shape), np.zeros(shape), np.zeros(shape, bool))

    @classmethod
    def from_runs(cls, runs: list[list[float]], untestable: list[bool] | None = None) -> Evidence:
        """One history: runs[i] = the values measured at position i."""
        ev = cls.empty(len(runs))
        for i, xs in enumerate(runs):
            x = np.asarray(xs, float)
            ev.n[i], ev.s[i], ev.ss[i] = x.size, x.sum(), (x * x).sum()
        if untestable is not None:
            ev.untestable[:] = untestable
        return ev


@dataclass
class Posterior:
    """The culprit posterior of a batch of histories (arrays (..., R); position 0 always has probability 0).

    prob: P(culprit = c). block: P(culprit in the block represented by testable position j), stored at j.
    culprit: the most probable block's testable position (..., ). confidence: its block probability.
    cdf: P(culprit <= m) = P(position m is bad). mu_good / mu_bad / sd: the model's side means and pooled sd
    (metric unit)."""

    prob: np.ndarray
    block: np.ndarray
    culprit: np.ndarray
    confidence: np.ndarray
    cdf: np.ndarray
    mu_good: np.ndarray
    mu_bad: np.ndarray
    sd: np.ndarray


def pooled_spread(ev: Evidence) -> tuple[np.ndarray, np.ndarray]:
    """Pooled within-revision variance (metric unit squared) and its degrees of freedom, shape (...,).

    Only revisions with >= 2 runs contribute; the variance does not depend on which side a revision is on."""
    n = ev.n.astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        within = np.where(n >= 2, ev.ss - np.where(n > 0, ev.s * ev.s / np.maximum(n, 1), 0.0), 0.0)
    within = np.maximum(within, 0.0)
    dof = np.maximum(n - 1, 0).sum(axis=-1)
    var = within.sum(axis=-1) / np.maximum(dof, 1)
    scale = np.abs(ev.s[..., 0] / np.maximum(ev.n[..., 0], 1)) + np.abs(ev.s[..., -1] / np.maximum(ev.n[..., -1], 1))
    var = np.maximum(var, (MIN_SPREAD * np.maximum(scale, 1e-300)) ** 2)
    return var, np.maximum(dof, 1).astype(float)


def posterior(ev: Evidence) -> Posterior:
    """The culprit posterior from all runs so far (uniform prior over positions 1..N); needs >= 1 run at both
    endpoints. See `change_point_logp` for the likelihood."""
    n = ev.n.astype(float)
    if np.any(n[..., 0] < 1) or np.any(n[..., -1] < 1):
        raise ValueError("the posterior needs runs at both endpoints")
    logp = change_point_logp(ev)
    logp -= logp.max(axis=-1, keepdims=True)
    prob = np.exp(logp)
    prob /= prob.sum(axis=-1, keepdims=True)
    cdf = np.cumsum(prob, axis=-1)
    block = block_mass(prob, ev.untestable)
    culprit = block.argmax(axis=-1)
    confidence = np.take_along_axis(block, culprit[..., None], axis=-1)[..., 0]
    var, _ = pooled_spread(ev)
    return Posterior(
        prob, block, culprit, confidence, cdf, ev.s[..., 0] / n[..., 0], ev.s[..., -1] / n[..., -1], np.sqrt(var)
    )


def change_point_logp(ev: Evidence) -> np.ndarray:
    """log P(data | culprit = c) + const for c = 1..N (-inf at c = 0), shape (..., R).

    Normal runs, one mean for the good side and one for the bad side, a common variance; both means (flat prior)
    and the variance (Jeffreys prior) are integrated out, so no plug-in estimate is trusted more than the data
    allow and every run, wherever it was taken, informs both sides:
        log p(c) = -(n_tot - 2) / 2 * log(SS_good(c) + SS_bad(c)) - 1/2 * log(n_good(c) * n_bad(c))
    with SS the sum of squared deviations from each side's mean and n its run count."""
    n = ev.n.astype(float)
    ref = ev.s[..., :1] / np.maximum(n[..., :1], 1)  # centre on the good endpoint's mean (numerics)
    s = ev.s - n * ref
    ss = np.maximum(ev.ss - 2 * ref * ev.s + n * ref * ref, 0.0)
    cn, cs, css = np.cumsum(n, -1), np.cumsum(s, -1), np.cumsum(ss, -1)
    tn, ts, tss = cn[..., -1:], cs[..., -1:], css[..., -1:]
    ng, sg, ssg = cn[..., :-1], cs[..., :-1], css[..., :-1]  # good side of culprit c = 1..N: positions < c
    nb, sb, ssb = tn - ng, ts - sg, tss - ssg
    with np.errstate(invalid="ignore", divide="ignore"):
        dev = np.maximum(ssg - sg * sg / np.maximum(ng, 1), 0.0) + np.maximum(ssb - sb * sb / np.maximum(nb, 1), 0.0)
    scale = np.maximum(tss, 1e-300)
    dev = np.maximum(dev, MIN_SPREAD * scale)
    logp = np.full(n.shape, -np.inf)
    logp[..., 1:] = -(tn - 2) / 2 * np.log(dev) - 0.5 * np.log(np.maximum(ng, 1) * np.maximum(nb, 1))
    return logp


def block_mass(prob: np.ndarray, untestable: np.ndarray) -> np.ndarray:
    """Probability per block, stored at the block's testable position (0 elsewhere): a culprit among untestable
    positions is indistinguishable from the first testable position after them (the bad endpoint is testable)."""
    r = prob.shape[-1]
    idx = np.broadcast_to(np.arange(r), prob.shape)
    testable = ~untestable.copy()
    testable[..., -1] = True
    rep = np.where(testable, idx, r - 1)
    rep = np.flip(np.minimum.accumulate(np.flip(rep, -1), axis=-1), -1)  # next testable position >= c
    out = np.zeros_like(prob)
    flat_rows = np.arange(int(np.prod(prob.shape[:-1], dtype=np.int64)))[:, None]
    np.add.at(out.reshape(-1, r), (flat_rows, rep.reshape(-1, r)), prob.reshape(-1, r))
    return out


def parent_of(untestable: np.ndarray, culprit: np.ndarray) -> np.ndarray:
    """The last testable position before `culprit` (0, the good endpoint, when there is none), shape (...,)."""
    r = untestable.shape[-1]
    idx = np.broadcast_to(np.arange(r), untestable.shape)
    before = (idx < culprit[..., None]) & (~untestable | (idx == 0))
    return np.where(before, idx, 0).max(axis=-1)


def block_members(untestable: np.ndarray, culprit: int) -> list[int]:
    """One history: the positions the culprit block stands for (untestable ones right before it, then it)."""
    out = [int(culprit)]
    j = int(culprit) - 1
    while j > 0 and untestable[j]:
        out.insert(0, j)
        j -= 1
    return out


@dataclass(frozen=True)
class SearchRule:
    """How the posterior search spends runs. confidence: stop when the culprit block has this probability.
    batch: runs per visit of a revision, at most (`visit_runs`: fewer where one run tells the sides apart; all
    `batch` when adaptive_visits is False). confirm_runs: runs the culprit and its parent need at least before the
    search stops (abtest bisect passes 1: its confirmation brings the two to 3 + 3 itself, with new runs).
    per_revision_cap: a revision with this many runs is not measured again (the search
    treats it as skipped from then on; its runs still count). stuck_margin: when no eligible position has
    P(bad) within 0.5 +/- (0.5 - stuck_margin), the endpoint with fewer runs is measured (up to twice the cap)."""

    confidence: float = 0.95
    batch: int = 2
    confirm_runs: int = 3
    per_revision_cap: int = 40
    stuck_margin: float = 0.05
    adaptive_visits: bool = True


def visit_runs(post: Posterior, rule: SearchRule) -> np.ndarray:
    """Runs to take at the next visit, per history (shape (...,)): the fewest whose mean falls on the wrong side of
    the midpoint between the two levels with probability at most 1 - confidence, i.e. k >= (2 z / d)^2 with
    d = |mu_bad - mu_good| / sd (the effect in units of noise) and z the normal quantile of the confidence; at
    least 1, at most `rule.batch`. At 0.95 one run where d >= 3.3, `rule.batch` (2) where the effect is nearer the
    noise; at 0.99 one run where d >= 4.7."""
    full = np.full(np.shape(post.culprit), rule.batch, dtype=np.int64)
    if not rule.adaptive_visits:
        return full
    z = NormalDist().inv_cdf(rule.confidence)
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.abs(post.mu_bad - post.mu_good) / post.sd
        k = np.ceil((2 * z / d) ** 2)
    k = np.where(np.isfinite(k), k, rule.batch)
    return np.clip(k, 1, rule.batch).astype(np.int64)


def next_query(ev: Evidence, post: Posterior, rule: SearchRule) -> tuple[np.ndarray, np.ndarray]:
    """(position to measure next, done) per history.

    done: the culprit block reached `rule.confidence` and the culprit and its parent have `confirm_runs` runs.
    Otherwise, when the confidence is reached, the culprit or its parent (whichever has fewer runs); else the
    eligible position (1..N-1, testable, under the per-revision cap) that splits the posterior mass most evenly:
    |P(culprit <= m) - 0.5| smallest, ties to the position with fewer runs; when no such position is left between
    the likely culprits (all at the cap), or when an endpoint has fewer runs than some interior revision (the side
    levels must stay at least as sharp as any one revision's), the endpoint with fewer runs. -1 when nothing is
    eligible."""
    r = ev.n.shape[-1]
    parent = parent_of(ev.untestable, post.culprit)
    n_c = np.take_along_axis(ev.n, post.culprit[..., None], -1)[..., 0]
    n_p = np.take_along_axis(ev.n, parent[..., None], -1)[..., 0]
    sure = post.confidence >= rule.confidence
    done = sure & (n_c >= rule.confirm_runs) & (n_p >= rule.confirm_runs)
    idx = np.broadcast_to(np.arange(r), ev.n.shape)
    eligible = (idx > 0) & (idx < r - 1) & ~ev.untestable & (ev.n < rule.per_revision_cap)
    score = np.abs(post.cdf - 0.5) + 1e-9 * ev.n
    score = np.where(eligible, score, np.inf)
    split = score.argmin(axis=-1)
    best = np.take_along_axis(score, split[..., None], -1)[..., 0]
    # no eligible position left where the culprit may be (they reached the cap): sharpen a side's level at the
    # endpoint with fewer runs instead (under twice the cap)
    end = np.where(ev.n[..., 0] <= ev.n[..., -1], 0, r - 1)
    end_ok = np.take_along_axis(ev.n, end[..., None], -1)[..., 0] < 2 * rule.per_revision_cap
    interior_max = ev.n[..., 1:-1].max(axis=-1) if r > 2 else np.zeros_like(ev.n[..., 0])
    lagging = np.minimum(ev.n[..., 0], ev.n[..., -1]) < interior_max  # side levels no sharper than a revision
    stuck = ~(best < 0.5 - rule.stuck_margin) | lagging
    split = np.where(stuck & end_ok, end, np.where(np.isfinite(best), split, -1))
    need_c, need_p = n_c < rule.confirm_runs, n_p < rule.confirm_runs
    confirm = np.where(need_c, post.culprit, parent)
    confirm_ok = (need_c | need_p) & (confirm > 0) & (confirm < r - 1)
    nxt = np.where(sure & confirm_ok, confirm, split)
    return nxt, done


def classic_next(lo: np.ndarray, hi: np.ndarray, untestable: np.ndarray) -> np.ndarray:
    """Classic bisection: the testable position nearest the middle of (lo, hi) exclusive, -1 when none is left
    (then hi is the culprit, with the untestable positions between lo and hi as the other candidates)."""
    r = untestable.shape[-1]
    idx = np.broadcast_to(np.arange(r), untestable.shape)
    inside = (idx > lo[..., None]) & (idx < hi[..., None]) & ~untestable
    mid = (lo + hi) / 2.0
    dist = np.where(inside, np.abs(idx - mid[..., None]) + 1e-3 * (idx > mid[..., None]), np.inf)
    best = dist.argmin(axis=-1)
    return np.where(np.isfinite(np.take_along_axis(dist, best[..., None], -1)[..., 0]), best, -1)
