"""Run store model: layout, incomplete/broken iterations, trace discovery, ABTEST_STORE, WA3 routing,
per-iteration metrics cache. Stores are constructed in tmp_path; the trace file is a real shared trace."""

import json
import os
from pathlib import Path

import pytest
from shared_data import TRACES

from abtest.compare import metrics as metrics_mod
from abtest.compare.comparison import CompareError, compare_labels
from abtest.store.layout import default_store_root, find_trace
from abtest.store.reader import Iteration, StoreError, load_label, load_store
from abtest.store.writer import write_iteration

REAL_TRACE = TRACES / "x86-vm" / "x86-menu-hackbench-cyclictest.dat"


def _m(v, unit="mW", lib=True):
    return {"value": v, "unit": unit, "lower_is_better": lib}


def test_layout_and_incomplete_iterations(tmp_path):
    for i in range(3):
        write_iteration(tmp_path / "k1" / "yt" / f"iter-{i + 1}", {"p": _m(100 + i)})
    write_iteration(tmp_path / "k1" / "yt" / "iter-4", {"p": _m(999)}, complete=False)  # crashed run
    write_iteration(tmp_path / "k1" / "game" / "7", {"p": _m(5)})
    (tmp_path / ".hidden").mkdir()
    st = load_store(tmp_path)
    assert sorted(st.labels) == ["k1"]
    lab = st.labels["k1"]
    assert sorted(lab.workloads) == ["game", "yt"]
    assert [it.index for it in lab.workloads["yt"]] == [1, 2, 3, 4]
    assert [it.index for it in lab.complete("yt")] == [1, 2, 3]
    (bad,) = lab.excluded("yt")
    assert bad.name == "iter-4" and not bad.complete
    assert lab.complete("game")[0].metrics["p"].value == 5.0
    assert st.label("k1") is lab
    with pytest.raises(StoreError, match=r"label 'nope' not found in store .* \(labels there: k1\)"):
        st.label("nope")


def test_incomplete_is_reported_and_never_mixed_in(tmp_path):
    for lab, vals in (("a", [10, 10.1, 9.9]), ("b", [10, 10.05, 9.95])):
        for i, v in enumerate(vals):
            write_iteration(tmp_path / lab / "w" / str(i), {"p": _m(v)})
    write_iteration(tmp_path / "b" / "w" / "3", {"p": _m(1000.0)}, complete=False)  # would dominate the mean
    st = load_store(tmp_path)
    c = compare_labels(st.labels["a"], st.labels["b"], with_trace=False)
    w = c.workload("w")
    assert w.iterations_b == ["0", "1", "2"]
    assert w.metric("p").values_b == [10.0, 10.05, 9.95]
    (ex,) = w.excluded
    assert ex["label"] == "b" and ex["path"].endswith("b/w/3") and "no .complete marker" in ex["reason"]
    assert any("1 iteration(s) excluded, 3 used" in n for n in w.notes)


def test_broken_metrics_json_is_a_reported_problem(tmp_path):
    write_iteration(tmp_path / "a" / "w" / "0", {"p": _m(1.0)})
    d = write_iteration(tmp_path / "a" / "w" / "1", {"p": _m(1.0)})
    (d / "metrics.json").write_text('{"metrics": {"p": {"value": 1.0,}}}')
    d2 = write_iteration(tmp_path / "a" / "w" / "2", {"p": _m(1.0)})
    (d2 / "metrics.json").write_text(json.dumps({"metrics": {"p": {"value": "fast"}}}))
    lab = load_label(tmp_path / "a")
    probs = {it.name: it.problems for it in lab.excluded("w")}
    assert "line 1 column" in probs["1"][0] and "invalid JSON" in probs["1"][0]
    assert "'value' must be a number, got 'fast'" in probs["2"][0]
    assert [it.name for it in lab.complete("w")] == ["0"]


def test_no_complete_iterations_is_bad_input(tmp_path):
    write_iteration(tmp_path / "a" / "w" / "0", {"p": _m(1.0)})
    write_iteration(tmp_path / "b" / "w" / "0", {"p": _m(1.0)}, complete=False)
    st = load_store(tmp_path)
    with pytest.raises(CompareError, match=r"b/w: no complete iterations under .* \(1 excluded: incomplete"):
        compare_labels(st.labels["a"], st.labels["b"], with_trace=False)


def test_trace_discovery(tmp_path):
    d = tmp_path / "it"
    d.mkdir()
    assert find_trace(d) is None
    (d / "metrics.json").write_text("{}")
    (d / "power.csv").write_text("ts_ns,rail,subsystem,energy_uj\n")
    (d / "capture.perfetto-trace").write_bytes(b"\x0a\x00")
    assert find_trace(d).name == "capture.perfetto-trace"
    (d / "trace.dat").symlink_to(REAL_TRACE)
    assert find_trace(d).name == "trace.dat"  # preferred name wins


def test_default_store_root(monkeypatch, tmp_path):
    monkeypatch.delenv("ABTEST_STORE", raising=False)
    assert default_store_root() == Path("results")
    monkeypatch.setenv("ABTEST_STORE", str(tmp_path))
    assert default_store_root() == tmp_path
    with pytest.raises(StoreError, match="does not exist"):
        load_store(tmp_path / "absent")


def test_wa3_directory_is_routed_to_interop(tmp_path, monkeypatch):
    """A directory with __meta/ or result.json goes to abtest.store.wa.load_wa_output (replaced here by a
    recording stand-in: the WA parsing itself is tested by the interop helper's tests)."""
    import abtest.store.reader as wa

    wa_dir = tmp_path / "wa_out"
    (wa_dir / "__meta").mkdir(parents=True)
    calls = []

    def fake_loader(path, label=None):
        calls.append((Path(path), label))
        return [
            Iteration(
                label="kA",
                workload="dhrystone",
                index=i,
                path=wa_dir / f"wk1-dhrystone-{i}",
                complete=True,
                metrics={"score": _m(100.0 + i, "", False)},
            )
            for i in (1, 2)
        ]

    monkeypatch.setattr(wa, "load_wa_output", fake_loader)
    lab = load_label(wa_dir)
    assert calls == [(wa_dir, "wa_out")]
    assert [it.index for it in lab.complete("dhrystone")] == [1, 2]
    assert lab.complete("dhrystone")[0].metrics["score"].lower_is_better is False


def test_metrics_cache_is_keyed_on_inputs(tmp_path, monkeypatch):
    d = write_iteration(tmp_path / "a" / "w" / "0", {"p": _m(1.0)})
    (d / "power.csv").write_text("ts_ns,rail,subsystem,energy_uj\n0,VDD_X,x,0\n1000000000,VDD_X,x,500000\n")
    it = load_label(tmp_path / "a").complete("w")[0]
    m, notes = metrics_mod.iteration_metrics(it, with_trace=False)
    assert m["power.rail.VDD_X"].value == pytest.approx(500.0)  # 500000 uJ over 1 s
    assert m["p"].value == 1.0 and notes == []
    cache = json.loads((d / ".abtest-metrics.json").read_text())
    assert cache["key"]["power"][0] == "power.csv"
    calls = []
    real = metrics_mod.power_source.evaluate
    monkeypatch.setattr(metrics_mod.power_source, "evaluate", lambda *a, **k: calls.append(a) or real(*a, **k))
    metrics_mod.iteration_metrics(it, with_trace=False)
    assert calls == []  # served from the cache
    (d / "power.csv").write_text("ts_ns,rail,subsystem,energy_uj\n0,VDD_X,x,0\n1000000000,VDD_X,x,800000\n")
    os.utime(d / "power.csv", ns=(1, 10**18))
    m, _ = metrics_mod.iteration_metrics(it, with_trace=False)
    assert len(calls) == 1 and m["power.rail.VDD_X"].value == pytest.approx(800.0)


def test_bad_power_csv_is_a_note_not_a_crash(tmp_path):
    d = write_iteration(tmp_path / "a" / "w" / "0", {"p": _m(1.0)})
    (d / "power.csv").write_text("time,watts\n1,2\n")
    it = load_label(tmp_path / "a").complete("w")[0]
    m, notes = metrics_mod.iteration_metrics(it, with_trace=False)
    assert "p" in m and not any(k.startswith("power.") for k in m)
    assert len(notes) == 1 and "power metrics unavailable" in notes[0] and "power.csv" in notes[0]
    assert not (d / ".abtest-metrics.json").exists()  # a failure is not cached


def test_corrupt_trace_is_a_note_and_not_cached(tmp_path):
    """A truncated copy (first 64 KiB, in tmp_path) of a real trace.dat: the iteration keeps its metrics.json
    values, the trace metrics are missing for it, and the note names the file and what went wrong."""
    d = write_iteration(tmp_path / "a" / "w" / "0", {"p": _m(1.0)})
    (d / "trace.dat").write_bytes(REAL_TRACE.read_bytes()[:65536])
    it = load_label(tmp_path / "a").complete("w")[0]
    m, notes = metrics_mod.iteration_metrics(it)
    assert m["p"].value == 1.0 and not any(k.startswith(("idle.", "latency.")) for k in m)
    assert len(notes) == 1 and notes[0].startswith("trace metrics unavailable:") and "trace.dat" in notes[0]
    assert not (d / ".abtest-metrics.json").exists()


def test_compare_never_writes_caches_through_symlinks(tmp_path):
    """Issue 27 item 16: a planted .abtest-metrics.json symlink and a label directory linked from outside the
    store are left untouched by compare's cache (the comparison still works)."""
    outside = tmp_path / "outside"
    outside.mkdir()
    victim = outside / "victim.txt"
    victim.write_text("keep me")
    store = tmp_path / "store"
    for label in ("a", "b"):
        for i, v in enumerate((1.0, 1.1, 0.9)):
            write_iteration(store / label / "w" / str(i), {"p": _m(v)})
    (store / "a" / "w" / "0" / ".abtest-metrics.json").symlink_to(victim)
    real_b = outside / "b"
    (store / "b").rename(real_b)
    (store / "b").symlink_to(real_b, target_is_directory=True)
    from abtest.compare.comparison import compare_labels

    c = compare_labels(load_label(store / "a"), load_label(store / "b"), with_trace=False, jobs=1)
    assert c.workloads[0].metric("p") is not None
    assert victim.read_text() == "keep me"
    assert not any(p.name == ".abtest-metrics.json" for p in real_b.rglob("*"))
    assert (store / "a" / "w" / "1" / ".abtest-metrics.json").is_file()  # ordinary iterations still cached
