"""Alembic environment: migrations run on the connection abtest.history.db passes in (no alembic.ini)."""

from __future__ import annotations

from alembic import context

from abtest.history.schema import metadata

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
