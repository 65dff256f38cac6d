"""The bisection's phases (abtest.bisect.search.Bisector) in process, with a stand-in measurer that draws runs
from known per-revision levels (the real collector path is tested in tests/test_bisect_cli.py): the endpoint
rule follows the metric's direction, the posterior and classic searches find the culprit, the error budget of
the oracle's steps."""

from __future__ import annotations

import numpy as np
import pytest

from abtest.bisect import confirm as C
from abtest.bisect import state as S
from abtest.bisect.search import Bisector, step_alpha


class LevelMeasurer:
    """Runs of revision i ~ level(i) x (1 + cv x N(0, 1)); label -> position through the state's revisions."""

    def __init__(
        self, st: S.BisectState, levels: list[float], cv: float, lower_is_better: bool | None = True, seed: int = 7
    ):
        self.pos = {S.label_of(sha): i for i, sha in enumerate(st.revisions)}
        self.levels, self.cv, self.direction = levels, cv, lower_is_better
        self.aggregation = "mean"
        self.runs: dict[str, list[float]] = {}
        self.rng = np.random.default_rng(seed)

    def values(self, label: str) -> list[float]:
        return self.runs.get(label, [])

    def count(self, label: str) -> int:
        return len(self.values(label))

    def collect(self, builds: dict, runs: int) -> None:
        for label in builds:
            xs = self.runs.setdefault(label, [])
            while len(xs) < runs:
                xs.append(self.levels[self.pos[label]] * (1 + self.cv * self.rng.standard_normal()))


def _bisection(tmp_path, n: int, **cfg) -> S.BisectState:
    revs = [f"{i:012x}" + "a" * 28 for i in range(1, n + 1)]  # distinct 12-digit labels
    config = S.Config(
        good=revs[0],
        bad=revs[-1],
        repo=str(tmp_path),
        build="true",
        target="",
        workload="w",
        metric="power.Total",
        **cfg,
    )
    return S.BisectState(config, revs, [f"commit {i}" for i in range(n)])


@pytest.mark.parametrize("mode", ["posterior", "classic"])
def test_search_finds_the_culprit_and_counts_every_run(tmp_path, mode):
    st = _bisection(tmp_path, 65, mode=mode)
    culprit = 40
    m = LevelMeasurer(st, [1000.0 if i < culprit else 1050.0 for i in range(65)], cv=0.02)
    res = Bisector(tmp_path, st, m, log=lambda msg: None).run()
    assert res["culprit"] == st.revisions[culprit] and res["confirmation"]["confirmed"]
    assert res["runs_total"] == sum(len(v) for v in m.runs.values()) == sum(res["runs_per_revision"].values())
    assert S.load(tmp_path).result == res  # saved in the store's state


def test_an_improvement_is_nothing_to_bisect(tmp_path):
    st = _bisection(tmp_path, 9)
    m = LevelMeasurer(st, [1000.0] * 4 + [900.0] * 5, cv=0.01)  # power went down: better, not a regression
    with pytest.raises(S.BisectError, match="nothing to bisect: .*improvement"):
        Bisector(tmp_path, st, m, log=lambda msg: None).run()
    higher = _bisection(tmp_path / "h", 9)
    (tmp_path / "h").mkdir()
    m = LevelMeasurer(higher, [1000.0] * 4 + [900.0] * 5, cv=0.01, lower_is_better=False)  # fps went down
    res = Bisector(tmp_path / "h", higher, m, log=lambda msg: None).run()
    assert res["culprit"] == higher.revisions[4] and res["lower_is_better"] is False


def test_a_metric_without_direction_needs_one(tmp_path):
    st = _bisection(tmp_path, 9)
    m = LevelMeasurer(st, [1.0] * 4 + [2.0] * 5, cv=0.01, lower_is_better=None)
    with pytest.raises(S.BisectError, match="--direction"):
        Bisector(tmp_path, st, m, log=lambda msg: None).run()
    st = _bisection(tmp_path / "d", 9, direction="lower")
    (tmp_path / "d").mkdir()
    m = LevelMeasurer(st, [1.0] * 4 + [2.0] * 5, cv=0.01, lower_is_better=None)
    assert Bisector(tmp_path / "d", st, m, log=lambda msg: None).run()["culprit"] == st.revisions[4]


def test_per_step_error_budget():
    assert step_alpha(0.05, 33) == pytest.approx(1 - 0.95 ** (1 / 5))  # 32 commits: 5 halvings
    assert step_alpha(0.05, 3) == pytest.approx(0.05)  # 2 commits: 1 step
    assert 0.010 < step_alpha(0.05, 32) < 0.0103


def test_confirmation_is_sequential_on_new_runs(tmp_path):
    """The search's runs at the culprit and its parent picked them (a selected sample): the confirmation's
    sequential tests use only runs taken after it started (>= 1 new run each), the decision rule all runs of the
    two (>= 3 each), and the counts taken before it are in the event log, so that a resumed bisection counts the
    same runs as new."""
    st = _bisection(tmp_path, 33)
    culprit = 21
    m = LevelMeasurer(st, [1000.0 if i < culprit else 1050.0 for i in range(33)], cv=0.02)
    res = Bisector(tmp_path, st, m, log=lambda msg: None).run()
    c = res["confirmation"]
    assert res["culprit"] == st.revisions[culprit] and c["confirmed"] and c["verdict"] == "regression"
    (ev,) = [e for e in S.load(tmp_path).log if e["event"] == "confirm"]
    assert ev["culprit"] == st.revisions[culprit] and ev["parent"] == st.revisions[culprit - 1]
    before = ev["before"]
    runs = res["runs_per_revision"]
    total = [runs[st.revisions[culprit - 1][:12]], runs[st.revisions[culprit][:12]]]
    assert c["runs"] == total and min(total) >= C.CONFIRM_RUNS
    assert c["new_runs"] == [total[0] - before[0], total[1] - before[1]] and min(c["new_runs"]) >= C.MIN_NEW
    assert min(c["log_lr"]) >= C.threshold(0.95)  # the new runs alone settled both sides
    # resumed mid-confirmation: the recorded counts are reused, not the current ones
    b = Bisector(tmp_path, S.load(tmp_path), m, log=lambda msg: None)
    assert b._confirm_offsets(culprit - 1, culprit) == tuple(before)


def test_confirmation_runs_follow_the_effect_in_units_of_noise():
    """One new run settles a side when the effect is many sds (its log-LR is ~d^2 / 2), several when it is ~1 sd;
    an endpoint needs none; runs on the wrong side refute."""
    big = C.Levels(good=1000.0, bad=1100.0, sd=10.0, n_good=8, n_bad=8, dof=12)  # d = 10
    s = C.step([], [], 2, 2, False, False, big, 0.95, batch=2)
    assert s.status == C.MORE and (s.more_parent, s.more_culprit) == (1, 1)  # >= 1 new, 3 in all
    s = C.step([1003.0], [1095.0], 3, 3, False, False, big, 0.95, batch=2)
    assert s.status == C.CONFIRMED and min(s.lr_parent, s.lr_culprit) > C.threshold(0.95)
    s = C.step([], [1095.0], 40, 3, True, False, big, 0.95, batch=2)  # the parent is the good endpoint
    assert s.status == C.CONFIRMED and s.more_parent == 0
    s = C.step([1003.0], [1004.0], 3, 3, False, False, big, 0.95, batch=2)  # the "culprit" runs at the good level
    assert s.status == C.REFUTED
    small = C.Levels(good=1000.0, bad=1020.0, sd=20.0, n_good=30, n_bad=30, dof=60)  # d = 1
    s = C.step([], [], 4, 4, False, False, small, 0.95, batch=2)
    assert s.status == C.MORE and (s.more_parent, s.more_culprit) == (2, 2)  # one run cannot settle it: a batch
    s = C.step([1000.0, 1001.0], [1020.0, 1019.0], 6, 6, False, False, small, 0.95, batch=2)
    assert s.status == C.MORE and 0 < s.lr_culprit < C.threshold(0.95)
    assert C.step([], [], 2, 2, False, False, small, 0.99, batch=2).more_culprit == 2


def test_a_wrong_culprit_is_not_confirmed(tmp_path):
    """A culprit named on a lucky split (the search's runs say bad, the revision is good): the confirmation's new
    runs refute it, and the search goes on to the real one."""
    st = _bisection(tmp_path, 17)
    culprit = 9
    m = LevelMeasurer(st, [1000.0 if i < culprit else 1100.0 for i in range(17)], cv=0.01)
    b = Bisector(tmp_path, st, m, log=lambda msg: None)
    b.endpoints()
    wrong = 7
    m.runs[st.label(wrong)] = [1100.0, 1101.0]  # as if two runs had come out at the bad level
    m.runs[st.label(wrong - 1)] = [1000.0, 999.0]
    c = b.confirm(wrong)
    assert not c["confirmed"] and c["new_runs"][1] >= 1 and c["log_lr"][1] <= -C.threshold(0.95)
    res = b.run()
    assert res["culprit"] == st.revisions[culprit] and res["confirmation"]["confirmed"]
