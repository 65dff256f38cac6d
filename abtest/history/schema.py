"""The results database's tables (SQLAlchemy Core). Migrations in abtest/history/migrations create them.

builds         one kernel build under test = one label of one run store
  id               integer key
  store            resolved path of the run store root (text)
  label            label directory name in that store
  kernel_release   `uname -r` of the iterations (meta.json kernel.release), '' when unknown
  kernel_version   `uname -v` (meta.json kernel.version), '' when unknown
  git_revision     source revision when the collector or bisect recorded one, '' when unknown
  config_hash      sha256 of the kernel config (meta.json kernel.config_sha256), '' when unknown
  date             ISO-8601 UTC time of the build's earliest iteration start; orders a series ('' = unknown)
iterations     one run of one workload on one device
  id, build_id     keys
  path             resolved iteration path (unique: re-adding an iteration changes nothing)
  device           target name (meta.json target.name), else the hardware model, else 'unknown'
  workload         workload name
  name             iteration directory name
  date             ISO-8601 UTC start of the iteration ('' = unknown)
  added            ISO-8601 UTC time the row was written
metrics        one declared (or metrics.json-declared) metric key
  id, key          key: full metric key, e.g. power.Total, latency.gmean_us
  unit             declared unit (mW, us, %, ...)
  direction        lower / higher / none (abtest.metric_spec.Direction)
  aggregation      mean / gmean / median / ... (how iterations of one build combine)
  declared         1 when the registry declares the key, 0 when only a metrics.json does
metric_values  the value of one metric in one iteration, in the metric's unit
change_points  one detected step of one (device, workload, metric) series
  build_before_id  last build of the segment before the step; build_after_id: first build after it
  kind             regression / improvement / change (no direction declared)
  delta_pct        (after - before) / |before| * 100 of the segments' per-build aggregates
  p_value          two-sided Student t-test (pooled variance) between the two segments' per-build values
  mean_before, mean_after   segment means of the per-build aggregates, in the metric's unit
  active           1 when the latest detection still finds it, 0 when it no longer does
  triage           new / acknowledged / invalid; kept across re-detection (key: series + build_after_id)
  note, detected   free text; ISO-8601 UTC time of the detection that (re)found it
"""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

builds = Table(
    "builds",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("store", Text, nullable=False),
    Column("label", String(255), nullable=False),
    Column("kernel_release", String(255), nullable=False, default=""),
    Column("kernel_version", Text, nullable=False, default=""),
    Column("git_revision", String(64), nullable=False, default=""),
    Column("config_hash", String(64), nullable=False, default=""),
    Column("date", String(40), nullable=False, default=""),
    UniqueConstraint("store", "label", name="uq_builds_store_label"),
)

iterations = Table(
    "iterations",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("build_id", Integer, ForeignKey("builds.id", ondelete="CASCADE"), nullable=False),
    Column("path", Text, nullable=False, unique=True),
    Column("device", String(255), nullable=False),
    Column("workload", String(255), nullable=False),
    Column("name", String(255), nullable=False),
    Column("date", String(40), nullable=False, default=""),
    Column("added", String(40), nullable=False),
    Index("ix_iterations_series", "device", "workload"),
)

metrics = Table(
    "metrics",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("key", String(255), nullable=False, unique=True),
    Column("unit", String(64), nullable=False, default=""),
    Column("direction", String(16), nullable=False),
    Column("aggregation", String(16), nullable=False),
    Column("declared", Boolean, nullable=False),
)

metric_values = Table(
    "metric_values",
    metadata,
    Column("iteration_id", Integer, ForeignKey("iterations.id", ondelete="CASCADE"), primary_key=True),
    Column("metric_id", Integer, ForeignKey("metrics.id"), primary_key=True),
    Column("value", Float, nullable=False),
    Index("ix_metric_values_metric", "metric_id"),
)

change_points = Table(
    "change_points",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("device", String(255), nullable=False),
    Column("workload", String(255), nullable=False),
    Column("metric_id", Integer, ForeignKey("metrics.id"), nullable=False),
    Column("build_before_id", Integer, ForeignKey("builds.id", ondelete="CASCADE"), nullable=False),
    Column("build_after_id", Integer, ForeignKey("builds.id", ondelete="CASCADE"), nullable=False),
    Column("kind", String(16), nullable=False),
    Column("delta_pct", Float, nullable=False),
    Column("p_value", Float, nullable=False),
    Column("mean_before", Float, nullable=False),
    Column("mean_after", Float, nullable=False),
    Column("active", Boolean, nullable=False, default=True),
    Column("triage", String(16), nullable=False, default="new"),
    Column("note", Text, nullable=False, default=""),
    Column("detected", String(40), nullable=False),
    UniqueConstraint("device", "workload", "metric_id", "build_after_id", name="uq_change_points_series_build"),
)

TRIAGE_STATES = ("new", "acknowledged", "invalid")
