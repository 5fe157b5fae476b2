"""Opening the store: an SQLAlchemy engine on any URL, SQLite (WAL) by default,
brought to the latest schema with Alembic."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, create_engine, event, inspect
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from harness.redact import MaskedError, mask_text, mask_url

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from alembic.config import Config

DB_ENV = "EVALSVC_DB"
MIGRATIONS = Path(__file__).parent / "migrations"
# Any constant shared by every evalsvc process: the key of the PostgreSQL advisory lock held while migrating.
MIGRATION_LOCK_KEY = 0x65766C73


class StoreError(MaskedError):
    """The store cannot be opened or migrated."""


def default_db_url() -> str:
    """$EVALSVC_DB, else an SQLite file in the user's data folder."""
    if os.environ.get(DB_ENV):
        return os.environ[DB_ENV]
    base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "evalsvc"
    return f"sqlite:///{base / 'evalsvc.db'}"


def to_url(db: str | None) -> str:
    """Accept a SQLAlchemy URL or a plain file path (taken as SQLite)."""
    if not db:
        return default_db_url()
    return db if "://" in db else f"sqlite:///{Path(db).expanduser().resolve()}"


@dataclass(frozen=True)
class Store:
    url: str = field(repr=False)  # holds the password, if any: show `display_url` instead
    engine: Engine
    sessions: sessionmaker[Session]

    @property
    def display_url(self) -> str:
        """The store URL for people, password masked."""
        return mask_url(self.url)

    def session(self) -> Session:
        return self.sessions()

    def dispose(self) -> None:
        self.engine.dispose()


def open_store(db: str | None = None, migrate: bool = True) -> Store:
    """Open (and create or upgrade) the store at `db`; raises StoreError with the URL on failure."""
    url = to_url(db)
    try:
        engine = _make_engine(url)
        if migrate:
            upgrade_schema(engine)
        else:
            inspect(engine).get_table_names()
    except ImportError as exc:
        raise StoreError(
            f"cannot open database {mask_url(url)}: its driver is not installed ({exc.name}); "
            "for PostgreSQL: pip install 'evalsvc[postgres]'"
        ) from exc
    except (SQLAlchemyError, OSError) as exc:
        raise StoreError(
            f"cannot open database {mask_url(url)}: {exc.__class__.__name__}: {mask_text(_first_line(exc))}"
        ) from exc
    return Store(url=url, engine=engine, sessions=sessionmaker(engine, expire_on_commit=False))


def _make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 60})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def _sqlite_pragmas(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    # WAL lets the dashboard read while runs write; busy_timeout makes concurrent
    # writers wait for each other instead of failing with "database is locked".
    # busy_timeout comes first: switching a new file to WAL itself needs a lock.
    cur = dbapi_conn.cursor()
    cur.execute("PRAGMA busy_timeout=60000")
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=NORMAL")
    cur.execute("PRAGMA foreign_keys=ON")
    cur.close()


def upgrade_schema(engine: Engine) -> None:
    """Apply every Alembic migration not yet applied.

    Safe when several processes open the same new store at once: the upgrade
    runs under a lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: an advisory lock)
    and re-reads the applied revision once it holds it, so only the first
    process creates the tables and the others find them done.
    """
    from alembic import command

    cfg = _alembic_config()
    if _at_head(engine, cfg):
        return
    with engine.begin() as conn:
        _lock_for_migration(conn)
        if _at_head(conn, cfg):
            return
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


def _alembic_config() -> "Config":
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    return cfg


def _at_head(bind: Engine | Connection, cfg: "Config") -> bool:
    from alembic.runtime.migration import MigrationContext
    from alembic.script import ScriptDirectory

    heads = set(ScriptDirectory.from_config(cfg).get_heads())
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return set(MigrationContext.configure(conn).get_current_heads()) == heads
    return set(MigrationContext.configure(bind).get_current_heads()) == heads


def _lock_for_migration(conn: Connection) -> None:
    if conn.dialect.name == "sqlite":
        # pysqlite opens transactions lazily; take the write lock before reading the revision.
        conn.exec_driver_sql("BEGIN IMMEDIATE")
    elif conn.dialect.name == "postgresql":
        conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({MIGRATION_LOCK_KEY})")


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else ""
