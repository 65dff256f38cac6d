"""Issue 38: the decision rule is one object (verdict.Policy) that decides and writes every footer; the
"iterations needed" estimate is a bisection, not a search over every n; the thresholds file's metric names are
checked before any trace is read. Stores here are constructed (values chosen by the test, stated per case)."""

import html
import io
import math
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console
from scipy import stats as sps

from abtest.cli import cli
from abtest.compare import stats, verdict
from abtest.compare.comparison import compare_labels
from abtest.report.html import comparison_html
from abtest.report.markdown import comparison_markdown
from abtest.report.terminal import print_comparison
from abtest.report.text import comparison_text
from abtest.store.reader import load_label
from abtest.store.writer import write_iteration

REPO = Path(__file__).resolve().parents[1]


def _store(root: Path, n: int, b_factor: float) -> Path:
    """base vs cand, n iterations each of a metrics.json key soc_power_mw (CV ~1 %); cand = base x b_factor."""
    for label, factor in (("base", 1.0), ("cand", b_factor)):
        for i in range(n):
            value = 1000.0 * factor * (1 + 0.01 * (i - (n - 1) / 2))
            write_iteration(
                root / label / "video" / str(i),
                {"soc_power_mw": {"value": value, "unit": "mW", "lower_is_better": True}},
                {"kernel": {"release": label}},
            )
    return root


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def _reports(c) -> dict[str, str]:
    buf = io.StringIO()
    print_comparison(c, Console(file=buf, width=400, color_system=None))
    return {
        "terminal": buf.getvalue(),
        "text": comparison_text(c, width=400),
        "markdown": comparison_markdown(c),
        "html": html.unescape(comparison_html(c, tables=[])),
    }


@pytest.mark.parametrize(
    "policy,expect_verdict,expect_test",
    [
        (verdict.Policy(), verdict.REGRESSION, "welch"),
        (verdict.Policy(small_n=verdict.NO_VERDICT), verdict.INCONCLUSIVE, "none"),
    ],
)
def test_footer_is_the_rule_that_decided(tmp_path, policy, expect_verdict, expect_test):
    """3 vs 3, +10 %: Mann-Whitney cannot reach p < 0.05 (smallest p 0.1). Every footer states what the same
    Policy object did; changing the policy changes both the verdict and the footer."""
    root = _store(tmp_path / "s", 3, 1.10)
    c = compare_labels(load_label(root / "base"), load_label(root / "cand"), policy=policy, with_trace=False)
    m = c.workloads[0].metric("soc_power_mw")
    assert m.verdict.verdict == expect_verdict and m.verdict.decision_test == expect_test
    assert m.verdict.p_mannwhitney == pytest.approx(0.1)
    rule = policy.describe({(3, 3)})
    assert c.rule_text() == rule and c.to_json()["decision_rule"] == rule
    assert ("Welch's t decides alone" in rule) == (policy.small_n == verdict.WELCH_ALONE)
    assert ("no regression/improvement is called" in rule) == (policy.small_n == verdict.NO_VERDICT)
    for name, text in _reports(c).items():
        flat = _flat(text)
        assert rule in flat, name
        # the pre-fix footer claimed agreement of both tests, which 3 vs 3 cannot give
        assert "Mann-Whitney U to agree" not in flat and "must agree" not in flat, name


def test_footer_at_sizes_where_both_tests_decide(tmp_path):
    root = _store(tmp_path / "s", 5, 1.10)
    c = compare_labels(load_label(root / "base"), load_label(root / "cand"), with_trace=False)
    assert c.workloads[0].metric("soc_power_mw").verdict.decision_test == "welch+mannwhitney"
    assert c.rule_text() == (
        "a regression/improvement needs p < 0.05 from Welch's t and Mann-Whitney U both, and |delta| >= 1 %"
    )
    assert "decides alone" not in _flat(comparison_text(c, width=400))


def test_policy_decides_what_it_describes():
    """Policy.significant is rule 2: at 3 vs 3 Welch alone (default) or nothing; at 5 vs 5 both tests."""
    pw, pm = np.array([0.01, 0.01, 0.2]), np.array([0.1, 0.01, 0.01])
    assert list(verdict.Policy().significant(pw, pm, 3, 3)) == [True, True, False]
    assert list(verdict.Policy(small_n=verdict.NO_VERDICT).significant(pw, pm, 3, 3)) == [False] * 3
    assert list(verdict.Policy().significant(pw, pm, 5, 5)) == [False, True, False]
    assert verdict.Policy().min_rank_n() == 4 and verdict.Policy(alpha=0.01).min_rank_n() == 5
    with pytest.raises(ValueError, match="small_n"):
        verdict.Policy(small_n="rank")


def test_docs_state_the_rule_as_the_object_renders_it():
    doc = _flat((REPO / "docs" / "compare.md").read_text())
    assert verdict.Policy().describe() in doc


@pytest.mark.parametrize("n", [3, 5, 10])
def test_aa_false_positive_rate_of_the_applied_rule(n):
    """The default rule as applied (Welch alone at 3 vs 3) keeps A/A regression-or-improvement verdicts <= alpha
    on normal, skewed and outlier-contaminated data."""
    rng = np.random.default_rng(3800 + n)
    draws = {
        "normal": lambda: rng.normal(100.0, 2.0, (4000, n)),
        "lognormal": lambda: rng.lognormal(3.0, 0.3, (4000, n)),
        "outliers": lambda: rng.normal(100, 2, (4000, n)) * np.where(rng.random((4000, n)) < 0.1, 1.3, 1.0),
    }
    for kind, draw in draws.items():
        rate = float(np.mean(verdict.directional_batch(draw(), draw(), True) != 0))
        assert rate <= 0.05, (kind, n, rate)


def _power_brute(n, d, two_sided):
    df = 2 * n - 2
    crit = sps.t.ppf(0.975 if two_sided else 0.95, df)
    nc = d * math.sqrt(n / 2)
    # scipy returns NaN for the (negligible) lower tail at some large nc: 0 there, as abtest does
    return sps.nct.sf(crit, df, nc) + (np.nan_to_num(sps.nct.cdf(-crit, df, nc)) if two_sided else 0.0)


@pytest.mark.parametrize(
    "cv,effect,two_sided,power",
    [
        (0.02, 5.0, True, 0.8),
        (0.05, 3.0, True, 0.85),
        (0.10, 5.0, False, 0.85),
        (0.01, 0.3, True, 0.85),
        (0.3, 80.0, True, 0.8),
        (0.001, 5.0, True, 0.85),
        (0.05, 0.2, True, 0.85),
        (0.02, 1.0, False, 0.8),
    ],
)
def test_iterations_needed_is_the_smallest_n_by_bisection(monkeypatch, cv, effect, two_sided, power):
    """Same answer as scipy.stats' noncentral t at every n (n reaches the power, n - 1 does not; max_n when
    nothing does) with O(log n) power evaluations instead of one per n (issue 38: 24 of 25 s were here)."""
    calls = []
    real = stats.t_test_power
    monkeypatch.setattr(stats, "t_test_power", lambda *a, **k: calls.append(a) or real(*a, **k))
    n = stats.iterations_needed(cv, effect, power=power, two_sided=two_sided)
    d = effect / 100 / cv
    if n < 1000:
        assert _power_brute(n, d, two_sided) >= power
    assert n == 2 or _power_brute(n - 1, d, two_sided) < power
    assert len(calls) <= 2 * math.ceil(math.log2(1000)) + 2, len(calls)


def test_mannwhitney_matches_scipy():
    """abtest's Mann-Whitney U (no scipy.stats import on the compare path) gives scipy's p-values: exact without
    ties when a side has <= 8 values, normal approximation with tie and continuity correction otherwise."""
    rng = np.random.default_rng(38)
    for n1, n2 in ((1, 1), (2, 3), (3, 3), (3, 4), (5, 5), (8, 8), (8, 30), (9, 9), (12, 7), (40, 40)):
        for rounded in (False, True):
            a, b = rng.normal(0, 1, (40, n1)), rng.normal(0.5, 1, (40, n2))
            if rounded:
                a, b = np.round(a), np.round(b)
            ref = sps.mannwhitneyu(a, b, axis=1, alternative="two-sided", method="auto").pvalue
            np.testing.assert_allclose(stats.mannwhitney_p(a, b), ref, rtol=1e-12, atol=1e-14)


def _gate_store(root: Path) -> Path:
    for label in ("base", "cand"):
        for i in range(3):
            write_iteration(
                root / label / "w" / str(i), {"fps": {"value": 60.0 + i, "unit": "fps", "lower_is_better": False}}, {}
            )
    return root


def test_gate_unknown_metric_is_refused_before_any_analysis(tmp_path, monkeypatch):
    """A misspelled metric in the thresholds file: exit 2 with a did-you-mean, before any iteration is analysed."""
    from abtest.compare import parallel

    def no_analysis(*a, **k):
        raise AssertionError("iterations analysed before the thresholds file was checked")

    monkeypatch.setattr(parallel, "analyse_iterations", no_analysis)
    store = _gate_store(tmp_path / "s")
    th = tmp_path / "t.toml"
    th.write_text('[metrics."latency.gmean_uss"]\nmax_regression_pct = 5\n[metrics.fps]\nmax_regression_pct = 1\n')
    r = CliRunner().invoke(cli, ["gate", "base", "cand", "--store", str(store), "--thresholds", str(th)])
    assert r.exit_code == 2, r.output
    assert "unknown metric 'latency.gmean_uss'" in r.output and "did you mean latency.gmean_us" in r.output
    # a metrics.json key of the compared labels is known too (fps here), and a close one is suggested
    th.write_text("[metrics.fsp]\nmax_regression_pct = 1\n")
    r = CliRunner().invoke(cli, ["gate", "base", "cand", "--store", str(store), "--thresholds", str(th)])
    assert r.exit_code == 2 and "did you mean fps" in r.output, r.output
