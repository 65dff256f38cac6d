"""abtest.analysis.intervals on hand-built change streams (expected values worked out by hand)."""

from __future__ import annotations

import polars as pl
import pytest

from abtest.analysis.intervals import df_intervals, df_intervals_join, df_residency, time_weighted_mean


def _rows(df: pl.DataFrame) -> list[tuple]:
    return [tuple(r) for r in df.iter_rows()]


def test_carry_in_clip_and_last_interval_to_end():
    ch = pl.DataFrame({"ts": [5, 10, 20, 30, 40], "cpu": [0] * 5, "f": [1, 2, 3, 3, 5]})
    iv = df_intervals(ch, "f", keys="cpu", start_ns=8, end_ns=35)
    # 1 carried in from ts=5; 3@20 and 3@30 merged; 5@40 is after the window
    assert _rows(iv) == [(0, 8, 2, 1), (0, 10, 10, 2), (0, 20, 15, 3)]
    assert iv["dur"].sum() == 35 - 8


def test_unknown_start_is_null_unless_initial_given():
    ch = pl.DataFrame({"ts": [12], "cpu": [1], "f": [7]})
    assert _rows(df_intervals(ch, "f", keys="cpu", start_ns=8, end_ns=20)) == [(1, 8, 4, None), (1, 12, 8, 7)]
    assert _rows(df_intervals(ch, "f", keys="cpu", start_ns=8, end_ns=20, initial=3)) == [(1, 8, 4, 3), (1, 12, 8, 7)]


def test_change_at_window_start_replaces_carried_value_and_same_ts_last_wins():
    ch = pl.DataFrame({"ts": [0, 10, 10, 15], "f": [1, 2, 4, 4]})
    iv = df_intervals(ch, "f", start_ns=10, end_ns=20)
    assert _rows(iv) == [(10, 10, 4)]
    unmerged = df_intervals(ch, "f", start_ns=10, end_ns=20, merge_equal=False)
    assert _rows(unmerged) == [(10, 5, 4), (15, 5, 4)]


def test_all_keys_adds_silent_streams():
    ch = pl.DataFrame({"ts": [3], "cpu": [0], "state": [-1]})
    iv = df_intervals(ch, "state", keys="cpu", start_ns=0, end_ns=10, all_keys=[0, 1], initial=-1)
    assert _rows(iv) == [(0, 0, 10, -1), (1, 0, 10, -1)]


def test_multi_value_columns_and_missing_column_error():
    ch = pl.DataFrame({"ts": [0, 4, 6], "cpu": [0, 0, 0], "pid": [0, 42, 42], "comm": ["swapper", "a", "b"]})
    iv = df_intervals(ch, ["pid", "comm"], keys="cpu", start_ns=0, end_ns=10)
    assert _rows(iv) == [(0, 0, 4, 0, "swapper"), (0, 4, 2, 42, "a"), (0, 6, 4, 42, "b")]
    with pytest.raises(ValueError, match="lacks columns"):
        df_intervals(ch, "nope", keys="cpu", start_ns=0, end_ns=10)


def test_join_residency_and_weighted_mean():
    freq = df_intervals(
        pl.DataFrame({"ts": [0, 10], "cpu": [0, 0], "khz": [500, 1000]}), "khz", keys="cpu", start_ns=0, end_ns=30
    )
    idle = df_intervals(
        pl.DataFrame({"ts": [0, 5, 20], "cpu": [0, 0, 0], "state": [-1, 0, -1]}),
        "state",
        keys="cpu",
        start_ns=0,
        end_ns=30,
    )
    both = df_intervals_join(freq, idle, keys="cpu")
    assert _rows(both) == [(0, 0, 5, 500, -1), (0, 5, 5, 500, 0), (0, 10, 10, 1000, 0), (0, 20, 10, 1000, -1)]
    active = df_residency(both.filter(pl.col("state") == -1), ["cpu", "khz"])
    assert _rows(active.select("khz", "time_ns")) == [(500, 5), (1000, 10)]
    tw = time_weighted_mean(freq, "khz", "cpu")
    assert tw["khz_twmean"][0] == pytest.approx((500 * 10 + 1000 * 20) / 30)


def _reference(rows, start, end, initial, merge):
    """df_intervals' contract, one change at a time (rows: (key, ts, value) in input order)."""
    out = []
    for key in sorted({r[0] for r in rows}):
        ch = [r for r in rows if r[0] == key]
        if not any(ts < end for _, ts, _ in ch):
            continue  # no change before the window end: the key does not appear
        ch = sorted(enumerate(ch), key=lambda x: (x[1][1], x[0]))
        by_ts = {}
        for _, (_, ts, v) in ch:
            by_ts[ts] = v  # the last of one timestamp wins
        before = [ts for ts in by_ts if ts < start]
        cur = by_ts[max(before)] if before else None
        if cur is None:
            cur = initial
        seq = [(start, cur)] + [(ts, by_ts[ts]) for ts in sorted(by_ts) if start <= ts < end]
        dedup = {}
        for ts, v in seq:
            dedup[ts] = v
        seq = sorted(dedup.items())
        iv = [(key, ts, (seq[i + 1][0] if i + 1 < len(seq) else end) - ts, v) for i, (ts, v) in enumerate(seq)]
        iv = [r for r in iv if r[2] > 0]
        if merge:
            m = []
            for r in iv:
                if m and m[-1][3] == r[3]:
                    m[-1] = (m[-1][0], m[-1][1], m[-1][2] + r[2], m[-1][3])
                else:
                    m.append(r)
            iv = m
        out += iv
    return out


@pytest.mark.parametrize("seed", range(40))
def test_random_streams_match_the_contract(seed):
    import random

    rnd = random.Random(seed)
    n = rnd.randint(0, 40)
    rows = [(rnd.randint(0, 3), rnd.randint(0, 30), rnd.choice([None, 1, 2, 3])) for _ in range(n)]
    if rnd.random() < 0.5:  # trace tables come sorted by ts
        rows.sort(key=lambda r: r[1])
    start, end = sorted(rnd.sample(range(-2, 34), 2))
    initial = rnd.choice([None, 9])
    merge = rnd.random() < 0.5
    ch = pl.DataFrame(rows, schema={"cpu": pl.Int32, "ts": pl.Int64, "f": pl.Int64}, orient="row")
    got = df_intervals(ch, "f", keys="cpu", start_ns=start, end_ns=end, initial=initial, merge_equal=merge)
    assert _rows(got) == _reference(rows, start, end, initial, merge)
    one = [(0, ts, v) for _, ts, v in rows]
    got = df_intervals(
        ch.with_columns(pl.lit(0, pl.Int32).alias("cpu")).drop("cpu"),
        "f",
        start_ns=start,
        end_ns=end,
        initial=initial,
        merge_equal=merge,
    )
    want = [r[1:] for r in _reference(one, start, end, initial, merge)] if rows else [(start, end - start, initial)]
    assert _rows(got) == [w for w in want if w[1] > 0]
