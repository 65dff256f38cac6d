"""abtest history: change points on synthetic series, the results database (SQLite and a real PostgreSQL), add
idempotence, detect / triage / gate end to end on a nightly store made from real power rails (history_data)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from history_data import PostgresServer, label, make_history

from abtest.cli import run
from abtest.history.changepoint import Settings, change_points
from abtest.history.db import current_revision, open_db
from abtest.history.detect import detect, set_triage, stored
from abtest.history.ingest import add

THRESHOLDS = '[metrics."power.Total"]\nmax_regression_pct = 3.0\n'


# ------------------------------------------------------------------ change points on known series
def _noise(n, cv, seed):
    return 1000 * (1 + cv * np.random.default_rng(seed).standard_normal(n))


def test_step_found_at_its_build_and_nowhere_else():
    x = _noise(60, 0.01, 1)
    x[37:] *= 1.04
    (st,) = change_points(x)
    assert st.index == 37 and 3 < st.delta_pct < 5 and st.p < 1e-6


def test_single_spike_opens_no_change_point():
    x = _noise(60, 0.01, 2)
    x[30] *= 1.3
    assert change_points(x) == []


def test_small_step_below_min_change_is_not_reported():
    x = _noise(80, 0.002, 3)
    x[40:] *= 1.01  # significant, but 1 % < the 2 % default minimum
    assert change_points(x) == []
    assert [s.index for s in change_points(x, Settings(min_change_pct=0.5))] == [40]


def test_tail_needs_two_builds():
    x = _noise(40, 0.01, 4)
    x[39:] *= 1.05
    assert change_points(x) == []  # one build alone: a spike or a step, cannot tell
    y = _noise(41, 0.01, 4)
    y[39:] *= 1.05
    assert [s.index for s in change_points(y)] == [39]


def test_deterministic_and_two_steps():
    x = _noise(300, 0.01, 5)
    x[100:] *= 1.06
    x[220:] *= 0.95
    a, b = change_points(x), change_points(x.copy())
    assert a == b and len(a) == 2
    assert a[0].index == 100 and abs(a[1].index - 220) <= 1  # build 220 itself can look like the old level


# ------------------------------------------------------------------ the database end to end
@pytest.fixture(scope="module")
def nightly(tmp_path_factory):
    store = tmp_path_factory.mktemp("history") / "store"
    make_history(store)
    return store


def _end_to_end(db, store, tmp_path):
    engine = open_db(db)
    assert current_revision(engine) == "0001"
    res = add(engine, [store], with_trace=False)
    assert (res.builds, res.iterations, res.skipped) == (30, 90, 0) and res.values > 90 * 20
    again = add(engine, [store], with_trace=False)
    assert (again.builds, again.iterations, again.values, again.skipped) == (0, 0, 0, 90)  # idempotent

    found = [f for f in detect(engine, metrics=("power.Total",))]
    assert [(f.key.device, f.key.workload, f.after.label, f.before.label, f.kind) for f in found] == [
        ("lab-dut", "video", label(20), label(19), "regression")
    ]
    assert 3.5 < found[0].step.delta_pct < 4.5
    cmds = found[0].to_json()["commands"]
    assert cmds["compare"].startswith("abtest compare ") and label(19) in cmds["compare"]
    assert "--good " in cmds["bisect"] and "--bad " in cmds["bisect"]

    # triage survives re-detection
    set_triage(engine, found[0].id, "acknowledged", "known: new display driver")
    again = detect(engine, metrics=("power.Total",))
    assert [(f.id, f.triage) for f in again] == [(found[0].id, "acknowledged")]
    (row,) = stored(engine, metrics=("power.Total",))
    assert row["note"] == "known: new display driver" and row["after"]["label"] == label(20)
    set_triage(engine, found[0].id, "new")

    # the CI gate: the step build alone passes (a spike or a step?), the build after it fails, later ones pass
    th = tmp_path / "th.toml"
    th.write_text(THRESHOLDS)
    codes = {}
    for k in (19, 20, 21, 22):
        junit = tmp_path / f"junit-{k}.xml"
        codes[k] = run(
            ["history", "gate", "--db", str(db), "--thresholds", str(th), "--build", label(k), "--junit", str(junit)]
        )
    assert codes == {19: 0, 20: 0, 21: 1, 22: 0}
    suite = ET.parse(tmp_path / "junit-21.xml").getroot().find("testsuite")
    assert suite.get("failures") == "1"
    assert "regression change point opened" in suite.find("testcase/failure").get("message")
    return engine


def test_end_to_end_sqlite(nightly, tmp_path, capsys):
    db = tmp_path / "h.sqlite"
    _end_to_end(db, nightly, tmp_path)
    capsys.readouterr()
    assert run(["history", "detect", "--db", str(db), "--metric", "power.Total", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [d["after"]["label"] for d in doc] == [label(20)]


def test_end_to_end_postgresql(nightly, tmp_path):
    pg = PostgresServer()
    try:
        pg.start()
        engine = _end_to_end(pg.url, nightly, tmp_path)
        assert engine.dialect.name == "postgresql"
        engine.dispose()
    finally:
        pg.stop()


def test_add_cli_and_unknown_label(nightly, tmp_path, capsys):
    db = str(tmp_path / "h.sqlite")
    assert run(["history", "add", str(nightly), label(0), label(1), "--db", db, "--no-trace"]) == 0
    assert "2 new build(s), 6 iteration(s)" in capsys.readouterr().out
    assert run(["history", "add", str(nightly), "no-such-label", "--db", db, "--no-trace"]) == 2


def test_add_with_traces_uses_the_evaluation_path(tmp_path, monkeypatch):
    """Real traces of the bundled store through iteration_metrics: the trace analyses' values are recorded."""
    from history_data import EXAMPLE
    from sqlalchemy import select

    from abtest.history import schema as S

    monkeypatch.setenv("ABTEST_METRICS_CACHE", "user")
    monkeypatch.setenv("ABTEST_CACHE_DIR", str(tmp_path / "cache"))
    engine = open_db(tmp_path / "h.sqlite")
    res = add(engine, [EXAMPLE], ("menu",))
    assert res.builds == 1 and res.iterations == 8
    with engine.connect() as conn:
        keys = set(conn.execute(select(S.metrics.c.key)).scalars())
        b = conn.execute(select(S.builds)).mappings().one()
    assert {"latency_avg_us", "latency.gmean_us"} <= keys  # metrics.json and a trace analysis
    assert b["kernel_release"] == "6.18.44-fc-v595" and b["config_hash"].startswith("3bc833bf")


# ------------------------------------------------------------------ compare / gate --history
def _rows(db) -> dict:
    """{(iteration path, metric key): value} of a database."""
    from sqlalchemy import select

    from abtest.history import schema as S

    engine = open_db(db)
    q = select(S.iterations.c.path, S.metrics.c.key, S.metric_values.c.value).select_from(
        S.metric_values.join(S.iterations).join(S.metrics)
    )
    with engine.connect() as conn:
        out = {(p, k): v for p, k, v in conn.execute(q)}
    engine.dispose()
    return out


def test_gate_and_compare_record_what_they_read(nightly, tmp_path, monkeypatch, capsys):
    """`gate A B --history DB` records both labels' iterations with the values the comparison computed (each
    iteration analysed once: by compare), the same rows `history add` writes; re-running adds nothing;
    `history detect` then finds the step. `compare BASE X Y --history` (no value) uses $ABTEST_HISTORY."""
    from abtest.compare import parallel
    from abtest.history import distributed

    analysed, evaluate = [], distributed.evaluate
    real = parallel.iteration_metrics
    monkeypatch.setattr(
        parallel, "iteration_metrics", lambda it, *a, **k: analysed.append(it.path) or real(it, *a, **k)
    )
    monkeypatch.setattr(distributed, "evaluate", lambda *a, **k: pytest.fail("history analysed an iteration again"))
    th = tmp_path / "th.toml"
    th.write_text(THRESHOLDS)
    db = tmp_path / "gate.sqlite"
    url = f"sqlite:///{db}"
    common = ["--store", str(nightly), "--no-trace", "--no-cache", "-j", "1", "--thresholds", str(th)]
    for k in range(0, 30, 2):
        assert run(["gate", label(k), label(k + 1), *common, "--history", url]) in (0, 1)
    assert len(analysed) == len(set(analysed)) == 90
    err = capsys.readouterr().err
    assert "history: 2 new build(s), 6 iteration(s)" in err and "0 iteration(s) already recorded" in err
    recorded = _rows(db)
    ref = tmp_path / "add.sqlite"
    monkeypatch.setattr(distributed, "evaluate", evaluate)
    assert run(["history", "add", str(nightly), "--db", str(ref), "--no-trace", "--no-cache"]) == 0
    monkeypatch.setattr(distributed, "evaluate", lambda *a, **k: pytest.fail("history analysed an iteration again"))
    assert recorded == _rows(ref) and len(recorded) > 90 * 20  # exactly what `history add` records

    capsys.readouterr()
    assert run(["gate", label(0), label(1), *common, "--history", url]) in (0, 1)  # idempotent
    assert "0 new build(s), 0 iteration(s) with 0 values recorded" in capsys.readouterr().err
    assert _rows(db) == recorded
    assert run(["history", "detect", "--db", url, "--metric", "power.Total", "--format", "json"]) == 0
    assert [d["after"]["label"] for d in json.loads(capsys.readouterr().out)] == [label(20)]

    # N-way compare, the flag without a value: the default database; the baseline is recorded once
    monkeypatch.setenv("ABTEST_HISTORY", str(tmp_path / "default.sqlite"))
    labels3 = [label(0), label(1), label(2)]
    assert (
        run(["compare", *labels3, "--store", str(nightly), "--no-trace", "-j", "1", "--format", "json", "--history"])
        == 0
    )
    assert "3 new build(s), 9 iteration(s)" in capsys.readouterr().err
    assert len({p for p, _ in _rows(tmp_path / "default.sqlite")}) == 9
    # the flag alone before the labels would swallow the baseline: refused, nothing compared
    assert run(["compare", "--history", *labels3, "--store", str(nightly), "--no-trace"]) == 2


@pytest.mark.parametrize("aggregation", ["mean", "gmean", "median"])
def test_points_aggregate_all_builds_at_once_as_one_by_one(aggregation):
    """The dashboard's vectorised per-build aggregate and CI equal `aggregate` of each build alone."""
    from abtest.history.series import aggregate, aggregate_groups

    rng = np.random.default_rng(7)
    groups = [rng.normal(100, 10, k) for k in rng.integers(1, 7, 200)] + [np.array([-1.0, 2.0, 3.0]), np.array([0.0])]
    starts = np.r_[0, np.cumsum([len(g) for g in groups])[:-1]]
    value, lo, hi, n = aggregate_groups(np.concatenate(groups), starts, aggregation)
    for i, g in enumerate(groups):
        a, low, high = aggregate(g, aggregation)
        assert n[i] == len(g) and value[i] == pytest.approx(a, rel=1e-12)
        if low is None:
            assert np.isnan(lo[i]) and np.isnan(hi[i])
        else:
            assert (lo[i], hi[i]) == pytest.approx((low, high), rel=1e-12)
