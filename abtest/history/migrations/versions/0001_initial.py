"""The first schema: builds, iterations, metrics, metric_values, change_points (see abtest.history.schema).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "builds",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("store", sa.Text, nullable=False),
        sa.Column("label", sa.String(255), nullable=False),
        sa.Column("kernel_release", sa.String(255), nullable=False),
        sa.Column("kernel_version", sa.Text, nullable=False),
        sa.Column("git_revision", sa.String(64), nullable=False),
        sa.Column("config_hash", sa.String(64), nullable=False),
        sa.Column("date", sa.String(40), nullable=False),
        sa.UniqueConstraint("store", "label", name="uq_builds_store_label"),
    )
    op.create_table(
        "iterations",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("build_id", sa.Integer, sa.ForeignKey("builds.id", ondelete="CASCADE"), nullable=False),
        sa.Column("path", sa.Text, nullable=False, unique=True),
        sa.Column("device", sa.String(255), nullable=False),
        sa.Column("workload", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("date", sa.String(40), nullable=False),
        sa.Column("added", sa.String(40), nullable=False),
    )
    op.create_index("ix_iterations_series", "iterations", ["device", "workload"])
    op.create_table(
        "metrics",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("key", sa.String(255), nullable=False, unique=True),
        sa.Column("unit", sa.String(64), nullable=False),
        sa.Column("direction", sa.String(16), nullable=False),
        sa.Column("aggregation", sa.String(16), nullable=False),
        sa.Column("declared", sa.Boolean, nullable=False),
    )
    op.create_table(
        "metric_values",
        sa.Column("iteration_id", sa.Integer, sa.ForeignKey("iterations.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("metric_id", sa.Integer, sa.ForeignKey("metrics.id"), primary_key=True),
        sa.Column("value", sa.Float, nullable=False),
    )
    op.create_index("ix_metric_values_metric", "metric_values", ["metric_id"])
    op.create_table(
        "change_points",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("device", sa.String(255), nullable=False),
        sa.Column("workload", sa.String(255), nullable=False),
        sa.Column("metric_id", sa.Integer, sa.ForeignKey("metrics.id"), nullable=False),
        sa.Column("build_before_id", sa.Integer, sa.ForeignKey("builds.id", ondelete="CASCADE"), nullable=False),
        sa.Column("build_after_id", sa.Integer, sa.ForeignKey("builds.id", ondelete="CASCADE"), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("delta_pct", sa.Float, nullable=False),
        sa.Column("p_value", sa.Float, nullable=False),
        sa.Column("mean_before", sa.Float, nullable=False),
        sa.Column("mean_after", sa.Float, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
        sa.Column("triage", sa.String(16), nullable=False),
        sa.Column("note", sa.Text, nullable=False),
        sa.Column("detected", sa.String(40), nullable=False),
        sa.UniqueConstraint("device", "workload", "metric_id", "build_after_id", name="uq_change_points_series_build"),
    )


def downgrade() -> None:
    for name in ("change_points", "metric_values", "metrics", "iterations", "builds"):
        op.drop_table(name)
