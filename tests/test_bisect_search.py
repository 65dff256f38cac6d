"""The bisection's phases (abtest.bisect.search.Bisector) in process, with a stand-in measurer that draws runs
from known per-revision levels (the real collector path is tested in tests/test_bisect_cli.py): the endpoint
rule follows the metric's direction, the posterior and classic searches find the culprit, the error budget of
the oracle's steps."""

from __future__ import annotations

import numpy as np
import pytest

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


def test_confirmation_decides_on_new_runs_only(tmp_path):
    """The search's runs at the culprit and its parent picked them (a selected sample): the confirmation's
    verdict uses only runs taken after it started, and the counts it left out are in the event log, so that a
    resumed bisection leaves out the same runs."""
    st = _bisection(tmp_path, 33)
    culprit = 21
    m = LevelMeasurer(st, [1000.0 if i < culprit else 1050.0 for i in range(33)], cv=0.02)
    res = Bisector(tmp_path, st, m, log=lambda msg: None).run()
    assert res["culprit"] == st.revisions[culprit] and res["confirmation"]["confirmed"]
    (ev,) = [e for e in S.load(tmp_path).log if e["event"] == "confirm"]
    assert ev["culprit"] == st.revisions[culprit] and ev["parent"] == st.revisions[culprit - 1]
    before = ev["before"]
    assert min(before) >= 3  # the search stopped with >= 3 runs at both
    runs = res["runs_per_revision"]
    assert res["confirmation"]["runs"] == [
        runs[st.revisions[culprit - 1][:12]] - before[0],
        runs[st.revisions[culprit][:12]] - before[1],
    ]
    assert min(res["confirmation"]["runs"]) >= 3
    # resumed mid-confirmation: the recorded counts are reused, not the current ones
    b = Bisector(tmp_path, S.load(tmp_path), m, log=lambda msg: None)
    assert b._confirm_offsets(culprit - 1, culprit) == tuple(before)
