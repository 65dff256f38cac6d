"""History across builds (issue 41): a results database of iterations, change points per series, a dashboard.

    db.py          open a database by URL or SQLite path (default per user), schema migrations (Alembic)
    schema.py      the tables (SQLAlchemy Core), column by column with units
    identity.py    a build's identity (kernel release/version, git revision, config hash), device, date
    evaluate.py    one iteration's values through abtest.compare.metrics.iteration_metrics (the one evaluation path)
    distributed.py the same evaluation on a Dask cluster (local by default) with a progress bar
    ingest.py      `history add`: stores -> rows, idempotent
    series.py      per (device, workload, metric): builds in order, per-build aggregate and CI band
    changepoint.py E-divisive-style change points with a deterministic t-test (pure numpy/scipy)
    detect.py      `history detect`: series -> change points in the database, triage kept across runs
    gate.py        `history gate`: exit 1 when the newest build opens a regression change point
    web.py         `history serve`: Flask app, JSON API and the dashboard page (plotly.js from its wheel)

Sits above compare/ (it reads values through compare's evaluation); nothing below imports it.
"""
