"""`history add` on a real Dask LocalCluster of 2 worker processes: same rows as in-process, work spread."""

from __future__ import annotations

import os

from history_data import make_history
from sqlalchemy import select

from abtest.history import schema as S
from abtest.history.db import open_db
from abtest.history.ingest import add


def _rows(engine):
    q = select(S.iterations.c.path, S.metrics.c.key, S.metric_values.c.value).select_from(
        S.metric_values.join(S.iterations).join(S.metrics)
    )
    with engine.connect() as conn:
        return sorted(conn.execute(q).all())


def test_add_on_a_local_dask_cluster(tmp_path):
    store = tmp_path / "store"
    make_history(store, n_builds=6, step_at=3, iterations=3)
    serial = open_db(tmp_path / "serial.sqlite")
    on_dask = open_db(tmp_path / "dask.sqlite")
    r1 = add(serial, [store], with_trace=False, use_cache=False)
    r2 = add(on_dask, [store], with_trace=False, use_cache=False, workers=2, progress=True)
    assert r1.iterations == r2.iterations == 18
    assert r1.pids == {os.getpid()}
    assert len(r2.pids) >= 2 and os.getpid() not in r2.pids  # two worker processes did the work
    assert _rows(serial) == _rows(on_dask)
