"""The culprit posterior and the search rules of `abtest bisect` (abtest.bisect.posterior), and the simulation
bench that measures them (bench/bisect_sim.py) on a small setting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from abtest.bisect.posterior import (
    Evidence,
    SearchRule,
    block_members,
    classic_next,
    next_query,
    parent_of,
    posterior,
    visit_runs,
)

ROOT = Path(__file__).resolve().parent.parent


def _runs(levels, n, cv=0.01, seed=1):
    rng = np.random.default_rng(seed)
    return [list(lv * (1 + cv * rng.standard_normal(k))) if k else [] for lv, k in zip(levels, n)]


def test_a_clear_step_is_found_with_the_probability_near_one():
    levels = [100.0] * 6 + [110.0] * 5  # culprit at position 6
    ev = Evidence.from_runs(_runs(levels, [6, 0, 2, 0, 2, 2, 2, 0, 2, 0, 6]))
    post = posterior(ev)
    assert int(post.culprit) == 6
    assert float(post.confidence) > 0.99
    assert post.prob[0] == 0 and abs(post.prob.sum() - 1) < 1e-9
    # the unmeasured position between a good one (5) and a bad one (6) has no mass; 7 (unmeasured, after 6) none
    assert post.prob[7] < 1e-6


def test_unmeasured_gap_shares_the_mass_evenly():
    levels = [100.0] * 4 + [110.0] * 5  # culprit 4; positions 2..4 unmeasured
    ev = Evidence.from_runs(_runs(levels, [6, 3, 0, 0, 0, 3, 0, 0, 6]))
    post = posterior(ev)
    assert np.allclose(post.prob[2:6], 0.25, atol=0.01)
    assert float(post.confidence) < 0.3
    nxt, done = next_query(ev, post, SearchRule())
    assert not done and int(nxt) in (3, 4)  # P(bad) 0.5 at 3, 0.75 at 4... the split is at 3
    assert int(nxt) == 3


def test_untestable_revisions_merge_into_the_next_testable_block():
    levels = [100.0] * 5 + [110.0] * 4  # culprit 5, which does not build, nor does 4
    n = [6, 2, 2, 2, 0, 0, 2, 0, 6]
    ev = Evidence.from_runs(_runs(levels, n), [False, False, False, False, True, True, False, False, False])
    post = posterior(ev)
    assert int(post.culprit) == 6 and float(post.confidence) > 0.99
    assert block_members(ev.untestable, 6) == [4, 5, 6]
    assert int(parent_of(ev.untestable, np.array(6))) == 3


def test_confirmation_runs_are_asked_for_before_stopping():
    levels = [100.0] * 3 + [120.0] * 3
    ev = Evidence.from_runs(_runs(levels, [6, 0, 2, 2, 0, 6], cv=0.001))
    post = posterior(ev)
    assert int(post.culprit) == 3 and float(post.confidence) > 0.99
    nxt, done = next_query(ev, post, SearchRule(confirm_runs=3))
    assert not done and int(nxt) == 3  # culprit has 2 < 3 runs; the parent too, culprit first
    ev2 = Evidence.from_runs(_runs(levels, [6, 0, 3, 3, 0, 6], cv=0.001))
    nxt, done = next_query(ev2, posterior(ev2), SearchRule(confirm_runs=3))
    assert done


def test_endpoints_are_measured_when_they_are_the_least_known():
    levels = [100.0] * 3 + [110.0] * 3
    ev = Evidence.from_runs(_runs(levels, [2, 0, 6, 0, 0, 2], cv=0.05))
    nxt, _ = next_query(ev, posterior(ev), SearchRule())
    assert int(nxt) in (0, 5)


def test_batch_shape_is_per_history():
    a = Evidence.from_runs(_runs([100.0] * 3 + [110.0] * 3, [5, 2, 2, 2, 2, 5]))
    b = Evidence.from_runs(_runs([100.0] + [110.0] * 5, [5, 2, 2, 2, 2, 5], seed=2))
    both = Evidence(
        np.stack([a.n, b.n]), np.stack([a.s, b.s]), np.stack([a.ss, b.ss]), np.stack([a.untestable, b.untestable])
    )
    post = posterior(both)
    assert list(post.culprit) == [3, 1]
    assert int(posterior(a).culprit) == 3


def test_classic_halving_skips_untestable_middles():
    unt = np.zeros(9, bool)
    assert int(classic_next(np.array(0), np.array(8), unt)) == 4
    unt[4] = True
    assert int(classic_next(np.array(0), np.array(8), unt)) in (3, 5)
    assert int(classic_next(np.array(3), np.array(4), unt)) == -1


def test_posterior_needs_both_endpoints():
    with pytest.raises(ValueError, match="endpoints"):
        posterior(Evidence.from_runs([[], [1.0], [2.0]]))


def test_visit_runs_follow_the_effect_in_units_of_noise():
    """One run per visit where one run settles a revision's side (effect >> noise), `batch` where the effect is
    near the noise; every history of a batch gets its own count; adaptive_visits=False always takes `batch`."""
    rule = SearchRule(batch=2)
    big = posterior(Evidence.from_runs(_runs([100.0] * 8 + [110.0] * 8, [6] + [0] * 14 + [6], cv=0.01)))  # ~10 sd
    near = posterior(Evidence.from_runs(_runs([100.0] * 8 + [102.0] * 8, [6] + [0] * 14 + [6], cv=0.02)))  # ~1 sd
    assert int(visit_runs(big, rule)) == 1
    assert int(visit_runs(near, rule)) == 2
    assert int(visit_runs(big, SearchRule(batch=2, adaptive_visits=False))) == 2
    both = Evidence.from_runs(_runs([100.0] * 8 + [110.0] * 8, [6] + [0] * 14 + [6], cv=0.01))
    ev = Evidence(
        np.stack([both.n, both.n]),
        np.stack([both.s, both.s]),
        np.stack([both.ss, both.ss * 1.0001]),
        np.stack([both.untestable, both.untestable]),
    )
    assert visit_runs(posterior(ev), rule).shape == (2,)
    # the number of runs grows as the effect shrinks toward the noise, up to batch
    ks = [
        int(
            visit_runs(
                posterior(Evidence.from_runs(_runs([100.0] * 8 + [100 + e] * 8, [8] + [0] * 14 + [8], cv=0.01))),
                SearchRule(batch=8),
            )
        )
        for e in (10.0, 2.0, 1.0)
    ]
    assert ks[0] == 1 and ks[0] <= ks[1] <= ks[2] and ks[2] > 1, ks


def test_simulation_bench_small_setting():
    """bench/bisect_sim.py on 200 histories of 32 commits, 5 % effect at 2 % CV: the posterior search finds the
    culprit >= 95 % of the time and spends fewer runs than classic bisection with 10 runs per step, which is
    less accurate."""
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "bisect_sim.py"),
            "--histories",
            "200",
            "--commits",
            "32",
            "--effects",
            "5",
            "--cvs",
            "2",
            "--classic-n",
            "10",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    (row,) = json.loads(out.stdout)["rows"]
    post, classic = row["posterior"], row["classic_n10"]
    assert post["accuracy"] >= 0.95, row
    assert post["runs"] < classic["runs"], row
    assert post["accuracy"] >= classic["accuracy"] - 0.02, row


def test_simulation_bench_large_effect_spends_fewer_runs_than_classic(tmp_path):
    """5 % effect at 1 % CV (5 CV), 200 histories of 64 commits: the sequential confirmation takes about one new
    run at culprit and parent, so the posterior search spends fewer runs than classic bisection with the n it
    needs for the same accuracy (n=3; n=1 is less accurate); --table renders the docs/bisect.md table."""
    args = ["--histories", "200", "--commits", "64", "--effects", "5", "--cvs", "1", "--classic-n", "1", "3"]
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bisect_sim.py"), *args, "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    doc = json.loads(out.stdout)
    (row,) = doc["rows"]
    post = row["posterior"]
    assert post["accuracy"] >= 0.95 and post["confirm_runs"] < 4, row
    assert row["classic_n1"]["accuracy"] < post["accuracy"] - 0.01 <= row["classic_n3"]["accuracy"], row
    assert post["runs"] < row["classic_n3"]["runs"], row
    (tmp_path / "after.json").write_text(out.stdout)
    table = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bisect_sim.py"), "--table", str(tmp_path / "after.json")],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "| 64 | 5% | 1% |" in table and "n=3:" in table
