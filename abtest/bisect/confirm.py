"""The culprit's confirmation against its parent: sequential, on new runs, as many as the effect needs.

The search stops on a culprit c whose posterior block probability reached the confidence; its runs at c and at
its parent p are what made the posterior pick the pair (p looked good, c bad): a selected sample. The
confirmation therefore asks the *new* runs (taken after the search stopped) whether p is on the good side and c on
the bad side, one sequential test per revision (Wald's SPRT):

    L(rev) = sum over the revision's new runs x of log f_claimed(x) - log f_other(x)

with f_k the predictive density of one run on side k: Student t with the pooled within-revision degrees of
freedom, centred on side k's level (the endpoint's mean) with scale sd * sqrt(1 + 1 / n_k) (sd: the pooled
within-revision spread; n_k: the endpoint's runs), the same model as the posterior's. A revision is settled when
L >= T = log(confidence / (1 - confidence)) (on its claimed side) or L <= -T (on the other side: not confirmed).
An endpoint needs no new runs (the endpoint phase established its side). Under a wrong culprit the test passes
with probability about 1 - confidence at most (Wald's bound), on top of the search's own error.

The number of new runs follows the effect in units of noise, d = |level_bad - level_good| / sd: one run carries
about d^2 / 2 of log-likelihood ratio on average, so a revision short of T by D gets ceil(D / (d^2 / 2)) runs in
the next visit (at least 1, at most `batch`): one run each where d >= ~2.5 (at 0.95), 2 per visit where d ~ 1.
Every revision gets >= MIN_NEW new runs (a lucky early split is re-measured), and culprit and parent >= 3 runs in
all, new and old (`CONFIRM_RUNS`), for the decision rule.

The verdict reuses every run: compare's decision rule (abtest.compare.verdict.decide) on all runs of parent vs
culprit must say regression (the min-effect and direction rules), the posterior from all runs must still name the
culprit at the confidence, and both sequential tests must have passed. The functions here are pure (the bisection
and bench/bisect_sim.py share them)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

CONFIRM_RUNS = 3  # runs (old and new) culprit and parent need for the decision rule
MIN_NEW = 1  # new runs each non-endpoint revision of the pair gets at least

CONFIRMED, REFUTED, MORE = "confirmed", "refuted", "more"


@dataclass(frozen=True)
class Levels:
    """The model's side levels and spread (model unit: the metric, or its logarithm for a gmean metric)."""

    good: float
    bad: float
    sd: float
    n_good: int
    n_bad: int
    dof: float

    @property
    def d(self) -> float:
        """The effect in units of the run-to-run spread."""
        return abs(self.bad - self.good) / self.sd if self.sd > 0 else math.inf


def levels_of(n: np.ndarray, s: np.ndarray, var: float, dof: float) -> Levels:
    """Levels from one history's per-revision run counts and sums (endpoints at 0 and -1) and the pooled
    variance / degrees of freedom (abtest.bisect.posterior.pooled_spread)."""
    return Levels(float(s[0] / n[0]), float(s[-1] / n[-1]), math.sqrt(float(var)), int(n[0]), int(n[-1]), float(dof))


def threshold(confidence: float) -> float:
    return math.log(confidence / (1 - confidence))


def log_lr(x, claimed_bad: bool, lv: Levels) -> float:
    """Sum over the runs x of log f_claimed(x) - log f_other(x) (Student t predictive per side)."""
    x = np.asarray(x, float)
    if x.size == 0:
        return 0.0
    if not lv.sd > 0:
        return math.inf if claimed_bad == (abs(x - lv.bad).max() < abs(x - lv.good).min()) else -math.inf

    def logf(mu: float, n_side: int) -> np.ndarray:
        scale = lv.sd * math.sqrt(1 + 1 / max(n_side, 1))
        z = (x - mu) / scale
        return -(lv.dof + 1) / 2 * np.log1p(z * z / lv.dof) - math.log(scale)

    good, bad = logf(lv.good, lv.n_good), logf(lv.bad, lv.n_bad)
    return float((bad - good).sum() if claimed_bad else (good - bad).sum())


@dataclass(frozen=True)
class Step:
    """The sequential confirmation's state after the runs so far: CONFIRMED / REFUTED / MORE, the log-LRs of
    parent (good) and culprit (bad) on their new runs, and the new runs to take next at parent and culprit."""

    status: str
    lr_parent: float
    lr_culprit: float
    more_parent: int
    more_culprit: int


def step(
    new_parent,
    new_culprit,
    total_parent: int,
    total_culprit: int,
    parent_is_endpoint: bool,
    culprit_is_endpoint: bool,
    lv: Levels,
    confidence: float,
    batch: int,
) -> Step:
    """One decision of the sequential test (the decision rule and the posterior are the caller's). new_*: the
    revision's runs taken since the confirmation started (model unit); total_*: all its runs."""
    t = threshold(confidence)
    lr_p = math.inf if parent_is_endpoint else log_lr(new_parent, False, lv)
    lr_c = math.inf if culprit_is_endpoint else log_lr(new_culprit, True, lv)
    if lr_p <= -t or lr_c <= -t:
        return Step(REFUTED, lr_p, lr_c, 0, 0)
    info = max(lv.d**2 / 2, 1e-9)  # mean log-LR of one run

    def more(lr: float, n_new: int, total: int, endpoint: bool) -> int:
        k = 0 if endpoint else max(0, MIN_NEW - n_new)
        if lr < t:
            k = max(k, min(batch, max(1, math.ceil((t - lr) / info))))
        return max(k, CONFIRM_RUNS - total)

    mp = more(lr_p, len(new_parent), total_parent, parent_is_endpoint)
    mc = more(lr_c, len(new_culprit), total_culprit, culprit_is_endpoint)
    return Step(MORE if mp or mc else CONFIRMED, lr_p, lr_c, mp, mc)
