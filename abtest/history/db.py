"""Open the results database and bring its schema to the current migration.

A database is named by a SQLAlchemy URL (`postgresql+psycopg://user@host/db`, `sqlite:///path`) or by a
plain file path (an SQLite file). Default: $ABTEST_HISTORY, else `<user data dir>/abtest/history.sqlite`
($XDG_DATA_HOME or ~/.local/share): one file per user, kept across checkouts and stores.

The schema is owned by Alembic migrations (abtest/history/migrations/versions); `open_db` upgrades an older
database to the newest revision before use, so a database written by an older abtest keeps working.
"""

from __future__ import annotations

import os
from pathlib import Path

from sqlalchemy import Engine, create_engine, event

HISTORY_ENV = "ABTEST_HISTORY"
MIGRATIONS = Path(__file__).resolve().parent / "migrations"


def default_db() -> str:
    """$ABTEST_HISTORY, else the per-user SQLite file."""
    if os.environ.get(HISTORY_ENV):
        return os.environ[HISTORY_ENV]
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return str(base / "abtest" / "history.sqlite")


def db_url(db: str | os.PathLike | None) -> str:
    """A SQLAlchemy URL for `db`: a URL as given (postgresql:// is read with psycopg 3), a path as SQLite."""
    text = str(db) if db is not None else default_db()
    if "://" in text:
        if text.startswith(("postgresql://", "postgres://")):
            text = "postgresql+psycopg://" + text.split("://", 1)[1]
        return text
    path = Path(text).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def _sqlite_pragmas(dbapi_conn, _record) -> None:
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA foreign_keys=ON")
    cur.execute("PRAGMA journal_mode=WAL")  # the dashboard reads while `history add` writes
    cur.close()


def open_db(db: str | os.PathLike | None = None, *, migrate: bool = True) -> Engine:
    """An Engine on the database, its schema upgraded to the newest migration (unless migrate=False)."""
    url = db_url(db)
    engine = create_engine(url, future=True)
    if engine.dialect.name == "sqlite":
        event.listen(engine, "connect", _sqlite_pragmas)
    if migrate:
        upgrade(engine)
    return engine


def _alembic_config(connection):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = connection
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply the migrations up to `revision` (Alembic's version table records where the database is)."""
    from alembic import command

    with engine.begin() as conn:
        command.upgrade(_alembic_config(conn), revision)


def current_revision(engine: Engine) -> str | None:
    """The migration revision the database is at (None: not initialised)."""
    from alembic.runtime.migration import MigrationContext

    with engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()
