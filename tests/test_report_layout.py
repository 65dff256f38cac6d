"""Report layout (issue 38 item 8): outlier iterations flagged with their path, plot titles from the metric
declarations, a log axis for latency panels spanning decades, and HTML tables that scroll inside their container
instead of widening the page (checked in a real headless chromium when it is installed).

Store: a copy of the bundled examples/idle-governors store (real traces, 8 iterations of menu and ladder);
its ladder iteration 8 really has no cpu_idle events (the idle analysis is skipped there).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from abtest.compare.comparison import compare_labels
from abtest.compare.outliers import outlier_iterations, tukey_fences, verdict_metrics
from abtest.compare.summary import metric_label
from abtest.report import figures
from abtest.report.html import comparison_html
from abtest.report.text import comparison_text
from abtest.store.reader import load_label

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    store = tmp_path_factory.mktemp("layout") / "store"
    shutil.copytree(ROOT / "examples" / "idle-governors", store)
    return compare_labels(load_label(store / "menu"), load_label(store / "ladder"), jobs=2)


def test_tukey_fences():
    assert tukey_fences([1, 2, 3, 4, 5]) == (-1.0, 7.0)  # Q1 2, Q3 4, IQR 2


def test_outliers_match_independent_fences(comparison):
    w = comparison.workloads[0]
    flagged = {(o.label, o.iteration, o.reason.split(" = ")[0]) for o in outlier_iterations(w, "menu", "ladder")}
    expected = set()
    for m in verdict_metrics(w):
        for label, names, measured in (
            ("menu", w.iterations_a, w.measured_a),
            ("ladder", w.iterations_b, w.measured_b),
        ):
            vals = [(n, x[m.name].value) for n, x in zip(names, measured) if m.name in x]
            q1, q3 = np.percentile([v for _, v in vals], [25, 75])
            lo, hi = q1 - 1.5 * (q3 - q1), q3 + 1.5 * (q3 - q1)
            expected |= {(label, n, metric_label(m)) for n, v in vals if v < lo or v > hi}
    assert expected and expected <= flagged


def test_iteration_missing_events_is_flagged_with_its_path(comparison):
    w = comparison.workloads[0]
    hits = [o for o in outlier_iterations(w, "menu", "ladder") if o.reason.startswith("idle:")]
    assert [(o.label, o.iteration) for o in hits] == [("ladder", "8")]
    assert hits[0].path == w.paths_b[w.iterations_b.index("8")] and Path(hits[0].path).is_dir()
    assert "no cpu_idle events" in hits[0].reason


def test_injected_outlier_is_flagged_in_text_and_html(comparison):
    """One iteration's wakeup latency made 1 s: flagged with its path in the text and HTML reports."""
    w = comparison.workloads[0]
    m = w.metric("latency.gmean_us")
    assert m is not None and m in verdict_metrics(w)
    measured = [dict(x) for x in w.measured_b]
    measured[2][m.name] = dataclasses.replace(measured[2][m.name], value=1e6)
    bad = dataclasses.replace(w, measured_b=measured)
    c = dataclasses.replace(comparison, workloads=[bad])
    path = w.paths_b[2]
    text = comparison_text(c, [], width=200)
    section = text[text.index("Outlier iterations") :]
    assert re.search(
        rf"ladder/cyclictest/{w.iterations_b[2]} \({re.escape(path)}\): wakeup latency gmean \(us\) = "
        r"1e\+06, outside the Tukey fences",
        section,
    ), section
    html = comparison_html(c, [])
    assert '<section id="outliers"><h2>Outlier iterations</h2>' in html and path in html


def test_plot_titles_from_declarations_and_log_axis(comparison):
    w = comparison.workloads[0]
    m = w.metric("latency.gmean_us")
    fig = figures.plot_metric_dots([m], "menu", "ladder")
    ax = fig.axes[0]
    assert ax.get_title().startswith("wakeup latency gmean (us) (gmean)") and "latency.gmean_us" not in ax.get_title()
    assert ax.get_yscale() == "linear"  # values within a few us of each other
    wide = dataclasses.replace(m, values_b=[*m.values_b[:-1], 1e6])  # a 1 s outlier
    assert figures.log_axis(wide)
    assert figures.plot_metric_dots([wide], "menu", "ladder").axes[0].get_yscale() == "log"
    power_like = dataclasses.replace(wide, spec=dataclasses.replace(m.spec, unit="mW"))
    assert not figures.log_axis(power_like)


def test_html_tables_scroll_inside_their_container(comparison):
    html = comparison_html(comparison)
    assert re.search(r"div\.scroll\{overflow-x:auto;max-width:100%\}", html)
    assert html.count("<table") == html.count('<div class="scroll"><table') > 5


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium not installed")
def test_html_width_in_a_real_browser(comparison, tmp_path):
    """All foldable sections opened (as a reader expanding "All metrics" does): the page is no wider than a
    1280 px window; without the scroll rule the same page is wider."""

    def page_width(html: str) -> int:
        html = html.replace("<details ", "<details open ").replace(
            "</body>", "<script>document.title='W'+document.documentElement.scrollWidth</script></body>"
        )
        f = tmp_path / "page.html"
        f.write_text(html)
        out = subprocess.run(
            [
                "chromium",
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--window-size=1280,900",
                "--dump-dom",
                f.as_uri(),
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
        return int(re.search(r"<title>W(\d+)</title>", out)[1])

    html = comparison_html(comparison)
    assert page_width(html) <= 1280
    assert page_width(html.replace("div.scroll{overflow-x:auto;max-width:100%}", "")) > 1280
