"""The bisection: endpoints, the search (posterior or classic), the culprit's confirmation, the oracle.

Every decision is a function of the runs in the store (and of which revisions failed to build/boot, kept in the
state), so a bisection killed at any point and run again takes the same decisions up to where it stopped and
goes on from there without repeating a run.

1. Endpoints: good and bad measured interleaved (4 + 4 runs, then `batch` more each) until compare's decision
   rule (abtest.compare.verdict.decide with Policy(min_effect_pct)) calls a regression in the metric's declared
   direction. An improvement, "no change", or nothing after `per_step_cap` runs each: nothing to bisect.
2. Search. posterior (default): abtest.bisect.posterior over the range from every run so far; the next revision is
   the one that splits the posterior mass; stop when the culprit block reaches `confidence`. classic: git bisect's
   halving, each step judged by the oracle (below).
3. Confirmation (abtest.bisect.confirm): culprit vs its parent (last testable revision before it), sequential:
   new runs at each (>= 1; the search's runs of the two picked them, a selected sample) until a sequential
   likelihood-ratio test on the new runs puts the parent on the good side and the culprit on the bad one at
   `confidence` (or the other way: not confirmed), as many as the effect in units of noise needs; then compare's
   decision rule on all runs of the two (>= 3 + 3) must say regression and the posterior from all runs still name
   the culprit. When an unconfirmed culprit is no longer the posterior's (the confirmation's runs are evidence
   too), the search goes on (at most SEARCH_ROUNDS rounds).
The oracle (classic steps, `abtest bisect oracle`): a revision's runs against the good endpoint's until the rule
says regression (bad) / no change or improvement (good), or `per_step_cap` runs (skip); at the significance level
`step_alpha`, so that the whole halving takes a wrong turn with probability 1 - confidence at most.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from abtest.bisect import confirm as C
from abtest.bisect import state as S
from abtest.bisect.boot import BootFailed
from abtest.bisect.build import BuildFailed, build
from abtest.bisect.confirm import CONFIRM_RUNS
from abtest.bisect.posterior import (
    Evidence,
    SearchRule,
    block_members,
    classic_next,
    next_query,
    parent_of,
    pooled_spread,
    posterior,
    visit_runs,
)
from abtest.compare.verdict import IMPROVEMENT, INCONCLUSIVE, NO_CHANGE, REGRESSION, Policy, decide

ENDPOINT_START = 4
SEARCH_ROUNDS = 3  # posterior search + confirmation rounds when a confirmation moves the posterior away
GOOD, BAD, SKIP, ABORT = "good", "bad", "skip", "abort"
ORACLE_EXIT = {GOOD: 0, BAD: 1, SKIP: 125, ABORT: 128}  # `git bisect run` exit codes


class Bisector:
    """One bisection over a store. measurer: abtest.bisect.measure.Measurer (or a stand-in with the same
    values/collect/count/direction). log: progress lines."""

    def __init__(self, store: Path, st: S.BisectState, measurer, log: Callable[[str], None] = print):
        self.store, self.st, self.m, self.log = Path(store), st, measurer, log
        self.cfg = st.config
        self.policy = Policy(min_effect_pct=self.cfg.min_effect_pct)
        self.step_policy = Policy(
            alpha=step_alpha(1 - self.cfg.confidence, st.n), min_effect_pct=self.cfg.min_effect_pct
        )

    # ---------------------------------------------------------------- helpers
    def save(self) -> None:
        S.save(self.store, self.st)

    def values(self, pos: int) -> list[float]:
        return self.m.values(self.st.label(pos))

    def lower_is_better(self) -> bool:
        if self.cfg.direction:
            return self.cfg.direction == "lower"
        lib = self.st.lower_is_better if self.st.lower_is_better is not None else self.m.direction
        if lib is None:
            raise S.BisectError(
                f"metric {self.cfg.metric} declares no direction (better is neither lower nor "
                "higher): pass --direction lower|higher"
            )
        return lib

    def runs_total(self) -> int:
        return sum(self.m.count(self.st.label(i)) for i in range(self.st.n))

    def over_budget(self) -> bool:
        return self.runs_total() >= self.cfg.max_iterations

    def measure(self, positions: list[int], runs: int) -> bool:
        """Bring the revisions at `positions` to `runs` runs each. False when one of them is untestable now
        (build/boot failed: marked, saved). TargetDead propagates."""
        return self.measure_shas([self.st.revisions[p] for p in positions], runs)

    def measure_shas(self, shas: list[str], runs: int) -> bool:
        builds = {}
        for sha in shas:
            if sha in self.st.why:
                return False
            try:
                builds[S.label_of(sha)] = build(self.cfg, self.store, sha)
            except BuildFailed as e:
                self._untestable(sha, f"build failed: {e}")
                return False
        try:
            self.m.collect(builds, runs)
        except BootFailed as e:
            short = [sha for sha in shas if self.m.count(S.label_of(sha)) < runs]
            self._untestable((short or shas)[0], f"boot/run failed: {e}")
            return False
        for sha in shas:
            if sha in self.st.revisions:
                self.st.status[self.st.revisions.index(sha)] = S.TESTABLE
        if self.st.lower_is_better is None and self.m.direction is not None:
            self.st.lower_is_better = self.m.direction
        self.save()
        return True

    def _untestable(self, sha: str, why: str) -> None:
        if sha in (self.st.revisions[0], self.st.revisions[-1]):
            raise S.BisectError(f"endpoint {sha[:12]} cannot be measured: {why}")
        if sha in self.st.revisions:
            self.st.status[self.st.revisions.index(sha)] = S.UNTESTABLE
        self.st.why[sha] = why
        self.st.event("skip", revision=sha, why=why[:300])
        self.log(f"skip {sha[:12]}: {why[:200]}")
        self.save()

    def evidence(self) -> Evidence:
        """All runs as the posterior's evidence; a metric declared to aggregate by geometric mean (latencies,
        scores) is modelled on its logarithms, as compare's rule tests it."""
        runs = [self.values(i) for i in range(self.st.n)]
        if self._log_model():
            runs = [list(np.log(xs)) for xs in runs]
        return Evidence.from_runs(runs, [s == S.UNTESTABLE for s in self.st.status])

    def _aggregation(self) -> str:
        return getattr(self.m, "aggregation", "mean")

    def decide(self, a: list[float], b: list[float], policy: Policy | None = None):
        """compare's decision rule for A vs B runs of the metric (its direction and aggregation)."""
        return decide(a, b, self.lower_is_better(), policy or self.policy, aggregation=self._aggregation())

    # ---------------------------------------------------------------- phases
    def run(self) -> dict:
        """The whole bisection (resumable); returns the result (also in state.result)."""
        self.endpoints()
        if self.cfg.mode == S.CLASSIC:
            culprit, exhausted = self.classic()
            return self.finish(culprit, None if exhausted else self.confirm(culprit), exhausted)
        for _ in range(SEARCH_ROUNDS):
            culprit, exhausted = self.search()
            if exhausted:
                return self.finish(culprit, None, True)
            confirm = self.confirm(culprit)
            if confirm["confirmed"]:
                break
            # the confirmation's runs are evidence too: search again when they moved the posterior
            post = posterior(self.evidence())
            if int(post.culprit) == culprit and float(post.confidence) >= self.cfg.confidence:
                break
            self.st.event("unconfirmed", culprit=self.st.revisions[culprit], verdict=confirm["verdict"])
            self.log(f"{self.st.revisions[culprit][:12]} not confirmed ({confirm['text']}); searching again")
        return self.finish(culprit, confirm, False)

    def endpoints(self) -> None:
        last = self.st.n - 1
        while True:
            good, bad = self.values(0), self.values(last)
            n = min(len(good), len(bad))
            if n >= ENDPOINT_START:
                v = self.decide(good, bad)
                if v.verdict == REGRESSION:
                    if not any(e["event"] == "endpoints" for e in self.st.log):
                        self.st.event("endpoints", verdict=v.text, delta_pct=v.delta_pct, runs=[len(good), len(bad)])
                        self.save()
                    return
                if v.verdict in (IMPROVEMENT, NO_CHANGE):
                    raise S.BisectError(
                        f"nothing to bisect: {self.cfg.metric} {v.text} from good to bad "
                        f"({_pct(v.delta_pct)}, {len(good)} vs {len(bad)} runs)"
                    )
                if n >= self.cfg.per_step_cap:
                    raise S.BisectError(
                        f"nothing to bisect: no regression of {self.cfg.metric} shown after {n} "
                        f"runs per endpoint ({v.text}, {_pct(v.delta_pct)})"
                    )
            target = ENDPOINT_START if n < ENDPOINT_START else n + self.cfg.batch
            self.log(f"endpoints: measuring good and bad to {target} runs each")
            if not self.measure([0, last], target):
                raise S.BisectError("an endpoint cannot be measured")

    def search(self) -> tuple[int, bool]:
        """Posterior search; (culprit position, budget exhausted)."""
        rule = SearchRule(
            confidence=self.cfg.confidence,
            batch=self.cfg.batch,
            confirm_runs=1,  # the confirmation brings culprit and parent to CONFIRM_RUNS (new runs included)
            per_revision_cap=self.cfg.per_step_cap,
        )
        while True:
            ev = self.evidence()
            post = posterior(ev)
            nxt, done = (int(x) for x in next_query(ev, post, rule))
            culprit = int(post.culprit)
            if done:
                return culprit, False
            if nxt < 0 or self.over_budget():
                self.log("budget exhausted" if nxt >= 0 else "no revision left to measure")
                return culprit, True
            runs = int(ev.n[nxt]) + int(visit_runs(post, rule))
            self.log(
                f"[{self.runs_total()} runs] culprit so far {self.st.revisions[culprit][:12]} "
                f"(P = {float(post.confidence):.3f}); measuring {self.st.revisions[nxt][:12]} "
                f"(P(bad) = {float(post.cdf[nxt]):.2f}) to {runs} runs"
            )
            self.measure([nxt], runs)

    def classic(self) -> tuple[int, bool]:
        """git bisect's halving with the oracle per step; (culprit position, budget exhausted)."""
        lo, hi = 0, self.st.n - 1
        while True:
            untestable = np.array([s == S.UNTESTABLE for s in self.st.status])
            m = int(classic_next(np.array(lo), np.array(hi), untestable))
            if m < 0:
                return hi, False
            if self.over_budget():
                return hi, True
            verdict = self.judge(m)
            self.log(f"{self.st.revisions[m][:12]} is {verdict}")
            if verdict == BAD:
                hi = m
            elif verdict == GOOD:
                lo = m
            elif self.st.status[m] != S.UNTESTABLE:
                self._untestable(self.st.revisions[m], f"undecided after {self.cfg.per_step_cap} runs")

    def judge(self, pos: int) -> str:
        """The oracle for the revision at `pos`: GOOD / BAD / SKIP (measures as needed)."""
        return self.judge_sha(self.st.revisions[pos])

    def judge_sha(self, sha: str) -> str:
        """GOOD / BAD / SKIP for one revision against the good endpoint, at the per-step significance level;
        the good endpoint is measured along (interleaved) whenever it has fewer runs than the revision, so that
        its own noise does not keep "no change" out of reach."""
        label = S.label_of(sha)
        while True:
            if sha in self.st.why:
                return SKIP
            good, xs = self.values(0), self.m.values(label)
            if len(xs) >= CONFIRM_RUNS:
                v = self.decide(good, xs, self.step_policy)
                if v.verdict == REGRESSION:
                    return BAD
                if v.verdict in (NO_CHANGE, IMPROVEMENT):
                    return GOOD
            if len(xs) >= self.cfg.per_step_cap:
                return SKIP
            target = max(CONFIRM_RUNS, len(xs) + self.cfg.batch)
            shas = ([self.st.revisions[0]] if len(good) < target else []) + [sha]
            if not self.measure_shas(shas, target):
                return SKIP

    def confirm(self, culprit: int) -> dict:
        """Culprit vs parent, sequential (abtest.bisect.confirm): new runs at each until its sequential test
        settles its side, as many as the effect in units of noise needs (>= 1 new run each, >= 3 runs each in
        all); confirmed when both tests pass, compare's decision rule on *all* runs of the two says regression
        and (posterior mode) the posterior from all runs still names the culprit at the confidence. Returns the
        verdict's summary: the rule's verdict, runs (all) and new_runs of parent and culprit, the sequential
        tests' log-likelihood ratios (None for an endpoint: settled), the effect in units of noise.

        The search's runs at the two picked them (a selected sample: the parent looked good and the culprit
        bad), so the sequential tests use only the runs taken after the confirmation started; how many runs each
        had then is kept in the event log ("confirm"), so that a resumed bisection counts the same runs as new."""
        untestable = np.array([s == S.UNTESTABLE for s in self.st.status])
        parent = int(parent_of(untestable, np.array(culprit)))
        skip_a, skip_b = self._confirm_offsets(parent, culprit)
        last, conf, batch = self.st.n - 1, self.cfg.confidence, self.cfg.batch
        while True:
            ev = self.evidence()
            post = posterior(ev)
            var, dof = pooled_spread(ev)
            lv = C.levels_of(ev.n, ev.s, float(var), float(dof))
            a, b = self.values(parent), self.values(culprit)
            ma, mb = self._model(a), self._model(b)
            s = C.step(ma[skip_a:], mb[skip_b:], len(a), len(b), parent == 0, culprit == last, lv, conf, batch)
            new = [len(a) - skip_a, len(b) - skip_b]
            out = {
                "parent": parent,
                "runs": [len(a), len(b)],
                "new_runs": new,
                "log_lr": [_f(s.lr_parent), _f(s.lr_culprit)],
                "effect_sd": _f(lv.d),
            }
            capped = max(new) >= self.cfg.per_step_cap or self.over_budget()
            if s.status == C.REFUTED or s.status == C.CONFIRMED or capped:
                v = self.decide(a, b)
                out.update(
                    verdict=v.verdict,
                    text=v.text,
                    delta_pct=v.delta_pct,
                    p_welch=v.p_welch,
                    p_mannwhitney=v.p_mannwhitney,
                    confirmed=False,
                )
                # classic mode's culprit comes from the oracle's steps, not from the posterior's stop rule
                same = self.cfg.mode == S.CLASSIC or (int(post.culprit) == culprit and float(post.confidence) >= conf)
                if s.status == C.REFUTED:
                    side = "parent" if s.lr_parent < s.lr_culprit else "culprit"
                    out["text"] = f"{v.text}; the new runs put the {side} on the other side"
                    return out
                if s.status == C.CONFIRMED and v.verdict == REGRESSION and same:
                    out["confirmed"] = True
                    return out
                if capped or v.verdict != INCONCLUSIVE or not same:
                    if not same and v.verdict == REGRESSION:
                        out["text"] = f"{v.text}; the posterior moved off the culprit"
                    return out
                more = [(parent, batch), (culprit, batch)]  # both sides settled, the rule still undecided
            else:
                more = [(parent, s.more_parent), (culprit, s.more_culprit)]
            targets = [(p, len(self.values(p)) + k) for p, k in more if k > 0]
            self.log(
                f"confirming {self.st.revisions[culprit][:12]} against its parent "
                f"{self.st.revisions[parent][:12]}: "
                + ", ".join(f"{self.st.revisions[p][:12]} to {k} runs" for p, k in targets)
            )
            if not all(self.measure([p], k) for p, k in targets):
                return {
                    "parent": parent,
                    "verdict": "untestable",
                    "text": "culprit or parent became untestable",
                    "confirmed": False,
                }

    def _model(self, xs: list[float]) -> list[float]:
        """Runs in the posterior's unit (logarithms for a gmean metric, as `evidence`)."""
        if self._log_model():
            return [math.log(x) for x in xs]
        return list(xs)

    def _log_model(self) -> bool:
        return self._aggregation() == "gmean" and all(x > 0 for i in range(self.st.n) for x in self.values(i))

    def _confirm_offsets(self, parent: int, culprit: int) -> tuple[int, int]:
        """Runs of parent and culprit taken before their confirmation started (from the event log when this
        confirmation was started before a resume; recorded now otherwise)."""
        revs = self.st.revisions
        for e in reversed(self.st.log):
            if e["event"] == "unconfirmed":
                break  # a confirmation started before the last search round is not this one
            if e["event"] == "confirm" and e.get("culprit") == revs[culprit] and e.get("parent") == revs[parent]:
                return int(e["before"][0]), int(e["before"][1])
        before = [len(self.values(parent)), len(self.values(culprit))]
        self.st.event("confirm", culprit=revs[culprit], parent=revs[parent], before=before)
        self.save()
        return before[0], before[1]

    def finish(self, culprit: int, confirm: dict | None, exhausted: bool) -> dict:
        ev = self.evidence()
        post = posterior(ev)
        revs = self.st.revisions
        members = block_members(ev.untestable, culprit)
        runs = {revs[i][:12]: int(ev.n[i]) for i in range(self.st.n) if ev.n[i] or ev.untestable[i]}
        parent = confirm["parent"] if confirm else int(parent_of(ev.untestable, np.array(culprit)))
        res = {
            "culprit": revs[culprit],
            "subject": self.st.subjects[culprit],
            "position": culprit,
            "candidates": [revs[i] for i in members],
            "probability": float(post.block[culprit]),
            "parent": revs[parent],
            "mode": self.cfg.mode,
            "metric": self.cfg.metric,
            "min_effect_pct": self.cfg.min_effect_pct,
            "lower_is_better": self.lower_is_better(),
            "confirmation": confirm,
            "exhausted": exhausted,
            "runs_total": int(ev.n.sum()),
            "revisions_built": int(sum(s != S.UNTESTED for s in self.st.status)),
            "runs_per_revision": runs,
            "untestable": {r[:12]: w for r, w in self.st.why.items()},
            "labels": {"parent": self.st.label(parent), "culprit": self.st.label(culprit)},
            **self._levels(post),
        }
        self.st.result = res
        self.st.event(
            "done",
            culprit=revs[culprit],
            probability=res["probability"],
            confirmed=bool(confirm and confirm.get("confirmed")),
        )
        self.save()
        return res

    def _levels(self, post) -> dict:
        """The model's good and bad levels (metric unit) and run-to-run spread (sd; of the logarithms for a
        gmean metric, i.e. about the CV)."""
        log = self._aggregation() == "gmean" and all(x > 0 for i in range(self.st.n) for x in self.values(i))
        g, b = (np.exp(post.mu_good), np.exp(post.mu_bad)) if log else (post.mu_good, post.mu_bad)
        return {"level_good": _f(g), "level_bad": _f(b), "spread": _f(post.sd), "spread_of": "log" if log else "value"}

    # ---------------------------------------------------------------- oracle
    def oracle(self, sha: str) -> str:
        """GOOD / BAD / SKIP for one revision (in the range or not), for `git bisect run`."""
        self.endpoints()
        if sha == self.st.revisions[0]:
            return GOOD
        if sha == self.st.revisions[-1]:
            return BAD
        return self.judge_sha(sha)


def step_alpha(overall: float, revisions: int) -> float:
    """The significance level of one oracle step when a bisection of `revisions` revisions (endpoints included)
    may take one wrong turn with probability `overall`: its ceil(log2(revisions - 1)) steps share that budget,
    1 - (1 - overall) ** (1 / steps) each (as LISA's bisector spreads its error budget). 5 % over 31 commits:
    1.02 % per step."""
    steps = max(1, math.ceil(math.log2(max(revisions - 1, 2))))
    return 1 - (1 - overall) ** (1 / steps)


def _f(x) -> float | None:
    v = float(np.asarray(x))
    return v if math.isfinite(v) else None


def _pct(d) -> str:
    return "n/a" if d is None else f"{d:+.2f} %"
