"""Simulated bisections of a power regression: accuracy and runs spent, posterior search vs classic bisection.

    .venv/bin/python bench/bisect_sim.py            # 1,000 histories per setting (the table of docs/bisect.md)
    .venv/bin/python bench/bisect_sim.py --histories 100 --json
    .venv/bin/python bench/bisect_sim.py --table after.json [before.json]   # the markdown table of a --json output

Each history: a range of N commits (positions 0..N, 0 known good, N known bad) with one culprit drawn uniformly
from 1..N; every run of a revision is base x (1 + effect if at/after the culprit) x (1 + CV x normal noise);
each interior revision's build is broken with probability 5 % (untestable: "skip"). A history is a success
when the reported culprit block (the testable revision plus the untestable ones right before it, as `git
bisect` reports "one of these commits") contains the true culprit.

Strategies, all vectorised over the histories (numpy):
- posterior: `abtest bisect`'s default, the same code (abtest.bisect.posterior: posterior, next_query,
  SearchRule): endpoints first, interleaved, 4 + 4 runs then 2 more each until compare's decision rule (rules 2-3,
  `directional_batch`) calls a regression in the metric's direction (at most 40 each; otherwise the history
  fails: nothing to bisect); then 2 runs per visit at the revision that splits the posterior mass, until the
  culprit block has 95 % (total budget 400 runs per history); then the confirmation as Bisector.confirm does it
  (abtest.bisect.confirm): new runs at culprit and parent (>= 1 each, as many as the effect in units of noise
  needs) until the sequential test on them settles both sides, the decision rule (`decide`) on all their runs
  (>= 3 + 3) and the posterior; an unconfirmed culprit that the posterior no longer holds at 95 % is searched
  again (3 rounds at most). `--confirmation fixed` / `search-runs`: the previous confirmations. Failures are
  broken down by cause (--json: fail_endpoints, fail_budget, fail_stuck, fail_wrong); confirm_runs: the runs
  the confirmation took.
- classic n=k: plain bisection with k runs per step and k runs per endpoint, a revision called bad when its mean
  is past the midpoint of the endpoints' means (a broken build: the nearest testable revision, like `git bisect
  skip`).
Runs: every run spent, endpoints included. Builds: revisions visited (each is a build and a boot).
Prints one row per setting; the run time is printed at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from abtest.bisect import confirm as C  # noqa: E402
from abtest.bisect.posterior import (  # noqa: E402
    Evidence,
    SearchRule,
    classic_next,
    next_query,
    parent_of,
    pooled_spread,
    posterior,
    visit_runs,
)
from abtest.bisect.search import CONFIRM_RUNS, SEARCH_ROUNDS  # noqa: E402
from abtest.compare.verdict import INCONCLUSIVE, REGRESSION, Policy, decide, directional_batch  # noqa: E402

BASE_MW = 1000.0
BROKEN = 0.05
ENDPOINT_START, ENDPOINT_STEP, ENDPOINT_CAP = 4, 2, 40
MAX_RUNS = 400
# the confirmation: "sequential" (abtest.bisect.search.Bisector.confirm), "fixed" (the previous version: the
# decision rule on >= 3 + 3 new runs), "search-runs" (the first version: the rule on all runs, >= 3 + 3)
CONFIRMATION = "sequential"


class History:
    """H simulated ranges of N commits: culprit positions, broken builds, a run generator."""

    def __init__(self, n_commits: int, effect: float, cv: float, histories: int, rng: np.random.Generator):
        self.N, self.effect, self.cv, self.rng = n_commits, effect, cv, rng
        self.culprit = rng.integers(1, n_commits + 1, histories)
        self.broken = rng.random((histories, n_commits + 1)) < BROKEN
        self.broken[:, 0] = self.broken[:, -1] = False

    def runs(self, rows: np.ndarray, pos: np.ndarray, k: int) -> np.ndarray:
        """k runs at pos (per row of `rows`), mW."""
        level = BASE_MW * (1 + self.effect * (pos >= self.culprit[rows]))
        return level[:, None] * (1 + self.cv * self.rng.standard_normal((rows.size, k)))

    def correct(self, reported: np.ndarray, untestable: np.ndarray) -> np.ndarray:
        """The reported block (last testable position before `reported`, reported] holds the culprit."""
        parent = parent_of(untestable, reported)
        return (reported >= self.culprit) & (parent < self.culprit)


def endpoints(h: History, policy: Policy) -> tuple[Evidence, np.ndarray]:
    """Endpoint phase: interleaved runs until the decision rule says regression (or the cap). Returns the
    evidence (endpoint runs) and which histories confirmed the regression."""
    H, R = h.culprit.size, h.N + 1
    rows = np.arange(H)
    good = h.runs(rows, np.zeros(H, int), ENDPOINT_CAP)
    bad = h.runs(rows, np.full(H, h.N), ENDPOINT_CAP)
    n_used = np.full(H, ENDPOINT_CAP)
    confirmed = np.zeros(H, bool)
    open_ = np.ones(H, bool)
    for n in range(ENDPOINT_START, ENDPOINT_CAP + 1, ENDPOINT_STEP):
        idx = np.flatnonzero(open_)
        if idx.size == 0:
            break
        verdict = directional_batch(good[idx, :n], bad[idx, :n], lower_is_better=True, policy=policy)
        hit = verdict == 1
        confirmed[idx[hit]] = True
        n_used[idx[hit]] = n
        open_[idx[hit]] = False
    ev = Evidence.empty(R, (H,))
    for side, pos in ((good, 0), (bad, h.N)):
        mask = np.arange(ENDPOINT_CAP)[None, :] < n_used[:, None]
        x = np.where(mask, side, 0.0)
        ev.n[:, pos] = n_used
        ev.s[:, pos] = x.sum(axis=1)
        ev.ss[:, pos] = (x * x).sum(axis=1)
    h.endpoint_runs = [[row[:k] for row, k in zip(side.tolist(), n_used.tolist())] for side in (good, bad)]
    return ev, confirmed


def run_posterior(h: History, rule: SearchRule, policy: Policy) -> dict:
    """`abtest bisect`'s posterior mode (abtest.bisect.search.Bisector.run): search, then confirm the culprit
    against its parent with the decision rule; when that does not confirm it and the confirmation's runs moved
    the posterior off it, search again (SEARCH_ROUNDS rounds at most)."""
    H = h.culprit.size
    ev, confirmed = endpoints(h, policy)
    raw = [{0: list(h.endpoint_runs[0][i]), h.N: list(h.endpoint_runs[1][i])} for i in range(H)]
    builds = np.full(H, 2)
    reported = np.full(H, h.N)
    # 0 stopped confident, 1 endpoints not confirmed, 2 budget, 3 nothing left to measure
    why = np.where(confirmed, 0, 1)
    culprit_confirmed = np.zeros(H, bool)
    confirm_runs = np.zeros(H)  # runs the confirmation(s) took
    rows = np.flatnonzero(confirmed)
    for round_ in range(SEARCH_ROUNDS):
        rows = _search(h, ev, raw, rows, rule, builds, reported, why)
        rows = rows[why[rows] == 0]  # the budget or the range ran out: no confirmation (the tool finishes)
        again = []
        for i in rows:
            before = ev.n[i].sum()
            ok = _confirm(h, ev, raw[i], int(i), int(reported[i]), rule, policy)
            confirm_runs[i] += ev.n[i].sum() - before
            culprit_confirmed[i] = ok
            if ok or round_ == SEARCH_ROUNDS - 1:
                continue
            sub = Evidence(ev.n[i : i + 1], ev.s[i : i + 1], ev.ss[i : i + 1], ev.untestable[i : i + 1])
            post = posterior(sub)
            if not (int(post.culprit[0]) == reported[i] and float(post.confidence[0]) >= rule.confidence):
                again.append(i)
        rows = np.asarray(again, int)
        if rows.size == 0:
            break
    correct = confirmed & h.correct(reported, ev.untestable)
    h.reported, h.why, h.evidence = reported, why, ev  # for a closer look (tests, diagnosis)
    return {
        "accuracy": float(correct.mean()),
        "runs": float(ev.n.sum(axis=1).mean()),
        "builds": float(builds.mean()),
        "endpoints_confirmed": float(confirmed.mean()),
        "culprit_confirmed": float(culprit_confirmed.mean()),
        "confirm_runs": float(confirm_runs.mean()),  # of all runs, those the culprit's confirmation took
        # failures by cause (fractions of all histories): the endpoints not confirmed; the budget ran out with
        # the wrong culprit; nothing left to measure with the wrong culprit; the search stopped (confidence
        # reached, confirmation done) on the wrong culprit
        "fail_endpoints": float((why == 1).mean()),
        "fail_budget": float(((why == 2) & ~correct).mean()),
        "fail_stuck": float(((why == 3) & ~correct).mean()),
        "fail_wrong": float(((why == 0) & confirmed & ~correct).mean()),
    }


def _search(h, ev, raw, rows, rule, builds, reported, why) -> np.ndarray:
    """The posterior search for the histories `rows` until each is done, out of budget (why 2) or out of
    revisions (why 3); returns the rows searched."""
    searched = rows
    active = np.zeros(h.culprit.size, bool)
    active[rows] = True
    while active.any():
        rows = np.flatnonzero(active)
        sub = Evidence(ev.n[rows], ev.s[rows], ev.ss[rows], ev.untestable[rows])
        post = posterior(sub)
        reported[rows] = post.culprit
        nxt, done = next_query(sub, post, rule)
        over = sub.n.sum(axis=1) >= MAX_RUNS
        stop = done | (nxt < 0) | over
        why[rows[~done & (nxt < 0)]] = 3
        why[rows[~done & (nxt >= 0) & over]] = 2
        active[rows[stop]] = False
        go = ~stop
        rows, nxt = rows[go], nxt[go]
        if rows.size == 0:
            break
        first_visit = ev.n[rows, nxt] == 0
        builds[rows] += first_visit
        broken = h.broken[rows, nxt]
        ev.untestable[rows[broken], nxt[broken]] = True
        ok = ~broken
        r2, p2 = rows[ok], nxt[ok]
        k = visit_runs(post, rule)[go][ok]  # runs per visit: fewer where one run tells the sides apart
        for kk in np.unique(k):
            sel = k == kk
            _add(ev, raw, r2[sel], p2[sel], h.runs(r2[sel], p2[sel], int(kk)))
    return searched


def _add(ev: Evidence, raw: list, rows: np.ndarray, pos: np.ndarray, x: np.ndarray) -> None:
    ev.n[rows, pos] += x.shape[1]
    ev.s[rows, pos] += x.sum(axis=1)
    ev.ss[rows, pos] += (x * x).sum(axis=1)
    for i, p, xs in zip(rows.tolist(), pos.tolist(), x.tolist()):
        raw[i].setdefault(p, []).extend(xs)


def _confirm(h, ev, raw_i, i, culprit, rule, policy) -> bool:
    """Bisector.confirm for history i: the sequential test (abtest.bisect.confirm.step) on the new runs at
    parent and culprit, then the decision rule on all their runs and the posterior from all runs. True when
    confirmed. The other CONFIRMATION modes: `_confirm_fixed`."""
    if CONFIRMATION != "sequential":
        return _confirm_fixed(h, ev, raw_i, i, culprit, rule, policy)
    parent = int(parent_of(ev.untestable[i], np.array(culprit)))
    skip = {p: len(raw_i.get(p, [])) for p in (parent, culprit)}
    while True:
        sub = Evidence(ev.n[i : i + 1], ev.s[i : i + 1], ev.ss[i : i + 1], ev.untestable[i : i + 1])
        var, dof = pooled_spread(sub)
        lv = C.levels_of(ev.n[i], ev.s[i], float(var[0]), float(dof[0]))
        a, b = raw_i.get(parent, []), raw_i.get(culprit, [])
        s = C.step(
            a[skip[parent] :],
            b[skip[culprit] :],
            len(a),
            len(b),
            parent == 0,
            culprit == h.N,
            lv,
            rule.confidence,
            rule.batch,
        )
        new = max(len(a) - skip[parent], len(b) - skip[culprit])
        capped = new >= rule.per_revision_cap or ev.n[i].sum() >= MAX_RUNS
        if s.status != C.MORE or capped:
            if s.status == C.REFUTED:
                return False
            v = decide(a, b, True, policy)
            post = posterior(sub)
            same = int(post.culprit[0]) == culprit and float(post.confidence[0]) >= rule.confidence
            if s.status == C.CONFIRMED and v.verdict == REGRESSION and same:
                return True
            if capped or v.verdict != INCONCLUSIVE or not same:
                return False
            more = {parent: rule.batch, culprit: rule.batch}
        else:
            more = {parent: s.more_parent, culprit: s.more_culprit}
        for p, k in more.items():
            if k > 0:
                _take(h, ev, raw_i, i, p, k)


def _take(h, ev, raw_i, i, p, k) -> None:
    x = h.runs(np.array([i]), np.array([p]), k)
    ev.n[i, p] += k
    ev.s[i, p] += x.sum()
    ev.ss[i, p] += (x * x).sum()
    raw_i.setdefault(p, []).extend(x[0].tolist())


def _confirm_fixed(h, ev, raw_i, i, culprit, rule, policy) -> bool:
    """The previous versions of Bisector.confirm for history i: culprit vs parent, >= 3 + 3 runs, `batch` more
    each until the decision rule says anything but inconclusive, or the per-revision cap, or the budget. True
    when it says regression. "fixed": the verdict on the runs taken for it only; "search-runs": on all runs.
    (The parent has runs already: the search does not stop before the culprit and its parent have 3 each.)"""
    parent = int(parent_of(ev.untestable[i], np.array(culprit)))
    fresh = CONFIRMATION == "fixed"
    skip = {p: len(raw_i.get(p, [])) if fresh else 0 for p in (parent, culprit)}
    while True:
        a, b = raw_i.get(parent, [])[skip[parent] :], raw_i.get(culprit, [])[skip[culprit] :]
        n = min(len(a), len(b))
        if n >= CONFIRM_RUNS:
            v = decide(a, b, True, policy)
            if v.verdict != INCONCLUSIVE or n >= rule.per_revision_cap or ev.n[i].sum() >= MAX_RUNS:
                return v.verdict == REGRESSION
        target = max(CONFIRM_RUNS, n + rule.batch)
        for p in (parent, culprit):
            k = target - len(raw_i.get(p, [])) + skip[p]
            if k > 0:
                _take(h, ev, raw_i, i, p, k)


def run_classic(h: History, n: int) -> dict:
    H = h.culprit.size
    rows = np.arange(H)
    thr = (h.runs(rows, np.zeros(H, int), n).mean(axis=1) + h.runs(rows, np.full(H, h.N), n).mean(axis=1)) / 2
    lo, hi = np.zeros(H, int), np.full(H, h.N)
    untestable = np.zeros_like(h.broken)
    runs, builds = np.full(H, 2 * n), np.full(H, 2)
    while True:
        m = classic_next(lo, hi, untestable)
        act = np.flatnonzero(m >= 0)
        if act.size == 0:
            break
        p = m[act]
        builds[act] += 1
        broken = h.broken[act, p]
        untestable[act[broken], p[broken]] = True
        a2, p2 = act[~broken], p[~broken]
        bad = h.runs(a2, p2, n).mean(axis=1) > thr[a2]
        runs[a2] += n
        hi[a2[bad]] = p2[bad]
        lo[a2[~bad]] = p2[~bad]
    correct = (lo < h.culprit) & (h.culprit <= hi)
    return {"accuracy": float(correct.mean()), "runs": float(runs.mean()), "builds": float(builds.mean())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--histories", type=int, default=1000)
    ap.add_argument("--commits", type=int, nargs="+", default=[64, 512])
    ap.add_argument("--effects", type=float, nargs="+", default=[2, 5, 10], help="percent")
    ap.add_argument("--cvs", type=float, nargs="+", default=[1, 2, 5, 10], help="percent")
    ap.add_argument("--classic-n", type=int, nargs="+", default=[1, 3, 5, 10, 20, 40])
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=20261128)
    ap.add_argument("--json", action="store_true")
    ap.add_argument(
        "--table",
        nargs="+",
        metavar="JSON",
        help="no simulation: print the markdown table of docs/bisect.md from a --json output (a second --json "
        "output, e.g. of --confirmation fixed, adds its accuracy, runs and confirmation runs as 'before')",
    )
    ap.add_argument(
        "--confirmation",
        choices=["sequential", "fixed", "search-runs"],
        default="sequential",
        help="sequential: abtest bisect's (default); fixed: the previous version's, the decision rule on >= 3 + 3 "
        "new runs; search-runs: the first version's, the rule on all runs of culprit and parent",
    )
    ap.add_argument(
        "--fixed-visits",
        action="store_true",
        help="the search takes `batch` (2) runs at every visit (the previous version); default: fewer where one "
        "run tells the sides apart (abtest.bisect.posterior.visit_runs)",
    )
    args = ap.parse_args(argv)
    if args.table:
        docs = [json.loads(Path(f).read_text()) for f in args.table]
        print(markdown_table(docs[0]["rows"], docs[1]["rows"] if len(docs) > 1 else None))
        return 0
    global CONFIRMATION
    CONFIRMATION = args.confirmation
    # the sequential confirmation brings culprit and parent to 3 runs itself; the earlier ones had the search do it
    rule = SearchRule(
        confidence=args.confidence,
        confirm_runs=1 if CONFIRMATION == "sequential" else CONFIRM_RUNS,
        adaptive_visits=not args.fixed_visits,
    )
    policy = Policy(min_effect_pct=1.0)
    t0 = time.monotonic()
    rows = []
    for n_commits in args.commits:
        for effect in args.effects:
            for cv in args.cvs:
                rng = np.random.default_rng([args.seed, n_commits, int(effect * 10), int(cv * 10)])
                h = History(n_commits, effect / 100, cv / 100, args.histories, rng)
                row = {
                    "commits": n_commits,
                    "effect_pct": effect,
                    "cv_pct": cv,
                    "posterior": run_posterior(h, rule, policy),
                }
                for k in args.classic_n:
                    row[f"classic_n{k}"] = run_classic(h, k)
                rows.append(row)
                if not args.json:
                    _print_row(row, args.classic_n, header=len(rows) == 1)
    elapsed = time.monotonic() - t0
    if args.json:
        doc = {"rows": rows, "seconds": round(elapsed, 1), "histories": args.histories, "seed": args.seed}
        doc.update(confidence=args.confidence, confirmation=args.confirmation)
        print(json.dumps(doc))
    else:
        print(
            f"{args.histories} histories per setting, {BROKEN:.0%} broken builds, confidence {args.confidence}; "
            f"{elapsed:.1f} s"
        )
    return 0


def equal_accuracy(row: dict, classic_n: list[int]) -> tuple[int, dict] | None:
    """The classic run with the fewest runs per step whose accuracy is at least the posterior search's (within one
    point); None when no n reaches it."""
    target = row["posterior"]["accuracy"] - 0.01
    for k in sorted(classic_n):
        if row[f"classic_n{k}"]["accuracy"] >= target:
            return k, row[f"classic_n{k}"]
    return None


def markdown_table(rows: list[dict], before: list[dict] | None = None) -> str:
    """The table of docs/bisect.md: per setting the posterior search's accuracy, runs, runs of the culprit's
    confirmation, builds and how often the culprit was confirmed; `before` (rows of the same settings) adds its
    accuracy / runs / confirmation runs; classic n=1 and n=3 (accuracy / runs) and classic at equal accuracy."""
    classic_n = sorted(int(k.removeprefix("classic_n")) for k in rows[0] if k.startswith("classic_n"))
    head = ["commits", "effect", "CV", "accuracy", "runs", "confirmation runs", "builds", "culprit confirmed"]
    if before:
        head += ["before: accuracy / runs / confirmation runs"]
    head += [f"classic n={k}" for k in classic_n if k in (1, 3)] + ["classic at equal accuracy"]
    out = ["| " + " | ".join(head) + " |", "|" + "---:|" * (len(head) - 1) + "---|"]
    for i, row in enumerate(rows):
        p = row["posterior"]
        cells = [str(row["commits"]), f"{row['effect_pct']:g}%", f"{row['cv_pct']:g}%", f"{p['accuracy']:.1%}"]
        cells += [f"{p['runs']:.1f}", f"{p.get('confirm_runs', float('nan')):.1f}", f"{p['builds']:.1f}"]
        cells.append(f"{p['culprit_confirmed']:.1%}")
        if before:
            b = before[i]
            assert (b["commits"], b["effect_pct"], b["cv_pct"]) == (row["commits"], row["effect_pct"], row["cv_pct"])
            q = b["posterior"]
            cells.append(f"{q['accuracy']:.1%} / {q['runs']:.1f} / {q.get('confirm_runs', float('nan')):.1f}")
        for k in classic_n:
            if k in (1, 3):
                c = row[f"classic_n{k}"]
                cells.append(f"{c['accuracy']:.1%} / {c['runs']:.0f}")
        eq = equal_accuracy(row, classic_n)
        if eq is None:
            best = max(classic_n, key=lambda k: row[f"classic_n{k}"]["accuracy"])
            cells.append(f"none up to n={max(classic_n)} (best {row[f'classic_n{best}']['accuracy']:.1%})")
        else:
            k, c = eq
            cells.append(f"n={k}: {c['accuracy']:.1%}, {c['runs']:.0f} runs ({c['runs'] / p['runs']:.2f}x)")
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def _print_row(row: dict, classic_n: list[int], header: bool) -> None:
    shown = [k for k in classic_n if k in (1, 5, 10)] or classic_n[:3]
    if header:
        cols = ["commits", "effect", "  CV", "posterior: acc    runs builds"]
        cols += [f"classic n={k}: acc  runs" for k in shown] + ["classic at equal accuracy"]
        print(" | ".join(cols))
    p = row["posterior"]
    cells = [
        f"{row['commits']:>7}",
        f"{row['effect_pct']:>5g}%",
        f"{row['cv_pct']:>3g}%",
        f"{p['accuracy']:15.1%} {p['runs']:7.1f} {p['builds']:6.1f}",
    ]
    cells += [f"{row[f'classic_n{k}']['accuracy']:16.1%} {row[f'classic_n{k}']['runs']:5.0f}" for k in shown]
    eq = equal_accuracy(row, classic_n)
    if eq is None:
        best = max(classic_n, key=lambda k: row[f"classic_n{k}"]["accuracy"])
        cells.append(f"none up to n={max(classic_n)} (best {row[f'classic_n{best}']['accuracy']:.1%})")
    else:
        k, c = eq
        cells.append(f"n={k}: {c['accuracy']:.1%}, {c['runs']:.0f} runs ({c['runs'] / p['runs']:.1f}x)")
    print(" | ".join(cells), flush=True)


if __name__ == "__main__":
    sys.exit(main())
